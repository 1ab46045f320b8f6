"""The workflow controller: SQS events (partial batch failures) and the periodic reconcile.

An SQS record is a controller event (start, node_done, cancel, reconcile); one that fails
comes back after its visibility timeout, and every event is safe to apply twice. The
scheduled event (rate(1 minute)) reconciles every running run, which repairs whatever a
lost event left behind, and makes a pass over every backfill in progress (its pacing
state is in the same table), which releases its next fires and finishes what a crash
interrupted.
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from fireline import wiring
from fireline.handlers import traces

logger = wiring.logger()
metrics = wiring.metrics()
tracer = wiring.tracer()
processor = BatchProcessor(event_type=EventType.SQS)


@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    controller = wiring.controller()
    if event.get("source") == "aws.events" or "Records" not in event:
        reconciled = controller.reconcile_active()
        metrics.add_metric("WorkflowRunsReconciled", "Count", reconciled)
        paced = wiring.backfill_service().pace_active()
        metrics.add_metric("BackfillPasses", "Count", paced)
        return {"reconciled": reconciled, "backfills_paced": paced}

    def record_handler(record: SQSRecord) -> None:
        body = json.loads(record.body)
        traces.per_record(tracer, [body])
        controller.handle(body)
        metrics.add_metric("WorkflowEvents", "Count", 1)

    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    return dict(response)
