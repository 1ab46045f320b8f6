"""The worker: one queue message in, one occurrence run (or knowingly not run) out.

Per message, in order:
1. The occurrence key (no key: a loud failure, never a run without idempotency).
2. Still wanted? Cancel, pause, delete and update are checks of the row and the schedule
   version, here at the last moment; an unwanted fire is recorded as skipped.
3. Time: an invocation that cannot give the job its deadline, where a fresh one would,
   sends the fire back to the queue (no attempt spent).
4. Overlap at run time: a ``forbid``/``buffer_one`` fire is skipped (or held) while
   another run of its schedule holds the schedule's run slot.
5. A tenant's share of the class's invocations as really running (services.pool), and
   a tenant slot (per-tenant concurrency): none free -> deferred, never run over the
   limit, never dropped.
6. The run, under Powertools idempotency on the occurrence row (claim, then outcome), with
   the job's deadline. Every slot taken for it is given back on every path that does
   not leave it to be handed on, whichever call fails (see _give_back_slots).
7. A failed attempt is retried by sending the message again with the backoff as its delay
   (a fresh message: SQS's receive count, which drives the dead-letter redrive, counts
   deliveries that crashed, not attempts that failed); past the attempt cap it is dead.

Deferrals and retries re-send and acknowledge the original, so they never count towards
the queue's redrive to its dead-letter queue; that one is left for messages that crash
the worker itself, a poison the occurrence row cannot even record.
"""

from __future__ import annotations

import enum
import functools
import math
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
)

from fireline import ports
from fireline.adapters.idempotency import OccurrenceIdempotency
from fireline.domain import errors, model, occurrence, policies, quota, workflow
from fireline.services import claims, dispatch, pool, targets, worker_dispatch, workflows
from fireline.services import long_jobs as long_jobs_service

logger = Logger(service="fireline", child=True)

DEFER_SECONDS = 10
# The ticker's delays put a fire on the queue at most a second early; a little more
# covers the clocks of the ticker's and the worker's hosts.
EARLY_HOLD_SECONDS = 2.0
# A slot outlives the job's deadline by this much, then frees itself (a crashed holder).
SLOT_MARGIN_SECONDS = 60
# buffer_one's waiting fire keeps the buffer this many of its deferrals long.
BUFFER_HOLD_DEFERRALS = 3
# Stop a job this long before the invocation would be killed, to record its outcome.
STOP_MARGIN_SECONDS = 5.0
# A fire this invocation cannot give its deadline goes back to the queue (see
# Worker._short_of_time) when a fresh invocation would give it more than this much more:
# the time a record may spend before its run (an early fire's hold, the batch's reads).
TIME_SLACK_SECONDS = 3.0
REQUEUE_FOR_TIME_DELAY_SECONDS = 0
# ...at most this many times for one fire, then it runs with what it is given.
MOST_REQUEUES_FOR_TIME = 3
_TIME_REQUEUES = "time_requeues"  # the message's count of those
# How long a worker keeps the register of tenant limit overrides before reading it again
# (see Worker._take_slot): a limit set on a tenant that runs unlimited applies, at the
# latest, to the runs that start this long after the change.
OVERRIDES_CACHE_SECONDS = 10.0


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


# Why a run waits for a tenant slot (the reason its deferral logs).
_AT_LIMIT = "tenant limit"
_AT_CLASS_SHARE = "tenant share of the class"
_AT_INVOCATION_SHARE = "tenant share of the class's running invocations"

_PAST_CAP = "error: the last attempt ended without an outcome"
# Outcomes whose row no run ever leaves: the run's tenant slots are handed on, not given back.
_HANDED_ON = frozenset(s.value for s in occurrence.TERMINAL)

# Results after which the occurrence has its outcome (or already had it).
_SETTLING = frozenset({Result.SUCCEEDED, Result.DEAD, Result.SKIPPED, Result.SETTLED})


@dataclass(frozen=True)
class WorkerConfig:
    job_class: str = "default"
    tenant_limit: int = quota.DEFAULT_LIMIT
    defer_seconds: int = DEFER_SECONDS
    # A message visible before its fire time is held until then, up to this long.
    early_hold_seconds: float = EARLY_HOLD_SECONDS
    # The class's maximum concurrency (its workers' invocations; the long class: its
    # runners'). A tenant runs at most quota.class_limit of it at once, so the rest is
    # left to other tenants. 0: not shared out (the tenant limit alone applies).
    class_max_concurrency: int = 0
    # One-off jobs hold a unit of their tenant's active jobs quota, given back at their end.
    jobs_counted: bool = False
    overrides_cache_seconds: float = OVERRIDES_CACHE_SECONDS
    # This worker's container, in its class's register of live containers: a tenant
    # occupies at most its share of the class's invocations as really running (see
    # services.pool). None: not shared out by invocations (the configured size alone).
    pool_member: str | None = None
    pool_refresh_seconds: float = pool.REFRESH_SECONDS

    @property
    def class_limit(self) -> int:
        return quota.class_limit(self.class_max_concurrency)


@dataclass(frozen=True)
class _Ended:
    """A one-off job whose run has its outcome: its unit of quota is to be given back."""

    tenant_id: str
    schedule_id: str


