"""A tenant's slot taken without reading its slots first: a first delivery of a tenant
whose limit the register of overrides shows tries one slot number at random, and the
conditional take keeps the limit; a number held sends it to the read, as before."""

from __future__ import annotations

from collections import Counter
from typing import Any

from fireline.adapters import memory
from fireline.domain import quota
from fireline.services.worker import Result
from helpers.memory_system import REMAINING_MS, MemorySystem


class CountedSlots(memory.MemorySlotStore):
    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def held(self, tenant_id: str, *, consistent: bool = True) -> Any:
        self.calls["held"] += 1
        return super().held(tenant_id, consistent=consistent)

    def take(self, tenant_id: str, number: int, holder: str, **kwargs: Any) -> bool:
        self.calls["take"] += 1
        return super().take(tenant_id, number, holder, **kwargs)


def system_with(limit: int) -> tuple[MemorySystem, CountedSlots]:
    slots = CountedSlots()
    system = MemorySystem(slots=slots)
    slots.build_overrides()  # the register exists (the sweep builds it after a deploy)
    return system, slots


def test_a_first_delivery_far_below_its_limit_takes_a_slot_with_one_write_and_no_read() -> None:
    # GIVEN a tenant limited to 25 jobs at once, running none, and its job's first delivery
    system, slots = system_with(25)
    body = system.due_job()
    slots.calls.clear()
    # WHEN the worker runs it
    result = system.worker(tenant_limit=25).handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN it ran on one conditional take, without reading the tenant's slots
    assert result is Result.SUCCEEDED
    assert slots.calls == Counter({"take": 1})
    assert system.metrics.values("SlotTakenUnread") == [1]
    # AND the slot it holds is one of the tenant's 25, held by its fire
    held, _ = slots.held("tenant-a")
    assert [(s.holder, s.number < 25) for s in held] == [(body["occurrence_key"], True)]


def test_a_number_held_sends_the_take_to_the_read_and_the_limit_holds() -> None:
    # GIVEN a tenant limited to 2 jobs at once, both slots held by running jobs
    system, slots = system_with(2)
    now_ms = int(system.clock.now().timestamp() * 1000)
    for number in range(2):
        slots.take(
            "tenant-a", number, f"running-{number}", now_ms=now_ms, expires_at_ms=now_ms + 60_000
        )
    body = system.due_job()
    slots.calls.clear()
    # WHEN the worker handles its next job's first delivery
    result = system.worker(tenant_limit=2).handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN the unread take was refused, the read found no slot free, and the job waits:
    # never a third job running
    assert result is Result.DEFERRED
    assert slots.calls["take"] == 1 and slots.calls["held"] == 1
    assert system.metrics.values("SlotTakeUnreadRefused") == [1]
    held, _ = slots.held("tenant-a")
    assert sorted(s.holder for s in held) == ["running-0", "running-1"]


def test_a_tenant_the_register_does_not_know_reads_its_slots_as_before() -> None:
    # GIVEN no register of overrides yet (the sweep has not built it)
    slots = CountedSlots()
    system = MemorySystem(slots=slots)
    body = system.due_job()
    # WHEN the worker runs a first delivery
    result = system.worker(tenant_limit=25).handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN it read the tenant's slots (and its override) before taking one
    assert result is Result.SUCCEEDED
    assert slots.calls["held"] == 1
    assert system.metrics.values("SlotTakenUnread") == []


def test_a_limit_above_the_class_share_reads_to_take_the_share_too() -> None:
    # GIVEN a tenant whose override (50) is above its share of a class of 4 invocations
    # of one job each (a share of 2), in the register
    system, slots = system_with(50)
    slots.set_limit("tenant-a", 50)
    body = system.due_job()
    slots.calls.clear()
    # WHEN the worker runs its job
    worker = system.worker(tenant_limit=25, class_max_concurrency=4)
    result = worker.handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN it read the tenant's slots: the class share's slot needs them
    assert result is Result.SUCCEEDED
    assert slots.calls["held"] == 1
    assert quota.class_limit(4) == 2


def test_a_tenant_whose_slots_this_worker_took_lately_reads_instead_of_guessing() -> None:
    # GIVEN a tenant limited to 2 jobs at once whose job this worker just ran (its
    # finished run's slot is handed on, not given back: its number is held still)
    system, slots = system_with(2)
    worker = system.worker(tenant_limit=2)
    first = system.due_job()
    assert worker.handle(first, remaining_ms=lambda: REMAINING_MS) is Result.SUCCEEDED
    slots.calls.clear()
    # WHEN the same worker handles the tenant's next job's first delivery
    result = worker.handle(system.due_job(), remaining_ms=lambda: REMAINING_MS)
    # THEN it read the tenant's slots and took one: no take at random spent on a number
    # likely held
    assert result is Result.SUCCEEDED
    assert slots.calls == Counter({"held": 1, "take": 1})
    assert system.metrics.values("SlotTakeUnreadRefused") == []
