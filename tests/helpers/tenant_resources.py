"""A tenant's own Step Functions, EventBridge and SNS resources, with a queue beside each
bus and topic so a test sees what reached them.

``client(service)`` builds a client in the tenant's account (moto, or the local cloud's
emulator); the same resources serve the contract tests and the local cloud's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Clients = Callable[[str], Any]

PASS_MACHINE = {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}
# Runs for an hour unless stopped: a test decides when its execution ends.
WAITING_MACHINE = {
    "StartAt": "Wait",
    "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}},
}


@dataclass(frozen=True)
class Watched:
    """A resource Fireline sends to (``arn``) and the queue that receives what reached it."""

    arn: str
    queue_url: str


def _queue(client: Clients, name: str, *, fifo: bool = False) -> tuple[str, str]:
    sqs = client("sqs")
    attributes = {"FifoQueue": "true"} if fifo else {}
    url: str = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn: str = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return url, arn


def state_machine(
    client: Clients, name: str = "reports", definition: dict[str, Any] = PASS_MACHINE
) -> str:
    role = client("iam").create_role(
        RoleName=f"{name}-machine",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "states.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )["Role"]["Arn"]
    arn: str = client("stepfunctions").create_state_machine(
        name=name, definition=json.dumps(definition), roleArn=role
    )["stateMachineArn"]
    return arn


def event_bus(client: Clients, name: str = "reports", source: str = "acme.reports") -> Watched:
    """A bus with a rule sending every event of ``source`` to a queue."""
    events = client("events")
    arn: str = events.create_event_bus(Name=name)["EventBusArn"]
    url, queue_arn = _queue(client, f"{name}-events")
    events.put_rule(
        Name=f"{name}-to-queue", EventBusName=name, EventPattern=json.dumps({"source": [source]})
    )
    events.put_targets(
        Rule=f"{name}-to-queue", EventBusName=name, Targets=[{"Id": "queue", "Arn": queue_arn}]
    )
    return Watched(arn, url)


def topic(client: Clients, name: str = "reports", *, fifo: bool = False) -> Watched:
    """A topic with a queue subscribed (raw delivery on a FIFO topic, as SNS requires a
    FIFO queue there)."""
    sns = client("sns")
    suffix = ".fifo" if fifo else ""
    attributes = {"FifoTopic": "true"} if fifo else {}
    arn: str = sns.create_topic(Name=f"{name}{suffix}", Attributes=attributes)["TopicArn"]
    url, queue_arn = _queue(client, f"{name}-messages{suffix}", fifo=fifo)
    sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=queue_arn)
    return Watched(arn, url)


def received(client: Clients, queue_url: str) -> list[dict[str, Any]]:
    """Every message on ``queue_url`` now (bodies parsed, attributes kept)."""
    sqs = client("sqs")
    found: list[dict[str, Any]] = []
    while True:
        got = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            AttributeNames=["All"],
        ).get("Messages", [])
        if not got:
            return found
        for message in got:
            found.append({**message, "Body": json.loads(message["Body"])})
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])


def executions(client: Clients, machine_arn: str) -> list[dict[str, Any]]:
    """The machine's executions, each with its input parsed."""
    sfn = client("stepfunctions")
    listed = sfn.list_executions(stateMachineArn=machine_arn)["executions"]
    return [
        {
            **e,
            "input": json.loads(sfn.describe_execution(executionArn=e["executionArn"])["input"]),
        }
        for e in listed
    ]


# How long the emulator's execution thread may take to see a stop (polled, not slept).
STOPPED_WITHIN_SECONDS = 20.0


def stop_execution(client: Clients, execution_arn: str) -> None:
    """Stop an execution and wait until it reads as ABORTED. The emulator runs each
    execution in a thread that takes the stop when it next looks, so until then the
    execution still reads RUNNING (and a start of its name would meet a running one)."""
    sfn = client("stepfunctions")
    sfn.stop_execution(executionArn=execution_arn)
    waited_until = time.monotonic() + STOPPED_WITHIN_SECONDS
    while sfn.describe_execution(executionArn=execution_arn)["status"] == "RUNNING":
        if time.monotonic() > waited_until:
            raise AssertionError(
                f"{execution_arn} still runs {STOPPED_WITHIN_SECONDS} s after its stop"
            )
        time.sleep(0.02)
