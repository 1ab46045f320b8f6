"""Shared pieces of the DynamoDB adapters: item encoding, cursors, paged Query, batch reads
and writes, and the translation of ``ClientError``.

The stores of each port live beside it, one module a port (``schedules_dynamodb``,
``occurrences_dynamodb``, ``leases_dynamodb``, ``slots_dynamodb``, ``quotas_dynamodb``,
...). Clients are injected (only ``wiring`` builds them). ``ClientError`` is turned into a
typed error here, once; nothing above the adapters looks at AWS error codes. Every
conditional write says which race it closes. Attribute names always go through
ExpressionAttributeNames: several of ours (``state``, ``name``, ``owner``) are reserved
words that DynamoDB rejects in expressions.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as NetworkError

from fireline.domain import errors

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
else:
    DynamoDBClient = Any

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
