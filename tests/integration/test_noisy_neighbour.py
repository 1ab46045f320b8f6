"""A noisy neighbour with real processes: tenant A's runaway Python jobs (sleeping far past
their deadline, spinning the CPU, ignoring termination) and tenant B's short ones arrive
in one batch at a worker whose class is shared out. The worker runs each attempt in a
child process (fireline.services.isolation) on the memory adapters.

Counted outcomes only: which results each job got, and which processes are left."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from fireline.adapters import threads
from fireline.domain import occurrence, quota, retry
from fireline.services import isolation, targets
from fireline.services.worker import Result
from helpers.memory_system import REMAINING_MS, MemorySystem
from helpers.processes import all_gone

# A class of ten invocations: a tenant's share is five jobs at once.
CLASS_MAX_CONCURRENCY = 10
RUNAWAY_DEADLINE_SECONDS = 3  # ample for a forked child to leave its pid first


def leave_pid(context: targets.JobContext) -> None:
    """Leave the job's process id where the test can find it."""
    Path(context.payload["pids"], str(os.getpid())).touch()


def sleep_forever(context: targets.JobContext) -> None:
    leave_pid(context)
    time.sleep(3600)


def spin_forever(context: targets.JobContext) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    leave_pid(context)
    while True:
        pass


def echo(context: targets.JobContext) -> dict[str, Any]:
    return {"payload": context.payload, "pid": os.getpid()}


def test_a_tenants_runaway_jobs_do_not_change_another_tenants_outcomes(tmp_path: Path) -> None:
    # GIVEN tenant A's six runaway jobs (a 3 s deadline, one attempt) and tenant B's
    # four short ones, in one batch, on a worker running each attempt in its own process
    system = MemorySystem()
    system.registry.register("sleep-forever")(sleep_forever)
    system.registry.register("spin-forever")(spin_forever)
    system.registry.register("echo")(echo)
    runner = system.runner(python=isolation.run_in_child_process)
    worker = system.worker(
        tenant_limit=quota.DEFAULT_LIMIT,
        class_max_concurrency=CLASS_MAX_CONCURRENCY,
        runner=runner,
    )
    pids = tmp_path / "pids"
    pids.mkdir()
    a_jobs = [
        system.due_job(
            "A",
            target={"type": "python", "handler": handler},
            payload={"pids": str(pids)},
            deadline_seconds=RUNAWAY_DEADLINE_SECONDS,
            retry=retry.RetryPolicy(max_attempts=1),
        )
        for handler in ["sleep-forever", "spin-forever"] * 3
    ]
    b_jobs = [
        system.due_job("B", target={"type": "python", "handler": "echo"}, payload={"n": n})
        for n in range(4)
    ]
    batch = [*a_jobs[:3], *b_jobs[:2], *a_jobs[3:], *b_jobs[2:]]

    # WHEN the batch is handled, its records side by side
    with threads.ThreadPool(len(batch), name="test-record") as pool:
        results = worker.handle_batch(batch, remaining_ms=lambda: REMAINING_MS, parallel=pool)
    outcome = dict(zip([b["occurrence_key"] for b in batch], results, strict=True))

    # THEN each of B's jobs succeeded on its first attempt, in a process of its own
    for body in b_jobs:
        assert outcome[body["occurrence_key"]] is Result.SUCCEEDED
        row = system.row(body)
        assert row.state is occurrence.State.SUCCEEDED and row.attempts == 1
        assert row.exit_reason == "succeeded"
    # AND A ran its share of the class (five), each stopped at its deadline; the sixth
    # waits its turn (deferred: queued, no attempt spent)
    a_results = sorted(str(outcome[body["occurrence_key"]]) for body in a_jobs)
    assert a_results == ["dead"] * 5 + ["deferred"]
    for body in a_jobs:
        row = system.row(body)
        if outcome[body["occurrence_key"]] is Result.DEAD:
            assert row.exit_reason == "deadline"
        else:
            assert row.state is occurrence.State.QUEUED and row.attempts == 0
    # AND the processes of A's stopped jobs are gone, not left running
    started = [int(p.name) for p in pids.iterdir()]
    assert len(started) == 5
    assert all_gone(started)
    # AND no tenant slot is left to a live run: A's stopped jobs gave theirs back, B's
    # finished ones leave theirs to be handed on (held by rows that are settled for good)
    assert system.slots.held("A") == ([], None)
    held, _ = system.slots.held("B")
    assert {s.holder for s in held} == {b["occurrence_key"] for b in b_jobs}
    assert all(system.row(b).state is occurrence.State.SUCCEEDED for b in b_jobs)
