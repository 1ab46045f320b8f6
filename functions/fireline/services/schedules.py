"""Use cases behind the API: schedules and one-off jobs of one tenant.

Every method takes the tenant id the caller was authenticated as (the API reads it from
the authorizer context, never from the request). A schedule of another tenant is
reported as not found, never as forbidden, so ids do not leak.

A one-off job is a schedule of kind ``job`` with an ``at`` spec: it rides the same due
index, ticker, occurrence key and workers as every recurring fire.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import hashlib
import json
import secrets
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol, TypeVar

from fireline import ports
from fireline.domain import (
    aws_target,
    errors,
    exclusions,
    model,
    natural,
    occurrence,
    policies,
    quota,
    retry,
    schedule,
)
from fireline.domain import egress as egress_rules
from fireline.domain import target as target_rules
from fireline.services import claims, dispatch
from fireline.services import long_jobs as long_jobs_service

MAX_PAGE = 100
MAX_PREVIEW = 100
# Reads one schedule listing page may make past the jobs sharing the tenant's partition.
MAX_LIST_READS = 20
# Job rows one job listing page may examine (each costs a read of its occurrence).
MAX_JOB_ROWS = 200
# What a job's state may be: its occurrence's, or "scheduled" before the ticker fires it.
OCCURRENCE_STATES = tuple(s.value for s in occurrence.State)
JOB_STATES = ("scheduled", *OCCURRENCE_STATES)
# What a recurring schedule's state may be (``cancelled`` is a one-off job's alone).
SCHEDULE_STATES = tuple(
    s.value for s in model.ScheduleState if s is not model.ScheduleState.CANCELLED
)
# Milliseconds a trigger tries past the one it was asked in, when others took them.
TRIGGER_TRIES = 50
# A job due within this of its creation is sent by the create itself, with the delay that
# makes it visible at its time (SQS's longest); a later one waits in the due index.
DIRECT_SEND = timedelta(seconds=900)
# The most jobs one batch create takes: 100 is BatchGetItem's most keys (a retried batch
# reads its items in one request), four BatchWriteItem requests of 25 and ten
# SendMessageBatch requests of ten, and, at the API's 1 MiB batch body, ~10 KiB a job.
MAX_BATCH = 100
# Where in the second a batch's messages go out, when none is due sooner: SQS counts
# delays in whole seconds (rounded down, so a message is never late), and a message sent
# at this phase becomes visible 0.15 s before its fire time, not up to a whole second as
# at any phase: the worker that waits out the rest holds its invocation that much less.
# The API holds once for up to 100 jobs, in a function of half the worker's memory, and
# the worker holds once for 10: a tenth of a second here saves about twenty there. The
# ticker sends at the same phase (TickerConfig.send_phase).
BATCH_SEND_PHASE = 0.85


T = TypeVar("T")


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


def request_id(prefix: str, tenant_id: str, request_key: str) -> str:
    """The id a create with an Idempotency-Key gets: the same for every retry of that
    request, so a retry after a lost answer finds what the first attempt created (and
    takes no second unit of quota) instead of creating another."""
    digest = hashlib.sha256(f"{tenant_id}\n{prefix}\n{request_key}".encode()).hexdigest()
    return f"{prefix}_{digest[:20]}"


class WorkflowCatalog(Protocol):
    """What registration needs to know of workflows: whether a target names one."""

    def exists(self, tenant_id: str, workflow_id: str, version: int | None = None) -> bool: ...


@dataclass(frozen=True)
class ScheduleDraft:
    """What a tenant asks for; validated by the API's models, checked again here."""

    spec: str  # cron(...), rate(...), at(...), bare cron fields, or natural language
    timezone: str = "UTC"
    dst: schedule.DstPolicy = field(default_factory=schedule.DstPolicy)
    start: datetime | None = None
    end: datetime | None = None
    job_class: str = "default"
    target: dict[str, Any] = field(default_factory=dict)
    payload: dict[str, Any] = field(default_factory=dict)
    retry: retry.RetryPolicy = field(default_factory=retry.RetryPolicy)
    misfire: policies.Misfire = field(default_factory=policies.Misfire)
    overlap: policies.OverlapPolicy = policies.OverlapPolicy.ALLOW
    jitter_seconds: int = 0
    deadline_seconds: int | None = None
    # Days it does not fire on (see fireline.domain.exclusions). Skipped single fires are
    # not part of a draft: POST /schedules/{id}/skip sets them, and an update keeps them.
    exclude: exclusions.Exclusions = exclusions.NONE


@dataclass(frozen=True)
class JobDraft:
    run_at: datetime | None = None
    delay_seconds: int | None = None
    job_class: str = "default"
    target: dict[str, Any] = field(default_factory=dict)
    payload: dict[str, Any] = field(default_factory=dict)
    retry: retry.RetryPolicy = field(default_factory=retry.RetryPolicy)
    deadline_seconds: int | None = None


@dataclass(frozen=True)
class PreviewFire:
    fire_time: datetime
    queued: bool  # materialized already: its message waits in the queue
    # When its message was sent, if known: a row's creation, or the schedule's last advance
    # for the fires that advance sent ahead (an earlier advance's time is not kept).
    sent_at: datetime | None = None
    # Why it does not run, for a fire its spec has that the schedule takes away: "skipped"
    # (one fire skipped; DELETE .../skip takes it back) or "excluded" (its exclude list).
    excluded: Literal["skipped", "excluded"] | None = None


@dataclass(frozen=True)
class JobView:
    job: model.Schedule
    occurrence: occurrence.Occurrence | None  # None until its first delivery's claim
    # When the view was read: a job whose message waits for its time is "scheduled" until
    # then, whether the create sent it or the ticker did (None: "queued" once sent).
    now: datetime | None = None

    @property
    def fire_time(self) -> datetime:
        """Its one fire: the time its occurrence key names."""
        spec = self.job.timing.spec
        assert isinstance(spec, schedule.AtSpec)
        return spec.when

    @property
    def finished(self) -> bool:
        """Its one run has an outcome (or never comes): it no longer counts as active."""
        if self.occurrence is not None:
            return self.occurrence.state in occurrence.SETTLED
        return self.job.state is model.ScheduleState.CANCELLED

    @property
    def state(self) -> str:
        if self.occurrence is not None:
            return self.occurrence.state.value
        if self.job.state is model.ScheduleState.CANCELLED:
            return occurrence.State.CANCELLED.value
        if self.job.state is model.ScheduleState.COMPLETED:
            # Sent: its message waits in the queue; the row comes with its run.
            if self.now is not None and self.fire_time > self.now:
                return "scheduled"
            return occurrence.State.QUEUED.value
        return "scheduled"


