"""What becomes of a record: its Result, and the writes and sends each outcome takes.

A failed attempt is retried by sending the message again with the backoff as its delay
(a fresh message: SQS's receive count, which drives the dead-letter redrive, counts
deliveries that crashed, not attempts that failed); past the attempt cap it is dead.
Deferrals re-send and acknowledge the original in the same way."""

from __future__ import annotations

import enum
import math
from dataclasses import replace
from datetime import datetime
from typing import Any

from aws_lambda_powertools import Logger

from fireline import ports
from fireline.domain import errors, model, occurrence
from fireline.services import dispatch
from fireline.services.worker import state

logger = Logger(service="fireline", child=True)


class Result(enum.StrEnum):
    SUCCEEDED = "succeeded"
    RETRYING = "retrying"  # failed; a retry was sent with its backoff
    DEAD = "dead"  # failed for the last time
    SKIPPED = "skipped"  # not wanted any more (recorded on the row)
    SETTLED = "settled"  # already had its outcome: a duplicate delivery, nothing run
    DEFERRED = "deferred"  # tenant limit or overlap: sent again for later
    BUSY = "busy"  # another delivery is running it: leave the message to SQS
    STARTED = "started"  # a long job's supervising execution started
    RETURNED = "returned"  # not started (the invocation was ending): sent again, unrun


class Busy(Exception):
    """Another delivery holds the occurrence; SQS should redeliver this one later."""


PAST_CAP = "error: the last attempt ended without an outcome"


