"""The local cloud against an external emulator (LocalStack): opt-in.

Runs only with `make localstack-test`, which selects the `localstack` marker and points
FIRELINE_ENDPOINT_URL at the emulator (default http://localhost:4566). The same deploy
path as the embedded moto: the template through the emulator's CloudFormation, the event
source mappings and API Gateway played locally.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from fireline.local.cloud import LocalCloud, LocalOptions

from .test_local_cloud import KEY, call, wait_for

pytestmark = pytest.mark.localstack


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    endpoint = os.environ.get("FIRELINE_ENDPOINT_URL", "http://localhost:4566")
    options = LocalOptions(api_port=0, endpoint_url=endpoint, api_keys={KEY: "tenant-a"})
    with LocalCloud(options) as started:
        yield started


def test_a_schedule_fires_and_succeeds_on_the_external_emulator(cloud: LocalCloud) -> None:
    at = (datetime.now(UTC) + timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status, created = call(
        cloud,
        "POST",
        "/schedules",
        {"spec": f"at({at})", "target": {"type": "python", "handler": "echo"}},
    )
    assert status == 201

    def succeeded() -> object:
        _, page = call(cloud, "GET", f"/schedules/{created['id']}/occurrences")
        return [o for o in page["items"] if o["state"] == "succeeded"]

    assert wait_for(succeeded, timeout=90)
