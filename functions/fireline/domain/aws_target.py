"""Whom a tenant's AWS target (a Lambda function, an SQS queue, a Step Functions state
machine, an EventBridge bus, an SNS topic) is called as: pure rules.

A worker runs with Fireline's own role. Were it to call a tenant's function or queue
with that role, a tenant could name *any* function or queue the role can reach, Fireline's
own included (a confused deputy). So, as EventBridge Scheduler does, an AWS target carries
a ``role_arn``: a role in the tenant's account that trusts Fireline's target caller role
with the tenant id as ExternalId. The worker assumes it and calls the target as the
tenant; what the tenant's role cannot do, the job cannot do.

Single-account deployments may do without a role: the operator lists, per tenant, the ARN
patterns a tenant's targets may name (and grants the workers those ARNs in the template).
Anything else is denied. Fireline's own functions, queues and state machine are never
targets, with a role or without, and neither is any other resource of Fireline's account
unless the operator allows it (a function or queue there may trust the tenant's account
for another reason; a bus there has rules, a topic subscribers, that are no tenant's):
refused at registration and again at every attempt.
"""

from __future__ import annotations

import fnmatch
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fireline.domain import errors

# An IAM role: arn:<partition>:iam::<account>:role/<path/>name (IAM's own character set).
ROLE_ARN = re.compile(r"arn:aws[a-zA-Z-]*:iam::[0-9]{12}:role/[A-Za-z0-9_+=,.@/-]{1,512}")
# TenantTargetRolePath: an IAM path without its leading slash, as the template checks it.
ROLE_PATH = re.compile(r"([A-Za-z0-9+=,.@_-]+/)+")
FUNCTION_ARN = re.compile(
    r"arn:(?P<partition>aws[a-zA-Z-]*):lambda:(?P<region>[a-z0-9-]+):(?P<account>\d{12})"
    r":function:(?P<name>[A-Za-z0-9_-]+)(:[A-Za-z0-9_$-]+)?"
)
STATE_MACHINE_ARN = re.compile(
    r"arn:(?P<partition>aws[a-zA-Z-]*):states:(?P<region>[a-z0-9-]+):(?P<account>\d{12})"
    r":stateMachine:(?P<name>[A-Za-z0-9_-]{1,80})"
)
# A bus's name is [/.-_A-Za-z0-9]; a partner bus's has slashes (aws.partner/...).
EVENT_BUS_ARN = re.compile(
    r"arn:(?P<partition>aws[a-zA-Z-]*):events:(?P<region>[a-z0-9-]+):(?P<account>\d{12})"
    r":event-bus/(?P<name>[A-Za-z0-9/._-]{1,256})"
)
TOPIC_ARN = re.compile(
    r"arn:(?P<partition>aws[a-zA-Z-]*):sns:(?P<region>[a-z0-9-]+):(?P<account>\d{12})"
    r":(?P<name>[A-Za-z0-9_-]{1,256}(\.fifo)?)"
)
# A queue URL's path is /<account>/<name> on every SQS endpoint (and on emulators).
_QUEUE_PATH = re.compile(r"/(?P<account>\d{12})/(?P<name>[A-Za-z0-9_-]{1,80}(\.fifo)?)")
_SQS_HOST = re.compile(r"sqs\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?")

# Why a role of the deployment's own account is refused (see own_account_role).
OWN_ACCOUNT_ROLE = "a role of this deployment's own account, which no operator allowlist covers"


class OwnAccountRole(errors.ValidationError):
    """the role is one of the deployment's own account"""


class RoleOutsidePath(errors.ValidationError):
    """the role is not under the path of tenants' target roles"""


