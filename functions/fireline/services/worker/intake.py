"""Batch intake: the Worker, built once per container, takes a batch (or one message),
reads its rows and schedules together (services.worker.prefetch), starts its records
within the dispatcher's bounds or side by side, hands back the ones left unstarted, and
gives back the units of the one-off jobs it settled, one give-back per tenant."""

from __future__ import annotations

import functools
import math
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function

from fireline import ports
from fireline.domain import errors, model, occurrence, quota, workflow
from fireline.services import claims, dispatch, pool, targets, workflows
from fireline.services import long_jobs as long_jobs_service
from fireline.services import tracing as tracing_service
from fireline.services.worker import dispatcher as worker_dispatch
from fireline.services.worker import gathered, steps
from fireline.services.worker.config import (
    EARLY_HOLD_SECONDS,
    STOP_MARGIN_SECONDS,
    WorkerConfig,
)
from fireline.services.worker.idempotency import OccurrenceIdempotency
from fireline.services.worker.outcomes import Result
from fireline.services.worker.prefetch import NOTHING_PREFETCHED, Prefetch
from fireline.services.worker.slot_views import FRESH_SECONDS, SlotViews
from fireline.services.worker.state import BackfillPacer, NoMetrics, RecordsUnderWay, Tally

logger = Logger(service="fireline", child=True)

# Results after which the occurrence has its outcome (or already had it).
_SETTLING = frozenset({Result.SUCCEEDED, Result.DEAD, Result.SKIPPED, Result.SETTLED})


@dataclass(frozen=True)
class _Ended:
    """A one-off job whose run has its outcome: its unit of quota is to be given back."""

    tenant_id: str
    schedule_id: str


class Worker(steps.Steps):
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
        tracing: tracing_service.Tracing | None = None,
        backfills: BackfillPacer | None = None,
        reads: gathered.GatheredReads | None = None,
        slot_views: SlotViews | None = None,
    ) -> None:
        self.schedules = schedules
        self.occurrences = occurrences
        self.queue = queue
        self.slots = slots
        self.clock = clock
        self.runner = runner
        self.config = config or WorkerConfig()
        self.metrics = Tally(metrics or NoMetrics())
        self.rng = rng or random.Random()
        self.long_jobs = long_jobs
        self.nodes = nodes
        self.tracing = tracing or tracing_service.OFF
        self.backfills = backfills
        # The register of limit overrides as last read, and until when (the clock's
        # monotonic seconds) it is used; None: unknown (no register yet, or a failed read).
        self._overrides: Mapping[str, int] | None = None
        self._overrides_until = -math.inf
        self._overrides_lock = threading.Lock()
        self._told_unbuilt = False
        self._slots_taken_until = {}
        # The longest an invocation of this worker has had at its start (see
        # _note_invocation); until one is seen, nothing is decided on it.
        self._longest_invocation_ms = 0
        self._under_way = RecordsUnderWay()
        # This container's view of each busy tenant's slots, shared by its records. A long
        # job's runner starts one job at a time, and its slots come back with outcomes
        # other functions handle: it reads them for each start.
        self._slot_views = slot_views or SlotViews(
            self.clock, fresh_seconds=0.0 if long_jobs is not None else FRESH_SECONDS
        )
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
                poll=self._slot_views.polls,
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
        # The consistent schedule reads records make after their claims, a burst's
        # gathered into one batch read (see services.worker.gathered).
        self._reads = reads or gathered.GatheredReads(self.clock)
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
        Python jobs in its compute lane (see services.worker.dispatcher); the ones it left
        unstarted as the invocation neared its end are sent again, unrun (RETURNED; see
        :meth:`_hand_back`). Without one, every record runs at once on ``parallel``,
        which also makes the batch's reads.

        The batch's rows and schedules are read first, together (see Prefetch); the
        one-off jobs the batch settles give their units of quota back together after
        the runs, one give-back per tenant (see :meth:`_give_back`). Its counts go out
        summed, one data point per metric (see Tally)."""
        self._note_invocation(remaining_ms)
        self._refresh_overrides()
        prefetched = self.prefetch(bodies, parallel, receive_counts)
        ended: list[_Ended | None] = [None] * len(bodies)

        def run(index: int, body: dict[str, Any]) -> Result:
            with self._under_way.running():
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
    ) -> tuple[worker_dispatch.Lane, float, float, float]:
        """A record's lane (a Python job is compute: see services.worker.dispatcher), its
        place in the batch (its fire time), how much of the invocation it needs left
        to start (its whole deadline, the margin to record its outcome and its hold until
        its fire time, so that starting late in a batch never shortens its run) and that
        hold (a Python job's wait for a vCPU counts from its fire time). Lane and
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
            return worker_dispatch.Lane.REMOTE, -math.inf, 0.0, 0.0
        tenant_id = body.get("tenant_id")
        item = (
            prefetched.known_schedule(tenant_id, parsed.schedule_id)
            if isinstance(tenant_id, str)
            else None
        )
        if item is None:
            return worker_dispatch.Lane.REMOTE, parsed.fire_time.timestamp(), 0.0, 0.0
        python = item.target.get("type") == "python"
        lane = worker_dispatch.Lane.COMPUTE if python else worker_dispatch.Lane.REMOTE
        # Its hold: until its fire time (a burst's fire comes up to the burst lead early).
        early = max(0.0, (parsed.fire_time - self.clock.now()).total_seconds())
        hold = min(self.config.early_hold_seconds, early)
        needs = (
            0.0  # a long job's record only starts its execution
            if self.long_jobs is not None
            else model.deadline_for(item.job_class, item.deadline_seconds)
            + STOP_MARGIN_SECONDS
            + min(self.config.early_hold_seconds, early + EARLY_HOLD_SECONDS)
        )
        return lane, parsed.fire_time.timestamp(), needs, hold

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
            return NOTHING_PREFETCHED
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
        prefetched: Prefetch = NOTHING_PREFETCHED,
    ) -> Result:
        """Process one message. Raises Busy (redeliver later) or MissingIdempotencyKey."""
        self._note_invocation(remaining_ms)
        self._refresh_overrides()
        try:
            with self._under_way.running():
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
        prefetched: Prefetch = NOTHING_PREFETCHED,
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
