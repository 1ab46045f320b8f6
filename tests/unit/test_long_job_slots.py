"""A long job holds its tenant's slot for as long as it may run (every attempt and
backoff), and gives it back when it ends or is cancelled (memory adapters)."""

from __future__ import annotations

from typing import Any

from fireline.domain import occurrence, retry
from fireline.services import worker
from helpers.memory_system import MemorySystem
from helpers.supervisors import RecordingSupervisor

POLICY = retry.RetryPolicy(max_attempts=3, base_seconds=10, jitter=retry.Jitter.NONE)


def long_job(system: MemorySystem) -> dict[str, Any]:
    return system.due_job(job_class="long", deadline_seconds=100, retry=POLICY)


def test_a_long_job_keeps_its_slot_through_every_attempt_so_its_tenant_stays_in_its_limit() -> None:
    system = MemorySystem()
    supervisor = RecordingSupervisor()
    long_worker = system.worker(job_class="long", tenant_limit=1, long=system.long_jobs(supervisor))
    # GIVEN a tenant allowed one job at a time, running a long job of three 100 s attempts
    first = long_job(system)
    assert long_worker.handle(first, remaining_ms=lambda: 60_000) is worker.Result.STARTED
    # WHEN its first attempt is over (deadline + a minute) and its second is running
    system.clock.advance(100 + 60 + 10 + 30)
    assert system.row(first).state is occurrence.State.RUNNING
    second = long_job(system)
    result = long_worker.handle(second, remaining_ms=lambda: 60_000)
    # THEN the tenant's second job waits: it is deferred, not started beside the first
    assert result is worker.Result.DEFERRED
    assert len(supervisor.inputs) == 1
    # WHEN the first job's outcome arrives
    outcome = {"type": "outcome", "occurrence_key": first["occurrence_key"], "state": "succeeded"}
    assert long_worker.handle(outcome, remaining_ms=lambda: 60_000) is worker.Result.SUCCEEDED
    # THEN the second starts
    assert long_worker.handle(second, remaining_ms=lambda: 60_000) is worker.Result.STARTED


def test_cancelling_a_running_long_job_gives_its_slot_back_at_once() -> None:
    system = MemorySystem()
    supervisor = RecordingSupervisor()
    long_worker = system.worker(job_class="long", tenant_limit=1, long=system.long_jobs(supervisor))
    system.service.long_jobs = system.long_jobs(supervisor)
    first = long_job(system)
    assert long_worker.handle(first, remaining_ms=lambda: 60_000) is worker.Result.STARTED
    # WHEN the tenant cancels it while it runs
    job_id = system.row(first).schedule_id
    assert system.service.cancel_job("tenant-a", job_id).state == "cancelled"
    assert len(supervisor.stopped) == 1
    # THEN its slot is free for the tenant's next job at once
    second = long_job(system)
    assert long_worker.handle(second, remaining_ms=lambda: 60_000) is worker.Result.STARTED
