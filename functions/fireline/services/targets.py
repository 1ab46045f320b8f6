"""Running a job's target: a registered Python handler, a webhook, a Lambda, an SQS queue,
a Step Functions state machine, an EventBridge bus, an SNS topic.

Every target receives the occurrence key as its idempotency key (the HTTP target as the
``Idempotency-Key`` header): delivery is at-least-once, so a handler that must have an
effect once uses that key to recognise a repeat. Fireline never promises exactly-once
execution; with idempotent handlers the *effect* happens once.

A target that fails raises :class:`TargetFailed`; one that outlives its deadline raises
:class:`DeadlineExceeded`. Both are job outcomes (retried under the schedule's policy),
not worker errors.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import botocore.exceptions

from fireline.domain import aws_target, errors, model, signing, tracing
from fireline.domain import target as target_rules
from fireline.services import roles, webhook
from fireline.services import tracing as tracing_service

SIGNATURE_HEADER = signing.SIGNATURE_HEADER
# What an outcome stores of a target's result: well inside a DynamoDB item's 400 KB and
# Step Functions' 256 KB; past it, the size and the first characters are kept.
MAX_OUTPUT_BYTES = 32 * 1024
PREVIEW_CHARS = model.PREVIEW_CHARS
# SQS's limit on a FIFO message's MessageGroupId.
MAX_GROUP_ID = 128
# Step Functions' limit on an execution's name (of [A-Za-z0-9_-] here).
MAX_EXECUTION_NAME = 80
# Where a message attribute carries the occurrence key (SQS and SNS targets).
IDEMPOTENCY_ATTRIBUTE = "IdempotencyKey"


class TargetFailed(Exception):
    """The target reported a failure."""


class DeadlineExceeded(TargetFailed):
    """The target did not finish before the job's deadline."""


# Runs a registered Python handler for a job within a timeout (DeadlineExceeded past it).
PythonRunner = Callable[[Callable[["JobContext"], Any], "JobContext", float], Any]


