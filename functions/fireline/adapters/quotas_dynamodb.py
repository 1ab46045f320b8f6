"""DynamoDB implementation of the QuotaStore port, and the quota half of the stores'
creates and deletes.

A tenant's quota use lives beside its concurrency limit override, in the slots table:
item (tenant_id, slot -2) holds a running count per counted quota (``used_schedules``,
``used_active_jobs``, ``used_workflows``), the operator's overrides (``limit_...``) and
today's uploads (``uploads_day``, ``uploads``). The slot store's Query starts at slot -1,
so its reads never see this item.

A create that takes a unit first takes it (:meth:`DynamoQuotaStore.take`: ``ADD used
:1``, conditional on the count being under the limit, the override if the operator set
one, else the deployment's default, both decided inside the condition), then writes its
item, conditional on the id being new. Of two creates racing for the last unit, one
increment lands; the other is refused and writes nothing. An item write that is refused
(the id exists: a retried create) gives the unit back (:meth:`give_back`); one whose
outcome is unknown (a timeout, a lost answer) keeps it. A job's end removes the job's
mark (conditional on the mark: a repeat finds none) and then gives the unit back.

So the count is never below the items holding units: every unit is taken before its item
exists and given back after its mark is gone. A process that dies between its two writes
(or a create whose item write failed without an answer) leaves the count one too high, a
unit held by nothing: the tenant may be refused a create early, and is never admitted
over its limit.

A batch of jobs (POST /jobs/batch) holds its units in holders instead (see
fireline.domain.quota.Holder): items of the tenant's partition numbered below every other
(quota.HOLDER_BASE on), each listing its jobs of one fire minute. A batch's count and its
holders are written in one transaction, and a holder loses jobs (or is deleted) in one
transaction with the count's decrement: those units are exact, never too high or too low.

Cost: two plain writes (the count and the item, 1 write unit each) where a transaction of
the two took 4, and two requests instead of one. A batch of 100 jobs of one minute: a
transaction of the count and its holder (about 4 KB) when created, another when the sweep
deletes the holder, some 0.2 write units a job. A schedule's delete is still one
transaction of two items (the delete and the decrement, 4 units): deletes are rare.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
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
# The token of the last count change, which a resend of that change recognises.
LAST_WRITE = "last_write"


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

    # --- what the stores call around their own writes ------------------------------------

    def take(self, tenant_id: str, charge: quota.Charge, count: int = 1) -> None:
        """Take ``count`` units if they fit under the tenant's limit; QuotaExceeded
        (naming the limit and use, read once) when not, with nothing written."""
        if count == 1:
            condition, values = _under_limit("#used", charge.default)
            refused = lambda: self.refused(tenant_id, charge)  # noqa: E731
        else:
            condition, values = _room_for("#used", charge.default, count, None)
            refused = None
        names = {
            "#used": used_attribute(charge.quota),
            "#lim": limit_attribute(charge.quota),
            "#last": LAST_WRITE,
        }
        for _ in range(ATTEMPTS):
            token = secrets.token_hex(8)
            try:
                self._counted_once(
                    tenant_id,
                    token,
                    UpdateExpression="ADD #used :n SET #last = :token",
                    # Two creates racing for the last units: one increment lands, the
                    # other's condition fails.
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues={
                        **values,
                        ":n": {"N": str(count)},
                        ":token": {"S": token},
                    },
                    refused=refused,
                )
                return
            except _Refused as exc:
                # Several units: a condition cannot add, so the limit it compares with is
                # the default less ``count``, or the override less ``count`` once the
                # refusal's own copy of the item showed one (the condition then also
                # holds the override to that value, should the operator change it).
                override = exc.old.get(limit_attribute(charge.quota))
                used = max(0, int(exc.old.get(used_attribute(charge.quota), 0)))
                limit = charge.default if override is None else int(override)
                if not quota.under(limit, used + count - 1):
                    raise quota.exceeded(charge.quota, limit, used, asked=count) from None
                condition, values = _room_for("#used", charge.default, count, int(limit))
        raise errors.Unavailable("the quota's limit kept changing; try again")

    def give_back(self, tenant_id: str, name: quota.Quota, count: int = 1) -> None:
        """Give ``count`` units back. Not conditional on the count: the caller's own
        conditional writes (the marks it removed, the items it could not create) are what
        make it happen once for their items."""
        token = secrets.token_hex(8)
        self._counted_once(
            tenant_id,
            token,
            UpdateExpression="ADD #used :minus SET #last = :token",
            ExpressionAttributeNames={"#used": used_attribute(name), "#last": LAST_WRITE},
            ExpressionAttributeValues={":minus": {"N": str(-count)}, ":token": {"S": token}},
        )

    def _counted_once(
        self,
        tenant_id: str,
        token: str,
        *,
        refused: Callable[[], errors.QuotaExceeded] | None = None,
        **kwargs: Any,
    ) -> None:
        """One change of a count, applied once however often it is sent. The write
        records its token in the item; the SDK resends a request whose answer was lost,
        and this method sends it again after an Unavailable: a resend that finds its own
        token applied already (one that finds the condition failed for another reason
        is a refusal). Without it a lost answer would count a unit twice, or refuse a
        create whose unit was taken, or give a unit back twice."""
        condition = kwargs.pop("ConditionExpression", None)
        guard = "(attribute_not_exists(#last) OR #last <> :token)"
        kwargs["ConditionExpression"] = f"{guard} AND ({condition})" if condition else guard
        for attempt in range(ATTEMPTS):
            try:
                with _translated():
                    self._client.update_item(
                        TableName=self._table,
                        Key=self._key(tenant_id),
                        ReturnValuesOnConditionCheckFailure="ALL_OLD",
                        **kwargs,
                    )
                return
            except errors.Unavailable:
                if attempt == ATTEMPTS - 1:
                    raise
                self._sleep(BACKOFF_SECONDS * 2**attempt)
            except ClientError as exc:
                if _code(exc) != "ConditionalCheckFailedException":
                    raise
                old = _decode(exc.response.get("Item") or {})  # type: ignore[arg-type]
                if old.get(LAST_WRITE) == token:
                    return  # applied by an earlier send whose answer was lost
                if refused is None:
                    raise _Refused(old) from exc
                raise refused() from exc
        raise AssertionError("unreachable")  # pragma: no cover

    # --- a batch's holders (see fireline.domain.quota.Holder) ------------------------------

    def hold_jobs(
        self, tenant_id: str, charge: quota.Charge, entries: Sequence[str], created_at: datetime
    ) -> list[quota.Holder]:
        """Take a unit for each job (``entries``, see quota.held_entry) if they all fit
        under the tenant's limit, and write the holders that hold them, one per fire
        minute, in one transaction; QuotaExceeded (nothing written) when they do not fit."""
        by_visit = quota.by_visit(entries, quota.MOST_HOLDERS)
        count = sum(len(jobs) for jobs in by_visit.values())
        condition, values = _room_for("#used", charge.default, count, None)
        for _ in range(ATTEMPTS):
            holders = [
                quota.Holder(
                    tenant_id,
                    quota.holder_number(visit, secrets.randbelow(quota.HOLDER_SPREAD)),
                    frozenset(jobs),
                    created_at,
                )
                for visit, jobs in by_visit.items()
            ]
            take: TransactWriteItemTypeDef = {
                "Update": {
                    "TableName": self._table,
                    "Key": self._key(tenant_id),
                    "UpdateExpression": "ADD #used :n SET #last = :token",
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": {
                        "#used": used_attribute(charge.quota),
                        "#lim": limit_attribute(charge.quota),
                        "#last": LAST_WRITE,
                    },
                    "ExpressionAttributeValues": {
                        **values,
                        ":n": {"N": str(count)},
                        ":token": {"S": secrets.token_hex(8)},
                    },
                }
            }
            puts: list[TransactWriteItemTypeDef] = [
                {
                    "Put": {
                        "TableName": self._table,
                        "Item": _encode(_holder_item(h)),
                        "ConditionExpression": "attribute_not_exists(#slot)",
                        "ExpressionAttributeNames": {"#slot": "slot"},
                    }
                }
                for h in holders
            ]
            reasons = self.transact([take, *puts])
            if not reasons:
                return holders
            if reasons[0] != "ConditionalCheckFailed":
                continue  # a holder's number was taken: new numbers
            # Refused: as take() does, learn the override, if any, and ask again with it.
            usage = self.usage(tenant_id)
            limit = usage.limit(charge.quota, {charge.quota: charge.default})
            used = usage.count(charge.quota)
            if not quota.under(limit, used + count - 1):
                raise quota.exceeded(charge.quota, limit, used, asked=count)
            override = usage.overrides.get(charge.quota)
            condition, values = _room_for("#used", charge.default, count, override)
        raise errors.Unavailable("the quota's limit kept changing; try again")

    def unhold(
        self, tenant_id: str, number: int, entries: Sequence[str], *, version: int | None = None
    ) -> bool:
        """Give back the units of the holder's jobs ``entries`` (they ended, or were never
        written), once: the holder loses them in one transaction with the count's
        decrement, on the condition that it still lists them all (and, with ``version``,
        that it is the version read). False when it did not (another call let them go).
        A holder left with no job stays, holding nothing, until the sweep deletes it."""
        entries = list(dict.fromkeys(entries))
        if not entries:
            return False
        names = {"#jobs": "jobs", "#v": "version"}
        values: dict[str, Any] = {":one": {"N": "1"}}
        if version is None:
            listed = [f"contains(#jobs, :e{i})" for i in range(len(entries))]
            values.update({f":e{i}": {"S": e} for i, e in enumerate(entries)})
            condition = " AND ".join(listed)
        else:
            condition = "#v = :v"
            values[":v"] = {"N": str(version)}
        key = _encode({"tenant_id": tenant_id, "slot": number})
        change: TransactWriteItemTypeDef = {
            "Update": {
                "TableName": self._table,
                "Key": key,
                "UpdateExpression": "DELETE #jobs :gone ADD #v :one",
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": {**values, ":gone": {"SS": entries}},
            }
        }
        return not self.transact([change, self._decrement(tenant_id, len(entries))])

    def drop_holder(self, holder: quota.Holder) -> bool:
        """Delete a holder the sweep read, with its remaining jobs' units given back in the
        same transaction, if it is still the version read; False when it is not."""
        delete: TransactWriteItemTypeDef = {
            "Delete": {
                "TableName": self._table,
                "Key": _encode({"tenant_id": holder.tenant_id, "slot": holder.number}),
                "ConditionExpression": "#v = :v",
                "ExpressionAttributeNames": {"#v": "version"},
                "ExpressionAttributeValues": {":v": {"N": str(holder.version)}},
            }
        }
        if not holder.jobs:
            return not self.transact([delete])
        return not self.transact([delete, self._decrement(holder.tenant_id, len(holder.jobs))])

    def unhold_jobs(self, holders: Sequence[quota.Holder], entries: Sequence[str]) -> None:
        """Let ``entries`` go from whichever of ``holders`` lists them (a create's jobs
        known not written). A failure is left to the sweep (the count stays too high)."""
        wanted = set(entries)
        for holder in holders:
            mine = sorted(holder.jobs & wanted)
            if mine:
                with contextlib.suppress(errors.Unavailable):
                    self.unhold(holder.tenant_id, holder.number, mine)

    def holders(self, tenant_id: str, *, due_by: datetime | None = None) -> list[quota.Holder]:
        """The tenant's holders (those visited by ``due_by``, if given), read consistently."""
        low, high = quota.holders_due_by(due_by)
        found: list[quota.Holder] = []
        kwargs: dict[str, Any] = {}
        while True:
            with _translated():
                response = self._client.query(
                    TableName=self._table,
                    KeyConditionExpression="#tid = :tid AND #slot BETWEEN :low AND :high",
                    ExpressionAttributeNames={"#tid": "tenant_id", "#slot": "slot"},
                    ExpressionAttributeValues={
                        ":tid": {"S": tenant_id},
                        ":low": {"N": str(low)},
                        ":high": {"N": str(high)},
                    },
                    ConsistentRead=True,
                    **kwargs,
                )
            found += [_holder_from_item(_decode(r)) for r in response.get("Items", [])]
            last = response.get("LastEvaluatedKey")
            if not last:
                return found
            kwargs["ExclusiveStartKey"] = last

    def _decrement(self, tenant_id: str, count: int) -> TransactWriteItemTypeDef:
        return {
            "Update": {
                "TableName": self._table,
                "Key": self._key(tenant_id),
                "UpdateExpression": "ADD #used :minus SET #last = :token",
                "ExpressionAttributeNames": {
                    "#used": used_attribute(quota.Quota.ACTIVE_JOBS),
                    "#last": LAST_WRITE,
                },
                "ExpressionAttributeValues": {
                    ":minus": {"N": str(-count)},
                    ":token": {"S": secrets.token_hex(8)},
                },
            }
        }

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


