"""The local Lambda runtime: plays the AWS service side for a deployed stack.

The emulator deploys functions but does not run their code, so this module does what
Lambda, EventBridge, SQS event source mappings and API Gateway would:

- every deployed function runs in its own process (its own environment, as a Lambda
  container has), importing the module its Handler names, with a Lambda-like context
  (remaining time counted down from its Timeout) and its stdout (structured logs, EMF
  metrics) collected;
- every EventBridge schedule rule invokes its target on its period;
- every SQS event source mapping is disabled in the emulator (which would otherwise take
  the messages for its own stub) and played here: long-polls the queue, invokes the
  function with a real SQS event of up to BatchSize records (gathered for up to
  MaximumBatchingWindowInSeconds once the first arrives, ten a receive, never past Lambda's
  6 MB payload), deletes only the records not in batchItemFailures, keeps at most
  MaximumConcurrency invocations in flight, and leaves the rest to the visibility timeout
  and the queue's redrive;
- API Gateway: a real HTTP server that runs the REQUEST authorizer on the x-api-key header
  (decisions cached as long as the template says), applies the usage plan's per-tenant
  throttle and daily quota to the usage identifier the authorizer returns (a token
  bucket: ``burst`` tokens, refilled at ``rate`` per second; 429 when empty, before the
  API is called), then turns the request into a proxy event for the API function.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import http.server
import importlib
import json
import multiprocessing
import os
import queue
import re
import signal
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import parse_qsl, urlsplit

# --- a function's process ----------------------------------------------------------------


@dataclass(frozen=True)
class FunctionSpec:
    logical_id: str
    name: str
    handler: str
    timeout_seconds: int
    environment: dict[str, str]
    concurrency: int = 1  # execution environments (processes)
    memory_mb: int = 128  # as deployed; reported to the handler, not enforced


class _Context:
    """What the Lambda runtime passes a handler."""

    def __init__(self, spec: FunctionSpec, request_id: str) -> None:
        self.function_name = spec.name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{spec.name}"
        self.memory_limit_in_mb = spec.memory_mb
        self.aws_request_id = request_id
        self.log_group_name = f"/aws/lambda/{spec.name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + spec.timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class _Lines:
    """A process's stdout, sent line by line to the parent (logs and EMF metrics)."""

    def __init__(self, sink: Any, name: str) -> None:
        self._sink = sink
        self._name = name
        self._buffer = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._buffer += text
            while "\n" in self._buffer:
                line, self._buffer = self._buffer.split("\n", 1)
                if line.strip():
                    self._sink.put((self._name, line))
        return len(text)

    def flush(self) -> None:
        return None


def _serve(spec: FunctionSpec, connection: Any, lines: Any) -> None:
    """The body of a function's process: import the handler, run invocations one at a
    time, as a Lambda execution environment does (module state, such as a cached
    resolver or the current event, is never shared by two invocations at once). Each
    process has its own connection to the host, so one that is killed takes no lock or
    queue the others need with it."""
    # Ctrl-C and a SIGTERM to the group (make run stopped, a supervisor's stop) reach
    # every process of it; the parent stops its functions itself, each after its
    # invocation, so a signal must not kill one mid-invocation and have it replaced.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.environ.clear()
    os.environ.update(spec.environment)
    sys.stdout = _Lines(lines, spec.logical_id)
    module_name, _, function_name = spec.handler.rpartition(".")
    handler = getattr(importlib.import_module(module_name), function_name)
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError):
            break  # the host is gone
        if request is None:
            break
        request_id, event = request
        connection.send((request_id, None, None))  # taken: from here a death fails it
        try:
            result = handler(event, _Context(spec, request_id))
            connection.send((request_id, True, result))
        except Exception as exc:
            lines.put((spec.logical_id, _failure_line(exc)))
            payload = {"errorType": type(exc).__name__, "errorMessage": str(exc)}
            connection.send((request_id, False, payload))


