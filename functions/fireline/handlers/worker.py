"""SQS (one queue per job class) -> the worker, a large batch's records side by side
within the dispatcher's bounds (services.worker.dispatcher), with partial batch failures.

A record that fails (another delivery is running it, no occurrence key, a worker error)
is reported in batchItemFailures and comes back after its visibility timeout; the others
are deleted by the event source mapping and never re-run. A record left unstarted as the
invocation nears its end was sent again as a fresh message first, so it is deleted too
(one it could not send again is reported failed instead).
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from fireline import wiring
from fireline.adapters import threads
from fireline.handlers import traces
from fireline.services.worker import dispatcher as worker_dispatch

logger = wiring.logger()
metrics = wiring.metrics()
tracer = wiring.tracer()


@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    records = event.get("Records") or []
    bodies: list[dict[str, Any]] = []
    receive_counts: list[int] = []
    failures: list[dict[str, str]] = []
    for record in records:
        try:
            bodies.append(json.loads(record["body"]))
        except (KeyError, TypeError, ValueError):
            bodies.append({})  # refused below, like any message without a key
        receive_counts.append(_receive_count(record))
    dispatcher = worker_dispatch.Dispatcher(
        wiring.dispatch_limits(),
        context.get_remaining_time_in_millis,
        pools=wiring.dispatch_pools(),
    )
    # The batch's two reads (rows, schedules) side by side; the records run on the
    # dispatcher's own threads.
    with threads.ThreadPool(2, name="worker-read") as pool:
        outcomes = wiring.worker().handle_batch(
            bodies,
            remaining_ms=context.get_remaining_time_in_millis,
            parallel=pool,
            receive_counts=receive_counts,
            dispatcher=dispatcher,
        )
    traces.per_record(tracer, bodies)
    for record, outcome in zip(records, outcomes, strict=True):
        if isinstance(outcome, Exception):
            logger.warning(
                "record failed",
                extra={
                    "action": "worker.record_failed",
                    "message_id": record.get("messageId"),
                    "error": f"{type(outcome).__name__}: {outcome}",
                },
            )
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}


def _receive_count(record: dict[str, Any]) -> int:
    """SQS's ApproximateReceiveCount of the record; 0 where it is missing (unknown: the
    worker then reads as for a redelivery)."""
    attributes = record.get("attributes")
    count = attributes.get("ApproximateReceiveCount") if isinstance(attributes, dict) else None
    try:
        return int(count) if count is not None else 0
    except (TypeError, ValueError):
        return 0
