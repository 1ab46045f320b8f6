"""ApiKeyStore and SigningKeyStore contract: memory and AWS (DynamoDB, Secrets Manager on
moto) behave alike, through the Protocols in fireline.ports only."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from fireline import ports
from fireline.adapters import api_keys_dynamodb, memory_keys, secretsmanager
from fireline.domain import api_keys, errors, signing
from helpers.aws import REGION, Stack

from .support import OTHER_TENANT, TENANT

NOW = 1_780_000_000_000


@pytest.fixture(params=["memory", "moto"])
def stores(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[ports.ApiKeyStore, ports.SigningKeyStore]]:
    if request.param == "memory":
        yield memory_keys.MemoryApiKeyStore(), memory_keys.MemorySigningKeyStore()
        return
    with mock_aws():
        stack = Stack.create()
        yield (
            api_keys_dynamodb.DynamoApiKeyStore(
                boto3.client("dynamodb", region_name=REGION), stack.tables["ApiKeysTable"]
            ),
            secretsmanager.SecretsManagerSigningKeys(
                boto3.client("secretsmanager", region_name=REGION), "fireline/test/signing/"
            ),
        )


def record(key: str, key_id: str, tenant: str = TENANT, created: int = NOW) -> api_keys.ApiKey:
    return api_keys.ApiKey(api_keys.key_hash(key), key_id, tenant, created, usage_key="u-1")


def test_a_key_is_found_by_its_value_and_id_and_listed_per_tenant_oldest_first(
    stores: tuple[ports.ApiKeyStore, ports.SigningKeyStore],
) -> None:
    keys, _ = stores
    keys.add(record("key-one-0123456789", "ak_1"))
    keys.add(record("key-two-0123456789", "ak_2", created=NOW + 1))
    keys.add(record("key-other-01234567", "ak_3", tenant=OTHER_TENANT, created=NOW + 2))
    found = keys.get("key-one-0123456789")
    assert found is not None and (found.key_id, found.tenant_id, found.usage_key) == (
        "ak_1",
        TENANT,
        "u-1",
    )
    assert keys.get("not-a-key") is None
    assert [r.key_id for r in keys.list(TENANT)] == ["ak_1", "ak_2"]
    assert [r.key_id for r in keys.list()] == ["ak_1", "ak_2", "ak_3"]
    assert keys.find("ak_3") == keys.get("key-other-01234567")


def test_a_key_is_added_once_and_never_overwritten(
    stores: tuple[ports.ApiKeyStore, ports.SigningKeyStore],
) -> None:
    keys, _ = stores
    keys.add(record("key-one-0123456789", "ak_1"))
    with pytest.raises(errors.AlreadyExists):
        keys.add(record("key-one-0123456789", "ak_9", tenant=OTHER_TENANT))
    found = keys.get("key-one-0123456789")
    assert found is not None and found.tenant_id == TENANT


def test_an_ended_key_is_refused_from_its_end_and_an_earlier_end_stays(
    stores: tuple[ports.ApiKeyStore, ports.SigningKeyStore],
) -> None:
    keys, _ = stores
    keys.add(record("key-one-0123456789", "ak_1"))
    ended = keys.end("ak_1", at_ms=NOW + 1000)
    assert ended.state_at(NOW) is api_keys.KeyState.EXPIRING
    assert keys.end("ak_1", at_ms=NOW + 5000).ends_ms == NOW + 1000  # never extended
    stored = keys.get("key-one-0123456789")
    assert stored is not None and not stored.accepted_at(NOW + 1000)
    with pytest.raises(errors.NotFound):
        keys.end("ak_missing", at_ms=NOW)


def test_a_tenants_ring_is_created_once_and_replaced_by_a_rotation(
    stores: tuple[ports.ApiKeyStore, ports.SigningKeyStore],
) -> None:
    _, rings = stores
    first = signing.SigningKey("sig_1", "whsec_first-0123456789", NOW)
    second = signing.SigningKey("sig_2", "whsec_second-0123456789", NOW + 1)
    assert rings.get(TENANT) is None
    assert rings.create(signing.KeyRing(TENANT, (first,))) is True
    # a second first ring (a race of two first keys) changes nothing
    assert rings.create(signing.KeyRing(TENANT, (second,))) is False
    assert rings.get(TENANT) == signing.KeyRing(TENANT, (first,))
    rotated = signing.KeyRing(TENANT, (first,)).rotated(second, now_ms=NOW + 1, overlap_seconds=60)
    rings.replace(rotated)
    assert rings.get(TENANT) == rotated
    assert rings.get(OTHER_TENANT) is None
