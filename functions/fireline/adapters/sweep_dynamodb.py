"""DynamoDB implementation of the SweepStore port (see fireline.services.sweep).

It reads four things: the slots table's usage items (a filtered Scan: the table holds
only live slots, one or two items per tenant and the holders of batches not yet visited,
so a pass over it is small), a tenant's page of the schedules table's ``held`` index
(KEYS_ONLY entries of the jobs holding a unit of their own), a tenant's holders (a Query of
its partition below every slot) and its usage item (GetItem, consistent). It writes the
sweep's note on the usage item, the conditional decrement of a count by the units it
proved held by nothing, the mark of a job it sends again, and a holder's change or delete
with its count's decrement (one transaction).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from fireline import ports
from fireline.adapters.dynamodb import (
    _code,
    _decode,
    _encode,
    _from_ms,
    _ms,
    _opt_from_ms,
    _translated,
)
from fireline.adapters.quotas_dynamodb import (
    LAST_WRITE,
    USAGE_SLOT,
    DynamoQuotaStore,
    used_attribute,
)
from fireline.adapters.schedules_dynamodb import HELD_INDEX
from fireline.domain import errors, model, quota

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
else:
    DynamoDBClient = Any

ATTEMPTS = 3
NOTE_TOKEN = "sweep_token"
NOTE_SINCE = "sweep_since_ms"
NOTE_LISTED = "sweep_listed"
NOTE_LISTED_AT = "sweep_listed_at_ms"
RESENT = "sweep_sent_ms"


class DynamoSweepStore:
    def __init__(self, client: DynamoDBClient, *, schedules_table: str, slots_table: str) -> None:
        self._client = client
        self._schedules = schedules_table
        self._slots = slots_table
        # A batch's holders live beside the counts they hold units of.
        self._quotas = DynamoQuotaStore(client, slots_table)

    def holders(self, tenant_id: str, *, due_by: datetime | None = None) -> list[quota.Holder]:
        return self._quotas.holders(tenant_id, due_by=due_by)

    def unhold(
        self, tenant_id: str, number: int, entries: Sequence[str], *, version: int | None = None
    ) -> bool:
        return self._quotas.unhold(tenant_id, number, entries, version=version)

    def drop_holder(self, holder: quota.Holder) -> bool:
        return self._quotas.drop_holder(holder)

    def _usage_key(self, tenant_id: str) -> dict[str, Any]:
        return _encode({"tenant_id": tenant_id, "slot": USAGE_SLOT})

    def tenants_holding(
        self, name: quota.Quota, *, limit: int, cursor: str | None = None
    ) -> ports.TenantPage:
        kwargs: dict[str, Any] = {}
        if cursor is not None:
            kwargs["ExclusiveStartKey"] = _encode(json.loads(cursor))
        with _translated():
            response = self._client.scan(
                TableName=self._slots,
                FilterExpression="#slot = :usage AND #used > :zero",
                ExpressionAttributeNames={"#slot": "slot", "#used": used_attribute(name)},
                ExpressionAttributeValues={
                    ":usage": {"N": str(USAGE_SLOT)},
                    ":zero": {"N": "0"},
                },
                Limit=limit,
                **kwargs,
            )
        last = response.get("LastEvaluatedKey")
        return ports.TenantPage(
            [str(_decode(item)["tenant_id"]) for item in response.get("Items", [])],
            int(response.get("ScannedCount", 0)),
            json.dumps(_decode(last), default=int) if last else None,
        )

    def count(self, tenant_id: str, name: quota.Quota) -> ports.HeldCount:
        with _translated():
            response = self._client.get_item(
                TableName=self._slots, Key=self._usage_key(tenant_id), ConsistentRead=True
            )
        record = _decode(response.get("Item") or {})
        note = None
        if NOTE_TOKEN in record:
            listed = record.get(NOTE_LISTED)
            note = ports.SweepNote(
                token=str(record[NOTE_TOKEN]),
                since=_from_ms(record[NOTE_SINCE]),
                listed=None if listed is None else int(listed),
                listed_at=_opt_from_ms(record.get(NOTE_LISTED_AT)),
            )
        token = record.get(LAST_WRITE)
        return ports.HeldCount(
            int(record.get(used_attribute(name), 0)), None if token is None else str(token), note
        )

    def held_jobs(
        self, tenant_id: str, *, limit: int, cursor: str | None = None
    ) -> ports.Page[ports.HeldJob]:
        kwargs: dict[str, Any] = {}
        if cursor is not None:
            kwargs["ExclusiveStartKey"] = _encode(json.loads(cursor))
        with _translated():
            response = self._client.query(
                TableName=self._schedules,
                IndexName=HELD_INDEX,
                KeyConditionExpression="#by = :tenant",
                ExpressionAttributeNames={"#by": "held_by"},
                ExpressionAttributeValues={":tenant": {"S": tenant_id}},
                Limit=limit,
                **kwargs,
            )
        entries = [_decode(r) for r in response.get("Items", [])]
        last = response.get("LastEvaluatedKey")
        return ports.Page(
            [
                ports.HeldJob(
                    model.tenant_of_key(e["tenant_id"]),
                    e["schedule_id"],
                    _from_ms(e["held_fire_ms"]),
                )
                for e in entries
            ],
            json.dumps(_decode(last), default=int) if last else None,
        )

    def marked_jobs(self, tenant_id: str, *, max_reads: int) -> tuple[int | None, int]:
        """The tenant's jobs holding their mark, counted over every key its schedules lie
        on (None past ``max_reads`` pages in all), and the items read."""
        marked = scanned = reads = 0
        for key in model.tenant_keys(tenant_id):
            key_marked, key_scanned, key_reads = self._marked_on(key, max_reads - reads)
            scanned += key_scanned
            reads += key_reads
            if key_marked is None:
                return None, scanned
            marked += key_marked
        return marked, scanned

    def _marked_on(self, key: str, max_reads: int) -> tuple[int | None, int, int]:
        """One partition key's marked jobs (None past ``max_reads`` pages), the items
        read and the pages read."""
        kwargs: dict[str, Any] = {}
        marked = scanned = 0
        for read in range(1, max_reads + 1):
            with _translated():
                response = self._client.query(
                    TableName=self._schedules,
                    KeyConditionExpression="#tenant = :tenant AND begins_with(#sid, :jobs)",
                    FilterExpression="attribute_exists(#held)",
                    ExpressionAttributeNames={
                        "#tenant": "tenant_id",
                        "#sid": "schedule_id",
                        "#held": "quota_held",
                    },
                    ExpressionAttributeValues={
                        ":tenant": {"S": key},
                        ":jobs": {"S": f"{model.JOB_PREFIX}_"},
                    },
                    Select="COUNT",
                    ConsistentRead=True,
                    **kwargs,
                )
            marked += int(response.get("Count", 0))
            scanned += int(response.get("ScannedCount", 0))
            last = response.get("LastEvaluatedKey")
            if not last:
                return marked, scanned, read
            kwargs["ExclusiveStartKey"] = last
        return None, scanned, max(0, max_reads)

    def note(self, tenant_id: str, note: ports.SweepNote) -> bool:
        names = {"#last": LAST_WRITE, "#token": NOTE_TOKEN, "#since": NOTE_SINCE}
        values: dict[str, Any] = {
            ":token": {"S": note.token},
            ":since": {"N": str(_ms(note.since))},
        }
        update = "SET #token = :token, #since = :since"
        names |= {"#listed": NOTE_LISTED, "#at": NOTE_LISTED_AT}
        if note.listed is None or note.listed_at is None:
            update += " REMOVE #listed, #at"
        else:
            update += ", #listed = :listed, #at = :at"
            values |= {
                ":listed": {"N": str(note.listed)},
                ":at": {"N": str(_ms(note.listed_at))},
            }
        return self._conditional(
            tenant_id,
            UpdateExpression=update,
            # The note is about the count as read: a take or give-back since (a new
            # token) makes it about nothing, and it is not written.
            ConditionExpression="#last = :token",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def forgive(self, tenant_id: str, name: quota.Quota, units: int, note: ports.SweepNote) -> bool:
        assert note.listed_at is not None and units > 0
        new_token = secrets.token_hex(8)
        names = {
            "#used": used_attribute(name),
            "#last": LAST_WRITE,
            "#token": NOTE_TOKEN,
            "#since": NOTE_SINCE,
            "#listed": NOTE_LISTED,
            "#at": NOTE_LISTED_AT,
        }
        values = {
            ":minus": {"N": str(-units)},
            ":units": {"N": str(units)},
            ":token": {"S": note.token},
            ":at": {"N": str(_ms(note.listed_at))},
            ":new": {"S": new_token},
        }
        for attempt in range(ATTEMPTS):
            try:
                with _translated():
                    self._client.update_item(
                        TableName=self._slots,
                        Key=self._usage_key(tenant_id),
                        UpdateExpression=(
                            "ADD #used :minus SET #last = :new REMOVE #token, #since, #listed, #at"
                        ),
                        # Only the count the note proved too high: no take or give-back
                        # since the note was first written (the token), the same listing
                        # (another sweep's forgiving removes the note), and never below
                        # zero. A new token: a repeat of this write cannot apply twice.
                        ConditionExpression=(
                            "#last = :token AND #token = :token AND #at = :at AND #used >= :units"
                        ),
                        ExpressionAttributeNames=names,
                        ExpressionAttributeValues=values,
                        ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    )
                return True
            except errors.Unavailable:
                if attempt == ATTEMPTS - 1:
                    raise
            except ClientError as exc:
                if _code(exc) != "ConditionalCheckFailedException":
                    raise
                old = _decode(exc.response.get("Item") or {})  # type: ignore[arg-type]
                # An earlier send of this very write, whose answer was lost, applied it.
                return bool(old.get(LAST_WRITE) == new_token)
        raise AssertionError("unreachable")  # pragma: no cover

    def mark_resent(
        self, tenant_id: str, schedule_id: str, now: datetime, *, not_since: datetime
    ) -> bool:
        try:
            with _translated():
                self._client.update_item(
                    TableName=self._schedules,
                    Key=_encode(
                        {
                            "tenant_id": model.tenant_key(tenant_id, schedule_id),
                            "schedule_id": schedule_id,
                        }
                    ),
                    UpdateExpression="SET #sent = :now",
                    # Still holding its unit (its mark: not ended meanwhile; a batch's
                    # job is checked by its holder's visit), and not sent again lately:
                    # of two sweeps that found it, one sends; a job whose message waits in
                    # a backlog gets at most one more per grace.
                    ConditionExpression=(
                        "(attribute_exists(#held) OR attribute_exists(#in)) AND "
                        "(attribute_not_exists(#sent) OR #sent <= :before)"
                    ),
                    ExpressionAttributeNames={
                        "#sent": RESENT,
                        "#held": "quota_held",
                        "#in": "held_in",
                    },
                    ExpressionAttributeValues={
                        ":now": {"N": str(_ms(now))},
                        ":before": {"N": str(_ms(not_since))},
                    },
                )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def _conditional(self, tenant_id: str, **kwargs: Any) -> bool:
        try:
            with _translated():
                self._client.update_item(
                    TableName=self._slots, Key=self._usage_key(tenant_id), **kwargs
                )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True
