"""A tenant's Step Functions, EventBridge and SNS targets on moto: pure dispatch, called as
the tenant's role, each fire sent under a key a retry does not duplicate.

As in tests/integration/test_aws_targets.py, the tenant's resources live in the tenant's
account (111122223333), apart from Fireline's (123456789012): only a call made as the
tenant's role reaches them, and moto does not read trust policies (what Fireline sends as
ExternalId is what these tests check). A queue behind each bus (a rule) and topic (a
subscription) shows what arrived.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from fireline import wiring
from fireline.domain import aws_target, occurrence, retry, tracing
from fireline.services import targets
from fireline.services.schedules import JobDraft
from fireline.services.worker import Result
from helpers import tenant_resources
from helpers.aws import ACCOUNT_ID, REGION
from helpers.flows import signing_key
from helpers.system import System, client_as, moto_system
from integration.test_aws_targets import (
    TENANT_ACCOUNT,
    TENANT_ROLE,
    as_tenant,
    run_job,
    sessions,
    stored_job,
)

SOURCE = "acme.reports"


@pytest.fixture
def system(monkeypatch: pytest.MonkeyPatch) -> Iterator[System]:
    with moto_system() as built:
        for name, value in built.stack.env().items():
            monkeypatch.setenv(name, value)
        wiring.reset()
        built.service.aws_targets = wiring.aws_target_policy()
        try:
            yield built
        finally:
            wiring.reset()


def tenant(service: str) -> Any:
    """A client in the tenant's own account (to set up and read its resources)."""
    return client_as(service, as_tenant())


def context_of(row: Any, attempt: int = 1) -> targets.JobContext:
    key = occurrence.parse_key(row.key)
    trace = tracing.for_fire("tenant-a", row.key, key.fire_time)
    return targets.JobContext(
        occurrence_key=row.key,
        tenant_id="tenant-a",
        schedule_id=key.schedule_id,
        fire_time=key.fire_time,
        attempt=attempt,
        payload={},
        # The fire's trace and its sampling, as the worker gives them (the same at every
        # attempt: a dispatch target's input must not change).
        trace=trace,
        sampled=tracing.is_sampled(trace.trace_id, tracing.DEFAULT_SAMPLE_RATE),
    )


# --- Step Functions --------------------------------------------------------------------------


def test_a_state_machine_target_starts_an_execution_named_after_the_occurrence(
    system: System,
) -> None:
    # GIVEN a state machine in the tenant's account
    machine = tenant_resources.state_machine(tenant)
    # WHEN a job of tenant-a targets it with the tenant's role
    result, row = run_job(
        system, {"type": "stepfunctions", "state_machine_arn": machine, "role_arn": TENANT_ROLE}
    )
    # THEN one execution exists there, named from the occurrence key, whose input is the
    # job's message
    assert result is Result.SUCCEEDED and row.state is occurrence.State.SUCCEEDED
    (execution,) = tenant_resources.executions(tenant, machine)
    assert execution["name"] == targets.execution_name("tenant-a", row.key)
    assert execution["input"]["occurrence_key"] == row.key
    assert row.result["output"] == {"execution_arn": execution["executionArn"]}
    # AND it was started as the tenant's role, with the tenant id as ExternalId
    (session,) = sessions()
    assert (session.role_arn, session.external_id) == (TENANT_ROLE, "tenant-a")


def test_a_redelivery_while_the_execution_runs_meets_that_execution(system: System) -> None:
    # GIVEN a fire whose execution still runs
    machine = tenant_resources.state_machine(tenant, definition=tenant_resources.WAITING_MACHINE)
    target = {"type": "stepfunctions", "state_machine_arn": machine, "role_arn": TENANT_ROLE}
    _, row = run_job(system, target)
    # WHEN the fire is run again, as a retry after a lost answer would (attempt 2)
    again = system.runner().run(target, context_of(row, attempt=2), timeout=5)
    # THEN Step Functions answers with the same execution (same name, same input): no
    # second one
    (execution,) = tenant_resources.executions(tenant, machine)
    assert again == {"execution_arn": execution["executionArn"]}
    assert execution["status"] == "RUNNING"
    tenant("stepfunctions").stop_execution(executionArn=execution["executionArn"])


