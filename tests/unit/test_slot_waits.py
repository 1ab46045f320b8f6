"""A run refused its tenant slot, or whose slot read is throttled, waits in its
invocation and looks again while another record of the invocation is at work
(SlotKeeping._in_turn); alone, it is deferred (or fails) at once, as ever."""

from __future__ import annotations

from typing import Any

import pytest

from fireline.adapters import memory
from fireline.domain import errors, quota
from fireline.services.worker import Result
from helpers.memory_system import MemorySystem

# An invocation with 15 minutes left: the default class's deadline fits after a wait.
REMAINING_MS = 900_000


class ThrottledOnce(memory.MemorySlotStore):
    """The slot store, its first read of a tenant's slots throttled."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def held(self, tenant_id: str, *, consistent: bool = True) -> Any:
        self.reads += 1
        if self.reads == 1:
            raise errors.Unavailable("ProvisionedThroughputExceededException (injected)")
        return super().held(tenant_id, consistent=consistent)


def test_a_throttled_slot_read_in_a_busy_invocation_is_made_again_and_the_job_runs() -> None:
    # GIVEN a limited tenant (no register of overrides: its runs read its slots), the first
    # read of its slots throttled, and another record of the invocation at work
    slots = ThrottledOnce()
    system = MemorySystem(slots=slots)
    worker = system.worker(tenant_limit=quota.DEFAULT_LIMIT)
    body = system.due_job()
    started = system.clock.monotonic()
    # WHEN its job's record runs
    with worker._under_way.running():
        result = worker.handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN it looked again a moment later, read the slots, and ran: not failed to SQS
    assert result is Result.SUCCEEDED
    assert slots.reads == 2
    assert 0 < system.clock.monotonic() - started < 1


def test_a_throttled_slot_read_with_no_other_record_at_work_fails_at_once() -> None:
    # GIVEN the same, but no other record of the invocation at work
    slots = ThrottledOnce()
    system = MemorySystem(slots=slots)
    worker = system.worker(tenant_limit=quota.DEFAULT_LIMIT)
    body = system.due_job()
    # WHEN its job's record runs THEN the throttle fails it (SQS delivers it again): a wait
    # would keep an invocation running that had nothing else to do
    with pytest.raises(errors.Unavailable):
        worker.handle(body, remaining_ms=lambda: REMAINING_MS)
    assert slots.reads == 1
