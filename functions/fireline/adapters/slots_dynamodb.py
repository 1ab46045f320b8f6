"""DynamoDB implementation of the SlotStore port: tenants' concurrency slots and limit
overrides.

The slots table (see infra/template.yaml): (tenant_id, slot), one item per held slot, slot
-1 for the tenant's limit override (slot -2 is its quota use: see
fireline.adapters.quotas_dynamodb). A job slot's partition key is its block's
(fireline.domain.quota.slot_key): the tenant id for the first SLOT_KEY_BLOCK numbers,
``{tenant_id}#{n}`` past them, so a tenant with a large limit spreads its takes. The
register of every tenant's override is one more item, changed in one transaction with the
override itself.
"""

from __future__ import annotations

import builtins
import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from fireline.adapters.dynamodb import (
    BACKOFF_SECONDS,
    _applied,
    _cancellation_reasons,
    _code,
    _decode,
    _encode,
    _translated,
)
from fireline.domain import errors, quota

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef
else:
    DynamoDBClient = TransactWriteItemTypeDef = Any

LIMIT_SLOT = -1  # the item that holds a tenant's limit override sorts before its slots
# The register of every tenant's override is item (OVERRIDES_TENANT, LIMIT_SLOT): no tenant
# id has a '#' (api_keys.TENANT_ID) and no overlap scope starts with one, so it is nobody's.
OVERRIDES_TENANT = "#overrides"
OVERRIDES_KEY = {"tenant_id": {"S": OVERRIDES_TENANT}, "slot": {"N": str(LIMIT_SLOT)}}
# The register's own attributes beside one per override (quota.OVERRIDE_PREFIX + tenant):
# ``complete`` once it holds every override (set by build_overrides), and ``version``,
# which every change moves on, so a build knows whether a change landed while it scanned.
REGISTER_COMPLETE = "complete"
REGISTER_VERSION = "version"
# A class's register of live worker containers (see fireline.services.pool) is item
# (quota.pool_scope(class), POOL_SLOT): above the override (-1) and the quota use (-2),
# which the table's scans look for; an attribute per container, its expiry in ms.
POOL_SLOT = 0
POOL_MEMBER_PREFIX = "m:"
# A member gone this long is removed from the register, a few at a time.
POOL_FORGET_MS = 3_600_000
POOL_FORGET_AT_ONCE = 20
# A change that meets another, or a build that loses its race with changes, goes again
# this many times, then gives up (errors.Unavailable: try again).
BUILD_ATTEMPTS = 5