def test_a_retry_after_the_execution_ended_succeeds_without_a_second_run(
    system: System,
) -> None:
    # GIVEN a fire whose execution has ended (stopped by the tenant here)
    machine = tenant_resources.state_machine(tenant, definition=tenant_resources.WAITING_MACHINE)
    target = {"type": "stepfunctions", "state_machine_arn": machine, "role_arn": TENANT_ROLE}
    _, row = run_job(system, target)
    (first,) = tenant_resources.executions(tenant, machine)
    tenant_resources.stop_execution(tenant, first["executionArn"])
    # WHEN the fire is delivered again (Step Functions answers ExecutionAlreadyExists)
    again = system.runner().run(target, context_of(row, attempt=1), timeout=5)
    # THEN the attempt succeeds naming the first execution, and none other was started
    assert again == {"execution_arn": first["executionArn"], "already_started": True}
    (execution,) = tenant_resources.executions(tenant, machine)
    assert execution["status"] == "ABORTED"


def test_execution_names_are_what_step_functions_accepts_and_differ_per_occurrence() -> None:
    long_key = "s" * 64 + "#12#2026-05-01T12:00:00Z"
    names = {
        targets.execution_name(t, k)
        for t in ("tenant-a", "tenant-b")
        for k in (long_key, "job_1#1#2026-05-01T12:00:00Z")
    }
    # THEN four occurrences give four names, each at most 80 of [A-Za-z0-9_-]
    assert len(names) == 4
    assert all(len(n) <= 80 and n.replace("-", "").replace("_", "").isalnum() for n in names)


# --- EventBridge -----------------------------------------------------------------------------


def test_an_event_bus_target_puts_one_event_carrying_the_occurrence_key(system: System) -> None:
    # GIVEN a bus in the tenant's account, a rule sending its events of SOURCE to a queue
    bus = tenant_resources.event_bus(tenant, source=SOURCE)
    # WHEN a job puts an event on it as the tenant's role
    result, row = run_job(
        system,
        {
            "type": "eventbridge",
            "event_bus_arn": bus.arn,
            "detail_type": "report due",
            "source": SOURCE,
            "role_arn": TENANT_ROLE,
        },
    )
    # THEN the rule's queue received one event of that source and type, whose detail
    # carries the occurrence key (EventBridge has no deduplication id: receivers use it)
    assert result is Result.SUCCEEDED
    (got,) = tenant_resources.received(tenant, bus.queue_url)
    event = got["Body"]
    assert (event["source"], event["detail-type"]) == (SOURCE, "report due")
    assert event["detail"]["occurrence_key"] == row.key
    assert row.result["output"] == {"event_id": event["id"]}
    (session,) = sessions()
    assert (session.role_arn, session.external_id) == (TENANT_ROLE, "tenant-a")


