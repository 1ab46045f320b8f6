"""Recording a fire's trace: the sampling decision, and its segments to an emitter.

The API and the ticker record a fire's first segment (``fire``) as they send it; the
worker records one segment an attempt (``attempt-<n>``) with the target's call beneath
it (``target-<n>``), whose id the target receives as its ``traceparent`` parent. Without
an emitter (tests that do not ask for tracing) nothing is recorded and nothing costs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from fireline import ports
from fireline.domain import tracing


def fire_annotations(tenant_id: str, schedule_id: str, occurrence_key: str) -> dict[str, str]:
    """What every segment of a fire is annotated with (X-Ray filters by these)."""
    return {"tenant": tenant_id, "schedule": schedule_id, "occurrence_key": occurrence_key}


def attempt_span(attempt: int) -> str:
    return f"attempt-{attempt}"


def target_span(attempt: int) -> str:
    return f"target-{attempt}"


def of_message(body: Mapping[str, Any]) -> tracing.TraceContext | None:
    """The trace context a queue message carries; None where it has none."""
    return tracing.parse_header(body.get(tracing.MESSAGE_FIELD))


class Tracing:
    """Sampling at ``rate`` (every hop decides alike from the trace id), and segments of
    sampled fires to ``emitter`` under ``service`` (the function's name)."""

    def __init__(
        self,
        emitter: ports.SegmentEmitter | None = None,
        *,
        rate: float = tracing.DEFAULT_SAMPLE_RATE,
        service: str = "fireline",
    ) -> None:
        self.emitter = emitter
        self.rate = rate
        self.service = service

    def sampled(self, context: tracing.TraceContext) -> bool:
        return tracing.is_sampled(context.trace_id, self.rate)

    def traceparent(self, context: tracing.TraceContext) -> str:
        """The context as a target receives it: sampled or not, it is sent."""
        return tracing.traceparent(context, self.sampled(context))

    def record(self, context: tracing.TraceContext, span: tracing.Span) -> None:
        """Emit ``span`` below ``context``'s parent, if the fire is sampled."""
        if self.emitter is None or not self.sampled(context):
            return
        # A lost segment is a gap in a trace: it must never fail a job.
        with contextlib.suppress(Exception):
            self.emitter.emit(tracing.segment(context, span, self.service))

    def record_fire(self, body: Mapping[str, Any], *, at: float, name: str) -> None:
        """The first segment of a fire's trace, as its sender (``name``) sends its message
        ``body``. It has no parent: the message names it as the parent of what follows."""
        context = of_message(body)
        if self.emitter is None or context is None or not self.sampled(context):
            return
        span = tracing.Span(
            name=name,
            span=tracing.FIRE_SPAN,
            start=at,
            end=at,
            annotations=fire_annotations(
                str(body.get("tenant_id")),
                str(body.get("schedule_id")),
                str(body.get("occurrence_key")),
            ),
        )
        document = tracing.segment(context, span, self.service)
        del document["parent_id"]  # the root of the fire's trace
        with contextlib.suppress(Exception):  # nor a send
            self.emitter.emit(document)


class TracedQueue:
    """A work queue whose sends record each fire's first segment: the API's and the
    ticker's queue (the worker's re-sends of a fire already traced are not wrapped).
    Only a message that went out is recorded."""

    def __init__(
        self, inner: ports.WorkQueue, tracing: Tracing, clock: ports.Clock, *, name: str
    ) -> None:
        self.inner = inner
        self._tracing = tracing
        self._clock = clock
        self._name = name

    def send_batch(self, job_class: str, messages: Sequence[ports.OutboundMessage]) -> list[str]:
        failed = self.inner.send_batch(job_class, messages)
        if self._tracing.emitter is not None:
            at = self._clock.now().timestamp()
            refused = set(failed)
            for position, message in enumerate(messages):
                if (message.id or str(position)) not in refused:
                    self._tracing.record_fire(message.body, at=at, name=self._name)
        return failed

    def receive(
        self, job_class: str, *, max_messages: int = 10, visibility_timeout: int | None = None
    ) -> list[ports.ReceivedMessage]:
        return self.inner.receive(
            job_class, max_messages=max_messages, visibility_timeout=visibility_timeout
        )

    def delete(self, job_class: str, receipt: str) -> None:
        self.inner.delete(job_class, receipt)

    def change_visibility(self, job_class: str, receipt: str, seconds: int) -> None:
        self.inner.change_visibility(job_class, receipt, seconds)

    def dead_letters(
        self, job_class: str, *, max_messages: int = 10
    ) -> list[ports.ReceivedMessage]:
        return self.inner.dead_letters(job_class, max_messages=max_messages)

    def load(self, job_class: str) -> ports.QueueLoad:
        return self.inner.load(job_class)


#: Records nothing: the default wherever tracing is not wired.
OFF = Tracing(None)
