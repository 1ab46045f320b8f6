"""Remote targets played in memory, and fires and invocations for the worker's batches:
what the dispatch tests build their batches from."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from fireline.adapters import threads
from fireline.domain import occurrence
from fireline.services import dispatch, schedules, targets
from fireline.services.worker import Result
from fireline.services.worker.dispatcher import Dispatcher, Limits

from .memory_system import MemorySystem

HTTP = {"type": "http", "url": "https://hooks.example.com/fire"}
PYTHON = {"type": "python", "handler": "noop"}


class FakeTargets(targets.TargetRunner):
    """Remote targets played in memory: each run is recorded (key, timeout) and does
    what ``act`` says for its key (move the fake clock, wait on an event, fail)."""

    def __init__(self, system: MemorySystem, act: Callable[[str], None] | None = None) -> None:
        super().__init__(
            registry=system.registry,
            signing_key=lambda tenant_id: None,  # type: ignore[arg-type,return-value]
            lambda_client=lambda timeout, credentials: None,
            sqs_client=lambda credentials: None,
        )
        self.act = act or (lambda key: None)
        self.runs: list[tuple[str, float]] = []
        self._lock = threading.Lock()

    def run(self, target: dict[str, Any], context: targets.JobContext, *, timeout: float) -> Any:
        with self._lock:
            self.runs.append((context.occurrence_key, timeout))
        self.act(context.occurrence_key)
        return {"answered": context.occurrence_key}


def fires(
    system: MemorySystem, count: int, *, target: dict[str, Any] = HTTP, deadline: int = 30
) -> list[dict[str, Any]]:
    """One fire each of ``count`` schedules, due one second apart and all due by now,
    as the ticker sends them (no row written), first due first."""
    bodies = []
    for n in range(count):
        item = system.service.create(
            "tenant-a",
            schedules.ScheduleDraft(spec="rate(1 hour)", target=target, deadline_seconds=deadline),
        )
        fire_time = system.clock.now() - timedelta(seconds=count - n)
        row = occurrence.new(
            tenant_id="tenant-a",
            schedule_id=item.schedule_id,
            version=item.version,
            fire_time=fire_time,
            job_class=item.job_class,
            created_at=system.clock.now(),
        )
        bodies.append(dispatch.job_message(row))
    return bodies


def invocation(system: MemorySystem, seconds: float) -> Callable[[], int]:
    """An invocation's remaining time, counted on the fake clock from now."""
    ends = system.clock.monotonic() + seconds

    def remaining_ms() -> int:
        return max(0, int((ends - system.clock.monotonic()) * 1000))

    return remaining_ms


def handle(
    system: MemorySystem,
    runner: targets.TargetRunner,
    bodies: list[dict[str, Any]],
    limits: Limits,
    remaining_ms: Callable[[], int],
    worker: Any = None,
) -> list[Result | Exception]:
    the_worker = worker or system.worker(runner=runner)
    with threads.ThreadPool(2, name="test-read") as pool:
        return the_worker.handle_batch(  # type: ignore[no-any-return]
            bodies,
            remaining_ms=remaining_ms,
            parallel=pool,
            receive_counts=[1] * len(bodies),
            dispatcher=Dispatcher(limits, remaining_ms),
        )
