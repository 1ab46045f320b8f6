"""Whom a tenant's AWS target is called as: the pure rules and the role credentials cache."""

from __future__ import annotations

from typing import Any

import pytest

from fireline.domain import aws_target, errors
from fireline.services import roles

ACCOUNT = "123456789012"
TENANT_ROLE = "arn:aws:iam::111122223333:role/fireline-target/fireline-jobs"
OWN_ROLE = f"arn:aws:iam::{ACCOUNT}:role/admin"
POLICY = aws_target.AwsTargetPolicy.parse(
    f"acme=arn:aws:sqs:*:{ACCOUNT}:acme-*, *=arn:aws:lambda:us-east-1:{ACCOUNT}:function:shared,"
    f"acme=arn:aws:iam::{ACCOUNT}:role/acme-*",
    account=ACCOUNT,
    stack_name="fireline",
    own_resources=[f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/queue-from-env"],
)


def sqs(name: str, account: str = ACCOUNT, **extra: Any) -> dict[str, Any]:
    return {
        "type": "sqs",
        "queue_url": f"https://sqs.us-east-1.amazonaws.com/{account}/{name}",
        **extra,
    }


def fn(name: str, account: str = ACCOUNT, **extra: Any) -> dict[str, Any]:
    arn = f"arn:aws:lambda:us-east-1:{account}:function:{name}"
    return {"type": "lambda", "function_arn": arn, **extra}


@pytest.mark.parametrize(
    ("tenant", "target", "field"),
    [
        # no role, no allowlist entry
        ("beta", sqs("acme-reports"), "target.role_arn"),
        ("acme", sqs("other"), "target.role_arn"),
        # a function or queue of the deployment's account that the allowlist does not
        # name, even called as the tenant's own role (its policy may trust the tenant's
        # account for another reason)
        ("acme", fn("billing", role_arn=TENANT_ROLE), "target.function_arn"),
        ("acme", sqs("billing-jobs", role_arn=TENANT_ROLE), "target.queue_url"),
        # Fireline's own: by the stack's name prefix or named by the environment, with a
        # role or without
        ("acme", fn("fireline-WorkflowFunction-ABC", role_arn=TENANT_ROLE), "target.function_arn"),
        ("acme", sqs("queue-from-env", role_arn=TENANT_ROLE), "target.queue_url"),
        ("acme", sqs("fireline-DefaultDeadLetterQueue-XYZ"), "target.queue_url"),
        # a role that is no role
        ("acme", sqs("x", role_arn="arn:aws:iam::111122223333:user/bob"), "target.role_arn"),
        # a role of the deployment's own account (it may trust the account with no
        # ExternalId), unless the allowlist names it for the tenant
        ("acme", sqs("x", account="111122223333", role_arn=OWN_ROLE), "target.role_arn"),
        ("beta", fn("f", role_arn=f"arn:aws:iam::{ACCOUNT}:role/acme-jobs"), "target.role_arn"),
    ],
)
def test_refused_targets_name_the_field_at_fault(
    tenant: str, target: dict[str, Any], field: str
) -> None:
    with pytest.raises(errors.ValidationError) as raised:
        aws_target.check(target, tenant_id=tenant, policy=POLICY)
    assert raised.value.field == field


@pytest.mark.parametrize(
    ("tenant", "target"),
    [
        ("acme", sqs("acme-reports")),  # acme's allowlist
        ("beta", fn("shared")),  # every tenant's
        ("beta", sqs("anything", account="111122223333", role_arn=TENANT_ROLE)),
        # a like-named resource in another account is not Fireline's
        ("beta", fn("fireline-x", account="111122223333", role_arn=TENANT_ROLE)),
        # a role of the deployment's account the allowlist names for the tenant
        ("acme", sqs("x", role_arn=f"arn:aws:iam::{ACCOUNT}:role/acme-jobs")),
    ],
)
def test_allowed_targets_pass(tenant: str, target: dict[str, Any]) -> None:
    aws_target.check(target, tenant_id=tenant, policy=POLICY)
    assert aws_target.refusal(target, tenant_id=tenant, policy=POLICY) is None


def machine(account: str = ACCOUNT, name: str = "m", **extra: Any) -> dict[str, Any]:
    arn = f"arn:aws:states:us-east-1:{account}:stateMachine:{name}"
    return {"type": "stepfunctions", "state_machine_arn": arn, **extra}


def bus(account: str = ACCOUNT, **extra: Any) -> dict[str, Any]:
    arn = f"arn:aws:events:us-east-1:{account}:event-bus/default"
    return {"type": "eventbridge", "event_bus_arn": arn, "detail_type": "d", "source": "s", **extra}


def topic(name: str, account: str = ACCOUNT, **extra: Any) -> dict[str, Any]:
    return {"type": "sns", "topic_arn": f"arn:aws:sns:us-east-1:{account}:{name}", **extra}


DISPATCH_POLICY = aws_target.AwsTargetPolicy.parse(
    f"acme=arn:aws:sns:*:{ACCOUNT}:acme-*,acme=arn:aws:iam::{ACCOUNT}:role/acme-*",
    account=ACCOUNT,
    stack_name="fireline",
    own_resources=[f"arn:aws:states:us-east-1:{ACCOUNT}:stateMachine:LongJobStateMachine-x1"],
)


@pytest.mark.parametrize(
    ("tenant", "target", "field"),
    [
        # Fireline's own state machine, named by the environment, with a role
        (
            "acme",
            machine(name="LongJobStateMachine-x1", role_arn=TENANT_ROLE),
            "target.state_machine_arn",
        ),
        # anything of Fireline's account, with a tenant's role: its default bus's rules and
        # its topics' subscribers are not the tenant's
        ("acme", bus(role_arn=TENANT_ROLE), "target.event_bus_arn"),
        ("acme", topic("alerts", role_arn=TENANT_ROLE), "target.topic_arn"),
        ("beta", topic("acme-alerts", role_arn=TENANT_ROLE), "target.topic_arn"),
        # an ARN of the wrong service in the field
        (
            "acme",
            topic("x", account="111122223333") | {"topic_arn": "arn:aws:sqs:x"},
            "target.topic_arn",
        ),
        # an entry PutEvents refuses
        ("acme", bus("111122223333", role_arn=TENANT_ROLE, source="aws.s3"), "target.source"),
        ("acme", bus("111122223333", role_arn=TENANT_ROLE, detail_type=""), "target.detail_type"),
        # no role and no allowlist entry
        ("acme", machine("111122223333"), "target.role_arn"),
    ],
)
def test_refused_dispatch_targets_name_the_field_at_fault(
    tenant: str, target: dict[str, Any], field: str
) -> None:
    with pytest.raises(errors.ValidationError) as raised:
        aws_target.check(target, tenant_id=tenant, policy=DISPATCH_POLICY)
    assert raised.value.field == field


@pytest.mark.parametrize(
    ("tenant", "target"),
    [
        ("beta", machine("111122223333", role_arn=TENANT_ROLE)),
        ("beta", bus("111122223333", role_arn=TENANT_ROLE)),
        ("beta", topic("reports.fifo", account="111122223333", role_arn=TENANT_ROLE)),
        # Fireline's account, where the operator's allowlist says so: the resource itself,
        # or a role of the account it names for the tenant
        ("acme", topic("acme-alerts")),
        ("acme", bus(role_arn=f"arn:aws:iam::{ACCOUNT}:role/acme-jobs")),
    ],
)
def test_allowed_dispatch_targets_pass(tenant: str, target: dict[str, Any]) -> None:
    aws_target.check(target, tenant_id=tenant, policy=DISPATCH_POLICY)
    assert aws_target.refusal(target, tenant_id=tenant, policy=DISPATCH_POLICY) is None


def test_an_attempt_naming_a_role_of_the_deployments_account_reads_why() -> None:
    target = sqs("x", account="111122223333", role_arn=OWN_ROLE)
    assert aws_target.refusal(target, tenant_id="acme", policy=POLICY) == (
        f"not allowed: {aws_target.OWN_ACCOUNT_ROLE}"
    )
    # a policy that does not know its account (tools, tests) cannot tell
    assert aws_target.refusal(target, tenant_id="acme", policy=aws_target.ROLES_ONLY) is None


PATHED = aws_target.AwsTargetPolicy.parse(
    f"acme=arn:aws:iam::{ACCOUNT}:role/fireline-target/acme-*,acme=arn:aws:iam::{ACCOUNT}:role/acme-*",
    account=ACCOUNT,
    role_path="fireline-target/",
)


@pytest.mark.parametrize(
    ("tenant", "role", "refused"),
    [
        ("beta", "arn:aws:iam::111122223333:role/fireline-target/jobs", False),
        ("beta", "arn:aws:iam::111122223333:role/fireline-target/team/jobs", False),
        # outside the path the target caller role may assume under
        ("beta", "arn:aws:iam::111122223333:role/jobs", True),
        ("beta", "arn:aws:iam::111122223333:role/other/fireline-target/jobs", True),
        ("beta", "arn:aws:iam::111122223333:role/fireline-targets/jobs", True),
        # a role of the deployment's account the allowlist names is still held to the path
        ("acme", f"arn:aws:iam::{ACCOUNT}:role/fireline-target/acme-jobs", False),
        ("acme", f"arn:aws:iam::{ACCOUNT}:role/acme-jobs", True),
    ],
)
def test_a_role_outside_the_tenants_role_path_is_refused_at_registration_and_attempt(
    tenant: str, role: str, refused: bool
) -> None:
    # GIVEN a deployment whose target caller role assumes roles under /fireline-target/ only
    target = sqs("reports", account="111122223333", role_arn=role)
    # WHEN a tenant registers a target naming the role, and when an attempt calls it
    if refused:
        with pytest.raises(aws_target.RoleOutsidePath) as raised:
            aws_target.check(target, tenant_id=tenant, policy=PATHED)
        # THEN a role elsewhere is refused naming the role and the path, and an attempt
        # says why without assuming it
        assert raised.value.field == "target.role_arn"
        assert "/fireline-target/" in str(raised.value)
        assert aws_target.refusal(target, tenant_id=tenant, policy=PATHED) == (
            "not allowed: a role outside /fireline-target/, which Fireline may not assume"
        )
    else:
        aws_target.check(target, tenant_id=tenant, policy=PATHED)
        assert aws_target.refusal(target, tenant_id=tenant, policy=PATHED) is None


@pytest.mark.parametrize("path", ["/fireline-target/", "fireline-target", "*", "a/*/"])
def test_a_role_path_that_is_no_iam_path_is_refused_naming_the_setting(path: str) -> None:
    with pytest.raises(errors.ValidationError) as raised:
        aws_target.AwsTargetPolicy.parse("", role_path=path)
    assert raised.value.field == "TENANT_TARGET_ROLE_PATH"


def test_an_allowlist_entry_that_is_not_tenant_equals_arn_is_refused_naming_the_setting() -> None:
    with pytest.raises(errors.ValidationError) as raised:
        aws_target.AwsTargetPolicy.parse("acme:arn:aws:sqs:*")
    assert raised.value.field == "TARGET_ALLOWLIST"


class RecordingSts:
    """STS that records each AssumeRole and who called it (the credentials it was built
    with), answering credentials that expire an hour after ``now``."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.calls: list[tuple[roles.Credentials | None, dict[str, Any]]] = []

    def client(self, credentials: roles.Credentials | None) -> RecordingSts:
        self.caller = credentials
        return self

    def assume_role(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((self.caller, kwargs))
        n = len(self.calls)
        return {
            "Credentials": {
                "AccessKeyId": f"ASIA{n}",
                "SecretAccessKey": "s",
                "SessionToken": "t",
                "Expiration": self.clock[0] + 3600,
            }
        }


def test_tenant_roles_are_assumed_from_the_caller_role_cached_and_renewed_before_expiry() -> None:
    clock = [1_000_000.0]
    sts = RecordingSts(clock)
    caller = "arn:aws:iam::123456789012:role/fireline-TargetCallerRole-X"
    assumer = roles.RoleAssumer(sts.client, caller_role_arn=caller, now=lambda: clock[0])
    # WHEN tenant-a's role is needed twice within the hour
    first = assumer.credentials(TENANT_ROLE, "tenant-a")
    assert assumer.credentials(TENANT_ROLE, "tenant-a") == first
    # THEN two calls: the caller role as the worker, then the tenant's role as the caller
    # role, with the tenant id as ExternalId and a session naming the tenant
    (hop_by, hop), (tenant_by, tenant) = sts.calls
    assert hop_by is None and hop["RoleArn"] == caller and "ExternalId" not in hop
    assert tenant_by is not None and tenant_by.access_key_id == "ASIA1"
    assert tenant == {
        "RoleArn": TENANT_ROLE,
        "RoleSessionName": "fireline-tenant-a",
        "ExternalId": "tenant-a",
        "DurationSeconds": 3600,
    }
    # AND another tenant naming the same role gets its own credentials (its ExternalId)
    assumer.credentials(TENANT_ROLE, "tenant-b")
    assert [c[1].get("ExternalId") for c in sts.calls] == [None, "tenant-a", "tenant-b"]
    # AND once within the margin of expiry, both links are renewed
    clock[0] += 3600 - roles.RENEW_MARGIN_SECONDS + 1
    renewed = assumer.credentials(TENANT_ROLE, "tenant-a")
    assert renewed != first
    assert [c[1]["RoleArn"] for c in sts.calls[3:]] == [caller, TENANT_ROLE]


def test_a_session_name_is_within_stss_characters_and_length() -> None:
    name = roles.session_name("tenant with spaces/and:colons" + "x" * 80)
    assert len(name) == 64 and name.startswith("fireline-tenant-with-spaces-and-colons")