def test_a_failed_entry_of_put_events_is_a_failure_of_the_attempt(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an EventBridge that answers PutEvents 200 with the entry refused
    events = boto3.client("events", region_name=REGION)
    stubbed = Stubber(events)
    refused_entry = {
        "FailedEntryCount": 1,
        "Entries": [{"ErrorCode": "InternalFailure", "ErrorMessage": "x"}],
    }
    stubbed.add_response("put_events", refused_entry)
    runner = targets.TargetRunner(
        registry=system.registry,
        signing_key=signing_key,
        lambda_client=lambda timeout, credentials: None,
        sqs_client=lambda credentials: None,
        aws_client=lambda service, region, credentials: events,
        roles_for_targets=system.roles,
        aws_targets=system.service.aws_targets,
    )
    bus = f"arn:aws:events:{REGION}:{TENANT_ACCOUNT}:event-bus/reports"
    target = {
        "type": "eventbridge",
        "event_bus_arn": bus,
        "detail_type": "report due",
        "source": SOURCE,
        "role_arn": TENANT_ROLE,
    }
    context = targets.JobContext(
        "job_1#1#2026-05-01T12:00:00Z", "tenant-a", "job_1", system.clock.now(), 1, {}
    )
    # WHEN the target runs THEN the attempt fails, naming the entry's error code
    with stubbed, pytest.raises(targets.TargetFailed) as failed:
        runner.run(target, context, timeout=5)
    assert str(failed.value) == "eventbridge target: entry refused (InternalFailure)"
    # AND a job's attempt that meets it is retried, as any target failure is
    stubbed.add_response("put_events", refused_entry)
    monkeypatch.setattr(system, "runner", lambda: runner)
    system.service.create_job(
        "tenant-a",
        JobDraft(delay_seconds=0, target=target, retry=retry.RetryPolicy(max_attempts=2)),
    )
    system.ticker(use_lease=False).tick()
    (message,) = system.receive()
    with stubbed:
        result = system.worker().handle(message.body, remaining_ms=lambda: 60_000)
    row = system.occurrences.get(message.body["occurrence_key"])
    assert result is Result.RETRYING and row.attempts == 1


# --- SNS -------------------------------------------------------------------------------------


def test_a_topic_target_publishes_with_the_occurrence_key_as_an_attribute(system: System) -> None:
    # GIVEN a standard topic in the tenant's account with a queue subscribed
    topic = tenant_resources.topic(tenant)
    # WHEN a job publishes to it as the tenant's role
    result, row = run_job(system, {"type": "sns", "topic_arn": topic.arn, "role_arn": TENANT_ROLE})
    # THEN the queue received the message, the occurrence key its IdempotencyKey attribute
    assert result is Result.SUCCEEDED
    (got,) = tenant_resources.received(tenant, topic.queue_url)
    notification = got["Body"]
    assert json.loads(notification["Message"])["occurrence_key"] == row.key
    assert notification["MessageAttributes"]["IdempotencyKey"]["Value"] == row.key
    assert row.result["output"] == {"message_id": notification["MessageId"]}
    (session,) = sessions()
    assert (session.role_arn, session.external_id) == (TENANT_ROLE, "tenant-a")


def test_a_fifo_topic_drops_a_retried_fire_by_its_deduplication_id(system: System) -> None:
    # GIVEN a FIFO topic with a FIFO queue subscribed
    topic = tenant_resources.topic(tenant, fifo=True)
    target = {"type": "sns", "topic_arn": topic.arn, "role_arn": TENANT_ROLE}
    _, row = run_job(system, target)
    # WHEN the same fire is published again (a retry, a redelivery)
    system.runner().run(target, context_of(row, attempt=2), timeout=5)
    # THEN the queue holds the fire once, in the schedule's message group
    (got,) = tenant_resources.received(tenant, topic.queue_url)
    assert json.loads(got["Body"]["Message"])["occurrence_key"] == row.key
    assert got["Attributes"]["MessageGroupId"] == occurrence.parse_key(row.key).schedule_id
    assert got["Attributes"]["MessageDeduplicationId"] == targets.deduplication_id(row.key)


def test_a_missing_topic_fails_with_a_category_not_aws_text(system: System) -> None:
    gone = f"arn:aws:sns:{REGION}:{TENANT_ACCOUNT}:gone"
    result, row = stored_job(system, {"type": "sns", "topic_arn": gone, "role_arn": TENANT_ROLE})
    assert result is Result.DEAD
    assert row.exit_reason == "error: sns target: not found (NotFound)"
    assert TENANT_ACCOUNT not in row.exit_reason


# --- registration and run-time refusals ------------------------------------------------------


def kinds(arn_account: str = TENANT_ACCOUNT) -> list[tuple[dict[str, Any], str]]:
    return [
        (
            {
                "type": "stepfunctions",
                "state_machine_arn": f"arn:aws:states:{REGION}:{arn_account}:stateMachine:m",
            },
            "target.state_machine_arn",
        ),
        (
            {
                "type": "eventbridge",
                "event_bus_arn": f"arn:aws:events:{REGION}:{arn_account}:event-bus/b",
                "detail_type": "d",
                "source": SOURCE,
            },
            "target.event_bus_arn",
        ),
        ({"type": "sns", "topic_arn": f"arn:aws:sns:{REGION}:{arn_account}:t"}, "target.topic_arn"),
    ]


def refused(system: System, target: dict[str, Any]) -> tuple[int, str]:
    """Both creates refuse ``target`` the same way and write nothing; (status, field)."""
    answers = set()
    for path, body in (
        ("/jobs", {"delay_seconds": 0, "target": target}),
        ("/schedules", {"spec": "rate(1 minute)", "target": target}),
    ):
        status, answer = system.call("POST", path, body, tenant="tenant-a")
        assert 400 <= status < 500, answer
        answers.add((status, answer["error"]["field"]))
    assert system.schedules.list("tenant-a", limit=10).items == []
    (found,) = answers
    return found


@pytest.mark.parametrize("index", range(3), ids=["stepfunctions", "eventbridge", "sns"])
def test_a_target_without_a_role_is_refused_naming_the_role(system: System, index: int) -> None:
    target, _ = kinds()[index]
    assert refused(system, target) == (400, "target.role_arn")


@pytest.mark.parametrize("index", range(3), ids=["stepfunctions", "eventbridge", "sns"])
def test_a_resource_in_firelines_own_account_is_refused_even_with_a_role(
    system: System, index: int
) -> None:
    target, field = kinds(ACCOUNT_ID)[index]
    assert refused(system, {**target, "role_arn": TENANT_ROLE}) == (400, field)


@pytest.mark.parametrize("index", range(3), ids=["stepfunctions", "eventbridge", "sns"])
def test_an_arn_of_another_service_is_refused_naming_the_field(system: System, index: int) -> None:
    target, field = kinds()[index]
    # GIVEN each kind's ARN field holding a Lambda function's ARN
    wrong = f"arn:aws:lambda:{REGION}:{TENANT_ACCOUNT}:function:report"
    status, named = refused(system, {**target, field.split(".")[1]: wrong, "role_arn": TENANT_ROLE})
    assert (status, named) == (422, field)


def test_firelines_own_state_machine_is_refused_at_registration(system: System) -> None:
    own = system.stack.environment["LONG_JOB_STATE_MACHINE_ARN"]
    target = {"type": "stepfunctions", "state_machine_arn": own, "role_arn": TENANT_ROLE}
    assert refused(system, target) == (400, "target.state_machine_arn")


@pytest.mark.parametrize(
    ("change", "status", "field"),
    [
        ({"source": "aws.events"}, 400, "target.source"),
        ({"source": ""}, 422, "target.source"),
        ({"detail_type": "x" * 129}, 422, "target.detail_type"),
        ({"source": "acme\nreports"}, 400, "target.source"),
    ],
)
def test_an_event_entry_putevents_would_refuse_is_refused_at_registration(
    system: System, change: dict[str, str], status: int, field: str
) -> None:
    target, _ = kinds()[1]
    assert refused(system, {**target, **change, "role_arn": TENANT_ROLE}) == (status, field)


def test_a_stored_target_in_firelines_account_is_refused_at_run_time_before_any_call(
    system: System,
) -> None:
    # GIVEN a topic in Fireline's own account, with a queue subscribed
    topic = tenant_resources.topic(lambda service: client_as(service, None), "fireline-alerts")
    # WHEN a job stored around the API names it, with a tenant's role
    result, row = stored_job(
        system, {"type": "sns", "topic_arn": topic.arn, "role_arn": TENANT_ROLE}
    )
    # THEN it is refused before any AssumeRole or Publish
    assert result is Result.DEAD
    assert row.exit_reason == "error: refused: the target is not one a tenant may call"
    assert sessions() == []
    assert (
        tenant_resources.received(lambda service: client_as(service, None), topic.queue_url) == []
    )


def test_the_operators_allowlist_lets_a_tenant_name_a_topic_of_firelines_account(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = lambda service: client_as(service, None)  # noqa: E731
    topic = tenant_resources.topic(own, "acme-alerts")
    # GIVEN the operator's allowlist naming it for tenant-a
    monkeypatch.setenv("TARGET_ALLOWLIST", f"tenant-a=arn:aws:sns:*:{ACCOUNT_ID}:acme-*")
    wiring.reset()
    system.service.aws_targets = wiring.aws_target_policy()
    # WHEN tenant-a's job names it without a role THEN it is published as the worker
    result, row = run_job(system, {"type": "sns", "topic_arn": topic.arn})
    assert result is Result.SUCCEEDED and system.roles.assumed == 0
    (got,) = tenant_resources.received(own, topic.queue_url)
    assert got["Body"]["MessageAttributes"]["IdempotencyKey"]["Value"] == row.key
    # AND the same topic named by tenant-b, even with a role, is refused
    target = {"type": "sns", "topic_arn": topic.arn, "role_arn": TENANT_ROLE}
    status, body = system.call(
        "POST", "/jobs", {"delay_seconds": 0, "target": target}, tenant="tenant-b"
    )
    assert (status, body["error"]["field"]) == (400, "target.topic_arn")


def test_the_policy_names_each_kinds_resource() -> None:
    for target, _ in kinds():
        resource = aws_target.resource_of(target)
        assert resource is not None and resource.account == TENANT_ACCOUNT
