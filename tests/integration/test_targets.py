"""Targets as the deployed worker builds them (wiring's clients), against local
endpoints that misbehave the way real ones do: slow, failing, missing."""

from __future__ import annotations

import http.server
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from fireline import wiring
from fireline.domain import errors, model, occurrence, retry, schedule, workflow
from fireline.services import roles, targets
from fireline.services.schedules import JobDraft, ScheduleDraft
from fireline.services.worker import Result
from helpers.flows import signing_key
from helpers.memory_system import NOW, REMAINING_MS, MemorySystem, missing_workflows
from helpers.supervisors import RecordingSupervisor
from helpers.system import System

FUNCTION_ARN = "arn:aws:lambda:us-east-1:123456789012:function:tenant-report"


class SlowLambda:
    """A Lambda endpoint whose function outlives every deadline: it counts each Invoke
    request and answers none until the test ends."""

    def __init__(self) -> None:
        self.invocations = 0
        self.released = threading.Event()
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                endpoint.invocations += 1
                endpoint.released.wait()  # the function is still running

            def log_message(self, *args: Any) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> SlowLambda:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def deployment_env(endpoint: str) -> dict[str, str]:
    """What the template gives a worker function, pointed at a local endpoint."""
    names = ("SCHEDULES_TABLE", "OCCURRENCES_TABLE", "LEASES_TABLE", "IDEMPOTENCY_TABLE")
    env = {name: "unused" for name in names}
    env |= {f"QUEUE_URL_{c.upper()}": f"{endpoint}/queue/{c}" for c in ("default", "short", "long")}
    env |= {
        "SIGNING_SECRET_PREFIX": "fireline/test/signing/",
        "AWS_ENDPOINT_URL": endpoint,
        "JOB_CLASS": "short",
        # The operator's allowlist: this tenant's functions without a role of its own.
        "TARGET_ALLOWLIST": "tenant-a=arn:aws:lambda:us-east-1:123456789012:function:tenant-*",
    }
    return env


@pytest.fixture
def slow_lambda(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowLambda]:
    with SlowLambda() as endpoint:
        for name, value in deployment_env(endpoint.url).items():
            monkeypatch.setenv(name, value)
        wiring.reset()
        try:
            yield endpoint
        finally:
            wiring.reset()


def test_a_lambda_target_slower_than_its_deadline_is_invoked_once_and_fails_with_deadline(
    slow_lambda: SlowLambda,
) -> None:
    system = MemorySystem()
    system.service.aws_targets = wiring.aws_target_policy()  # the operator's allowlist
    # GIVEN a job whose Lambda target runs longer than the job's 1 s deadline
    body = system.due_job(
        job_class="short",
        target={"type": "lambda", "function_arn": FUNCTION_ARN},
        deadline_seconds=1,
        retry=retry.RetryPolicy(max_attempts=3),
    )
    worker = system.worker(job_class="short", runner=wiring.target_runner())
    # WHEN the worker runs it with the deployment's Lambda client
    result = worker.handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN the function was invoked once (no SDK retry after the request was sent), and
    # the attempt failed with reason deadline, to be retried under the job's policy
    assert slow_lambda.invocations == 1
    assert result is Result.RETRYING
    row = system.row(body)
    assert (row.state, row.exit_reason, row.attempts) == (occurrence.State.FAILED, "deadline", 1)


# --- every failure of a target is an outcome -----------------------------------------------


def stubbed(service: str, operation: str, code: str, status: int) -> Any:
    """A real botocore client whose call answers with the error AWS gives."""
    client = boto3.client(service, region_name="us-east-1")
    stubber = Stubber(client)
    for _ in range(3):
        stubber.add_client_error(operation, service_error_code=code, http_status_code=status)
    stubber.activate()
    return client


QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/gone"
TENANT_ROLE = "arn:aws:iam::123456789012:role/fireline-target/tenant-a-jobs"


class FixedSts:
    """STS that hands out credentials for any role (the tenant's trust is not the
    question here; the target's own failure is)."""

    def assume_role(self, **kwargs: Any) -> dict[str, Any]:
        return {
            "Credentials": {
                "AccessKeyId": "ASIATENANTA",
                "SecretAccessKey": "secret",
                "SessionToken": "token",
                "Expiration": NOW.replace(year=NOW.year + 1),
            }
        }


