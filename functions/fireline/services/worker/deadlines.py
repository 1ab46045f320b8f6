"""Does the job's deadline fit this invocation? An invocation that cannot give the job
its deadline, where a fresh one would, sends the fire back to the queue (no attempt
spent); a deadline no invocation of this worker gives is refused after the claim."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger

from fireline.domain import model, occurrence
from fireline.services.worker import outcomes
from fireline.services.worker.config import (
    MOST_REQUEUES_FOR_TIME,
    REQUEUE_FOR_TIME_DELAY_SECONDS,
    STOP_MARGIN_SECONDS,
    TIME_SLACK_SECONDS,
)
from fireline.services.worker.outcomes import Result

logger = Logger(service="fireline", child=True)

# The message's count of its returns to the queue for time (see MOST_REQUEUES_FOR_TIME).
_TIME_REQUEUES = "time_requeues"


class TimeFit(outcomes.Outcomes):
    """Does this invocation give the job its deadline? Built on Outcomes (a fire sent
    back to the queue is one)."""

    def _note_invocation(self, remaining_ms: Callable[[], int]) -> None:
        """Remember the longest time an invocation of this worker has had at its start:
        the function's timeout, as near as the worker can see it (a warm container's
        invocations all start with it)."""
        left = remaining_ms()
        self._longest_invocation_ms = max(self._longest_invocation_ms, left)
        if self._pool is not None:
            self._pool.observe(left)

    def _longest_attempt(self, remaining_ms: Callable[[], int]) -> float:
        """The longest attempt an invocation of this worker can give (seconds)."""
        longest_ms = max(self._longest_invocation_ms, remaining_ms())
        return longest_ms / 1000 - STOP_MARGIN_SECONDS

    def _short_of_time(
        self,
        item: model.Schedule,
        deadline: int,
        remaining_ms: Callable[[], int],
        body: dict[str, Any],
    ) -> bool:
        """Should the fire go back to the queue because this invocation cannot give the
        run its deadline and a fresh one would? No when it gives the deadline, or as
        much as any invocation of this worker would (a class's own deadline is what its
        function gives; a deadline of the job's own that no invocation gives is refused
        after the claim: see _too_long)."""
        longest = self._longest_attempt(remaining_ms)
        left = remaining_ms() / 1000 - STOP_MARGIN_SECONDS
        if left >= deadline or left >= longest - TIME_SLACK_SECONDS:
            return False
        if item.deadline_seconds is not None and deadline > longest:
            return False  # no invocation gives it: refused, not sent round
        # Sent back often enough, every invocation it met late (each record of a batch
        # starts as the batch does, so this is rare): it runs with what is left rather
        # than going round for ever.
        return _requeues_for_time(body) < MOST_REQUEUES_FOR_TIME

    def _too_long(
        self, item: model.Schedule, deadline: int, remaining_ms: Callable[[], int]
    ) -> str | None:
        """Why no invocation of this worker can keep the job's own deadline (None: one
        can): a deployment whose function's timeout was cut below what registration
        allows its class (model.DEADLINES, which the template's timeouts are held to)."""
        longest = self._longest_attempt(remaining_ms)
        if item.deadline_seconds is None or deadline <= longest:
            return None
        return (
            f"error: its deadline ({deadline} s) is longer than an attempt can run in this "
            f"worker ({max(0, int(longest))} s: the function's timeout less "
            f"{STOP_MARGIN_SECONDS:.0f} s to record the outcome)"
        )

    def _requeue_for_time(self, body: dict[str, Any], row: occurrence.Occurrence) -> Result:
        """Back to the queue for an invocation that has the time: a fresh message, and
        this one acknowledged, so no attempt is spent and SQS's receive count (the
        dead-letter redrive's) does not grow; the row, if any, stays as it is."""
        again = {**body, _TIME_REQUEUES: _requeues_for_time(body) + 1}
        self._send_again(again, row.job_class, REQUEUE_FOR_TIME_DELAY_SECONDS)
        logger.info(
            "requeued: not enough time left in this invocation",
            extra={"action": "worker.requeue_for_time", "key": row.key},
        )
        self.metrics.add_metric("RequeuedForTime", "Count", 1)
        return Result.DEFERRED


def _requeues_for_time(body: dict[str, Any]) -> int:
    count = body.get(_TIME_REQUEUES)
    return count if isinstance(count, int) and not isinstance(count, bool) else 0
