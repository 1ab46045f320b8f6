"""Deadlines every attempt can keep: refused at registration when a class's runner could
never give them, and a long job's heartbeat interval always inside its deadline."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from fireline.adapters import memory
from fireline.domain import errors, workflow
from fireline.services import schedules, worker, workflows
from helpers.memory_system import MemorySystem
from helpers.supervisors import RecordingSupervisor

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
PYTHON = {"type": "python", "handler": "noop"}


def service() -> tuple[schedules.ScheduleService, memory.MemoryScheduleStore]:
    clock = memory.FakeClock(NOW)
    store = memory.MemoryScheduleStore()
    return (
        schedules.ScheduleService(
            schedules=store,
            occurrences=memory.MemoryOccurrenceStore(),
            queue=memory.MemoryWorkQueue(clock),
            clock=clock,
        ),
        store,
    )


@pytest.mark.parametrize(
    ("job_class", "deadline"), [("short", 21), ("default", 101), ("long", 841), ("long", 3600)]
)
def test_a_deadline_longer_than_its_class_can_run_is_refused_and_nothing_is_stored(
    job_class: str, deadline: int
) -> None:
    api, store = service()
    # WHEN a schedule and a job ask for more time than their class's function can give
    draft = schedules.ScheduleDraft(
        spec="rate(1 hour)", job_class=job_class, target=PYTHON, deadline_seconds=deadline
    )
    job = schedules.JobDraft(
        delay_seconds=5, job_class=job_class, target=PYTHON, deadline_seconds=deadline
    )
    # THEN each is refused naming deadline_seconds, and nothing is stored
    with pytest.raises(errors.ValidationError) as refused:
        api.create("tenant-a", draft)
    assert refused.value.field == "deadline_seconds"
    with pytest.raises(errors.ValidationError) as refused:
        api.create_job("tenant-a", job)
    assert refused.value.field == "deadline_seconds"
    assert store.list("tenant-a", limit=10).items == []


def test_a_long_deadline_too_short_for_a_heartbeat_inside_it_is_refused() -> None:
    api, _ = service()
    job = schedules.JobDraft(delay_seconds=5, job_class="long", target=PYTHON, deadline_seconds=1)
    with pytest.raises(errors.ValidationError) as refused:
        api.create_job("tenant-a", job)
    assert refused.value.field == "deadline_seconds"


def test_an_update_to_a_deadline_its_class_cannot_give_changes_nothing() -> None:
    api, store = service()
    kept = api.create("tenant-a", schedules.ScheduleDraft(spec="rate(1 hour)", target=PYTHON))
    too_long = schedules.ScheduleDraft(
        spec="rate(1 hour)", job_class="short", target=PYTHON, deadline_seconds=60
    )
    with pytest.raises(errors.ValidationError) as refused:
        api.update("tenant-a", kept.schedule_id, too_long)
    assert refused.value.field == "deadline_seconds"
    assert store.get("tenant-a", kept.schedule_id) == kept


def test_a_workflow_node_whose_deadline_its_class_cannot_give_is_refused_by_position() -> None:
    clock = memory.FakeClock(NOW)
    store = memory.MemoryWorkflowStore()
    documents = memory.MemoryDocumentStore()
    api = workflows.WorkflowService(
        store=store, documents=documents, queue=memory.MemoryWorkQueue(clock), clock=clock
    )
    specs = [
        workflow.NodeSpec("a", PYTHON),
        workflow.NodeSpec("b", PYTHON, job_class="long", deadline_seconds=3600),
    ]
    with pytest.raises(errors.ValidationError) as refused:
        api.register("tenant-a", "wf", specs, [("a", "b")])
    assert refused.value.field == "nodes[1].deadline_seconds"
    assert store.latest_definition("tenant-a", "wf") is None
    assert documents.keys() == []


def start_long(deadline: int | None, heartbeat_seconds: int = 60) -> dict[str, Any]:
    """A long job due now, handed to the long class's worker; what its execution got."""
    system = MemorySystem()
    supervisor = RecordingSupervisor()
    jobs = system.long_jobs(supervisor, heartbeat_seconds=heartbeat_seconds)
    body = system.due_job(job_class="long", deadline_seconds=deadline)
    result = system.worker(job_class="long", long=jobs).handle(body, remaining_ms=lambda: 60_000)
    assert result is worker.Result.STARTED
    (given,) = supervisor.inputs
    return given


def test_a_long_job_without_a_deadline_gets_one_its_runner_can_give() -> None:
    # WHEN a long job that names no deadline is started
    given = start_long(None)
    # THEN each attempt's deadline fits in the runner function's 900 s, with room to
    # report the outcome, and the heartbeat interval is shorter than it
    assert given["deadline_seconds"] <= 900 - 60
    assert given["heartbeat_seconds"] < given["deadline_seconds"]


@pytest.mark.parametrize(("deadline", "heartbeat"), [(30, 60), (60, 60), (2, 60)])
def test_the_heartbeat_interval_is_always_shorter_than_the_deadline(
    deadline: int, heartbeat: int
) -> None:
    # GIVEN the deployment asks for a heartbeat every 60 s
    # WHEN a long job's deadline is that long or shorter
    given = start_long(deadline, heartbeat_seconds=heartbeat)
    # THEN the state machine is given a heartbeat interval inside the deadline (Step
    # Functions requires HeartbeatSeconds < TimeoutSeconds), at least a second
    assert given["deadline_seconds"] == deadline
    assert 1 <= given["heartbeat_seconds"] < deadline


