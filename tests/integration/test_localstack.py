"""The local cloud against an external emulator (LocalStack): opt-in.

Runs only with `make localstack-test`, which selects the `localstack` marker and points
FIRELINE_ENDPOINT_URL at the emulator (default http://localhost:4566). The same deploy
path as the embedded moto: the template through the emulator's CloudFormation, the event
source mappings and API Gateway played locally.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from fireline.local.cloud import LocalCloud, LocalOptions
from helpers.local_cloud import KEY, a_schedule_fires_and_its_job_succeeds

pytestmark = pytest.mark.localstack


@pytest.fixture(scope="module")
def cloud() -> Iterator[LocalCloud]:
    endpoint = os.environ.get("FIRELINE_ENDPOINT_URL", "http://localhost:4566")
    options = LocalOptions(api_port=0, endpoint_url=endpoint, api_keys={KEY: "tenant-a"})
    with LocalCloud(options) as started:
        yield started


def test_a_schedule_fires_and_succeeds_on_the_external_emulator(cloud: LocalCloud) -> None:
    a_schedule_fires_and_its_job_succeeds(cloud, timeout=90)