def run_in_own_thread(
    handler: Callable[[JobContext], Any], context: JobContext, timeout: float
) -> Any:
    """A thread of its own per job, so the records of a batch never queue for a shared
    pool (a record's deadline must count from its own start). A thread cannot be
    stopped: one past its deadline is abandoned, and finishes or not on its own. The
    deployed workers use fireline.services.isolation instead (a process per attempt,
    killed at the deadline); this one serves tests whose handlers share their memory."""
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["value"] = handler(context)
        except BaseException as exc:  # handed to the waiting caller
            outcome["error"] = exc

    thread = threading.Thread(
        target=call, name=f"fireline-job-{context.occurrence_key}", daemon=True
    )
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise DeadlineExceeded(f"ran past {timeout:.0f} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


@dataclass(frozen=True)
class JobContext:
    """What a target is told about the fire it runs."""

    occurrence_key: str
    tenant_id: str
    schedule_id: str
    fire_time: datetime
    attempt: int
    payload: dict[str, Any]
    # A long job's handler may report how far it got (stored, visible in GET, and a
    # heartbeat); elsewhere it goes nowhere.
    report_progress: Callable[[dict[str, Any]], None] | None = None
    # The fire's trace (below its fire segment) and whether it is recorded; None: no
    # trace context is sent (a caller that has none).
    trace: tracing.TraceContext | None = None
    sampled: bool = False

    def traceparent(self) -> str | None:
        """What this attempt's target receives as W3C ``traceparent``: the fire's trace,
        below the worker's segment of the target's call (``target-<attempt>``)."""
        if self.trace is None:
            return None
        below = self.trace.child(tracing_service.target_span(self.attempt))
        return tracing.traceparent(below, self.sampled)

    def fire_traceparent(self) -> str | None:
        """The same trace below the fire's own segment: the same at every attempt, for
        the dispatch targets, whose input must not change between attempts."""
        if self.trace is None:
            return None
        return tracing.traceparent(self.trace, self.sampled)

    def progress(self, update: dict[str, Any]) -> None:
        if self.report_progress is not None:
            self.report_progress(update)

    def as_message(self) -> dict[str, Any]:
        return {
            "occurrence_key": self.occurrence_key,
            "tenant_id": self.tenant_id,
            "schedule_id": self.schedule_id,
            "fire_time": self.fire_time.isoformat().replace("+00:00", "Z"),
            "attempt": self.attempt,
            "payload": self.payload,
            **({tracing.TRACEPARENT: self.traceparent()} if self.trace is not None else {}),
        }


Handler = Callable[[JobContext], Any]


class Registry:
    """Python handlers by name: the built-in and example jobs of this deployment."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def register(self, name: str) -> Callable[[Handler], Handler]:
        def add(handler: Handler) -> Handler:
            self._handlers[name] = handler
            return handler

        return add

    def get(self, name: str) -> Handler:
        try:
            return self._handlers[name]
        except KeyError as exc:
            raise errors.ValidationError(
                f"no handler {name!r} is registered", field="target.handler"
            ) from exc

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    def names(self) -> list[str]:
        return sorted(self._handlers)


def jsonable(value: Any, limit: int = MAX_OUTPUT_BYTES) -> Any:
    """A target's result (or a job's progress) as stored on the occurrence: itself if JSON
    can hold it within ``limit`` bytes, else an account of it (its size and a preview).

    The row is a DynamoDB item (400 KB at most, the payload and progress beside it) and a
    long job's output also passes through Step Functions (256 KB) and an SQS message. A
    value nested past what an answer can show is kept as an account too."""
    if value is None or isinstance(value, bool | int | float):
        return value  # most jobs return nothing: no need to write it out to measure it
    deep = model.too_deep_account(value)
    if deep is not None:
        return deep
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)[:PREVIEW_CHARS]
    size = len(text.encode())
    if size > limit:
        return {"truncated": True, "bytes": size, "preview": text[:PREVIEW_CHARS]}
    return value


def _shown(location: str | None) -> str:
    """A Location header as a tenant may read it: printable, bounded."""
    if not location:
        return "(none)"
    text = "".join(c for c in location if c.isprintable())
    return text[:256]


def message_group_id(schedule_id: str) -> str:
    """The FIFO group of a schedule's (or a workflow node's) messages: its id, or when that
    is longer than SQS allows (a node id of 128 characters in a run), a prefix and a
    digest of it, still one group per schedule."""
    if len(schedule_id) <= MAX_GROUP_ID:
        return schedule_id
    digest = hashlib.sha256(schedule_id.encode()).hexdigest()
    return f"{schedule_id[: MAX_GROUP_ID - len(digest) - 1]}-{digest}"


class WorkflowStarter(Protocol):
    """What the workflow target needs (the workflow service)."""

    def start(
        self,
        tenant_id: str,
        workflow_id: str,
        *,
        version: int | None = None,
        run_id: str | None = None,
        source: str | None = None,
    ) -> Any: ...


def execution_name(tenant_id: str, occurrence_key: str) -> str:
    """A Step Functions execution's name derived from the occurrence it runs: a retry (or
    a repeated delivery) starts the same name, which a standard state machine refuses to
    start twice. A digest, as an occurrence key holds ``#`` and ``:`` (not allowed in a
    name) and may be longer than 80 characters; the tenant is in it so two tenants'
    fires never share a name on a machine both may call."""
    digest = hashlib.sha256(f"{tenant_id}\n{occurrence_key}".encode()).hexdigest()
    return f"fireline-{digest}"[:MAX_EXECUTION_NAME]


def deduplication_id(occurrence_key: str) -> str:
    """A FIFO queue's or topic's MessageDeduplicationId for an occurrence (128 at most)."""
    return hashlib.sha256(occurrence_key.encode()).hexdigest()


def delivered_message(context: JobContext) -> dict[str, Any]:
    """What a dispatch target (state machine, bus, topic) receives: the job's message
    without the attempt number, so every attempt sends the same input. Step Functions
    takes a second StartExecution of the same name as a repeat only when the input is the
    same, and a receiver de-duplicating on the occurrence key sees one body per fire."""
    message = context.as_message()
    del message["attempt"]
    if context.trace is not None:
        message[tracing.TRACEPARENT] = context.fire_traceparent()
    return message


def _attributes(occurrence_key: str, traceparent: str | None) -> dict[str, Any]:
    """An SQS or SNS target's message attributes: the occurrence key, and the trace
    context where there is one (as the body has it too)."""
    attributes = {IDEMPOTENCY_ATTRIBUTE: {"DataType": "String", "StringValue": occurrence_key}}
    if traceparent is not None:
        attributes[tracing.TRACEPARENT] = {"DataType": "String", "StringValue": traceparent}
    return attributes


def run_id_for(tenant_id: str, source: str) -> str:
    """A run id derived from what started it (a schedule's occurrence key)."""
    return "r" + hashlib.sha256(f"{tenant_id}\n{source}".encode()).hexdigest()[:24]


# What a tenant reads when its AWS target fails: a category and AWS's error code, never
# the error's text (which names resources and accounts) nor anything of a resource that
# is not the tenant's.
_CATEGORIES = {
    "access denied": (
        "AccessDenied",
        "AccessDeniedException",
        "AuthorizationError",
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "ExpiredToken",
        "ExpiredTokenException",
        "KMSAccessDeniedException",
    ),
    "not found": (
        "ResourceNotFoundException",
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
        "NoSuchEntity",
        "StateMachineDoesNotExist",
        "NotFound",
        "NotFoundException",
    ),
    "throttled": (
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestLimitExceeded",
    ),
}


_STATUS_CATEGORIES = {403: "access denied", 404: "not found", 429: "throttled"}


def aws_failure(exc: Exception) -> str:
    """``<category> (<error code>)`` for a failed AWS call."""
    if isinstance(exc, botocore.exceptions.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", "")) or "unknown"
        for category, codes in _CATEGORIES.items():
            if code in codes:
                return f"{category} ({code})"
        # A code not listed (services and emulators spell some their own way): the
        # HTTP status still says which category it is.
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        category = _STATUS_CATEGORIES.get(status or 0, "refused")
        return f"{category} ({code})"
    if isinstance(exc, botocore.exceptions.ConnectionError | botocore.exceptions.HTTPClientError):
        return "unreachable"
    return f"failed ({type(exc).__name__})"


class TargetRunner:
    def __init__(
        self,
        *,
        registry: Registry,
        signing_key: Callable[[str], signing.SigningKey],
        lambda_client: Callable[[float, roles.Credentials | None], Any],
        sqs_client: Callable[[roles.Credentials | None], Any],
        aws_client: Callable[[str, str, roles.Credentials | None], Any] | None = None,
        workflows: Callable[[], WorkflowStarter] | None = None,
        python: PythonRunner | None = None,
        egress: webhook.Egress | None = None,
        roles_for_targets: roles.RoleAssumer | None = None,
        aws_targets: aws_target.AwsTargetPolicy = aws_target.ROLES_ONLY,
    ) -> None:
        """``lambda_client(timeout, credentials)`` and ``sqs_client(credentials)`` build
        clients that call as ``credentials`` (a tenant's role), or as the worker itself
        when None (targets the operator's allowlist names). ``aws_client(service, region,
        credentials)`` builds the same for the dispatch targets (``stepfunctions``,
        ``events``, ``sns``) in the region their ARN names; without it those targets
        fail as not enabled."""
        self._roles = roles_for_targets
        self._aws_targets = aws_targets
        # Where HTTP targets may go: https to public addresses unless the operator widens it.
        self._egress = egress or webhook.Egress()
        self._workflows = workflows
        self._python_runner = python or run_in_own_thread
        self.registry = registry
        # The tenant's current webhook signing key (see fireline.services.keys).
        self._signing_key = signing_key
        self._lambda = lambda_client
        self._sqs = sqs_client
        self._aws_client = aws_client

    def run(self, target: dict[str, Any], context: JobContext, *, timeout: float) -> Any:
        """Run ``target`` for ``context`` within ``timeout`` seconds; its result, if any."""
        if timeout <= 0:
            raise DeadlineExceeded("no time left before the deadline")
        kind = target.get("type")
        call = {
            "python": lambda: self._python(target, context, timeout),
            "http": lambda: self._http(target, context, timeout),
            "lambda": lambda: self._invoke(target, context, timeout, self._as(target, context)),
            "sqs": lambda: self._send(target, context, self._as(target, context)),
            "workflow": lambda: self._start_workflow(target, context),
            "stepfunctions": lambda: self._start_execution(
                target, context, self._as(target, context)
            ),
            "eventbridge": lambda: self._put_event(target, context, self._as(target, context)),
            "sns": lambda: self._publish(target, context, self._as(target, context)),
        }.get(str(kind))
        if call is None:
            raise errors.ValidationError(f"unknown target type {kind!r}", field="target.type")
        try:
            return call()
        except (TargetFailed, errors.ValidationError):
            raise
        except Exception as exc:
            # Whatever else the call raised (a missing function, queue or workflow, an
            # access error, a header the HTTP client refuses, a throttled service) is this
            # attempt's failure, retried under the job's policy and then dead: never a
            # worker error that leaves the occurrence without an outcome.
            raise TargetFailed(f"{type(exc).__name__}: {exc}") from exc

    def _start_workflow(self, target: dict[str, Any], context: JobContext) -> Any:
        """A schedule whose target is a workflow starts a run per fire. The run id comes
        from the occurrence key: a repeated delivery finds the same run, not a second."""
        if self._workflows is None:
            raise errors.ValidationError("workflows are not enabled here", field="target.type")
        run = self._workflows().start(
            context.tenant_id,
            target["workflow_id"],
            version=target.get("version"),
            run_id=run_id_for(context.tenant_id, context.occurrence_key),
            source=context.occurrence_key,
        )
        return {"run_id": run.run_id, "workflow_id": run.workflow_id, "version": run.version}

    def _python(self, target: dict[str, Any], context: JobContext, timeout: float) -> Any:
        handler = self.registry.get(target["handler"])
        try:
            return self._python_runner(handler, context, timeout)
        except DeadlineExceeded as exc:
            raise DeadlineExceeded(f"{target['handler']} ran past {timeout:.0f} s") from exc
        except TargetFailed:
            raise
        except Exception as exc:
            raise TargetFailed(f"{type(exc).__name__}: {exc}") from exc

    def _http(self, target: dict[str, Any], context: JobContext, timeout: float) -> Any:
        # A header stored under the trace context's name (registered before the fire's
        # own was sent there) gives way to the fire's: it is dropped, the call goes on.
        stored = {
            str(k): str(v)
            for k, v in (target.get("headers") or {}).items()
            if str(k).lower() != tracing.TRACEPARENT
        }
        try:  # one stored before registration checked it: never sent at all
            target_rules.check_headers(stored)
        except errors.ValidationError as exc:
            raise TargetFailed(f"a header cannot be sent: {exc.message}") from exc
        try:
            target_rules.check_request_target(str(target["url"]))
        except errors.ValidationError as exc:
            raise TargetFailed(f"the URL cannot be sent: {exc.message}") from exc
        body = json.dumps(context.as_message(), separators=(",", ":")).encode()
        url = str(target["url"])
        try:
            key = self._signing_key(context.tenant_id)
        except errors.NotFound as exc:
            raise TargetFailed(f"not sent: {exc.message}") from exc
        # Signed with the tenant's own key over time, method, URL and body: a delivery
        # replayed to another URL (another tenant's receiver) or later does not verify.
        signature = signing.header(key, int(time.time()), "POST", url, body)
        headers = {
            **stored,
            "Content-Type": "application/json",
            "Idempotency-Key": context.occurrence_key,
            SIGNATURE_HEADER: signature,
            "User-Agent": "fireline",
        }
        traceparent = context.traceparent()
        if traceparent is not None:
            # The same value is in the body, which the signature covers: a receiver that
            # must trust the context reads it there.
            headers[tracing.TRACEPARENT] = traceparent
        limit = min(timeout, float(target.get("timeout_seconds", timeout)))
        # What a tenant reads of a failure (the exit reason) is a status or a category,
        # never an address or a socket error: see fireline.services.webhook.
        try:
            answer = webhook.post(
                self._egress,
                url,
                body,
                headers,
                tenant_id=context.tenant_id,
                timeout=limit,
            )
        except webhook.TimedOut as exc:
            raise DeadlineExceeded(f"no answer in {limit:.0f} s") from exc
        except webhook.SendFailed as exc:
            raise TargetFailed(str(exc)) from exc
        if 300 <= answer.status < 400:
            where = _shown(answer.location)
            raise TargetFailed(f"HTTP {answer.status}: redirect to {where} not followed")
        if not 200 <= answer.status < 300:
            raise TargetFailed(f"HTTP {answer.status}")
        return {"status": answer.status, "body": answer.body.decode(errors="replace")[:1024]}

    def _as(self, target: dict[str, Any], context: JobContext) -> roles.Credentials | None:
        """The credentials an AWS target is called with: the tenant's role, assumed with
        the tenant id as ExternalId, or the worker's own (None) where the operator's
        allowlist names the target for this tenant. Anything else is refused before any
        call, as are Fireline's own resources (a target stored before these rules, or
        written around the API, meets them here)."""
        why = aws_target.refusal(target, tenant_id=context.tenant_id, policy=self._aws_targets)
        if why is not None:
            raise TargetFailed(why)
        role = target.get("role_arn")
        if not role:
            return None
        if self._roles is None:
            raise TargetFailed("not allowed: this deployment assumes no tenant roles")
        try:
            return self._roles.credentials(str(role), context.tenant_id)
        except Exception as exc:
            raise TargetFailed(f"role_arn could not be assumed: {aws_failure(exc)}") from exc

    def _invoke(
        self,
        target: dict[str, Any],
        context: JobContext,
        timeout: float,
        credentials: roles.Credentials | None,
    ) -> Any:
        """Invoke synchronously, waiting up to ``timeout`` for the function to end. The
        client never resends (see wiring): a read timeout leaves the function running and
        ends this attempt with the deadline, as a slow webhook does."""
        try:
            response = self._lambda(timeout, credentials).invoke(
                FunctionName=target["function_arn"],
                InvocationType="RequestResponse",
                Payload=json.dumps(context.as_message()).encode(),
            )
        except botocore.exceptions.ReadTimeoutError as exc:
            raise DeadlineExceeded(
                f"{target['function_arn']} did not answer in {timeout:.0f} s"
            ) from exc
        except Exception as exc:
            raise TargetFailed(f"lambda target: {aws_failure(exc)}") from exc
        payload = response["Payload"].read().decode() if "Payload" in response else ""
        if response.get("FunctionError"):
            raise TargetFailed(f"{target['function_arn']} failed: {payload[:512]}")
        return {"status": response.get("StatusCode"), "payload": payload[:1024]}

    def _send(
        self, target: dict[str, Any], context: JobContext, credentials: roles.Credentials | None
    ) -> Any:
        url = str(target["queue_url"])
        kwargs: dict[str, Any] = {
            "QueueUrl": url,
            "MessageBody": json.dumps(context.as_message()),
            "MessageAttributes": _attributes(context.occurrence_key, context.traceparent()),
        }
        if url.endswith(".fifo"):
            # A FIFO queue drops a repeat of the same key within 5 minutes by itself.
            kwargs["MessageGroupId"] = message_group_id(context.schedule_id)
            kwargs["MessageDeduplicationId"] = deduplication_id(context.occurrence_key)
        try:
            response = self._sqs(credentials).send_message(**kwargs)
        except Exception as exc:
            raise TargetFailed(f"sqs target: {aws_failure(exc)}") from exc
        return {"message_id": response["MessageId"]}

    # --- dispatch targets: the outcome is the API call's answer ---------------------------

    def _client(self, service: str, arn: str, credentials: roles.Credentials | None) -> Any:
        if self._aws_client is None:
            raise TargetFailed(f"not allowed: this deployment calls no {service} targets")
        return self._aws_client(service, arn.split(":")[3], credentials)

    def _start_execution(
        self, target: dict[str, Any], context: JobContext, credentials: roles.Credentials | None
    ) -> Any:
        """StartExecution under a name derived from the occurrence key, with the same input
        at every attempt. A standard state machine starts a name once (for 90 days): a
        retry after a start whose answer was lost, or a repeated delivery, meets the first
        execution (ExecutionAlreadyExists), which is this fire's: success, not a second
        run. An express state machine does not keep names: there a repeat starts again."""
        machine = str(target["state_machine_arn"])
        name = execution_name(context.tenant_id, context.occurrence_key)
        client = self._client("stepfunctions", machine, credentials)
        try:
            response = client.start_execution(
                stateMachineArn=machine,
                name=name,
                input=json.dumps(delivered_message(context), sort_keys=True),
            )
        except botocore.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ExecutionAlreadyExists":
                raise TargetFailed(f"stepfunctions target: {aws_failure(exc)}") from exc
            # The name is this occurrence's digest, and so is the input: the key holds the
            # schedule's version, which fixes its payload, and no attempt number is sent.
            # The execution holding the name is the one an earlier attempt started.
            arn = machine.replace(":stateMachine:", ":execution:", 1) + f":{name}"
            return {"execution_arn": arn, "already_started": True}
        except Exception as exc:
            raise TargetFailed(f"stepfunctions target: {aws_failure(exc)}") from exc
        return {"execution_arn": response["executionArn"]}

    def _put_event(
        self, target: dict[str, Any], context: JobContext, credentials: roles.Credentials | None
    ) -> Any:
        """PutEvents of one entry. EventBridge has no deduplication id: a repeat is a
        second event, so the occurrence key is in the detail (``occurrence_key``) for
        receivers to recognise one. A failed entry (PutEvents answers 200 with the entry's
        error) is this attempt's failure."""
        bus = str(target["event_bus_arn"])
        client = self._client("events", bus, credentials)
        try:
            response = client.put_events(
                Entries=[
                    {
                        "EventBusName": bus,
                        "Source": str(target["source"]),
                        "DetailType": str(target["detail_type"]),
                        "Detail": json.dumps(delivered_message(context), sort_keys=True),
                        "Time": context.fire_time,
                    }
                ]
            )
        except Exception as exc:
            raise TargetFailed(f"eventbridge target: {aws_failure(exc)}") from exc
        entries = response.get("Entries") or [{}]
        entry = entries[0]
        if response.get("FailedEntryCount") or entry.get("ErrorCode") or not entry.get("EventId"):
            code = entry.get("ErrorCode") or "no event id"
            raise TargetFailed(f"eventbridge target: entry refused ({code})")
        return {"event_id": entry["EventId"]}

    def _publish(
        self, target: dict[str, Any], context: JobContext, credentials: roles.Credentials | None
    ) -> Any:
        """Publish with the occurrence key as the ``IdempotencyKey`` attribute; a FIFO
        topic also gets it as the deduplication id (a repeat within 5 minutes is dropped by
        SNS itself) and the schedule as the message group."""
        topic = str(target["topic_arn"])
        kwargs: dict[str, Any] = {
            "TopicArn": topic,
            "Message": json.dumps(delivered_message(context), sort_keys=True),
            "MessageAttributes": _attributes(context.occurrence_key, context.fire_traceparent()),
        }
        if topic.endswith(".fifo"):
            kwargs["MessageGroupId"] = message_group_id(context.schedule_id)
            kwargs["MessageDeduplicationId"] = deduplication_id(context.occurrence_key)
        client = self._client("sns", topic, credentials)
        try:
            response = client.publish(**kwargs)
        except Exception as exc:
            raise TargetFailed(f"sns target: {aws_failure(exc)}") from exc
        return {"message_id": response["MessageId"]}
