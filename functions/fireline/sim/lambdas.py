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
