"""DynamoDB implementation of the LeaseStore port.

The leases table (see infra/template.yaml): (name), one item a lease with its owner, its
expiry and a fencing token. Every change is a conditional update: a lease is taken only
when free or expired, and the token grows on every acquisition, so a previous holder's
renewal or release never matches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from fireline.adapters.dynamodb import _code, _decode, _translated
from fireline.domain import errors, lease

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
else:
    DynamoDBClient = Any


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