# The target types this module governs, and the field naming each one's resource.
RESOURCE_FIELDS = {
    "lambda": "function_arn",
    "sqs": "queue_url",
    "stepfunctions": "state_machine_arn",
    "eventbridge": "event_bus_arn",
    "sns": "topic_arn",
}
# The kinds named by an ARN of one shape each, and what the ARN must be.
_ARNS = {
    "lambda": FUNCTION_ARN,
    "stepfunctions": STATE_MACHINE_ARN,
    "eventbridge": EVENT_BUS_ARN,
    "sns": TOPIC_ARN,
}
# The kinds that refuse a resource of the deployment's own account even without a role
# (unless the operator's allowlist names it): an event bus or a topic there has
# subscribers and rules that are no tenant's. A function or queue there without a role is
# refused as a target no allowlist covers.
ACCOUNT_BOUND = frozenset({"stepfunctions", "eventbridge", "sns"})
# EventBridge's own rules for an entry's Source and DetailType.
MAX_SOURCE = 256
MAX_DETAIL_TYPE = 128


@dataclass(frozen=True)
class Resource:
    """A target's function or queue: its ARN (for allowlists), account and name (for the
    own-resource rule)."""

    arn: str
    account: str
    name: str


def resource_of(target: Mapping[str, Any]) -> Resource | None:
    """The function or queue ``target`` names, or None when it names neither (a malformed
    ARN or URL: the API's own validation refuses those first)."""
    kind = target.get("type")
    if kind in _ARNS:
        match = _ARNS[str(kind)].fullmatch(str(target.get(RESOURCE_FIELDS[str(kind)], "")))
        if match is None:
            return None
        return Resource(match.group(0), match["account"], match["name"])
    if kind == "sqs":
        url = urllib.parse.urlsplit(str(target.get("queue_url", "")))
        path = _QUEUE_PATH.fullmatch(url.path.rstrip("/"))
        if path is None:
            return None
        host = _SQS_HOST.fullmatch(url.hostname or "")
        region = host["region"] if host else "*"
        arn = f"arn:aws:sqs:{region}:{path['account']}:{path['name']}"
        return Resource(arn, path["account"], path["name"])
    return None


@dataclass(frozen=True)
class AwsTargetPolicy:
    """What the operator decided about AWS targets.

    ``account`` and ``stack_name`` say which resources are Fireline's own: CloudFormation
    names a stack's functions and queues ``<stack>-<LogicalId>-<suffix>``, and
    ``own_names`` adds the ones the environment names outright (the queues' URLs).
    ``allowlist`` maps a tenant id (or ``*``, every tenant) to the ARN patterns (``*``
    and ``?`` wildcards) its targets may name without a role. ``role_path`` is the IAM
    path (without its leading slash, as the template's TenantTargetRolePath) that the
    target caller role may assume roles under; empty, any path (tools and tests)."""

    account: str = ""
    stack_name: str = ""
    own_names: frozenset[str] = frozenset()
    allowlist: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    role_path: str = ""

    @classmethod
    def parse(
        cls,
        allowlist: str,
        *,
        account: str = "",
        stack_name: str = "",
        own_resources: Iterable[str] = (),
        role_path: str = "",
        field_name: str = "TARGET_ALLOWLIST",
    ) -> AwsTargetPolicy:
        """``allowlist`` is comma-separated ``tenant=arn-pattern`` pairs (the template's
        TargetAllowlist); ``own_resources`` are ARNs or queue URLs of this deployment;
        ``role_path`` is TenantTargetRolePath (``fireline-target/``)."""
        if role_path and not ROLE_PATH.fullmatch(role_path):
            raise errors.ValidationError(
                f"{role_path!r} is not an IAM path without its leading slash (fireline-target/)",
                field="TENANT_TARGET_ROLE_PATH",
            )
        entries: dict[str, list[str]] = {}
        for raw in allowlist.split(","):
            item = raw.strip()
            if not item:
                continue
            tenant, sep, pattern = item.partition("=")
            if not sep or not tenant.strip() or not pattern.strip().startswith("arn:"):
                raise errors.ValidationError(
                    f"{item!r} is not tenant=arn-pattern", field=field_name
                )
            entries.setdefault(tenant.strip(), []).append(pattern.strip())
        names = set()
        for own in own_resources:
            if not own:
                continue
            # A queue URL or an ARN: its last segment is the resource's name.
            names.add(re.split(r"[/:]", own.rstrip("/"))[-1])
        return cls(
            account=account,
            stack_name=stack_name,
            own_names=frozenset(names),
            allowlist={t: tuple(p) for t, p in entries.items()},
            role_path=role_path,
        )

    def is_own(self, resource: Resource) -> bool:
        """Whether ``resource`` belongs to this deployment (never a tenant's target)."""
        if self.account and resource.account != self.account:
            return False
        if resource.name in self.own_names:
            return True
        return bool(self.stack_name) and resource.name.startswith(f"{self.stack_name}-")

    def in_own_account(self, resource: Resource) -> bool:
        """Whether ``resource`` lives in this deployment's account."""
        return bool(self.account) and resource.account == self.account

    def allows(self, tenant_id: str, resource: Resource) -> bool:
        """Whether the operator lets ``tenant_id`` call ``resource`` without a role."""
        patterns = (*self.allowlist.get(tenant_id, ()), *self.allowlist.get("*", ()))
        return any(fnmatch.fnmatchcase(resource.arn, p) for p in patterns)


