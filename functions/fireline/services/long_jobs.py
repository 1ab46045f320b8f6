"""Long jobs (class ``long``): supervised by a state machine, not by one Lambda invocation.

1. The long class's worker claims the occurrence (the same conditional claim) and starts
   an execution of statemachines/long_job.asl.json named after the occurrence, so a
   repeated start converges on one execution.
2. The state machine hands each attempt out on the task queue with a task token, requires
   a heartbeat every ``heartbeat_seconds`` and ends the attempt at ``deadline_seconds``;
   it retries with the schedule's backoff up to the attempt cap.
3. A runner takes the task, runs the target while heartbeating (a Python handler may also
   report progress), and reports success or failure with the token. A tenant's own
   process can heartbeat (with progress) through ``POST /jobs/{id}/heartbeat``.
4. The state machine sends the outcome to the long class's queue, and the worker records
   it on the occurrence. Cancelling stops the execution and records ``cancelled``.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from aws_lambda_powertools import Logger

from fireline import ports
from fireline.domain import errors, model, occurrence, quota, retry, workflow
from fireline.services import targets

logger = Logger(service="fireline", child=True)
DEFAULT_HEARTBEAT_SECONDS = 60
# Between the claim and the execution's start a crash leaves the row running this long.
START_MARGIN = timedelta(minutes=5)
# The error text a failed attempt hands to Step Functions (which allows 32,768); the
# occurrence keeps 400 of it as the reason.
MAX_CAUSE_CHARS = 4000
REASONS = {
    "States.HeartbeatTimeout": "heartbeat timeout",
    "States.Timeout": "deadline",
    "States.TaskFailed": "error",
}


def execution_name(key: str, generation: int) -> str:
    """Deterministic and within Step Functions' 80 characters of [A-Za-z0-9-_]."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:60]
    return f"occ-{digest}-g{generation}"


def hold(policy: retry.RetryPolicy, deadline: int) -> timedelta:
    """How long a started long job may run, every attempt and backoff included: its
    claim, and its tenant slot, last that long unless its outcome comes sooner."""
    delays = sum(math.ceil(policy.ceiling(n)) for n in range(1, policy.max_attempts + 1))
    return timedelta(seconds=deadline * policy.max_attempts + delays) + START_MARGIN


def release_slot(slots: ports.SlotStore, scope: str, holder: str) -> None:
    """Give back the slots ``holder`` has in ``scope`` (a tenant: its limit's and its
    class share's; or a schedule's overlap scope), if it still has them."""
    held, _ = slots.held(scope)
    for mine in held:
        if mine.holder == holder:
            slots.give_back(scope, mine.number, holder)


def release_run(slots: ports.SlotStore, row: occurrence.Occurrence) -> None:
    """Give back the run slot of the occurrence's schedule (forbid, buffer_one) if the
    occurrence holds it."""
    release_slot(slots, quota.overlap_scope(row.tenant_id, row.schedule_id), row.key)


def heartbeat_interval(configured: int, deadline: int) -> int:
    """The heartbeat interval an attempt is held to: the deployment's, but always shorter
    than the attempt's deadline (Step Functions requires HeartbeatSeconds below
    TimeoutSeconds), and at least a second."""
    return max(1, min(configured, deadline - 1))


@dataclass(frozen=True)
class LongJobConfig:
    heartbeat_seconds: int = DEFAULT_HEARTBEAT_SECONDS


class NodeJobs(Protocol):
    """What a long job needs of workflows (fireline.services.workflows.NodeJobs, which
    builds on this module): the job a workflow node's occurrence runs."""

    def job_for(self, row: occurrence.Occurrence) -> tuple[model.Schedule | None, str | None]: ...


