"""Faults on the injected boto3 clients, through botocore's own events.

A :class:`FaultPlan` attaches to any number of clients and decides, call by call, in the
order the calls are made (one count across every client it is attached to):

- ``before``: the call fails before anything is sent (a connection error): nothing
  happened, and the caller is told so;
- ``after``: the call goes through and takes effect, then the caller gets a read timeout:
  it cannot know the write landed (the case conditional writes must converge on);
- ``throttle``: the service refuses the call (a throttling error answer): nothing
  happened.

Faults are chosen at call indexes (``at={12: "after"}``), or drawn at rates: each call's
draw comes from the seed, the request (operation and body) and how many times that same
request was made before, not from the order of calls, so a run whose calls interleave
across threads (the ticker's parallel I/O) draws the same faults every time, given the
same ids. ``only`` narrows what is counted and faulted to some operations
(``only={"UpdateItem"}``: index 1 is the second UpdateItem), and ``enabled`` turns the
plan off and on. They act on ``before-call`` and ``after-call``,
outside botocore's retry loop: a fault stands for a call that failed after whatever
retries the client's configuration allows, which is what our code has to handle.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

KINDS = ("before", "after", "throttle")
# What each service answers when it throttles (our adapters know every one of these).
THROTTLE_CODES = {
    "dynamodb": ("ThrottlingException", "ProvisionedThroughputExceededException"),
    "sqs": ("ThrottlingException", "RequestThrottled"),
}
# The event source mapping's calls (Lambda's side, not ours): a test that plays the
# platform with the same client leaves them alone.
PLATFORM_CALLS = frozenset({"ReceiveMessage", "DeleteMessage", "DeleteMessageBatch"})


class FaultPlan:
    def __init__(
        self,
        *,
        seed: int = 0,
        at: Mapping[int, str] | None = None,
        rates: Mapping[str, float] | None = None,
        spare: Collection[str] = PLATFORM_CALLS,
        only: Collection[str] | None = None,
    ) -> None:
        for kind in [*(at or {}).values(), *(rates or {})]:
            if kind not in KINDS:
                raise ValueError(f"unknown fault {kind!r}: one of {KINDS}")
        self.at = dict(at or {})
        self.rates = dict(rates or {})
        self.spare = frozenset(spare)
        self.only = None if only is None else frozenset(only)
        self.enabled = True
        self._seed = seed
        self._lock = threading.Lock()
        self._seen: Counter[str] = Counter()
        #: Calls seen (the index the next one gets), faults fired by kind and by operation.
        self.calls = 0
        self.fired: Counter[str] = Counter()
        self.by_operation: Counter[str] = Counter()

    def attach(self, client: Any) -> Any:
        """Hook ``client`` (returned, for chaining)."""
        service = client.meta.service_model.service_name
        client.meta.events.register(f"before-call.{service}", self._before_call)
        client.meta.events.register(f"after-call.{service}", self._after_call)
        return client

    def decide(self, operation: str, request: bytes = b"") -> str | None:
        with self._lock:
            if not self.enabled or operation in self.spare:
                return None
            if self.only is not None and operation not in self.only:
                return None
            index = self.calls
            self.calls += 1
            kind = self.at.get(index)
            if kind is None and self.rates:
                draw = self._draw(operation, request)
                for name in KINDS:
                    rate = self.rates.get(name, 0.0)
                    if draw < rate:
                        kind = name
                        break
                    draw -= rate
            if kind is not None:
                self.fired[kind] += 1
                self.by_operation[f"{operation}:{kind}"] += 1
            return kind

    def _draw(self, operation: str, request: bytes) -> float:
        """A number in [0, 1) for this request's nth occurrence (called under the lock)."""
        name = hashlib.sha256(operation.encode() + b"|" + request).hexdigest()
        self._seen[name] += 1
        digest = hashlib.sha256(f"{self._seed}|{name}|{self._seen[name]}".encode()).digest()
        return int.from_bytes(digest[:7]) / 2**56

    def _before_call(
        self, model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> tuple[AWSResponse, dict[str, Any]] | None:
        body = params.get("body") or b""
        request = body if isinstance(body, bytes) else str(body).encode()
        kind = self.decide(model.name, str(params.get("url_path", "")).encode() + request)
        url = str(params.get("url", ""))
        if kind == "before":
            raise EndpointConnectionError(endpoint_url=url)
        if kind == "throttle":
            service = model.service_model.service_name
            codes = THROTTLE_CODES.get(service, ("ThrottlingException",))
            code = codes[len(request) % len(codes)]
            # An answer in place of the call (botocore sends nothing): a 400 the client
            # raises as the service's own ClientError.
            http = AWSResponse(url, 400, {}, None)
            return http, {
                "Error": {"Code": code, "Message": "Rate exceeded (injected)"},
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
        if kind == "after":
            context["fault_after"] = url
        return None

    def _after_call(self, context: dict[str, Any], **_: Any) -> None:
        url = context.pop("fault_after", None)
        if url is not None:
            # The call was applied; its answer never arrives.
            raise ReadTimeoutError(endpoint_url=url)


class ThenAfterSend:
    """A work queue whose first send runs ``then`` right after it (once): a change that
    lands after the ticker sent a fire (without its row) and before its advance."""

    def __init__(self, queue: Any, then: Callable[[], None]) -> None:
        self._queue = queue
        self._then: Callable[[], None] | None = then

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)

    def send_batch(self, job_class: str, messages: Any) -> list[str]:
        failed = self._queue.send_batch(job_class, messages)
        then, self._then = self._then, None
        if then is not None:
            then()
        return list(failed)
