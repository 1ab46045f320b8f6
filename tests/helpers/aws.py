"""The template's tables, queues and buckets on moto, and a request log that counts AWS cost.

``Stack.create`` reads infra/template.yaml and creates each AWS::DynamoDB::Table,
AWS::SQS::Queue and AWS::S3::Bucket it declares, with the declared keys, indexes, TTL,
visibility timeouts and redrive, so tests run against the real data model rather than a
copy of it. (The local
cloud deploys the whole template through CloudFormation; tests that only need the data
plane take this faster path.)

``RequestLog`` hooks a botocore client and counts what AWS would bill: requests per
operation, DynamoDB write units under DynamoDB's rules (1 unit per started KB of the
larger of the item before and after, plus one unit per index item written or deleted),
and the items a Query read (ScannedCount).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
from cfnlint.decode import cfn_yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "template.yaml"
REGION = "us-east-1"
# moto's default account: Fireline's own, where the stack lives.
ACCOUNT_ID = "123456789012"


def load_template() -> dict[str, Any]:
    return cfn_yaml.load(str(TEMPLATE))  # type: ignore[no-any-return]


# Read only, by Stack.create: the template parsed once per test process.
_parsed_template = functools.cache(load_template)


@dataclass
class Stack:
    tables: dict[str, str]  # logical id -> table name
    queues: dict[str, str]  # logical id -> queue URL
    indexes: dict[str, list[tuple[str, list[str]]]]  # table name -> [(index, key attrs)]
    environment: dict[str, str]
    buckets: dict[str, str] = field(default_factory=dict)  # logical id -> bucket name

    @classmethod
    def create(cls, prefix: str = "fireline-test") -> Stack:
        template = _parsed_template()
        resources = template["Resources"]
        parameters = {
            name: str(spec.get("Default", "")) for name, spec in template["Parameters"].items()
        }
        ddb = boto3.client("dynamodb", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        tables: dict[str, str] = {}
        indexes: dict[str, list[tuple[str, list[str]]]] = {}
        for logical, resource in resources.items():
            if resource["Type"] != "AWS::DynamoDB::Table":
                continue
            props = resource["Properties"]
            name = f"{prefix}-{logical}"
            kwargs: dict[str, Any] = {
                "TableName": name,
                "KeySchema": props["KeySchema"],
                "AttributeDefinitions": props["AttributeDefinitions"],
                "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
            }
            if "GlobalSecondaryIndexes" in props:
                kwargs["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
            ddb.create_table(**kwargs)
            ttl = props.get("TimeToLiveSpecification")
            if ttl:
                ddb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)
            tables[logical] = name
            indexes[name] = [
                (gsi["IndexName"], [k["AttributeName"] for k in gsi["KeySchema"]])
                for gsi in props.get("GlobalSecondaryIndexes", [])
            ]

        queues: dict[str, str] = {}
        arns: dict[str, str] = {}
        # Dead-letter queues first: the main queues' redrive names their ARNs.
        ordered = sorted(
            (item for item in resources.items() if item[1]["Type"] == "AWS::SQS::Queue"),
            key=lambda item: "RedrivePolicy" in item[1].get("Properties", {}),
        )
        for logical, resource in ordered:
            props = resource.get("Properties", {})
            attributes = {
                key: str(props[key])
                for key in ("VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds")
                if key in props
            }
            if "RedrivePolicy" in props:
                redrive = props["RedrivePolicy"]
                target = redrive["deadLetterTargetArn"]["Fn::GetAtt"][0]
                attributes["RedrivePolicy"] = json.dumps(
                    {
                        "deadLetterTargetArn": arns[target],
                        "maxReceiveCount": redrive["maxReceiveCount"],
                    }
                )
            url = sqs.create_queue(QueueName=f"{prefix}-{logical}", Attributes=attributes)[
                "QueueUrl"
            ]
            queues[logical] = url
            arns[logical] = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
                "Attributes"
            ]["QueueArn"]

        buckets: dict[str, str] = {}
        s3 = boto3.client("s3", region_name=REGION)
        for logical, resource in resources.items():
            if resource["Type"] != "AWS::S3::Bucket":
                continue
            # Bucket names are global and lowercase; CloudFormation would generate one.
            name = f"{prefix}-{logical}".lower()
            s3.create_bucket(Bucket=name)
            rules = resource.get("Properties", {}).get("LifecycleConfiguration", {})
            if rules:
                s3.put_bucket_lifecycle_configuration(
                    Bucket=name,
                    LifecycleConfiguration={
                        "Rules": [_lifecycle_rule(rule) for rule in rules["Rules"]]
                    },
                )
            buckets[logical] = name

        machines: dict[str, str] = {}
        sfn = boto3.client("stepfunctions", region_name=REGION)
        for logical, resource in resources.items():
            if resource["Type"] != "AWS::Serverless::StateMachine":
                continue
            # What `sam package` does: inline the definition with its substitutions.
            props = resource["Properties"]
            definition = (TEMPLATE.parent / props["DefinitionUri"]).read_text()
            for name, value in props.get("DefinitionSubstitutions", {}).items():
                definition = definition.replace(
                    "${" + name + "}", _resolve(value, {**tables, **queues})
                )
            machines[logical] = sfn.create_state_machine(
                name=f"{prefix}-{logical}",
                definition=definition,
                roleArn="arn:aws:iam::123456789012:role/fireline-test",
            )["stateMachineArn"]

        refs = {
            **tables,
            **queues,
            **buckets,
            **machines,
            **parameters,
            "AWS::StackName": prefix,
            "AWS::AccountId": ACCOUNT_ID,
            # The role tenants' target roles trust (moto's STS assumes any role).
            "TargetCallerRole.Arn": f"arn:aws:iam::{ACCOUNT_ID}:role/{prefix}-TargetCallerRole",
        }
        variables = template["Globals"]["Function"]["Environment"]["Variables"]
        environment = {name: _resolve(value, refs) for name, value in variables.items()}
        return cls(tables, queues, indexes, environment, buckets)

    def env(self, **overrides: str) -> dict[str, str]:
        return {**self.environment, "AWS_DEFAULT_REGION": REGION, **overrides}


def _lifecycle_rule(rule: dict[str, Any]) -> dict[str, Any]:
    """A CloudFormation lifecycle rule in the S3 API's shape."""
    api: dict[str, Any] = {
        "ID": rule["Id"],
        "Status": rule["Status"],
        "Filter": {"Prefix": rule.get("Prefix", "")},
    }
    if "ExpirationInDays" in rule:
        api["Expiration"] = {"Days": rule["ExpirationInDays"]}
    if "AbortIncompleteMultipartUpload" in rule:
        api["AbortIncompleteMultipartUpload"] = rule["AbortIncompleteMultipartUpload"]
    return api