def _failure_line(exc: Exception) -> str:
    """One JSON log line for an invocation that raised. An authorizer's "Unauthorized"
    is how a refused key is answered, not a failure: it gets no traceback."""
    if str(exc) == "Unauthorized":
        return json.dumps({"level": "INFO", "message": "invocation answered Unauthorized"})
    return json.dumps(
        {
            "level": "ERROR",
            "message": f"invocation failed: {type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }
    )


class FunctionError(Exception):
    """The handler raised: what Lambda reports as a function error."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__(f"{payload.get('errorType')}: {payload.get('errorMessage')}")
        self.payload = payload


# How long a stopping function's invocation may still run before its process is ended.
STOP_GRACE_SECONDS = 3
# How long the gateway waits for the authorizer and the API: API Gateway's 29 s integration
# limit, plus a cold start's init (Lambda gives init its own 10 s, outside the timeout).
INTEGRATION_TIMEOUT_SECONDS = 35


# What every function's process imports before its handler, imported once in a fork
# server: each process forked from it shares them (copy on write) instead of importing
# them again in a new interpreter (about 2 s of CPU a process). Only modules that read no
# environment variable at import: ``fireline.wiring`` reads its settings when called,
# and the services' child loggers only their sampling and deduplication switches, which
# the template does not set. The handler modules (their loggers and metrics read the
# function's environment) are imported in the process, once its environment is set.
PRELOADED_MODULES = [
    "fireline.wiring",
    "boto3",
    "botocore.client",
    "botocore.session",
    "s3transfer.manager",
    "urllib3",
    "pydantic",
    "aws_lambda_powertools",
    "aws_lambda_powertools.event_handler",
    "aws_lambda_powertools.event_handler.openapi.params",
    "aws_lambda_powertools.logging",
    "aws_lambda_powertools.metrics",
    "aws_lambda_powertools.utilities.batch",
    "aws_lambda_powertools.utilities.idempotency",
    "aws_lambda_powertools.utilities.typing",
]


@functools.cache
def process_context() -> Any:
    """How function processes are started: forked from a server that has the shared
    libraries imported (``spawn`` where there is no fork server)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOADED_MODULES)
    _start_fork_server_deaf_to_sigterm()
    return context


def _start_fork_server_deaf_to_sigterm() -> None:
    """Start the fork server now, ignoring SIGTERM (which it keeps across its exec).

    A SIGTERM to the process group (``make run`` stopped, a supervisor's stop) would
    otherwise kill it first: each function process then reads as dead (its exit status
    comes through the server), is replaced while the parent is stopping, and the
    replacements fail with tracebacks. Ignoring it, the server outlives the stop and
    exits with its parent, as it does after Ctrl-C."""
    from multiprocessing import forkserver

    if threading.current_thread() is not threading.main_thread():
        return  # signal dispositions are the main thread's to change
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGTERM, previous)


