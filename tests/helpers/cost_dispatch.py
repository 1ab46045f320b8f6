"""The cost path of a job whose target is a tenant's state machine, bus or topic, run on
moto as deployed (tests/helpers/cost_paths.py) and metered: Fireline's requests, the
target's call (billed to the tenant's account when made as its role) and the AssumeRole
calls of the tenant's role (free)."""

from __future__ import annotations

from typing import Any

from fireline.services import roles

from . import cost_paths, tenant_resources
from .system import System, client_as

#: A role in the tenant's own account that Fireline's target caller role may assume.
TENANT_ACCOUNT = "111122223333"
TENANT_ROLE = f"arn:aws:iam::{TENANT_ACCOUNT}:role/fireline-target/fireline-jobs"


def _in_tenant_account(service: str) -> Any:
    admin = client_as("sts", None).assume_role(
        RoleArn=f"arn:aws:iam::{TENANT_ACCOUNT}:role/admin", RoleSessionName="tenant-admin"
    )["Credentials"]
    credentials = roles.Credentials(
        admin["AccessKeyId"], admin["SecretAccessKey"], admin["SessionToken"], 0
    )
    return client_as(service, credentials)


def target_of(kind: str) -> dict[str, Any]:
    """A ``kind`` target on a resource of its own in the tenant's account, with its role."""
    if kind == "stepfunctions":
        found = {"state_machine_arn": tenant_resources.state_machine(_in_tenant_account)}
    elif kind == "eventbridge":
        found = {
            "event_bus_arn": tenant_resources.event_bus(_in_tenant_account).arn,
            "detail_type": "report due",
            "source": "acme.reports",
        }
    else:
        found = {"topic_arn": tenant_resources.topic(_in_tenant_account).arn}
    return {"type": kind, **found, "role_arn": TENANT_ROLE}


def one_off(
    system: System, kind: str, jobs: int, *, tenant: str = cost_paths.TENANT
) -> cost_paths.Measured:
    """``jobs`` one-off jobs of one tenant to a ``kind`` target, created through the API
    and run as :func:`cost_paths.one_off`. Roles are assumed as deployed: the target
    caller role first, then the tenant's, each once while its credentials last (an hour),
    so the AssumeRole calls of a warm worker are shared by every job it runs in that
    hour; here by ``jobs``. Both are metered."""
    with system.log.unmetered():
        target = target_of(kind)
    system.roles = roles.RoleAssumer(
        lambda credentials: system.metered("sts", credentials),
        caller_role_arn=system.stack.environment["TARGET_CALLER_ROLE_ARN"],
    )
    system.service.ids = cost_paths.seeded_ids(f"{tenant}-{kind}")
    system.log.reset()
    for _ in range(jobs):
        system.log.charge(cost_paths.API_REQUEST)
        with system.log.within("api"):
            status, body = system.call(
                "POST", "/jobs", {"delay_seconds": 120, "target": target}, tenant=tenant
            )
        assert status == 201, body
    return cost_paths._run_created(system, jobs, tenant, batched=False)
