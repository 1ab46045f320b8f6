"""Fireline on the memory adapters with a fake clock: the schedule service and workers
on the in-package stores, for tests that need no AWS emulator."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fireline import ports
from fireline.adapters import memory, threads
from fireline.domain import occurrence
from fireline.services import (
    backfills,
    dispatch,
    long_jobs,
    schedules,
    targets,
    worker,
    workflows,
)

from .flows import signing_key

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
REMAINING_MS = 60_000


@dataclass
class MemorySystem:
    clock: memory.FakeClock = field(default_factory=lambda: memory.FakeClock(NOW))
    schedules: memory.MemoryScheduleStore = field(default_factory=memory.MemoryScheduleStore)
    occurrences: memory.MemoryOccurrenceStore = field(default_factory=memory.MemoryOccurrenceStore)
    slots: memory.MemorySlotStore = field(default_factory=memory.MemorySlotStore)
    metrics: memory.RecordingMetrics = field(default_factory=memory.RecordingMetrics)

    def __post_init__(self) -> None:
        self.queue = memory.MemoryWorkQueue(self.clock)
        self.registry = targets.Registry()
        self.registry.register("noop")(lambda context: None)
        self.service = schedules.ScheduleService(
            schedules=self.schedules,
            occurrences=self.occurrences,
            queue=self.queue,
            clock=self.clock,
        )
        self.backfills = backfills.Backfills(
            store=memory.MemoryBackfillStore(),
            schedules=self.schedules,
            occurrences=self.occurrences,
            queue=self.queue,
            clock=self.clock,
            ids=schedules.new_id,
            parallel=threads.ThreadPool(2, name="test-backfill"),
        )

    def runner(self, python: targets.PythonRunner | None = None) -> targets.TargetRunner:
        """Python jobs on a thread each unless ``python`` says otherwise (a test's
        handlers then share the test's memory)."""
        return targets.TargetRunner(
            registry=self.registry,
            signing_key=signing_key,
            lambda_client=lambda timeout, credentials: None,
            sqs_client=lambda credentials: None,
            python=python,
        )

    def long_jobs(
        self, supervisor: ports.LongJobRunner, *, heartbeat_seconds: int = 60
    ) -> long_jobs.LongJobs:
        return long_jobs.LongJobs(
            schedules=self.schedules,
            occurrences=self.occurrences,
            supervisor=supervisor,
            clock=self.clock,
            runner=self.runner(),
            config=long_jobs.LongJobConfig(heartbeat_seconds=heartbeat_seconds),
            slots=self.slots,
        )

    def worker(
        self,
        *,
        job_class: str = "default",
        tenant_limit: int = 0,
        class_max_concurrency: int = 0,
        in_flight: int = 1,
        runner: targets.TargetRunner | None = None,
        long: long_jobs.LongJobs | None = None,
        pool_member: str | None = None,
        early_hold_seconds: float = worker.EARLY_HOLD_SECONDS,
    ) -> worker.Worker:
        return worker.Worker(
            schedules=self.schedules,
            occurrences=self.occurrences,
            queue=self.queue,
            slots=self.slots,
            clock=self.clock,
            runner=runner or self.runner(),
            config=worker.WorkerConfig(
                job_class=job_class,
                tenant_limit=tenant_limit,
                class_max_concurrency=class_max_concurrency,
                in_flight=in_flight,
                pool_member=pool_member,
                early_hold_seconds=early_hold_seconds,
            ),
            metrics=self.metrics,
            long_jobs=long,
            backfills=self.backfills,
        )

    def due_job(self, tenant_id: str = "tenant-a", **draft: Any) -> dict[str, Any]:
        """A one-off job due now, its occurrence materialized as the ticker would; the
        message a worker receives for it."""
        draft.setdefault("target", {"type": "python", "handler": "noop"})
        view = self.service.create_job(tenant_id, schedules.JobDraft(delay_seconds=0, **draft))
        return self.materialize(view.job.schedule_id, tenant_id=tenant_id)

    def materialize(
        self, schedule_id: str, *, tenant_id: str = "tenant-a", fire_time: datetime | None = None
    ) -> dict[str, Any]:
        """Put the occurrence of one fire of a schedule (its current version); its message."""
        item = self.schedules.get(tenant_id, schedule_id)
        assert item is not None
        row = occurrence.new(
            tenant_id=tenant_id,
            schedule_id=schedule_id,
            version=item.version,
            fire_time=fire_time or self.clock.now(),
            job_class=item.job_class,
            created_at=self.clock.now(),
        )
        self.occurrences.put_new(row)
        return dispatch.job_message(row)

    def row(self, body: dict[str, Any]) -> occurrence.Occurrence:
        found = self.occurrences.get(body["occurrence_key"])
        assert found is not None
        return found


def job_context(
    payload: dict[str, Any] | None = None,
    progress: list[dict[str, Any]] | None = None,
) -> targets.JobContext:
    """What a Python handler is given for one fire (progress updates go to ``progress``)."""
    return targets.JobContext(
        occurrence_key="s1#1#2026-05-01T12:00:00Z",
        tenant_id="tenant-a",
        schedule_id="s1",
        fire_time=NOW,
        attempt=1,
        payload=payload or {},
        report_progress=progress.append if progress is not None else None,
    )


def missing_workflows() -> workflows.WorkflowService:
    """A workflow service of its own, where no workflow is registered."""
    clock = memory.FakeClock()
    return workflows.WorkflowService(
        store=memory.MemoryWorkflowStore(),
        documents=memory.MemoryDocumentStore(),
        queue=memory.MemoryWorkQueue(clock),
        clock=clock,
    )
