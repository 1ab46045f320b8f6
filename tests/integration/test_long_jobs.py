"""Long jobs on moto's Step Functions interpreter: heartbeats, deadlines, cancel, isolation.

The state machine is the real definition (statemachines/long_job.asl.json) with the
template's substitutions; moto runs it in real time, so heartbeat windows here are a few
seconds.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from fireline.domain import occurrence, retry
from fireline.services import long_jobs, targets
from fireline.services.schedules import JobDraft
from fireline.services.worker import Result, Worker
from helpers.aws import REGION
from helpers.system import System


class Plant:
    """Plays the two event source mappings of the long class in real time: the long
    queue feeds the worker (starts, outcomes), the task queue feeds the runner (attempts,
    each in its own thread as each would be its own Lambda)."""

    def __init__(self, system: System, lj: long_jobs.LongJobs, *, run_tasks: bool = True) -> None:
        self.system = system
        self.long_jobs = lj
        self.worker: Worker = system.worker(job_class="long", long=lj)
        self.run_tasks = run_tasks
        self.results: list[Result] = []
        self.tasks: list[dict[str, Any]] = []
        self.threads: list[threading.Thread] = []

    def pump(self, until: Callable[[], bool], timeout: float = 30) -> None:
        sqs = self.system.sqs_client
        task_queue = self.system.stack.queues["LongTaskQueue"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for message in self.system.queue.receive(
                "long", max_messages=10, visibility_timeout=900
            ):
                self.results.append(self.worker.handle(message.body, remaining_ms=lambda: 60_000))
                self.system.queue.delete("long", message.receipt)
            for raw in sqs.receive_message(QueueUrl=task_queue, MaxNumberOfMessages=10).get(
                "Messages", []
            ):
                sqs.delete_message(QueueUrl=task_queue, ReceiptHandle=raw["ReceiptHandle"])
                body = json.loads(raw["Body"])
                self.tasks.append(body)
                if self.run_tasks:
                    thread = threading.Thread(
                        target=self.long_jobs.run_task,
                        args=(body,),
                        kwargs={"remaining_ms": lambda: 900_000},
                        daemon=True,
                    )
                    thread.start()
                    self.threads.append(thread)
            if until():
                return
            time.sleep(0.1)
        raise AssertionError("timed out waiting")


def long_job(system: System, handler: str, **fields: Any) -> tuple[str, str]:
    view = system.service.create_job(
        "tenant-a",
        JobDraft(
            delay_seconds=0,
            job_class="long",
            target={"type": "python", "handler": handler},
            **fields,
        ),
    )
    system.ticker(use_lease=False).tick()
    key = occurrence.occurrence_key(view.job.schedule_id, view.job.version, view.fire_time)
    assert system.log.sent[key] >= 1  # its message is on its way (its row comes with the run)
    return key, view.job.schedule_id


def state_of(system: System, key: str) -> occurrence.State:
    return system.occurrences.get(key).state


@pytest.fixture
def lj(system: System) -> long_jobs.LongJobs:
    built = system.long_jobs(heartbeat_seconds=2)
    system.service.long_jobs = built
    return built


def test_a_long_job_that_heartbeats_finishes_with_its_progress_visible(
    system: System, lj: long_jobs.LongJobs
) -> None:
    # GIVEN a job that works for 4 s (twice the heartbeat window) reporting progress
    def steady(context: targets.JobContext) -> str:
        for step in range(8):
            time.sleep(0.5)
            context.progress({"step": step + 1, "of": 8})
        return "done"

    system.registry.register("steady")(steady)
    key, job_id = long_job(system, "steady")
    plant = Plant(system, lj)
    # WHEN the long class runs it
    plant.pump(until=lambda: state_of(system, key) is occurrence.State.SUCCEEDED)
    # THEN it succeeded in one attempt, and GET shows its last progress
    status, job = system.call("GET", f"/jobs/{job_id}")
    assert status == 200 and job["state"] == "succeeded"
    assert job["occurrence"]["progress"] == {"step": 8, "of": 8}
    assert job["occurrence"]["attempts"] == 1
    assert Result.STARTED in plant.results and Result.SUCCEEDED in plant.results


def test_a_long_job_that_stops_heartbeating_fails_with_a_heartbeat_timeout(
    system: System, lj: long_jobs.LongJobs
) -> None:
    # GIVEN a runner that takes each attempt and then goes silent (it died)
    system.registry.register("silent")(lambda context: None)
    policy = retry.RetryPolicy(
        max_attempts=2, base_seconds=1, cap_seconds=1, jitter=retry.Jitter.NONE
    )
    key, _ = long_job(system, "silent", retry=policy)
    plant = Plant(system, lj, run_tasks=False)
    # WHEN the heartbeat window passes on every attempt
    plant.pump(until=lambda: state_of(system, key) is occurrence.State.DEAD, timeout=40)
    # THEN both attempts were handed out, and the job is dead for the heartbeat timeout
    assert [t["attempt"] for t in plant.tasks] == [1, 2]
    row = system.occurrences.get(key)
    assert row.exit_reason == "heartbeat timeout"
    assert system.call("GET", "/dead-letters")[1]["items"][0]["key"] == key


def test_a_long_job_past_its_deadline_fails_with_reason_deadline(
    system: System, lj: long_jobs.LongJobs
) -> None:
    system.registry.register("endless")(lambda context: time.sleep(30))
    key, _ = long_job(
        system, "endless", deadline_seconds=3, retry=retry.RetryPolicy(max_attempts=1)
    )
    plant = Plant(system, lj)
    plant.pump(until=lambda: state_of(system, key) is occurrence.State.DEAD, timeout=40)
    assert system.occurrences.get(key).exit_reason == "deadline"


def test_cancel_stops_a_running_long_job_and_records_cancelled(
    system: System, lj: long_jobs.LongJobs
) -> None:
    gate = threading.Event()
    system.registry.register("waits")(lambda context: gate.wait(timeout=30))
    key, job_id = long_job(system, "waits")
    plant = Plant(system, lj)
    plant.pump(until=lambda: bool(system.occurrences.get(key).task_token))
    execution = system.occurrences.get(key).execution
    # WHEN the tenant cancels it
    status, job = system.call("POST", f"/jobs/{job_id}/cancel")
    # THEN it is cancelled and its execution stopped
    assert status == 200 and job["state"] == "cancelled"
    sfn = boto3.client("stepfunctions", region_name=REGION)
    for _ in range(50):  # the interpreter stops the execution on its own thread
        if sfn.describe_execution(executionArn=execution)["status"] != "RUNNING":
            break
        time.sleep(0.1)
    # AWS reports a stopped execution as ABORTED; moto's interpreter as FAILED.
    assert sfn.describe_execution(executionArn=execution)["status"] in ("ABORTED", "FAILED")
    # AND the runner finishing afterwards changes nothing
    gate.set()
    for thread in plant.threads:
        thread.join(timeout=10)
    assert state_of(system, key) is occurrence.State.CANCELLED
    assert system.call("POST", f"/jobs/{job_id}/heartbeat", {"progress": {"x": 1}})[0] == 409
    # AND no further attempt was handed out
    time.sleep(1)
    plant.pump(until=lambda: True)
    assert [t["attempt"] for t in plant.tasks] == [1]
    assert state_of(system, key) is occurrence.State.CANCELLED


def test_tenant_heartbeat_keeps_a_job_alive_and_stores_progress(
    system: System, lj: long_jobs.LongJobs
) -> None:
    # GIVEN a runner whose own handler does not heartbeat (the tenant's process does)
    system.registry.register("external")(lambda context: None)
    key, job_id = long_job(system, "external", retry=retry.RetryPolicy(max_attempts=1))
    plant = Plant(system, lj, run_tasks=False)
    plant.pump(until=lambda: bool(plant.tasks))
    lj.occurrences.annotate_running(key, task_token=plant.tasks[0]["task_token"])
    # WHEN the tenant heartbeats through the API past several heartbeat windows (at once,
    # then every half window: the window runs from the task's start, so a first heartbeat
    # a second late, or a gap of a second and a slow call on a loaded machine, could miss it)
    for step in range(9):
        time.sleep(0.5 if step else 0)
        status, job = system.call("POST", f"/jobs/{job_id}/heartbeat", {"progress": {"step": step}})
        assert status == 200
    # THEN it is still running with the latest progress (no heartbeat timeout)
    assert job["state"] == "running"
    assert job["occurrence"]["progress"] == {"step": 8}
    lj.supervisor.succeed(plant.tasks[0]["task_token"], {"result": "ok"})
    plant.pump(until=lambda: state_of(system, key) is occurrence.State.SUCCEEDED)


def test_a_repeated_start_converges_on_one_execution(
    system: System, lj: long_jobs.LongJobs
) -> None:
    gate = threading.Event()
    system.registry.register("waits")(lambda context: gate.wait(timeout=30))
    key, _ = long_job(system, "waits")
    (message,) = system.queue.receive("long", visibility_timeout=900)
    assert message.body["occurrence_key"] == key
    worker = system.worker(job_class="long", long=lj)
    assert worker.handle(message.body, remaining_ms=lambda: 60_000) is Result.STARTED
    # WHEN the same message is delivered again
    assert worker.handle(message.body, remaining_ms=lambda: 60_000) is Result.SETTLED
    # THEN there is one execution
    sfn = boto3.client("stepfunctions", region_name=REGION)
    machine = system.stack.environment["LONG_JOB_STATE_MACHINE_ARN"]
    assert len(sfn.list_executions(stateMachineArn=machine)["executions"]) == 1
    gate.set()


def test_a_thirty_minute_job_does_not_hold_up_one_second_jobs(
    system: System, lj: long_jobs.LongJobs
) -> None:
    # GIVEN a long job that runs "30 minutes" (until the test releases it)...
    release = threading.Event()
    system.registry.register("half-hour")(lambda context: release.wait(timeout=60))
    system.registry.register("second")(lambda context: None)
    key, _ = long_job(system, "half-hour")
    plant = Plant(system, lj)
    plant.pump(until=lambda: bool(system.occurrences.get(key).task_token))
    # ...and 20 one-second jobs in the short class
    quick = [
        system.service.create_job(
            "tenant-b",
            JobDraft(
                delay_seconds=0, job_class="short", target={"type": "python", "handler": "second"}
            ),
        )
        for _ in range(20)
    ]
    system.ticker(use_lease=False).tick()
    # WHEN the short class's worker drains its queue
    worker = system.worker(job_class="short")
    for message in system.queue.receive("short", max_messages=10) + system.queue.receive(
        "short", max_messages=10
    ):
        assert worker.handle(message.body, remaining_ms=lambda: 30_000) is Result.SUCCEEDED
    # THEN every short job finished while the long one is still running
    assert {system.service.get_job("tenant-b", q.job.schedule_id).state for q in quick} == {
        "succeeded"
    }
    assert state_of(system, key) is occurrence.State.RUNNING
    print(f"\n{len(quick)} one-second jobs succeeded while the 30-minute job ran")
    release.set()
    plant.pump(until=lambda: state_of(system, key) is occurrence.State.SUCCEEDED)