class _Refused(Exception):
    """A count change whose condition failed; ``old`` is the item as it was then."""

    def __init__(self, old: dict[str, Any]) -> None:
        super().__init__("the condition failed")
        self.old = old


def _room_for(
    used: str, default: int, count: int, override: int | None
) -> tuple[str, dict[str, Any]]:
    """A condition true when ``count`` more units fit under the tenant's limit: no
    override and the default, or (when known) the override ``override`` unchanged; 0
    in either place means no limit. A condition compares, it cannot add: each limit is
    compared less ``count``, and a limit below ``count`` has no clause at all."""
    values: dict[str, Any] = {":zero": {"N": "0"}}
    clauses = ["#lim = :zero"]
    fits = f"(attribute_not_exists({used}) OR {used} <= :{{name}})"
    if default == quota.UNLIMITED:
        clauses.append("attribute_not_exists(#lim)")
    elif count <= default:
        clauses.append(f"(attribute_not_exists(#lim) AND {fits.format(name='dmax')})")
        values[":dmax"] = {"N": str(default - count)}
    if override is not None and override != quota.UNLIMITED and count <= override:
        clauses.append(f"(#lim = :lim AND {fits.format(name='lmax')})")
        values[":lim"] = {"N": str(override)}
        values[":lmax"] = {"N": str(override - count)}
    return " OR ".join(clauses), values


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


def _holder_item(holder: quota.Holder) -> dict[str, Any]:
    return {
        "tenant_id": holder.tenant_id,
        "slot": holder.number,
        "jobs": set(holder.jobs),
        "created_ms": int(holder.created_at.timestamp() * 1000),
        "version": holder.version,
    }


def _holder_from_item(record: dict[str, Any]) -> quota.Holder:
    return quota.Holder(
        tenant_id=str(record["tenant_id"]),
        number=int(record["slot"]),
        jobs=frozenset(str(e) for e in record.get("jobs", ())),
        created_at=datetime.fromtimestamp(int(record["created_ms"]) / 1000, UTC),
        version=int(record["version"]),
    )
