"""The worker's eventually consistent reads (memory adapters whose non-consistent reads
answer from an older snapshot): a stale answer never skips, drops or over-runs a fire."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from fireline.adapters import memory, threads
from fireline.domain import errors, model, occurrence, retry
from fireline.services import dispatch, schedules
from fireline.services.worker import Result
from helpers.memory_system import REMAINING_MS, MemorySystem

TARGET = {"type": "python", "handler": "noop"}


class StaleSchedules(memory.MemoryScheduleStore):
    """Eventually consistent reads, single or batched, see the schedules as they were at
    ``freeze``."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen: dict[tuple[str, str], model.Schedule | None] = {}
        self.stale_reads = 0
        self.reads: list[str] = []  # "get" or "get_many", and how consistent

    def freeze(self, tenant_id: str, schedule_id: str) -> None:
        self.frozen[(tenant_id, schedule_id)] = super().get(tenant_id, schedule_id)

    def get(
        self, tenant_id: str, schedule_id: str, *, consistent: bool = True
    ) -> model.Schedule | None:
        self.reads.append(f"get consistent={consistent}")
        if not consistent and (tenant_id, schedule_id) in self.frozen:
            self.stale_reads += 1
            return self.frozen[(tenant_id, schedule_id)]
        return super().get(tenant_id, schedule_id)

    def get_many(
        self, keys: Sequence[tuple[str, str]], *, consistent: bool = True
    ) -> list[model.Schedule]:
        self.reads.append(f"get_many consistent={consistent}")
        if consistent:
            return super().get_many(keys)
        found = {(s.tenant_id, s.schedule_id): s for s in super().get_many(keys)}
        found |= {k: v for k, v in self.frozen.items() if k in set(keys)}
        self.stale_reads += sum(1 for k in set(keys) if k in self.frozen)
        return [s for s in found.values() if s is not None]


class StaleOccurrences(memory.MemoryOccurrenceStore):
    """Eventually consistent reads, single or batched, see the rows as they were at
    ``freeze``."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen: dict[str, occurrence.Occurrence | None] = {}
        self.reads: list[str] = []  # "get" or "get_many", and how consistent

    def freeze(self, key: str) -> None:
        self.frozen[key] = super().get(key)

    def get(self, key: str, *, consistent: bool = True) -> occurrence.Occurrence | None:
        self.reads.append(f"get consistent={consistent}")
        if not consistent and key in self.frozen:
            return self.frozen[key]
        return super().get(key)

    def get_many(
        self, keys: Sequence[str], *, consistent: bool = True
    ) -> dict[str, occurrence.Occurrence]:
        self.reads.append(f"get_many consistent={consistent}")
        found = super().get_many(keys)
        if not consistent:
            found |= {k: v for k, v in self.frozen.items() if k in set(keys) and v is not None}
            found = {k: v for k, v in found.items() if k not in self.frozen or self.frozen[k]}
        return found


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


def handle(system: MemorySystem, how: str, *bodies: dict[str, Any]) -> list[Result | Exception]:
    """The worker's handling of ``bodies``: each alone (a redelivery, a tool), or as one
    batch, whose rows and schedules are read together first. The stale stores' reads
    from here on are the handling's."""
    for store in (system.schedules, system.occurrences):
        assert isinstance(store, StaleSchedules | StaleOccurrences)
        store.reads.clear()
    worker = system.worker()
    if how == "alone":
        return [worker.handle(body, remaining_ms=lambda: REMAINING_MS) for body in bodies]
    with threads.ThreadPool(1) as pool:  # the records in turn
        return worker.handle_batch(bodies, remaining_ms=lambda: REMAINING_MS, parallel=pool)


HOW = pytest.mark.parametrize("how", ["alone", "in a batch"])


def first_reads(how: str) -> list[str]:
    """How a delivery's first read of its row (or schedule) goes."""
    return ["get consistent=False" if how == "alone" else "get_many consistent=False"]


@HOW
def test_a_stale_schedule_of_an_older_version_does_not_skip_the_new_versions_fire(
    how: str,
) -> None:
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
    results = handle(system, how, body)
    # THEN it ran: the stale answer (an older version: "unwanted") was read again
    # consistently, and the consistent answer decided
    assert stale_schedules.stale_reads == 1
    assert stale_schedules.reads[:2] == [*first_reads(how), "get consistent=True"]
    assert results == [Result.SUCCEEDED]
    assert system.row(body).state is occurrence.State.SUCCEEDED


@HOW
def test_a_stale_schedule_read_misses_a_pause_and_the_claim_still_stops_the_fire(
    how: str,
) -> None:
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
    results = handle(system, how, body)
    # THEN nothing ran: the consistent read after the claim saw the pause
    assert stale_schedules.stale_reads == 1
    assert results == [Result.SKIPPED]
    assert system.row(body).state is occurrence.State.SKIPPED


