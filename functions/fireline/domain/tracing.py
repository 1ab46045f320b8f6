"""One fire, one trace: its trace context, its sampling decision and its segments.

A fire's trace id is derived from the fire itself (its tenant, occurrence key and fire
time), as its occurrence key is: the API that sends a job, the ticker that fires a
schedule, a retry, a redrive and a second ticker racing the first all name the same
trace, with no id to store or hand over. The context travels on the queue message
(``trace``, in X-Ray's header form) and reaches the target as W3C ``traceparent``.

Segment ids are derived too (:func:`span_id`, from the trace id and what the segment is),
so a repeated delivery writes the same segment again rather than a second one.

Sampling is a function of the trace id and the deployment's rate (:func:`is_sampled`):
every hop makes the same decision with nothing carried but the id. An unsampled fire
records no segment, and its context is still sent to the target (flag ``00``), so a
tenant's own tracing can join it.

Pure: times come in as arguments.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

#: The queue message's field that carries a fire's trace context (X-Ray header form).
MESSAGE_FIELD = "trace"
#: The W3C Trace Context header (and a target's payload field) with the same context.
TRACEPARENT = "traceparent"
#: The default share of fires recorded: 1 in 1,000 (the template's TraceSampleRate; see
#: docs/tracing.md for its cost).
DEFAULT_SAMPLE_RATE = 0.001
#: The segment that starts a fire's trace: the API's send of a job, the ticker's fire.
FIRE_SPAN = "fire"

_TRACE_ID = re.compile(r"^1-[0-9a-f]{8}-[0-9a-f]{24}$")
_SPAN_ID = re.compile(r"^[0-9a-f]{16}$")
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
# X-Ray annotation keys: letters, digits and underscores.
_ANNOTATION_KEY = re.compile(r"^[A-Za-z0-9_]{1,500}$")


@dataclass(frozen=True)
class TraceContext:
    """Where a fire's trace stands: its id (X-Ray's ``1-<time>-<random>`` form) and the
    segment the next one hangs from."""

    trace_id: str
    parent_id: str

    def __post_init__(self) -> None:
        if not _TRACE_ID.match(self.trace_id) or not _SPAN_ID.match(self.parent_id):
            raise ValueError(f"not a trace context: {self.trace_id!r}, {self.parent_id!r}")

    def child(self, name: str) -> TraceContext:
        """The context below this trace's segment ``name``."""
        return TraceContext(self.trace_id, span_id(self.trace_id, name))


def for_fire(tenant_id: str, occurrence_key: str, fire_time: datetime) -> TraceContext:
    """The trace of one fire, below its fire segment. The time part is the fire time's
    second (X-Ray reads a trace's start from it); the rest is a digest of the tenant and
    the occurrence key, as two tenants' keys may be equal."""
    digest = hashlib.sha256(f"{tenant_id}\n{occurrence_key}".encode()).hexdigest()
    trace_id = f"1-{int(fire_time.timestamp()) & 0xFFFFFFFF:08x}-{digest[:24]}"
    return TraceContext(trace_id, span_id(trace_id, FIRE_SPAN))


def span_id(trace_id: str, name: str) -> str:
    """The id of the segment ``name`` (``fire``, ``attempt-2``, ...) of a trace."""
    return hashlib.sha256(f"{trace_id}\n{name}".encode()).hexdigest()[:16]


def is_sampled(trace_id: str, rate: float) -> bool:
    """Whether a trace is recorded at ``rate`` (0 to 1): its id's last 32 bits, a digest's,
    read as a fraction. The same answer at every hop and every attempt."""
    return int(trace_id[-8:], 16) < rate * 2**32


def header(context: TraceContext, sampled: bool | None = None) -> str:
    """X-Ray's trace header (the SQS AWSTraceHeader form); without ``sampled`` the
    decision is left to the receiver (:func:`is_sampled` of the id)."""
    text = f"Root={context.trace_id};Parent={context.parent_id}"
    return text if sampled is None else f"{text};Sampled={int(sampled)}"


def parse_header(text: object) -> TraceContext | None:
    """The context of an X-Ray trace header; None for anything else (a message from an
    older sender, or a field not written by Fireline)."""
    if not isinstance(text, str):
        return None
    parts = dict(p.split("=", 1) for p in text.split(";") if "=" in p)
    try:
        return TraceContext(parts.get("Root", ""), parts.get("Parent", ""))
    except ValueError:
        return None


def traceparent(context: TraceContext, sampled: bool) -> str:
    """The W3C ``traceparent`` of a context: the same 128-bit id, X-Ray's dashes removed."""
    flat = context.trace_id[2:10] + context.trace_id[11:]
    return f"00-{flat}-{context.parent_id}-{'01' if sampled else '00'}"


def parse_traceparent(text: str) -> tuple[TraceContext, bool] | None:
    """A W3C ``traceparent`` as a context and its sampled flag; None if it is not one."""
    found = _TRACEPARENT.match(text)
    if found is None:
        return None
    flat, parent, flags = found.groups()
    context = TraceContext(f"1-{flat[:8]}-{flat[8:]}", parent)
    return context, bool(int(flags, 16) & 1)


@dataclass(frozen=True)
class Span:
    """A segment (or subsegment) to record: what ran, when, and what it is about."""

    name: str
    span: str  # its name within the trace: its id is span_id(trace, span)
    start: float  # epoch seconds
    end: float
    annotations: Mapping[str, str | int | bool] = field(default_factory=dict)
    error: bool = False
    children: Sequence[Span] = ()


def segment(context: TraceContext, span: Span, service: str) -> dict[str, Any]:
    """The X-Ray segment document of ``span``, below ``context``'s parent segment."""
    document = _document(context.trace_id, span)
    document.update(
        trace_id=context.trace_id,
        parent_id=context.parent_id,
        origin="AWS::Lambda::Function",
        service={"name": service},
    )
    return document


def _document(trace_id: str, span: Span) -> dict[str, Any]:
    document: dict[str, Any] = {
        "name": span.name,
        "id": span_id(trace_id, span.span),
        "start_time": span.start,
        "end_time": span.end,
    }
    annotations = {k: v for k, v in span.annotations.items() if _ANNOTATION_KEY.match(k)}
    if annotations:
        document["annotations"] = annotations
    if span.error:
        document["error"] = True
    if span.children:
        document["subsegments"] = [_document(trace_id, child) for child in span.children]
    return document
