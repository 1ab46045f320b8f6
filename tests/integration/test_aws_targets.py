"""A tenant's Lambda and SQS targets on moto: called as the tenant's role, or not at all.

moto gives the credentials of an assumed role the role's own account, so a tenant's
function and queue here live in the tenant's account (111122223333), apart from
Fireline's (123456789012): only a call made as the tenant's role reaches them.

What moto does not do: it hands out credentials for any role without reading its trust
policy (neither the principal nor the ``sts:ExternalId`` condition is checked). So these
tests check what Fireline controls: that it sends the tenant id as ExternalId and a session
name naming the tenant, that it calls with the credentials it got, and that without a role
(or the operator's allowlist) it calls nothing at all. What moto does check, when asked
(its INITIAL_NO_AUTH_ACTION_COUNT): an assumed role's own permissions policies, on every
request made with its credentials; one test turns that on around the targets' calls.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import settings as moto_settings
from moto.awslambda_simple.models import lambda_simple_backends
from moto.sts.models import sts_backends

from fireline import wiring
from fireline.domain import aws_target, errors, model, occurrence, retry, schedule, workflow
from fireline.services import roles, targets
from fireline.services.schedules import JobDraft
from fireline.services.worker import Result
from helpers.aws import ACCOUNT_ID, REGION
from helpers.memory_system import missing_workflows
from helpers.system import System, client_as, moto_system

TENANT_ACCOUNT = "111122223333"
TENANT_ROLE = f"arn:aws:iam::{TENANT_ACCOUNT}:role/fireline-target/fireline-jobs"


def remaining() -> int:
    return 60_000


@pytest.fixture
def system(monkeypatch: pytest.MonkeyPatch) -> Iterator[System]:
    with moto_system(lambda_without_docker=True) as built:
        # The deployment's own rules, composed by wiring from the template's environment.
        for name, value in built.stack.env().items():
            monkeypatch.setenv(name, value)
        wiring.reset()
        built.service.aws_targets = wiring.aws_target_policy()
        try:
            yield built
        finally:
            wiring.reset()


def as_tenant(account: str = TENANT_ACCOUNT) -> roles.Credentials:
    """Credentials in ``account`` (the tenant's own, for setting up its resources)."""
    answer = boto3.client("sts", region_name=REGION).assume_role(
        RoleArn=f"arn:aws:iam::{account}:role/admin", RoleSessionName="tenant-admin"
    )["Credentials"]
    return roles.Credentials(
        answer["AccessKeyId"],
        answer["SecretAccessKey"],
        answer["SessionToken"],
        answer["Expiration"].timestamp(),
    )


def tenant_queue(name: str = "reports") -> str:
    return client_as("sqs", as_tenant()).create_queue(QueueName=name)["QueueUrl"]  # type: ignore[no-any-return]


def tenant_function(name: str = "report") -> str:
    admin = as_tenant()
    role = client_as("iam", admin).create_role(
        RoleName="report-runtime",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "lambda.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return event\n")
    return client_as("lambda", admin).create_function(  # type: ignore[no-any-return]
        FunctionName=name,
        Runtime="python3.11",
        Role=role,
        Handler="handler.handler",
        Code={"ZipFile": code.getvalue()},
    )["FunctionArn"]


def sessions(account: str = TENANT_ACCOUNT) -> list[Any]:
    """The AssumeRole calls Fireline made for roles in ``account`` (moto's record)."""
    return [
        r for r in sts_backends[account]["aws"].assumed_roles if r.session_name != "tenant-admin"
    ]


def run_job(system: System, target: dict[str, Any], tenant: str = "tenant-a") -> Any:
    system.service.create_job(tenant, JobDraft(delay_seconds=0, target=target))
    system.ticker(use_lease=False).tick()
    (message,) = system.receive()
    result = system.worker().handle(message.body, remaining_ms=remaining)
    return result, system.occurrences.get(message.body["occurrence_key"])


def stored_job(system: System, target: dict[str, Any], tenant: str = "tenant-a") -> Any:
    """A job written around the API (or before today's rules): registration never saw
    its target. The worker's own checks are all that stands between it and the call."""
    now = system.clock.now()
    job = model.Schedule(
        tenant_id=tenant,
        schedule_id="job_stored",
        timing=schedule.Timing(spec=schedule.AtSpec(when=now)),
        spec_text="at(2026-05-01T12:00:00Z)",
        kind=model.Kind.JOB,
        target=target,
        retry=retry.RetryPolicy(max_attempts=1),
        next_fire=now,
    )
    system.schedules.create(job)
    system.ticker(use_lease=False).tick()
    (message,) = system.receive()
    result = system.worker().handle(message.body, remaining_ms=remaining)
    return result, system.occurrences.get(message.body["occurrence_key"])


# --- with the tenant's role ----------------------------------------------------------------


def test_a_queue_target_is_sent_to_as_the_tenants_role_with_its_tenant_id_as_external_id(
    system: System,
) -> None:
    # GIVEN a queue in the tenant's own account, and a role there for Fireline
    url = tenant_queue()
    # WHEN a job of tenant-a targets it with that role
    result, row = run_job(system, {"type": "sqs", "queue_url": url, "role_arn": TENANT_ROLE})
    # THEN the message is in the tenant's queue, read in the tenant's account
    assert result is Result.SUCCEEDED and row.state is occurrence.State.SUCCEEDED
    got = client_as("sqs", as_tenant()).receive_message(QueueUrl=url)["Messages"]
    assert json.loads(got[0]["Body"])["occurrence_key"] == row.key
    # AND Fireline assumed that role once, with the tenant id as ExternalId and a
    # session name naming the tenant (what the tenant's trust policy and CloudTrail see)
    (session,) = sessions()
    assert (session.role_arn, session.external_id) == (TENANT_ROLE, "tenant-a")
    assert session.session_name == "fireline-tenant-a"


def test_a_function_target_is_invoked_in_the_tenants_account_as_its_role(
    system: System,
) -> None:
    # GIVEN a function in the tenant's account, whose answer moto's Lambda stub of that
    # account hands out (and of no other account)
    arn = tenant_function()
    lambda_simple_backends[TENANT_ACCOUNT][REGION].lambda_simple_results_queue.append(
        json.dumps({"answered_in": TENANT_ACCOUNT})
    )
    # WHEN a job invokes it with the tenant's role
    result, row = run_job(system, {"type": "lambda", "function_arn": arn, "role_arn": TENANT_ROLE})
    # THEN the invocation reached the tenant account's Lambda: its answer is the result
    assert result is Result.SUCCEEDED
    assert json.loads(row.result["output"]["payload"]) == {"answered_in": TENANT_ACCOUNT}
    assert lambda_simple_backends[TENANT_ACCOUNT][REGION].lambda_simple_results_queue == []
    (session,) = sessions()
    assert (session.role_arn, session.external_id) == (TENANT_ROLE, "tenant-a")


def test_credentials_are_assumed_once_per_role_and_tenant(system: System) -> None:
    url = tenant_queue()
    target = {"type": "sqs", "queue_url": url, "role_arn": TENANT_ROLE}
    worker = system.worker()
    # GIVEN three jobs of tenant-a and one of tenant-b naming the same role
    for tenant in ("tenant-a", "tenant-a", "tenant-a", "tenant-b"):
        system.service.create_job(tenant, JobDraft(delay_seconds=0, target=target))
    system.ticker(use_lease=False).tick()
    # WHEN one worker runs them all
    results = [worker.handle(m.body, remaining_ms=remaining) for m in system.receive()]
    # THEN each tenant's credentials were assumed once (its own ExternalId), not per job
    assert results == [Result.SUCCEEDED] * 4
    assert sorted(s.external_id for s in sessions()) == ["tenant-a", "tenant-b"]
    assert system.roles.assumed == 2


# --- without one ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["lambda", "sqs"])
def test_without_a_role_a_target_is_refused_at_registration_and_nothing_is_written(
    system: System, kind: str
) -> None:
    target = (
        {"type": "sqs", "queue_url": tenant_queue()}
        if kind == "sqs"
        else {"type": "lambda", "function_arn": tenant_function()}
    )
    # WHEN tenant-a registers a job whose target names no role (and no allowlist entry)
    status, body = system.call(
        "POST", "/jobs", {"delay_seconds": 0, "target": target}, tenant="tenant-a"
    )
    # THEN 400 naming target.role_arn, and no job exists
    assert status == 400, body
    assert body["error"]["field"] == "target.role_arn"
    assert system.schedules.list("tenant-a", limit=10).items == []


def test_a_stored_target_without_a_role_is_refused_at_run_time_and_sends_nothing(
    system: System,
) -> None:
    # GIVEN a queue in Fireline's own account, which the worker's credentials could reach
    url = system.sqs_client.create_queue(QueueName="someone-elses")["QueueUrl"]
    # WHEN a stored job of tenant-a names it without a role
    result, row = stored_job(system, {"type": "sqs", "queue_url": url})
    # THEN the attempt is refused before any call: dead, the reason a category
    assert result is Result.DEAD
    assert row.exit_reason == (
        "error: not allowed: no role_arn, and no operator allowlist covers the target"
    )
    assert "Messages" not in system.sqs_client.receive_message(QueueUrl=url)
    assert sessions() == [] and system.roles.assumed == 0


def test_the_operators_allowlist_lets_one_tenant_call_as_the_worker_and_no_other(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = system.sqs_client.create_queue(QueueName="acme-reports")["QueueUrl"]
    # GIVEN the operator's allowlist: tenant-a may name its acme-* queues without a role
    monkeypatch.setenv("TARGET_ALLOWLIST", f"tenant-a=arn:aws:sqs:*:{ACCOUNT_ID}:acme-*")
    wiring.reset()
    system.service.aws_targets = wiring.aws_target_policy()
    # WHEN tenant-a's job names it THEN it is sent as the worker, no role assumed
    result, _row = run_job(system, {"type": "sqs", "queue_url": url})
    assert result is Result.SUCCEEDED
    assert len(system.sqs_client.receive_message(QueueUrl=url)["Messages"]) == 1
    assert system.roles.assumed == 0
    # AND tenant-b, which the allowlist does not name, is refused at registration
    status, body = system.call(
        "POST",
        "/jobs",
        {"delay_seconds": 0, "target": {"type": "sqs", "queue_url": url}},
        tenant="tenant-b",
    )
    assert (status, body["error"]["field"]) == (400, "target.role_arn")


# --- Fireline's own resources ----------------------------------------------------------------


def own_targets(system: System) -> list[tuple[dict[str, Any], str]]:
    queues = system.stack.queues
    function = (
        f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:fireline-test-WorkflowFunction-1A2B3C"
    )
    return [
        ({"type": "sqs", "queue_url": queues[name], "role_arn": TENANT_ROLE}, "target.queue_url")
        for name in ("DefaultQueue", "DefaultDeadLetterQueue", "WorkflowQueue", "LongTaskQueue")
    ] + [
        (
            {"type": "lambda", "function_arn": function, "role_arn": TENANT_ROLE},
            "target.function_arn",
        )
    ]


def test_firelines_own_functions_and_queues_are_refused_at_registration(system: System) -> None:
    # GIVEN targets naming Fireline's own queues and functions, even with a role
    for target, field in own_targets(system):
        # WHEN a tenant registers a job or a schedule on one
        status, body = system.call(
            "POST", "/jobs", {"delay_seconds": 0, "target": target}, tenant="tenant-a"
        )
        # THEN 400 naming the field that names the resource
        assert (status, body["error"]["field"]) == (400, field), body
        status, body = system.call(
            "POST", "/schedules", {"spec": "rate(1 minute)", "target": target}, tenant="tenant-a"
        )
        assert (status, body["error"]["field"]) == (400, field), body
    # AND nothing was written
    assert system.schedules.list("tenant-a", limit=10).items == []


def test_a_workflow_node_naming_a_fireline_resource_is_refused_at_registration(
    system: System,
) -> None:
    # GIVEN the deployment's workflow service, with the rules wiring gives it
    flows = missing_workflows()
    flows.aws_targets = wiring.aws_target_policy()
    for target, field in own_targets(system):
        # WHEN a tenant registers a workflow one of whose nodes names Fireline's own
        # queue or function (with a role), after a node it may run
        nodes = [
            workflow.NodeSpec("fine", {"type": "python", "handler": "noop"}),
            workflow.NodeSpec("own", target),
        ]
        with pytest.raises(errors.ValidationError) as refused:
            flows.register("tenant-a", "wf", nodes, [("fine", "own")])
        # THEN it is refused naming that node's field, and no version exists
        assert refused.value.field == f"nodes[1].{field}"
    assert not flows.exists("tenant-a", "wf")


def test_a_stored_target_naming_a_fireline_queue_is_refused_at_run_time(system: System) -> None:
    dead_letters = system.stack.queues["DefaultDeadLetterQueue"]
    # WHEN a stored job names Fireline's dead-letter queue, with a role
    result, row = stored_job(
        system, {"type": "sqs", "queue_url": dead_letters, "role_arn": TENANT_ROLE}
    )
    # THEN no role is assumed and nothing is sent there
    assert result is Result.DEAD
    assert row.exit_reason == "error: refused: the target is not one a tenant may call"
    assert sessions() == []
    assert "Messages" not in system.sqs_client.receive_message(QueueUrl=dead_letters)


def test_a_role_of_firelines_own_account_is_refused_at_registration_and_run_time(
    system: System,
) -> None:
    # GIVEN a role in Fireline's own account, of the kind that trusts the account itself
    # (the target caller role could assume it whatever ExternalId it sends)
    own_role = f"arn:aws:iam::{ACCOUNT_ID}:role/admin"
    target = {"type": "sqs", "queue_url": tenant_queue(), "role_arn": own_role}
    # WHEN a tenant registers a job naming it
    status, body = system.call(
        "POST", "/jobs", {"delay_seconds": 0, "target": target}, tenant="tenant-a"
    )
    # THEN 400 naming the role, and nothing is written
    assert (status, body["error"]["field"]) == (400, "target.role_arn"), body
    assert system.schedules.list("tenant-a", limit=10).items == []
    # AND a stored job naming it is refused before any AssumeRole
    result, row = stored_job(system, target)
    assert result is Result.DEAD
    assert row.exit_reason == f"error: not allowed: {aws_target.OWN_ACCOUNT_ROLE}"
    assert sessions(ACCOUNT_ID) == [] and system.roles.assumed == 0


def test_a_role_outside_the_tenants_role_path_is_refused_at_registration_and_run_time(
    system: System,
) -> None:
    # GIVEN the template's TenantTargetRolePath (fireline-target/), in every function's
    # environment, and a tenant's role created without that path
    assert os.environ["TENANT_TARGET_ROLE_PATH"] == "fireline-target/"
    elsewhere = f"arn:aws:iam::{TENANT_ACCOUNT}:role/fireline-jobs"
    target = {"type": "sqs", "queue_url": tenant_queue(), "role_arn": elsewhere}
    # WHEN a tenant registers a job naming it
    status, body = system.call(
        "POST", "/jobs", {"delay_seconds": 0, "target": target}, tenant="tenant-a"
    )
    # THEN 400 naming the role and the path, and nothing is written
    assert (status, body["error"]["field"]) == (400, "target.role_arn"), body
    assert "/fireline-target/" in body["error"]["message"]
    assert system.schedules.list("tenant-a", limit=10).items == []
    # AND a stored job naming it is refused before any AssumeRole (the target caller
    # role could not assume it)
    result, row = stored_job(system, target)
    print(
        f"role outside the path: registration {status} naming {body['error']['field']}; "
        f"a stored job {result.name}: {row.exit_reason!r}; roles assumed "
        f"{system.roles.assumed}"
    )
    assert result is Result.DEAD
    assert row.exit_reason == (
        "error: not allowed: a role outside /fireline-target/, which Fireline may not assume"
    )
    assert sessions() == [] and system.roles.assumed == 0


# --- what a tenant reads of a failure --------------------------------------------------------


def test_a_failure_in_the_tenants_account_names_a_category_not_aws_text(system: System) -> None:
    # GIVEN a role whose account has no such queue
    gone = f"https://sqs.{REGION}.amazonaws.com/{TENANT_ACCOUNT}/gone"
    # WHEN the job runs
    result, row = stored_job(system, {"type": "sqs", "queue_url": gone, "role_arn": TENANT_ROLE})
    # THEN the reason is a category and AWS's error code, without AWS's message (which
    # names accounts and resources)
    assert result is Result.DEAD
    assert (
        row.exit_reason == "error: sqs target: not found (AWS.SimpleQueueService.NonExistentQueue)"
    )
    assert TENANT_ACCOUNT not in row.exit_reason


def test_the_deployment_policy_knows_its_own_resources_from_the_environment(
    system: System,
) -> None:
    policy = wiring.aws_target_policy()
    own = aws_target.resource_of({"type": "sqs", "queue_url": system.stack.queues["LongQueue"]})
    other_account = aws_target.resource_of(
        {
            "type": "lambda",
            "function_arn": f"arn:aws:lambda:{REGION}:{TENANT_ACCOUNT}:function:fireline-test-x",
        }
    )
    assert own is not None and other_account is not None
    # GIVEN the environment the template gives every function
    assert os.environ["FIRELINE_STACK_NAME"] == "fireline-test"
    # THEN this stack's queue is its own; a like-named function in another account is not
    assert policy.is_own(own)
    assert not policy.is_own(other_account)


# --- the role's permissions are what a job has ---------------------------------------------


def tenant_role(name: str, actions: list[str]) -> str:
    """A role in the tenant's account allowed ``actions`` (moto reads its policies when
    it enforces IAM)."""
    iam = client_as("iam", as_tenant())
    arn: str = iam.create_role(
        RoleName=name, Path="/fireline-target/", AssumeRolePolicyDocument="{}"
    )["Role"]["Arn"]
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
    }
    iam.put_role_policy(RoleName=name, PolicyName="targets", PolicyDocument=json.dumps(policy))
    return arn


def test_a_job_can_do_what_the_tenants_role_allows_and_nothing_more(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = tenant_queue()
    may_send = tenant_role("fireline-send", ["sqs:SendMessage"])
    may_invoke = tenant_role("fireline-invoke", ["lambda:InvokeFunction"])
    runner = system.runner()
    context = targets.JobContext(
        occurrence_key="job_1#1#2026-05-01T12:00:00Z",
        tenant_id="tenant-a",
        schedule_id="job_1",
        fire_time=system.clock.now(),
        attempt=1,
        payload={},
    )
    # GIVEN both roles' credentials already held (as a warm worker holds them)
    for role in (may_send, may_invoke):
        system.roles.credentials(role, "tenant-a")
    # WHEN moto enforces IAM (every request from here on is checked against the caller's
    # policies) and a job sends to the tenant's queue as each role
    monkeypatch.setattr(moto_settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    sent = runner.run({"type": "sqs", "queue_url": url, "role_arn": may_send}, context, timeout=5)
    with pytest.raises(targets.TargetFailed) as refused:
        runner.run({"type": "sqs", "queue_url": url, "role_arn": may_invoke}, context, timeout=5)
    monkeypatch.setattr(moto_settings, "INITIAL_NO_AUTH_ACTION_COUNT", float("inf"))
    # THEN the role allowed to send sent; the other was refused by IAM, and the tenant
    # reads a category and the error code
    assert "message_id" in sent
    assert str(refused.value).startswith("sqs target: access denied (")
    assert (
        len(
            client_as("sqs", as_tenant()).receive_message(QueueUrl=url, MaxNumberOfMessages=10)[
                "Messages"
            ]
        )
        == 1
    )
