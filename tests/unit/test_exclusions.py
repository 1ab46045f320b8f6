"""Exclusions and skips, run by the real ticker and worker on the memory system: an
excluded or skipped fire is never sent, the schedule's next fire moves past it, and the
history records it as ``skipped: excluded``; across DST in America/New_York too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fireline.adapters import memory
from fireline.domain import errors, exclusions, occurrence, schedule
from fireline.services import schedules, skips, ticker
from helpers.memory_system import REMAINING_MS, MemorySystem

TARGET = {"type": "python", "handler": "noop"}
NEW_YORK = "America/New_York"
WEEKDAYS_AT_9 = "cron(0 9 * * MON-FRI)"


def at_nine(day: str) -> datetime:
    """09:00 New York time on ``day``, as a UTC instant."""
    local = datetime.fromisoformat(f"{day}T09:00:00").replace(tzinfo=schedule.zone(NEW_YORK))
    return local.astimezone(UTC)


def weekdays_except(system: MemorySystem, *excluded: Any) -> Any:
    return system.service.create(
        "tenant-a",
        schedules.ScheduleDraft(
            spec=WEEKDAYS_AT_9,
            timezone=NEW_YORK,
            target=TARGET,
            exclude=exclusions.parse(list(excluded)),
        ),
    )


def one_invocation(system: MemorySystem) -> None:
    """A ticker invocation with room for one tick."""
    tk = ticker.Ticker(
        schedules=system.schedules,
        occurrences=system.occurrences,
        queue=system.queue,
        leases=memory.MemoryLeaseStore(),
        clock=system.clock,
        owner="test",
        config=ticker.TickerConfig(stop_before_end_ms=0),
    )
    end = system.clock.monotonic() + 1.5
    tk.run(lambda: int((end - system.clock.monotonic()) * 1000))


def clock_to(system: MemorySystem, moment: datetime) -> None:
    system.clock.advance((moment - system.clock.now()).total_seconds())


def run_days(system: MemorySystem, item: Any, until: datetime) -> list[datetime]:
    """Each day until ``until``: the clock to 08:58 New York time, one ticker invocation
    (it sends the 09:00 fire ahead, delayed), the clock past 09:00 and the worker runs what
    is visible. The fire times that ran (succeeded), in order."""
    worker = system.worker()
    day = system.clock.now().astimezone(schedule.zone(NEW_YORK)).date()
    while (nine := at_nine(day.isoformat())) <= until:
        if nine - timedelta(minutes=2) > system.clock.now():
            clock_to(system, nine - timedelta(minutes=2))
            one_invocation(system)
            clock_to(system, nine + timedelta(seconds=5))
            for message in system.queue.receive("default"):
                worker.handle(message.body, remaining_ms=lambda: REMAINING_MS)
        day += timedelta(days=1)
    rows = system.occurrences.history("tenant-a", item.schedule_id, limit=1_000).items
    return sorted(r.fire_time for r in rows if r.state is occurrence.State.SUCCEEDED)


def excluded_rows(system: MemorySystem, item: Any) -> list[datetime]:
    rows = system.occurrences.history("tenant-a", item.schedule_id, limit=1_000).items
    return sorted(
        r.fire_time
        for r in rows
        if r.state is occurrence.State.SKIPPED and r.exit_reason == exclusions.REASON
    )


def test_weekdays_at_nine_except_christmas_and_new_year_run_and_record_each_fire() -> None:
    # GIVEN "every weekday at 09:00 New York time except 2026-12-25 and 2027-01-01",
    # created on 2026-12-23 at noon UTC
    system = MemorySystem(clock=memory.FakeClock(datetime(2026, 12, 23, 12, tzinfo=UTC)))
    item = weekdays_except(system, "2026-12-25", "2027-01-01")
    # WHEN its preview is asked for the next eight fires
    preview = system.service.preview("tenant-a", item.schedule_id, count=8)
    # THEN the eight that run are listed, and the two excluded among them marked so
    running = [f.fire_time for f in preview if f.excluded is None]
    marked = [(f.fire_time, f.excluded) for f in preview if f.excluded is not None]
    days = ["2026-12-23", "2026-12-24", "2026-12-28", "2026-12-29", "2026-12-30"]
    days += ["2026-12-31", "2027-01-04", "2027-01-05"]
    assert running == [at_nine(d) for d in days]
    assert marked == [(at_nine("2026-12-25"), "excluded"), (at_nine("2027-01-01"), "excluded")]
    # WHEN the ticker and the worker run every morning up to 2027-01-05
    ran = run_days(system, item, until=at_nine("2027-01-05"))
    # THEN every weekday but the two ran, once each, and the two are recorded as
    # skipped: excluded, never sent
    assert ran == [at_nine(d) for d in days]
    assert excluded_rows(system, item) == [at_nine("2026-12-25"), at_nine("2027-01-01")]
    assert system.queue.receive("default") == []
    after = system.schedules.get("tenant-a", item.schedule_id)
    assert after is not None and after.next_fire == at_nine("2027-01-06")


@pytest.mark.parametrize(
    ("excluded", "first_day", "last_day", "expected_utc_hours"),
    [
        # spring forward on Sunday 2026-03-08: EST (UTC-5) before, EDT (UTC-4) after
        ("2026-03-09", "2026-03-05", "2026-03-11", {"2026-03-05": 14, "2026-03-06": 14,
                                                    "2026-03-10": 13, "2026-03-11": 13}),
        # fall back on Sunday 2026-11-01: EDT before, EST after
        ({"from": "2026-10-30", "to": "2026-11-02"}, "2026-10-28", "2026-11-04",
         {"2026-10-28": 13, "2026-10-29": 13, "2026-11-03": 14, "2026-11-04": 14}),
    ],
)  # fmt: skip
def test_exclusions_around_the_dst_changes_keep_nine_oclock_local(
    excluded: Any, first_day: str, last_day: str, expected_utc_hours: dict[str, int]
) -> None:
    # GIVEN weekdays at 09:00 New York time, excluding days next to a DST change
    system = MemorySystem(clock=memory.FakeClock(at_nine(first_day) - timedelta(hours=3)))
    item = weekdays_except(system, excluded)
    # WHEN the ticker and the worker run each morning through the change
    ran = run_days(system, item, until=at_nine(last_day))
    # THEN each fire that ran is 09:00 local, whatever its UTC offset that day, and the
    # excluded weekdays were recorded, not run
    assert {f.date().isoformat(): f.hour for f in ran} == expected_utc_hours
    weekdays = {at_nine(d.isoformat()) for d in _weekdays(first_day, last_day)}
    excluded_days = sorted(weekdays - set(ran))
    assert excluded_days  # the exclusion took at least one weekday away
    assert excluded_rows(system, item) == excluded_days


def _weekdays(first: str, last: str) -> list[Any]:
    day, end = datetime.fromisoformat(first).date(), datetime.fromisoformat(last).date()
    found = []
    while day <= end:
        if day.weekday() < 5:
            found.append(day)
        day += timedelta(days=1)
    return found


def test_a_skipped_fire_is_not_sent_and_taking_the_skip_back_runs_it() -> None:
    # GIVEN weekdays at 09:00 New York, created Monday 2026-12-14 at 15:00 UTC
    system = MemorySystem(clock=memory.FakeClock(datetime(2026, 12, 14, 15, tzinfo=UTC)))
    item = weekdays_except(system)
    # WHEN Wednesday's and Thursday's fires are skipped, and Thursday's skip taken back
    skipped = skips.skip(system.service, "tenant-a", item.schedule_id, at_nine("2026-12-16"))
    skips.skip(system.service, "tenant-a", item.schedule_id, at_nine("2026-12-17"))
    back = skips.unskip(system.service, "tenant-a", item.schedule_id, at_nine("2026-12-17"))
    # THEN each is a new version, and only Wednesday's is held as skipped
    assert (skipped.version, back.version) == (item.version + 1, item.version + 3)
    assert back.timing.skips == {at_nine("2026-12-16")}
    preview = system.service.preview("tenant-a", item.schedule_id, count=3)
    assert [(f.fire_time, f.excluded) for f in preview] == [
        (at_nine("2026-12-15"), None),
        (at_nine("2026-12-16"), "skipped"),
        (at_nine("2026-12-17"), None),
        (at_nine("2026-12-18"), None),
    ]
    # AND a repeated skip changes nothing
    again = skips.skip(system.service, "tenant-a", item.schedule_id, at_nine("2026-12-16"))
    assert again.version == back.version
    # WHEN the mornings of that week run
    ran = run_days(system, item, until=at_nine("2026-12-18"))
    # THEN Wednesday did not run and is recorded as skipped: excluded
    assert ran == [at_nine(d) for d in ("2026-12-15", "2026-12-17", "2026-12-18")]
    assert excluded_rows(system, item) == [at_nine("2026-12-16")]


@pytest.mark.parametrize(
    ("fire_time", "why"),
    [
        (at_nine("2026-12-14"), "has passed"),  # this morning (14:00 UTC), an hour ago
        (at_nine("2026-12-15") + timedelta(minutes=1), "is not a fire"),
        (at_nine("2026-12-19"), "is not a fire"),  # a Saturday
        (at_nine("2026-12-25"), "exclude list"),
    ],
)
def test_a_skip_of_no_upcoming_fire_is_refused_naming_fire_time(
    fire_time: datetime, why: str
) -> None:
    # GIVEN weekdays at 09:00 New York except Christmas, at 15:00 UTC on 2026-12-14
    system = MemorySystem(clock=memory.FakeClock(datetime(2026, 12, 14, 15, tzinfo=UTC)))
    item = weekdays_except(system, "2026-12-25")
    # WHEN a time that is not one of its upcoming fires is skipped
    with pytest.raises(errors.ValidationError) as refused:
        skips.skip(system.service, "tenant-a", item.schedule_id, fire_time)
    # THEN it is refused naming fire_time, and the schedule is unchanged
    assert refused.value.field == "fire_time" and why in refused.value.detail
    assert system.schedules.get("tenant-a", item.schedule_id) == item


def test_a_skip_of_a_paused_schedule_is_refused() -> None:
    # GIVEN a paused schedule
    system = MemorySystem(clock=memory.FakeClock(datetime(2026, 12, 14, 15, tzinfo=UTC)))
    item = weekdays_except(system)
    paused = system.service.pause("tenant-a", item.schedule_id)
    # WHEN one of the fires it would have is skipped
    with pytest.raises(errors.ValidationError) as refused:
        skips.skip(system.service, "tenant-a", item.schedule_id, at_nine("2026-12-15"))
    # THEN it is refused naming fire_time, and nothing changed
    assert refused.value.field == "fire_time" and "paused" in refused.value.detail
    assert system.schedules.get("tenant-a", item.schedule_id) == paused


def test_an_excluded_day_of_a_per_second_schedule_is_recorded_in_summary_rows() -> None:
    # GIVEN a per-second schedule excluding every 25 December (UTC), the day before at
    # 23:59:00
    system = MemorySystem(clock=memory.FakeClock(datetime(2026, 12, 24, 23, 59, tzinfo=UTC)))
    item = system.service.create(
        "tenant-a",
        schedules.ScheduleDraft(
            spec="rate(1 second)", target=TARGET, exclude=exclusions.parse(["* * 25 12 *"])
        ),
    )
    # WHEN the ticker runs an invocation every ten minutes until the day after
    for _ in range(24 * 6 + 2):
        one_invocation(system)
        system.clock.advance(600)
    # THEN no fire of the 25th was sent, and the rows count each of its 86,400 fires once
    rows = system.occurrences.history("tenant-a", item.schedule_id, limit=1_000).items
    counted = [r for r in rows if (r.exit_reason or "").startswith(exclusions.REASON)]
    assert sum(r.skipped_count or 1 for r in counted) == 86_400
    sent = [m.body["fire_time"] for m in system.queue.receive("default", max_messages=100_000)]
    assert sent and not [t for t in sent if t.startswith("2026-12-25")]
    after = system.schedules.get("tenant-a", item.schedule_id)
    assert after is not None and after.next_fire > datetime(2026, 12, 26, tzinfo=UTC)
