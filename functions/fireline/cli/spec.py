"""What a schedule's fire or a job runs, as options: the target, the class, the payload,
retries and the deadline (the API's ``JobSpecIn``).

Every option defaults to None, so what is not given is left to the API's defaults on a
create, and to the stored value on ``schedules update`` (``merge``).
"""

from __future__ import annotations

import argparse
from typing import Any

from fireline.cli import common

JOB_CLASSES = ("default", "short", "long")
JITTERS = ("full", "none")
# API field -> the option that sets it, for errors naming a field.
FIELDS = {
    "target": "--target-*",
    "target.handler": "--target-python",
    "target.url": "--target-http",
    "target.function_arn": "--target-lambda",
    "target.queue_url": "--target-sqs",
    "target.state_machine_arn": "--target-stepfunctions",
    "target.event_bus_arn": "--target-eventbridge",
    "target.detail_type": "--detail-type",
    "target.source": "--event-source",
    "target.topic_arn": "--target-sns",
    "target.workflow_id": "--target-workflow",
    "target.version": "--workflow-version",
    "target.role_arn": "--role-arn",
    "target.timeout_seconds": "--http-timeout",
    "target.headers": "--header",
    "job_class": "--class",
    "payload": "--payload",
    "retry.max_attempts": "--max-attempts",
    "retry.base_seconds": "--backoff",
    "retry.factor": "--backoff-factor",
    "retry.cap_seconds": "--backoff-cap",
    "retry.jitter": "--retry-jitter",
    "retry": "--backoff / --backoff-cap",
    "deadline_seconds": "--deadline",
}


def add_options(parser: argparse.ArgumentParser, *, target_required: bool) -> None:
    target = parser.add_argument_group(
        "target (exactly one)" if target_required else "target (replaces the current one)"
    )
    choice = target.add_mutually_exclusive_group(required=target_required)
    choice.add_argument(
        "--target-python", metavar="NAME", help="a registered handler (noop, echo, sleep, fail)"
    )
    choice.add_argument("--target-http", metavar="URL", help="a webhook to POST to")
    choice.add_argument("--target-lambda", metavar="ARN", help="a Lambda function to invoke")
    choice.add_argument("--target-sqs", metavar="URL", help="an SQS queue to send to")
    choice.add_argument(
        "--target-stepfunctions",
        metavar="ARN",
        help="a state machine to start an execution of (named from the occurrence)",
    )
    choice.add_argument(
        "--target-eventbridge",
        metavar="ARN",
        help="an event bus to put an event on (with --detail-type and --event-source)",
    )
    choice.add_argument("--target-sns", metavar="ARN", help="an SNS topic to publish to")
    choice.add_argument(
        "--target-workflow", metavar="ID", help="a registered workflow to start a run of"
    )
    target.add_argument(
        "--role-arn",
        metavar="ARN",
        help="the role in your account an AWS target (Lambda, SQS, Step Functions, "
        "EventBridge, SNS) is called as (it trusts Fireline with your tenant id as ExternalId)",
    )
    target.add_argument(
        "--detail-type", metavar="TEXT", help="EventBridge target: the event's detail-type"
    )
    target.add_argument(
        "--event-source", metavar="TEXT", help="EventBridge target: the event's source"
    )
    target.add_argument(
        "--http-timeout", type=common.positive, metavar="SECONDS", help="HTTP target: 1-900"
    )
    target.add_argument(
        "--header",
        action="append",
        type=_header,
        metavar="NAME:VALUE",
        help="HTTP target: a header sent with each call (repeatable)",
    )
    target.add_argument(
        "--workflow-version", type=common.positive, metavar="N", help="default: the latest"
    )
    job = parser.add_argument_group("the job")
    job.add_argument("--class", dest="job_class", choices=JOB_CLASSES, help="job class")
    job.add_argument(
        "--payload",
        metavar="JSON",
        type=common.json_object,
        help="a JSON object given to the job, or @FILE to read it from",
    )
    deadline = job.add_mutually_exclusive_group()
    deadline.add_argument(
        "--deadline", type=common.positive, metavar="SECONDS", help="an attempt's time limit"
    )
    if not target_required:  # an update may take the limit away
        deadline.add_argument(
            "--no-deadline", action="store_true", help="no time limit on an attempt"
        )
    retry = parser.add_argument_group("retries")
    retry.add_argument(
        "--max-attempts", type=common.positive, metavar="N", help="counting the first (1-100)"
    )
    retry.add_argument(
        "--backoff", type=common.number, metavar="SECONDS", help="the first retry's delay"
    )
    retry.add_argument(
        "--backoff-factor", type=common.number, metavar="X", help="each next delay times X"
    )
    retry.add_argument(
        "--backoff-cap", type=common.number, metavar="SECONDS", help="the longest delay"
    )
    retry.add_argument("--retry-jitter", choices=JITTERS, help="randomize delays (full) or not")
    common.name_fields(parser, FIELDS)


