"""The register of tenant limit overrides in the worker: a tenant that runs unlimited
takes no slot and reads nothing of the slots table per run; a limit set on it applies
once the worker's copy of the register is older than its cache period; a register that
is unknown (not built yet, or its read failed) leaves every tenant's limit as exact as
without it (see Worker._take_slot)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pytest

from fireline import ports
from fireline.adapters import memory
from fireline.domain import errors, quota
from fireline.services import worker as worker_service
from fireline.services.worker import Result, slot_views
from helpers.memory_system import REMAINING_MS, MemorySystem

CACHE = worker_service.OVERRIDES_CACHE_SECONDS
A, B = "tenant-a", "tenant-b"
ELSEWHERE = "gone#1#2026-05-01T11:59:00Z"  # a run in another worker, still holding its slot


class CountedSlots(memory.MemorySlotStore):
    """The memory slot store, counting the reads a worker makes (and failing the
    register's read while ``failing``)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[str] = Counter()
        self.failing = False

    def held(
        self, tenant_id: str, *, consistent: bool = True
    ) -> tuple[list[quota.Slot], int | None]:
        self.reads["held"] += 1
        return super().held(tenant_id, consistent=consistent)

    def overrides(self) -> Mapping[str, int] | None:
        self.reads["overrides"] += 1
        if self.failing:
            raise errors.Unavailable("DynamoDB is unavailable (ThrottlingException)")
        return super().overrides()


@pytest.fixture
def system() -> MemorySystem:
    return MemorySystem(slots=CountedSlots())


def slots_of(system: MemorySystem) -> CountedSlots:
    assert isinstance(system.slots, CountedSlots)
    return system.slots


def remaining() -> int:
    return REMAINING_MS


def run(system: MemorySystem, worker: worker_service.Worker, tenant_id: str) -> Result:
    return worker.handle(system.due_job(tenant_id), remaining_ms=remaining)


def held_elsewhere(slots: ports.SlotStore, tenant_id: str, system: MemorySystem) -> None:
    """Slot 0 of the tenant held by a run in another worker, for a minute."""
    now_ms = int(system.clock.now().timestamp() * 1000)
    assert slots.take(tenant_id, 0, ELSEWHERE, now_ms=now_ms, expires_at_ms=now_ms + 60_000)


def test_given_a_built_register_then_unlimited_tenants_read_nothing_of_the_slots_per_run(
    system: MemorySystem,
) -> None:
    # GIVEN a deployment without a default limit, its register built
    slots = slots_of(system)
    slots.build_overrides()
    worker = system.worker(tenant_limit=quota.UNLIMITED)
    # WHEN six jobs of two tenants run, a few seconds apart
    results = []
    for n in range(6):
        results.append(run(system, worker, A if n % 2 else B))
        system.clock.advance(1)
    # THEN every one ran, holding no slot, on one read of the register and none of the slots
    assert results == [Result.SUCCEEDED] * 6
    assert slots.reads == Counter({"overrides": 1})
    assert slots.held(A) == ([], None) and slots.held(B) == ([], None)


def test_given_an_unlimited_tenant_when_a_limit_is_set_then_it_applies_after_the_cache_period(
    system: MemorySystem,
) -> None:
    # GIVEN an unlimited tenant whose worker has read the register
    slots = slots_of(system)
    slots.build_overrides()
    worker = system.worker(tenant_limit=quota.UNLIMITED)
    assert run(system, worker, A) is Result.SUCCEEDED
    # WHEN the operator sets its limit to 1 while another worker's run holds slot 0
    slots.set_limit(A, 1)
    held_elsewhere(slots, A, system)
    # THEN a run starting within the cache period still runs as unlimited (the change is
    # not seen yet) ...
    system.clock.advance(CACHE - 1)
    assert run(system, worker, A) is Result.SUCCEEDED
    assert slots.reads["held"] == 0
    # ... and once the worker's copy is older than that, the limit is exact
    system.clock.advance(1)
    assert run(system, worker, A) is Result.DEFERRED
    assert slots.reads == Counter({"overrides": 2, "held": 1})


def test_given_a_limited_tenant_then_its_slots_are_read_and_a_lifted_limit_applies_at_the_next_read(
    system: MemorySystem,
) -> None:
    # GIVEN a deployment whose default limit is 2, tenant A overridden to no limit, and
    # tenant B at the default with both its slots held elsewhere
    slots = slots_of(system)
    slots.build_overrides()
    slots.set_limit(A, quota.UNLIMITED)
    worker = system.worker(tenant_limit=2)
    now_ms = int(system.clock.now().timestamp() * 1000)
    for number in (0, 1):
        assert slots.take(
            B,
            number,
            f"gone{number}#1#2026-05-01T11:59:00Z",
            now_ms=now_ms,
            expires_at_ms=now_ms + 60_000,
        )
    # WHEN a job of each runs
    a, b = run(system, worker, A), run(system, worker, B)
    # THEN A ran on no read of its slots, B read its own and waits for one
    assert (a, b) == (Result.SUCCEEDED, Result.DEFERRED)
    assert slots.reads == Counter({"overrides": 1, "held": 1})
    # AND WHEN B's limit is lifted, B's next run past the life of the worker's view of
    # B's slots (services.worker.slot_views) sees it in the next read: it runs
    slots.set_limit(B, quota.UNLIMITED)
    system.clock.advance(slot_views.FRESH_SECONDS)
    assert run(system, worker, B) is Result.SUCCEEDED
    assert slots.reads == Counter({"overrides": 1, "held": 2})


def test_given_overrides_from_before_the_register_then_every_limit_holds_until_it_is_built(
    system: MemorySystem,
) -> None:
    # GIVEN a deployment whose override of A (limit 1) predates the register, with A's
    # one slot held elsewhere, and no default limit
    slots = slots_of(system)
    slots.set_limit_unregistered(A, 1)
    held_elsewhere(slots, A, system)
    worker = system.worker(tenant_limit=quota.UNLIMITED)
    # WHEN a job of A and one of B run
    a, b = run(system, worker, A), run(system, worker, B)
    # THEN the register is unknown: both read their slots, as without it, and A's limit
    # holds
    assert (a, b) == (Result.DEFERRED, Result.SUCCEEDED)
    assert slots.reads == Counter({"overrides": 1, "held": 2})
    # AND WHEN the migration builds the register, then after the cache period B reads
    # nothing, and A's limit still holds
    slots.build_overrides()
    system.clock.advance(CACHE)
    assert run(system, worker, B) is Result.SUCCEEDED
    assert run(system, worker, A) is Result.DEFERRED
    assert slots.reads == Counter({"overrides": 2, "held": 3})


def test_given_the_registers_read_fails_then_runs_go_on_and_limits_hold(
    system: MemorySystem,
) -> None:
    # GIVEN a built register with A limited to 1 (its slot held elsewhere), no default
    # limit, and the register's read failing
    slots = slots_of(system)
    slots.build_overrides()
    slots.set_limit(A, 1)
    held_elsewhere(slots, A, system)
    slots.failing = True
    worker = system.worker(tenant_limit=quota.UNLIMITED)
    # WHEN jobs of A and B run
    a, b = run(system, worker, A), run(system, worker, B)
    # THEN B runs and A waits, each on a read of its own slots; the failure is counted
    # once, and the register is not asked again within the cache period
    assert (a, b) == (Result.DEFERRED, Result.SUCCEEDED)
    assert slots.reads == Counter({"overrides": 1, "held": 2})
    assert system.metrics.total("OverridesReadFailed") == 1
    # AND once the read works again (after the period), B reads nothing per run
    slots.failing = False
    system.clock.advance(CACHE)
    assert run(system, worker, B) is Result.SUCCEEDED
    assert slots.reads == Counter({"overrides": 2, "held": 2})