class FunctionHost:
    """One deployed function: ``spec.concurrency`` execution environments (processes),
    each taking the next invocation when it is free. An environment whose process dies
    (killed, crashed) fails the invocation it was running, as Lambda reports a runtime
    exit, and is replaced by a fresh process: the next invocation runs."""

    def __init__(self, spec: FunctionSpec, lines: Any) -> None:
        self.spec = spec
        self._lines = lines
        self._context = process_context()
        self._waiting: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._environments = [_Environment(self, n) for n in range(max(1, spec.concurrency))]
        self._pending: dict[str, Future[Any]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.invocations = 0
        self.errors = 0
        self.replaced = 0  # processes started again after theirs died

    def start(self) -> None:
        for environment in self._environments:
            environment.start()

    def pids(self) -> list[int]:
        """The process ids of the execution environments, as they are now."""
        return [e.process.pid for e in self._environments if e.process.pid is not None]

    def invoke(self, event: Any, timeout: float | None = None) -> Any:
        """Invoke and wait: the handler's result, or FunctionError."""
        return self.invoke_async(event).result(timeout=timeout or self.spec.timeout_seconds + 5)

    def invoke_async(self, event: Any) -> Future[Any]:
        request_id = str(uuid.uuid4())
        future: Future[Any] = Future()
        with self._lock:
            self._pending[request_id] = future
            self.invocations += 1
        self._waiting.put((request_id, event))
        return future

    def _settle(self, request_id: str, ok: bool, payload: Any) -> None:
        with self._lock:
            future = self._pending.pop(request_id, None)
            if not ok:
                self.errors += 1
        if future is None:
            return
        if ok:
            future.set_result(payload)
        else:
            future.set_exception(FunctionError(payload))

    def request_stop(self) -> None:
        """Ask each process to exit once its invocation ends (stop() waits for that)."""
        self._stopping.set()
        for _ in self._environments:
            self._waiting.put(None)

    def stop(self, deadline: float | None = None) -> None:
        """Stop: each process may finish its invocation until ``deadline`` (monotonic;
        by default 3 s from now, asking it to stop first), then it is terminated, as
        Lambda ends an environment."""
        if deadline is None:
            self.request_stop()
            deadline = time.monotonic() + STOP_GRACE_SECONDS
        for environment in self._environments:
            environment.stop(deadline)
        with self._lock:
            pending, self._pending = self._pending, {}
        for future in pending.values():  # nobody waits out a timeout for a stopped function
            future.set_exception(FunctionError({"errorType": "Stopped", "errorMessage": "stopped"}))


class _Environment:
    """One execution environment: a process, its connection, and the thread that hands
    it invocations and replaces it when it dies."""

    def __init__(self, host: FunctionHost, number: int) -> None:
        self.host = host
        self.number = number
        self.process, self._connection = self._spawn()
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"env-{host.spec.logical_id}-{number}"
        )

    def _spawn(self) -> tuple[Any, Any]:
        ours, theirs = self.host._context.Pipe()
        process = self.host._context.Process(
            target=_serve,
            args=(self.host.spec, theirs, self.host._lines),
            daemon=True,
            name=f"{self.host.spec.logical_id}-{self.number}",
        )
        return process, ours

    def start(self) -> None:
        self.process.start()
        self._thread.start()

    def _replace(self) -> None:
        """A fresh process in place of a dead one (not while stopping)."""
        if self.host._stopping.is_set():
            return
        self._connection.close()
        self.process, self._connection = self._spawn()
        self.process.start()
        self.host.replaced += 1

    def _run(self) -> None:
        while True:
            try:
                request = self.host._waiting.get(timeout=0.5)
            except queue.Empty:
                if not self.process.is_alive():
                    self._replace()  # died idle: ready again before the next invocation
                continue
            if request is None:
                with contextlib.suppress(OSError):
                    self._connection.send(None)
                return
            self._invoke(request)

    def _invoke(self, request: tuple[str, Any]) -> None:
        """Hand one invocation to the process. One that died before taking it (killed
        while idle, not yet noticed) is replaced and the invocation handed to the new
        one; one that died running it fails it, as Lambda reports a runtime exit."""
        request_id = request[0]
        for _ in range(3):
            if not self.process.is_alive():
                self._replace()
            taken = answer = None
            with contextlib.suppress(EOFError, OSError):  # the process died on the way
                self._connection.send(request)
                taken = self._receive()
                answer = self._receive() if taken is not None else None
            if answer is not None:
                self.host._settle(request_id, bool(answer[1]), answer[2])
                return
            code = self.process.exitcode
            self._replace()
            if taken is not None:
                break
        self.host._settle(
            request_id,
            False,
            {
                "errorType": "Runtime.ExitError",
                "errorMessage": f"the function's process exited (code {code})",
            },
        )

    def _receive(self) -> tuple[str, bool | None, Any] | None:
        """The process's next message, or None when it died first."""
        while not self._connection.poll(0.5):
            if not self.process.is_alive():
                return None
        message: tuple[str, bool | None, Any] = self._connection.recv()
        return message

    def stop(self, deadline: float) -> None:
        if self.process.pid is None:  # its start failed (the fork server was gone)
            return
        self.process.join(timeout=max(0.0, deadline - time.monotonic()))
        if self.process.is_alive():
            self.process.kill()  # it ignores SIGTERM (see _serve)


# --- event sources -------------------------------------------------------------------------


def sqs_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": m.get("MessageAttributes", {}),
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": queue_arn.split(":")[3],
            }
            for m in messages
        ]
    }


@dataclass
class MappingStats:
    batches: int = 0
    deleted: int = 0
    failed: int = 0
    in_flight: int = 0


# Lambda's limit on a synchronous invocation's payload, and SQS's largest message: a batch
# stops gathering once one more message might take it past the first.
PAYLOAD_LIMIT_BYTES = 6 * 1024 * 1024
LARGEST_MESSAGE_BYTES = 256 * 1024
# How often a mapping gathering a batch asks the queue again while its window is open.
GATHER_POLL_SECONDS = 0.05