class _Reused(tuple[int, ...]):
    """Tenant slots the occurrence held before this delivery (see Worker._held_already).
    A delivery whose claim is refused does not give them back: the delivery that holds
    the claim may be running on them."""


class _NoMetrics:
    def add_metric(self, name: str, unit: str, value: float) -> None:
        return None


class _Tally:
    """The worker's metrics, its counts summed until ``flush`` (the end of a batch, or of
    a single message): one data point per count in place of one per fire, each a call to
    Powertools' add_metric (which checks, formats and appends it). The sums are the same;
    other units (StartLag, a distribution whose percentiles are alarmed on) go out one
    value per fire as they come."""

    def __init__(self, metrics: ports.Metrics) -> None:
        self.inner = metrics
        self._counts: dict[str, float] = {}
        self._lock = threading.Lock()

    def add_metric(self, name: str, unit: str, value: float) -> None:
        if unit != "Count":
            self.inner.add_metric(name, unit, value)
            return
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + value

    def flush(self) -> None:
        with self._lock:
            counts, self._counts = self._counts, {}
        for name, total in counts.items():
            self.inner.add_metric(name, "Count", total)


class Prefetch:
    """A batch's occurrence rows and schedules, read together at its start: a
    BatchGetItem per table for the batch in place of a GetItem per record for each.
    Eventually consistent, as the single reads they stand for (see ``Worker._read_row``
    and ``Worker._job_for``): however old, every decision taken on them is checked
    again as the single reads' are.

    A row's answer serves one delivery: a second delivery of the same key in the batch
    reads the row itself, after the first may have written it. A schedule's answer
    serves every fire of it in the batch. A key not asked reads on its own."""

    def __init__(
        self,
        rows: Mapping[str, occurrence.Occurrence | None] | None = None,
        schedules: Mapping[tuple[str, str], model.Schedule | None] | None = None,
    ) -> None:
        self._rows = dict(rows or {})
        self._schedules = dict(schedules or {})
        self._lock = threading.Lock()

    def row(
        self, key: str, read: Callable[[], occurrence.Occurrence | None]
    ) -> occurrence.Occurrence | None:
        """The row's prefetched answer (used up), else ``read()``."""
        with self._lock:
            if key in self._rows:
                return self._rows.pop(key)
        return read()

    def schedule(
        self, tenant_id: str, schedule_id: str, read: Callable[[], model.Schedule | None]
    ) -> model.Schedule | None:
        """The schedule's prefetched answer, else ``read()``."""
        if (tenant_id, schedule_id) in self._schedules:  # never changed after the batch read
            return self._schedules[(tenant_id, schedule_id)]
        return read()

    def known_schedule(self, tenant_id: str, schedule_id: str) -> model.Schedule | None:
        """The schedule's prefetched answer, or None where none was read (nothing read)."""
        return self._schedules.get((tenant_id, schedule_id))


# Outside a batch (a redelivery handled alone, a tool): every read is the record's own.
_NOTHING_PREFETCHED = Prefetch()