# Roles only: no allowlist, no own resources known (tests and tools build their own).
ROLES_ONLY = AwsTargetPolicy()


def check(
    target: Mapping[str, Any], *, tenant_id: str, policy: AwsTargetPolicy, field: str = "target"
) -> None:
    """Refuse, at registration, an AWS target no attempt may call (typed error naming the
    field): one of Fireline's own resources, a resource of Fireline's account the operator
    did not allow, a malformed role, or no role where the operator's
    allowlist does not cover the resource."""
    kind = str(target.get("type"))
    if kind not in RESOURCE_FIELDS:
        return
    where = f"{field}.{RESOURCE_FIELDS[kind]}"
    resource = resource_of(target)
    if resource is None:
        raise errors.ValidationError(_NOT_A_RESOURCE[kind], field=where)
    if policy.is_own(resource):
        raise errors.ValidationError(
            "is a resource of this Fireline deployment, never a target", field=where
        )
    role = target.get("role_arn")
    # A role of the deployment's account is the operator's to allow (own_account_role,
    # below): one the allowlist names for the tenant may reach what that role reaches.
    a_role = isinstance(role, str) and ROLE_ARN.fullmatch(role) is not None
    own_role = a_role and str(role).split(":")[4] == policy.account
    # A resource of the deployment's account is the operator's, whatever role the call
    # is made as: a function or queue there may trust the tenant's account for another
    # reason, and a bus or topic there has rules and subscribers that are no tenant's.
    # Only the operator's allowlist (or a role of that account it allows) reaches it.
    if (
        (a_role or kind in ACCOUNT_BOUND)
        and policy.in_own_account(resource)
        and not policy.allows(tenant_id, resource)
        and not own_role
    ):
        raise errors.ValidationError(
            "is in this Fireline deployment's own account, which no operator allowlist "
            "covers: name a resource in your own account",
            field=where,
        )
    if kind == "eventbridge":
        check_event_fields(target, field=field)
    if role is not None:
        if not isinstance(role, str) or not ROLE_ARN.fullmatch(role):
            raise errors.ValidationError(
                "is not an IAM role ARN (arn:aws:iam::<account>:role/<name>)",
                field=f"{field}.role_arn",
            )
        if own_account_role(role, tenant_id=tenant_id, policy=policy):
            raise OwnAccountRole(
                f"is {OWN_ACCOUNT_ROLE}: name a role in your own account",
                field=f"{field}.role_arn",
            )
        # The target caller role may assume only roles under this path (its policy in the
        # template): a role elsewhere would fail every attempt, so it is refused here.
        if not under_role_path(role, policy):
            raise RoleOutsidePath(
                f"is not under the path /{policy.role_path} of the roles Fireline may "
                f"assume: create the role with --path /{policy.role_path}",
                field=f"{field}.role_arn",
            )
        return
    if not policy.allows(tenant_id, resource):
        raise errors.ValidationError(
            "is required: a role in your account that trusts Fireline with your tenant id "
            "as ExternalId (no operator allowlist covers this target)",
            field=f"{field}.role_arn",
        )


