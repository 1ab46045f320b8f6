"""DynamoDB implementation of the OccurrenceStore port.

The occurrences table (see infra/template.yaml): (schedule_id, occurrence_sk =
``{fire_time_utc}#{version}``): a Query per schedule is its history, newest first, without
a GSI (a GSI would double every put). Sparse GSI ``dead`` on (dead_tenant_id,
occurrence_sk): only dead rows carry the attribute, so it lists a tenant's dead letters.
Sparse GSI ``awaiting_send`` on (awaiting_send_shard, awaiting_send_since_ms): only a row
written before its message was sent (a trigger's) carries them, until its send is
confirmed, so the sweep finds and settles a trigger whose request failed or died.
A row's conditional writes are the fire's idempotency record: its creation, its claim and
its outcome each land once.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from fireline import ports
from fireline.adapters.dynamodb import (
    _batch_get,
    _code,
    _decode,
    _decode_cursor,
    _encode,
    _encode_cursor,
    _from_ms,
    _ms,
    _opt_from_ms,
    _query_page,
    _serializer,
    _translated,
)
from fireline.domain import errors, occurrence

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
else:
    DynamoDBClient = Any

DEAD_INDEX = "dead"
# The sparse "awaiting_send" index: only a row written before its message was sent (a
# trigger's) carries its attributes, until the send is confirmed; spread over this many
# partitions of the index by its key.
AWAITING_SEND_INDEX = "awaiting_send"
AWAITING_SEND_SHARDS = 8


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
        "skipped_last_ms": _ms(item.skipped_last) if item.skipped_last else None,
        "skipped_count": item.skipped_count,
        "backfill_id": item.backfill_id,
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
        skipped_last=_opt_from_ms(record.get("skipped_last_ms")),
        skipped_count=(
            None if record.get("skipped_count") is None else int(record["skipped_count"])
        ),
        backfill_id=record.get("backfill_id"),
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

    def put_new(self, item: occurrence.Occurrence, *, awaiting_send: bool = False) -> bool:
        record = occurrence_to_item(item, self._expires_at(item))
        if awaiting_send:
            assert item.created_at is not None
            record["awaiting_send_shard"] = str(
                zlib.crc32(item.key.encode()) % AWAITING_SEND_SHARDS
            )
            record["awaiting_send_since_ms"] = _ms(item.created_at)
        try:
            with _translated():
                self._client.put_item(
                    TableName=self._table,
                    Item=_encode(record),
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

    def sent(self, key: str) -> None:
        try:
            with _translated():
                self._client.update_item(
                    TableName=self._table,
                    Key=self._key(key),
                    UpdateExpression="REMOVE #shard, #since",
                    # Never creates a row that is gone (expired, or never written).
                    ConditionExpression="attribute_exists(#sk)",
                    ExpressionAttributeNames={
                        "#shard": "awaiting_send_shard",
                        "#since": "awaiting_send_since_ms",
                        "#sk": "occurrence_sk",
                    },
                )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise

    def awaiting_send(self, *, before: datetime, limit: int) -> list[ports.AwaitingSend]:
        found: list[ports.AwaitingSend] = []
        for shard in range(AWAITING_SEND_SHARDS):
            start: dict[str, Any] | None = None
            while len(found) < limit:
                kwargs: dict[str, Any] = {
                    "TableName": self._table,
                    "IndexName": AWAITING_SEND_INDEX,
                    "KeyConditionExpression": "#shard = :shard AND #since < :before",
                    "ExpressionAttributeNames": {
                        "#shard": "awaiting_send_shard",
                        "#since": "awaiting_send_since_ms",
                    },
                    "ExpressionAttributeValues": {
                        ":shard": {"S": str(shard)},
                        ":before": {"N": str(_ms(before))},
                    },
                    "Limit": limit - len(found),
                }
                if start is not None:
                    kwargs["ExclusiveStartKey"] = start
                with _translated():
                    response = self._client.query(**kwargs)
                for raw in response.get("Items", []):
                    listed = _decode(raw)
                    found.append(
                        ports.AwaitingSend(
                            key=str(listed["occurrence_key"]),
                            since=_from_ms(listed["awaiting_send_since_ms"]),
                        )
                    )
                start = response.get("LastEvaluatedKey")
                if start is None:
                    break
        return found

    def settle_unsent(self, key: str, *, since: datetime, now: datetime) -> bool:
        try:
            with _translated():
                self._client.update_item(
                    TableName=self._table,
                    Key=self._key(key),
                    UpdateExpression=(
                        "SET #state = :skipped, #reason = :reason, #finished = :now "
                        "REMOVE #shard, #since"
                    ),
                    ConditionExpression="#since = :since AND #state = :queued",
                    ExpressionAttributeNames={
                        "#state": "state",
                        "#reason": "exit_reason",
                        "#finished": "finished_at_ms",
                        "#shard": "awaiting_send_shard",
                        "#since": "awaiting_send_since_ms",
                    },
                    ExpressionAttributeValues={
                        ":skipped": {"S": occurrence.State.SKIPPED.value},
                        ":reason": {"S": occurrence.NOT_SENT},
                        ":now": {"N": str(_ms(now))},
                        ":since": {"N": str(_ms(since))},
                        ":queued": {"S": occurrence.State.QUEUED.value},
                    },
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
