"""The run: claimed and run under Powertools idempotency on the occurrence row (claim,
then outcome), with the job's deadline; or, for a long job, claimed and handed to its
state machine, whose outcome message comes back here."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError

from fireline.domain import errors, model, occurrence, tracing, workflow
from fireline.services import long_jobs as long_jobs_service
from fireline.services import targets
from fireline.services import tracing as tracing_service
from fireline.services.worker import deadlines, slots, wanted
from fireline.services.worker.config import STOP_MARGIN_SECONDS
from fireline.services.worker.outcomes import PAST_CAP, Busy, Result


class Running(deadlines.TimeFit, wanted.StillWanted, slots.SlotKeeping):
    """The claim and the run (or a long job's start), on the steps' checks below it:
    the deadline's fit, still wanted after the claim, the slots given back."""

    def _run_once(
        self,
        item: model.Schedule,
        row: occurrence.Occurrence,
        deadline: int,
        remaining_ms: Callable[[], int],
        *,
        fresh: bool,
        trace: tracing.TraceContext | None = None,
    ) -> dict[str, Any]:
        """Claim and run under Powertools idempotency (see services.worker.idempotency).
        ``trace``: the fire's trace context as its message carried it."""
        self._idempotency.bind(remaining_ms, intent=row)
        try:
            # The record's key is all Powertools needs of the message (no payload
            # validation), and it deep-copies what it is given on every call; the other
            # arguments (the trace among them) pass through as they are.
            return self._guarded_run(  # type: ignore[no-any-return]
                item, deadline, remaining_ms, fresh, trace, message={"occurrence_key": row.key}
            )
        except IdempotencyAlreadyInProgressError as exc:
            raise Busy(str(exc)) from exc

    def _run_claimed(
        self,
        item: model.Schedule,
        deadline: int,
        remaining_ms: Callable[[], int],
        fresh: bool,
        trace: tracing.TraceContext | None,
        *,
        message: dict[str, Any],
    ) -> dict[str, Any]:
        """What Powertools runs once the claim (the record's put) has succeeded."""
        claimed = self._idempotency.claimed
        assert claimed is not None  # the claim (the record's put) just succeeded
        if trace is None:  # a message sent before the context was carried: the same one
            trace = tracing.for_fire(claimed.tenant_id, claimed.key, claimed.fire_time)
        outcome = self._execute(item, claimed, deadline, remaining_ms, fresh=fresh, trace=trace)
        return self._idempotency.returned(outcome)

    def _execute(
        self,
        item: model.Schedule,
        claimed: occurrence.Occurrence,
        deadline: int,
        remaining_ms: Callable[[], int],
        *,
        fresh: bool,
        trace: tracing.TraceContext,
    ) -> dict[str, Any]:
        """Run the target; the outcome as the idempotency record's result."""
        if claimed.attempts > item.retry.max_attempts:
            # The row read before the claim was stale (an older attempt count): this
            # claim is past the cap, so it is recorded dead without running.
            return {
                "state": occurrence.State.DEAD.value,
                "exit_reason": PAST_CAP,
                "attempt": claimed.attempts,
            }
        why = self._unwanted_after_claim(claimed, fresh=fresh)
        if why is not None:
            # A change returned between our first read and the claim: not run, recorded
            # skipped as the change would have (this attempt never started).
            return {
                "state": occurrence.State.SKIPPED.value,
                "exit_reason": f"skipped: {why}",
                "attempt": claimed.attempts,
            }
        too_long = self._too_long(item, deadline, remaining_ms)
        if too_long is not None:
            # Every attempt would be cut short by the invocation's end: dead at once, with
            # why, rather than failing as "deadline" attempt after attempt.
            return self._failed(item, claimed, too_long, too_long, final=True)
        self._started(claimed, self.clock.now())
        context = targets.JobContext(
            occurrence_key=claimed.key,
            tenant_id=claimed.tenant_id,
            schedule_id=claimed.schedule_id,
            fire_time=claimed.fire_time,
            attempt=claimed.attempts,
            payload=item.payload,
            trace=trace,
            sampled=self.tracing.sampled(trace),
        )
        timeout = min(float(deadline), remaining_ms() / 1000 - STOP_MARGIN_SECONDS)
        started = self.clock.monotonic()
        started_at = self.clock.now().timestamp() if self.tracing.emitter else 0.0
        try:
            output = self.runner.run(item.target, context, timeout=timeout)
        except targets.DeadlineExceeded as exc:
            result = self._failed(item, claimed, "deadline", str(exc))
        except targets.TargetFailed as exc:
            result = self._failed(item, claimed, f"error: {exc}", str(exc))
        except errors.ValidationError as exc:  # a target that cannot run at all
            result = self._failed(item, claimed, f"error: {exc}", str(exc), final=True)
        else:
            result = {
                "state": occurrence.State.SUCCEEDED.value,
                "exit_reason": "succeeded",
                "attempt": claimed.attempts,
                "seconds": round(self.clock.monotonic() - started, 3),
                "output": targets.jsonable(output),
            }
        self._trace_attempt(item, claimed, trace, started_at, result)
        return result

    def _trace_attempt(
        self,
        item: model.Schedule,
        claimed: occurrence.Occurrence,
        trace: tracing.TraceContext,
        started_at: float,
        result: dict[str, Any],
    ) -> None:
        """The attempt's segment, below the fire's, with the target's call beneath it
        (whose id the target received as its traceparent's parent)."""
        if self.tracing.emitter is None:
            return  # nothing records: no segment is built
        end = self.clock.now().timestamp()
        attempt = claimed.attempts
        call = tracing.Span(
            name=str(item.target.get("type")),
            span=tracing_service.target_span(attempt),
            start=started_at,
            end=end,
        )
        about = tracing_service.fire_annotations(
            claimed.tenant_id, claimed.schedule_id, claimed.key
        )
        self.tracing.record(
            trace,
            tracing.Span(
                name="fireline-worker",
                span=tracing_service.attempt_span(attempt),
                start=started_at,
                end=end,
                annotations={**about, "attempt": attempt, "state": str(result["state"])},
                error=result["state"] != occurrence.State.SUCCEEDED.value,
                children=(call,),
            ),
        )

    def _started(self, claimed: occurrence.Occurrence, now: datetime) -> None:
        """StartLag: how late a fire's first attempt starts (this claim's time less the fire
        time), what a user waiting for the job feels: the ticker, the queue, the pollers,
        deferrals for a tenant limit. Retries wait for their backoff by design, and a
        workflow node's fire time is its run's start (it waits for its parents): neither
        counts."""
        if claimed.attempts != 1 or workflow.is_node_key(claimed.key):
            return
        lag_ms = max(0.0, (now - claimed.fire_time).total_seconds() * 1000)
        self.metrics.add_metric("StartLag", "Milliseconds", lag_ms)

    def _start_long(
        self,
        item: model.Schedule,
        row: occurrence.Occurrence,
        slot: tuple[int, ...],
        deadline: int,
        now: datetime,
        took_run: bool,
        *,
        fresh: bool,
    ) -> Result:
        """Claim, then hand the run to its state machine; the slots stay held until the
        outcome message (or their expiry, should that never come)."""
        assert self.long_jobs is not None
        started = False
        try:
            result = self._start_claimed_long(item, row, slot, deadline, now, took_run, fresh=fresh)
            started = result is Result.STARTED
            return result
        finally:
            if not started:
                # Nothing of this delivery runs (refused, settled, or an error on the way):
                # the slots it took would otherwise block its tenant and its schedule for
                # every attempt's deadline (see long_jobs_service.hold).
                self._give_back_slots(item, row.key, slot, took_run)

    def _start_claimed_long(
        self,
        item: model.Schedule,
        row: occurrence.Occurrence,
        slot: tuple[int, ...],
        deadline: int,
        now: datetime,
        took_run: bool,
        *,
        fresh: bool,
    ) -> Result:
        assert self.long_jobs is not None
        key = row.key
        claimed, current = self.occurrences.claim(
            key, now=now, until=now + long_jobs_service.START_MARGIN, intent=row
        )
        if not claimed:
            if current is not None and current.execution:
                return Result.SETTLED  # its execution is in flight: this was a repeat
            if current is not None and current.state in occurrence.SETTLED:
                # Settled first: by a cancel's row (a one-off job's cancel races the
                # claim on it), or an earlier delivery's outcome.
                self.metrics.add_metric("DuplicateDeliveries", "Count", 1)
                return Result.SETTLED
            raise Busy(f"{key} is being started elsewhere")
        assert current is not None
        if current.attempts > item.retry.max_attempts:
            # A stale read before the claim (see _read_row): past the cap, dead unrun.
            self.occurrences.settle(
                key,
                state=occurrence.State.DEAD,
                now=now,
                exit_reason=PAST_CAP,
                attempt=current.attempts,
            )
            self.metrics.add_metric("DeadLettered", "Count", 1)
            return Result.DEAD
        why = self._unwanted_after_claim(current, fresh=fresh)
        if why is not None:
            self.occurrences.settle(
                key,
                state=occurrence.State.SKIPPED,
                now=now,
                exit_reason=f"skipped: {why}",
                attempt=current.attempts,
            )
            self.metrics.add_metric("Skipped", "Count", 1)
            return Result.SKIPPED
        self._started(current, now)
        self.long_jobs.start(item, current, deadline)
        self.metrics.add_metric("LongJobsStarted", "Count", 1)
        return Result.STARTED

    def _long_outcome(self, body: dict[str, Any]) -> Result:
        if self.long_jobs is None:
            raise errors.ValidationError("an outcome message on a non-long queue", field="type")
        state = self.long_jobs.record_outcome(body)
        row = self.occurrences.get(body["occurrence_key"])
        if row is not None:
            # Each give-back is tried whatever became of the other; a failed one fails the
            # message, whose redelivery (the outcome is recorded once) tries it again.
            _each(
                functools.partial(
                    long_jobs_service.release_slot, self.slots, row.tenant_id, row.key
                ),
                functools.partial(long_jobs_service.release_run, self.slots, row),
            )
        if state is occurrence.State.SUCCEEDED:
            self.metrics.add_metric("Succeeded", "Count", 1)
            return Result.SUCCEEDED
        if state is occurrence.State.DEAD:
            self.metrics.add_metric("Failed", "Count", 1)
            self.metrics.add_metric("DeadLettered", "Count", 1)
            return Result.DEAD
        return Result.SETTLED  # cancelled meanwhile, or a repeated outcome message


def _each(*steps: Callable[[], None]) -> None:
    """Run every step, even after one raised; then raise the first failure."""
    failure: Exception | None = None
    for step in steps:
        try:
            step()
        except Exception as exc:  # re-raised below, once every step had its turn
            failure = failure or exc
    if failure is not None:
        raise failure
