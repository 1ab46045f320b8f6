"""EventBridge rate(1 minute) -> the ticker, ticking every second for ~55 s under a lease."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from fireline import wiring

logger = wiring.logger()
metrics = wiring.metrics()


@metrics.log_metrics
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    ticker = wiring.ticker_for(owner=context.aws_request_id)
    ticker.after_tick = metrics.flush_metrics
    report = ticker.run(context.get_remaining_time_in_millis)
    totals = report.totals
    return {
        "acquired": report.acquired,
        "stopped": report.stopped,
        "ticks": report.ticks,
        "token": report.token,
        "sent": totals.dispatched.sent,
        "skipped": totals.dispatched.skipped,
        "duplicates": totals.dispatched.duplicates,
    }
