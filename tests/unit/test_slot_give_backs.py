"""Every slot a run takes comes back on every path that does not run it, whichever call
fails on the way (memory adapters, one store call made to fail as a throttled one does)."""

from __future__ import annotations

from typing import Any

import pytest

from fireline.adapters import memory
from fireline.domain import errors, occurrence, policies, quota
from fireline.services import schedules
from fireline.services.worker import Result
from helpers.memory_system import REMAINING_MS, MemorySystem
from helpers.supervisors import RecordingSupervisor


def remaining() -> int:
    return REMAINING_MS


class FailingSlots(memory.MemorySlotStore):
    """The memory slot store, whose calls named in ``fail`` raise as throttled ones do:
    ``fail[name] = n`` fails the n-th call of ``name`` (0: the first), once."""

    def __init__(self) -> None:
        super().__init__()
        self.fail: dict[str, int] = {}
        self.calls: dict[str, int] = {}

    def _maybe_fail(self, name: str, scope: str) -> None:
        index = self.calls.get(name, 0)
        self.calls[name] = index + 1
        if self.fail.get(name) == index:
            raise errors.Unavailable(f"{name} on {scope} throttled (test)")

    def held(self, tenant_id: str, *, consistent: bool = True) -> Any:
        self._maybe_fail("held", tenant_id)
        return super().held(tenant_id, consistent=consistent)

    def take(self, tenant_id: str, number: int, holder: str, **kwargs: Any) -> bool:
        self._maybe_fail("take", tenant_id)
        return super().take(tenant_id, number, holder, **kwargs)

    def give_back(self, tenant_id: str, number: int, holder: str) -> None:
        self._maybe_fail("give_back", tenant_id)
        super().give_back(tenant_id, number, holder)


def every_slot(system: MemorySystem, *scopes: str) -> list[quota.Slot]:
    return [
        slot for scope in scopes for slot in memory.MemorySlotStore.held(system.slots, scope)[0]
    ]


def forbid(system: MemorySystem, job_class: str = "default") -> tuple[str, dict[str, Any]]:
    item = system.service.create(
        "A",
        schedules.ScheduleDraft(
            spec="rate(1 hour)",
            target={"type": "python", "handler": "noop"},
            overlap=policies.OverlapPolicy.FORBID,
            job_class=job_class,
        ),
    )
    return quota.overlap_scope("A", item.schedule_id), system.materialize(
        item.schedule_id, tenant_id="A"
    )


def test_the_class_share_slot_comes_back_when_the_limits_take_fails() -> None:
    # GIVEN a tenant limited above its share of a class of 4 (so a run takes two slots:
    # its class share's, then its limit's)
    system = MemorySystem(slots=FailingSlots())
    slots = system.slots
    assert isinstance(slots, FailingSlots)
    worker = system.worker(tenant_limit=50, class_max_concurrency=4)
    body = system.due_job("A")
    # WHEN the take of the limit's slot (the second take) fails
    slots.fail["take"] = 1
    with pytest.raises(errors.Unavailable):
        worker.handle(body, remaining_ms=remaining)
    # THEN the class share's slot taken before it is given back: the tenant holds none
    assert every_slot(system, "A") == []
    # AND the job runs on its redelivery
    assert worker.handle(body, remaining_ms=remaining) is Result.SUCCEEDED


def test_a_long_jobs_slots_come_back_when_its_claim_fails() -> None:
    # GIVEN a forbid schedule of the long class, for a limited tenant
    system = MemorySystem()
    jobs = system.long_jobs(RecordingSupervisor())
    worker = system.worker(job_class="long", tenant_limit=50, class_max_concurrency=20, long=jobs)
    scope, body = forbid(system, "long")

    def throttled(*args: Any, **kwargs: Any) -> Any:
        raise errors.Unavailable("claim throttled (test)")

    # WHEN its claim fails after it took its tenant slots and its run slot
    claim = system.occurrences.claim
    system.occurrences.claim = throttled  # type: ignore[method-assign]
    with pytest.raises(errors.Unavailable):
        worker.handle(body, remaining_ms=remaining)
    system.occurrences.claim = claim  # type: ignore[method-assign]
    # THEN every slot comes back (held, they would last every attempt's deadline)
    assert every_slot(system, "A", scope) == []
    # AND its redelivery starts it
    assert worker.handle(body, remaining_ms=remaining) is Result.STARTED


def test_a_long_outcome_gives_back_the_run_slot_when_the_tenant_slots_give_back_fails() -> None:
    # GIVEN a started long job of a forbid schedule, holding a tenant slot and its run slot
    system = MemorySystem(slots=FailingSlots())
    slots = system.slots
    assert isinstance(slots, FailingSlots)
    jobs = system.long_jobs(RecordingSupervisor())
    worker = system.worker(job_class="long", tenant_limit=50, long=jobs)
    scope, body = forbid(system, "long")
    assert worker.handle(body, remaining_ms=remaining) is Result.STARTED
    assert {s.holder for s in every_slot(system, "A", scope)} == {body["occurrence_key"]}
    # WHEN its outcome arrives and the give-back of its tenant slot fails
    slots.fail["give_back"] = slots.calls.get("give_back", 0)
    outcome = {**body, "type": "outcome", "state": "succeeded", "attempt": 1}
    with pytest.raises(errors.Unavailable):
        worker.handle(outcome, remaining_ms=remaining)
    # THEN the run slot came back all the same (the next fire is not skipped)
    assert every_slot(system, scope) == []
    # AND the outcome's redelivery gives back the tenant slot, the outcome recorded once
    assert worker.handle(outcome, remaining_ms=remaining) is Result.SETTLED
    assert every_slot(system, "A") == []
    assert system.row(body).state is occurrence.State.SUCCEEDED
    print(
        "\none failed give-back of a long job's tenant slot: run slots held after it "
        f"{len(every_slot(system, scope))}, the outcome {system.row(body).state.value} once"
    )


def test_a_cancelled_long_job_gives_back_its_run_slot_when_the_tenant_slots_give_back_fails() -> (
    None
):
    # GIVEN a started long job of a forbid schedule
    system = MemorySystem(slots=FailingSlots())
    slots = system.slots
    assert isinstance(slots, FailingSlots)
    jobs = system.long_jobs(RecordingSupervisor())
    worker = system.worker(job_class="long", tenant_limit=50, long=jobs)
    scope, body = forbid(system, "long")
    assert worker.handle(body, remaining_ms=remaining) is Result.STARTED
    # WHEN it is cancelled and the give-back of its tenant slot fails
    slots.fail["give_back"] = slots.calls.get("give_back", 0)
    with pytest.raises(errors.Unavailable):
        jobs.cancel(system.row(body))
    # THEN its run slot came back all the same
    assert system.row(body).state is occurrence.State.CANCELLED
    assert every_slot(system, scope) == []