class SqsMapping:
    """An SQS event source mapping, played: poll, gather a batch, invoke, delete what
    succeeded."""

    def __init__(
        self,
        sqs: Any,
        host: FunctionHost,
        *,
        queue_url: str,
        queue_arn: str,
        batch_size: int,
        max_concurrency: int,
        partial_failures: bool,
        batching_window: float = 0.0,
    ) -> None:
        self.sqs = sqs
        self.host = host
        self.queue_url = queue_url
        self.queue_arn = queue_arn
        self.batch_size = batch_size
        self.batching_window = batching_window
        self.max_concurrency = max_concurrency
        self.partial_failures = partial_failures
        self.stats = MappingStats()
        self._slots = threading.Semaphore(max_concurrency)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._poll, daemon=True, name=f"esm-{host.spec.logical_id}"
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _poll(self) -> None:
        while not self._stop.is_set():
            if not self._slots.acquire(timeout=0.5):
                continue
            try:
                messages = self._gather()
            except Exception:  # the emulator is stopping, or briefly busy
                self._slots.release()
                time.sleep(0.5)
                continue
            if not messages:
                self._slots.release()
                continue
            self.stats.batches += 1
            self.stats.in_flight += 1
            future = self.host.invoke_async(sqs_event(messages, self.queue_arn))

            def finish(done: Future[Any], batch: list[dict[str, Any]] = messages) -> None:
                self._finish(done, batch)

            future.add_done_callback(finish)

    def _gather(self) -> list[dict[str, Any]]:
        """One batch: a long poll for the first messages, then (with a batching window)
        more until the batch is full, the window has passed since the first arrived, or
        the payload is as large as one more message could safely make it. SQS returns at
        most ten a receive, so a larger batch takes several."""
        messages = self._receive(1, self.batch_size)
        if not messages or self.batching_window <= 0:
            return messages
        ends = time.monotonic() + self.batching_window
        size = sum(len(m["Body"]) for m in messages)
        while (
            len(messages) < self.batch_size
            and size + LARGEST_MESSAGE_BYTES <= PAYLOAD_LIMIT_BYTES
            and time.monotonic() < ends
            and not self._stop.is_set()
        ):
            more = self._receive(0, self.batch_size - len(messages))
            if not more:
                time.sleep(min(GATHER_POLL_SECONDS, max(0.0, ends - time.monotonic())))
                continue
            messages += more
            size += sum(len(m["Body"]) for m in more)
        return messages

    def _receive(self, wait_seconds: int, most: int) -> list[dict[str, Any]]:
        answer = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=max(1, min(10, most)),
            WaitTimeSeconds=wait_seconds,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return list(answer.get("Messages", []))

    def _finish(self, done: Future[Any], messages: list[dict[str, Any]]) -> None:
        try:
            failed: set[str] = set()
            try:
                result = done.result()
                if self.partial_failures and isinstance(result, dict):
                    failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
            except FunctionError:
                failed = {m["MessageId"] for m in messages}  # the whole batch comes back
            succeeded = [m for m in messages if m["MessageId"] not in failed]
            self.stats.failed += len(failed)
            for start in range(0, len(succeeded), 10):
                chunk = succeeded[start : start + 10]
                self.sqs.delete_message_batch(
                    QueueUrl=self.queue_url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(chunk)
                    ],
                )
                self.stats.deleted += len(chunk)
        except Exception:
            traceback.print_exc()
        finally:
            self.stats.in_flight -= 1
            self._slots.release()


RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days|second|seconds)\)$")
UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def rate_seconds(expression: str) -> float:
    m = RATE.match(expression)
    if m is None:
        raise ValueError(f"unsupported schedule expression {expression!r}")
    return int(m[1]) * UNIT_SECONDS[m[2].rstrip("s")]


class ScheduleRule:
    """An EventBridge schedule rule, played: invoke the target every period."""

    def __init__(
        self,
        host: FunctionHost,
        *,
        name: str,
        period: float,
        constant_input: dict[str, Any] | None = None,
    ) -> None:
        self.host = host
        self.name = name
        self.period = period
        # A target's Input replaces the scheduled event, as EventBridge does.
        self.constant_input = constant_input
        self.invocations = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"rule-{name}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.invocations += 1
            if self.constant_input is not None:
                self.host.invoke_async(dict(self.constant_input))
                self._stop.wait(self.period)
                continue
            self.host.invoke_async(
                {
                    "version": "0",
                    "id": str(uuid.uuid4()),
                    "detail-type": "Scheduled Event",
                    "source": "aws.events",
                    "account": "123456789012",
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "region": "us-east-1",
                    "resources": [f"arn:aws:events:us-east-1:123456789012:rule/{self.name}"],
                    "detail": {},
                }
            )
            self._stop.wait(self.period)