AS_TENANT = {"roles_for_targets": roles.RoleAssumer(lambda credentials: FixedSts())}
FAILING_TARGETS = [
    pytest.param(
        {"type": "lambda", "function_arn": FUNCTION_ARN, "role_arn": TENANT_ROLE},
        {
            "lambda_client": lambda timeout, credentials: stubbed(
                "lambda", "invoke", "ResourceNotFoundException", 404
            ),
            **AS_TENANT,
        },
        "ResourceNotFoundException",
        id="missing lambda",
    ),
    pytest.param(
        {"type": "lambda", "function_arn": FUNCTION_ARN, "role_arn": TENANT_ROLE},
        {
            "lambda_client": lambda timeout, credentials: stubbed(
                "lambda", "invoke", "AccessDeniedException", 403
            ),
            **AS_TENANT,
        },
        "AccessDeniedException",
        id="access error",
    ),
    pytest.param(
        {"type": "sqs", "queue_url": QUEUE_URL, "role_arn": TENANT_ROLE},
        {
            "sqs_client": lambda credentials: stubbed(
                "sqs", "send_message", "AWS.SimpleQueueService.NonExistentQueue", 400
            ),
            **AS_TENANT,
        },
        "NonExistentQueue",
        id="missing queue",
    ),
    pytest.param(
        {"type": "workflow", "workflow_id": "gone"},
        {"workflows": missing_workflows},
        "no workflow 'gone'",
        id="missing workflow",
    ),
    pytest.param(
        {"type": "http", "url": "http://127.0.0.1:9/hook", "headers": {"X-Tag": "a\r\nX-Evil: 1"}},
        {},
        "header",
        id="CR/LF in a header",
    ),
    pytest.param(
        {"type": "http", "url": "http://127.0.0.1:9/hook", "headers": {"": "value"}},
        {},
        "header",
        id="empty header name",
    ),
]


@pytest.mark.parametrize(("target", "clients", "reason"), FAILING_TARGETS)
def test_a_target_that_fails_in_any_way_is_retried_then_dead_and_listed(
    target: dict[str, Any], clients: dict[str, Any], reason: str
) -> None:
    system = MemorySystem()
    # GIVEN a stored job whose target fails when called (stored as it is: a target from
    # before registration checked it, or one that went away since)
    job = model.Schedule(
        tenant_id="tenant-a",
        schedule_id="job_failing",
        timing=schedule.Timing(spec=schedule.AtSpec(when=system.clock.now())),
        spec_text="at(2026-05-01T12:00:00Z)",
        kind=model.Kind.JOB,
        target=target,
        retry=retry.RetryPolicy(max_attempts=3, base_seconds=1),
        next_fire=system.clock.now(),
    )
    system.schedules.create(job)
    body = system.materialize(job.schedule_id)
    runner = targets.TargetRunner(
        registry=system.registry,
        signing_key=signing_key,
        **{
            "lambda_client": lambda timeout, credentials: None,
            "sqs_client": lambda credentials: None,
            **clients,
        },
    )
    worker = system.worker(runner=runner)
    # WHEN each delivery runs it
    results = []
    for _ in range(3):
        results.append(worker.handle(body, remaining_ms=lambda: REMAINING_MS))
        system.clock.advance(60)
    # THEN each attempt was an outcome: retried with backoff, then dead after the third,
    # with the reason recorded, and listed as a dead letter
    assert results == [Result.RETRYING, Result.RETRYING, Result.DEAD]
    row = system.row(body)
    assert (row.state, row.attempts) == (occurrence.State.DEAD, 3)
    assert row.exit_reason is not None and row.exit_reason.startswith("error: ")
    assert reason in row.exit_reason
    assert [r.key for r in system.service.dead_letters("tenant-a").items] == [row.key]
    # AND a fourth delivery (the last retry's message) runs nothing
    assert worker.handle(body, remaining_ms=lambda: REMAINING_MS) is Result.SETTLED


def test_an_attempt_that_ended_without_an_outcome_counts_and_the_cap_holds() -> None:
    system = MemorySystem()
    calls = []

    def killed(context: targets.JobContext) -> None:
        calls.append(context.attempt)
        raise Killed  # the invocation dies mid-job: no outcome recorded

    system.registry.register("killed")(killed)
    # GIVEN a job allowed one attempt, whose invocation is killed while it runs
    body = system.due_job(
        target={"type": "python", "handler": "killed"}, retry=retry.RetryPolicy(max_attempts=1)
    )
    worker = system.worker()
    with pytest.raises(Killed):
        worker.handle(body, remaining_ms=lambda: 10_000)
    # WHEN SQS redelivers after the dead invocation's claim ran out
    system.clock.advance(11)
    result = worker.handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN no second attempt runs: the occurrence is dead and listed, its attempts capped
    assert result is Result.DEAD
    assert calls == [1]
    row = system.row(body)
    assert (row.state, row.attempts) == (occurrence.State.DEAD, 1)
    assert [r.key for r in system.service.dead_letters("tenant-a").items] == [row.key]


class Killed(BaseException):
    """The Lambda is killed mid-job (timeout, OOM): nothing after this line runs."""


