"""What every part of a worker reads: its stores, clock, settings, randomness and
metrics, and the caches it keeps between records. Declared here, set once by
``Worker.__init__`` (services.worker.intake); each part (a class of its own module)
builds on this and on the parts below it, so a module holds one responsibility while
every record still runs on one object, whose stores a caller may swap (tests do)."""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from fireline import ports
from fireline.services import long_jobs as long_jobs_service
from fireline.services import pool, targets, workflows
from fireline.services import tracing as tracing_service
from fireline.services.worker.config import WorkerConfig
from fireline.services.worker.gathered import GatheredReads
from fireline.services.worker.idempotency import OccurrenceIdempotency
from fireline.services.worker.slot_views import SlotViews


class NoMetrics:
    def add_metric(self, name: str, unit: str, value: float) -> None:
        return None


class Tally:
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


class RecordsUnderWay:
    """The records of this container's invocation under way, and how many of them wait
    in it for a tenant slot (see SlotKeeping._in_turn). A record waits only
    while another record of its invocation is at work: its wait never keeps an
    invocation running that would otherwise have returned, and so never takes an
    invocation from another tenant's records (a record alone, or beside waiting ones, is
    deferred at once, as ever). A container runs one invocation at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._waiting = 0

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        with self._lock:
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        with self._lock:
            self._waiting += 1
        try:
            yield
        finally:
            with self._lock:
                self._waiting -= 1

    def others_at_work(self) -> bool:
        """Is a record under way, besides the caller, that is not waiting?"""
        with self._lock:
            return self._running - self._waiting > 1


class BackfillPacer(Protocol):
    """What the worker asks of backfills: a pass after one of its fires settled, so the
    next fire is released at once rather than at the periodic pass."""

    def pace(
        self, tenant_id: str, schedule_id: str, backfill_id: str, *, settled: str | None = None
    ) -> object: ...


class WorkerState:
    """The attributes every part reads, declared once (Worker.__init__ sets them)."""

    schedules: ports.ScheduleStore
    occurrences: ports.OccurrenceStore
    queue: ports.WorkQueue
    slots: ports.SlotStore
    clock: ports.Clock
    runner: targets.TargetRunner
    config: WorkerConfig
    metrics: Tally
    rng: random.Random
    long_jobs: long_jobs_service.LongJobs | None
    nodes: workflows.NodeJobs | None
    tracing: tracing_service.Tracing
    backfills: BackfillPacer | None
    # The register of limit overrides as last read, and until when (the clock's
    # monotonic seconds) it is used; None: unknown (no register yet, or a failed read).
    _overrides: Mapping[str, int] | None
    _overrides_until: float
    _overrides_lock: threading.Lock
    _told_unbuilt: bool
    # Tenants whose slots this worker took lately, and until when (epoch ms) those slots
    # are held: their numbers are likely held still (a finished run's is handed on, not
    # given back), so a take of one at random, unread, would mostly be refused.
    _slots_taken_until: dict[str, int]
    # The longest an invocation of this worker has had at its start.
    _longest_invocation_ms: int
    # The class's invocations as really running (None: not shared out by invocations).
    _pool: pool.Pool | None
    _idempotency: OccurrenceIdempotency
    _reads: GatheredReads
    _slot_views: SlotViews
    _under_way: RecordsUnderWay
    _guarded_run: Callable[..., Any]
