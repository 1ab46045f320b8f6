"""The handlers' X-Ray annotations: what an operator filters a Lambda's traces by.

Powertools' Tracer records each invocation (Tracing: Active); these put the tenant, the
schedule and the occurrence key on it, so ``annotation.occurrence_key = "..."`` finds the
invocations that handled a fire, next to the fire's own trace (fireline.domain.tracing),
whose id is the ``fire_trace`` annotation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aws_lambda_powertools import Tracer

from fireline.services import tracing as tracing_service

# X-Ray annotation -> the message field it is read from.
_FIELDS = (
    ("tenant", "tenant_id"),
    ("schedule", "schedule_id"),
    ("occurrence_key", "occurrence_key"),
)


def annotate(tracer: Tracer, fields: Mapping[str, Any]) -> None:
    """Annotate the current subsegment with what ``fields`` (a message, a request's
    answer) names of a fire."""
    for annotation, name in _FIELDS:
        value = fields.get(name)
        if isinstance(value, str) and value:
            tracer.put_annotation(annotation, value)
    context = tracing_service.of_message(fields)
    if context is not None:
        tracer.put_annotation("fire_trace", context.trace_id)


def per_record(tracer: Tracer, bodies: Sequence[Mapping[str, Any]]) -> None:
    """One subsegment a record of a batch, annotated with its fire (annotations are one
    value a key per subsegment, and a batch holds many fires). Nothing when the tracer is
    off (outside Lambda, in tests)."""
    if tracer.disabled:
        return
    for body in bodies:
        with tracer.provider.in_subsegment("## record"):
            annotate(tracer, body)
