"""What every part of a worker reads: its stores, clock, settings, randomness and
metrics, and the caches it keeps between records. Declared here, set once by
``Worker.__init__`` (services.worker.intake); each part (a class of its own module)
builds on this and on the parts below it, so a module holds one responsibility while
every record still runs on one object, whose stores a caller may swap (tests do)."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from fireline import ports
from fireline.services import long_jobs as long_jobs_service
from fireline.services import pool, targets, workflows
from fireline.services import tracing as tracing_service
from fireline.services.worker.config import WorkerConfig
from fireline.services.worker.gathered import GatheredReads
from fireline.services.worker.idempotency import OccurrenceIdempotency


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
    _guarded_run: Callable[..., Any]
