"""DynamoDB implementations of the store ports.

Clients are injected (only ``wiring`` builds them). ``ClientError`` is turned into a typed
error here, once; nothing above this module looks at AWS error codes. Every conditional
write says which race it closes. Attribute names always go through
ExpressionAttributeNames: several of ours (``state``, ``name``, ``owner``) are reserved
words that DynamoDB rejects in expressions.

Tables (see infra/template.yaml):
- schedules: (tenant_id, schedule_id); sparse GSI ``due`` on (due_shard, next_fire_ms),
  KEYS_ONLY. Only active schedules carry the two index attributes. Sparse GSI ``held`` on
  (held_by, held_fire_ms), KEYS_ONLY: a one-off job enters it with its quota mark and
  leaves it with the mark's removal, so it lists each tenant's live jobs for the sweep.
- occurrences: (schedule_id, occurrence_sk = ``{fire_time_utc}#{version}``): a Query per
  schedule is its history, newest first, without a GSI (a GSI would double every put).
- leases: (name).
"""

from __future__ import annotations

import base64
import builtins
import functools
import json
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from aws_lambda_powertools import Logger
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as NetworkError

from fireline import ports
from fireline.domain import errors, lease, model, occurrence, policies, quota, retry, schedule

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from fireline.adapters.quotas_dynamodb import DynamoQuotaStore
else:
    DynamoDBClient = TransactWriteItemTypeDef = Any

logger = Logger(service="fireline", child=True)
DUE_INDEX = "due"
DEAD_INDEX = "dead"
HELD_INDEX = "held"
BATCH_GET_MAX = 100
BATCH_WRITE_MAX = 25
# A batch read's unprocessed keys and a batch write's unprocessed items go again this many
# times, the first after BACKOFF_SECONDS, each wait twice the last (at most a second),
# before the call gives up.
BATCH_ATTEMPTS = 6
BACKOFF_SECONDS = 0.05
_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _from_ms(value: Any) -> datetime:
    return datetime.fromtimestamp(int(value) / 1000, UTC)


def _opt_from_ms(value: Any) -> datetime | None:
    return None if value is None else _from_ms(value)


def _encode(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _serializer.serialize(v) for k, v in item.items() if v is not None}


def _decode(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _deserializer.deserialize(v) for k, v in item.items()}


def _encode_cursor(key: dict[str, Any] | None) -> str | None:
    if not key:
        return None
    return base64.urlsafe_b64encode(json.dumps(key, sort_keys=True).encode()).decode()


def _decode_cursor(cursor: str | None, *, keys: tuple[str, ...]) -> dict[str, Any] | None:
    """The start key a cursor carries; exactly the table's key attributes, as strings.

    A cursor comes back from a client, so it is input: anything else is refused here
    rather than sent to DynamoDB as ExclusiveStartKey.
    """
    if cursor is None:
        return None
    try:
        decoded = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, TypeError, RecursionError) as exc:  # nested past what json can read
        raise errors.ValidationError("is not a cursor this API returned", field="cursor") from exc
    if (
        not isinstance(decoded, dict)
        or set(decoded) != set(keys)
        or not all(isinstance(v, str) and v for v in decoded.values())
    ):
        raise errors.ValidationError("is not a cursor this API returned", field="cursor")
    return decoded


