"""Lambda as the platform plays it, in virtual time: rules, invocations, timeouts.

A ticker group is an EventBridge ``rate(1 minute)`` rule: at each minute it starts one
invocation (a :class:`kernel.Process` with the function's CPU share, killed at its
timeout) that runs the real ``Ticker.run`` with the real remaining-time callback. Two
invocations of a group overlap when the previous one is still finishing, exactly as
ReservedConcurrentExecutions 2 allows in the template; the lease keeps them apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fireline import ports
from fireline.services import ticker as ticker_service
from fireline.sim import kernel as sim_kernel
from fireline.sim import network as sim_network

# AWS gives a function a full vCPU at 1,769 MB of memory and proportionally less below.
# Python runs on one core, so more than that buys nothing here.
FULL_VCPU_MB = 1769


def cpu_share(memory_mb: int) -> float:
    return min(1.0, memory_mb / FULL_VCPU_MB)


@dataclass
class Invocation:
    group: int
    number: int
    started: float
    process: sim_kernel.Process
    report: ticker_service.RunReport | None = None


@dataclass
class TickerFleet:
    """K ticker groups, each invoked once a minute with the template's settings."""

    kernel: sim_kernel.Kernel
    schedules: ports.ScheduleStore
    occurrences: ports.OccurrenceStore
    queue: ports.WorkQueue
    leases: ports.LeaseStore
    groups: int = 1
    memory_mb: int = 512
    timeout_seconds: float = 60.0
    pool_size: int = 32
    measure_cpu: bool = True
    config: dict[str, Any] = field(default_factory=dict)  # TickerConfig overrides
    metrics: ports.Metrics | None = None
    invocations: list[Invocation] = field(default_factory=list)

    def start(self, first_minute: float = 0.0, minutes: int | None = None) -> None:
        """Fire every group's rule at ``first_minute`` and each minute after."""

        def rule(group: int) -> Callable[[], None]:
            def every_minute() -> None:
                number = 0
                while minutes is None or number < minutes:
                    self._invoke(group, number)
                    number += 1
                    self.kernel.sleep(first_minute + number * 60.0 - self.kernel.now())

            return every_minute

        for group in range(self.groups):
            self.kernel.spawn(rule(group), at=first_minute, name=f"rule-ticker-{group}")

    def _invoke(self, group: int, number: int) -> None:
        k = self.kernel
        started = k.now()
        process = sim_kernel.Process(
            f"ticker-{group}-{number}",
            share=cpu_share(self.memory_mb),
            measure=self.measure_cpu,
        )
        deadline = started + self.timeout_seconds
        k.kill_at(process, deadline)
        invocation = Invocation(group, number, started, process)
        self.invocations.append(invocation)
        clock = sim_kernel.SimClock(k)

        def handler() -> None:
            tk = ticker_service.Ticker(
                schedules=self.schedules,
                occurrences=self.occurrences,
                queue=self.queue,
                leases=self.leases,
                clock=clock,
                owner=f"invocation-{group}-{number}",
                config=ticker_service.TickerConfig(groups=self.groups, group=group, **self.config),
                metrics=self.metrics,
                parallel=sim_network.SimPool(k, self.pool_size),
            )
            invocation.report = tk.run(lambda: int((deadline - k.now()) * 1000))

        k.spawn(handler, process=process, name=f"ticker-{group}-{number}")


# --- workers ---------------------------------------------------------------------------------

# Lambda's SQS event source mapping, standard mode: five concurrent batches when messages
# appear, then up to 300 more a minute, to the maximum concurrency (AWS Lambda developer
# guide, "Configuring scaling behavior for SQS event source mappings"). Provisioned mode
# keeps its pollers ready: all of the maximum at once.
ESM_START = 5
ESM_RAMP_PER_SECOND = 300 / 60
# A warm invocation's overhead beyond the handler (the Invoke round trip).
INVOKE_OVERHEAD_SECONDS = 0.015


def run_inline(handler: Callable[..., Any], context: Any, timeout: float) -> Any:
    """The Python job runner for simulated jobs: on the calling (simulated) thread."""
    return handler(context)


@dataclass
class WorkerFleet:
    """An event source mapping feeding one job class's worker function."""

    kernel: sim_kernel.Kernel
    queue: ports.WorkQueue
    peek: Callable[[], float | None]  # virtual time the next message becomes visible
    make_worker: Callable[[], Any]  # a services.worker.Worker for one invocation
    job_class: str = "default"
    max_concurrency: int = 50
    batch_size: int = 10
    timeout_seconds: float = 120.0
    visibility_timeout: int = 720
    memory_mb: int = 512
    measure_cpu: bool = True
    provisioned: bool = False
    invocations: int = 0
    record_failures: int = 0
    active_since: float | None = None

    def start(self, at: float = 0.0) -> None:
        for poller in range(self.max_concurrency):
            self.kernel.spawn(self._poller(poller), at=at, name=f"esm-{self.job_class}-{poller}")

    def _allowed(self, now: float) -> int:
        if self.provisioned:
            return self.max_concurrency
        if self.active_since is None:
            return ESM_START
        ramped = ESM_START + int((now - self.active_since) * ESM_RAMP_PER_SECOND)
        return min(self.max_concurrency, ramped)

    def _poller(self, index: int) -> Callable[[], None]:
        k = self.kernel

        def poll() -> None:
            while True:
                if index >= self._allowed(k.now()):
                    k.sleep(1.0)  # not scaled out this far yet
                    continue
                received = self.queue.receive(
                    self.job_class,
                    max_messages=self.batch_size,
                    visibility_timeout=self.visibility_timeout,
                )
                if not received:
                    # Long polling returns as soon as a message arrives.
                    upcoming = self.peek()
                    wait = 1.0 if upcoming is None else upcoming - k.now()
                    k.sleep(min(1.0, max(0.01, wait)))
                    continue
                if self.active_since is None:
                    self.active_since = k.now()
                self._invoke(received)

        return poll

    def _invoke(self, received: list[ports.ReceivedMessage]) -> None:
        k = self.kernel
        self.invocations += 1
        k.sleep(INVOKE_OVERHEAD_SECONDS)
        process = sim_kernel.Process(
            f"worker-{self.job_class}-{self.invocations}",
            share=cpu_share(self.memory_mb),
            measure=self.measure_cpu,
        )
        deadline = k.now() + self.timeout_seconds
        k.kill_at(process, deadline)
        outcomes: list[Any] = []

        def handler() -> None:
            worker = self.make_worker()
            outcomes.extend(
                worker.handle_batch(
                    [m.body for m in received],
                    remaining_ms=lambda: int((deadline - k.now()) * 1000),
                    parallel=sim_network.SimPool(k, len(received)),
                    receive_counts=[m.receive_count for m in received],
                )
            )

        k.join([k.spawn(handler, process=process, name=process.name)])
        # What the mapping deletes: the records that did not fail (none if it was killed).
        done = [
            m.receipt
            for m, outcome in zip(received, outcomes, strict=False)
            if not isinstance(outcome, Exception)
        ]
        self.record_failures += len(received) - len(done)
        if done:
            self.queue.delete_batch(self.job_class, done)  # type: ignore[attr-defined]