# --- refused at registration ---------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{"X-Tag": "a\r\nX-Evil: 1"}, {"": "v"}, {"X Tag": "v"}, {"X-Fireline-Signature": "forged"}],
    ids=["CR/LF in a value", "empty name", "space in a name", "a header Fireline sets"],
)
def test_an_http_target_whose_headers_no_call_could_send_is_refused_in_code(
    headers: dict[str, str],
) -> None:
    system = MemorySystem()
    target = {"type": "http", "url": "https://hooks.example.com/x", "headers": headers}
    # WHEN a schedule, a job and a workflow node are registered with it
    with pytest.raises(errors.ValidationError) as refused:
        system.service.create("tenant-a", ScheduleDraft(spec="rate(1 hour)", target=target))
    assert refused.value.field == "target.headers"
    with pytest.raises(errors.ValidationError) as refused:
        system.service.create_job("tenant-a", JobDraft(delay_seconds=5, target=target))
    assert refused.value.field == "target.headers"
    flows = missing_workflows()
    with pytest.raises(errors.ValidationError) as refused:
        flows.register("tenant-a", "wf", [workflow.NodeSpec("a", target)], [])
    # THEN each is refused naming the field, and nothing is stored
    assert refused.value.field == "nodes[0].target.headers"
    assert system.schedules.list("tenant-a", limit=10).items == []
    assert not flows.exists("tenant-a", "wf")


# --- AWS's size limits ---------------------------------------------------------------------


class CapturingSqs:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send_message(self, **kwargs: Any) -> dict[str, Any]:
        self.sent.append(kwargs)
        return {"MessageId": f"m-{len(self.sent)}"}


# MessageGroupId: 1-128 characters, alphanumeric and punctuation.
GROUP_ID = re.compile(r"[A-Za-z0-9!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]{1,128}")


def test_a_fifo_target_gets_a_message_group_id_sqs_accepts_for_the_longest_node() -> None:
    sqs = CapturingSqs()
    runner = targets.TargetRunner(
        registry=targets.Registry(),
        signing_key=signing_key,
        lambda_client=lambda timeout, credentials: None,
        sqs_client=lambda credentials: sqs,
        **AS_TENANT,
    )
    target = {
        "type": "sqs",
        "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/jobs.fifo",
        "role_arn": TENANT_ROLE,
    }
    # GIVEN workflow nodes with the longest ids a node may have, in a run of the longest id
    run_id = "r" + "0" * 24
    nodes = ["n" * 128, "n" * 127 + "m"]
    for node_id in [*nodes, nodes[0]]:
        schedule_id = workflow.node_schedule_id(run_id, node_id)
        context = targets.JobContext(
            occurrence_key=f"{schedule_id}#1#2026-05-01T12:00:00Z",
            tenant_id="tenant-a",
            schedule_id=schedule_id,
            fire_time=NOW,
            attempt=1,
            payload={},
        )
        # WHEN each is sent to a FIFO queue
        runner.run(target, context, timeout=5)
    # THEN each group id is one SQS accepts, one per node (the same node keeps its group)
    groups = [sent["MessageGroupId"] for sent in sqs.sent]
    assert all(GROUP_ID.fullmatch(g) for g in groups), groups
    assert groups[0] != groups[1] and groups[0] == groups[2]


def test_a_result_larger_than_an_item_holds_is_recorded_bounded(system: System) -> None:
    # GIVEN a job whose handler returns more than a DynamoDB item may hold (400 KB)
    system.registry.register("big")(lambda context: "x" * 600_000)
    system.service.create_job(
        "tenant-a", JobDraft(delay_seconds=0, target={"type": "python", "handler": "big"})
    )
    system.ticker(use_lease=False).tick()
    (message,) = system.receive()
    # WHEN it runs
    result = system.worker().handle(message.body, remaining_ms=lambda: REMAINING_MS)
    # THEN its success is recorded, with a bounded account of the output in place of it
    assert result is Result.SUCCEEDED
    row = system.occurrences.get(message.body["occurrence_key"])
    assert row is not None and row.state is occurrence.State.SUCCEEDED
    assert row.result is not None
    output = row.result["output"]
    assert output["truncated"] is True and output["bytes"] == 600_002
    assert len(json.dumps(row.result)) <= targets.MAX_OUTPUT_BYTES


def test_a_long_jobs_output_progress_and_error_stay_within_step_functions_limits() -> None:
    system = MemorySystem()
    supervisor = RecordingSupervisor()
    jobs = system.long_jobs(supervisor)

    def big(context: targets.JobContext) -> str:
        context.progress({"log": "p" * 500_000})
        return "x" * 300_000

    def loud(context: targets.JobContext) -> None:
        raise targets.TargetFailed("e" * 100_000)

    system.registry.register("big")(big)
    system.registry.register("loud")(loud)
    for handler in ("big", "loud"):
        body = system.due_job(job_class="long", target={"type": "python", "handler": handler})
        system.worker(job_class="long", long=jobs).handle(body, remaining_ms=lambda: 60_000)
        # WHEN the runner runs its attempt
        jobs.run_task(
            {**body, "task_token": f"t-{handler}", "attempt": 1},
            remaining_ms=lambda: 600_000,
        )
        row = system.row(body)
        # THEN the progress stored on the row is bounded
        assert len(json.dumps(row.progress)) <= targets.MAX_OUTPUT_BYTES
    # AND the output handed to Step Functions is under its 256 KB, and a failure's cause
    # under its 32,768 characters
    ((output), (error, cause)) = (*supervisor.succeeded, *supervisor.failed)
    assert len(json.dumps(output)) <= 256 * 1024
    assert output["result"]["truncated"] is True
    assert len(cause) <= 32_768 and error == "JobFailed"