class LongJobs:
    def __init__(
        self,
        *,
        schedules: ports.ScheduleStore,
        occurrences: ports.OccurrenceStore,
        supervisor: ports.LongJobRunner,
        clock: ports.Clock,
        runner: targets.TargetRunner | None = None,
        config: LongJobConfig | None = None,
        nodes: NodeJobs | None = None,
        slots: ports.SlotStore | None = None,
    ) -> None:
        self.nodes = nodes
        # Tenant slots: a cancelled job's is given back at once (its execution is stopped,
        # so no outcome message will come to give it back).
        self.slots = slots
        self.schedules = schedules
        self.occurrences = occurrences
        self.supervisor = supervisor
        self.clock = clock
        self.runner = runner
        self.config = config or LongJobConfig()

    # --- the long class's worker -------------------------------------------------------------

    def start(self, item: model.Schedule, claimed: occurrence.Occurrence, deadline: int) -> str:
        """Start (or find) the execution that supervises this claimed occurrence."""
        policy = item.retry
        delays = [math.ceil(policy.ceiling(n)) for n in range(1, policy.max_attempts + 1)]
        job_input = {
            "occurrence_key": claimed.key,
            "attempt": 1,
            "max_attempts": policy.max_attempts,
            "retry_delays": [0, *delays],
            "heartbeat_seconds": heartbeat_interval(self.config.heartbeat_seconds, deadline),
            "deadline_seconds": deadline,
        }
        execution = self.supervisor.start(
            execution_name(claimed.key, claimed.generation), job_input
        )
        # The row stays claimed for as long as the state machine may take, all attempts
        # and backoffs included; the outcome message settles it sooner.
        self.occurrences.annotate_running(
            claimed.key,
            execution=execution,
            in_progress_until=self.clock.now() + hold(policy, deadline),
        )
        logger.info("long job started", extra={"action": "long.start", "key": claimed.key})
        return execution

    def record_outcome(self, body: dict[str, Any]) -> occurrence.State | None:
        """The state machine's outcome message: record it on the occurrence."""
        key = body["occurrence_key"]
        state = occurrence.State(body["state"])
        error = body.get("error") or {}
        reason = "succeeded" if state is occurrence.State.SUCCEEDED else _reason(body, error)
        result = {"state": state.value, "exit_reason": reason, "attempt": body.get("attempt")}
        if "output" in body:
            result["output"] = body["output"]
        settled = self.occurrences.settle(
            key, state=state, now=self.clock.now(), exit_reason=reason, result=result
        )
        logger.info(
            "long job ended",
            extra={"action": "long.outcome", "key": key, "state": state.value, "recorded": settled},
        )
        return state if settled else None

    # --- the runner (the task queue) ---------------------------------------------------------

    def run_task(self, body: dict[str, Any], *, remaining_ms: Callable[[], int]) -> bool:
        """Run one attempt handed out by the state machine; True when it succeeded."""
        if self.runner is None:
            raise errors.ValidationError("this process runs no targets", field="runner")
        key, token = body["occurrence_key"], body["task_token"]
        row = self.occurrences.get(key)
        item = self._job_for(row) if row else None
        if row is None or item is None or row.state is not occurrence.State.RUNNING:
            self.supervisor.fail(token, "Cancelled", "the occurrence is no longer running")
            return False
        attempt = int(body.get("attempt", 1))
        if row.attempts > attempt or (
            row.task_token and row.task_token != token and row.attempts == attempt
        ):
            # A stale task (SQS returned an old attempt's message): a later attempt owns
            # the occurrence now, so this one must not run the target again.
            self.supervisor.fail(token, "Stale", "a later attempt owns the occurrence")
            return False
        self.occurrences.annotate_running(key, task_token=token, attempts=attempt)
        beat = _Heartbeat(self.supervisor, token, float(body.get("heartbeat_seconds", 60)) / 3)
        beat.start()

        def progress(update: dict[str, Any]) -> None:
            stored = targets.jsonable(update)
            self.occurrences.annotate_running(
                key, progress=stored if isinstance(stored, dict) else {"value": stored}
            )
            self.supervisor.heartbeat(token)

        context = targets.JobContext(
            occurrence_key=key,
            tenant_id=row.tenant_id,
            schedule_id=row.schedule_id,
            fire_time=row.fire_time,
            attempt=attempt,
            payload=item.payload,
            report_progress=progress,
        )
        deadline = float(body.get("deadline_seconds", model.DEADLINES["long"]))
        try:
            output = self.runner.run(
                item.target, context, timeout=min(deadline, remaining_ms() / 1000 - 5)
            )
        except (targets.TargetFailed, errors.ValidationError) as exc:
            # Every failure of the target is the attempt's outcome (a target that cannot
            # run at all too): the state machine retries it, then reports it dead.
            beat.stop()
            # Step Functions takes a cause of at most 32,768 characters.
            self.supervisor.fail(token, "JobFailed", str(exc)[:MAX_CAUSE_CHARS])
            return False
        finally:
            beat.stop()
        return self.supervisor.succeed(token, {"result": targets.jsonable(output)})

    # --- the API -----------------------------------------------------------------------------

    def _job_for(self, row: occurrence.Occurrence) -> model.Schedule | None:
        if workflow.is_node_key(row.key):
            return self.nodes.job_for(row)[0] if self.nodes is not None else None
        return self.schedules.get(row.tenant_id, row.schedule_id)

    def heartbeat(self, row: occurrence.Occurrence, progress: dict[str, Any] | None) -> bool:
        """A tenant's long job says it is alive (and how far it got)."""
        if row.state is not occurrence.State.RUNNING or not row.task_token:
            raise errors.ConflictError(f"the job is {row.state.value}: no task to heartbeat")
        if progress is not None:
            self.occurrences.annotate_running(row.key, progress=progress)
        if not self.supervisor.heartbeat(row.task_token):
            raise errors.ConflictError("the task ended (timed out or stopped)")
        return True

    def cancel(self, row: occurrence.Occurrence) -> bool:
        """Stop a running long job's execution and record it cancelled."""
        if row.execution:
            self.supervisor.stop(row.execution, "cancelled by the tenant")
        cancelled = self.occurrences.settle(
            row.key,
            state=occurrence.State.CANCELLED,
            now=self.clock.now(),
            exit_reason="cancelled",
        )
        if cancelled and self.slots is not None:
            # Both, whatever became of the first: the run slot kept would skip the
            # schedule's next fires as "overlap" behind a run that was cancelled.
            try:
                release_slot(self.slots, row.tenant_id, row.key)
            finally:
                release_run(self.slots, row)
        return cancelled


