"""The template's tables, queues and buckets on moto, and a request log that counts AWS cost.

``Stack.create`` reads infra/template.yaml and creates each AWS::DynamoDB::Table,
AWS::SQS::Queue and AWS::S3::Bucket it declares, with the declared keys, indexes, TTL,
visibility timeouts and redrive, so tests run against the real data model rather than a
copy of it. (The local
cloud deploys the whole template through CloudFormation; tests that only need the data
plane take this faster path.)

``RequestLog`` is the product's request meter (fireline.cost.meter) hooked to moto's
clients: requests per operation, DynamoDB write, index and read units under DynamoDB's
rules, SQS requests per 64 KB chunk, and the items a Query read (ScannedCount).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
from cfnlint.decode import cfn_yaml

from fireline.cost import meter
from fireline.local import emulator

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
    indexes: dict[str, list[meter.Index]]  # table name -> its indexes
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
        indexes: dict[str, list[meter.Index]] = {}
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
                meter.Index(
                    gsi["IndexName"],
                    [k["AttributeName"] for k in gsi["KeySchema"]],
                    gsi["Projection"]["ProjectionType"],
                )
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


def serialized_item_writes() -> contextlib.AbstractContextManager[None]:
    """DynamoDB's atomic item calls for tests that drive moto in memory from threads (as
    the local cloud gives its embedded emulator)."""
    return emulator.atomic_item_calls()


@contextlib.contextmanager
def unprocessed_keys(client: Any, *, times: int, reads: int = 1) -> Iterator[list[int]]:
    """DynamoDB throttling ``client``'s next ``times`` BatchGetItem requests: each reads
    the first ``reads`` keys of each table and hands the rest back as UnprocessedKeys.
    Yields the number of keys asked for in each request."""
    real = client.batch_get_item
    asked: list[int] = []

    def throttled(**kwargs: Any) -> Any:
        requests = kwargs["RequestItems"]
        asked.append(sum(len(r["Keys"]) for r in requests.values()))
        if len(asked) > times:
            return real(**kwargs)
        read = {t: {**r, "Keys": r["Keys"][:reads]} for t, r in requests.items()}
        rest = {t: {**r, "Keys": r["Keys"][reads:]} for t, r in requests.items()}
        response = real(RequestItems={t: r for t, r in read.items() if r["Keys"]}) if reads else {}
        return {**response, "UnprocessedKeys": {t: r for t, r in rest.items() if r["Keys"]}}

    with mock.patch.object(client, "batch_get_item", throttled):
        yield asked


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


@contextlib.contextmanager
def emulator_cpu() -> Iterator[Callable[[], float]]:
    """The CPU seconds moto spends answering requests in this process (AWS's side of each
    call, not the product's), as a running total: the meter leaves them out of the CPU
    it charges to a function."""
    from moto.core.botocore_stubber import BotocoreStubber

    spent = [0.0]
    depth = threading.local()
    original = BotocoreStubber.__call__

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        # moto's own calls to other services (a state machine invoking a function) are
        # inside the outer call's time already.
        outer = getattr(depth, "n", 0) == 0
        depth.n = getattr(depth, "n", 0) + 1
        start = time.process_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            depth.n -= 1
            if outer:
                spent[0] += time.process_time() - start

    with mock.patch.object(BotocoreStubber, "__call__", timed):
        yield lambda: spent[0]


# --- the request log ---------------------------------------------------------------------

# The product's meter sizes items and counts units; these names stay for the tests.
attribute_size = meter.attribute_size
item_size = meter.item_size
_index_key = meter.index_key


@dataclass
class RequestLog(meter.Meter):
    """The product's request meter (fireline.cost.meter) on moto: item sizes before and
    after each write read through a second, unmetered client, and the occurrence keys of
    the messages sent."""

    # Occurrence keys of the messages sent (SendMessageBatch entries), with their delays.
    sent: Counter[str] = field(default_factory=Counter)
    delays: dict[str, int] = field(default_factory=dict)
    _probe: Any = None
    _schemas: dict[str, list[str]] = field(default_factory=dict)

    def attach(self, client: Any) -> None:
        service = client.meta.service_model.service_name
        if service == "dynamodb" and self._probe is None:
            self._probe = boto3.client(service, region_name=REGION)
            self.reader = self._get
            self.key_schema = self._schema_of
        if service == "sqs":
            client.meta.events.register("before-parameter-build.sqs", self._note_sent)
        super().attach(client)

    def reset(self) -> None:
        super().reset()
        self.sent.clear()
        self.delays.clear()

    def _schema_of(self, table: str) -> list[str]:
        if table not in self._schemas:
            described = self._probe.describe_table(TableName=table)["Table"]["KeySchema"]
            self._schemas[table] = [k["AttributeName"] for k in described]
        return self._schemas[table]

    def _get(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        item = self._probe.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
        return item  # type: ignore[no-any-return]

    def _note_sent(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name != "SendMessageBatch":
            return
        with self._lock:
            for entry in params["Entries"]:
                key = json.loads(entry["MessageBody"]).get("occurrence_key")
                if key:
                    self.sent[key] += 1
                    self.delays[key] = int(entry.get("DelaySeconds", 0))