def fields(args: argparse.Namespace, current: dict[str, Any] | None = None) -> dict[str, Any]:
    """The job's fields of the request: those given, over ``current`` (a stored schedule's
    fields, for an update) when there is one."""
    body: dict[str, Any] = {}
    target = _target(args, (current or {}).get("target"))
    if target is not None:
        body["target"] = target
    for key, value in (
        ("job_class", args.job_class),
        ("payload", args.payload),
        ("deadline_seconds", args.deadline),
    ):
        if value is not None:
            body[key] = value
    if getattr(args, "no_deadline", False):
        body["deadline_seconds"] = None
    retry = {
        key: value
        for key, value in (
            ("max_attempts", args.max_attempts),
            ("base_seconds", args.backoff),
            ("factor", args.backoff_factor),
            ("cap_seconds", args.backoff_cap),
            ("jitter", args.retry_jitter),
        )
        if value is not None
    }
    if retry:
        body["retry"] = {**((current or {}).get("retry") or {}), **retry}
    return body


def _target(args: argparse.Namespace, current: dict[str, Any] | None) -> dict[str, Any] | None:
    """The target named, or the current one; the target's own options over either."""
    found: dict[str, Any] | None
    if args.target_python is not None:
        found = {"type": "python", "handler": args.target_python}
    elif args.target_http is not None:
        found = {"type": "http", "url": args.target_http}
    elif args.target_lambda is not None:
        found = {"type": "lambda", "function_arn": args.target_lambda}
    elif args.target_sqs is not None:
        found = {"type": "sqs", "queue_url": args.target_sqs}
    elif args.target_stepfunctions is not None:
        found = {"type": "stepfunctions", "state_machine_arn": args.target_stepfunctions}
    elif args.target_eventbridge is not None:
        found = {"type": "eventbridge", "event_bus_arn": args.target_eventbridge}
    elif args.target_sns is not None:
        found = {"type": "sns", "topic_arn": args.target_sns}
    elif args.target_workflow is not None:
        found = {"type": "workflow", "workflow_id": args.target_workflow}
    else:
        found = dict(current) if current is not None else None
    extra = {
        key: value
        for key, value in (
            ("role_arn", args.role_arn),
            ("timeout_seconds", args.http_timeout),
            ("headers", dict(args.header) if args.header else None),
            ("version", args.workflow_version),
            ("detail_type", args.detail_type),
            ("source", args.event_source),
        )
        if value is not None
    }
    if found is None:  # neither named nor stored: argparse asks for a target on a create
        return None
    # Sent as given: an option the target's type does not take is the API's to name.
    return {**found, **extra}


def _header(value: str) -> tuple[str, str]:
    name, colon, text = value.partition(":")
    if not colon or not name.strip():
        raise argparse.ArgumentTypeError(f"not NAME:VALUE: {value!r}")
    return name.strip(), text.strip()
