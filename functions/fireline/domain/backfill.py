"""Backfill: a schedule's fires over a past range, materialized and run at a bounded pace.

A backfill writes each fire of ``[from, to)`` as an occurrence under the key the ticker
would give it (``{schedule_id}#{version}#{fire_time}``), conditional on the key not
existing: a fire that already has a row (it ran, failed, was skipped, or another backfill
wrote it) is counted as existing and is not run again, so backfilling a range twice
creates nothing the second time and a backfill racing the ticker leaves one row per fire.

Its rows are then released a few at a time: the backfill record (in DynamoDB) names the
fires released and not yet settled (at most ``window`` of them) and how far the release
has gone. Every pass reads that record, reads back the rows in flight, sends the next
ones and moves the record on with a write conditional on the revision it read, so two
passes (a worker's nudge and the periodic pass, or a pass retried after a crash) converge:
the loser's messages duplicate the winner's, and the worker's claim is conditional on the
key, so each fire still runs once per claim (at-least-once execution, exactly-once claim).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from fireline.domain import errors, policies, schedule

# One request's fires: each is a conditional put within the API's invocation, and the
# cap keeps a mistyped range (a per-second schedule over a year) from filling a table.
MAX_FIRES = 10_000
# Fires of one backfill released and not settled, side by side. A backfill's runs share
# the tenant's concurrency limit and quota with its live fires; ten keeps a long backfill
# from filling the tenant's slots (its live fires would wait behind it) while a backfill
# of a few hours of an hourly schedule runs in one go. It is also what one pass reads
# back: the rows in flight in one BatchGetItem.
WINDOW = 10
ORIGIN = "backfill"


class TooManyFires(errors.ValidationError):
    """The range holds more fires than one backfill may write: backfill it in parts."""


class Overlap(enum.StrEnum):
    """How a backfill's own runs overlap each other."""

    ALLOW = "allow"  # up to WINDOW of its fires run side by side
    BUFFER_ALL = "buffer_all"  # one at a time, oldest first: each waits for the one before


class State(enum.StrEnum):
    RUNNING = "running"  # fires left to release, or in flight
    DONE = "done"  # every fire released has settled and none is left
    # Cancel asked: nothing more is released, and the fires not started are being
    # cancelled (a pass finishes it if the request that began it did not).
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"  # the fires not started were cancelled


def parse_overlap(value: str | None, schedule_overlap: policies.OverlapPolicy) -> Overlap:
    """The backfill's overlap, by default the schedule's own: a schedule that runs one
    fire at a time (forbid, buffer_one) backfills one at a time, without skipping any."""
    if value is None:
        if schedule_overlap is policies.OverlapPolicy.ALLOW:
            return Overlap.ALLOW
        return Overlap.BUFFER_ALL
    try:
        return Overlap(value)
    except ValueError:
        names = ", ".join(o.value for o in Overlap)
        raise errors.ValidationError(f"{value!r} is not one of {names}", field="overlap") from None


def window_of(overlap: Overlap) -> int:
    return WINDOW if overlap is Overlap.ALLOW else 1


def fire_times(
    timing: schedule.Timing, start: datetime, end: datetime, now: datetime
) -> list[datetime]:
    """The fires of ``timing`` in ``[start, end)``; ValidationError naming the field when
    the range is empty, reaches past ``now`` (fires from now on are the ticker's: it sends
    them on time, and a backfill would run them early) or holds more than MAX_FIRES."""
    for name, value in (("from", start), ("to", end)):
        if value.tzinfo is None:
            raise errors.ValidationError("needs a UTC offset", field=name)
    if start >= end:
        raise errors.ValidationError("must be after from", field="to")
    if end > now:
        raise errors.ValidationError(
            "must not be after now: the ticker sends the fires from now on", field="to"
        )
    found: list[datetime] = []
    for fire in schedule.fires(timing, start - _TICK, limit=MAX_FIRES + 1):
        if fire >= end:
            break
        found.append(fire)
    if len(found) > MAX_FIRES:
        raise TooManyFires(
            f"the range holds more than {MAX_FIRES} fires; backfill it in parts", field="to"
        )
    return found


@dataclass(frozen=True)
class Backfill:
    """The durable record of one backfill: its range, its counts and its release."""

    tenant_id: str
    schedule_id: str
    backfill_id: str
    version: int  # the schedule version its rows were written under
    job_class: str
    start: datetime
    end: datetime
    overlap: Overlap
    created_at: datetime
    fires: int = 0  # fire times in the range
    created: int = 0  # rows this backfill wrote
    existed: int = 0  # fires that had a row already (not run again)
    state: State = State.RUNNING
    # Released: every created row up to and including this fire was sent.
    released_until: datetime | None = None
    released: int = 0
    in_flight: tuple[str, ...] = field(default_factory=tuple)  # keys sent, not settled
    run: int = 0  # released fires that settled (succeeded, dead, skipped, ...)
    cancelled: int = 0  # fires not started that the cancel stopped
    revision: int = 0  # +1 on every write: the condition two passes race on

    @property
    def window(self) -> int:
        return window_of(self.overlap)

    @property
    def left(self) -> int:
        """Created fires not released yet. None once it has ended: a row settled before
        its release (an update of the schedule skips its old version's rows) is not
        released, and nothing is left for it."""
        if not self.active:
            return 0
        return max(0, self.created - self.released)

    @property
    def active(self) -> bool:
        """Still needs a pass: fires to release or in flight, or a cancel to finish."""
        return self.state in (State.RUNNING, State.CANCELLING)

    def moved(self, **changes: object) -> Backfill:
        return replace(self, revision=self.revision + 1, **changes)  # type: ignore[arg-type]


_TICK = timedelta(microseconds=1)
