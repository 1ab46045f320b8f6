"""Webhook signatures as a receiver sees them: per-tenant keys, rotation, replay window.

Deliveries are made by the real TargetRunner to a local HTTP receiver, signed with keys
`fireline admin` created (KeyAdmin on the memory stores), and checked with the verifier
receivers use, fireline.webhooks.verify.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from fireline import webhooks
from fireline.adapters import memory_keys
from fireline.domain import egress, signing
from fireline.services import keys, targets, webhook
from helpers.receiver import http_receiver

START_MS = 1_780_000_000_000
LOCAL = webhook.Egress(policy=egress.EgressPolicy.parse("*", "127.0.0.0/8"))


@dataclass
class Delivery:
    headers: dict[str, str]
    method: str
    url: str
    body: bytes
    sent_at: float  # the wall-clock second it was signed in (close enough: same second)

    def verify(self, secrets: dict[str, str], **changes: Any) -> str:
        fields: dict[str, Any] = {
            "headers": self.headers,
            "method": self.method,
            "url": self.url,
            "body": self.body,
            "now": self.sent_at,
            **changes,
        }
        return webhooks.verify(secrets, **fields)


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with http_receiver("") as running:
        yield running


class Deployment:
    """The stores, the operator's KeyAdmin and a worker's runner with its key cache."""

    def __init__(self) -> None:
        self.now_ms = START_MS
        self.monotonic = 0.0
        self.store = memory_keys.MemorySigningKeyStore()
        self.admin = keys.KeyAdmin(
            keys=memory_keys.MemoryApiKeyStore(),
            signing_keys=self.store,
            usage=memory_keys.MemoryUsagePlans(),
            now_ms=lambda: self.now_ms,
        )
        self.cache = keys.SigningKeys(self.store, monotonic=lambda: self.monotonic)
        self.runner = targets.TargetRunner(
            registry=targets.Registry(),
            signing_key=self.cache.current,
            lambda_client=lambda timeout, credentials: None,
            sqs_client=lambda credentials: None,
            egress=LOCAL,
        )

    def advance(self, seconds: float) -> None:
        self.now_ms += int(seconds * 1000)
        self.monotonic += seconds

    def deliver(self, tenant_id: str, url: str, received: list[dict[str, Any]]) -> Delivery:
        context = targets.JobContext(
            occurrence_key=f"s1#1#{len(received)}",
            tenant_id=tenant_id,
            schedule_id="s1",
            fire_time=datetime(2026, 6, 1, tzinfo=UTC),
            attempt=1,
            payload={"n": 1},
        )
        before = int(time.time())
        self.runner.run({"type": "http", "url": url}, context, timeout=5)
        request = received[-1]
        return Delivery(request["headers"], "POST", url, request["body"], float(before))

    def secrets(self, tenant_id: str) -> dict[str, str]:
        """What the tenant's receiver holds: `fireline admin signing show --json`, read."""
        document = self.admin.signing_ring(tenant_id).to_document()
        return webhooks.keys_from_document(document, now=self.now_ms / 1000)


@pytest.fixture
def deployment() -> Deployment:
    built = Deployment()
    built.admin.create("tenant-a")
    built.admin.create("tenant-b")
    return built


