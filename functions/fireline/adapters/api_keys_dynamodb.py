"""DynamoDB implementation of the ApiKeyStore port (ApiKeysTable).

An item per key: ``key_hash`` (SHA-256 of the key, the table's key) -> tenant, key id,
creation and end times, the tenant's usage identifier. The table never holds a usable
key. Items written before keys had ids (``key_hash`` and ``tenant_id`` only) read as
active keys whose id is derived from the hash, so they can be listed and revoked.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from fireline.adapters.dynamodb import _applied, _decode, _encode, _translated
from fireline.domain import api_keys, errors

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
else:
    DynamoDBClient = Any

LEGACY_ID_PREFIX = "legacy-"


def to_item(record: api_keys.ApiKey) -> dict[str, Any]:
    item: dict[str, Any] = {
        "key_hash": record.key_hash,
        "key_id": record.key_id,
        "tenant_id": record.tenant_id,
        "created_ms": record.created_ms,
    }
    if record.ends_ms is not None:
        item["ends_ms"] = record.ends_ms
    if record.usage_key is not None:
        item["usage_key"] = record.usage_key
    if record.operator:
        item["operator"] = True
    return _encode(item)


def from_item(item: dict[str, Any]) -> api_keys.ApiKey:
    raw = _decode(item)
    ends = raw.get("ends_ms")
    return api_keys.ApiKey(
        key_hash=str(raw["key_hash"]),
        key_id=str(raw.get("key_id") or LEGACY_ID_PREFIX + str(raw["key_hash"])[:16]),
        tenant_id=str(raw["tenant_id"]),
        created_ms=int(raw.get("created_ms", 0)),
        ends_ms=None if ends is None else int(ends),
        usage_key=raw.get("usage_key"),
        operator=raw.get("operator") is True,
    )


class DynamoApiKeyStore:
    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self._client = client
        self._table = table_name

    def get(self, api_key: str) -> api_keys.ApiKey | None:
        with _translated():
            response = self._client.get_item(
                TableName=self._table,
                Key={"key_hash": {"S": api_keys.key_hash(api_key)}},
                ConsistentRead=True,  # a key revoked a moment ago is refused at once
            )
        item = response.get("Item")
        return from_item(item) if item else None

    def add(self, record: api_keys.ApiKey) -> None:
        # Conditional on the hash being new: two keys colliding (never, with 32 random
        # bytes) or a retried create never overwrite a record another tenant owns.
        added = _applied(
            lambda: self._client.put_item(
                TableName=self._table,
                Item=to_item(record),
                ConditionExpression="attribute_not_exists(key_hash)",
            )
        )
        if not added:
            raise errors.AlreadyExists("an API key with this hash exists")

    def find(self, key_id: str) -> api_keys.ApiKey | None:
        return next((r for r in self.list() if r.key_id == key_id), None)

    def list(self, tenant_id: str | None = None) -> builtins.list[api_keys.ApiKey]:
        # A Scan: an operator's command over one item per key (tenants times keys, a few
        # thousand at most); on a request's path only for an operator's tenant list.
        records: builtins.list[api_keys.ApiKey] = []
        kwargs: dict[str, Any] = {"TableName": self._table, "ConsistentRead": True}
        while True:
            with _translated():
                page = self._client.scan(**kwargs)
            records.extend(from_item(item) for item in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        found = [r for r in records if tenant_id in (None, r.tenant_id)]
        return sorted(found, key=lambda r: (r.created_ms, r.key_id))

    def end(self, key_id: str, *, at_ms: int) -> api_keys.ApiKey:
        record = self.find(key_id)
        if record is None:
            raise errors.NotFound(f"no API key {key_id!r}")
        ended = record.ending(at_ms)
        # Conditional on the item still being there: an end never recreates a key.
        applied = _applied(
            lambda: self._client.update_item(
                TableName=self._table,
                Key={"key_hash": {"S": record.key_hash}},
                UpdateExpression="SET ends_ms = :end, key_id = :id",
                ConditionExpression="attribute_exists(key_hash)",
                ExpressionAttributeValues={
                    ":end": {"N": str(ended.ends_ms)},
                    ":id": {"S": record.key_id},
                },
            )
        )
        if not applied:
            raise errors.NotFound(f"no API key {key_id!r}")
        return ended