class DynamoSlotStore:
    """(tenant_id, slot): one item per held slot, and slot -1 for the limit override.

    One consistent Query reads a tenant's slots and override together. The deployment's
    register (item ``OVERRIDES_KEY``) holds every tenant's override too, so a worker
    learns with one read every few seconds which tenants run unlimited (and need no read
    of their slots at all). An override and its entry in the register are written in one
    transaction; the register is complete (``complete``) once built from the override
    items (:meth:`build_overrides`), which the overrides set before it existed need.
    """

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        default_limit: int = quota.DEFAULT_LIMIT,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self._table = table_name
        # The deployment's limit for tenants without an override: a read of a tenant's
        # slots covers the keys of the numbers below it, or below its override.
        self._default_limit = default_limit
        self._sleep = sleep  # the wait before a change that met another goes again
        # Members of a pool register seen gone at this adapter's last join (see join_pool).
        self._gone: set[str] = set()

    def held(
        self, tenant_id: str, *, consistent: bool = True
    ) -> tuple[builtins.list[quota.Slot], int | None]:
        # The tenant id's key first: its override says how far its numbers reach.
        slots, limit = self._held_on(tenant_id, consistent=consistent)
        reach = max(self._default_limit, limit or 0)
        for key in quota.slot_keys(tenant_id, reach)[1:]:
            slots += self._held_on(key, consistent=consistent)[0]
        return slots, limit

    def _held_on(
        self, key: str, *, consistent: bool
    ) -> tuple[builtins.list[quota.Slot], int | None]:
        slots: list[quota.Slot] = []
        limit: int | None = None
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            # From the limit override on: the items before it (quota use) are not slots.
            "KeyConditionExpression": "#tid = :tid AND #slot >= :first",
            "ExpressionAttributeNames": {"#tid": "tenant_id", "#slot": "slot"},
            "ExpressionAttributeValues": {
                ":tid": {"S": key},
                ":first": {"N": str(LIMIT_SLOT)},
            },
            "ConsistentRead": consistent,
        }
        while True:
            with _translated():
                response = self._client.query(**kwargs)
            for raw in response.get("Items", []):
                record = _decode(raw)
                if int(record["slot"]) == LIMIT_SLOT:
                    limit = int(record["limit"])
                else:
                    slots.append(
                        quota.Slot(
                            int(record["slot"]), record["holder"], int(record["expires_at_ms"])
                        )
                    )
            if "LastEvaluatedKey" not in response:
                return slots, limit
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def take(
        self,
        tenant_id: str,
        number: int,
        holder: str,
        *,
        now_ms: int,
        expires_at_ms: int,
        replacing: str | None = None,
    ) -> bool:
        condition = "attribute_not_exists(#slot) OR #exp <= :now"
        names = {"#slot": "slot", "#exp": "expires_at_ms"}
        values: dict[str, Any] = {":now": {"N": str(now_ms)}}
        if replacing is not None:
            # A slot whose holder's run is over, handed on without a give-back: of two
            # workers that saw the same finished holder, one takes it.
            condition += " OR #holder = :replacing"
            names["#holder"] = "holder"
            values[":replacing"] = {"S": replacing}
        try:
            with _translated():
                self._client.put_item(
                    TableName=self._table,
                    Item=_encode(
                        {
                            "tenant_id": quota.slot_key(tenant_id, number),
                            "slot": number,
                            "holder": holder,
                            "expires_at_ms": expires_at_ms,
                            # DynamoDB's TTL sweeps long-expired slots (seconds, not ms).
                            "expires_at": expires_at_ms // 1000 + 3600,
                        }
                    ),
                    # Two workers racing for one slot: one takes it. An expired slot (its
                    # holder died) is free again, so a crash never leaks a slot for good.
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def give_back(self, tenant_id: str, number: int, holder: str) -> None:
        try:
            with _translated():
                self._client.delete_item(
                    TableName=self._table,
                    Key=_encode({"tenant_id": quota.slot_key(tenant_id, number), "slot": number}),
                    # Only the holder frees it: after an expiry someone else may hold it.
                    ConditionExpression="#holder = :holder",
                    ExpressionAttributeNames={"#holder": "holder"},
                    ExpressionAttributeValues={":holder": {"S": holder}},
                )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise

    def join_pool(self, scope: str, member: str, *, now_ms: int, until_ms: int) -> int:
        # One item per class's register (scope, POOL_SLOT), an attribute per member: this
        # member's expiry set, and the members this adapter saw gone long ago removed in
        # the same write (a member that came back meanwhile says so again within a
        # period), so the item holds the containers of the last hour, not of all time.
        names = {"#me": POOL_MEMBER_PREFIX + member}
        change = "SET #me = :until"
        forgotten = sorted(self._gone - {member})[:POOL_FORGET_AT_ONCE]
        if forgotten:
            names.update({f"#g{n}": POOL_MEMBER_PREFIX + m for n, m in enumerate(forgotten)})
            change += " REMOVE " + ", ".join(f"#g{n}" for n in range(len(forgotten)))
        with _translated():
            response = self._client.update_item(
                TableName=self._table,
                Key=_encode({"tenant_id": scope, "slot": POOL_SLOT}),
                UpdateExpression=change,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={":until": {"N": str(until_ms)}},
                ReturnValues="ALL_NEW",
            )
        members = {
            name[len(POOL_MEMBER_PREFIX) :]: int(value["N"])
            for name, value in response.get("Attributes", {}).items()
            if name.startswith(POOL_MEMBER_PREFIX)
        }
        self._gone = {m for m, until in members.items() if until <= now_ms - POOL_FORGET_MS}
        return sum(1 for until in members.values() if until > now_ms)

    def set_limit(self, tenant_id: str, limit: int | None) -> None:
        key = _encode({"tenant_id": tenant_id, "slot": LIMIT_SLOT})
        names = {"#entry": quota.OVERRIDE_PREFIX + tenant_id, "#version": REGISTER_VERSION}
        values: dict[str, Any] = {":one": {"N": "1"}}
        own: TransactWriteItemTypeDef
        if limit is None:
            own = {"Delete": {"TableName": self._table, "Key": key}}
            change = "REMOVE #entry ADD #version :one"
        else:
            number = {"N": str(quota.check_limit(limit))}
            own = {"Put": {"TableName": self._table, "Item": {**key, "limit": number}}}
            change = "SET #entry = :limit ADD #version :one"
            values[":limit"] = number
        # One transaction: the tenant's own item (what ``held`` reads) and its entry in
        # the register (what ``overrides`` reads) never disagree. A register not built
        # yet is created or changed all the same, and stays incomplete until built.
        register: TransactWriteItemTypeDef = {
            "Update": {
                "TableName": self._table,
                "Key": OVERRIDES_KEY,
                "UpdateExpression": change,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }
        for attempt in range(BUILD_ATTEMPTS):
            try:
                with _translated(), _register_size():
                    self._client.transact_write_items(TransactItems=[own, register])
                return
            except ClientError as exc:
                # Two changes at once (an operator's and a build's): neither applied.
                if "TransactionConflict" not in _cancellation_reasons(exc):
                    raise
            self._sleep(BACKOFF_SECONDS * 2**attempt)
        raise errors.Unavailable("the register of limit overrides kept changing; try again")

    def overrides(self) -> dict[str, int] | None:
        with _translated():
            response = self._client.get_item(
                TableName=self._table, Key=OVERRIDES_KEY, ConsistentRead=False
            )
        return _complete_register(response.get("Item"))

    def build_overrides(self) -> int:
        for _ in range(BUILD_ATTEMPTS):
            with _translated():
                found = self._client.get_item(
                    TableName=self._table, Key=OVERRIDES_KEY, ConsistentRead=True
                ).get("Item")
            registered = _complete_register(found)
            if registered is not None:
                return len(registered)
            version = int(found[REGISTER_VERSION]["N"]) if found else None
            # Every override set before this read is in its own item, read consistently
            # below; one set after it moves the version on, and the put below is refused.
            overrides = self._override_items()
            item: dict[str, Any] = {
                **OVERRIDES_KEY,
                REGISTER_COMPLETE: {"BOOL": True},
                REGISTER_VERSION: {"N": str((version or 0) + 1)},
                **{quota.OVERRIDE_PREFIX + t: {"N": str(n)} for t, n in overrides.items()},
            }
            if version is None:
                condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(#v)"}
            else:
                condition = {
                    "ConditionExpression": "#v = :v",
                    "ExpressionAttributeValues": {":v": {"N": str(version)}},
                }
            put = functools.partial(
                self._client.put_item,
                TableName=self._table,
                Item=item,
                ExpressionAttributeNames={"#v": REGISTER_VERSION},
                **condition,
            )
            with _register_size():
                if _applied(put):
                    return len(overrides)
        raise errors.Unavailable("limit overrides kept changing during the build; run it again")

    def _override_items(self) -> dict[str, int]:
        """Every tenant's override item, read consistently (a scan of the table: the
        held slots and one or two items per tenant)."""
        overrides: dict[str, int] = {}
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "FilterExpression": "#slot = :limit AND #tid <> :register",
            "ExpressionAttributeNames": {"#slot": "slot", "#tid": "tenant_id"},
            "ExpressionAttributeValues": {
                ":limit": {"N": str(LIMIT_SLOT)},
                ":register": {"S": OVERRIDES_TENANT},
            },
            "ConsistentRead": True,
        }
        while True:
            with _translated():
                response = self._client.scan(**kwargs)
            for raw in response.get("Items", []):
                record = _decode(raw)
                overrides[str(record["tenant_id"])] = int(record["limit"])
            if "LastEvaluatedKey" not in response:
                return overrides
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def _complete_register(item: dict[str, Any] | None) -> dict[str, int] | None:
    """The overrides a register item holds; None unless it is complete."""
    if not item or not item.get(REGISTER_COMPLETE, {}).get("BOOL"):
        return None
    prefix = quota.OVERRIDE_PREFIX
    return {
        name[len(prefix) :]: int(value["N"])
        for name, value in item.items()
        if name.startswith(prefix)
    }


@contextmanager
def _register_size() -> Iterator[None]:
    """DynamoDB's refusal of a register past its 400 KB item limit, as OverridesFull
    (a transaction is refused whole: the tenant's own item is not written either)."""
    try:
        yield
    except ClientError as exc:
        too_large = _code(exc) == "ValidationException" and "size" in str(exc).lower()
        if too_large or "ValidationError" in _cancellation_reasons(exc):
            raise errors.OverridesFull() from exc
        raise