class Outcomes(state.WorkerState):
    """A record's outcome recorded (skipped, dead) or sent on (retry, deferral), as its
    Result."""

    def _skip(
        self, row: occurrence.Occurrence, why: str, now: datetime, *, stored: bool = True
    ) -> Result:
        skipped = row.moved(
            occurrence.State.SKIPPED, finished_at=now, exit_reason=f"skipped: {why}"
        )
        if stored:
            written = self.occurrences.transition(skipped, expected_state=row.state)
        else:
            written = self.occurrences.put_new(replace(skipped, created_at=now))
            if not written and self._settled_meanwhile(row.key):
                return Result.SETTLED
        if not written:
            raise Busy(f"{row.key} changed while being skipped")
        logger.info("skipped", extra={"action": "worker.skip", "key": row.key, "why": why})
        self.metrics.add_metric("Skipped", "Count", 1)
        return Result.SKIPPED

    def _settled_meanwhile(self, key: str) -> bool:
        """Did a row that came first, where this delivery found none, settle the fire?
        A cancel writes its job's row, cancelled, before it cancels the job's item, so a
        delivery that reads the item cancelled finds that row; a duplicate, then, as a
        refused claim would be, not a delivery to try again."""
        current = self.occurrences.get(key)
        if current is None or current.state not in occurrence.SETTLED:
            return False
        self.metrics.add_metric("DuplicateDeliveries", "Count", 1)
        return True

    def _exhausted(self, row: occurrence.Occurrence, now: datetime) -> Result:
        dead = row.moved(
            occurrence.State.DEAD,
            finished_at=now,
            exit_reason=PAST_CAP,
            in_progress_until=None,
        )
        if not self.occurrences.transition(dead, expected_state=row.state):
            raise Busy(f"{row.key} changed while being recorded dead")
        logger.error("dead", extra={"action": "worker.exhausted", "key": row.key})
        self.metrics.add_metric("Failed", "Count", 1)
        self.metrics.add_metric("DeadLettered", "Count", 1)
        return Result.DEAD

    def _defer(
        self, body: dict[str, Any], row: occurrence.Occurrence, why: str, *, stored: bool = True
    ) -> Result:
        if not stored:
            # A deferred fire gets its queued row now: the history shows it waiting, and
            # buffer_one sees it holding the buffer. (If a racing delivery wrote it first,
            # that row stands.)
            self.occurrences.put_new(replace(row, created_at=self.clock.now()))
        delay = self.config.defer_seconds + self.rng.randint(0, self.config.defer_seconds)
        self._send_again(body, row.job_class, delay)
        logger.info("deferred", extra={"action": "worker.defer", "key": row.key, "why": why})
        self.metrics.add_metric("Deferred", "Count", 1)
        return Result.DEFERRED

    def _requeue(self, body: dict[str, Any], row: occurrence.Occurrence, delay: int) -> Result:
        """Send the message again to arrive at its fire time (nothing else is decided)."""
        self._send_again(body, row.job_class, delay)
        self.metrics.add_metric("Requeued", "Count", 1)
        return Result.DEFERRED

    def _failed(
        self,
        item: model.Schedule,
        claimed: occurrence.Occurrence,
        reason: str,
        detail: str,
        *,
        final: bool = False,
    ) -> dict[str, Any]:
        retry = not final and item.retry.should_retry(claimed.attempts)
        outcome: dict[str, Any] = {
            "state": (occurrence.State.FAILED if retry else occurrence.State.DEAD).value,
            "exit_reason": reason[:500],
            "attempt": claimed.attempts,
            "error": detail[:1000],
        }
        if retry:
            outcome["retry_in"] = round(item.retry.delay(claimed.attempts, self.rng), 3)
        return outcome

    def _after(
        self, body: dict[str, Any], row: occurrence.Occurrence, outcome: dict[str, Any]
    ) -> Result:
        result = self._recorded(body, row, outcome)
        if result is not Result.RETRYING:
            self._nudge_backfill(body)
        return result

    def _nudge_backfill(self, body: dict[str, Any]) -> None:
        """A backfill's fire settled: a pass over its backfill releases the next at once.
        Best effort: the periodic pass releases it within a minute otherwise."""
        backfill_id = body.get("backfill_id")
        if self.backfills is None or not isinstance(backfill_id, str):
            return
        try:
            self.backfills.pace(
                body["tenant_id"],
                body["schedule_id"],
                backfill_id,
                settled=body["occurrence_key"],
            )
        except errors.FirelineError as exc:
            logger.warning(
                "backfill pass deferred",
                extra={"action": "worker.backfill_deferred", "error": str(exc)},
            )

    def _recorded(
        self, body: dict[str, Any], row: occurrence.Occurrence, outcome: dict[str, Any]
    ) -> Result:
        state = occurrence.State(outcome["state"])
        extra = {"action": "worker.outcome", "key": row.key, "state": state.value}
        if state is occurrence.State.SUCCEEDED:
            # Not an INFO line per fire (about 500 bytes with the Lambda context: most of a
            # fire's log bill): the row is the history and the Succeeded metric the count.
            # Failures, retries, dead letters and skips stay logged in full.
            logger.debug("succeeded", extra=extra)
            self.metrics.add_metric("Succeeded", "Count", 1)
            return Result.SUCCEEDED
        if state is occurrence.State.FAILED:
            self._send_again(body, row.job_class, math.ceil(outcome["retry_in"]))
            logger.warning("failed, retrying", extra={**extra, "reason": outcome["exit_reason"]})
            self.metrics.add_metric("Failed", "Count", 1)
            return Result.RETRYING
        if state is occurrence.State.SKIPPED:
            logger.info("skipped", extra={**extra, "reason": outcome["exit_reason"]})
            self.metrics.add_metric("Skipped", "Count", 1)
            return Result.SKIPPED
        if state is occurrence.State.DEAD:
            logger.error("dead", extra={**extra, "reason": outcome["exit_reason"]})
            self.metrics.add_metric("Failed", "Count", 1)
            self.metrics.add_metric("DeadLettered", "Count", 1)
            return Result.DEAD
        return Result.SETTLED

    def _send_again(self, body: dict[str, Any], job_class: str, delay: int) -> None:
        message = ports.OutboundMessage(body=body, delay_seconds=max(0, min(900, delay)))
        out = dispatch.Outbound(job_class, body["occurrence_key"], message)
        dispatch.send(self.queue, [out], dispatch.DispatchReport())
