"""What every backend is set up with, and valid records the tests change one field of."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from fireline import ports
from fireline.adapters import memory
from fireline.domain import model, occurrence, schedule

#: Shards the schedule store spreads its due index over.
SHARDS = model.DEFAULT_SHARDS
#: Every job class's queue: default visibility timeout, and receives before redrive.
VISIBILITY_TIMEOUT = 30
MAX_RECEIVE_COUNT = 3
#: Where the FakeClock starts.
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Backend:
    """How to build each port on one implementation. Each call returns a fresh, empty port."""

    schedule_store: Callable[[], ports.ScheduleStore]
    occurrence_store: Callable[[], ports.OccurrenceStore]
    # The queue reads time from the clock the test moves (delay, visibility timeout).
    work_queue: Callable[[memory.FakeClock], ports.WorkQueue]
    lease_store: Callable[[], ports.LeaseStore]
    slot_store: Callable[[], ports.SlotStore]
    # Entered around each test (an emulator session, say); memory needs none.
    session: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext
    # Waits until the indexes have seen every write made so far (a lagging index's
    # catching up); the others' indexes are current at once.
    settle: Callable[[], None] = lambda: None


TENANT = "tenant-a"
OTHER_TENANT = "tenant-b"
MINUTE = timedelta(minutes=1)
EVERY_MINUTE = schedule.Timing(spec=schedule.parse_spec("rate(1 minute)"))


def a_schedule(
    schedule_id: str,
    *,
    tenant_id: str = TENANT,
    next_fire: datetime | None = START,
    version: int = 1,
    **fields: Any,
) -> model.Schedule:
    """An active schedule due at ``next_fire`` (paused when there is none)."""
    state = model.ScheduleState.ACTIVE if next_fire is not None else model.ScheduleState.PAUSED
    values: dict[str, Any] = {
        "tenant_id": tenant_id,
        "schedule_id": schedule_id,
        "timing": EVERY_MINUTE,
        "spec_text": "rate(1 minute)",
        "state": state,
        "version": version,
        "next_fire": next_fire,
        "payload": {"report": schedule_id},
        "created_at": START - timedelta(days=1),
        "updated_at": START - timedelta(days=1),
    }
    if fields.get("kind") is model.Kind.JOB:
        # A one-off job's timing is its one instant, as the service builds it.
        when = schedule.AtSpec(next_fire or START)
        values.update(timing=schedule.Timing(spec=when), spec_text=str(when))
    values.update(fields)
    return model.Schedule(**values)


def ids_in_shard(shard: int, count: int, prefix: str = "sched") -> list[str]:
    """``count`` schedule ids whose due shard is ``shard``."""
    ids = (f"{prefix}-{n}" for n in itertools.count())
    return list(itertools.islice((i for i in ids if model.due_shard(i, SHARDS) == shard), count))


def an_occurrence(
    schedule_id: str = "nightly",
    fire_time: datetime = START,
    *,
    tenant_id: str = TENANT,
    version: int = 1,
    **fields: Any,
) -> occurrence.Occurrence:
    """A queued occurrence of ``schedule_id`` for ``fire_time``."""
    values: dict[str, Any] = {
        "tenant_id": tenant_id,
        "schedule_id": schedule_id,
        "version": version,
        "fire_time": fire_time,
        "job_class": "default",
        "created_at": fire_time - timedelta(seconds=2),
        "payload": {"fire": fire_time.isoformat()},
    }
    values.update(fields)
    return occurrence.new(**values)
