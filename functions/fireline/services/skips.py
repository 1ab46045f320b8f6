"""Skipping one upcoming fire of a schedule, and taking the skip back.

Pausing loses every fire around the one that should not run; a skip takes away that one
fire alone. A skip is a change of the schedule (a new version, as an update is), because
the ticker may have sent the fire ahead already: the new version voids what the old one
sent, and the ticker sends the fires that still run again under the new version (their
occurrence keys name it), so a fire skipped ten seconds before its time does not run.

Both are exact: the fire time must be one of the schedule's own upcoming fires (its spec
in its zone and window, its exclusions aside), and is refused, naming ``fire_time``, when
it is not, when it has passed, when its day is excluded by the ``exclude`` list already,
or when the schedule is paused or completed. Repeating either is idempotent: skipping a
skipped fire, or taking back a skip that is not there, answers with the schedule
unchanged (a client retrying after a lost answer must not get an error for its success).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fireline.domain import errors, model, occurrence, schedule
from fireline.services import schedules

# Upcoming single skips a schedule holds at most (past ones are dropped on every change):
# each is 8 bytes of the item the ticker reads and writes on every pickup.
MAX_SKIPS = 32
FIELD = "fire_time"


def skip(
    service: schedules.ScheduleService, tenant_id: str, schedule_id: str, fire_time: datetime
) -> model.Schedule:
    """Skip one upcoming fire; the schedule as it is now."""
    current = service.get(tenant_id, schedule_id)
    when = _checked(current, fire_time, service.clock.now())
    if when in current.timing.skips:
        return current
    now = service.clock.now()
    upcoming = {s for s in current.timing.skips if s > now}
    if len(upcoming) >= MAX_SKIPS:
        raise errors.ValidationError(
            f"a schedule holds at most {MAX_SKIPS} skipped fires: exclude whole days instead",
            field=FIELD,
        )
    return _versioned(service, current, frozenset(upcoming | {when}))


def unskip(
    service: schedules.ScheduleService, tenant_id: str, schedule_id: str, fire_time: datetime
) -> model.Schedule:
    """Take back the skip of one upcoming fire; the schedule as it is now."""
    current = service.get(tenant_id, schedule_id)
    when = _checked(current, fire_time, service.clock.now())
    if when not in current.timing.skips:
        return current
    return _versioned(service, current, current.timing.skips - {when})


def _checked(current: model.Schedule, fire_time: datetime, now: datetime) -> datetime:
    """``fire_time`` as the schedule's fire it names (UTC), or refused naming it."""
    if current.kind is not model.Kind.SCHEDULE:
        raise errors.ValidationError("a one-off job is cancelled, not skipped", field=FIELD)
    if current.state is not model.ScheduleState.ACTIVE:
        raise errors.ValidationError(
            f"the schedule is {current.state.value}: it has no upcoming fire to skip",
            field=FIELD,
        )
    if fire_time.tzinfo is None:
        raise errors.ValidationError("needs a UTC offset", field=FIELD)
    when = fire_time.astimezone(UTC)
    if when <= now:
        raise errors.ValidationError(
            f"{occurrence.format_fire_time(when)} has passed "
            f"(now {occurrence.format_fire_time(now.replace(microsecond=0))})",
            field=FIELD,
        )
    timing = current.timing
    spec_fire = schedule.next_fire(timing.unexcluded, when - timedelta(microseconds=1))
    if spec_fire != when:
        nearest = schedule.next_fire(timing, when)
        hint = (
            f"; the next fire after it is {occurrence.format_fire_time(nearest)}" if nearest else ""
        )
        raise errors.ValidationError(
            f"{occurrence.format_fire_time(when)} is not a fire of this schedule{hint}",
            field=FIELD,
        )
    if timing.exclude.covers(when.astimezone(timing.tz).date()):
        raise errors.ValidationError(
            f"{occurrence.format_fire_time(when)} falls on a day the exclude list takes away "
            "(change exclude to bring it back)",
            field=FIELD,
        )
    return when


def _versioned(
    service: schedules.ScheduleService, current: model.Schedule, skips: frozenset[datetime]
) -> model.Schedule:
    """The schedule with these skips: an update to its own definition, so its version
    rules (what the old version sent is void) apply, refused if it changed meanwhile."""
    return service.update(
        current.tenant_id,
        current.schedule_id,
        draft_of(current),
        skips=skips,
        expected_version=current.version,
    )


def draft_of(item: model.Schedule) -> schedules.ScheduleDraft:
    """The draft that builds ``item`` again."""
    t = item.timing
    return schedules.ScheduleDraft(
        spec=item.spec_text,
        timezone=t.timezone,
        dst=t.dst,
        start=t.start,
        end=t.end,
        job_class=item.job_class,
        target=item.target,
        payload=item.payload,
        retry=item.retry,
        misfire=item.misfire,
        overlap=item.overlap,
        jitter_seconds=item.jitter_seconds,
        deadline_seconds=item.deadline_seconds,
        exclude=t.exclude,
    )
