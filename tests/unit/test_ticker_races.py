"""The ticker against changes made between its ticks: an update, a pause and resume, a
delete and re-create of the same id, landing after it advanced a schedule. The table,
read consistently, says what is current; nothing the ticker remembers of its own advances
may hide the schedule's new state from it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from fireline import ports
from fireline.adapters import memory
from fireline.domain import occurrence, policies
from fireline.services import schedules, ticker
from helpers.memory_system import NOW, MemorySystem

TARGET = {"type": "python", "handler": "noop"}
SKIP_5S = policies.Misfire(policy=policies.MisfirePolicy.SKIP, grace_seconds=5)


class RecordingQueue:
    """The memory queue, each message's occurrence key noted as it is sent."""

    def __init__(self, queue: memory.MemoryWorkQueue) -> None:
        self._queue = queue
        self.keys: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)

    def send_batch(self, job_class: str, messages: Sequence[ports.OutboundMessage]) -> list[str]:
        failed = self._queue.send_batch(job_class, messages)
        self.keys += [m.body["occurrence_key"] for m in messages]
        return failed


def ticker_on(system: MemorySystem, queue: RecordingQueue) -> ticker.Ticker:
    return ticker.Ticker(
        schedules=system.schedules,
        occurrences=system.occurrences,
        queue=queue,
        leases=memory.MemoryLeaseStore(),
        clock=system.clock,
        owner="invocation",
        config=ticker.TickerConfig(),
        use_lease=False,
    )


def at(system: MemorySystem, moment: datetime) -> None:
    system.clock.advance((moment - system.clock.now()).total_seconds())


def draft(spec: str, **fields: Any) -> schedules.ScheduleDraft:
    return schedules.ScheduleDraft(spec=spec, target=TARGET, misfire=SKIP_5S, **fields)


def skipped(system: MemorySystem, schedule_id: str) -> list[occurrence.Occurrence]:
    rows = system.occurrences.history("tenant-a", schedule_id, limit=1_000).items
    return [r for r in rows if r.state is occurrence.State.SKIPPED]


def tick_every_second(system: MemorySystem, tk: ticker.Ticker, until: datetime) -> None:
    while system.clock.now() < until:
        system.clock.advance(1)
        tk.tick()


def test_an_update_after_an_advance_keeps_the_new_versions_next_fire() -> None:
    # GIVEN a cron(0 * * * * *) schedule (second 0 of each minute) with misfire skip and a
    # 5 s grace, created at 12:00:58 and picked up by a tick at 12:00:59, which sends
    # version 1's fires ahead and moves the schedule past them
    system = MemorySystem()
    queue = RecordingQueue(system.queue)
    tk = ticker_on(system, queue)
    at(system, NOW + timedelta(seconds=58))
    made = system.service.create("tenant-a", draft("cron(0 * * * * *)"))
    at(system, NOW + timedelta(seconds=59))
    tk.tick()
    first_fire = NOW + timedelta(minutes=1)
    assert occurrence.occurrence_key(made.schedule_id, 1, first_fire) in queue.keys
    # WHEN it is updated at 12:00:59.5 (version 2: version 1's messages are void) and the
    # ticker goes on ticking every second
    at(system, NOW + timedelta(seconds=59.5))
    updated = system.service.update(
        "tenant-a", made.schedule_id, draft("cron(0 * * * * *)", payload={"v": 2})
    )
    assert updated.version == 2 and updated.next_fire == first_fire
    tick_every_second(system, tk, NOW + timedelta(seconds=75))
    # THEN version 2's fire at 12:01:00 was sent, and nothing was skipped
    assert occurrence.occurrence_key(made.schedule_id, 2, first_fire) in queue.keys
    assert skipped(system, made.schedule_id) == []
    print(
        f"\nupdated at 12:00:59.5: version {updated.version}'s fire at {first_fire:%H:%M:%S} "
        f"sent, {len(skipped(system, made.schedule_id))} fires skipped"
    )


def test_a_pause_and_resume_after_an_advance_keeps_the_next_fire() -> None:
    # GIVEN a */7 seconds schedule, picked up and advanced by a tick
    system = MemorySystem()
    queue = RecordingQueue(system.queue)
    tk = ticker_on(system, queue)
    made = system.service.create("tenant-a", draft("cron(*/7 * * * * *)"))
    at(system, NOW + timedelta(seconds=1))
    tk.tick()
    next_fire = NOW + timedelta(seconds=7)
    assert occurrence.occurrence_key(made.schedule_id, 1, next_fire) in queue.keys
    # WHEN it is paused and resumed (version 3, back in the index at the same next fire)
    # and the ticker ticks again 9 s later, then every second
    system.service.pause("tenant-a", made.schedule_id)
    resumed = system.service.resume("tenant-a", made.schedule_id)
    assert resumed.version == 3 and resumed.next_fire == next_fire
    at(system, NOW + timedelta(seconds=10))
    tk.tick()
    tick_every_second(system, tk, NOW + timedelta(seconds=20))
    # THEN version 3 fires at 12:00:07 (late by 3 s, inside the grace) and on, none skipped
    assert occurrence.occurrence_key(made.schedule_id, 3, next_fire) in queue.keys
    assert occurrence.occurrence_key(made.schedule_id, 3, NOW + timedelta(seconds=14)) in (
        queue.keys
    )
    assert skipped(system, made.schedule_id) == []
    print(
        f"\npaused and resumed after the advance: version {resumed.version}'s fires at "
        f"{next_fire:%H:%M:%S} and 7 s later sent, {len(skipped(system, made.schedule_id))} "
        "fires skipped"
    )


def test_a_schedule_deleted_and_created_again_under_its_id_fires_on_time() -> None:
    # GIVEN a schedule the ticker picked up and advanced
    system = MemorySystem()
    queue = RecordingQueue(system.queue)
    tk = ticker_on(system, queue)
    at(system, NOW + timedelta(seconds=58))
    made = system.service.create("tenant-a", draft("cron(0 * * * * *)"), request_key="k1")
    at(system, NOW + timedelta(seconds=59))
    tk.tick()
    before = len(queue.keys)
    # WHEN it is deleted and created again under the same id (version 1 again, the same
    # next fire as the one the ticker advanced from), and the ticker goes on
    at(system, NOW + timedelta(seconds=59.5))
    system.service.delete("tenant-a", made.schedule_id)
    again = system.service.create("tenant-a", draft("cron(0 * * * * *)"), request_key="k1")
    assert again.schedule_id == made.schedule_id
    assert again.version == 1 and again.next_fire == NOW + timedelta(minutes=1)
    tick_every_second(system, tk, NOW + timedelta(seconds=75))
    # THEN the new schedule's fire at 12:01:00 was sent again for it, nothing skipped
    key = occurrence.occurrence_key(made.schedule_id, 1, NOW + timedelta(minutes=1))
    assert key in queue.keys[before:]
    assert skipped(system, made.schedule_id) == []