def _query_page(
    client: DynamoDBClient,
    *,
    table: str,
    partition: tuple[str, str],
    cursor_keys: tuple[str, ...],
    limit: int,
    cursor: str | None,
    index: str | None = None,
    newest_first: bool = False,
    sort_between: tuple[str, str | None, str | None] | None = None,
    states: Sequence[str] | None = None,
    consistent: bool = False,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of a Query on one partition; the decoded items and the next cursor.

    ``sort_between`` (sort key attribute, low, high; both inclusive, None for an open end)
    narrows the key range read; ``states`` keeps the rows whose ``state`` is one of them, a
    filter applied after the read (``limit`` counts rows read, so a page may come back
    short, even empty, with a cursor). A cursor is a client's input: it must carry exactly
    this listing's key attributes and the same partition, or it is refused (a 400 naming
    ``cursor``).
    """
    name, value = partition
    kwargs: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "#pk = :pk",
        "ExpressionAttributeNames": {"#pk": name},
        "ExpressionAttributeValues": {":pk": {"S": value}},
        "ScanIndexForward": not newest_first,
        "Limit": limit,
    }
    if consistent:
        kwargs["ConsistentRead"] = True
    if sort_between is not None:
        sort_name, low, high = sort_between
        # An open end is left out of the condition: a key value may not be empty.
        if low is not None and high is not None:
            condition = " AND #sk BETWEEN :low AND :high"
        else:
            condition = " AND #sk >= :low" if low is not None else " AND #sk <= :high"
        kwargs["KeyConditionExpression"] += condition
        kwargs["ExpressionAttributeNames"]["#sk"] = sort_name
        bounds = {":low": low, ":high": high}
        kwargs["ExpressionAttributeValues"].update(
            {place: {"S": bound} for place, bound in bounds.items() if bound is not None}
        )
    if states:
        places = [f":state{n}" for n in range(len(states))]
        kwargs["FilterExpression"] = f"#state IN ({', '.join(places)})"
        kwargs["ExpressionAttributeNames"]["#state"] = "state"
        kwargs["ExpressionAttributeValues"].update(
            {p: {"S": state} for p, state in zip(places, states, strict=True)}
        )
    if index is not None:
        kwargs["IndexName"] = index
    start = _decode_cursor(cursor, keys=cursor_keys)
    if start is not None:
        if start.get(name) != value:
            raise errors.ValidationError("belongs to another listing", field="cursor")
        kwargs["ExclusiveStartKey"] = _encode(start)
    with _translated():
        response = client.query(**kwargs)
    last = response.get("LastEvaluatedKey")
    items = [_decode(r) for r in response.get("Items", [])]
    return items, _encode_cursor(_decode(last)) if last else None


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


# Error answers that mean "not now": retry later (errors.Unavailable).
RETRYABLE = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionConflictException",
    }
)


@contextmanager
def _translated() -> Iterator[None]:
    """Turn throttling, service faults and network failures into ``errors.Unavailable``
    (retryable). A read timeout or a reset connection leaves a write's fate unknown: it
    may have been applied, so callers retry with the same conditions, which converge."""
    try:
        yield
    except (NetworkError, HTTPClientError) as exc:
        raise errors.Unavailable(f"DynamoDB did not answer ({type(exc).__name__})") from exc
    except ClientError as exc:
        code = _code(exc)
        if code in RETRYABLE:
            raise errors.Unavailable(f"DynamoDB is unavailable ({code})") from exc
        if code == "ResourceNotFoundException":
            raise errors.Unavailable(f"DynamoDB table missing ({exc})") from exc
        raise


def _cancellation_reasons(exc: ClientError) -> list[str]:
    """Each item's reason in a cancelled transaction, in the request's order
    (``ConditionalCheckFailed``, ``TransactionConflict``, ``None`` where it was fine)."""
    return [str(r.get("Code") or "None") for r in exc.response.get("CancellationReasons", [])]


def _applied(write: Callable[[], object]) -> bool:
    """Run a conditional write: False when its condition failed (nothing was written)."""
    try:
        with _translated():
            write()
    except ClientError as exc:
        if _code(exc) == "ConditionalCheckFailedException":
            return False
        raise
    return True


def _batch_get(
    client: DynamoDBClient,
    table: str,
    keys: Sequence[dict[str, Any]],
    *,
    what: str,
    sleep: Callable[[float], None],
    attempts: int = BATCH_ATTEMPTS,
    consistent: bool = True,
) -> list[dict[str, Any]]:
    """The items of ``keys`` that exist (decoded): 100 keys a BatchGetItem. The keys
    DynamoDB leaves unprocessed (it does when the table throttles, where asking again at
    once would be throttled too) are asked again after a doubling wait;
    ``errors.Unavailable`` naming ``what`` if some stay unread."""
    found: list[dict[str, Any]] = []
    for start in range(0, len(keys), BATCH_GET_MAX):
        pending: list[dict[str, Any]] = [_encode(k) for k in keys[start : start + BATCH_GET_MAX]]
        for attempt in range(attempts + 1):
            with _translated():
                response = client.batch_get_item(
                    RequestItems={table: {"Keys": pending, "ConsistentRead": consistent}}
                )
            found += [_decode(r) for r in response.get("Responses", {}).get(table, [])]
            unprocessed: dict[str, Any] = dict(response.get("UnprocessedKeys", {}))
            pending = list(unprocessed.get(table, {}).get("Keys", []))
            if not pending:
                break
            if attempt == attempts:
                raise errors.Unavailable(f"DynamoDB left {len(pending)} {what} unread")
            sleep(min(BACKOFF_SECONDS * 2**attempt, 1.0))
    return found


class Unwritten(errors.Unavailable):
    """A batch write gave up: ``unwritten`` of its items are known not to be written
    (DynamoDB returned them unprocessed, or they were never sent); the fate of the others
    not reported written is unknown (a request without an answer)."""

    def __init__(self, message: str, *, unwritten: Sequence[dict[str, Any]]) -> None:
        super().__init__(message)
        self.unwritten = list(unwritten)


def _batch_write(
    client: DynamoDBClient,
    table: str,
    items: Sequence[dict[str, Any]],
    *,
    what: str,
    backoff: Callable[[int], None],
    attempts: int = BATCH_ATTEMPTS,
) -> None:
    """Put ``items`` (decoded, unconditionally: BatchWriteItem takes no condition), 25 a
    BatchWriteItem, the items DynamoDB leaves unprocessed (throttling) written again after
    ``backoff(attempt)``. Gives up with :class:`Unwritten` naming ``what``."""
    for start in range(0, len(items), BATCH_WRITE_MAX):
        chunk = items[start : start + BATCH_WRITE_MAX]
        pending: Sequence[Any] = [{"PutRequest": {"Item": _encode(i)}} for i in chunk]
        for attempt in range(attempts + 1):
            after = items[start + len(chunk) :]  # never sent, if this request fails
            try:
                with _translated():
                    response = client.batch_write_item(RequestItems={table: pending})
            except errors.Unavailable as exc:
                # An error answer (throttled) wrote nothing of the request: all of it is
                # sent again, as unprocessed items are. A request without an answer may
                # have written any of it: given up at once, its items' fate unknown.
                answered = isinstance(exc.__cause__, ClientError)
                if answered and attempt < attempts:
                    backoff(attempt)
                    continue
                left = [_decode(p["PutRequest"]["Item"]) for p in pending] if answered else []
                raise Unwritten(str(exc), unwritten=[*left, *after]) from exc
            pending = response.get("UnprocessedItems", {}).get(table, [])
            if not pending:
                break
            if attempt == attempts:
                left = [_decode(p["PutRequest"]["Item"]) for p in pending]
                raise Unwritten(
                    f"DynamoDB left {len(left)} {what} unwritten", unwritten=[*left, *after]
                )
            backoff(attempt)


# --- schedules ---------------------------------------------------------------------------


def schedule_to_item(item: model.Schedule, shards: int) -> dict[str, Any]:
    timing = item.timing
    record: dict[str, Any] = {
        "tenant_id": item.tenant_id,
        "schedule_id": item.schedule_id,
        "kind": item.kind.value,
        "spec": item.spec_text,
        "timezone": timing.timezone,
        "dst_gap": timing.dst.gap.value,
        "dst_repeat": timing.dst.repeat.value,
        "start_ms": _ms(timing.start) if timing.start else None,
        "end_ms": _ms(timing.end) if timing.end else None,
        "description": item.description,
        "job_class": item.job_class,
        # Nested documents as JSON text: DynamoDB numbers would come back as Decimal and
        # floats would not go in at all.
        "target": json.dumps(item.target, separators=(",", ":")),
        "payload": json.dumps(item.payload, separators=(",", ":")),
        "retry": json.dumps(asdict(item.retry)),
        "misfire": json.dumps(asdict(item.misfire)),
        "overlap": item.overlap.value,
        "jitter_seconds": item.jitter_seconds,
        "deadline_seconds": item.deadline_seconds,
        "state": item.state.value,
        "version": item.version,
        "created_at_ms": _ms(item.created_at) if item.created_at else None,
        "updated_at_ms": _ms(item.updated_at) if item.updated_at else None,
        "paused_at_ms": _ms(item.paused_at) if item.paused_at else None,
        "quota_held": True if item.quota_held else None,
    }
    if item.next_fire is not None:
        # The two attributes that put the item in the sparse due index.
        record["next_fire_ms"] = _ms(item.next_fire)
        record["due_shard"] = item.shard(shards)
    if item.quota_held and item.kind is model.Kind.JOB:
        # The two that put it in the sparse held index, as long as it holds its unit
        # (release removes them with the mark): the sweep's list of a tenant's live jobs.
        spec = item.timing.spec
        assert isinstance(spec, schedule.AtSpec)
        record["held_by"] = item.tenant_id
        record["held_fire_ms"] = _ms(spec.when)
    return record


def schedule_from_item(record: dict[str, Any]) -> model.Schedule:
    timing = schedule.Timing(
        spec=schedule.parse_spec(record["spec"]),
        timezone=record["timezone"],
        dst=schedule.DstPolicy(
            gap=schedule.GapPolicy(record["dst_gap"]),
            repeat=schedule.RepeatPolicy(record["dst_repeat"]),
        ),
        start=_opt_from_ms(record.get("start_ms")),
        end=_opt_from_ms(record.get("end_ms")),
    )
    deadline = record.get("deadline_seconds")
    return model.Schedule(
        tenant_id=record["tenant_id"],
        schedule_id=record["schedule_id"],
        timing=timing,
        spec_text=record["spec"],
        kind=model.Kind(record["kind"]),
        description=record.get("description", ""),
        job_class=record["job_class"],
        target=json.loads(record["target"]),
        payload=json.loads(record["payload"]),
        retry=retry.RetryPolicy(**json.loads(record["retry"])),
        misfire=policies.Misfire(**json.loads(record["misfire"])),
        overlap=policies.OverlapPolicy(record["overlap"]),
        jitter_seconds=int(record.get("jitter_seconds", 0)),
        deadline_seconds=None if deadline is None else int(deadline),
        state=model.ScheduleState(record["state"]),
        version=int(record["version"]),
        next_fire=_opt_from_ms(record.get("next_fire_ms")),
        created_at=_opt_from_ms(record.get("created_at_ms")),
        updated_at=_opt_from_ms(record.get("updated_at_ms")),
        paused_at=_opt_from_ms(record.get("paused_at_ms")),
        quota_held=bool(record.get("quota_held", False)),
    )


# A job's release sends its mark's removal this many times while its fate is unknown.
RELEASE_ATTEMPTS = 3


class DynamoScheduleStore:
    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        shards: int = model.DEFAULT_SHARDS,
        quotas: DynamoQuotaStore | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self._table = table_name
        self.shards = shards
        self._sleep = sleep  # the waits before a batch's unprocessed keys or items go again
        # Where creates take and deletes give back quota units (None: nothing counted).
        self._quotas = quotas

    def _backoff(self, attempt: int) -> None:
        self._sleep(min(BACKOFF_SECONDS * 2**attempt, 1.0))

    def _key(self, tenant_id: str, schedule_id: str) -> dict[str, Any]:
        return _encode({"tenant_id": tenant_id, "schedule_id": schedule_id})

    def _counted(self) -> DynamoQuotaStore:
        if self._quotas is None:
            raise errors.ValidationError("this deployment counts no quotas", field="quota")
        return self._quotas

    def create(self, item: model.Schedule, *, charge: quota.Charge | None = None) -> None:
        if charge is not None:
            self._create_charged(item, charge)
            return
        try:
            with _translated():
                self._client.put_item(
                    TableName=self._table,
                    Item=_encode(schedule_to_item(item, self.shards)),
                    # Two creates racing for the same id (a retried request): one wins.
                    ConditionExpression="attribute_not_exists(#sid)",
                    ExpressionAttributeNames={"#sid": "schedule_id"},
                )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                raise errors.AlreadyExists(f"schedule {item.schedule_id} exists") from exc
            raise

    def _create_charged(self, item: model.Schedule, charge: quota.Charge) -> None:
        """The unit first, then the item (see fireline.adapters.quotas_dynamodb): the count
        is never below the items holding units, so a tenant is never over its limit."""
        quotas = self._counted()
        quotas.take(item.tenant_id, charge)
        try:
            self.create(replace(item, quota_held=True))
        except errors.AlreadyExists:
            # A retried create (the same id, from its Idempotency-Key) found its first
            # attempt's item: the unit just taken is not a second one.
            quotas.give_back(item.tenant_id, charge.quota)
            raise

    def create_many(
        self,
        items: Sequence[model.Schedule],
        *,
        charge: quota.Charge | None = None,
        first_new: bool = False,
    ) -> None:
        tenant_id = model.batch_tenant(items)
        if tenant_id is None:
            return
        if first_new and self.get(tenant_id, items[0].schedule_id) is not None:
            # Read before the units are taken: a retried batch at its tenant's limit
            # (its own units holding it there) must learn it is one, not be refused.
            raise errors.AlreadyExists(f"schedule {items[0].schedule_id} exists")
        quotas = self._counted() if charge is not None else None
        if quotas is not None and charge is not None:
            # The units first, all in one write, then the items: the count is never below
            # the items holding units (see fireline.adapters.quotas_dynamodb).
            quotas.take(tenant_id, charge, len(items))
            items = [replace(i, quota_held=True) for i in items]

        def give_back(count: int) -> None:
            if quotas is not None and charge is not None and count:
                quotas.give_back(tenant_id, charge.quota, count)

        rest = items
        if first_new:
            try:
                self.create(items[0])  # conditional on the id being new: a racing retry
            except errors.AlreadyExists:
                give_back(len(items))  # nothing of this call was written
                raise
            rest = items[1:]
        try:
            _batch_write(
                self._client,
                self._table,
                [schedule_to_item(i, self.shards) for i in rest],
                what="schedules",
                backoff=self._backoff,
            )
        except Unwritten as exc:
            # Items known not written hold no unit: theirs go back (those whose request
            # went unanswered keep theirs: a count too high, never too low).
            give_back(len(exc.unwritten))
            raise

    def release(self, tenant_id: str, schedule_id: str, refund: quota.Quota) -> bool:
        return bool(self.release_many(tenant_id, [schedule_id], refund))

    def release_many(
        self, tenant_id: str, schedule_ids: Sequence[str], refund: quota.Quota
    ) -> builtins.list[str]:
        quotas = self._counted()
        released = [
            schedule_id
            for schedule_id in dict.fromkeys(schedule_ids)
            if self._unmark(tenant_id, schedule_id)
        ]
        if released:
            # After the marks are gone, never before, and once for all of them: a crash
            # in between leaves the count too high by those (a create refused early),
            # never too low (a tenant over its limit); their repeats find no mark.
            quotas.give_back(tenant_id, refund, len(released))
        return released

    def _unmark(self, tenant_id: str, schedule_id: str) -> bool:
        """Remove a job's quota mark; False when it had none."""
        token = secrets.token_hex(8)
        for attempt in range(RELEASE_ATTEMPTS):
            try:
                with _translated():
                    self._client.update_item(
                        TableName=self._table,
                        Key=self._key(tenant_id, schedule_id),
                        # The job leaves the held index with its mark.
                        UpdateExpression="REMOVE #held, #by, #fire SET #released = :token",
                        # The mark goes once: a second release (a redelivery, a retried
                        # cancel) fails here and gives nothing back...
                        ConditionExpression="attribute_exists(#held)",
                        ExpressionAttributeNames={
                            "#held": "quota_held",
                            "#released": "quota_released",
                            "#by": "held_by",
                            "#fire": "held_fire_ms",
                        },
                        ExpressionAttributeValues={":token": {"S": token}},
                        ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    )
                return True
            except errors.Unavailable:
                # Its fate unknown (a lost answer): sent again, it finds its own token.
                if attempt == RELEASE_ATTEMPTS - 1:
                    raise
            except ClientError as exc:
                if _code(exc) != "ConditionalCheckFailedException":
                    raise
                # ...unless it is this call's own write, sent again after a lost answer.
                old = _decode(exc.response.get("Item") or {})  # type: ignore[arg-type]
                return bool(old.get("quota_released") == token)
        raise AssertionError("unreachable")  # pragma: no cover

    def get(
        self, tenant_id: str, schedule_id: str, *, consistent: bool = True
    ) -> model.Schedule | None:
        with _translated():
            response = self._client.get_item(
                TableName=self._table,
                Key=self._key(tenant_id, schedule_id),
                ConsistentRead=consistent,
            )
        record = response.get("Item")
        return schedule_from_item(_decode(record)) if record else None

    def get_many(
        self, keys: Sequence[tuple[str, str]], *, consistent: bool = True
    ) -> builtins.list[model.Schedule]:
        items = _batch_get(
            self._client,
            self._table,
            [{"tenant_id": t, "schedule_id": s} for t, s in dict.fromkeys(keys)],
            what="schedules",
            sleep=self._sleep,
            consistent=consistent,
        )
        found: list[model.Schedule] = []
        for record in items:
            try:
                found.append(schedule_from_item(record))
            except (errors.FirelineError, ValueError, OverflowError, KeyError) as exc:
                # One unreadable item must not stop the ticker for every tenant: it is
                # left out (and logged) and the rest of the page goes on.
                logger.error(
                    "unreadable schedule",
                    extra={
                        "action": "store.bad_item",
                        "key": str(record.get("schedule_id")),
                        "error": str(exc),
                    },
                )
        return found

    def list(
        self, tenant_id: str, *, limit: int, cursor: str | None = None
    ) -> ports.Page[model.Schedule]:
        items, next_cursor = _query_page(
            self._client,
            table=self._table,
            partition=("tenant_id", tenant_id),
            cursor_keys=("tenant_id", "schedule_id"),
            limit=limit,
            cursor=cursor,
        )
        return ports.Page([schedule_from_item(r) for r in items], next_cursor)

    def replace(self, item: model.Schedule, *, expected_version: int) -> None:
        try:
            with _translated():
                self._client.put_item(
                    TableName=self._table,
                    Item=_encode(schedule_to_item(item, self.shards)),
                    # Optimistic concurrency: two updates from the same read cannot both land.
                    # (A ticker's advance does not change the version: a replace after it
                    # rewrites next_fire, and the version bump voids what it materialized.)
                    # The quota mark must be as read: a job's unit given back meanwhile
                    # (its end) is not marked held again, to be given back twice.
                    ConditionExpression=(
                        "attribute_exists(#sid) AND #v = :v AND "
                        + (
                            "attribute_exists(#held)"
                            if item.quota_held
                            else "attribute_not_exists(#held)"
                        )
                    ),
                    ExpressionAttributeNames={
                        "#sid": "schedule_id",
                        "#v": "version",
                        "#held": "quota_held",
                    },
                    ExpressionAttributeValues={":v": {"N": str(expected_version)}},
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise
            if "Item" not in exc.response:
                raise errors.NotFound(f"schedule {item.schedule_id} does not exist") from exc
            raise errors.ConflictError(
                f"schedule {item.schedule_id} changed since version {expected_version}"
            ) from exc

    def delete(
        self, tenant_id: str, schedule_id: str, *, refund: quota.Quota | None = None
    ) -> bool:
        if refund is not None:
            quotas = self._counted()
            remove: TransactWriteItemTypeDef = {
                "Delete": {
                    "TableName": self._table,
                    "Key": self._key(tenant_id, schedule_id),
                    # Only an item holding its unit gives it back: a retried delete (after
                    # a lost answer) finds nothing and gives nothing back twice.
                    "ConditionExpression": "attribute_exists(#held)",
                    "ExpressionAttributeNames": {"#held": "quota_held"},
                }
            }
            return not quotas.transact([remove, quotas.refund(tenant_id, refund)])
        with _translated():
            response = self._client.delete_item(
                TableName=self._table,
                Key=self._key(tenant_id, schedule_id),
                ReturnValues="ALL_OLD",
            )
        return "Attributes" in response

    def due(
        self, shard: int, *, until: datetime, limit: int, cursor: str | None = None
    ) -> ports.Page[ports.DueEntry]:
        kwargs: dict[str, Any] = {}
        if cursor is not None:
            # Our own cursor (the ticker's, never a client's): the index key it stopped at.
            kwargs["ExclusiveStartKey"] = _encode(json.loads(cursor))
        with _translated():
            response = self._client.query(
                TableName=self._table,
                IndexName=DUE_INDEX,
                KeyConditionExpression="#shard = :shard AND #next <= :until",
                ExpressionAttributeNames={"#shard": "due_shard", "#next": "next_fire_ms"},
                ExpressionAttributeValues={
                    ":shard": {"N": str(shard)},
                    ":until": {"N": str(_ms(until))},
                },
                Limit=limit,
                **kwargs,
            )
        entries = [_decode(r) for r in response.get("Items", [])]
        last = response.get("LastEvaluatedKey")
        return ports.Page(
            [
                ports.DueEntry(e["tenant_id"], e["schedule_id"], _from_ms(e["next_fire_ms"]))
                for e in entries
            ],
            json.dumps(_decode(last), default=int) if last else None,
        )

    def advance(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        expected_next_fire: datetime,
        expected_version: int,
        next_fire: datetime | None,
        now: datetime,
    ) -> bool:
        names = {"#next": "next_fire_ms", "#v": "version", "#upd": "updated_at_ms"}
        values: dict[str, Any] = {
            ":expected": {"N": str(_ms(expected_next_fire))},
            ":v": {"N": str(expected_version)},
            ":now": {"N": str(_ms(now))},
        }
        if next_fire is None:
            update = "SET #upd = :now, #state = :completed REMOVE #next, #shard"
            names |= {"#state": "state", "#shard": "due_shard"}
            values[":completed"] = {"S": model.ScheduleState.COMPLETED.value}
        else:
            update = "SET #next = :next, #upd = :now"
            values[":next"] = {"N": str(_ms(next_fire))}
        try:
            with _translated():
                self._client.update_item(
                    TableName=self._table,
                    Key=_encode({"tenant_id": tenant_id, "schedule_id": schedule_id}),
                    UpdateExpression=update,
                    # Only the next fire and version we read may move: a stale ticker cannot
                    # move a schedule backwards or advance past a newer version's fire.
                    ConditionExpression="#next = :expected AND #v = :v",
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True


# --- occurrences -------------------------------------------------------------------------


def occurrence_sort_key(fire_time: datetime, version: int) -> str:
    """``{fire_time}#{version}``, sorting as the fire times do: a trigger's milliseconds go
    after the whole second's ``Z`` (``...:07Z.250#``), so it sorts after the fire on that
    second (``...:07Z#``) and before the next second's, where ``...:07.250Z`` would not."""
    text = occurrence.format_fire_time(fire_time, exact=True)
    if "." not in text:
        return f"{text}#{version:09d}"
    whole, millis = text[:-1].split(".")
    return f"{whole}Z.{millis}#{version:09d}"


def occurrence_to_item(item: occurrence.Occurrence, expires_at: int | None) -> dict[str, Any]:
    return {
        "schedule_id": item.schedule_id,
        "occurrence_sk": occurrence_sort_key(item.fire_time, item.version),
        "occurrence_key": item.key,
        "tenant_id": item.tenant_id,
        "version": item.version,
        "fire_time_ms": _ms(item.fire_time),
        "job_class": item.job_class,
        "state": item.state.value,
        "attempts": item.attempts,
        "created_at_ms": _ms(item.created_at) if item.created_at else None,
        "started_at_ms": _ms(item.started_at) if item.started_at else None,
        "finished_at_ms": _ms(item.finished_at) if item.finished_at else None,
        "exit_reason": item.exit_reason,
        "progress": json.dumps(item.progress) if item.progress else None,
        "payload": json.dumps(item.payload) if item.payload else None,
        "in_progress_until_ms": _ms(item.in_progress_until) if item.in_progress_until else None,
        "result": json.dumps(item.result) if item.result is not None else None,
        # Only dead rows carry it: the sparse "dead" index lists a tenant's dead letters.
        "dead_tenant_id": item.tenant_id if item.state is occurrence.State.DEAD else None,
        "execution": item.execution,
        "task_token": item.task_token,
        "generation": item.generation or None,
        "expires_at": expires_at,
    }


# What a claim that creates a fire's row writes besides the claim itself.
_IDENTITY = (
    "occurrence_key",
    "tenant_id",
    "version",
    "fire_time_ms",
    "job_class",
    "created_at_ms",
    "payload",
    "generation",
    "expires_at",
)


def occurrence_from_item(record: dict[str, Any]) -> occurrence.Occurrence:
    return occurrence.Occurrence(
        key=record["occurrence_key"],
        tenant_id=record["tenant_id"],
        schedule_id=record["schedule_id"],
        version=int(record["version"]),
        fire_time=_from_ms(record["fire_time_ms"]),
        job_class=record["job_class"],
        state=occurrence.State(record["state"]),
        attempts=int(record.get("attempts", 0)),
        created_at=_opt_from_ms(record.get("created_at_ms")),
        started_at=_opt_from_ms(record.get("started_at_ms")),
        finished_at=_opt_from_ms(record.get("finished_at_ms")),
        exit_reason=record.get("exit_reason"),
        progress=json.loads(record["progress"]) if record.get("progress") else {},
        payload=json.loads(record["payload"]) if record.get("payload") else {},
        in_progress_until=_opt_from_ms(record.get("in_progress_until_ms")),
        result=json.loads(record["result"]) if record.get("result") else None,
        execution=record.get("execution"),
        task_token=record.get("task_token"),
        generation=int(record.get("generation", 0)),
    )


class DynamoOccurrenceStore:
    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        retention: timedelta = timedelta(days=30),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self._table = table_name
        self._retention = retention
        self._sleep = sleep  # the waits before a batch read's unprocessed keys go again

    def _expires_at(self, item: occurrence.Occurrence) -> int:
        return int((item.fire_time + self._retention).timestamp())

    def put_new(self, item: occurrence.Occurrence) -> bool:
        try:
            with _translated():
                self._client.put_item(
                    TableName=self._table,
                    Item=_encode(occurrence_to_item(item, self._expires_at(item))),
                    # The correctness boundary: racing or retried tickers converge on one row
                    # per occurrence key.
                    ConditionExpression="attribute_not_exists(#sk)",
                    ExpressionAttributeNames={"#sk": "occurrence_sk"},
                )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def get(self, key: str, *, consistent: bool = True) -> occurrence.Occurrence | None:
        parsed = occurrence.parse_key(key)
        with _translated():
            response = self._client.get_item(
                TableName=self._table,
                Key=_encode(
                    {
                        "schedule_id": parsed.schedule_id,
                        "occurrence_sk": occurrence_sort_key(parsed.fire_time, parsed.version),
                    }
                ),
                ConsistentRead=consistent,
            )
        record = response.get("Item")
        return occurrence_from_item(_decode(record)) if record else None

    def get_many(
        self, keys: Sequence[str], *, consistent: bool = True
    ) -> dict[str, occurrence.Occurrence]:
        # One BatchGetItem per 100 keys instead of a GetItem each.
        wanted = []
        for key in dict.fromkeys(keys):
            parsed = occurrence.parse_key(key)
            sort_key = occurrence_sort_key(parsed.fire_time, parsed.version)
            wanted.append({"schedule_id": parsed.schedule_id, "occurrence_sk": sort_key})
        items = _batch_get(
            self._client,
            self._table,
            wanted,
            what="occurrences",
            sleep=self._sleep,
            consistent=consistent,
        )
        rows = [occurrence_from_item(i) for i in items]
        return {r.key: r for r in rows}

    def history(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        limit: int,
        cursor: str | None = None,
        only: ports.OccurrenceFilter | None = None,
    ) -> ports.Page[occurrence.Occurrence]:
        # The sort key orders by fire time: the time range is a key condition (rows out of
        # it are never read); version 0 never exists, so the key of (until, 0) is before
        # every row at ``until`` and BETWEEN keeps the end exclusive.
        only = only or ports.OccurrenceFilter()
        between = None
        if only.since is not None or only.until is not None:
            low = occurrence_sort_key(only.since, 0) if only.since else None
            high = occurrence_sort_key(only.until, 0) if only.until else None
            between = ("occurrence_sk", low, high)
        items, next_cursor = _query_page(
            self._client,
            table=self._table,
            partition=("schedule_id", schedule_id),
            cursor_keys=("schedule_id", "occurrence_sk"),
            limit=limit,
            cursor=cursor,
            newest_first=True,
            sort_between=between,
            states=[s.value for s in only.states] if only.states else None,
        )
        rows = [occurrence_from_item(r) for r in items]
        # Schedule ids are unique across tenants; the tenant check is the caller's, but a
        # row of another tenant is never returned.
        return ports.Page([r for r in rows if r.tenant_id == tenant_id], next_cursor)

    def open_rows(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        since: datetime,
        limit: int,
        cursor: str | None = None,
    ) -> ports.Page[occurrence.Occurrence]:
        # The sort key orders by fire time, so the range is one Query on the schedule's
        # partition; the state filter is applied after the read (Limit counts rows read,
        # so a page may come back short), which keeps the cost bounded by the range.
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "#pk = :pk AND #sk >= :since",
            "FilterExpression": "#state IN (:queued, :failed)",
            "ExpressionAttributeNames": {
                "#pk": "schedule_id",
                "#sk": "occurrence_sk",
                "#state": "state",
            },
            "ExpressionAttributeValues": {
                ":pk": {"S": schedule_id},
                ":since": {"S": occurrence_sort_key(since, 0)},
                ":queued": {"S": occurrence.State.QUEUED.value},
                ":failed": {"S": occurrence.State.FAILED.value},
            },
            "ConsistentRead": True,
            "Limit": limit,
        }
        start = _decode_cursor(cursor, keys=("schedule_id", "occurrence_sk"))
        if start is not None:
            if start.get("schedule_id") != schedule_id:
                raise errors.ValidationError("belongs to another listing", field="cursor")
            kwargs["ExclusiveStartKey"] = _encode(start)
        with _translated():
            response = self._client.query(**kwargs)
        rows = [occurrence_from_item(_decode(r)) for r in response.get("Items", [])]
        last = response.get("LastEvaluatedKey")
        return ports.Page(
            [r for r in rows if r.tenant_id == tenant_id],
            _encode_cursor(_decode(last)) if last else None,
        )

    def _key(self, key: str) -> dict[str, Any]:
        parsed = occurrence.parse_key(key)
        return _encode(
            {
                "schedule_id": parsed.schedule_id,
                "occurrence_sk": occurrence_sort_key(parsed.fire_time, parsed.version),
            }
        )

    def dead_letters(
        self, tenant_id: str, *, limit: int, cursor: str | None = None
    ) -> ports.Page[occurrence.Occurrence]:
        items, next_cursor = _query_page(
            self._client,
            table=self._table,
            index=DEAD_INDEX,
            partition=("dead_tenant_id", tenant_id),
            cursor_keys=("dead_tenant_id", "occurrence_sk", "schedule_id"),
            limit=limit,
            cursor=cursor,
            newest_first=True,
        )
        return ports.Page([occurrence_from_item(r) for r in items], next_cursor)

    def claim(
        self,
        key: str,
        *,
        now: datetime,
        until: datetime,
        intent: occurrence.Occurrence | None = None,
    ) -> tuple[bool, occurrence.Occurrence | None]:
        names = {
            "#sk": "occurrence_sk",
            "#state": "state",
            "#started": "started_at_ms",
            "#until": "in_progress_until_ms",
            "#finished": "finished_at_ms",
            "#reason": "exit_reason",
            "#attempts": "attempts",
        }
        values: dict[str, Any] = {
            ":running": {"S": occurrence.State.RUNNING.value},
            ":queued": {"S": occurrence.State.QUEUED.value},
            ":failed": {"S": occurrence.State.FAILED.value},
            ":now": {"N": str(_ms(now))},
            ":until": {"N": str(_ms(until))},
            ":one": {"N": "1"},
        }
        update = "SET #state = :running, #started = :now, #until = :until"
        # The claim is the idempotency record's put: of two deliveries of one message only
        # one moves the row to running. A running row whose holder's invocation ended
        # (in_progress_until passed) may be claimed again.
        condition = "(#state IN (:queued, :failed) OR (#state = :running AND #until < :now))"
        if intent is not None and intent.key == key:
            # The first delivery of a fire writes its row: the identity attributes are set
            # only where absent, and the condition admits a row that does not exist yet
            # (an update of a missing item creates it).
            # Created when the ticker sent it, if the message says; else now.
            created = occurrence_to_item(
                replace(intent, created_at=intent.created_at or now), self._expires_at(intent)
            )
            for n, name in enumerate(_IDENTITY):
                if created.get(name) is None:
                    continue
                names[f"#i{n}"] = name
                values[f":i{n}"] = _serializer.serialize(created[name])
                update += f", #i{n} = if_not_exists(#i{n}, :i{n})"
            condition = f"attribute_not_exists(#sk) OR {condition}"
        else:
            condition = f"attribute_exists(#sk) AND {condition}"
        try:
            with _translated():
                response = self._client.update_item(
                    TableName=self._table,
                    Key=self._key(key),
                    UpdateExpression=f"{update} REMOVE #finished, #reason ADD #attempts :one",
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise
            old: dict[str, Any] | None = cast(dict[str, Any], exc.response).get("Item")
            return False, occurrence_from_item(_decode(old)) if old else None
        return True, occurrence_from_item(_decode(response["Attributes"]))

    def annotate_running(
        self,
        key: str,
        *,
        execution: str | None = None,
        task_token: str | None = None,
        attempts: int | None = None,
        progress: dict[str, Any] | None = None,
        in_progress_until: datetime | None = None,
    ) -> bool:
        fields: dict[str, Any] = {
            "execution": execution,
            "task_token": task_token,
            "attempts": attempts,
            "progress": json.dumps(progress) if progress is not None else None,
            "in_progress_until_ms": _ms(in_progress_until) if in_progress_until else None,
        }
        chosen = {name: value for name, value in fields.items() if value is not None}
        if not chosen:
            # Nothing to write, but the answer is still whether the attempt is running.
            row = self.get(key)
            return row is not None and row.state is occurrence.State.RUNNING
        names = {f"#f{i}": name for i, name in enumerate(chosen)}
        values = {f":v{i}": _serializer.serialize(v) for i, v in enumerate(chosen.values())}
        sets = ", ".join(f"#f{i} = :v{i}" for i in range(len(chosen)))
        try:
            with _translated():
                self._client.update_item(
                    TableName=self._table,
                    Key=self._key(key),
                    UpdateExpression=f"SET {sets}",
                    # Facts about a running attempt only: a heartbeat that arrives after
                    # the outcome must not reopen or alter a settled row.
                    ConditionExpression="#state = :running",
                    ExpressionAttributeNames={**names, "#state": "state"},
                    ExpressionAttributeValues={
                        **values,
                        ":running": {"S": occurrence.State.RUNNING.value},
                    },
                )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def settle(
        self,
        key: str,
        *,
        state: occurrence.State,
        now: datetime,
        exit_reason: str,
        result: dict[str, Any] | None = None,
        attempt: int | None = None,
    ) -> bool:
        occurrence.check_transition(occurrence.State.RUNNING, state)
        names = {
            "#state": "state",
            "#finished": "finished_at_ms",
            "#reason": "exit_reason",
            "#until": "in_progress_until_ms",
        }
        values: dict[str, Any] = {
            ":state": {"S": state.value},
            ":now": {"N": str(_ms(now))},
            ":reason": {"S": exit_reason},
            ":running": {"S": occurrence.State.RUNNING.value},
        }
        condition = "#state = :running"
        if attempt is not None:
            # A newer attempt may hold the row now: only this attempt's outcome lands.
            condition += " AND #attempts = :attempt"
            names["#attempts"] = "attempts"
            values[":attempt"] = {"N": str(attempt)}
        update = "SET #state = :state, #finished = :now, #reason = :reason"
        remove = "REMOVE #until"
        if state is occurrence.State.DEAD:
            # Into the sparse "dead" index, where GET /dead-letters finds it.
            update += ", #dead = #tenant"
            names |= {"#dead": "dead_tenant_id", "#tenant": "tenant_id"}
        names["#result"] = "result"
        if result is not None:
            update += ", #result = :result"
            values[":result"] = {"S": json.dumps(result, separators=(",", ":"))}
        else:
            # The outcome is this attempt's: an earlier attempt's result must not be
            # replayed as if it were this one's.
            remove += ", #result"
        try:
            with _translated():
                self._client.update_item(
                    TableName=self._table,
                    Key=self._key(key),
                    UpdateExpression=f"{update} {remove}",
                    # The completion is the idempotency record's update. Only the running
                    # attempt records its outcome: a cancel or a newer claim wins over it.
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def transition(self, item: occurrence.Occurrence, *, expected_state: occurrence.State) -> bool:
        occurrence.check_transition(expected_state, item.state)
        try:
            with _translated():
                self._client.put_item(
                    TableName=self._table,
                    Item=_encode(occurrence_to_item(item, self._expires_at(item))),
                    # Two workers (or a worker and a cancel) that read the same state: only
                    # the first move lands; the other sees False and backs off.
                    ConditionExpression="attribute_exists(#sk) AND #state = :expected",
                    ExpressionAttributeNames={"#sk": "occurrence_sk", "#state": "state"},
                    ExpressionAttributeValues={":expected": {"S": expected_state.value}},
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise
            if "Item" not in exc.response:
                raise errors.NotFound(f"occurrence {item.key} does not exist") from exc
            return False
        return True


# --- leases ------------------------------------------------------------------------------


def _lease_from_item(record: dict[str, Any]) -> lease.Lease:
    return lease.Lease(
        name=record["name"],
        owner=record["owner"],
        token=int(record["token"]),
        expires_at_ms=int(record["expires_at_ms"]),
    )


def _names(*placeholders: str) -> dict[str, str]:
    # DynamoDB rejects names an expression does not use, so each call names only its own.
    return {p: _LEASE_ATTRIBUTES[p] for p in placeholders}


_LEASE_ATTRIBUTES = {"#name": "name", "#owner": "owner", "#token": "token", "#exp": "expires_at_ms"}


class DynamoLeaseStore:
    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self._client = client
        self._table = table_name

    def acquire(
        self, name: str, owner: str, now_ms: int, terms: lease.LeaseTerms
    ) -> lease.Lease | None:
        try:
            with _translated():
                response = self._client.update_item(
                    TableName=self._table,
                    Key={"name": {"S": name}},
                    UpdateExpression="SET #owner = :owner, #exp = :exp ADD #token :one",
                    # Only a free or expired lease can be taken; ADD makes the fencing token
                    # grow on every acquisition, so a previous holder's token never matches.
                    ConditionExpression="attribute_not_exists(#name) OR #exp <= :now",
                    ExpressionAttributeNames=_names("#name", "#owner", "#exp", "#token"),
                    ExpressionAttributeValues={
                        ":owner": {"S": owner},
                        ":exp": {"N": str(now_ms + terms.ttl_ms)},
                        ":now": {"N": str(now_ms)},
                        ":one": {"N": "1"},
                    },
                    ReturnValues="ALL_NEW",
                )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return None
            raise
        return _lease_from_item(_decode(response["Attributes"]))

    def renew(self, held: lease.Lease, now_ms: int, terms: lease.LeaseTerms) -> lease.Lease:
        try:
            with _translated():
                response = self._client.update_item(
                    TableName=self._table,
                    Key={"name": {"S": held.name}},
                    UpdateExpression="SET #exp = :exp",
                    # Renewal needs the same owner and token and an unexpired lease: after a
                    # takeover the old holder's renewal fails and it stops at once.
                    ConditionExpression="#owner = :owner AND #token = :token AND #exp > :now",
                    ExpressionAttributeNames=_names("#owner", "#token", "#exp"),
                    ExpressionAttributeValues={
                        ":owner": {"S": held.owner},
                        ":token": {"N": str(held.token)},
                        ":exp": {"N": str(now_ms + terms.ttl_ms)},
                        ":now": {"N": str(now_ms)},
                    },
                    ReturnValues="ALL_NEW",
                )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                raise errors.LeaseLost("the lease expired or was taken over") from exc
            raise
        return _lease_from_item(_decode(response["Attributes"]))

    def release(self, held: lease.Lease) -> None:
        try:
            with _translated():
                self._client.update_item(
                    TableName=self._table,
                    Key={"name": {"S": held.name}},
                    UpdateExpression="SET #exp = :zero",
                    # Releasing someone else's lease would let a third ticker in early.
                    ConditionExpression="#owner = :owner AND #token = :token",
                    ExpressionAttributeNames=_names("#owner", "#token", "#exp"),
                    ExpressionAttributeValues={
                        ":owner": {"S": held.owner},
                        ":token": {"N": str(held.token)},
                        ":zero": {"N": "0"},
                    },
                )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise

    def get(self, name: str) -> lease.Lease | None:
        with _translated():
            response = self._client.get_item(
                TableName=self._table, Key={"name": {"S": name}}, ConsistentRead=True
            )
        record = response.get("Item")
        return _lease_from_item(_decode(record)) if record else None


# --- tenant slots ------------------------------------------------------------------------

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
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self._table = table_name
        self._sleep = sleep  # the wait before a change that met another goes again

    def held(
        self, tenant_id: str, *, consistent: bool = True
    ) -> tuple[builtins.list[quota.Slot], int | None]:
        slots: list[quota.Slot] = []
        limit: int | None = None
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            # From the limit override on: the items before it (quota use) are not slots.
            "KeyConditionExpression": "#tid = :tid AND #slot >= :first",
            "ExpressionAttributeNames": {"#tid": "tenant_id", "#slot": "slot"},
            "ExpressionAttributeValues": {
                ":tid": {"S": tenant_id},
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
                            "tenant_id": tenant_id,
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
                    Key=_encode({"tenant_id": tenant_id, "slot": number}),
                    # Only the holder frees it: after an expiry someone else may hold it.
                    ConditionExpression="#holder = :holder",
                    ExpressionAttributeNames={"#holder": "holder"},
                    ExpressionAttributeValues={":holder": {"S": holder}},
                )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise

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