def test_a_delivery_verifies_with_its_tenants_key_and_not_with_another_tenants(
    deployment: Deployment, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    base, received = receiver
    # GIVEN tenant A's delivery to its receiver
    url = f"{base}/a/hook"
    delivery = deployment.deliver("tenant-a", url, received)
    # THEN it names the key it was signed with, and tenant A's keys verify it
    ring_a = deployment.admin.signing_ring("tenant-a")
    assert f"keyid={ring_a.current.key_id}" in delivery.headers[webhooks.SIGNATURE_HEADER]
    assert delivery.verify(deployment.secrets("tenant-a")) == ring_a.current.key_id
    # AND tenant B's receiver, holding tenant B's keys, refuses it: the key id is not one
    # of B's, and B's secret under A's key id does not match either
    with pytest.raises(webhooks.UnknownKey):
        delivery.verify(deployment.secrets("tenant-b"))
    b_secret = deployment.admin.signing_ring("tenant-b").current.secret
    with pytest.raises(webhooks.SignatureMismatch):
        delivery.verify({ring_a.current.key_id: b_secret})
    # AND replayed to tenant B's URL it does not verify with A's keys either (URL signed)
    with pytest.raises(webhooks.SignatureMismatch):
        delivery.verify(deployment.secrets("tenant-a"), url=f"{base}/b/hook")
    # AND no two tenants share a secret
    assert ring_a.current.secret != b_secret


@pytest.mark.parametrize(
    "change",
    [
        {"method": "PUT"},
        {"url": "http://127.0.0.1:1/elsewhere"},
        {"body": b'{"n":2}'},
        {"headers": {}},
    ],
    ids=["method", "url", "body", "no-header"],
)
def test_a_changed_method_url_or_body_is_refused(
    deployment: Deployment, receiver: tuple[str, list[dict[str, Any]]], change: dict[str, Any]
) -> None:
    base, received = receiver
    delivery = deployment.deliver("tenant-a", f"{base}/hook", received)
    secrets = deployment.secrets("tenant-a")
    assert delivery.verify(secrets)  # unchanged, it verifies
    with pytest.raises(webhooks.InvalidSignature):
        delivery.verify(secrets, **change)


def test_a_replay_outside_the_window_is_refused_and_inside_it_verifies(
    deployment: Deployment, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    base, received = receiver
    delivery = deployment.deliver("tenant-a", f"{base}/hook", received)
    secrets = deployment.secrets("tenant-a")
    window = webhooks.DEFAULT_TOLERANCE_SECONDS
    # replayed within the window (either side): verifies; the Idempotency-Key is what
    # a receiver recognises the repeat by
    assert delivery.verify(secrets, now=delivery.sent_at + window - 1)
    assert delivery.verify(secrets, now=delivery.sent_at - window + 1)
    assert delivery.headers["Idempotency-Key"] == "s1#1#0"
    # past it: refused, whatever the key
    with pytest.raises(webhooks.OutsideReplayWindow):
        delivery.verify(secrets, now=delivery.sent_at + window + 2)
    # and a receiver with a shorter window refuses sooner
    with pytest.raises(webhooks.OutsideReplayWindow):
        delivery.verify(secrets, now=delivery.sent_at + 62, tolerance=60)


def test_rotation_keeps_both_keys_valid_for_the_overlap_then_only_the_new_one(
    deployment: Deployment, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    base, received = receiver
    url = f"{base}/hook"
    old_key = deployment.admin.signing_ring("tenant-a").current
    signed_with_old = deployment.deliver("tenant-a", url, received)
    # WHEN the operator rotates with a one-hour overlap
    overlap = 3600
    ring = deployment.admin.rotate_signing("tenant-a", overlap_seconds=overlap)
    new_key = ring.current
    assert new_key.key_id != old_key.key_id
    # THEN a worker whose cached ring predates the rotation still signs with the old key,
    # and the receiver, holding both valid keys, accepts it
    deployment.advance(60)
    during = deployment.secrets("tenant-a")
    assert set(during) == {old_key.key_id, new_key.key_id}
    still_old = deployment.deliver("tenant-a", url, received)
    assert still_old.verify(during) == old_key.key_id
    assert signed_with_old.verify(during) == old_key.key_id
    # AND once the cache entry expires the worker signs with the new key
    deployment.advance(keys.DEFAULT_CACHE_SECONDS)
    fresh = deployment.deliver("tenant-a", url, received)
    assert fresh.verify(deployment.secrets("tenant-a")) == new_key.key_id
    # AND after the overlap only the new key is valid: the old one is refused
    deployment.advance(overlap)
    after = deployment.secrets("tenant-a")
    assert set(after) == {new_key.key_id}
    with pytest.raises(webhooks.UnknownKey):
        still_old.verify(after)
    assert fresh.verify(after) == new_key.key_id


def test_a_rotation_shorter_than_the_workers_cache_is_refused_and_changes_nothing(
    deployment: Deployment,
) -> None:
    before = deployment.admin.signing_ring("tenant-a")
    with pytest.raises(Exception, match="overlap_seconds") as caught:
        deployment.admin.rotate_signing("tenant-a", overlap_seconds=10)
    assert getattr(caught.value, "field", None) == "overlap_seconds"
    assert deployment.admin.signing_ring("tenant-a") == before


def test_the_worker_reads_a_tenants_secret_once_per_cache_ttl(
    deployment: Deployment, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    base, received = receiver
    reads = deployment.store.reads
    for _ in range(5):
        deployment.deliver("tenant-a", f"{base}/hook", received)
    assert deployment.store.reads - reads == 1
    deployment.advance(keys.DEFAULT_CACHE_SECONDS + 1)
    deployment.deliver("tenant-a", f"{base}/hook", received)
    assert deployment.store.reads - reads == 2


def test_a_tenant_without_a_signing_key_gets_a_failed_attempt_and_nothing_is_sent(
    deployment: Deployment, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    base, received = receiver
    context = targets.JobContext("k", "tenant-new", "s", datetime(2026, 6, 1, tzinfo=UTC), 1, {})
    with pytest.raises(targets.TargetFailed, match="no webhook signing key"):
        deployment.runner.run({"type": "http", "url": f"{base}/hook"}, context, timeout=5)
    assert received == []


def test_the_key_document_round_trips_and_a_malformed_header_is_refused() -> None:
    key = signing.SigningKey("sig_1", "whsec_0123456789abcdef", created_ms=START_MS)
    ring = signing.KeyRing("tenant-a", (key,))
    assert signing.KeyRing.from_json(ring.to_json()) == ring
    assert webhooks.keys_from_document(json.dumps(ring.to_document())) == {"sig_1": key.secret}
    for header in ("", "t=1", "t=x,keyid=sig_1,v1=00", "keyid=sig_1,v1=00", "garbage"):
        with pytest.raises(webhooks.MalformedSignature):
            webhooks.verify(
                {"sig_1": key.secret},
                headers={webhooks.SIGNATURE_HEADER: header},
                method="POST",
                url="https://x.example/h",
                body=b"",
                now=1,
            )