# --- the invocation's time left ----------------------------------------------------------

FULL_MS = 120_000  # the default class's function: Timeout 120 (infra/template.yaml)


class Timed:
    """A Python runner that records the time each run is given, and runs it."""

    def __init__(self) -> None:
        self.given: list[float] = []

    def __call__(self, handler: Any, context: Any, timeout: float) -> Any:
        self.given.append(timeout)
        return handler(context)


def visible(system: MemorySystem) -> list[dict[str, Any]]:
    """The default queue's messages visible now (taken off the queue)."""
    bodies: list[dict[str, Any]] = []
    while batch := system.queue.receive("default", max_messages=10):
        for message in batch:
            bodies.append(message.body)
            system.queue.delete("default", message.receipt)
    return bodies


def late_invocation(
    deadline: int | None, left_ms: int
) -> tuple[MemorySystem, Timed, dict[str, Any], worker.Result]:
    """A worker whose invocations start with the default class's 120 s (one seen), and
    a job with ``deadline`` handled by one that has ``left_ms`` left."""
    system = MemorySystem()
    timed = Timed()
    runner = system.worker(runner=system.runner(python=timed))
    assert runner.handle(system.due_job(), remaining_ms=lambda: FULL_MS) is worker.Result.SUCCEEDED
    timed.given.clear()
    body = system.due_job(deadline_seconds=deadline)
    visible(system)  # what the creates sent (the test hands their messages over itself)
    return system, timed, body, runner.handle(body, remaining_ms=lambda: left_ms)


@pytest.mark.parametrize(("deadline", "left_ms"), [(60, 40_000), (None, 40_000), (60, 3_000)])
def test_a_job_the_invocation_cannot_give_its_deadline_goes_back_to_the_queue_unrun(
    deadline: int | None, left_ms: int
) -> None:
    # GIVEN a job whose deadline (its own 60 s, or its class's 100 s) is more than an
    # invocation with 40 s (or 3 s) left can give, though a fresh one (120 s) can
    # WHEN that invocation takes its message
    system, timed, body, result = late_invocation(deadline, left_ms)
    # THEN it is not run and spends no attempt: its row (if any) is still queued
    assert result is worker.Result.DEFERRED
    assert timed.given == []
    row = system.occurrences.get(body["occurrence_key"])
    assert row is None or (row.state.value == "queued" and row.attempts == 0)
    # AND it is sent again, at once, for another invocation (a fresh message: the one
    # taken is acknowledged, so SQS's receive count, the dead-letter redrive's, stays)
    (again,) = visible(system)
    assert again["occurrence_key"] == body["occurrence_key"]
    # AND a fresh invocation runs it with its whole deadline
    ran = system.worker(runner=system.runner(python=timed)).handle(
        again, remaining_ms=lambda: FULL_MS
    )
    assert ran is worker.Result.SUCCEEDED
    assert timed.given == [float(deadline or 100)]
    assert system.row(body).attempts == 1
    print(
        f"\na {deadline or 100} s deadline, {left_ms / 1000:.0f} s left: {result.value}, sent "
        f"again once, run with {timed.given[0]:.0f} s, attempts {system.row(body).attempts}"
    )


def test_a_job_that_fits_the_time_left_runs_with_its_whole_deadline() -> None:
    _, timed, _, result = late_invocation(30, 40_000)
    assert result is worker.Result.SUCCEEDED
    assert timed.given == [30.0]


def test_a_job_sent_back_for_time_too_often_runs_with_what_is_left() -> None:
    # GIVEN a job's message already sent back for time as often as the worker sends one
    system = MemorySystem()
    timed = Timed()
    runner = system.worker(runner=system.runner(python=timed))
    runner.handle(system.due_job(), remaining_ms=lambda: FULL_MS)
    timed.given.clear()
    body = {**system.due_job(deadline_seconds=60), "time_requeues": worker.MOST_REQUEUES_FOR_TIME}
    # WHEN it meets a late invocation once more THEN it runs with the time there is
    assert runner.handle(body, remaining_ms=lambda: 40_000) is worker.Result.SUCCEEDED
    assert timed.given == [35.0]


def test_a_deadline_no_invocation_of_the_worker_can_give_is_dead_unrun_not_sent_round() -> None:
    # GIVEN a worker whose invocations have 60 s (a function whose timeout was cut below
    # what registration allows the class: model.DEADLINES) and a job asking for 90 s
    system = MemorySystem()
    timed = Timed()
    runner = system.worker(runner=system.runner(python=timed))
    body = system.due_job(deadline_seconds=90)
    visible(system)
    # WHEN its message arrives
    result = runner.handle(body, remaining_ms=lambda: 60_000)
    # THEN it is dead at once (claimed, never run), the reason naming both times, and
    # not sent again
    assert result is worker.Result.DEAD
    assert timed.given == []
    row = system.row(body)
    assert row.state.value == "dead" and row.attempts == 1
    assert "deadline (90 s)" in (row.exit_reason or "") and "(55 s" in (row.exit_reason or "")
    assert visible(system) == []
