"""The sweep: what a crash between two writes leaves behind, found and repaired.

Two of the cost cuts trade a transaction for two plain writes in a row, and a process may
die between them:

- A one-off job due within 900 s is written, then sent by its create. A create that dies
  in between answered nothing; without an Idempotency-Key no retry finds the job, which
  would never run and hold its unit of the active jobs quota for ever.
- A quota unit is counted first and its item written second, and given back after its
  mark is removed. A crash between the two leaves the count one too high, a unit held by
  nothing: never too low, so a tenant is refused early, never admitted over its limit.

Every minute the sweep reads each tenant whose active jobs count is above zero, the
tenant's holders (a batch's jobs hold their units in them: see quota.Holder) and the
tenant's jobs that hold a unit of their own, a mark (the schedules table's sparse ``held``
index: live jobs only, so what it reads is bounded by the tenant's limit, not its
history).

A holder whose jobs' fire minute is over is visited (see :meth:`Sweep._visit`): the units
of its jobs that ended go back together, in one transaction with the holder's change, and
its jobs sent and never claimed are sent again as below. A holder changes only with the
count, so its units are never held by nothing and never given back twice: what follows
is about marks. For each marked job:

1. A job whose fire time passed more than :data:`GRACE` ago, still marked and with no
   occurrence row, was never claimed: its message is sent (again). The grace is longer
   than any create takes to send (the API's invocation ends within 30 s, and a job's fire
   time is never before its create) and than a worker takes to claim a message that is
   due, short of a backlog. A second message of one that did go (a backlog) is harmless:
   the worker's claim is a conditional put on the occurrence key, so the fire runs once;
   the job item records the resend, so a waiting job gets at most one more per grace.
   When it runs its end gives the unit back, as any job's does.
2. A job that ended (settled row, or cancelled) but still holds its mark lost its
   release to a crash: released now, with the release every end uses, conditional on the
   mark, so the sweep and a late worker cannot both give it back.
3. What is left is units no item names: a count above the jobs the index lists. Such a
   count is only reduced by what the sweep can prove is held by nothing (see
   :meth:`Sweep._reconcile`), with a write conditional on the count not having changed,
   so a reconcile never makes a count too low.

Each run also settles the triggers whose request failed or died before confirming its
send. A trigger writes its row, queued, then sends its message; the row is listed as
awaiting it (the occurrences table's sparse ``awaiting_send`` index) until the send is
confirmed. A request whose send fails settles its row skipped and fails; one whose settle
fails too, or that dies between the two writes, leaves the row listed. Once the listing
is older than :data:`GRACE`, the sweep reads the row: one still queued is settled
skipped, as the request would have (conditional on its listing as read, so two sweeps
settle it once), and a message that went after all finds it so and runs nothing; the
client was answered with an error, and its retry is a trigger of its own. A row no longer
queued (claimed, settled, expired) is only taken off the listing. (A request that did
succeed but whose clear failed, and whose message then waited longer than the grace in a
backlog, is settled skipped too: the price of never running a trigger whose request
failed.)

Each run also makes sure the register of tenant limit overrides is built (see
``SlotStore.build_overrides``): a new deployment, or one whose overrides were set before
the register existed, has it within a run; once built, the check is one read.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from aws_lambda_powertools import Logger

from fireline import ports
from fireline.domain import errors, model, occurrence, quota, schedule
from fireline.services import dispatch

logger = Logger(service="fireline", child=True)
SETTLED = occurrence.SETTLED

# How long past its fire time a still-marked job may lack its occurrence row before the
# sweep sends it: longer than any create takes to send it, and than a due message waits
# for a worker short of a backlog.
GRACE = timedelta(minutes=15)
# How long after a count was read a listing of the held index shows every job whose unit
# the count held: longer than a create takes from its count to its item (the API's
# invocation: 30 s) and than the index trails the table (a fraction of a second, usually).
SETTLE = timedelta(minutes=5)
# How long a job's release may take from its mark's removal to its count's decrement: the
# longest invocation that releases (a worker's: 900 s at most), with a margin.
RELEASE_WINDOW = timedelta(minutes=20)
# Items one page of the slots table's scan reads, pages one run reads at most, and held
# index entries read for one tenant (beyond it the tenant's count is not reconciled).
SCAN_PAGE = 500
MAX_SCAN_PAGES = 200
HELD_PAGE = 500
MAX_HELD = 5000
# Query pages (1 MB each) a count's check against the table may read before it reduces it,
# in all over the tenant's keys (fireline.domain.model.TENANT_KEY_SHARDS, a page at least each).
MAX_CHECK_READS = 20
# Rows awaiting their message one run reads at most (the next run takes the rest).
MAX_AWAITING_SEND = 500


@dataclass
class SweepReport:
    tenants: int = 0
    # Items read: the scan's (all it examined), counts, index entries, jobs, rows.
    items_read: int = 0
    resent: int = 0
    released: int = 0
    noted: int = 0
    forgiven: int = 0  # units taken off counts
    unsent: int = 0  # resends that failed (sent by a later run)
    triggers_settled: int = 0  # triggers whose request failed or died, settled skipped
    triggers_cleared: int = 0  # listings of rows no longer awaiting a message, cleared
    failed: int = 0  # listed triggers not repaired (DynamoDB unavailable): the next run's
    complete: bool = True  # False: the run stopped at MAX_SCAN_PAGES
    overrides: int | None = None  # limit overrides in the register (None: not built)


class Sweep:
    def __init__(
        self,
        *,
        store: ports.SweepStore,
        schedules: ports.ScheduleStore,
        occurrences: ports.OccurrenceStore,
        queue: ports.WorkQueue,
        clock: ports.Clock,
        grace: timedelta = GRACE,
        settle: timedelta = SETTLE,
        release_window: timedelta = RELEASE_WINDOW,
        slots: ports.SlotStore | None = None,
    ) -> None:
        self.store = store
        self.slots = slots
        self.schedules = schedules
        self.occurrences = occurrences
        self.queue = queue
        self.clock = clock
        self.grace = grace
        self.settle = settle
        self.release_window = release_window

    def run(self) -> SweepReport:
        report = SweepReport()
        report.overrides = self._register()
        cursor: str | None = None
        for _ in range(MAX_SCAN_PAGES):
            page = self.store.tenants_holding(
                quota.Quota.ACTIVE_JOBS, limit=SCAN_PAGE, cursor=cursor
            )
            report.items_read += page.scanned
            for tenant_id in page.tenants:
                report.tenants += 1
                self._tenant(tenant_id, report)
            cursor = page.cursor
            if cursor is None:
                break
        else:
            report.complete = False
        self._awaiting_send(report)
        logger.info("sweep", extra={"action": "sweep.run", **vars(report)})
        return report

    def _awaiting_send(self, report: SweepReport) -> None:
        """The triggers listed as awaiting their message for longer than the grace:
        settled skipped while queued, taken off the listing otherwise. Each entry on its
        own: a failure leaves it to the next run."""
        now = self.clock.now()
        try:
            listed = self.occurrences.awaiting_send(
                before=now - self.grace, limit=MAX_AWAITING_SEND
            )
        except errors.Unavailable:
            report.failed += 1
            return
        report.items_read += len(listed)
        for entry in listed:
            try:
                row = self.occurrences.get(entry.key)
                report.items_read += 1
                if row is None or row.state is not occurrence.State.QUEUED:
                    self.occurrences.sent(entry.key)  # claimed, settled or expired since
                    report.triggers_cleared += 1
                elif self.occurrences.settle_unsent(entry.key, since=entry.since, now=now):
                    report.triggers_settled += 1
                    logger.info(
                        "trigger settled by the sweep: its request failed before its send",
                        extra={
                            "action": "sweep.trigger_settled",
                            "tenant_id": row.tenant_id,
                            "key": row.key,
                        },
                    )
            except errors.Unavailable:
                report.failed += 1

    def _register(self) -> int | None:
        """The register of limit overrides, built if it is not yet; the overrides it
        holds. A failure is left to the next run: until then the workers read each
        tenant's slots, as without a register."""
        if self.slots is None:
            return None
        try:
            return self.slots.build_overrides()
        except Exception as exc:  # the sweep's other repairs do not wait for it
            logger.warning(
                "register of limit overrides not built",
                extra={"action": "sweep.overrides", "error": f"{type(exc).__name__}: {exc}"},
            )
            return None

    def _tenant(self, tenant_id: str, report: SweepReport) -> None:
        count = self.store.count(tenant_id, quota.Quota.ACTIVE_JOBS)
        read_at = self.clock.now()  # after the read: the note's time is never early
        report.items_read += 1
        held: list[ports.HeldJob] = []
        cursor: str | None = None
        while True:
            page = self.store.held_jobs(tenant_id, limit=HELD_PAGE, cursor=cursor)
            held += page.items
            report.items_read += len(page.items)
            cursor = page.cursor
            if cursor is None or len(held) >= MAX_HELD:
                break
        holders = self.store.holders(tenant_id)
        report.items_read += len(holders)
        holding = sum(len(h.jobs) for h in holders)
        listed_at = self.clock.now()  # after the listing: never early either
        due_before = listed_at - self.grace
        for job in held:
            if job.fire_time <= due_before:
                self._overdue(job, report)
        for holder in holders:
            if holder.visit_at <= listed_at:
                self._visit(holder, report)
        if cursor is None:
            self._reconcile(
                tenant_id, count, len(held) + holding, holding, read_at, listed_at, report
            )

    def _overdue(self, entry: ports.HeldJob, report: SweepReport) -> None:
        """A job the index lists as holding its unit, past its fire time by the grace."""
        job = self.schedules.get(entry.tenant_id, entry.schedule_id)
        report.items_read += 1
        if job is None or not job.quota_held:
            return  # released since the index saw it
        if job.state is model.ScheduleState.ACTIVE:
            return  # in the due index: the ticker sends it
        spec = job.timing.spec
        assert isinstance(spec, schedule.AtSpec)
        now = self.clock.now()
        key = dispatch.row_for(job, spec.when, now).key
        row = self.occurrences.get(key)
        report.items_read += 1
        ended = job.state is model.ScheduleState.CANCELLED or (
            row is not None and row.state in occurrence.SETTLED
        )
        if ended:
            # Its end's release was lost to a crash: the same conditional release, so a
            # late worker's and this one give the unit back once between them.
            if self.schedules.release(job.tenant_id, job.schedule_id, quota.Quota.ACTIVE_JOBS):
                report.released += 1
            return
        if row is not None:
            return  # claimed: running, or failed with a retry to come
        self._resend(job, spec.when, now, report)

    def _visit(self, holder: quota.Holder, report: SweepReport) -> None:
        """A batch's holder once its jobs' fire minute is over: the units of its jobs that
        ended go back together (one transaction with the holder's change, conditional on
        the holder being as read, so a cancel or another sweep meanwhile makes this one
        wait for the next run), and the holder goes once it holds nothing. A job that
        ended is one whose row settled, one cancelled, or one its create never wrote (its
        holder older than the settling time: no create writes its jobs later). A job
        sent, never claimed and past its fire time by the grace is sent again, as a
        marked job is. Reads: the jobs' rows (one BatchGetItem, eventually consistent: a
        stale row shows an older state, never a settled one too early), and the jobs of
        those without a row."""
        now = self.clock.now()
        jobs = {entry: quota.parse_held_entry(entry) for entry in holder.jobs}
        keys = {
            entry: occurrence.occurrence_key(job_id, 1, fire)
            for entry, (job_id, fire) in jobs.items()
        }
        rows = self.occurrences.get_many(list(keys.values()), consistent=False)
        report.items_read += len(keys)
        ended = [e for e, key in keys.items() if key in rows and rows[key].state in SETTLED]
        rowless = [e for e, key in keys.items() if key not in rows]
        found = {
            job.schedule_id: job
            for job in self.schedules.get_many([(holder.tenant_id, jobs[e][0]) for e in rowless])
        }
        report.items_read += len(rowless)
        for entry in rowless:
            job_id, fire_time = jobs[entry]
            job = found.get(job_id)
            if job is None:
                if now - holder.created_at >= self.settle:
                    ended.append(entry)  # never written
            elif job.state is model.ScheduleState.CANCELLED:
                ended.append(entry)  # its cancel's give-back did not land
            elif job.state is model.ScheduleState.COMPLETED and fire_time <= now - self.grace:
                self._resend(job, fire_time, now, report)
        with contextlib.suppress(errors.Unavailable):  # the next run visits it again
            if len(ended) == len(holder.jobs):
                if self.store.drop_holder(holder):
                    report.released += len(ended)
            elif ended and self.store.unhold(
                holder.tenant_id, holder.number, ended, version=holder.version
            ):
                report.released += len(ended)

    def _resend(
        self, job: model.Schedule, fire_time: datetime, now: datetime, report: SweepReport
    ) -> None:
        """Send again a job written, never claimed and past its fire time by the grace: its
        create died before the send (or its message waits in a backlog). The mark on the
        job first, so two sweeps send once between them."""
        key = dispatch.row_for(job, fire_time, now).key
        if not self.store.mark_resent(
            job.tenant_id, job.schedule_id, now, not_since=now - self.grace
        ):
            return
        try:
            dispatch.send(
                self.queue, [dispatch.outbound(job, fire_time, now)], dispatch.DispatchReport()
            )
        except errors.Unavailable:
            report.unsent += 1  # marked: the run after the next grace sends it
            return
        report.resent += 1
        logger.info(
            "job sent by the sweep",
            extra={"action": "sweep.resent", "tenant_id": job.tenant_id, "key": key},
        )

    def _reconcile(
        self,
        tenant_id: str,
        count: ports.HeldCount,
        listed: int,
        holding: int,
        read_at: datetime,
        listed_at: datetime,
        report: SweepReport,
    ) -> None:
        """Take off a tenant's count the units that no job holds, only when provably so.
        ``listed``: the marked jobs the index listed and the jobs the tenant's holders
        list (``holding`` of them). A holder changes only in one transaction with the
        count, so the units holders hold are always exactly counted, and the argument
        below is about marks.

        The count C was read consistently with its token T (every take and give-back
        writes a new one). The index is eventually consistent and creates and releases
        run meanwhile, so "C minus the jobs listed" may count units that are merely in
        flight: a create that took its unit and has not written its job, a release that
        removed its mark and has not decremented yet, a job too new for the index. Taking
        those off would make the count too low. So it goes in three runs:

        1. C is above the listing: note T and the time it was read (``since``), on the
           condition that the count still carries T.
        2. At least SETTLE after ``since``, the count still carrying T: list again and
           note the number listed, L, and when (``listed_at``).
        3. At least RELEASE_WINDOW after ``listed_at``, take off C - L, on the condition
           that the count still carries T and the same note (one write, applied once).

        Why C - L is held by nothing at that write (time w): T unchanged from ``since``
        to w means no unit was taken or given back in between. A unit legitimately
        counted at w is (i) a job's whose create took it before ``since``: its item was
        written within the create's invocation, well before the listing (SETTLE covers
        the invocation and the index's lag), and it either still holds its mark at the
        listing or lost it since; or (ii) that of a release that removed the mark and
        has yet to decrement: removals happen at most RELEASE_WINDOW before their
        decrement, so that mark was removed after ``listed_at``, i.e. it was listed. A
        mark once removed never comes back (a replace keeps the mark it read). So every
        unit legitimately counted at w was listed: C - L units are held by nothing. (An
        index that trailed by more than SETTLE would break this; DynamoDB's trails by a
        fraction of a second. And just before the write the marks are also counted from
        the table, consistently, and the smaller excess taken.) A tenant whose count
        keeps changing keeps its excess until a quiet spell: the price of never taking
        off too much.
        """
        excess = count.used - listed
        note = count.note
        if excess <= 0 or count.token is None:
            return
        if note is None or note.token != count.token:
            if self.store.note(tenant_id, ports.SweepNote(count.token, read_at)):
                report.noted += 1
            return
        if note.listed is None or note.listed_at is None:
            # This run's listing began after read_at: that is what must be SETTLE late.
            if read_at - self.settle >= note.since:
                noted = replace(note, listed=listed, listed_at=listed_at)
                if self.store.note(tenant_id, noted):
                    report.noted += 1
            return
        if self.clock.now() - self.release_window < note.listed_at:
            return
        # The larger listing: a job listed now and not then (a lagging index) is not
        # taken off either.
        units = count.used - max(note.listed, listed)
        if units <= 0:
            return
        # Before the write, the marked jobs counted from the table itself, read
        # consistently: it reads all the tenant's jobs, but only here, for a count about
        # to be reduced. Its count bounds the units as the index's may not: a job the
        # index never listed (one marked before the index existed) keeps its unit.
        marked, read = self.store.marked_jobs(tenant_id, max_reads=MAX_CHECK_READS)
        report.items_read += read
        if marked is None:
            return
        units = min(units, count.used - marked - holding)
        if units <= 0:
            return
        with contextlib.suppress(errors.Unavailable):  # the next run tries again
            if self.store.forgive(tenant_id, quota.Quota.ACTIVE_JOBS, units, note):
                report.forgiven += units
                logger.warning(
                    "quota units held by nothing given back",
                    extra={"action": "sweep.forgiven", "tenant_id": tenant_id, "units": units},
                )
