"""EventBridge rate(1 minute), one rule per ticker group -> the ticker, ticking every
second for ~55 s under its group's lease."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from fireline import wiring
from fireline.adapters import threads
from fireline.domain import errors

logger = wiring.logger()
metrics = wiring.metrics()
tracer = wiring.tracer()


@tracer.capture_lambda_handler
@metrics.log_metrics
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    with threads.ThreadPool(wiring.TICKER_POOL_SIZE, name="ticker-io") as pool:
        ticker = wiring.ticker_for(
            owner=context.aws_request_id, group=group_of(event), parallel=pool
        )
        ticker.after_tick = metrics.flush_metrics
        report = ticker.run(context.get_remaining_time_in_millis)
    totals = report.totals
    # Each fire's tenant, schedule and key are on its own trace's first segment (a
    # minute's invocation sends thousands): here, the group and what it sent.
    tracer.put_annotation("group", str(group_of(event)))
    tracer.put_annotation("sent", str(totals.dispatched.sent))
    return {
        "acquired": report.acquired,
        "stopped": report.stopped,
        "ticks": report.ticks,
        "token": report.token,
        "sent": totals.dispatched.sent,
        "skipped": totals.dispatched.skipped,
        "duplicates": totals.dispatched.duplicates,
    }


def group_of(event: dict[str, Any]) -> int:
    """The group a rule's constant Input names; a bare scheduled event is group 0."""
    group = event.get("group", 0) if isinstance(event, dict) else 0
    if not isinstance(group, int) or isinstance(group, bool) or group < 0:
        raise errors.ValidationError(f"{group!r} is not a ticker group", field="group")
    return group