def _resolve(value: Any, refs: dict[str, str]) -> str:
    if isinstance(value, dict) and "Ref" in value:
        return refs[value["Ref"]]
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return refs[".".join(value["Fn::GetAtt"])]
    return str(value)


# --- moto as DynamoDB and SQS behave ---------------------------------------------------


@contextlib.contextmanager
def serialized_item_writes() -> Iterator[None]:
    """DynamoDB applies each item write atomically (condition check and write together)
    and a read sees an item before or after a write, never half of one; moto has no
    lock, so threads racing in-process could both pass a condition, or read an item an
    update is still filling in. One lock around moto's item calls gives the tests
    DynamoDB's guarantee."""
    lock = threading.RLock()
    backend = "moto.dynamodb.models.DynamoDBBackend"
    from moto.dynamodb.models import DynamoDBBackend

    with contextlib.ExitStack() as patches:
        for name in (
            "put_item",
            "update_item",
            "delete_item",
            "transact_write_items",
            "get_item",
            "query",
            "scan",
            "batch_get_item",
        ):
            original = getattr(DynamoDBBackend, name)

            def locked(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                with lock:
                    return _original(*args, **kwargs)

            patches.enter_context(mock.patch(f"{backend}.{name}", locked))
        yield


@contextlib.contextmanager
def sqs_follows(clock: Any) -> Iterator[None]:
    """moto's SQS reads the wall clock for delays and visibility; make it read ``clock``.

    Each reading moves on by a microsecond, as real time does between two calls: moto
    counts a message visible only once the clock is strictly past its deadline.
    """
    ticks = itertools.count()

    def seconds() -> float:
        return float(clock.now().timestamp()) + next(ticks) * 1e-6

    with (
        mock.patch("moto.sqs.models.unix_time", seconds),
        mock.patch("moto.sqs.models.unix_time_millis", lambda: seconds() * 1000),
    ):
        yield


# --- the request log ---------------------------------------------------------------------


def attribute_size(value: dict[str, Any]) -> int:
    """DynamoDB's size of one attribute value (wire format), in bytes."""
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(inner.encode())
    if kind == "N":
        digits = len(str(Decimal(inner)).lstrip("-").replace(".", "").lstrip("0")) or 1
        return math.ceil(digits / 2) + 1
    if kind == "B":
        return len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(attribute_size(v) + 1 for v in inner)
    if kind in ("SS", "NS", "BS"):
        return sum(attribute_size({kind[0]: v}) for v in inner)
    raise ValueError(kind)


def item_size(item: dict[str, Any] | None) -> int:
    if not item:
        return 0
    return sum(len(name.encode()) + attribute_size(value) for name, value in item.items())


@dataclass
class RequestLog:
    """Counts requests, DynamoDB write units, index writes and items read by queries."""

    indexes: dict[str, list[tuple[str, list[str]]]] = field(default_factory=dict)
    requests: Counter[str] = field(default_factory=Counter)
    write_units: float = 0.0
    index_write_units: float = 0.0
    scanned: int = 0  # items read by Query/Scan (ScannedCount)
    writes: Counter[str] = field(default_factory=Counter)  # single-item writes per table
    # Occurrence keys of the messages sent (SendMessageBatch entries), with their delays.
    sent: Counter[str] = field(default_factory=Counter)
    delays: dict[str, int] = field(default_factory=dict)
    # Every item written per table: single-item writes, BatchWriteItem's processed items
    # and each Put/Update/Delete of a TransactWriteItems that went through.
    item_writes: Counter[str] = field(default_factory=Counter)
    _probe: Any = None
    _schemas: dict[str, list[str]] = field(default_factory=dict)
    _lock: Any = field(default_factory=threading.Lock)

    def attach(self, client: Any) -> None:
        service = client.meta.service_model.service_name
        if service == "dynamodb":
            # A second client without hooks reads items before and after each write.
            self._probe = boto3.client(service, region_name=REGION)
        client.meta.events.register(f"before-parameter-build.{service}", self._before_call)
        client.meta.events.register(f"after-call.{service}", self._after_call)

    def reset(self) -> None:
        self.requests.clear()
        self.write_units = self.index_write_units = 0.0
        self.scanned = 0
        self.writes.clear()
        self.item_writes.clear()
        self.sent.clear()
        self.delays.clear()

    def count(self, *operations: str) -> int:
        return sum(self.requests[o] for o in operations)

    def _key(self, table: str, item: dict[str, Any]) -> dict[str, Any]:
        assert self._probe is not None
        if table not in self._schemas:
            described = self._probe.describe_table(TableName=table)["Table"]["KeySchema"]
            self._schemas[table] = [k["AttributeName"] for k in described]
        return {name: item[name] for name in self._schemas[table]}

    def _get(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        assert self._probe is not None
        return self._probe.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")

    def _before_call(
        self, model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> None:
        name = model.name
        with self._lock:
            self.requests[name] += 1
        if name in ("PutItem", "UpdateItem", "DeleteItem"):
            table = params["TableName"]
            key = params.get("Key") or self._key(table, params["Item"])
            # The request's own context travels to after-call: safe across threads.
            context["request_log"] = (table, key, self._get(table, key))
        elif name == "BatchWriteItem":
            context["request_log_items"] = Counter(
                {table: len(items) for table, items in params["RequestItems"].items()}
            )
        elif name == "SendMessageBatch":
            with self._lock:
                for entry in params["Entries"]:
                    key = json.loads(entry["MessageBody"]).get("occurrence_key")
                    if key:
                        self.sent[key] += 1
                        self.delays[key] = int(entry.get("DelaySeconds", 0))
        elif name == "TransactWriteItems":
            context["request_log_items"] = Counter(
                item[kind]["TableName"]
                for item in params["TransactItems"]
                for kind in ("Put", "Update", "Delete")
                if kind in item
            )

    def _after_call(
        self, model: Any, parsed: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> None:
        name = model.name
        if name in ("Query", "Scan"):
            with self._lock:
                self.scanned += int(parsed.get("ScannedCount", 0))
        if "request_log_items" in context:
            written: Counter[str] = context.pop("request_log_items")
            if "Error" in parsed:
                return  # a cancelled transaction or a refused batch writes nothing
            for table, unprocessed in parsed.get("UnprocessedItems", {}).items():
                written[table] -= len(unprocessed)
            with self._lock:
                self.item_writes.update(written)
            return
        if "request_log" not in context:
            return
        table, key, before = context.pop("request_log")
        failed = "Error" in parsed
        after = before if failed else self._get(table, key)
        # A refused conditional write still costs the units of the item it read.
        units = max(1, math.ceil(max(item_size(before), item_size(after)) / 1024))
        index_units = 0
        if not failed:
            for _, attrs in self.indexes.get(table, []):
                old = _index_key(before, attrs)
                new = _index_key(after, attrs)
                if old != new:  # KEYS_ONLY: an unchanged index key writes nothing there
                    index_units += (old is not None) + (new is not None)
        with self._lock:
            self.write_units += units
            self.index_write_units += index_units
            self.writes[table] += 0 if failed else 1
            self.item_writes[table] += 0 if failed else 1


def _index_key(item: dict[str, Any] | None, attrs: list[str]) -> tuple[str, ...] | None:
    if not item or not all(a in item for a in attrs):
        return None
    return tuple(json.dumps(item[a], sort_keys=True) for a in attrs)
