"""The worker's eventually consistent reads (memory adapters whose non-consistent reads
answer from an older snapshot): a stale answer never skips, drops or over-runs a fire."""

from __future__ import annotations

from typing import Any

from fireline.adapters import memory
from fireline.domain import model, occurrence, retry
from fireline.services import dispatch, schedules
from fireline.services.worker import Result
from helpers.memory_system import REMAINING_MS, MemorySystem

TARGET = {"type": "python", "handler": "noop"}


class StaleSchedules(memory.MemoryScheduleStore):
    """Eventually consistent reads see the schedules as they were at ``freeze``."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen: dict[tuple[str, str], model.Schedule | None] = {}
        self.stale_reads = 0

    def freeze(self, tenant_id: str, schedule_id: str) -> None:
        self.frozen[(tenant_id, schedule_id)] = super().get(tenant_id, schedule_id)

    def get(
        self, tenant_id: str, schedule_id: str, *, consistent: bool = True
    ) -> model.Schedule | None:
        if not consistent and (tenant_id, schedule_id) in self.frozen:
            self.stale_reads += 1
            return self.frozen[(tenant_id, schedule_id)]
        return super().get(tenant_id, schedule_id)


class StaleOccurrences(memory.MemoryOccurrenceStore):
    """Eventually consistent reads see the rows as they were at ``freeze``."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen: dict[str, occurrence.Occurrence | None] = {}

    def freeze(self, key: str) -> None:
        self.frozen[key] = super().get(key)

    def get(self, key: str, *, consistent: bool = True) -> occurrence.Occurrence | None:
        if not consistent and key in self.frozen:
            return self.frozen[key]
        return super().get(key)


def stale_system() -> tuple[MemorySystem, StaleSchedules, StaleOccurrences]:
    stale_schedules, stale_rows = StaleSchedules(), StaleOccurrences()
    return (
        MemorySystem(schedules=stale_schedules, occurrences=stale_rows),
        stale_schedules,
        stale_rows,
    )


def fire_of(system: MemorySystem, item: model.Schedule) -> dict[str, Any]:
    """The message the ticker sends for the schedule's next fire (no row written)."""
    assert item.next_fire is not None
    return dispatch.fire_message(item, item.next_fire)


def arrive_at(system: MemorySystem, item: model.Schedule) -> None:
    assert item.next_fire is not None
    system.clock.advance((item.next_fire - system.clock.now()).total_seconds())


def test_a_stale_schedule_of_an_older_version_does_not_skip_the_new_versions_fire() -> None:
    # GIVEN a schedule updated a moment ago, whose stale read still shows version 1
    system, stale_schedules, _ = stale_system()
    item = system.service.create(
        "tenant-a", schedules.ScheduleDraft(spec="rate(1 minute)", target=TARGET)
    )
    stale_schedules.freeze("tenant-a", item.schedule_id)
    updated = system.service.update(
        "tenant-a", item.schedule_id, schedules.ScheduleDraft(spec="rate(1 minute)", target=TARGET)
    )
    assert updated.version == 2
    body = fire_of(system, updated)
    arrive_at(system, updated)
    # WHEN the worker gets the new version's fire
    result = system.worker().handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN it ran (the stale "stale version" answer was read again consistently)
    assert stale_schedules.stale_reads == 1
    assert result is Result.SUCCEEDED
    assert system.row(body).state is occurrence.State.SUCCEEDED


def test_a_stale_schedule_read_misses_a_pause_and_the_claim_still_stops_the_fire() -> None:
    # GIVEN a schedule paused a moment ago, whose stale read still shows it active
    system, stale_schedules, _ = stale_system()
    item = system.service.create(
        "tenant-a", schedules.ScheduleDraft(spec="rate(1 minute)", target=TARGET)
    )
    body = fire_of(system, item)
    stale_schedules.freeze("tenant-a", item.schedule_id)
    system.service.pause("tenant-a", item.schedule_id)
    arrive_at(system, item)
    # WHEN its fire (sent before the pause) arrives
    result = system.worker().handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN nothing ran: the consistent read after the claim saw the pause
    assert result is Result.SKIPPED
    assert system.row(body).state is occurrence.State.SKIPPED


def test_a_stale_dead_row_of_a_redriven_occurrence_is_read_again_and_runs() -> None:
    # GIVEN a dead occurrence, redriven a moment ago, whose stale read still shows it dead
    system, _, stale_rows = stale_system()
    body = system.due_job()
    key = body["occurrence_key"]
    now = system.clock.now()
    assert system.occurrences.claim(key, now=now, until=now)[0]
    assert system.occurrences.settle(key, state=occurrence.State.DEAD, now=now, exit_reason="x")
    stale_rows.freeze(key)
    dead = system.row(body)
    redriven = dead.moved(occurrence.State.QUEUED, attempts=0, finished_at=None, exit_reason=None)
    assert system.occurrences.transition(redriven, expected_state=occurrence.State.DEAD)
    # WHEN the redrive's message arrives
    result = system.worker().handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN it ran: a dead answer ends a delivery, so it is read again consistently
    assert result is Result.SUCCEEDED
    assert system.row(body).state is occurrence.State.SUCCEEDED


def test_a_stale_attempt_count_never_runs_past_the_attempt_cap() -> None:
    # GIVEN a job whose one attempt has failed, whose stale row still shows no attempt
    system, _, stale_rows = stale_system()
    body = system.due_job(retry=retry.RetryPolicy(max_attempts=1))
    key = body["occurrence_key"]
    stale_rows.freeze(key)
    claimed, _ = system.occurrences.claim(key, now=system.clock.now(), until=system.clock.now())
    assert claimed
    system.occurrences.settle(
        key, state=occurrence.State.FAILED, now=system.clock.now(), exit_reason="error: x"
    )
    ran: list[str] = []
    system.registry.register("count")(lambda context: ran.append(context.occurrence_key))
    # WHEN a delivery reads the stale row and claims a second attempt
    result = system.worker().handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN that attempt is past the cap: recorded dead, nothing run
    assert result is Result.DEAD
    assert system.row(body).state is occurrence.State.DEAD
    assert system.row(body).attempts == 2 and ran == []
