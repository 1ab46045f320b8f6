"""Is the fire still wanted? Cancel, pause, delete and update are checks of the row and
the schedule version, made at the last moment (before the claim, and again after it
where the claim alone does not close the race); an unwanted fire is recorded skipped."""

from __future__ import annotations

from fireline.domain import model, occurrence, workflow
from fireline.services import claims
from fireline.services.worker import state
from fireline.services.worker.prefetch import Prefetch


class StillWanted(state.WorkerState):
    """The row and the schedule a record is decided on, and whether its fire is still
    wanted after its claim."""

    def _read_row(self, key: str, prefetched: Prefetch) -> occurrence.Occurrence | None:
        """The occurrence's row, read eventually consistently (half the price of a
        consistent read), by the batch's read if it asked for it. A stale read shows an
        older state of the row, and everything decided on it is checked again by a
        conditional write: the claim (on the state), a skip's move or a deferral's put;
        its attempt count again after the claim. Only the answers that end the delivery
        without a write must be current: a settled row stays settled (terminal states
        are never left), except a dead one, which a redrive reopens, and a running one
        may have ended since. Those two are read again consistently. A first delivery
        of a message whose sender wrote no row reads nothing (see :meth:`prefetch`)."""
        row = prefetched.row(key, lambda: self.occurrences.get(key, consistent=False))
        if row is not None and row.state in (occurrence.State.DEAD, occurrence.State.RUNNING):
            row = self.occurrences.get(key)
        return row

    def _job_for(
        self, row: occurrence.Occurrence, prefetched: Prefetch
    ) -> tuple[model.Schedule | None, str | None]:
        """What the occurrence runs: its schedule (or workflow node), or why not now."""
        if workflow.parse_node_schedule_id(row.schedule_id) is not None:
            if self.nodes is None:
                return None, "no workflow controller in this worker"
            return self.nodes.job_for(row)
        # Eventually consistent: a change this read misses is caught after the claim
        # (a change settles the open rows before it returns, racing the claim on the row,
        # and a row the claim creates has the schedule read again, consistently, unless
        # it is a one-off job's, whose cancel writes the row itself: see
        # _unwanted_after_claim). A schedule of the row's version has that version's
        # target and payload, however stale the read. What the read alone would decide,
        # a skip, is decided on a consistent read: a stale one may show an older version
        # and skip the fire of an update that returned a moment ago. (The batch's read,
        # if it asked, is such a read, made at the batch's start.)
        item = prefetched.schedule(
            row.tenant_id,
            row.schedule_id,
            lambda: self.schedules.get(row.tenant_id, row.schedule_id, consistent=False),
        )
        if claims.unwanted(item, row) is None:
            return item, None
        item = self.schedules.get(row.tenant_id, row.schedule_id)
        return item, claims.unwanted(item, row)

    def _unwanted_after_claim(self, claimed: occurrence.Occurrence, *, fresh: bool) -> str | None:
        """Is a claimed occurrence still wanted? A pause, update, delete or cancel settles
        every open row of an older version from ``claims.SETTLED_ON_CHANGE`` before it on,
        racing the claim on the row, so a claim that won over an existing row did so
        before the change returned. Read the schedule again after the claim when that
        race did not happen: the claim created the row (the ticker sends fires without
        rows, so there was none to settle), or the fire is older than
        ``claims.RECHECK_OLDER_THAN`` (its row may lie outside the change's range). A
        change that returned before that read stops the run.

        Read per record, not for the batch: it must come after this record's own claim,
        so one read for the batch would hold every record's run until the slowest claim
        of the batch (a throttled one, one holding for its fire time) had been made, and
        would need every record of the batch running at once, which ports.Parallel does
        not promise (run in turn, the first record would wait for ever).

        A one-off job reads nothing here: the one change that stops it, its cancel,
        settles the row of the job's one fire first, whatever the job's item says (it
        puts the row, cancelled, where none exists, else moves a queued one), and cancels
        the item only after (see ScheduleService._cancel_job). That write and the claim
        race on the row itself: a claim that won was made before it, and the cancel
        answers too late. Nothing else stops a job (pause, update and delete refuse one,
        and only a cancel changes its version)."""
        if workflow.is_node_key(claimed.key):
            return None  # a workflow node's run is governed by its run (cancel)
        if model.is_job_id(claimed.schedule_id):
            return None  # its cancel's row decided, at the claim (see above)
        if not fresh and claimed.fire_time >= self.clock.now() - claims.RECHECK_OLDER_THAN:
            return None
        # Consistent, and made after this record's claim; a burst's reads are gathered
        # into one batch read (services.worker.gathered).
        current = self._reads.get(self.schedules, claimed.tenant_id, claimed.schedule_id)
        return claims.unwanted(current, claimed)
