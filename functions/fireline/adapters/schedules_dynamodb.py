"""DynamoDB implementation of the ScheduleStore port.

The schedules table (see infra/template.yaml): (tenant_id, schedule_id), where the
partition key holds the tenant's key for the schedule (fireline.domain.model.tenant_key:
the tenant id, or ``{tenant id}#{n}`` for the schedule's shard n), so one tenant's writes
spread over TENANT_KEY_SHARDS keys; items read back carry the plain tenant id. Sparse GSI
``due`` on (due_shard, next_fire_ms), KEYS_ONLY. Only active schedules carry the two index
attributes. Sparse GSI ``held`` on (held_by, held_fire_ms), KEYS_ONLY: a one-off job enters
it with its quota mark and leaves it with the mark's removal, so it lists each tenant's
live jobs for the sweep. Creates and deletes that count a quota take and give back its
units through the quota store (see fireline.adapters.quotas_dynamodb).
"""

from __future__ import annotations

import builtins
import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from botocore.exceptions import ClientError

from fireline import ports
from fireline.adapters.dynamodb import (
    BACKOFF_SECONDS,
    Unwritten,
    _batch_get,
    _batch_write,
    _cancellation_reasons,
    _code,
    _decode,
    _decode_cursor,
    _encode,
    _encode_cursor,
    _from_ms,
    _ms,
    _opt_from_ms,
    _translated,
)
from fireline.domain import errors, exclusions, model, policies, quota, retry, schedule

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from fireline.adapters.quotas_dynamodb import DynamoQuotaStore
else:
    DynamoDBClient = TransactWriteItemTypeDef = Any

logger = Logger(service="fireline", child=True)
DUE_INDEX = "due"
HELD_INDEX = "held"


def schedule_to_item(item: model.Schedule, shards: int) -> dict[str, Any]:
    timing = item.timing
    record: dict[str, Any] = {
        "tenant_id": model.tenant_key(item.tenant_id, item.schedule_id),
        "schedule_id": item.schedule_id,
        "kind": item.kind.value,
        "spec": item.spec_text,
        "timezone": timing.timezone,
        "dst_gap": timing.dst.gap.value,
        "dst_repeat": timing.dst.repeat.value,
        "start_ms": _ms(timing.start) if timing.start else None,
        "end_ms": _ms(timing.end) if timing.end else None,
        # Absent when empty, so a schedule without exclusions pays no byte for them.
        "exclude": json.dumps(timing.exclude.as_json(), separators=(",", ":"))
        if timing.exclude
        else None,
        "skips_ms": sorted(_ms(s) for s in timing.skips) or None,
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
        "held_in": item.held_in,
        "sent_from_ms": _ms(item.sent_from) if item.sent_from else None,
        "sent_at_ms": _ms(item.sent_at) if item.sent_at else None,
        "skipped": skipped_text(item.skipped) if item.skipped else None,
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
        exclude=exclusions.parse(json.loads(record["exclude"]))
        if record.get("exclude")
        else exclusions.NONE,
        skips=frozenset(_from_ms(int(ms)) for ms in record.get("skips_ms") or ()),
    )
    deadline = record.get("deadline_seconds")
    return model.Schedule(
        tenant_id=model.tenant_of_key(record["tenant_id"]),
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
        held_in=None if record.get("held_in") is None else int(record["held_in"]),
        sent_from=_opt_from_ms(record.get("sent_from_ms")),
        sent_at=_opt_from_ms(record.get("sent_at_ms")),
        skipped=skipped_from_text(record["skipped"]) if record.get("skipped") else None,
    )


def skipped_text(skipped: policies.SkippedRange) -> str:
    """One attribute, compared whole by ``clear_skipped``'s condition: the same range is
    always the same text."""
    return json.dumps(
        {
            "version": skipped.version,
            "first_ms": _ms(skipped.first),
            "last_ms": _ms(skipped.last),
            "count": skipped.count,
            "reason": skipped.reason,
            **({"at_ms": _ms(skipped.at)} if skipped.at else {}),
        },
        separators=(",", ":"),
        sort_keys=True,
    )


def skipped_from_text(text: str) -> policies.SkippedRange:
    record = json.loads(text)
    return policies.SkippedRange(
        version=int(record["version"]),
        first=_from_ms(record["first_ms"]),
        last=_from_ms(record["last_ms"]),
        count=int(record["count"]),
        reason=record.get("reason", policies.MISFIRE_REASON),
        at=_from_ms(record["at_ms"]) if "at_ms" in record else None,
    )