class ScheduleService:
    def __init__(
        self,
        *,
        schedules: ports.ScheduleStore,
        occurrences: ports.OccurrenceStore,
        queue: ports.WorkQueue,
        clock: ports.Clock,
        ids: Callable[[str], str] = new_id,
        handlers: Container[str] | None = None,
        long_jobs: long_jobs_service.LongJobs | None = None,
        workflows: WorkflowCatalog | None = None,
        egress: egress_rules.EgressPolicy = egress_rules.STRICT,
        aws_targets: aws_target.AwsTargetPolicy = aws_target.ROLES_ONLY,
        quotas: Mapping[quota.Quota, int] | None = None,
    ) -> None:
        self.schedules = schedules
        self.occurrences = occurrences
        self.queue = queue
        self.clock = clock
        self.ids = ids
        # Python targets must name a handler this deployment registered (None: any).
        self.handlers = handlers
        self.long_jobs = long_jobs
        # Workflow targets must name a workflow (and version) the tenant has; None: this
        # deployment runs no workflows, so a workflow target is refused.
        self.workflows = workflows
        # What HTTP targets may name (the operator's widening of https-to-public-only).
        self.egress = egress
        # Whom AWS targets are called as: a tenant's role, or the operator's allowlist.
        self.aws_targets = aws_targets
        # The deployment's default quotas (the store applies a tenant's overrides); None:
        # nothing is counted.
        self.quotas = quotas

    def _charge(self, name: quota.Quota) -> quota.Charge | None:
        if self.quotas is None:
            return None
        return quota.Charge(name, self.quotas.get(name, quota.UNLIMITED))

    def _create(
        self,
        item: model.Schedule,
        charge: quota.Charge | None,
        request_key: str | None,
    ) -> tuple[model.Schedule, bool]:
        """Store a new schedule or job (taking its unit of quota with it): the item, and
        whether this call created it. A retry of a create with an Idempotency-Key finds
        the first attempt's item (False)."""
        if charge is not None:
            item = replace(item, quota_held=True)
        try:
            self.schedules.create(item, charge=charge)
        except errors.AlreadyExists:
            if request_key is None:
                raise
            found = self.schedules.get(item.tenant_id, item.schedule_id)
            if found is None:  # created, then deleted meanwhile
                raise
            return found, False
        return item, True

    def _new_id(self, prefix: str, tenant_id: str, request_key: str | None) -> str:
        if request_key is None:
            return self.ids(prefix)
        return request_id(prefix, tenant_id, request_key)

    # --- schedules -------------------------------------------------------------------------

    def create(
        self, tenant_id: str, draft: ScheduleDraft, *, request_key: str | None = None
    ) -> model.Schedule:
        now = self._now()
        schedule_id = self._new_id("sch", tenant_id, request_key)
        item = replace(self._build(tenant_id, schedule_id, draft, now, version=1), created_at=now)
        return self._create(item, self._charge(quota.Quota.SCHEDULES), request_key)[0]

    def get(self, tenant_id: str, schedule_id: str) -> model.Schedule:
        item = self.schedules.get(tenant_id, schedule_id)
        if item is None or item.kind is not model.Kind.SCHEDULE:
            raise errors.NotFound(f"schedule {schedule_id} not found")
        return item

    def list(
        self,
        tenant_id: str,
        *,
        limit: int = 50,
        cursor: str | None = None,
        state: str | None = None,
        q: str | None = None,
    ) -> ports.Page[model.Schedule]:
        """A page of the tenant's schedules in id order; only those in ``state`` (a
        :data:`SCHEDULE_STATES` value) and those whose id, description or spec holds ``q``
        (case-insensitively), when given.

        Jobs share the partition and the filters drop rows, so one read can hold none:
        read on, each read asking only for what the page still lacks (so the cursor of the
        last read is right after the last item returned), until the page is full, the
        partition ends or :data:`MAX_LIST_READS` reads were made (a partition of thousands
        of jobs must not hold the request past its time). A first page is empty only when
        nothing matching is left or the reads met none; its cursor then reads on.

        Reads: Query on the tenant's partition of the schedule table, at most
        MAX_LIST_READS of them a page."""
        one_of(state, SCHEDULE_STATES)
        needle = q.casefold() if q is not None else None

        def keep(item: model.Schedule) -> model.Schedule | None:
            if item.kind is not model.Kind.SCHEDULE:
                return None
            if state is not None and item.state.value != state:
                return None
            if needle is not None and not any(
                needle in text.casefold()
                for text in (item.schedule_id, item.description, item.spec_text)
            ):
                return None
            return item

        return self._read_on(tenant_id, limit=limit, cursor=cursor, keep=keep)

    def list_jobs(
        self,
        tenant_id: str,
        *,
        state: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ports.Page[JobView]:
        """A page of the tenant's one-off jobs in id order, those in ``state`` only when
        given (a :data:`JOB_STATES` value).

        Reads: Query on the tenant's partition of the schedule table (jobs' ids sort
        before schedules', so the jobs come first), and for each job row read one
        occurrence row (a Query of one item on the job's partition) for its state. At
        most :data:`MAX_JOB_ROWS` job rows are examined a page, so a page with a state
        that few jobs are in costs at most that many small reads; it may then come back
        short (even empty) with a cursor to read on from."""
        one_of(state, JOB_STATES)

        def keep(item: model.Schedule) -> JobView | None:
            if item.kind is not model.Kind.JOB:
                return None
            view = self._job_view(item)
            return view if state is None or view.state == state else None

        return self._read_on(tenant_id, limit=limit, cursor=cursor, keep=keep, rows=MAX_JOB_ROWS)

    def _read_on(
        self,
        tenant_id: str,
        *,
        limit: int,
        cursor: str | None,
        keep: Callable[[model.Schedule], T | None],
        rows: int | None = None,
    ) -> ports.Page[T]:
        """Fill a page from the tenant's partition with the rows ``keep`` maps to an item,
        reading on past the rows it drops; at most MAX_LIST_READS reads and, when given,
        ``rows`` rows examined. Each read asks only for what the page still lacks, so the
        cursor of the last read is right after the last row examined."""
        wanted = _page_size(limit)
        left = rows
        found: builtins.list[T] = []
        for _ in range(MAX_LIST_READS):
            ask = wanted - len(found) if left is None else min(wanted - len(found), left)
            page = self.schedules.list(tenant_id, limit=ask, cursor=cursor)
            if left is not None:
                left -= len(page.items)
            found += [kept for kept in map(keep, page.items) if kept is not None]
            cursor = page.cursor
            if cursor is None or len(found) == wanted or left == 0:
                break
        return ports.Page(found, cursor)

    def update(
        self,
        tenant_id: str,
        schedule_id: str,
        draft: ScheduleDraft,
        *,
        skips: frozenset[datetime] | None = None,
        expected_version: int | None = None,
    ) -> model.Schedule:
        """Replace the definition; a new version, so pending fires of the old one are void.
        The fires skipped one by one stay skipped (those still to come), unless ``skips``
        replaces them; ``expected_version``: refused if the schedule moved past it."""
        current = self.get(tenant_id, schedule_id)
        if expected_version is not None and current.version != expected_version:
            raise errors.ConflictError(f"schedule {schedule_id} changed meanwhile: try again")
        now = self._now()
        kept = current.timing.skips if skips is None else skips
        item = self._build(
            tenant_id,
            schedule_id,
            draft,
            now,
            version=current.version + 1,
            skips=frozenset(s for s in kept if s > now),
        )
        if current.state is model.ScheduleState.PAUSED:
            item = replace(item, state=current.state, next_fire=None, paused_at=now)
        # Skipped fires the schedule holds until their rows are written stay held: the
        # next pickup writes them (model.Schedule.skipped carries their own version).
        item = replace(
            item,
            created_at=current.created_at,
            quota_held=current.quota_held,
            skipped=current.skipped,
        )
        voided = _unsent_fires(current, now)
        if voided is not None:
            # Fires of the old version that were due and that no ticker handed on (it is
            # behind, or down): the new version voids them, so they are held as skipped,
            # in the very write that moves past them. The item holds one range: one it
            # held already gets its rows first (decided by the advance that wrote it).
            if current.skipped is not None:
                dispatch.record_range(
                    current,
                    now=now,
                    occurrences=self.occurrences,
                    report=dispatch.DispatchReport(),
                )
            item = replace(item, skipped=voided)
        self.schedules.replace(item, expected_version=current.version)
        self._settle_older(current, item, now)
        return item

    def delete(self, tenant_id: str, schedule_id: str) -> None:
        current = self.get(tenant_id, schedule_id)
        refund = quota.Quota.SCHEDULES if current.quota_held else None
        if current.skipped is not None:
            # The rows of the skipped fires it holds go first: the item is their only
            # record until then, and the delete takes it with it.
            dispatch.record_range(
                current,
                now=self._now(),
                occurrences=self.occurrences,
                report=dispatch.DispatchReport(),
            )
        self.schedules.delete(tenant_id, schedule_id, refund=refund)
        self._settle_older(current, None, self._now())

    def pause(self, tenant_id: str, schedule_id: str) -> model.Schedule:
        current = self.get(tenant_id, schedule_id)
        if current.state is not model.ScheduleState.ACTIVE:
            return current  # pausing twice is not an error
        now = self._now()
        paused = current.paused(now)
        self.schedules.replace(paused, expected_version=current.version)
        self._settle_older(current, paused, now)
        return paused

    def _settle_older(
        self, before: model.Schedule, after: model.Schedule | None, now: datetime
    ) -> int:
        """After a versioned write (or a delete), settle the schedule's open fires of the
        older versions: those materialized ahead, or left by a ticker that stopped before
        sending them, would otherwise stay queued with nothing on their way. The range
        starts at the earlier of now and the next fire before the change (a row not yet
        sent is at or after it), less ``claims.SETTLED_ON_CHANGE``; it is bounded by time,
        not by the schedule's history. Rows older than that have a message on its way,
        whose worker skips them."""
        start = min(now, before.next_fire or now) - claims.SETTLED_ON_CHANGE
        return claims.settle_open(
            self.occurrences, before.tenant_id, before.schedule_id, after, since=start, now=now
        )

    def resume(self, tenant_id: str, schedule_id: str) -> model.Schedule:
        """Back in the index from where it was paused: the ticker's misfire policy then
        decides what happens to the fires that passed while paused."""
        current = self.get(tenant_id, schedule_id)
        if current.state is not model.ScheduleState.PAUSED:
            return current
        now = self._now()
        since = current.paused_at or now
        next_fire = schedule.next_fire(current.timing, since)
        state = model.ScheduleState.ACTIVE if next_fire else model.ScheduleState.COMPLETED
        resumed = replace(
            current,
            state=state,
            next_fire=next_fire,
            paused_at=None,
            version=current.version + 1,
            updated_at=now,
            sent_from=None,
            sent_at=None,
        )
        self.schedules.replace(resumed, expected_version=current.version)
        return resumed

    def trigger(self, tenant_id: str, schedule_id: str) -> occurrence.Occurrence:
        """Fire now: an occurrence queued and sent at once (the same key scheme, put and
        message as a scheduled fire; no jitter, this is a request to run now).

        Each trigger is a run of its own: its key names this instant to the millisecond,
        never a whole second (the key of the schedule's own fire at that second), and
        the millisecond before when another trigger took this one. A retried request is
        recognised by its Idempotency-Key, not by its time."""
        current = self.get(tenant_id, schedule_id)
        if current.state is model.ScheduleState.PAUSED:
            raise errors.ConflictError(f"schedule {schedule_id} is paused")
        now = self._now()
        # Back, not forward, from a whole second or a taken millisecond: a fire time in
        # the past is delivered at once, one in the future would wait a second in SQS.
        fire_time = occurrence.key_time(now, exact=True)
        for _ in range(TRIGGER_TRIES):
            if fire_time.microsecond == 0:
                fire_time -= timedelta(milliseconds=1)
            row = occurrence.new(
                tenant_id=tenant_id,
                schedule_id=schedule_id,
                version=current.version,
                fire_time=fire_time,
                job_class=current.job_class,
                created_at=now,
                exact=True,
            )
            # Listed as awaiting its message until the send is confirmed: a send that
            # failed and a settle that failed too, or a process that died between the two
            # writes, leave the row listed, and the sweep settles it as the request would
            # have (fireline.services.sweep).
            if self.occurrences.put_new(row, awaiting_send=True):
                try:
                    self._send_row(row)
                except errors.Unavailable:
                    self._unsent(row)
                    raise
                with contextlib.suppress(errors.Unavailable):
                    # Sent (the SDK has retried the clear). A listing a failed clear
                    # leaves is read by the sweep once the row has waited its grace: a
                    # row claimed by then is only taken off the listing; one whose
                    # message waits in a backlog longer than that is settled skipped.
                    self.occurrences.sent(row.key)
                return row
            fire_time -= timedelta(milliseconds=1)
        raise errors.ConflictError(f"schedule {schedule_id} is being triggered too often")

    def preview(
        self, tenant_id: str, schedule_id: str, count: int = 10, after: datetime | None = None
    ) -> builtins.list[PreviewFire]:
        """The next ``count`` fires after ``after`` (default: now), the fires already
        queued (sent ahead, not run yet) among them and marked so.

        The ticker sends a schedule's fires up to its horizon ahead and moves the
        schedule's next fire past them; they have no row until a worker claims them. So
        every fire before the schedule's next fire and after now is queued, row or not;
        one at or before now is shown only while its row says it waits.

        Reads: the schedule, and one Query of at most ``count`` rows on its occurrence
        partition from ``after`` on (the open rows); the rest is computed."""
        if not 1 <= count <= MAX_PREVIEW:
            raise errors.ValidationError(f"must be 1 to {MAX_PREVIEW}", field="count")
        current = self.get(tenant_id, schedule_id)
        now = self._now()
        since = after or now
        start = since
        if after is None and current.next_fire is not None and current.next_fire <= since:
            # The ticker is behind: the fires from the next fire on are due and not sent.
            start = current.next_fire - timedelta(microseconds=1)
        # A paused schedule has no next fire (it left the due index): its preview is what
        # it would fire from ``since`` once resumed.
        computed = schedule.preview(current.timing, start, count)
        rows = self.occurrences.open_rows(tenant_id, schedule_id, since=since, limit=count).items
        queued = {
            r.fire_time: r.created_at
            for r in rows
            if r.state is occurrence.State.QUEUED
            and r.version == current.version
            and (after is None or r.fire_time > after)
        }
        shown: dict[datetime, PreviewFire] = {}
        for t in computed:
            if current.next_fire is None or t >= current.next_fire:
                shown[t] = PreviewFire(t, False)
            elif t > now:
                sent_at = queued.get(t) or current.sent_time(t)
                shown[t] = PreviewFire(t, True, sent_at)
            # else: handed on and due: shown below only while its row says it waits
        for t, created in queued.items():
            shown[t] = PreviewFire(t, True, created or current.sent_time(t))
        fires = [shown[t] for t in sorted(shown)[:count]]
        taken = _taken_away(current.timing, fires, start, count)
        return sorted([*fires, *taken], key=lambda f: f.fire_time)

    def history(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        limit: int = 50,
        cursor: str | None = None,
        state: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> ports.Page[occurrence.Occurrence]:
        """A schedule's occurrences, newest first; those in ``state`` only, and those whose
        fire time is in [since, until), when given.

        Reads: Query on the schedule's partition of the occurrence table, the time range
        a key condition (rows out of it are never read) and the state a filter after the
        read; a filtered page reads on, each read asking for what the page still lacks,
        at most MAX_LIST_READS reads of ``limit`` rows. A first page is empty only when no
        row in the range is in that state, or those reads met none.

        Skipped fires counted in a summary row have no row of their own: a first page
        with ``since`` also holds the summary that counts the fire at ``since`` (one more
        read: the newest row before it), so "what happened to the fire at T" is answered
        by ``since=T``. And it holds the range of skipped fires the schedule itself holds
        while their rows are still to be written (see model.Schedule.skipped), as the
        row they will be. Either may take the page one or two rows past ``limit``."""
        wanted = _page_size(limit)
        one_of(state, OCCURRENCE_STATES)
        only = ports.OccurrenceFilter(since, until, (occurrence.State(state),) if state else ())
        if since is not None and until is not None and since >= until:
            raise errors.ValidationError("must be before 'to'", field="from")
        current = self.get(tenant_id, schedule_id)
        first_page = cursor is None
        found: builtins.list[occurrence.Occurrence] = []
        for _ in range(MAX_LIST_READS):
            page = self.occurrences.history(
                tenant_id,
                schedule_id,
                limit=wanted - len(found),
                cursor=cursor,
                only=only,
            )
            found += page.items
            cursor = page.cursor
            if cursor is None or len(found) == wanted:
                break
        if first_page:
            found = self._with_summaries(current, found, only)
        return ports.Page(found, cursor)

    def _with_summaries(
        self,
        current: model.Schedule,
        found: builtins.list[occurrence.Occurrence],
        only: ports.OccurrenceFilter,
    ) -> builtins.list[occurrence.Occurrence]:
        """``found`` with the summary rows that count fires in the listing's range but are
        keyed before it, and the schedule's held range (see ``history``)."""
        if only.states and occurrence.State.SKIPPED not in only.states:
            return found
        extra: builtins.list[occurrence.Occurrence] = []
        if only.since is not None:
            before = self.occurrences.history(
                current.tenant_id,
                current.schedule_id,
                limit=1,
                only=ports.OccurrenceFilter(until=only.since),
            ).items
            last = before[0].skipped_last if before else None
            if last is not None and last >= only.since:
                extra.append(before[0])
        held = dispatch.held_row(current)
        if held is not None and _overlaps(held, only):
            extra.append(held)
        keys = {r.key for r in found}
        extra = [r for r in extra if r.key not in keys]
        if not extra:
            return found
        return sorted([*found, *extra], key=lambda r: (r.fire_time, r.version), reverse=True)

    # --- one-off jobs ----------------------------------------------------------------------

    def create_job(
        self, tenant_id: str, draft: JobDraft, *, request_key: str | None = None
    ) -> JobView:
        now = self._now()
        job_id = self._new_id(model.JOB_PREFIX, tenant_id, request_key)
        job = self._job(tenant_id, job_id, draft, now)
        stored, created = self._create(job, self._charge(quota.Quota.ACTIVE_JOBS), request_key)
        if not created:
            # A retry (same Idempotency-Key) found the first attempt's job. If that one was
            # to be sent and its request died before the send, its message goes now: a
            # second copy of a message that did go is harmless (the claim is conditional).
            view = self.get_job(tenant_id, stored.schedule_id)
            if view.occurrence is None and view.job.state is model.ScheduleState.COMPLETED:
                self._send_job(view.job, now)
            return view
        if stored.state is model.ScheduleState.COMPLETED:
            self._send_job(stored, now)
        return JobView(stored, None, now)

    def create_jobs(
        self, tenant_id: str, drafts: Sequence[JobDraft], *, request_key: str | None = None
    ) -> builtins.list[JobView]:
        """Create a batch of one-off jobs, all or none: every job is checked before
        anything is written (a bad one is refused naming ``jobs[i].<field>``), the
        active-jobs quota is taken once for the batch (refused whole if the batch would
        pass the limit), the items are written in batch writes, and the jobs due within
        :data:`DIRECT_SEND` are sent, ten a request, before the answer.

        With ``request_key`` (an Idempotency-Key) each job's id is derived from the key
        and its place in the batch, so a retry after any failure finishes the first
        attempt's batch: it writes (and takes units for) only the jobs still missing,
        sends the messages that may not have gone, and answers with the same ids. A batch
        write takes no condition, so the retry must know which exist before it writes: the
        first job is read, then written alone, conditionally, before the others, and a
        retry that finds it there reads the batch's items (one BatchGetItem) instead.

        Requests for 100 jobs due soon: one UpdateItem (the quota), four BatchWriteItem
        and ten SendMessageBatch; with a key, a GetItem and a PutItem (the first job) more."""
        if not 1 <= len(drafts) <= MAX_BATCH:
            raise errors.ValidationError(f"must hold 1 to {MAX_BATCH} jobs", field="jobs")
        now = self._now()
        checked: dict[str, None] = {}  # the batch's jobs mostly share a few targets
        jobs = []
        for index, draft in enumerate(drafts):
            job_id = self._new_id(model.JOB_PREFIX, tenant_id, batch_key(request_key, index))
            try:
                jobs.append(self._job(tenant_id, job_id, draft, now, checked))
            except errors.ValidationError as exc:
                raise within(exc, f"jobs[{index}]") from exc
        charge = self._charge(quota.Quota.ACTIVE_JOBS)
        if request_key is None:
            # Fresh ids: no item has them, so nothing can be overwritten.
            stored = self.schedules.create_many(jobs, charge=charge)
            to_send = _sent_by_create(stored)
        else:
            stored, to_send = self._create_keyed(jobs, charge)
        self._send_jobs(to_send, self._hold_until_send_phase(to_send, now))
        return [JobView(j, None, now) for j in stored]

    def _create_keyed(
        self, jobs: builtins.list[model.Schedule], charge: quota.Charge | None
    ) -> tuple[builtins.list[model.Schedule], builtins.list[model.Schedule]]:
        """Write an Idempotency-Key's batch, or finish its first attempt's: the batch's
        items as stored, and the jobs whose message is to go (those just written and due
        soon, and the first attempt's sent-by-create jobs that no delivery claimed yet,
        whose message may not have gone)."""
        try:
            # The first job alone and conditionally, before the others: when its id is
            # free no earlier attempt wrote any of the batch.
            stored = self.schedules.create_many(jobs, charge=charge, first_new=True)
            return stored, _sent_by_create(stored)
        except errors.AlreadyExists:
            pass
        found = {
            j.schedule_id: j
            for j in self.schedules.get_many([(j.tenant_id, j.schedule_id) for j in jobs])
        }
        missing = self.schedules.create_many(
            [j for j in jobs if j.schedule_id not in found], charge=charge
        )
        earlier = list(found.values())
        found.update((j.schedule_id, j) for j in missing)
        to_send = [*_sent_by_create(missing), *self._unclaimed(earlier)]
        return [found[j.schedule_id] for j in jobs], to_send

    def _unclaimed(self, jobs: builtins.list[model.Schedule]) -> builtins.list[model.Schedule]:
        """Of jobs sent by their create, those no delivery has claimed yet (no row)."""
        keys = {self._fire_key(j): j for j in _sent_by_create(jobs)}
        if not keys:
            return []
        rows = self.occurrences.get_many(list(keys))
        return [job for key, job in keys.items() if key not in rows]

    @staticmethod
    def _fire_time(job: model.Schedule) -> datetime:
        fire_time = schedule.next_fire(job.timing, schedule.EPOCH)
        assert fire_time is not None
        return fire_time

    @classmethod
    def _fire_key(cls, job: model.Schedule) -> str:
        return occurrence.occurrence_key(job.schedule_id, job.version, cls._fire_time(job))

    def _job(
        self,
        tenant_id: str,
        job_id: str,
        draft: JobDraft,
        now: datetime,
        checked: dict[str, None] | None = None,
    ) -> model.Schedule:
        """A job as ``draft`` asks, checked (ValidationError naming the field): sent by
        its create when due within DIRECT_SEND, otherwise due in the index."""
        if (draft.run_at is None) == (draft.delay_seconds is None):
            raise errors.ValidationError(
                "give exactly one of run_at and delay_seconds", field="run_at"
            )
        if draft.run_at is not None:
            if draft.run_at.tzinfo is None:
                raise errors.ValidationError("needs a UTC offset", field="run_at")
            run_at = draft.run_at.astimezone(UTC).replace(microsecond=0)
            model.check_not_past(run_at, now, field="run_at")
        else:
            assert draft.delay_seconds is not None
            if draft.delay_seconds < 0:
                raise errors.ValidationError("must not be negative", field="delay_seconds")
            run_at = (now + timedelta(seconds=draft.delay_seconds)).replace(microsecond=0)
        target_key = json.dumps(draft.target, sort_keys=True, default=str)
        if checked is None or target_key not in checked:
            self._check_target(tenant_id, draft.target)
            if checked is not None:
                checked[target_key] = None
        model.check_deadline(draft.job_class, draft.deadline_seconds)
        spec = schedule.AtSpec(when=run_at)
        job = model.Schedule(
            tenant_id=tenant_id,
            schedule_id=job_id,
            timing=schedule.Timing(spec=spec),
            spec_text=str(spec),
            kind=model.Kind.JOB,
            description=schedule.describe(spec),
            job_class=draft.job_class,
            target=draft.target,
            payload=draft.payload,
            retry=draft.retry,
            deadline_seconds=draft.deadline_seconds,
            # A job due in the past (or while the ticker was down) still runs once.
            misfire=policies.Misfire(policy=policies.MisfirePolicy.FIRE_ONCE),
            next_fire=run_at,
            created_at=now,
            updated_at=now,
        )
        if run_at - now <= DIRECT_SEND:
            # Due within SQS's longest delay: sent now, by its create, so the job never
            # enters the due index (no index write to add it, no advance to take it out).
            job = replace(job, state=model.ScheduleState.COMPLETED, next_fire=None)
        return job

    def _hold_until_send_phase(self, jobs: Sequence[model.Schedule], now: datetime) -> datetime:
        """Wait until :data:`BATCH_SEND_PHASE` into the second, when every job to send is
        due after that moment and its send's way to SQS (a job due now is not held back):
        the clock then, or ``now``. Sends at any phase would be as punctual; this only
        moves the wait from the worker to here, where it costs less."""
        hold = BATCH_SEND_PHASE - now.microsecond / 1_000_000
        if hold <= 0 or not jobs:
            return now
        earliest = min(dispatch.deliver_time(j, self._fire_time(j)) for j in jobs)
        if earliest < now + timedelta(seconds=hold) + dispatch.IN_FLIGHT:
            return now
        self.clock.sleep(hold)
        return self.clock.now()

    def _send_jobs(self, jobs: Sequence[model.Schedule], now: datetime) -> None:
        """Send jobs' fires, ten a request (per class). Written first, sent second, as
        :meth:`_send_job`; a job whose message could not be sent goes into the due index
        (the ticker sends it), and if even that fails the request fails (Unavailable): a
        retry with its Idempotency-Key sends it."""
        pending = []
        for job in jobs:
            fire_time = schedule.next_fire(job.timing, schedule.EPOCH)
            assert fire_time is not None
            pending.append(dispatch.outbound(job, fire_time, now))
        failed = dispatch.send_batches(self.queue, pending, dispatch.DispatchReport())
        for job in jobs:
            if self._fire_key(job) in failed:
                self._due_instead(job)

    def _due_instead(self, job: model.Schedule) -> None:
        """A job whose message did not go: into the due index (its version as written),
        so the ticker sends it."""
        fire_time = schedule.next_fire(job.timing, schedule.EPOCH)
        due = replace(job, state=model.ScheduleState.ACTIVE, next_fire=fire_time)
        with contextlib.suppress(errors.ConflictError):  # cancelled meanwhile
            self.schedules.replace(due, expected_version=job.version)

    def _send_job(self, job: model.Schedule, now: datetime) -> None:
        """Send a job's one fire. Written first, sent second: a message is never ahead of
        the job its worker reads. If the send fails the job goes into the due index (its
        version as written), so the ticker sends it; the create still succeeds."""
        fire_time = schedule.next_fire(job.timing, schedule.EPOCH)
        assert fire_time is not None
        try:
            dispatch.send(
                self.queue, [dispatch.outbound(job, fire_time, now)], dispatch.DispatchReport()
            )
        except errors.Unavailable:
            self._due_instead(job)

    def get_job(self, tenant_id: str, job_id: str) -> JobView:
        job = self.schedules.get(tenant_id, job_id)
        if job is None or job.kind is not model.Kind.JOB:
            raise errors.NotFound(f"job {job_id} not found")
        return self._job_view(job)

    def _job_view(self, job: model.Schedule) -> JobView:
        rows = self.occurrences.history(job.tenant_id, job.schedule_id, limit=1).items
        return JobView(job, rows[0] if rows else None, self._now())

    def cancel_job(self, tenant_id: str, job_id: str) -> JobView:
        """Cancel a job that has not started. Its message, if sent, becomes a no-op: the
        worker's claim is conditional on the row still being queued. A cancelled job
        gives its unit of the active jobs quota back (once, whoever sees it first)."""
        view = self._cancel_job(tenant_id, job_id)
        self.job_ended(view)
        return view

    def job_ended(self, view: JobView) -> bool:
        """Give back a finished job's unit of quota; True if this call gave it back. A
        batch's job gives it back from its holder (the sweep does if this fails)."""
        if self.quotas is None or not view.finished:
            return False
        if view.job.held_in is not None:
            with contextlib.suppress(errors.Unavailable):
                return self.schedules.release_held(view.job)
            return False
        if not view.job.quota_held:
            return False
        return self.schedules.release(
            view.job.tenant_id, view.job.schedule_id, quota.Quota.ACTIVE_JOBS
        )

    def _cancel_job(self, tenant_id: str, job_id: str) -> JobView:
        """A job's cancel races its claim on the row of its one fire: whichever writes
        the row first wins, so a cancel that answers cancelled stopped every run (the
        worker reads no schedule after its claim of a one-off job), and one that came
        too late says so.

        A job whose fire no delivery has claimed may have a message on its way whatever
        its item says: sent by its create, by the sweep, or by the ticker (which sends
        fires without rows, and advances the job after its send), and a create whose
        send failed with an unknown outcome puts the job in the due index too. So the
        cancel writes that fire's row, cancelled, first: the claim writes a row only
        where none exists. Only then does a job in the due index leave it (cancelled, a
        version on, so a ticker that read it before cannot advance it either)."""
        view = self.get_job(tenant_id, job_id)
        job, row = view.job, view.occurrence
        cancelled_before = (
            job.state is model.ScheduleState.CANCELLED
            if row is None
            else row.state is occurrence.State.CANCELLED
        )
        if cancelled_before and job.state is not model.ScheduleState.ACTIVE:
            return view  # nothing left to do (an active one still leaves the due index)
        now = self._now()
        if row is None:
            row = self._cancel_fire(job, now)
            if row is None:  # expired meanwhile: past any message's life, nothing to stop
                return self.get_job(tenant_id, job_id)
        if row.state is occurrence.State.RUNNING and row.execution and self.long_jobs:
            # A long job: stop its execution, then record it cancelled.
            if not self.long_jobs.cancel(row):
                raise errors.ConflictError(f"job {job_id} finished meanwhile")
            return self.get_job(tenant_id, job_id)
        if row.state is not occurrence.State.CANCELLED:
            if row.state not in occurrence.CLAIMABLE:
                # Queued, or failed with a retry to come, can be cancelled; a running
                # short job finishes its attempt, and a settled one is past changing.
                raise errors.ConflictError(f"job {job_id} is {row.state.value}: too late to cancel")
            moved = row.moved(occurrence.State.CANCELLED, finished_at=now, exit_reason="cancelled")
            if not self.occurrences.transition(moved, expected_state=row.state):
                raise errors.ConflictError(f"job {job_id} started meanwhile: too late to cancel")
        if job.state is model.ScheduleState.ACTIVE:
            # Its fire cancelled, the job leaves the due index (the ticker would only send
            # a message that finds the row cancelled).
            cancelled = replace(
                job,
                state=model.ScheduleState.CANCELLED,
                next_fire=None,
                version=job.version + 1,
                updated_at=now,
            )
            try:
                self.schedules.replace(cancelled, expected_version=job.version)
            except errors.ConflictError:
                # Changed since read: another cancel, or the job's unit given back (by a
                # delivery that found the row cancelled). Read again; the row stands.
                return self._cancel_job(tenant_id, job_id)
        return self.get_job(tenant_id, job_id)

    def _cancel_fire(self, job: model.Schedule, now: datetime) -> occurrence.Occurrence | None:
        """Write the job's one fire's row, cancelled, where none exists; the row that
        stands: this one, or the one a delivery (or another cancel) wrote first. The key
        is the one every message of the job carries: the version the job has until it is
        cancelled (the ticker's advance keeps it), and its one fire time."""
        fire_time = schedule.next_fire(job.timing, schedule.EPOCH)
        assert fire_time is not None
        cancelled = dispatch.row_for(job, fire_time, now).moved(
            occurrence.State.CANCELLED, finished_at=now, exit_reason="cancelled"
        )
        if self.occurrences.put_new(cancelled):
            return cancelled
        # Read by its key, consistently: the history the job's view reads may not show
        # a row written a moment ago.
        return self.occurrences.get(cancelled.key)

    def heartbeat_job(
        self, tenant_id: str, job_id: str, progress: dict[str, Any] | None
    ) -> JobView:
        """A running long job's own process says it is alive, and how far it got."""
        view = self.get_job(tenant_id, job_id)
        if view.occurrence is None or self.long_jobs is None:
            raise errors.ConflictError(f"job {job_id} is not a running long job")
        self.long_jobs.heartbeat(view.occurrence, progress)
        return self.get_job(tenant_id, job_id)

    # --- dead letters ----------------------------------------------------------------------

    def dead_letters(
        self, tenant_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> ports.Page[occurrence.Occurrence]:
        return self.occurrences.dead_letters(tenant_id, limit=_page_size(limit), cursor=cursor)

    def redrive(self, tenant_id: str, key: str) -> occurrence.Occurrence:
        """Give a dead occurrence a new run: queued again, attempts from zero, sent now."""
        try:
            row = self.occurrences.get(key)
        except errors.ValidationError:
            row = None
        if row is None or row.tenant_id != tenant_id:
            raise errors.NotFound("no such dead letter")
        if row.state is occurrence.State.QUEUED and row.exit_reason == "redriven":
            # A redrive whose send failed (or a retried request): send it again; the
            # conditional claim makes a second message harmless.
            self._send_row(row)
            return row
        if row.state is not occurrence.State.DEAD:
            raise errors.ConflictError(f"the occurrence is {row.state.value}, not dead")
        queued = row.moved(
            occurrence.State.QUEUED,
            attempts=0,
            exit_reason="redriven",
            started_at=None,
            finished_at=None,
            result=None,
            in_progress_until=None,
            execution=None,
            task_token=None,
            generation=row.generation + 1,
        )
        if not self.occurrences.transition(queued, expected_state=occurrence.State.DEAD):
            raise errors.ConflictError("the dead letter was redriven meanwhile")
        self._send_row(queued)
        return queued

    def _unsent(self, row: occurrence.Occurrence) -> None:
        """A trigger whose message did not go (or may not have): the request fails, and
        its row must not stay queued with nothing on its way. It is settled skipped; a
        message that went out after all finds it so and runs nothing, and the client's
        retry is a trigger of its own. Best effort: the request fails either way."""
        skipped = row.moved(
            occurrence.State.SKIPPED, finished_at=self._now(), exit_reason=occurrence.NOT_SENT
        )
        with contextlib.suppress(errors.Unavailable):
            self.occurrences.transition(skipped, expected_state=occurrence.State.QUEUED)

    def _send_row(self, row: occurrence.Occurrence) -> None:
        message = ports.OutboundMessage(body=dispatch.job_message(row))
        dispatch.send(
            self.queue,
            [dispatch.Outbound(row.job_class, row.key, message)],
            dispatch.DispatchReport(),
        )

    # --- helpers ---------------------------------------------------------------------------

    def _now(self) -> datetime:
        return self.clock.now()

    def _check_target(self, tenant_id: str, target: dict[str, Any]) -> None:
        """Refuse, at registration, a target no attempt could call."""
        target_rules.check(target, tenant_id=tenant_id, policy=self.egress, aws=self.aws_targets)
        kind = target.get("type")
        known = self.handlers
        if kind == "python" and known is not None and target.get("handler") not in known:
            raise errors.ValidationError(
                f"no handler {target.get('handler')!r} is registered in this deployment",
                field="target.handler",
            )
        if kind == "workflow":
            self._check_workflow(tenant_id, target)

    def _check_workflow(self, tenant_id: str, target: dict[str, Any]) -> None:
        if self.workflows is None:
            raise errors.ValidationError("this deployment runs no workflows", field="target.type")
        workflow_id = str(target.get("workflow_id"))
        if not self.workflows.exists(tenant_id, workflow_id):
            raise errors.ValidationError(
                f"no workflow {workflow_id!r} is registered", field="target.workflow_id"
            )
        version = target.get("version")
        if version is not None and not self.workflows.exists(tenant_id, workflow_id, version):
            raise errors.ValidationError(
                f"workflow {workflow_id!r} has no version {version}", field="target.version"
            )

    def _build(
        self,
        tenant_id: str,
        schedule_id: str,
        draft: ScheduleDraft,
        now: datetime,
        version: int,
        skips: frozenset[datetime] = frozenset(),
    ) -> model.Schedule:
        self._check_target(tenant_id, draft.target)
        model.check_deadline(draft.job_class, draft.deadline_seconds)
        try:
            spec, timezone = _spec_and_zone(draft, now)
            timing = schedule.Timing(
                spec=spec,
                timezone=timezone,
                dst=draft.dst,
                start=draft.start,
                end=draft.end,
                exclude=draft.exclude,
                skips=skips,
            )
            after = now
            if isinstance(spec, schedule.AtSpec):
                # The rule of a job's run_at: an instant within the grace still fires (at
                # once), one before it is refused as in the past, not as "never fires".
                once = schedule.next_fire(
                    schedule.Timing(spec=spec, timezone=timezone, dst=draft.dst),
                    schedule.EPOCH,
                )
                if once is not None:
                    model.check_not_past(once, now, field="spec")
                    after = min(once, now) - timedelta(microseconds=1)
            never = timing.excludes_any and schedule.next_fire(timing, after) is None
            if never and schedule.next_fire(timing.unexcluded, after) is not None:
                raise errors.ScheduleNeverFires(
                    "excludes every fire the spec has left", field="exclude"
                )
            first = schedule.first_fire(timing, after)
        except OverflowError as exc:
            # A time past what a datetime holds, from a spec the parsers let through: bad
            # input, said so before anything is written.
            raise errors.ValidationError("gives a time out of range", field="spec") from exc
        return model.Schedule(
            tenant_id=tenant_id,
            schedule_id=schedule_id,
            timing=timing,
            spec_text=str(spec),
            description=schedule.describe(spec, timezone),
            job_class=draft.job_class,
            target=draft.target,
            payload=draft.payload,
            retry=draft.retry,
            misfire=draft.misfire,
            overlap=draft.overlap,
            jitter_seconds=draft.jitter_seconds,
            deadline_seconds=draft.deadline_seconds,
            version=version,
            next_fire=first,
            updated_at=now,
        )


def _taken_away(
    timing: schedule.Timing, fires: Sequence[PreviewFire], after: datetime, count: int
) -> builtins.list[PreviewFire]:
    """The spec's fires among a preview's (up to its last, ``count`` at most) that the
    schedule's skips and exclude list take away, marked why, for the preview to show."""
    if not timing.excludes_any:
        return []
    # Fewer fires than asked: the schedule ends, or its exclusions leave it none for years.
    last = fires[-1].fire_time if len(fires) == count else timing.end
    until = last or after + timedelta(days=exclusions.MAX_EXCLUDED_RUN_DAYS)
    return [
        PreviewFire(t, False, excluded="skipped" if t in timing.skips else "excluded")
        for t in schedule.excluded_fires(timing, after, until=until, limit=count)
    ]


def _spec_and_zone(draft: ScheduleDraft, now: datetime) -> tuple[schedule.Spec, str]:
    """The draft's spec, parsed or translated, and the schedule's zone: the one a phrase
    ends with (``... in Europe/London``) unless ``timezone`` names another."""
    if not natural.looks_natural(draft.spec):
        return schedule.parse_spec(draft.spec), draft.timezone
    translation = natural.translate(draft.spec, now, draft.timezone)
    named = translation.timezone
    if named is None or named == draft.timezone:
        return translation.spec, draft.timezone
    # UTC is timezone's default: a phrase's zone is taken over it, never over another.
    if draft.timezone != "UTC":
        raise errors.ValidationError(
            f"is {draft.timezone!r} but the spec says 'in {named}': give the zone once",
            field="timezone",
        )
    return translation.spec, named


def _sent_by_create(jobs: Sequence[model.Schedule]) -> builtins.list[model.Schedule]:
    """The jobs due within DIRECT_SEND: their create sends them (they are out of the due
    index)."""
    return [j for j in jobs if j.state is model.ScheduleState.COMPLETED]


def batch_key(request_key: str | None, index: int) -> str | None:
    """The key a batch's job ``index`` derives its id from: the request's own key and
    the job's place, never the id a single create with that key gets."""
    return None if request_key is None else f"{request_key}\nbatch\n{index}"


def within(exc: errors.ValidationError, where: str) -> errors.ValidationError:
    """The same refusal, its field named inside ``where`` (``jobs[3].target.url``)."""
    refused = copy.copy(exc)
    refused.field = f"{where}.{exc.field}" if exc.field else where
    return refused


def one_of(value: str | None, allowed: tuple[str, ...], field: str = "state") -> str | None:
    """A listing's filter, refused (naming ``field``, the values listed) unless known."""
    if value is not None and value not in allowed:
        listed = ", ".join(repr(a) for a in allowed)
        raise errors.ValidationError(f"must be one of {listed}", field=field)
    return value


def _page_size(limit: int) -> int:
    if not 1 <= limit <= MAX_PAGE:
        raise errors.ValidationError(f"must be 1 to {MAX_PAGE}", field="limit")
    return limit


def _overlaps(row: occurrence.Occurrence, only: ports.OccurrenceFilter) -> bool:
    """Does the row count a fire whose time is in the filter's [since, until)?"""
    last = row.skipped_last or row.fire_time
    return (only.since is None or last >= only.since) and (
        only.until is None or row.fire_time < only.until
    )


# An update counts the old version's unsent fires up to this many (a per-second schedule
# whose ticker was down for a day); a longer outage's earliest fires go unrecorded.
MAX_VOIDED_FIRES = 100_000


def _unsent_fires(current: model.Schedule, now: datetime) -> policies.SkippedRange | None:
    """The fires of ``current`` that were due before ``now`` and never handed on: from its
    next fire, when that has passed, to the last fire before now; for a paused schedule,
    those since its resume point (its resume would have had its misfire policy decide
    them, and the new version starts its pause over)."""
    if current.next_fire is not None:
        if current.next_fire >= now:
            return None
        after = current.next_fire - timedelta(microseconds=1)
    elif current.state is model.ScheduleState.PAUSED and current.paused_at is not None:
        after = current.paused_at
    else:
        return None
    fires = list(
        schedule.fires(
            current.timing,
            after,
            until=now - timedelta(microseconds=1),
            limit=MAX_VOIDED_FIRES,
        )
    )
    if not fires:
        return None
    return policies.SkippedRange(
        current.version,
        fires[0],
        fires[-1],
        len(fires),
        reason=f"skipped: voided by version {current.version + 1}",
        at=now,
    )