def _reason(body: dict[str, Any], error: dict[str, Any]) -> str:
    name = str(error.get("Error", "error"))
    if name == "States.Timeout":
        # Step Functions may report a missed heartbeat as States.Timeout too: an attempt
        # that ended before its deadline was a missed heartbeat.
        try:
            started = datetime.fromisoformat(str(body["attempt_started"]).replace("Z", "+00:00"))
            ended = datetime.fromisoformat(str(body["ended"]).replace("Z", "+00:00"))
            if (ended - started).total_seconds() < float(body["deadline_seconds"]) - 0.5:
                return "heartbeat timeout"
        except (KeyError, ValueError):
            pass
        return "deadline"
    reason = REASONS.get(name, "error")
    if reason == "error" and error.get("Cause"):
        reason = f"error: {str(error['Cause'])[:400]}"
    return reason


class _Heartbeat:
    """Heartbeats a task every ``every`` seconds while its attempt runs."""

    def __init__(self, supervisor: ports.LongJobRunner, token: str, every: float) -> None:
        self._supervisor = supervisor
        self._token = token
        self._every = max(0.2, every)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fireline-heartbeat")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(self._every):
            if not self._supervisor.heartbeat(self._token):
                return  # the task is gone (stopped, timed out): nothing left to keep alive
