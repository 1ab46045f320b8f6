"""Keys, signatures and per-tenant rate limits on the local cloud, end to end over HTTP.

The cloud is started with a small usage plan (5 requests/s, bursts of 5) and a one-second
authorizer cache, so the limits and a revocation show within a test. Keys are made with
`fireline admin keys` against the emulator; a webhook is delivered to a receiver on
127.0.0.1 and checked with the receivers' verifier.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator
from typing import Any

import pytest

from fireline import webhooks
from fireline.cli import main
from fireline.local import runtime
from fireline.local.cloud import LocalCloud, LocalOptions
from helpers.local_cloud import KEY, TEST_KEYS, call, wait_for
from helpers.receiver import http_receiver

STACK = "fireline-local-keys"
RATE, BURST = 5, 5


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    options = LocalOptions(
        api_port=0,
        api_keys=dict(TEST_KEYS),
        log_path=tmp_path_factory.mktemp("local") / "local.log",
        stack_name=STACK,
        parameters={
            "UsagePlanRateLimit": str(RATE),
            "UsagePlanBurstLimit": str(BURST),
            "AuthorizerCacheTtlSeconds": "1",
        },
    )
    with LocalCloud(options) as started:
        yield started


def admin(cloud: LocalCloud, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    flags = ["--stack", STACK, "--endpoint-url", cloud.endpoint_url, "--json"]
    code = main.main(["admin", *args, *flags])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_the_gateway_applies_the_deployed_plan_and_cache_ttl(cloud: LocalCloud) -> None:
    assert cloud.gateway.cache_seconds == 1
    assert cloud.gateway.usage_plan == runtime.UsagePlan(rate=RATE, burst=BURST, daily_quota=None)


def test_a_key_made_by_the_admin_command_works_until_revoked(
    cloud: LocalCloud, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a key the operator created for a new tenant (found from the stack's outputs)
    created = admin(cloud, capsys, "keys", "create", "--tenant", "tenant-c")
    status, page = call(cloud, "GET", "/schedules", key=created["api_key"])
    assert (status, page["items"]) == (200, [])
    # WHEN it is revoked
    admin(cloud, capsys, "keys", "revoke", created["key_id"])
    # THEN the gateway refuses it once the authorizer's cached decision expires (1 s here)
    wait_for(lambda: call(cloud, "GET", "/schedules", key=created["api_key"])[0] == 401, 30)
    # AND the local cloud's own keys still work
    assert call(cloud, "GET", "/schedules", key=KEY)[0] == 200
    # AND the listing holds its key and the local cloud's (and any other test's keys)
    listed = admin(cloud, capsys, "keys", "list")
    assert {k["key_id"]: k["tenant"] for k in listed}[created["key_id"]] == "tenant-c"
    assert {"tenant-a", "tenant-b"} <= {k["tenant"] for k in listed}
    assert all("api_key" not in k for k in listed)


def test_a_tenant_over_its_rate_limit_is_answered_429_naming_it_and_nothing_is_written(
    cloud: LocalCloud, capsys: pytest.CaptureFixture[str]
) -> None:
    key = admin(cloud, capsys, "keys", "create", "--tenant", "tenant-busy")["api_key"]
    other = admin(cloud, capsys, "keys", "create", "--tenant", "tenant-calm")["api_key"]
    assert call(cloud, "GET", "/schedules", key=key)[0] == 200  # the authorizer is warm
    body = {"spec": "rate(1 hour)", "target": {"type": "python", "handler": "noop"}}

    # WHEN the tenant sends 30 creates at once (the bucket holds 5, refilled at 5/s)
    with concurrent.futures.ThreadPoolExecutor(30) as pool:
        answers = list(
            pool.map(lambda _: call(cloud, "POST", "/schedules", body, key=key), range(30))
        )

    # THEN the ones over the limit are 429 with the API's error shape naming the limit
    statuses = [status for status, _ in answers]
    assert set(statuses) == {201, 429} and statuses.count(429) >= 1
    refused = next(answer for status, answer in answers if status == 429)
    assert refused["error"]["type"] == "rate_limited"
    assert "UsagePlanRateLimit" in refused["error"]["message"]
    # AND another tenant is not throttled by it
    assert call(cloud, "GET", "/schedules", key=other)[0] == 200

    # AND exactly the admitted creates were written
    def listing() -> Any:
        status, page = call(cloud, "GET", "/schedules?limit=100", key=key)
        return page if status == 200 else None

    page = wait_for(listing, 30)
    assert len(page["items"]) == statuses.count(201)


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with http_receiver("/hook") as running:
        yield running


def test_a_delivery_is_signed_with_its_tenants_key_and_verified_by_the_receiver(
    cloud: LocalCloud,
    capsys: pytest.CaptureFixture[str],
    receiver: tuple[str, list[dict[str, Any]]],
) -> None:
    url, received = receiver
    # GIVEN a job of tenant-a whose target is the receiver
    status, job = call(
        cloud, "POST", "/jobs", {"delay_seconds": 0, "target": {"type": "http", "url": url}}
    )
    assert status == 201, job
    # WHEN the worker delivers it
    (delivery,) = wait_for(lambda: list(received), 60)
    # THEN it verifies with tenant-a's keys, as the operator hands them to the tenant
    keys_a = webhooks.keys_from_document(
        admin(cloud, capsys, "signing", "show", "--tenant", "tenant-a")
    )
    signed = {
        "headers": delivery["headers"],
        "method": "POST",
        "url": url,
        "body": delivery["body"],
    }
    assert webhooks.verify(keys_a, **signed) in keys_a
    # AND not with tenant-b's
    keys_b = webhooks.keys_from_document(
        admin(cloud, capsys, "signing", "show", "--tenant", "tenant-b")
    )
    with pytest.raises(webhooks.InvalidSignature):
        webhooks.verify(keys_b, **signed)
    # AND no signing secret is in any function's environment
    for host in cloud.hosts.values():
        assert all("whsec_" not in value for value in host.spec.environment.values())
        assert "WEBHOOK_SIGNING_SECRET" not in host.spec.environment