# --- API Gateway ---------------------------------------------------------------------------

# The bodies of the template's gateway responses THROTTLED and QUOTA_EXCEEDED (the API's
# error shape), answered here the same way.
THROTTLED_BODY = (
    '{"error":{"type":"rate_limited","message":"over the request rate limit: '
    "UsagePlanRateLimit per second with UsagePlanBurstLimit of burst per tenant, or the "
    'stage\'s ApiThrottlingRateLimit","field":null}}'
)
QUOTA_EXCEEDED_BODY = (
    '{"error":{"type":"quota_exceeded","message":"over the daily request quota: '
    'UsagePlanDailyQuota per tenant per UTC day","field":null}}'
)
# And of UNAUTHORIZED (no key, or one the authorizer refuses) and INVALID_API_KEY (no usage
# identifier the usage plan knows): the error shape the API's document gives every error.
UNAUTHORIZED_BODY = (
    '{"error":{"type":"unauthorized","message":"no x-api-key header, or a key that is '
    'unknown or revoked","field":"x-api-key"}}'
)
FORBIDDEN_BODY = (
    '{"error":{"type":"forbidden","message":"this key may not make this call","field":"x-api-key"}}'
)


@dataclass(frozen=True)
class UsagePlan:
    """A usage plan's limits, per usage identifier (API Gateway's semantics)."""

    rate: float  # requests per second, steady state
    burst: int  # requests at once above it (the bucket's size)
    daily_quota: int | None = None  # requests per UTC day; None: no quota


