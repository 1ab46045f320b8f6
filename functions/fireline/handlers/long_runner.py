"""The long job task queue -> one attempt of a long job, heartbeating its state machine.

Batch size 1: an attempt may take the whole invocation. A record that raises is reported
failed and redelivered; the state machine's heartbeat timeout covers a runner that died.
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
processor = BatchProcessor(event_type=EventType.SQS)


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    long_jobs = wiring.long_jobs()

    def record_handler(record: SQSRecord) -> bool:
        body = json.loads(record.body)
        return long_jobs.run_task(body, remaining_ms=context.get_remaining_time_in_millis)

    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    return dict(response)
