"""DynamoDB implementation of the BackfillStore port, in the workflows table.

The workflows table's keys are generic strings (see infra/template.yaml), so a backfill
record needs no table of its own: pk = ``B#{tenant_id}#{schedule_id}`` (neither id holds
a ``#``), sk = ``{backfill_id}``. While it needs a pass (running or cancelling) it
carries ``state_key = "active-backfills"``, which puts it in the sparse ``by_state``
index: the periodic pass's list, bounded by the backfills in progress, not by their
history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fireline import ports
from fireline.adapters.dynamodb import (
    _applied,
    _decode,
    _encode,
    _from_ms,
    _ms,
    _opt_from_ms,
    _query_page,
    _translated,
)
from fireline.domain import backfill, errors

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
else:
    DynamoDBClient = Any

PREFIX = "B#"
ACTIVE = "active-backfills"
STATE_INDEX = "by_state"
INDEX_KEYS = ("pk", "sk", "state_key")


def _pk(tenant_id: str, schedule_id: str) -> str:
    return f"{PREFIX}{tenant_id}#{schedule_id}"


def _parts(pk: object) -> tuple[str, str]:
    tenant_id, schedule_id = str(pk)[len(PREFIX) :].split("#", 1)
    return tenant_id, schedule_id


def to_item(item: backfill.Backfill) -> dict[str, Any]:
    return {
        "pk": _pk(item.tenant_id, item.schedule_id),
        "sk": item.backfill_id,
        "state_key": ACTIVE if item.active else None,
        "tenant_id": item.tenant_id,
        "version": item.version,
        "job_class": item.job_class,
        "from_ms": _ms(item.start),
        "to_ms": _ms(item.end),
        "overlap": item.overlap.value,
        "created_at_ms": _ms(item.created_at),
        "fires": item.fires,
        "created": item.created,
        "existed": item.existed,
        "state": item.state.value,
        "released_until_ms": _ms(item.released_until) if item.released_until else None,
        "released": item.released,
        "in_flight": list(item.in_flight) or None,
        "run": item.run,
        "cancelled": item.cancelled,
        "revision": item.revision,
    }


def from_item(record: dict[str, Any]) -> backfill.Backfill:
    return backfill.Backfill(
        tenant_id=record["tenant_id"],
        schedule_id=_parts(record["pk"])[1],
        backfill_id=record["sk"],
        version=int(record["version"]),
        job_class=record["job_class"],
        start=_from_ms(record["from_ms"]),
        end=_from_ms(record["to_ms"]),
        overlap=backfill.Overlap(record["overlap"]),
        created_at=_from_ms(record["created_at_ms"]),
        fires=int(record["fires"]),
        created=int(record["created"]),
        existed=int(record["existed"]),
        state=backfill.State(record["state"]),
        released_until=_opt_from_ms(record.get("released_until_ms")),
        released=int(record["released"]),
        in_flight=tuple(record.get("in_flight") or ()),
        run=int(record["run"]),
        cancelled=int(record["cancelled"]),
        revision=int(record["revision"]),
    )


class DynamoBackfillStore:
    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self._client = client
        self._table = table_name

    def create(self, item: backfill.Backfill) -> None:
        # Absent only: a backfill id is drawn fresh, so a taken one is never overwritten.
        created = _applied(
            lambda: self._client.put_item(
                TableName=self._table,
                Item=_encode(to_item(item)),
                ConditionExpression="attribute_not_exists(pk)",
            )
        )
        if not created:
            raise errors.AlreadyExists(f"backfill {item.backfill_id} exists")

    def get(self, tenant_id: str, schedule_id: str, backfill_id: str) -> backfill.Backfill | None:
        with _translated():
            response = self._client.get_item(
                TableName=self._table,
                Key=_encode({"pk": _pk(tenant_id, schedule_id), "sk": backfill_id}),
                ConsistentRead=True,
            )
        raw = response.get("Item")
        if raw is None:
            return None
        found = from_item(_decode(raw))
        return found if found.tenant_id == tenant_id else None

    def replace(self, item: backfill.Backfill, *, expected_revision: int) -> bool:
        # On the revision read: of two passes that read the same record, one moves it
        # and the other finds it moved (its messages were the same fires': harmless).
        return _applied(
            lambda: self._client.put_item(
                TableName=self._table,
                Item=_encode(to_item(item)),
                ConditionExpression="#revision = :expected",
                ExpressionAttributeNames={"#revision": "revision"},
                ExpressionAttributeValues={":expected": {"N": str(expected_revision)}},
            )
        )

    def active(self, *, limit: int, cursor: str | None = None) -> ports.Page[tuple[str, str, str]]:
        if limit < 1:
            raise errors.ValidationError("must be at least 1", field="limit")
        found, after = _query_page(
            self._client,
            table=self._table,
            partition=("state_key", ACTIVE),
            cursor_keys=INDEX_KEYS,
            limit=limit,
            cursor=cursor,
            index=STATE_INDEX,
        )
        return ports.Page([(*_parts(r["pk"]), str(r["sk"])) for r in found], after)
