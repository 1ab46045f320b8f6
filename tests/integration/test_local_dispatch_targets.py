"""Step Functions, EventBridge and SNS targets end to end on the local cloud: a job
created over HTTP fires, the worker process assumes the tenant's role (through the
deployed target caller role, with the tenant id as ExternalId) and calls the tenant's
state machine, bus or topic in the tenant's own account of the emulator, where it arrives.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from fireline.local.cloud import REGION, LocalCloud, LocalOptions
from fireline.services import targets
from helpers import tenant_resources
from helpers.local_cloud import TEST_KEYS, call, wait_for

TENANT_ACCOUNT = "111122223333"
TENANT_ROLE = f"arn:aws:iam::{TENANT_ACCOUNT}:role/fireline-target/fireline-jobs"
SOURCE = "acme.reports"


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    log = tmp_path_factory.mktemp("local") / "local.log"
    options = LocalOptions(api_port=0, api_keys=dict(TEST_KEYS), log_path=log)
    with LocalCloud(options) as started:
        yield started


@pytest.fixture(scope="module")
def tenant(cloud: LocalCloud) -> tenant_resources.Clients:
    """Clients in the tenant's own account of the emulator (moto gives an assumed role's
    credentials the role's account)."""
    answer = cloud.client("sts").assume_role(
        RoleArn=f"arn:aws:iam::{TENANT_ACCOUNT}:role/admin", RoleSessionName="tenant-admin"
    )["Credentials"]
    session = boto3.session.Session(
        aws_access_key_id=answer["AccessKeyId"],
        aws_secret_access_key=answer["SecretAccessKey"],
        aws_session_token=answer["SessionToken"],
        region_name=REGION,
    )
    return lambda service: session.client(service, endpoint_url=cloud.endpoint_url)


def run_job(cloud: LocalCloud, target: dict[str, Any]) -> dict[str, Any]:
    """A job of tenant-a due in a second, created over HTTP, run to success: its view."""
    status, created = call(
        cloud, "POST", "/jobs", {"delay_seconds": 1, "target": {**target, "role_arn": TENANT_ROLE}}
    )
    assert status == 201, created

    def finished() -> Any:
        status, job = call(cloud, "GET", f"/jobs/{created['id']}")
        return job if status == 200 and job["state"] in ("succeeded", "failed", "dead") else None

    job: dict[str, Any] = wait_for(finished, timeout=180)
    assert job["state"] == "succeeded", job
    return job


def occurrence_key(job: dict[str, Any]) -> str:
    return str(job["occurrence"]["key"])


def test_a_job_starts_an_execution_of_the_tenants_state_machine(
    cloud: LocalCloud, tenant: tenant_resources.Clients
) -> None:
    # GIVEN a state machine in the tenant's account
    machine = tenant_resources.state_machine(tenant)
    # WHEN a job targeting it fires
    job = run_job(cloud, {"type": "stepfunctions", "state_machine_arn": machine})
    # THEN one execution exists there, under the name derived from the occurrence key
    key = occurrence_key(job)
    (execution,) = tenant_resources.executions(tenant, machine)
    assert execution["name"] == targets.execution_name("tenant-a", key)
    assert execution["input"]["occurrence_key"] == key


def test_a_job_puts_an_event_that_reaches_the_rules_queue(
    cloud: LocalCloud, tenant: tenant_resources.Clients
) -> None:
    # GIVEN a bus in the tenant's account whose rule sends SOURCE's events to a queue
    bus = tenant_resources.event_bus(tenant, source=SOURCE)
    # WHEN a job putting an event on it fires
    job = run_job(
        cloud,
        {
            "type": "eventbridge",
            "event_bus_arn": bus.arn,
            "detail_type": "report due",
            "source": SOURCE,
        },
    )
    # THEN the rule's queue holds the event, the occurrence key in its detail
    (got,) = wait_for(lambda: tenant_resources.received(tenant, bus.queue_url), timeout=30)
    assert got["Body"]["detail"]["occurrence_key"] == occurrence_key(job)
    assert got["Body"]["detail-type"] == "report due"


def test_a_job_publishes_a_message_that_reaches_the_subscribed_queue(
    cloud: LocalCloud, tenant: tenant_resources.Clients
) -> None:
    # GIVEN a topic in the tenant's account with a queue subscribed
    topic = tenant_resources.topic(tenant)
    # WHEN a job publishing to it fires
    job = run_job(cloud, {"type": "sns", "topic_arn": topic.arn})
    # THEN the queue holds the message, the occurrence key its IdempotencyKey attribute
    (got,) = wait_for(lambda: tenant_resources.received(tenant, topic.queue_url), timeout=30)
    key = occurrence_key(job)
    assert json.loads(got["Body"]["Message"])["occurrence_key"] == key
    assert got["Body"]["MessageAttributes"]["IdempotencyKey"]["Value"] == key