_NOT_A_RESOURCE = {
    "lambda": "names no function Fireline can call "
    "(arn:aws:lambda:<region>:<account>:function:<name>)",
    "sqs": "names no queue Fireline can call (https://sqs.<region>.amazonaws.com/<account>/<name>)",
    "stepfunctions": "is not a state machine ARN "
    "(arn:aws:states:<region>:<account>:stateMachine:<name>)",
    "eventbridge": "is not an event bus ARN (arn:aws:events:<region>:<account>:event-bus/<name>)",
    "sns": "is not a topic ARN (arn:aws:sns:<region>:<account>:<name>)",
}


def check_event_fields(target: Mapping[str, Any], *, field: str = "target") -> None:
    """An EventBridge entry's Source and DetailType as PutEvents takes them: a Source of
    ``aws.`` is AWS's own (PutEvents refuses it), and either past its length is refused
    at every attempt."""
    source = target.get("source")
    if not isinstance(source, str) or not 1 <= len(source) <= MAX_SOURCE:
        raise errors.ValidationError(
            f"is required: 1 to {MAX_SOURCE} characters", field=f"{field}.source"
        )
    if source.startswith("aws."):
        raise errors.ValidationError(
            "may not start with aws. (AWS's own sources)", field=f"{field}.source"
        )
    detail_type = target.get("detail_type")
    if not isinstance(detail_type, str) or not 1 <= len(detail_type) <= MAX_DETAIL_TYPE:
        raise errors.ValidationError(
            f"is required: 1 to {MAX_DETAIL_TYPE} characters", field=f"{field}.detail_type"
        )
    if not all(c.isprintable() for c in source + detail_type):
        bad = "source" if not source.isprintable() else "detail_type"
        raise errors.ValidationError("holds a control character", field=f"{field}.{bad}")


def own_account_role(role_arn: str, *, tenant_id: str, policy: AwsTargetPolicy) -> bool:
    """Whether ``role_arn`` is a role of the deployment's own account that the operator's
    allowlist does not let ``tenant_id`` name.

    The target caller role may assume roles in any account, its own included, and a role
    that trusts its account (``arn:aws:iam::<account>:root``) without an ExternalId
    condition lets it in whatever ExternalId it sends: a tenant naming such a role would
    call the account's functions and queues with that role's rights. A role in another
    account is the tenant's; one in this account is some other team's, unless the operator
    says otherwise (a role ARN pattern in TargetAllowlist)."""
    account = role_arn.split(":")[4]
    if not policy.account or account != policy.account:
        return False
    return not policy.allows(tenant_id, Resource(role_arn, account, role_arn.rsplit("/", 1)[-1]))


def under_role_path(role_arn: str, policy: AwsTargetPolicy) -> bool:
    """Whether ``role_arn``'s path is under ``policy.role_path`` (any path when unset)."""
    return role_arn.split(":", 5)[5].removeprefix("role/").startswith(policy.role_path)


def refusal(target: Mapping[str, Any], *, tenant_id: str, policy: AwsTargetPolicy) -> str | None:
    """Why an attempt may not call ``target`` (a category a tenant may read), or None.

    The same rules as at registration, again at every attempt: a target stored before the
    operator changed the allowlist, or written around the API, is refused here."""
    try:
        check(target, tenant_id=tenant_id, policy=policy)
    except OwnAccountRole:
        return f"not allowed: {OWN_ACCOUNT_ROLE}"
    except RoleOutsidePath:
        return f"not allowed: a role outside /{policy.role_path}, which Fireline may not assume"
    except errors.ValidationError as exc:
        if (exc.field or "").endswith(".role_arn"):
            return "not allowed: no role_arn, and no operator allowlist covers the target"
        return "refused: the target is not one a tenant may call"
    return None
