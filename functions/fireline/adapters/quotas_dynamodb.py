"""DynamoDB implementation of the QuotaStore port, and the quota half of the stores'
atomic creates and deletes.

A tenant's quota use lives beside its concurrency limit override, in the slots table:
item (tenant_id, slot -2) holds a running count per counted quota (``used_schedules``,
``used_active_jobs``, ``used_workflows``), the operator's overrides (``limit_...``) and
today's uploads (``uploads_day``, ``uploads``). The slot store's Query starts at slot -1,
so its reads never see this item.

A create that takes a unit is one TransactWriteItems: the item's conditional put and this
item's ``ADD used :1``, conditional on the count being under the limit (the override if
the operator set one, else the deployment's default, both decided inside the condition).
Of two creates racing for the last unit, one transaction lands; the other fails whole and
writes nothing. A delete (or a job's end) gives the unit back in one transaction with the
write that removes the item (or its ``quota_held`` mark), which is conditional on the mark:
a retried delete finds no item and gives nothing back twice.

Cost: the create's transaction writes two items, each at twice a plain write's units:
4 write units against the plain put's 1, and still one request. The same for a delete.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from fireline.adapters.dynamodb import (
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

USAGE_SLOT = -2  # sorts before the limit override (-1) and the slots (0..)
# A transaction that meets another on the same item (two creates of one tenant at once) is
# cancelled with TransactionConflict and nothing of it applied: tried again this many times.
ATTEMPTS = 5
BACKOFF_SECONDS = 0.02
UPLOADS_DAY = "uploads_day"
UPLOADS = "uploads"


def used_attribute(name: quota.Quota) -> str:
    return f"used_{name.value}"


def limit_attribute(name: quota.Quota) -> str:
    return f"limit_{name.value}"


class DynamoQuotaStore:
    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self._table = table_name
        self._sleep = sleep

    def _key(self, tenant_id: str) -> dict[str, Any]:
        return _encode({"tenant_id": tenant_id, "slot": USAGE_SLOT})

    # --- the port ------------------------------------------------------------------------

    def usage(self, tenant_id: str) -> quota.Usage:
        with _translated():
            response = self._client.get_item(
                TableName=self._table, Key=self._key(tenant_id), ConsistentRead=True
            )
        record = _decode(response.get("Item") or {})
        used = {
            q: int(record[used_attribute(q)]) for q in quota.Quota if used_attribute(q) in record
        }
        overrides = {
            q: int(record[limit_attribute(q)]) for q in quota.Quota if limit_attribute(q) in record
        }
        return quota.Usage(
            used=used,
            overrides=overrides,
            uploads_day=record.get(UPLOADS_DAY),
            uploads=int(record.get(UPLOADS, 0)),
        )

    def set_limit(self, tenant_id: str, name: quota.Quota, limit: int | None) -> None:
        names = {"#lim": limit_attribute(name)}
        with _translated():
            if limit is None:
                self._client.update_item(
                    TableName=self._table,
                    Key=self._key(tenant_id),
                    UpdateExpression="REMOVE #lim",
                    ExpressionAttributeNames=names,
                )
            else:
                self._client.update_item(
                    TableName=self._table,
                    Key=self._key(tenant_id),
                    UpdateExpression="SET #lim = :lim",
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues={":lim": {"N": str(quota.check_quota(name, limit))}},
                )

    def count_upload(self, tenant_id: str, day: str, charge: quota.Charge) -> int:
        names = {"#day": UPLOADS_DAY, "#n": UPLOADS, "#lim": limit_attribute(charge.quota)}
        for _ in range(ATTEMPTS):
            # The common case: another upload on the same day, under the limit.
            condition, values = _under_limit("#n", charge.default)
            same_day = self._update(
                tenant_id,
                UpdateExpression="ADD #n :one",
                ConditionExpression=f"#day = :day AND ({condition})",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={**values, ":one": {"N": "1"}, ":day": {"S": day}},
            )
            if same_day is not None:
                return same_day
            # The first of a day (or ever): the count starts again at one, which every
            # limit allows (the smallest is 1; 0 is none).
            new_day = self._update(
                tenant_id,
                UpdateExpression="SET #day = :day, #n = :one",
                ConditionExpression="attribute_not_exists(#day) OR #day <> :day",
                ExpressionAttributeNames={"#day": UPLOADS_DAY, "#n": UPLOADS},
                ExpressionAttributeValues={":one": {"N": "1"}, ":day": {"S": day}},
            )
            if new_day is not None:
                return new_day
            usage = self.usage(tenant_id)
            if usage.uploads_day == day:
                limit = usage.limit(charge.quota, {charge.quota: charge.default})
                if not quota.under(limit, usage.uploads):
                    raise quota.exceeded(charge.quota, limit, usage.uploads)
            # Otherwise the day or the override changed between the two writes: again.
        raise errors.Unavailable("the upload count kept changing; try again")

    def _update(self, tenant_id: str, **kwargs: Any) -> int | None:
        """A conditional update of the usage item: the uploads count after it, or None
        when the condition failed (nothing written)."""
        try:
            with _translated():
                response = self._client.update_item(
                    TableName=self._table,
                    Key=self._key(tenant_id),
                    ReturnValues="UPDATED_NEW",
                    **kwargs,
                )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return None
            raise
        return int(_decode(response.get("Attributes", {})).get(UPLOADS, 0))

    # --- what the stores put in their transactions ---------------------------------------

    def charge(self, tenant_id: str, charge: quota.Charge) -> TransactWriteItemTypeDef:
        """Take a unit, on the condition that the tenant is under its limit."""
        condition, values = _under_limit("#used", charge.default)
        return {
            "Update": {
                "TableName": self._table,
                "Key": self._key(tenant_id),
                "UpdateExpression": "ADD #used :one",
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {
                    "#used": used_attribute(charge.quota),
                    "#lim": limit_attribute(charge.quota),
                },
                "ExpressionAttributeValues": {**values, ":one": {"N": "1"}},
            }
        }

    def refund(self, tenant_id: str, name: quota.Quota) -> TransactWriteItemTypeDef:
        """Give a unit back. Unconditional: the write beside it in the transaction is the
        condition (the item held the unit, and this is the first time it is given)."""
        return {
            "Update": {
                "TableName": self._table,
                "Key": self._key(tenant_id),
                "UpdateExpression": "ADD #used :minus",
                "ExpressionAttributeNames": {"#used": used_attribute(name)},
                "ExpressionAttributeValues": {":minus": {"N": "-1"}},
            }
        }

    def transact(self, items: Sequence[TransactWriteItemTypeDef]) -> list[str]:
        """Run a transaction: [] when it applied, else each item's cancellation reason
        (``ConditionalCheckFailed`` where a condition failed, ``None`` elsewhere).

        No ClientRequestToken: a repeat within its 10 minutes would report success
        without applying, and the caller must learn that the first one applied."""
        for attempt in range(ATTEMPTS):
            try:
                with _translated():
                    self._client.transact_write_items(TransactItems=list(items))
            except ClientError as exc:
                if _code(exc) != "TransactionCanceledException":
                    raise
                reasons = _cancellation_reasons(exc)
                if "ConditionalCheckFailed" in reasons:
                    return reasons
                if "TransactionConflict" in reasons and attempt < ATTEMPTS - 1:
                    self._sleep(BACKOFF_SECONDS * 2**attempt)
                    continue
                raise errors.Unavailable(
                    f"DynamoDB cancelled the transaction ({', '.join(reasons)})"
                ) from exc
            return []
        raise AssertionError("unreachable")  # pragma: no cover

    def refused(self, tenant_id: str, charge: quota.Charge) -> errors.QuotaExceeded:
        """The error for a charge whose condition failed, with the limit and use as read
        now (a read only on the refusing path)."""
        usage = self.usage(tenant_id)
        limit = usage.limit(charge.quota, {charge.quota: charge.default})
        return quota.exceeded(charge.quota, limit, usage.count(charge.quota))


def _under_limit(used: str, default: int) -> tuple[str, dict[str, Any]]:
    """A condition true when the count ``used`` is under the tenant's limit: its override
    (``#lim``) when set, else ``default``; 0 in either place means no limit."""
    values: dict[str, Any] = {":zero": {"N": "0"}}
    clauses = [f"attribute_not_exists({used})", "#lim = :zero", f"{used} < #lim"]
    if default == quota.UNLIMITED:
        clauses.append("attribute_not_exists(#lim)")
    else:
        clauses.append(f"(attribute_not_exists(#lim) AND {used} < :default)")
        values[":default"] = {"N": str(default)}
    return " OR ".join(clauses), values