class Worker:
    def __init__(
        self,
        *,
        schedules: ports.ScheduleStore,
        occurrences: ports.OccurrenceStore,
        queue: ports.WorkQueue,
        slots: ports.SlotStore,
        clock: ports.Clock,
        runner: targets.TargetRunner,
        config: WorkerConfig | None = None,
        metrics: ports.Metrics | None = None,
        rng: random.Random | None = None,
        long_jobs: long_jobs_service.LongJobs | None = None,
        nodes: workflows.NodeJobs | None = None,
    ) -> None:
        self.schedules = schedules
        self.occurrences = occurrences
        self.queue = queue
        self.slots = slots
        self.clock = clock
        self.runner = runner
        self.config = config or WorkerConfig()
        self.metrics = _Tally(metrics or _NoMetrics())
        self.rng = rng or random.Random()
        self.long_jobs = long_jobs
        self.nodes = nodes
        # The register of limit overrides as last read, and until when (the clock's
        # monotonic seconds) it is used; None: unknown (no register yet, or a failed read).
        self._overrides: Mapping[str, int] | None = None
        self._overrides_until = -math.inf
        self._overrides_lock = threading.Lock()
        self._told_unbuilt = False
        # The longest an invocation of this worker has had at its start (see
        # _note_invocation); until one is seen, nothing is decided on it.
        self._longest_invocation_ms = 0
        # The class's invocations as really running, and each tenant's share of them:
        # for a class whose jobs run in the worker's own invocations (a long job runs in
        # its runner's, which the configured size counts).
        self._pool = (
            pool.Pool(
                slots=slots,
                clock=clock,
                job_class=self.config.job_class,
                member=self.config.pool_member,
                configured=self.config.class_max_concurrency,
                refresh_seconds=self.config.pool_refresh_seconds,
            )
            if self.config.pool_member
            and self.config.class_max_concurrency > 0
            and long_jobs is None
            else None
        )
        # Powertools idempotency, set up once for every record: its configuration, the
        # persistence layer (which keeps each record's claim per thread) and the guarded
        # run. Built per record, they were a good part of a fire's CPU.
        self._idempotency = OccurrenceIdempotency(self.occurrences, self.clock)
        claim_config = IdempotencyConfig(
            event_key_jmespath="occurrence_key", raise_on_no_idempotency_key=True
        )
        # Powertools reads the remaining time from a Lambda context: the layer answers
        # with the current record's remaining_ms (in Lambda, the context's own).
        claim_config.register_lambda_context(self._idempotency)  # type: ignore[arg-type]
        self._guarded_run = idempotent_function(
            self._run_claimed,
            data_keyword_argument="message",
            persistence_store=self._idempotency,
            config=claim_config,
        )

    def handle_batch(
        self,
        bodies: Sequence[dict[str, Any]],
        *,
        remaining_ms: Callable[[], int],
        parallel: ports.Parallel,
        receive_counts: Sequence[int] | None = None,
        dispatcher: worker_dispatch.Dispatcher | None = None,
    ) -> list[Result | Exception]:
        """Process a batch's messages side by side: each record's deadline counts from
        its own start, so its place in the batch never decides its outcome. Each one's
        Result, or the exception it raised (Busy: leave it to SQS), in order.
        ``receive_counts``: SQS's ApproximateReceiveCount of each message, where known.

        With a ``dispatcher`` the records start within its bounds, earliest fire first,
        Python jobs in its compute lane (see services.worker_dispatch); the ones it left
        unstarted as the invocation neared its end are sent again, unrun (RETURNED; see
        :meth:`_hand_back`). Without one, every record runs at once on ``parallel``,
        which also makes the batch's reads.

        The batch's rows and schedules are read first, together (see Prefetch); the
        one-off jobs the batch settles give their units of quota back together after
        the runs, one give-back per tenant (see :meth:`_give_back`). Its counts go out
        summed, one data point per metric (see _Tally)."""
        self._note_invocation(remaining_ms)
        self._refresh_overrides()
        prefetched = self.prefetch(bodies, parallel, receive_counts)
        ended: list[_Ended | None] = [None] * len(bodies)

        def run(index: int, body: dict[str, Any]) -> Result:
            result, ended[index] = self._process(body, remaining_ms, prefetched)
            return result

        calls = [functools.partial(run, index, body) for index, body in enumerate(bodies)]
        try:
            if dispatcher is None:
                outcomes = parallel.run(calls)
            else:
                outcomes = dispatcher.run(
                    [
                        worker_dispatch.Job(call, *self._place(body, prefetched))
                        for call, body in zip(calls, bodies, strict=True)
                    ]
                )
                outcomes = self._hand_back(bodies, outcomes)
            return self._give_back(outcomes, ended)
        finally:
            if self._pool is not None:
                self._pool.end_invocation()
            self.metrics.flush()

    def _place(
        self, body: dict[str, Any], prefetched: Prefetch
    ) -> tuple[worker_dispatch.Lane, float, float]:
        """A record's lane (a Python job is compute: see services.worker_dispatch), its
        place in the batch (its fire time) and how much of the invocation it needs left
        to start: its whole deadline, the margin to record its outcome and its hold until
        its fire time, so that starting late in a batch never shortens its run. Lane and
        deadline are read from the batch's read of the schedule; a record it did not read
        (a workflow node, a failed batch read) goes in the remote lane with the
        dispatcher's reserve, and its Python run, if it is one, still waits for a vCPU
        (the runner's gate, see worker_dispatch.gated)."""
        key = body.get("occurrence_key")
        try:
            parsed = occurrence.parse_key(key) if isinstance(key, str) else None
        except errors.ValidationError:
            parsed = None
        if parsed is None:  # refused at once by its own handling: first, it costs nothing
            return worker_dispatch.Lane.REMOTE, -math.inf, 0.0
        tenant_id = body.get("tenant_id")
        item = (
            prefetched.known_schedule(tenant_id, parsed.schedule_id)
            if isinstance(tenant_id, str)
            else None
        )
        if item is None:
            return worker_dispatch.Lane.REMOTE, parsed.fire_time.timestamp(), 0.0
        python = item.target.get("type") == "python"
        lane = worker_dispatch.Lane.COMPUTE if python else worker_dispatch.Lane.REMOTE
        needs = (
            0.0  # a long job's record only starts its execution
            if self.long_jobs is not None
            else model.deadline_for(item.job_class, item.deadline_seconds)
            + STOP_MARGIN_SECONDS
            + self.config.early_hold_seconds
        )
        return lane, parsed.fire_time.timestamp(), needs

    def _hand_back(
        self, bodies: Sequence[dict[str, Any]], outcomes: list[Result | Exception]
    ) -> list[Result | Exception]:
        """Send the records the dispatcher left unstarted to the queue again, at once,
        and acknowledge them (RETURNED). Not left to SQS as failures: those would come
        back only after the queue's visibility timeout (minutes), and each such return
        counts as a receive towards the queue's redrive to its dead-letter queue, so a
        record unlucky enough to sit at the end of five large batches would be
        dead-lettered without ever running. A fresh message counts no receive and no
        attempt (nothing claimed the row). A record whose new message could not be sent
        stays a failure for SQS to redeliver: never dropped."""
        answered = list(outcomes)
        unstarted = [
            i
            for i, outcome in enumerate(outcomes)
            if isinstance(outcome, worker_dispatch.NotStarted)
            and isinstance(bodies[i].get("occurrence_key"), str)
        ]
        if not unstarted:
            return answered
        pending = [
            dispatch.Outbound(
                self.config.job_class,
                bodies[i]["occurrence_key"],
                ports.OutboundMessage(body=bodies[i], delay_seconds=0),
            )
            for i in unstarted
        ]
        try:
            failed = dispatch.send_batches(self.queue, pending, dispatch.DispatchReport())
        except Exception as exc:  # whatever failed, SQS redelivers them
            logger.warning(
                "unstarted records not sent again",
                extra={"action": "worker.hand_back", "error": f"{type(exc).__name__}: {exc}"},
            )
            return answered
        for i in unstarted:
            if bodies[i]["occurrence_key"] not in failed:
                answered[i] = Result.RETURNED
        returned = len(unstarted) - sum(1 for i in unstarted if answered[i] is not Result.RETURNED)
        logger.info(
            "unstarted records sent again",
            extra={
                "action": "worker.hand_back",
                "returned": returned,
                "kept": len(unstarted) - returned,
            },
        )
        self.metrics.add_metric("Returned", "Count", returned)
        return answered

    def prefetch(
        self,
        bodies: Sequence[dict[str, Any]],
        parallel: ports.Parallel,
        receive_counts: Sequence[int] | None = None,
    ) -> Prefetch:
        """The rows and schedules of a batch's fires, a batch read per table side by
        side. A message this cannot read for (no key, a long job's outcome) reads what
        it needs itself, and so does every record if a batch read fails: the reads
        are a saving, never a new way for a batch to fail.

        A fire whose sender wrote no row (the message says ``no_row``: the ticker's, a
        one-off job's), on its first delivery, has no row to read unless another message
        for it came first (a ticker's redo after a crash) or a cancel wrote it: its row
        is taken as absent, unread. Every answer of the read it saves is decided again
        by the claim, which writes the row only where none exists and refuses a row
        another delivery holds or settled (see ``Worker._read_row``)."""
        counts = receive_counts if receive_counts is not None else [0] * len(bodies)
        keys: list[str] = []
        unwritten: list[str] = []
        schedule_keys: list[tuple[str, str]] = []
        for body, count in zip(bodies, counts, strict=True):
            key = body.get("occurrence_key")
            if body.get("type") == "outcome" or not isinstance(key, str):
                continue
            try:
                schedule_id = occurrence.parse_key(key).schedule_id
            except errors.ValidationError:
                continue  # the record's own handling refuses it
            (unwritten if count == 1 and body.get("no_row") is True else keys).append(key)
            tenant_id = body.get("tenant_id")
            if isinstance(tenant_id, str) and tenant_id and not workflow.is_node_key(key):
                schedule_keys.append((tenant_id, schedule_id))
        if not keys and not unwritten:
            return _NOTHING_PREFETCHED
        reads: list[Callable[[], Any]] = []
        if keys:
            reads.append(functools.partial(self.occurrences.get_many, keys, consistent=False))
        if schedule_keys:
            reads.append(
                functools.partial(self.schedules.get_many, schedule_keys, consistent=False)
            )
        found = parallel.run(reads) if reads else []
        rows = found.pop(0) if keys else {}
        schedules = found[0] if found else []
        for failed in (r for r in (rows, schedules) if isinstance(r, Exception)):
            logger.warning(
                "batch read failed",
                extra={"action": "worker.prefetch", "error": f"{type(failed).__name__}: {failed}"},
            )
        return Prefetch(
            {
                **dict.fromkeys(unwritten),
                **({} if isinstance(rows, Exception) else {k: rows.get(k) for k in keys}),
            },
            {}
            if isinstance(schedules, Exception)
            else {
                **dict.fromkeys(schedule_keys),
                **{(s.tenant_id, s.schedule_id): s for s in schedules},
            },
        )

    def handle(
        self,
        body: dict[str, Any],
        *,
        remaining_ms: Callable[[], int],
        prefetched: Prefetch = _NOTHING_PREFETCHED,
    ) -> Result:
        """Process one message. Raises Busy (redeliver later) or MissingIdempotencyKey."""
        self._note_invocation(remaining_ms)
        self._refresh_overrides()
        try:
            result, ended = self._process(body, remaining_ms, prefetched)
            if ended is not None:
                self.schedules.release(ended.tenant_id, ended.schedule_id, quota.Quota.ACTIVE_JOBS)
            return result
        finally:
            if self._pool is not None:
                self._pool.end_invocation()
            self.metrics.flush()

    def _process(
        self,
        body: dict[str, Any],
        remaining_ms: Callable[[], int],
        prefetched: Prefetch = _NOTHING_PREFETCHED,
    ) -> tuple[Result, _Ended | None]:
        """One message's outcome, and the one-off job whose unit of quota it frees."""
        key = claims.occurrence_key_of(body)
        result = self._handle(key, body, remaining_ms, prefetched)
        if result in _SETTLING and self.nodes is not None and workflow.is_node_key(key):
            # A workflow node settled (or this is a repeat of its outcome, whose event
            # may have been lost): tell the controller. It applies each outcome once.
            self.nodes.finished(key)
        ended = None
        if result in _SETTLING and self.config.jobs_counted:
            ended = self._job_ended(key, body, result)
        return result, ended

    def _give_back(
        self, outcomes: list[Result | Exception], ended: Sequence[_Ended | None]
    ) -> list[Result | Exception]:
        """Give back the units of the one-off jobs a batch settled: per tenant, each
        job's mark removed (conditionally: a repeat finds none) and then one give-back
        for all the marks removed, instead of one per job. A crash or an error in
        between leaves the count too high (a create refused early), never too low (a
        tenant over its limit). The messages of a tenant whose give-back failed are
        reported failed, so SQS delivers them again; the redelivery finds each row
        settled and gives back the units whose mark is still there."""
        by_tenant: dict[str, list[int]] = {}
        for index, job in enumerate(ended):
            if job is not None and not isinstance(outcomes[index], Exception):
                by_tenant.setdefault(job.tenant_id, []).append(index)
        answered = list(outcomes)
        for tenant_id, indexes in by_tenant.items():
            ids = [ended[i].schedule_id for i in indexes]  # type: ignore[union-attr]
            try:
                self.schedules.release_many(tenant_id, ids, quota.Quota.ACTIVE_JOBS)
            except errors.Unavailable as exc:
                for index in indexes:
                    answered[index] = exc
        return answered

    def _job_ended(self, key: str, body: dict[str, Any], result: Result) -> _Ended | None:
        """A one-off job's occurrence has its outcome: its unit of the active jobs quota
        is to be given back. The release is conditional on the job's mark, so a repeat
        (this message redelivered after a crash before the release, a cancel that saw it
        first) gives nothing back twice; and a crash before it is repaired by that
        redelivery (the message is acknowledged only after the release)."""
        schedule_id = occurrence.parse_key(key).schedule_id
        if not model.is_job_id(schedule_id) or body.get("in_holder") is True:
            return None  # a schedule's fire, or a batch's job (the sweep gives its unit back)
        tenant_id = body.get("tenant_id")
        if result is Result.SETTLED or body.get("type") == "outcome" or not tenant_id:
            # Settled before (or a long job's outcome message): the row says whether the
            # job has ended, and whose it is.
            row = self.occurrences.get(key)
            if row is None or row.state not in occurrence.SETTLED:
                return None  # a long job whose execution still runs: its outcome comes later
            tenant_id = row.tenant_id
        return _Ended(str(tenant_id), schedule_id)

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
        try:
            entered = not shared or self._enter_pool(item.tenant_id, remaining_ms())
        except Exception:
            self._give_back_slots(item, key, (), took_run)
            raise
        if not entered:
            self._give_back_slots(item, key, (), took_run)
            return self._defer(body, row, _AT_INVOCATION_SHARE, stored=stored)
        try:
            return self._run_in_slots(
                body, row, item, deadline, held_for, now, took_run, remaining_ms, stored=stored
            )
        finally:
            if shared:
                self._leave_pool(item.tenant_id)

    def _enter_pool(self, tenant_id: str, remaining_ms: int) -> bool:
        assert self._pool is not None
        return self._pool.enter(tenant_id, remaining_ms)

    def _leave_pool(self, tenant_id: str) -> None:
        assert self._pool is not None
        self._pool.leave(tenant_id)

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
    ) -> Result:
        """The run, once its overlap allows it (the run slot ``took_run``) and its share
        of the class's invocations: the tenant slots, then the run or the long job's
        start."""
        key = row.key
        try:
            slot = self._take_slot(item.tenant_id, key, held_for, now)
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
            outcome = self._run_once(item, row, deadline, remaining_ms, fresh=not stored)
        finally:
            # A run that ended otherwise (a failure to retry, dead, an error) gives its
            # tenant slots back; a finished one leaves them to be handed on (see
            # _take_one). Its run slot is given back either way.
            handed_on = outcome is not None and outcome["state"] in _HANDED_ON
            left_to_holder = outcome is None and isinstance(slot, _Reused)
            self._give_back_slots(item, key, () if handed_on or left_to_holder else slot, took_run)
        if self._idempotency.claimed is None:
            # The claim was refused: another delivery (or a cancel) settled the row
            # first, and Powertools replayed its outcome, already acted on there.
            self.metrics.add_metric("DuplicateDeliveries", "Count", 1)
            return Result.SETTLED
        return self._after(body, row, outcome)

    # --- the invocation's time ---------------------------------------------------------

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

    # --- long jobs --------------------------------------------------------------------------

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
                exit_reason=_PAST_CAP,
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

    def _give_back_slots(
        self, item: model.Schedule, key: str, slot: tuple[int, ...], took_run: bool
    ) -> None:
        """Give back the tenant slots ``slot`` and, if this delivery took it, the
        schedule's run slot: each one tried whatever became of the others, and a failure
        (a throttled delete) logged, never raised. Raised, it would hide the run's outcome
        from what follows (a retry's send) and fail a message whose work is done. A slot
        left held is not left blocking: the next run that needs it reads its holder's row
        and takes it over once that row is terminal (see _take_one and _overlap), and any
        holder's slot expires with its deadline."""
        scope = quota.overlap_scope(item.tenant_id, item.schedule_id)
        backs = [(item.tenant_id, number) for number in slot]
        if took_run:
            backs.append((scope, quota.RUN_SLOT))
        for owner, number in backs:
            self._give_back_quietly(owner, number, key)

    def _give_back_quietly(self, owner: str, number: int, key: str) -> None:
        try:
            self.slots.give_back(owner, number, key)
        except Exception as exc:  # whatever failed, the slot's holder check or expiry frees it
            logger.warning(
                "slot not given back",
                extra={
                    "action": "worker.give_back",
                    "key": key,
                    "slot": number,
                    "error": f"{type(exc).__name__}: {exc}",
                },
            )
            self.metrics.add_metric("SlotGiveBackFailed", "Count", 1)

    # --- steps -----------------------------------------------------------------------------

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
            exit_reason=_PAST_CAP,
            in_progress_until=None,
        )
        if not self.occurrences.transition(dead, expected_state=row.state):
            raise Busy(f"{row.key} changed while being recorded dead")
        logger.error("dead", extra={"action": "worker.exhausted", "key": row.key})
        self.metrics.add_metric("Failed", "Count", 1)
        self.metrics.add_metric("DeadLettered", "Count", 1)
        return Result.DEAD

    def _overlap(
        self, item: model.Schedule, row: occurrence.Occurrence, held_for: timedelta, now: datetime
    ) -> tuple[str | None, bool]:
        """The overlap policy, decided now that the fire is due, on the schedule's own
        slots (see quota): "skip", "defer" or None (run), and whether this delivery took
        the run slot (then it gives it back when its run ends).

        forbid skips a fire while another run of the schedule holds the run slot;
        buffer_one keeps one such fire waiting (the buffer slot) and skips the others. A
        retry of an earlier fire waits its turn: it is that fire's run, not a new one."""
        if item.overlap is policies.OverlapPolicy.ALLOW:
            return None, False
        scope = quota.overlap_scope(item.tenant_id, item.schedule_id)
        now_ms = int(now.timestamp() * 1000)
        held, _ = self.slots.held(scope)
        running = quota.holder_of(held, quota.RUN_SLOT, now_ms)
        if running == row.key:
            return None, False  # a delivery of this fire holds it: the claim decides
        until_ms = now_ms + int(held_for.total_seconds() * 1000)
        # A holder whose row is terminal ran and ended (its give-back failed, or a
        # redelivery ran it without taking the slot): it blocks nobody. Its slot is taken
        # over conditional on that holder, so of two fires that saw it, one runs. A holder
        # whose row is anything else may be about to run (the slot is taken before the
        # claim): it counts as running until it ends or its slot expires.
        replacing = running if running is not None and self._finished(running) else None
        # Two fires racing for a free run slot: the conditional take lets one run.
        if (running is None or replacing is not None) and self.slots.take(
            scope,
            quota.RUN_SLOT,
            row.key,
            now_ms=now_ms,
            expires_at_ms=until_ms,
            replacing=replacing,
        ):
            if quota.holder_of(held, quota.BUFFER_SLOT, now_ms) == row.key:
                try:
                    self.slots.give_back(scope, quota.BUFFER_SLOT, row.key)
                except Exception:
                    # Not running after all: the run slot is not kept (the buffer it held
                    # expires by itself, and this fire's redelivery takes it again).
                    self._give_back_slots(item, row.key, (), True)
                    raise
            return None, True
        if row.attempts > 0:
            return "defer", False
        if item.overlap is policies.OverlapPolicy.FORBID:
            return "skip", False
        buffered = quota.holder_of(held, quota.BUFFER_SLOT, now_ms)
        if buffered == row.key:
            return "defer", False
        # The buffer lasts until the running fire's slot ends, and a few deferrals more
        # (the buffered fire looks again every one or two): then this fire takes the run
        # slot, or, if it went missing, another fire may take the buffer.
        run_until = max([s.expires_at_ms for s in held if s.number == quota.RUN_SLOT] + [until_ms])
        buffer_until = run_until + BUFFER_HOLD_DEFERRALS * 2 * self.config.defer_seconds * 1000
        if buffered is None and self.slots.take(
            scope, quota.BUFFER_SLOT, row.key, now_ms=now_ms, expires_at_ms=buffer_until
        ):
            return "defer", False
        return "skip", False

    def _take_slot(
        self, tenant_id: str, key: str, held_for: timedelta, now: datetime
    ) -> tuple[int, ...] | str:
        """The tenant slots this run holds (none for an unlimited tenant), or why it must
        wait: the tenant runs its limit, or its share of this class, already. Both are
        counted on one read of the tenant's slots (see quota.CLASS_BAND).

        A tenant the register of overrides shows unlimited (its override, else the
        deployment's default, is 0) takes no slot and reads nothing: the register is read
        once per ``overrides_cache_seconds`` per worker, not per run. So a limit set on a
        tenant that ran unlimited (an override of N, or its override of 0 cleared under a
        limited default) applies, at the latest, to the runs that start that long (and the
        register's eventually consistent second) after the change; runs started before it
        hold no slot, as ever when a limit is set. Every other
        tenant (limited, or the register unknown: not built yet, or its read failed) reads
        its slots and its own override, as before: a limit lifted or changed applies
        from that read on.

        The read is eventually consistent: every slot is taken by a conditional put, so a
        stale list can cost a refused take, or a deferral a current one would have spared
        (a slot freed in the last second), never a run over the limit. A limit override
        changed in the last second applies from the next read, as if made a second later."""
        if self._registered_limit(tenant_id) == quota.UNLIMITED:
            return ()
        held, override = self.slots.held(tenant_id, consistent=False)
        limit = self.config.tenant_limit if override is None else override
        if limit == quota.UNLIMITED:
            return ()
        now_ms = int(now.timestamp() * 1000)
        share = self.config.class_limit
        expires = now_ms + int(held_for.total_seconds() * 1000)
        if quota.holding(held, key, now_ms) is not None:
            return self._held_already(tenant_id, key, held, limit, share, now_ms, expires)
        in_class: int | None = None
        # A limit within the class's share bounds the share too (a tenant running at most
        # `limit` jobs runs at most that many in one class): then the tenant slot is the
        # run's only write, one unit per job. The deployed default limit is such a limit.
        if share and share < limit:
            # The class's share first: it is the tighter bound, so a run past it is told
            # so before it writes the tenant slot it would have to give back.
            numbers = quota.class_band(self._class_index, share)
            in_band = [s for s in held if s.number in set(numbers)]
            band = quota.free_in_band(held, numbers, now_ms)
            in_class = self._take_one(tenant_id, key, band, in_band, now_ms, expires)
            if in_class is None:
                return _AT_CLASS_SHARE
        mine = [s for s in held if s.number < limit]
        # The class share's slot is this run's only if the limit's is too: refused or
        # failed, it goes back (else it would count a run that never started against the
        # tenant's share until it expired).
        try:
            number = self._take_one(
                tenant_id, key, quota.free_slots(held, limit, now_ms), mine, now_ms, expires
            )
        except Exception:
            if in_class is not None:
                self._give_back_quietly(tenant_id, in_class, key)
            raise
        if number is None:
            if in_class is not None:
                self._give_back_quietly(tenant_id, in_class, key)
            return _AT_LIMIT
        return (number,) if in_class is None else (number, in_class)

    def _held_already(
        self,
        tenant_id: str,
        key: str,
        held: list[quota.Slot],
        limit: int,
        share: int,
        now_ms: int,
        expires: int,
    ) -> _Reused | str:
        """The occurrence holds tenant slots already: an earlier delivery's, left by a
        give-back that failed (its attempt failed, to be retried) or by a delivery that
        died, or those of a delivery running it now. This one's row showed no live run
        (see _handle), so it goes ahead on them, as their holder (a run beside a live one
        is refused by the claim, and a refused claim leaves them to it: see _Reused),
        their expiry moved to this run's. Only a set that is whole (the limit's slot, and
        the class share's where the run takes one) is taken over; any other waits for its
        expiry, as every held slot did."""
        if self.long_jobs is not None:
            return _AT_LIMIT  # a long job's start, refused, gives its slots back: left alone
        mine = [s for s in held if s.holder == key and not s.free(now_ms)]
        band = set(quota.class_band(self._class_index, share)) if share and share < limit else set()
        whole = len(mine) == (2 if band else 1) and any(s.number < limit for s in mine)
        if not whole or (band and not any(s.number in band for s in mine)):
            return _AT_LIMIT
        for slot in mine:
            # Conditional on this holder: a slot that expired and went to another run
            # meanwhile is not taken back.
            if not self.slots.take(
                tenant_id, slot.number, key, now_ms=now_ms, expires_at_ms=expires, replacing=key
            ):
                return _AT_LIMIT
        return _Reused(s.number for s in mine)

    def _registered_limit(self, tenant_id: str) -> int | None:
        """The tenant's limit as the register says (its override, else the default);
        None when the register is unknown."""
        with self._overrides_lock:
            overrides = self._overrides
        if overrides is None:
            return None
        return overrides.get(tenant_id, self.config.tenant_limit)

    def _refresh_overrides(self) -> None:
        """Read the register again once its cache period is over. Called as a batch (or a
        single message) starts, before its records run side by side: they all see the same
        register and none waits on another's read (a lock held over the read would stall
        every other record, and deadlock a simulator that runs threads one at a time)."""
        now = self.clock.monotonic()
        with self._overrides_lock:
            if now < self._overrides_until:
                return
            self._overrides_until = now + self.config.overrides_cache_seconds
        overrides = self._read_overrides()
        with self._overrides_lock:
            self._overrides = overrides

    def _read_overrides(self) -> Mapping[str, int] | None:
        """The register; None (every tenant reads its own slots and override, as
        without a register) when there is none yet or the read failed: a failed read
        never stops a run, nor runs a limited tenant unlimited."""
        try:
            overrides = self.slots.overrides()
        except Exception as exc:  # whatever failed, the per-run read still decides
            logger.warning(
                "limit overrides unread",
                extra={"action": "worker.overrides", "error": f"{type(exc).__name__}: {exc}"},
            )
            self.metrics.add_metric("OverridesReadFailed", "Count", 1)
            return None
        if overrides is None and not self._told_unbuilt:
            self._told_unbuilt = True  # once per container: the sweep builds it soon
            logger.info(
                "no register of limit overrides yet: every run reads its tenant's slots",
                extra={"action": "worker.overrides"},
            )
        return overrides

    def _take_one(
        self,
        tenant_id: str,
        key: str,
        free: list[int],
        held: list[quota.Slot],
        now_ms: int,
        expires: int,
    ) -> int | None:
        """A slot number of ``free`` (none held, or expired), else one of ``held`` whose
        holder's run is over, handed on. A run that finishes does not give its slot back
        (that would be a write per job): the slot stays with the finished holder, and
        the next run that needs it takes it over, conditional on that holder, in the
        same one write a take of a free slot costs. The limit stays exact: a slot is
        handed on only when its holder's row is terminal (succeeded, skipped or
        cancelled), which no run ever leaves; a run that ends any other way (a failure
        to retry, dead, a crash) gives its slot back, or lets it expire."""
        self.rng.shuffle(free)
        for number in free[:3]:  # a few tries; losing every race means it is busy: defer
            if self.slots.take(tenant_id, number, key, now_ms=now_ms, expires_at_ms=expires):
                return number
        live = [s for s in held if not s.free(now_ms) and s.holder != key]
        self.rng.shuffle(live)
        for slot in live[:3]:
            if self._finished(slot.holder) and self.slots.take(
                tenant_id,
                slot.number,
                key,
                now_ms=now_ms,
                expires_at_ms=expires,
                replacing=slot.holder,
            ):
                return slot.number
        return None

    def _finished(self, holder: str) -> bool:
        """Is the run holding a slot over for good? Read eventually consistently: a stale
        row shows an older state, never a terminal one that has not happened (terminal
        states are never left), so a stale answer only keeps a slot held a while."""
        try:
            row = self.occurrences.get(holder, consistent=False)
        except errors.ValidationError:
            return False  # not an occurrence key: left to its expiry
        return row is not None and row.state in occurrence.TERMINAL

    @property
    def _class_index(self) -> int:
        return model.JOB_CLASSES.index(self.config.job_class)

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

    def _run_once(
        self,
        item: model.Schedule,
        row: occurrence.Occurrence,
        deadline: int,
        remaining_ms: Callable[[], int],
        *,
        fresh: bool,
    ) -> dict[str, Any]:
        """Claim and run under Powertools idempotency (see adapters.idempotency)."""
        self._idempotency.bind(remaining_ms, intent=row)
        try:
            # The record's key is all Powertools needs of the message (no payload
            # validation), and it deep-copies what it is given on every call.
            return self._guarded_run(  # type: ignore[no-any-return]
                item, deadline, remaining_ms, fresh, message={"occurrence_key": row.key}
            )
        except IdempotencyAlreadyInProgressError as exc:
            raise Busy(str(exc)) from exc

    def _run_claimed(
        self,
        item: model.Schedule,
        deadline: int,
        remaining_ms: Callable[[], int],
        fresh: bool,
        *,
        message: dict[str, Any],
    ) -> dict[str, Any]:
        """What Powertools runs once the claim (the record's put) has succeeded."""
        claimed = self._idempotency.claimed
        assert claimed is not None  # the claim (the record's put) just succeeded
        outcome = self._execute(item, claimed, deadline, remaining_ms, fresh=fresh)
        return self._idempotency.returned(outcome)

    def _execute(
        self,
        item: model.Schedule,
        claimed: occurrence.Occurrence,
        deadline: int,
        remaining_ms: Callable[[], int],
        *,
        fresh: bool,
    ) -> dict[str, Any]:
        """Run the target; the outcome as the idempotency record's result."""
        if claimed.attempts > item.retry.max_attempts:
            # The row read before the claim was stale (an older attempt count): this
            # claim is past the cap, so it is recorded dead without running.
            return {
                "state": occurrence.State.DEAD.value,
                "exit_reason": _PAST_CAP,
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
        )
        timeout = min(float(deadline), remaining_ms() / 1000 - STOP_MARGIN_SECONDS)
        started = self.clock.monotonic()
        try:
            output = self.runner.run(item.target, context, timeout=timeout)
        except targets.DeadlineExceeded as exc:
            return self._failed(item, claimed, "deadline", str(exc))
        except targets.TargetFailed as exc:
            return self._failed(item, claimed, f"error: {exc}", str(exc))
        except errors.ValidationError as exc:  # a target that cannot run at all
            return self._failed(item, claimed, f"error: {exc}", str(exc), final=True)
        return {
            "state": occurrence.State.SUCCEEDED.value,
            "exit_reason": "succeeded",
            "attempt": claimed.attempts,
            "seconds": round(self.clock.monotonic() - started, 3),
            "output": targets.jsonable(output),
        }

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
        return claims.unwanted(self.schedules.get(claimed.tenant_id, claimed.schedule_id), claimed)

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


def _requeues_for_time(body: dict[str, Any]) -> int:
    count = body.get(_TIME_REQUEUES)
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


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


def _abandoned(row: occurrence.Occurrence, now: datetime) -> bool:
    return row.in_progress_until is not None and row.in_progress_until < now
