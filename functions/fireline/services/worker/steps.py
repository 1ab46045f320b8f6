"""One record's steps, in their order: read the row, hold an early fire until its time,
still wanted, deadline fit, overlap, the invocation share and the tenant slots, then the
run. Each step lives in the module named for it; this is the order they run in."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from fireline.domain import model, occurrence, quota
from fireline.services import claims
from fireline.services import long_jobs as long_jobs_service
from fireline.services import tracing as tracing_service
from fireline.services.worker import run
from fireline.services.worker.config import SLOT_MARGIN_SECONDS, STOP_MARGIN_SECONDS
from fireline.services.worker.outcomes import Busy, Result
from fireline.services.worker.prefetch import Prefetch
from fireline.services.worker.slots import AT_INVOCATION_SHARE, HANDED_ON, Reused


class Steps(run.Running):
    """One record's steps in their order, each from the part it is built on."""

    def _handle(
        self,
        key: str,
        body: dict[str, Any],
        remaining_ms: Callable[[], int],
        prefetched: Prefetch,
    ) -> Result:
        if body.get("type") == "outcome":
            return self._long_outcome(body)
        row = self._read_row(key, prefetched)
        stored = row is not None
        if row is None:
            # The ticker sends fires without writing their rows: this delivery's claim
            # (or skip) writes it, conditional on the key, so two deliveries make one.
            row = claims.intent_of(body, key)
        elif row.state in occurrence.SETTLED:
            self.metrics.add_metric("DuplicateDeliveries", "Count", 1)
            return Result.SETTLED
        now = self.clock.now()
        early = (row.fire_time - now).total_seconds()
        if early > 0:
            # The ticker rounds delays down (SQS counts whole seconds), so a fire arrives
            # up to a second before its time: wait it out, and decide everything at the
            # fire time. Far earlier (a clock far off) goes back to the queue instead.
            if early > self.config.early_hold_seconds:
                return self._requeue(body, row, math.ceil(early))
            self.clock.sleep(early)
            now = self.clock.now()
        if row.state is occurrence.State.RUNNING and not _abandoned(row, now):
            if row.execution:
                return Result.SETTLED  # a long job whose execution is in flight
            raise Busy(f"{key} is running elsewhere")
        item, why = self._job_for(row, prefetched)
        if why is not None or item is None:
            return self._skip(row, why or "schedule deleted", now, stored=stored)
        if row.attempts >= item.retry.max_attempts:
            # Its last attempt ended without an outcome (the invocation was killed, or the
            # worker failed): another attempt would pass the cap, so it is dead now.
            return self._exhausted(row, now)
        deadline = model.deadline_for(item.job_class, item.deadline_seconds)
        if self.long_jobs is None and self._short_of_time(item, deadline, remaining_ms, body):
            return self._requeue_for_time(body, row)
        # Slots last as long as the job may run: one attempt here, every attempt of a
        # long job (its state machine retries without coming back here).
        held_for = (
            long_jobs_service.hold(item.retry, deadline)
            if self.long_jobs is not None
            else timedelta(seconds=deadline + SLOT_MARGIN_SECONDS)
        )
        overlap, took_run = self._overlap(item, row, held_for, now)
        if overlap == "skip":
            return self._skip(row, "overlap", now, stored=stored)
        if overlap == "defer":
            return self._defer(body, row, "overlap", stored=stored)
        # A tenant the operator runs unlimited is not shared out (as for its class's jobs:
        # see _take_slot).
        shared = self._pool is not None and (
            self._registered_limit(item.tenant_id) != quota.UNLIMITED
        )
        # A run at its tenant's limit or share waits here for its turn while the
        # invocation still gives the job its deadline after the wait (then it is
        # deferred, as ever): see _in_turn.
        spare = remaining_ms() / 1000 - STOP_MARGIN_SECONDS - deadline
        wait_until = self.clock.monotonic() + min(self.config.slot_wait_seconds, spare)
        try:
            entered = not shared or self._in_turn(
                lambda: self._enter_pool(item.tenant_id, remaining_ms()) or AT_INVOCATION_SHARE,
                wait_until,
            )
        except Exception:
            self._give_back_slots(item, key, (), took_run)
            raise
        if isinstance(entered, str):
            self._give_back_slots(item, key, (), took_run)
            return self._defer(body, row, entered, stored=stored)
        try:
            return self._run_in_slots(
                body,
                row,
                item,
                deadline,
                held_for,
                now,
                took_run,
                remaining_ms,
                stored=stored,
                wait_until=wait_until,
            )
        finally:
            if shared:
                self._leave_pool(item.tenant_id)

    def _run_in_slots(
        self,
        body: dict[str, Any],
        row: occurrence.Occurrence,
        item: model.Schedule,
        deadline: int,
        held_for: timedelta,
        now: datetime,
        took_run: bool,
        remaining_ms: Callable[[], int],
        *,
        stored: bool,
        wait_until: float,
    ) -> Result:
        """The run, once its overlap allows it (the run slot ``took_run``) and its share
        of the class's invocations: the tenant slots, then the run or the long job's
        start."""
        key = row.key
        first = row.attempts == 0

        def take() -> tuple[int, ...] | str:
            nonlocal first
            taken = self._take_slot(item.tenant_id, key, held_for, self.clock.now(), first=first)
            first = False  # a number at random, unread, was refused: the view's next
            return taken

        try:
            slot = self._in_turn(take, wait_until)
        except Exception:
            # Not running after all: a run slot kept would skip the schedule's next fires
            # as "overlap" while nothing runs, until it expired.
            self._give_back_slots(item, key, (), took_run)
            raise
        if isinstance(slot, str):
            self._give_back_slots(item, key, (), took_run)
            return self._defer(body, row, slot, stored=stored)
        if self.long_jobs is not None:
            return self._start_long(item, row, slot, deadline, now, took_run, fresh=not stored)
        outcome: dict[str, Any] | None = None
        try:
            trace = tracing_service.of_message(body)
            outcome = self._run_once(
                item, row, deadline, remaining_ms, fresh=not stored, trace=trace
            )
        finally:
            # A run that ended otherwise (a failure to retry, dead, an error) gives its
            # tenant slots back; a finished one leaves them to be handed on (see
            # _take_one), first to this container's next run of the tenant. Its run slot
            # is given back either way.
            handed_on = outcome is not None and outcome["state"] in HANDED_ON
            if handed_on:
                for number in slot:
                    self._slot_views.finished(item.tenant_id, number, key)
            left_to_holder = outcome is None and isinstance(slot, Reused)
            self._give_back_slots(item, key, () if handed_on or left_to_holder else slot, took_run)
        if self._idempotency.claimed is None:
            # The claim was refused: another delivery (or a cancel) settled the row
            # first, and Powertools replayed its outcome, already acted on there.
            self.metrics.add_metric("DuplicateDeliveries", "Count", 1)
            return Result.SETTLED
        return self._after(body, row, outcome)


def _abandoned(row: occurrence.Occurrence, now: datetime) -> bool:
    return row.in_progress_until is not None and row.in_progress_until < now
