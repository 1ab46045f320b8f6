"""Backfills: a schedule's past fires over a range, written once and run at a pace.

``start`` writes every fire of the range as a queued row under its normal occurrence key
(conditional on the key's absence: a fire with a row is not run again) and answers how
many it created and how many existed. Nothing is sent yet but the first window.

``pace`` releases the rest: it reads the backfill record, reads back the rows in flight,
sends the next queued rows of the backfill (at most ``window`` unsettled at once) and
moves the record on, conditional on the revision it read. The record is the pacing state,
in DynamoDB, so a pass that dies is simply done again by the next: messages first, then
the record, so a crash in between sends the same fires again (the worker's claim is
conditional on the key: they run once per claim) and never skips one. Passes come from the
API (the first window), from the periodic pass of every active backfill
(``pace_active``, each minute), and from a worker that settled a backfill's fire.

``cancel`` stops what has not started: no more releases, and every queued row of the
backfill (released or not) is cancelled with a move conditional on its state, so a claim
that got there first runs and a claim that comes later finds the row cancelled.

A backfill's runs are the schedule's runs: the same rows, messages and worker, so the
tenant's concurrency limit, its share of the invocations and the schedule's overlap
slot apply to each of them as to a live fire, and the cost model prices them as fires.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from datetime import datetime

from aws_lambda_powertools import Logger

from fireline import ports
from fireline.domain import backfill, errors, model, occurrence
from fireline.services import dispatch

logger = Logger(service="fireline", child=True)

# Rows read per Query when a pass looks for the next queued rows of a backfill, and
# records per page of the periodic pass's list.
PAGE = 100
# A pass that loses the race on the record's revision reads it again, this many times.
PASS_ATTEMPTS = 3
SETTLED = occurrence.SETTLED


class Backfills:
    def __init__(
        self,
        *,
        store: ports.BackfillStore,
        schedules: ports.ScheduleStore,
        occurrences: ports.OccurrenceStore,
        queue: ports.WorkQueue,
        clock: ports.Clock,
        ids: Callable[[str], str],
        parallel: ports.Parallel,
    ) -> None:
        self.store = store
        self.schedules = schedules
        self.occurrences = occurrences
        self.queue = queue
        self.clock = clock
        self.ids = ids
        # The range's conditional puts, side by side: 10,000 of them one at a time would
        # take most of the API's 29 s at DynamoDB's latency.
        self.parallel = parallel

    # --- the tenant's calls ----------------------------------------------------------------

    def start(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        start: datetime,
        end: datetime,
        overlap: str | None = None,
    ) -> backfill.Backfill:
        """Write the fires of ``[start, end)`` and release the first window. Validation
        first (400s, nothing written), then the record, then the rows."""
        # A one-off job is no schedule to backfill: its run gives back its unit of the
        # active jobs quota, which a backfilled run never took.
        current = (
            None if model.is_job_id(schedule_id) else self.schedules.get(tenant_id, schedule_id)
        )
        if current is None or current.state is model.ScheduleState.CANCELLED:
            raise errors.NotFound(f"no schedule {schedule_id}")
        chosen = backfill.parse_overlap(overlap, current.overlap)
        now = self.clock.now()
        fires = backfill.fire_times(current.timing, start, end, now)
        if current.state is model.ScheduleState.PAUSED:
            # Its worker would skip every fire as paused: refused rather than written.
            raise errors.ConflictError(f"schedule {schedule_id} is paused")
        record = backfill.Backfill(
            tenant_id=tenant_id,
            schedule_id=schedule_id,
            backfill_id=self.ids("bf"),
            version=current.version,
            job_class=current.job_class,
            start=start,
            end=end,
            overlap=chosen,
            created_at=now,
            fires=len(fires),
        )
        self.store.create(record)
        rows = [dispatch.row_for(current, f, now, backfill_id=record.backfill_id) for f in fires]
        outcomes = self.parallel.run([functools.partial(self.occurrences.put_new, r) for r in rows])
        failure = next((o for o in outcomes if isinstance(o, Exception)), None)
        created = sum(1 for o in outcomes if o is True)
        counted = record.moved(
            created=created,
            existed=sum(1 for o in outcomes if o is False),
            state=backfill.State.RUNNING if created else backfill.State.DONE,
        )
        if failure is not None:
            # Some rows may be in and others not: the record is left running, so the
            # periodic pass releases whatever rows it wrote; the request fails (a retry
            # is a backfill of its own, which finds those rows existing).
            raise failure
        if not self.store.replace(counted, expected_revision=record.revision):
            raise errors.Unavailable("the backfill changed while it was written")
        logger.info(
            "backfill started",
            extra={
                "action": "backfill.start",
                "key": schedule_id,
                "backfill_id": record.backfill_id,
                "rows_created": counted.created,
                "rows_existed": counted.existed,
            },
        )
        return self._pass(counted) if counted.active else counted

    def get(self, tenant_id: str, schedule_id: str, backfill_id: str) -> backfill.Backfill:
        found = self.store.get(tenant_id, schedule_id, backfill_id)
        if found is None:
            raise errors.NotFound(f"no backfill {backfill_id} of schedule {schedule_id}")
        return found

    def cancel(self, tenant_id: str, schedule_id: str, backfill_id: str) -> backfill.Backfill:
        """Stop the fires not started; those running finish. A finished backfill is
        answered as it is (nothing left to stop)."""
        for _ in range(PASS_ATTEMPTS):
            found = self.get(tenant_id, schedule_id, backfill_id)
            if found.state is not backfill.State.RUNNING:
                break
            asked = found.moved(state=backfill.State.CANCELLING)
            if self.store.replace(asked, expected_revision=found.revision):
                return self._finish_cancel(asked)
        found = self.get(tenant_id, schedule_id, backfill_id)
        return self._finish_cancel(found) if found.state is backfill.State.CANCELLING else found

    def pace(
        self, tenant_id: str, schedule_id: str, backfill_id: str, *, settled: str | None = None
    ) -> backfill.Backfill:
        """One pass over one backfill. ``settled``: the key of a fire of it that the
        caller (a worker) just settled; the pass takes its word for that one and reads
        back none of the rows in flight, so a worker's pass costs no read of them (the
        periodic pass reads them all: a worker that died before its pass is covered)."""
        return self._pass(self.get(tenant_id, schedule_id, backfill_id), settled)

    def pace_active(self) -> int:
        """A pass over every backfill still in progress: the periodic safety net, which
        also finishes a release or a cancel that a crash interrupted. Returns how many
        passes it made; one backfill's failure does not stop the others."""
        passes = 0
        cursor: str | None = None
        while True:
            page = self.store.active(limit=PAGE, cursor=cursor)
            for tenant_id, schedule_id, backfill_id in page.items:
                found = self.store.get(tenant_id, schedule_id, backfill_id)
                if found is None or not found.active:
                    continue  # the index lags the record: finished meanwhile
                try:
                    self._pass(found)
                except errors.Unavailable as exc:
                    logger.warning(
                        "backfill pass deferred",
                        extra={
                            "action": "backfill.deferred",
                            "backfill_id": backfill_id,
                            "error": str(exc),
                        },
                    )
                    continue
                passes += 1
            if page.cursor is None:
                return passes
            cursor = page.cursor

    # --- the pass ------------------------------------------------------------------------

    def _pass(self, found: backfill.Backfill, settled: str | None = None) -> backfill.Backfill:
        for _ in range(PASS_ATTEMPTS):
            if found.state is backfill.State.CANCELLING:
                return self._finish_cancel(found)
            if not found.active:
                return found
            moved = self._release(found, settled)
            if moved is None or self.store.replace(moved, expected_revision=found.revision):
                return moved or found
            # Another pass moved it first: its view is the newer one.
            found = self.get(found.tenant_id, found.schedule_id, found.backfill_id)
        return found

    def _release(self, found: backfill.Backfill, settled: str | None) -> backfill.Backfill | None:
        """The record after sending what the window has room for; None when nothing
        changed (no fire settled, none to send)."""
        if settled is not None:
            waiting = [k for k in found.in_flight if k != settled]
        else:
            rows = self.occurrences.get_many(list(found.in_flight)) if found.in_flight else {}
            # A row gone (its retention ended) has no run to wait for.
            waiting = [k for k in found.in_flight if k in rows and rows[k].state not in SETTLED]
        ended = len(found.in_flight) - len(waiting)
        room = found.window - len(waiting)
        nxt, exhausted = self._next_rows(found, room) if room > 0 else ([], False)
        if nxt:
            messages = [
                dispatch.Outbound(
                    r.job_class,
                    r.key,
                    ports.OutboundMessage(
                        body={**dispatch.job_message(r), "backfill_id": r.backfill_id}
                    ),
                )
                for r in nxt
            ]
            dispatch.send(self.queue, messages, dispatch.DispatchReport())
        finished = exhausted and not waiting and not nxt
        if not nxt and not ended and not finished:
            return None
        return found.moved(
            in_flight=tuple(waiting + [r.key for r in nxt]),
            run=found.run + ended,
            released=found.released + len(nxt),
            released_until=nxt[-1].fire_time if nxt else found.released_until,
            state=backfill.State.DONE if finished else found.state,
        )

    def _next_rows(
        self, found: backfill.Backfill, room: int
    ) -> tuple[list[occurrence.Occurrence], bool]:
        """Up to ``room`` queued rows of this backfill after the last one released, in
        fire order, and whether the range has no more. The Query reads the schedule's
        partition from there on, bounded by the range."""
        since = found.released_until or found.start
        taken: list[occurrence.Occurrence] = []
        cursor: str | None = None
        while True:
            # A page of about what there is room for, and one row more (the last one
            # released is read again, as the range starts on its second): the rows after
            # it are mostly this backfill's own, so one short page is the usual read.
            page = self.occurrences.open_rows(
                found.tenant_id,
                found.schedule_id,
                since=since,
                limit=min(PAGE, room + 1),
                cursor=cursor,
            )
            for row in page.items:
                if row.fire_time >= found.end:
                    return taken, True
                if (
                    row.backfill_id == found.backfill_id
                    and row.state is occurrence.State.QUEUED
                    and (found.released_until is None or row.fire_time > found.released_until)
                ):
                    taken.append(row)
                    if len(taken) == room:
                        return taken, False
            if page.cursor is None:
                return taken, True
            cursor = page.cursor

    def _finish_cancel(self, found: backfill.Backfill) -> backfill.Backfill:
        """Cancel every queued row of the backfill, then mark it cancelled. Each move is
        conditional on the row being queued: a claim that won runs; one that comes later
        finds the row cancelled and runs nothing."""
        now = self.clock.now()
        cancelled = 0
        cursor: str | None = None
        while True:
            page = self.occurrences.open_rows(
                found.tenant_id, found.schedule_id, since=found.start, limit=PAGE, cursor=cursor
            )
            ended = False
            for row in page.items:
                if row.fire_time >= found.end:
                    ended = True
                    break
                if row.backfill_id != found.backfill_id or row.state is not occurrence.State.QUEUED:
                    continue
                moved = row.moved(
                    occurrence.State.CANCELLED, finished_at=now, exit_reason="cancelled: backfill"
                )
                with contextlib.suppress(errors.NotFound):
                    cancelled += self.occurrences.transition(
                        moved, expected_state=occurrence.State.QUEUED
                    )
            if ended or page.cursor is None:
                break
            cursor = page.cursor
        for _ in range(PASS_ATTEMPTS):
            done = found.moved(
                state=backfill.State.CANCELLED, cancelled=found.cancelled + cancelled
            )
            if self.store.replace(done, expected_revision=found.revision):
                return done
            found = self.get(found.tenant_id, found.schedule_id, found.backfill_id)
            if found.state is not backfill.State.CANCELLING:
                return found
        raise errors.Unavailable("the backfill kept changing while it was cancelled")