@dataclass(frozen=True)
class KeyMoves:
    """What one page of :meth:`DynamoScheduleStore.move_to_tenant_keys` did."""

    scanned: int  # items read
    moved: int  # items moved to their tenant key
    changed: int  # items changed while being moved: the next pass moves them
    cursor: str | None  # where the next page starts; None at the end of the table


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
        return _encode(
            {"tenant_id": model.tenant_key(tenant_id, schedule_id), "schedule_id": schedule_id}
        )

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
    ) -> builtins.list[model.Schedule]:
        tenant_id = model.batch_tenant(items)
        if tenant_id is None:
            return []
        if first_new and self.get(tenant_id, items[0].schedule_id) is not None:
            # Read before the units are taken: a retried batch at its tenant's limit
            # (its own units holding it there) must learn it is one, not be refused.
            raise errors.AlreadyExists(f"schedule {items[0].schedule_id} exists")
        quotas = self._counted() if charge is not None else None
        holders: builtins.list[quota.Holder] = []
        if quotas is not None and charge is not None:
            # The units first, in holders written with the count's increment (one
            # transaction), then the items: every unit is held by a holder that lists its
            # job (see fireline.domain.quota.Holder).
            entries = [model.held_entry(i) for i in items]
            holders = quotas.hold_jobs(tenant_id, charge, entries, model.batch_created(items))
            placed = {e: h.number for h in holders for e in h.jobs}
            items = [replace(i, held_in=placed[model.held_entry(i)]) for i in items]

        def give_back(unwritten: Sequence[model.Schedule]) -> None:
            # Jobs known not to be written hold no unit: their holders let them go.
            if quotas is not None and holders and unwritten:
                quotas.unhold_jobs(holders, [model.held_entry(i) for i in unwritten])

        rest = items
        if first_new:
            try:
                self.create(items[0])  # conditional on the id being new: a racing retry
            except errors.AlreadyExists:
                give_back(items)  # nothing of this call was written
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
            # Those whose request went unanswered keep their units (a count too high, never
            # too low): the sweep finds that their holder lists a job never written.
            unwritten = {str(r["schedule_id"]) for r in exc.unwritten}
            give_back([i for i in rest if i.schedule_id in unwritten])
            raise
        return list(items)

    def release(self, tenant_id: str, schedule_id: str, refund: quota.Quota) -> bool:
        return bool(self.release_many(tenant_id, [schedule_id], refund))

    def release_held(self, job: model.Schedule) -> bool:
        if job.held_in is None:
            return False
        return self._counted().unhold(job.tenant_id, job.held_in, [model.held_entry(job)])

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
            [
                {"tenant_id": model.tenant_key(t, s), "schedule_id": s}
                for t, s in dict.fromkeys(keys)
            ],
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
        """A page of the tenant's schedules by id, merged from each of its keys: every
        key's query starts after the page's cursor (the last id shown) and reads up to
        ``limit`` items, so the merged page is the ``limit`` smallest ids after it. A key
        whose read stopped short (DynamoDB's 1 MB a page) bounds the page at the last id
        it returned: an id past that bound may lie unread on that key, and the next page
        starts at the bound."""
        start = _decode_cursor(cursor, keys=("tenant_id", "schedule_id"))
        if start is not None and start["tenant_id"] != tenant_id:
            raise errors.ValidationError("belongs to another listing", field="cursor")
        after = None if start is None else str(start["schedule_id"])
        merged: builtins.list[dict[str, Any]] = []
        more = False
        bound: str | None = None
        for key in model.tenant_keys(tenant_id):
            items, key_more = self._query_key(key, after=after, limit=limit)
            merged.extend(items)
            if key_more and items:
                last = str(items[-1]["schedule_id"])
                bound = last if bound is None else min(bound, last)
            more = more or key_more
        merged.sort(key=lambda r: str(r["schedule_id"]))
        if bound is not None:
            merged = [r for r in merged if str(r["schedule_id"]) <= bound]
        page, rest = merged[:limit], merged[limit:]
        next_cursor = (
            _encode_cursor({"tenant_id": tenant_id, "schedule_id": page[-1]["schedule_id"]})
            if page and (rest or more)
            else None
        )
        return ports.Page([schedule_from_item(r) for r in page], next_cursor)

    def _query_key(
        self, key: str, *, after: str | None, limit: int
    ) -> tuple[builtins.list[dict[str, Any]], bool]:
        """Up to ``limit`` items of one partition key, ids after ``after``; and whether
        the key holds more."""
        kwargs: dict[str, Any] = {}
        if after is not None:
            kwargs["ExclusiveStartKey"] = _encode({"tenant_id": key, "schedule_id": after})
        with _translated():
            response = self._client.query(
                TableName=self._table,
                KeyConditionExpression="#pk = :pk",
                ExpressionAttributeNames={"#pk": "tenant_id"},
                ExpressionAttributeValues={":pk": {"S": key}},
                Limit=limit,
                **kwargs,
            )
        items = [_decode(r) for r in response.get("Items", [])]
        return items, "LastEvaluatedKey" in response

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
                ports.DueEntry(
                    model.tenant_of_key(e["tenant_id"]),
                    e["schedule_id"],
                    _from_ms(e["next_fire_ms"]),
                )
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
        skipped: policies.SkippedRange | None = None,
    ) -> bool:
        # The fires from the expected one on were sent now: two numbers in the same write
        # (no index holds them), so a preview can say when a fire sent ahead was sent.
        names = {
            "#next": "next_fire_ms",
            "#v": "version",
            "#upd": "updated_at_ms",
            "#sf": "sent_from_ms",
            "#sa": "sent_at_ms",
            "#skipped": "skipped",
        }
        values: dict[str, Any] = {
            ":expected": {"N": str(_ms(expected_next_fire))},
            ":v": {"N": str(expected_version)},
            ":now": {"N": str(_ms(now))},
        }
        sets, removes = ["#upd = :now", "#sf = :expected", "#sa = :now"], []
        if next_fire is None:
            sets.append("#state = :completed")
            removes += ["#next", "#shard"]
            names |= {"#state": "state", "#shard": "due_shard"}
            values[":completed"] = {"S": model.ScheduleState.COMPLETED.value}
        else:
            sets.append("#next = :next")
            values[":next"] = {"N": str(_ms(next_fire))}
        # The skipped fires' record rides on the advance that moves past them: one write,
        # and the item stays under 1 KB (a unit), so the record costs no unit of its own.
        if skipped is None:
            removes.append("#skipped")
        else:
            sets.append("#skipped = :skipped")
            values[":skipped"] = {"S": skipped_text(skipped)}
        update = "SET " + ", ".join(sets)
        if removes:
            update += " REMOVE " + ", ".join(removes)
        try:
            with _translated():
                self._client.update_item(
                    TableName=self._table,
                    Key=self._key(tenant_id, schedule_id),
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

    def move_to_tenant_keys(self, *, cursor: str | None = None, limit: int = 500) -> KeyMoves:
        """One page of a Scan that moves each item not on its tenant key (one written
        before a tenant's schedules were spread over keys, all on the tenant id) to it:
        one transaction puts it on its key and deletes it where it was, as read (its
        version and next fire), so an advance or an update meanwhile cancels the move and
        the next pass takes it up. Idempotent; resume from the returned cursor."""
        kwargs: dict[str, Any] = {"TableName": self._table, "Limit": limit}
        start = _decode_cursor(cursor, keys=("tenant_id", "schedule_id"))
        if start is not None:
            kwargs["ExclusiveStartKey"] = _encode(start)
        with _translated():
            response = self._client.scan(**kwargs)
        moved = changed = 0
        for raw in response.get("Items", []):
            record = _decode(raw)
            where, schedule_id = str(record["tenant_id"]), str(record["schedule_id"])
            key = model.tenant_key(model.tenant_of_key(where), schedule_id)
            if key == where:
                continue
            if self._move(record, key):
                moved += 1
            else:
                changed += 1
        last = response.get("LastEvaluatedKey")
        return KeyMoves(
            scanned=int(response.get("Count", 0)),
            moved=moved,
            changed=changed,
            cursor=_encode_cursor(_decode(last)) if last else None,
        )

    def _move(self, record: dict[str, Any], key: str) -> bool:
        as_read: dict[str, Any] = {":v": {"N": str(record["version"])}}
        condition = "#v = :v AND "
        if "next_fire_ms" in record:
            condition += "#next = :next"
            as_read[":next"] = {"N": str(record["next_fire_ms"])}
        else:
            condition += "attribute_not_exists(#next)"
        try:
            with _translated():
                self._client.transact_write_items(
                    TransactItems=[
                        {
                            "Put": {
                                "TableName": self._table,
                                "Item": _encode({**record, "tenant_id": key}),
                                "ConditionExpression": "attribute_not_exists(#sid)",
                                "ExpressionAttributeNames": {"#sid": "schedule_id"},
                            }
                        },
                        {
                            "Delete": {
                                "TableName": self._table,
                                "Key": _encode(
                                    {
                                        "tenant_id": record["tenant_id"],
                                        "schedule_id": record["schedule_id"],
                                    }
                                ),
                                "ConditionExpression": condition,
                                "ExpressionAttributeNames": {
                                    "#v": "version",
                                    "#next": "next_fire_ms",
                                },
                                "ExpressionAttributeValues": as_read,
                            }
                        },
                    ]
                )
        except ClientError as exc:
            if _code(exc) != "TransactionCanceledException":
                raise
            reasons = _cancellation_reasons(exc)
            if reasons[0] == "ConditionalCheckFailed":
                # The id is on its tenant key already (made there since): two items of
                # one id is for an operator to settle, not for this pass to overwrite.
                raise errors.ConflictError(
                    f"schedule {record['schedule_id']} of tenant "
                    f"{model.tenant_of_key(str(record['tenant_id']))} is on two keys"
                ) from exc
            return False
        return True

    def clear_skipped(
        self, tenant_id: str, schedule_id: str, skipped: policies.SkippedRange
    ) -> bool:
        try:
            with _translated():
                self._client.update_item(
                    TableName=self._table,
                    Key=self._key(tenant_id, schedule_id),
                    UpdateExpression="REMOVE #skipped",
                    # Only the range whose rows the caller wrote: a later advance's range
                    # (rows not written yet) must stay, as must an item made again since.
                    ConditionExpression="#skipped = :skipped",
                    ExpressionAttributeNames={"#skipped": "skipped"},
                    ExpressionAttributeValues={":skipped": {"S": skipped_text(skipped)}},
                )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True