class TokenBucket:
    """``burst`` tokens, refilled at ``rate`` per second; a request takes one."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.updated = now

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


@dataclass
class ApiGateway:
    """A REST API stage: authorizer on x-api-key, usage plan, then the proxy integration."""

    api: FunctionHost
    authorizer: FunctionHost | None
    # The template's routes without the authorizer ({name}: one path segment), each
    # "METHOD /path" (that method only, as API Gateway's method on the resource) or
    # "/path" (any method).
    public_paths: tuple[str, ...] = (
        "GET /",
        "GET /openapi.json",
        "GET /docs",
        "GET /console",
        "GET /console/{asset}",
        "GET /favicon.ico",
    )
    stage: str = "prod"
    cache_seconds: float = 300
    # None: methods need no usage identifier (a stack without a usage plan).
    usage_plan: UsagePlan | None = None
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    _cache: dict[str, tuple[float, dict[str, Any]]] = field(default_factory=dict)
    _buckets: dict[str, TokenBucket] = field(default_factory=dict)
    _days: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (day, count)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    requests: int = 0
    throttled: int = 0

    def admit(self, usage_key: str | None) -> tuple[int, bytes] | None:
        """None if the usage plan admits one more request of ``usage_key``, else the
        answer: 403 without a usage identifier (as API Gateway answers a method that
        requires a key), 429 over the throttle or the day's quota."""
        plan = self.usage_plan
        if plan is None:
            return None
        if not usage_key:
            return 403, FORBIDDEN_BODY.encode()
        with self._lock:
            now = self.monotonic()
            bucket = self._buckets.setdefault(usage_key, TokenBucket(plan.rate, plan.burst, now))
            if plan.daily_quota is not None:
                day = int(self.wall() // 86400)
                seen_day, count = self._days.get(usage_key, (day, 0))
                count = count if seen_day == day else 0
                if count >= plan.daily_quota:
                    self.throttled += 1
                    return 429, QUOTA_EXCEEDED_BODY.encode()
            if not bucket.take(now):
                self.throttled += 1
                return 429, THROTTLED_BODY.encode()
            if plan.daily_quota is not None:
                self._days[usage_key] = (day, count + 1)
        return None

    def authorize(self, headers: dict[str, str], method: str, path: str) -> dict[str, Any] | None:
        key = next((v for k, v in headers.items() if k.lower() == "x-api-key"), "")
        if not key or self.authorizer is None:
            return None
        cached = self._cache.get(key)
        if cached and self.monotonic() - cached[0] < self.cache_seconds:
            return dict(cached[1])
        event = {
            "type": "REQUEST",
            "methodArn": (
                f"arn:aws:execute-api:us-east-1:123456789012:local/{self.stage}/{method}{path}"
            ),
            "resource": "/{proxy+}",
            "path": path,
            "httpMethod": method,
            "headers": headers,
            "requestContext": {"stage": self.stage, "httpMethod": method},
        }
        try:
            # API Gateway waits up to its integration limit, a cold start included; a key
            # the authorizer refuses raises "Unauthorized". No answer in time is the
            # gateway's failure (500), not the key's: a cold authorizer on a busy machine
            # must not turn a good key away.
            decision = self.authorizer.invoke(event, timeout=INTEGRATION_TIMEOUT_SECONDS)
        except FunctionError:
            return None
        statement = decision.get("policyDocument", {}).get("Statement", [{}])[0]
        if statement.get("Effect") != "Allow":
            return None
        context = dict(decision.get("context", {}))
        context["principalId"] = decision.get("principalId")
        if decision.get("usageIdentifierKey"):
            context["usageIdentifierKey"] = decision["usageIdentifierKey"]
        self._cache[key] = (self.monotonic(), context)
        return dict(context)

    def handle(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        self.requests += 1
        if method not in METHODS:
            return api_error(
                405, "method_not_allowed", f"{method} is not a method of this API", "method"
            )
        try:
            text = body.decode() if body else None
        except UnicodeDecodeError:
            # A proxy integration passes text bodies as text: bytes that are not UTF-8
            # cannot reach the API, so the answer is the API's own refusal of a body.
            return api_error(400, "validation", "the body is not UTF-8 text", "body")
        parts = urlsplit(target)
        path = parts.path or "/"
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        context: dict[str, Any] | None = None
        if not any(_public(route, method, path) for route in self.public_paths):
            try:
                context = self.authorize(headers, method, path)
            except TimeoutError:
                return 500, {"Content-Type": "application/json"}, b'{"message":null}'
            if context is None:
                return 401, {"Content-Type": "application/json"}, UNAUTHORIZED_BODY.encode()
            refused = self.admit(context.pop("usageIdentifierKey", None))
            if refused is not None:
                return refused[0], {"Content-Type": "application/json"}, refused[1]
        event = {
            "resource": "/{proxy+}",
            "path": path,
            "httpMethod": method,
            "headers": headers,
            "multiValueHeaders": {k: [v] for k, v in headers.items()},
            "queryStringParameters": query or None,
            "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} or None,
            "pathParameters": {"proxy": path.lstrip("/")},
            "stageVariables": None,
            "body": text,
            "isBase64Encoded": False,
            "requestContext": {
                "resourcePath": "/{proxy+}",
                "httpMethod": method,
                "path": f"/{self.stage}{path}",
                "stage": self.stage,
                "requestId": str(uuid.uuid4()),
                "identity": {"sourceIp": "127.0.0.1"},
                "authorizer": context,
            },
        }
        try:
            response = self.api.invoke(event, timeout=INTEGRATION_TIMEOUT_SECONDS)
        except (FunctionError, TimeoutError):
            return 502, {"Content-Type": "application/json"}, b'{"message":"Internal server error"}'
        out_headers = {str(k): str(v) for k, v in (response.get("headers") or {}).items()}
        for k, values in (response.get("multiValueHeaders") or {}).items():
            out_headers[str(k)] = ",".join(str(v) for v in values)
        return (
            int(response.get("statusCode", 502)),
            out_headers,
            (response.get("body") or "").encode(),
        )

    def serve(self, host: str, port: int) -> http.server.ThreadingHTTPServer:
        """Listen on ``host:port`` (0: any free port) and answer there."""
        return self.serve_on(listen(host, port))

    def serve_on(self, server: _GatewayServer) -> _GatewayServer:
        """Answer on a server :func:`listen` bound."""
        server.gateway = self
        threading.Thread(target=server.serve_forever, daemon=True, name="api-gateway").start()
        return server


def _public(route: str, method: str, path: str) -> bool:
    """Does the public route ("METHOD /path" or "/path") take this request?"""
    wanted, _, pattern = route.rpartition(" ")
    return (not wanted or wanted == method) and _route_matches(pattern, path)


def _route_matches(route: str, path: str) -> bool:
    """Does API Gateway's resource ``route`` (``{name}`` one segment) take ``path``?"""
    want, have = route.strip("/").split("/"), path.strip("/").split("/")
    return len(want) == len(have) and all(
        w == h or (w.startswith("{") and w.endswith("}") and h != "")
        for w, h in zip(want, have, strict=True)
    )


# What API Gateway proxies to the API; any other method is refused before it.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def api_error(
    status: int, kind: str, message: str, field: str | None
) -> tuple[int, dict[str, str], bytes]:
    """An answer in the API's error shape, for what the gateway refuses itself."""
    body = {"error": {"type": kind, "message": message, "field": field}}
    headers = {"Content-Type": "application/json"}
    if status == 405:
        headers["Allow"] = ", ".join(sorted(METHODS))
    return status, headers, json.dumps(body).encode()


class ApiPortInUse(OSError):
    """The API's port is taken by another process (a local cloud already running)."""


def listen(host: str, port: int) -> _GatewayServer:
    """A server bound to ``host:port`` (0: any free port) that answers once a gateway
    serves on it. Bound before anything is deployed, so a taken port fails at once."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            server = cast(_GatewayServer, self.server)
            status, headers, payload = server.gateway.handle(
                self.command, self.path, dict(self.headers), body
            )
            self.send_response(status)
            for k, v in headers.items():
                if k.lower() not in ("content-length", "connection"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        def __getattr__(self, name: str) -> Any:
            # Every method reaches the gateway (which refuses those the API has not)
            # instead of the HTTP server's own 501 page in HTML.
            if name.startswith("do_"):
                return self._any
            raise AttributeError(name)

        def log_message(self, *args: Any) -> None:
            return None

    try:
        return _GatewayServer((host, port), Handler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ApiPortInUse(exc.errno, f"port {port} on {host} is in use") from exc
        raise


class _GatewayServer(http.server.ThreadingHTTPServer):
    """A client that hangs up before its answer is written is its own business: no
    traceback on the terminal for it."""

    daemon_threads = True
    gateway: ApiGateway
    # Clients may open many connections at once (a burst past a rate limit): the
    # default backlog of 5 would reset the rest before the gateway could answer them.
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


# --- logs and metrics --------------------------------------------------------------------


class Collector:
    """Reads every function's stdout: keeps EMF metrics for the status screen and writes
    the log file, one JSON object per line: a function's structured log line with its
    ``function`` added, any other output as ``{"function", "message"}``. Metric lines are
    not copied: every ``summary_seconds`` one ``metrics`` object sums up each metric of
    the period (count, sum, min, max)."""

    def __init__(
        self,
        log_path: str | None,
        on_metric: Callable[[str, float], None],
        summary_seconds: float = 60.0,
    ) -> None:
        self.lines: Any = process_context().Queue()
        self._log = open(log_path, "a", encoding="utf-8") if log_path else None  # noqa: SIM115
        self._on_metric = on_metric
        self._summary_seconds = summary_seconds
        self._period: dict[str, list[float]] = {}
        self._period_start = time.time()
        self._lock = threading.Lock()  # the period's values: the reader's, and close()'s
        self._thread = threading.Thread(target=self._run, daemon=True, name="collector")

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                source, line = self.lines.get(timeout=1.0)
            except queue.Empty:
                self._summarise()
                continue
            except (EOFError, OSError, ValueError):
                return
            record = _json_object(line)
            if record is not None and "_aws" in record:
                self._metrics(record)
            else:
                self._write({"function": source, **(record or {"message": line})})
            self._summarise()

    def _metrics(self, record: dict[str, Any]) -> None:
        for directive in record["_aws"].get("CloudWatchMetrics", []):
            for metric in directive.get("Metrics", []):
                value = record.get(metric["Name"])
                for v in value if isinstance(value, list) else [value]:
                    if isinstance(v, int | float):
                        self._on_metric(metric["Name"], float(v))
                        with self._lock:
                            self._period.setdefault(metric["Name"], []).append(float(v))

    def close(self) -> None:
        """Write the summary of the period so far (the local cloud is stopping)."""
        self._summarise(force=True)

    def _summarise(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self._period_start < self._summary_seconds:
            return
        with self._lock:
            period, self._period, start = self._period, {}, self._period_start
            self._period_start = now
        if period:
            self._write(
                {
                    "function": "local",
                    "message": "metrics",
                    "seconds": round(now - start, 1),
                    "metrics": {
                        name: {
                            "count": len(values),
                            "sum": round(sum(values), 3),
                            "min": min(values),
                            "max": max(values),
                        }
                        for name, values in sorted(period.items())
                    },
                }
            )

    def _write(self, record: dict[str, Any]) -> None:
        if self._log is not None:
            with self._lock:
                self._log.write(json.dumps(record, default=str) + "\n")
                self._log.flush()


def _json_object(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        found = json.loads(line)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None