@HOW
def test_a_stale_dead_row_of_a_redriven_occurrence_is_read_again_and_runs(how: str) -> None:
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
    results = handle(system, how, body)
    # THEN it ran: a dead answer ends a delivery, so it is read again consistently
    assert stale_rows.reads[:2] == [*first_reads(how), "get consistent=True"]
    assert results == [Result.SUCCEEDED]
    assert system.row(body).state is occurrence.State.SUCCEEDED


@HOW
def test_a_stale_running_row_whose_run_ended_is_read_again_and_is_a_duplicate(
    how: str,
) -> None:
    # GIVEN an occurrence whose stale read shows it running: its run has succeeded since
    system, _, stale_rows = stale_system()
    body = system.due_job()
    key = body["occurrence_key"]
    now = system.clock.now()
    assert system.occurrences.claim(key, now=now, until=now + timedelta(minutes=5))[0]
    stale_rows.freeze(key)
    assert system.occurrences.settle(
        key, state=occurrence.State.SUCCEEDED, now=now, exit_reason="succeeded"
    )
    # WHEN another delivery of its message arrives
    results = handle(system, how, body)
    # THEN it is a settled duplicate, not Busy (which "running" would have made it): the
    # running answer was read again consistently, and nothing ran twice
    assert stale_rows.reads == [*first_reads(how), "get consistent=True"]
    assert results == [Result.SETTLED]
    assert system.row(body).attempts == 1


@HOW
def test_a_stale_attempt_count_never_runs_past_the_attempt_cap(how: str) -> None:
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
    results = handle(system, how, body)
    # THEN that attempt is past the cap: recorded dead, nothing run
    assert results == [Result.DEAD]
    assert system.row(body).state is occurrence.State.DEAD
    assert system.row(body).attempts == 2 and ran == []


# --- a batch's reads together ---------------------------------------------------------------


def test_a_batch_reads_its_rows_and_schedules_together_instead_of_one_by_one() -> None:
    # GIVEN two schedules' fires, sent without rows, arriving in one batch
    system, stale_schedules, stale_rows = stale_system()
    items = [
        system.service.create(
            "tenant-a", schedules.ScheduleDraft(spec="rate(1 minute)", target=TARGET)
        )
        for _ in range(2)
    ]
    bodies = [fire_of(system, item) for item in items]
    arrive_at(system, items[0])
    # WHEN the worker handles the batch
    results = handle(system, "in a batch", *bodies)
    # THEN both ran, on one eventually consistent batch read of the rows and one of the
    # schedules; the only other reads are the consistent ones after each claim, each a
    # batch read of the records claimed at that moment (here in turn: one each)
    assert results == [Result.SUCCEEDED, Result.SUCCEEDED]
    assert stale_rows.reads == ["get_many consistent=False"]
    assert stale_schedules.reads == ["get_many consistent=False"] + ["get_many consistent=True"] * 2


def test_a_second_delivery_in_the_same_batch_reads_the_row_the_first_wrote() -> None:
    # GIVEN one fire's message twice in one batch (SQS delivers at least once)
    system, _, stale_rows = stale_system()
    ran: list[str] = []
    system.registry.register("count")(lambda context: ran.append(context.occurrence_key))
    item = system.service.create(
        "tenant-a",
        schedules.ScheduleDraft(
            spec="rate(1 minute)", target={"type": "python", "handler": "count"}
        ),
    )
    body = fire_of(system, item)
    arrive_at(system, item)
    # WHEN the worker handles both
    results = handle(system, "in a batch", body, dict(body))
    # THEN the batch read served the first, which ran; the second read the row itself,
    # found its outcome and ran nothing
    assert results == [Result.SUCCEEDED, Result.SETTLED]
    assert ran == [body["occurrence_key"]]
    assert stale_rows.reads == ["get_many consistent=False", "get consistent=False"]


def test_a_failed_batch_read_leaves_each_record_to_read_for_itself() -> None:
    # GIVEN a batch whose batch read of the rows fails (DynamoDB throttling it)
    system, _, stale_rows = stale_system()
    item = system.service.create(
        "tenant-a", schedules.ScheduleDraft(spec="rate(1 minute)", target=TARGET)
    )
    body = fire_of(system, item)
    arrive_at(system, item)

    def throttled(keys: Sequence[str], *, consistent: bool = True) -> Any:
        raise errors.Unavailable("DynamoDB left 1 occurrences unread")

    stale_rows.get_many = throttled  # type: ignore[method-assign]
    # WHEN the worker handles it
    results = handle(system, "in a batch", body)
    # THEN the fire ran all the same, on its own read of its row
    assert results == [Result.SUCCEEDED]
    assert stale_rows.reads[0] == "get consistent=False"
