"""SQS (one queue per job class) -> the worker, with partial batch failures.

A record that fails (another delivery is running it, no occurrence key, a worker error)
is reported in batchItemFailures and comes back after its visibility timeout; the others
are deleted by the event source mapping and never re-run.
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

logger = wiring.logger()
metrics = wiring.metrics()
processor = BatchProcessor(event_type=EventType.SQS)


@metrics.log_metrics
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    worker = wiring.worker()

    def record_handler(record: SQSRecord) -> str:
        body = json.loads(record.body)
        return worker.handle(
            body, remaining_ms=context.get_remaining_time_in_millis, lambda_context=context
        ).value

    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    return dict(response)
