"""Lambda as the platform plays it, in virtual time: rules, invocations, timeouts.

A ticker group is an EventBridge ``rate(1 minute)`` rule: at each minute it starts one
invocation (a :class:`kernel.Process` with the function's CPU share, killed at its
timeout) that runs the real ``Ticker.run`` with the real remaining-time callback. Two
invocations of a group overlap when the previous one is still finishing, exactly as
ReservedConcurrentExecutions 2 allows in the template; the lease keeps them apart.

A job class's worker is an SQS event source mapping: pollers that gather batches (batch
size, batching window, payload limit) and invoke the function, as far as the mapping's
scaling and the account's concurrency allow (fireline.sim.platform), each invocation in a
warm environment or a cold one, running the worker service or the deployed handler
itself (fireline.sim.entry).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fireline import ports
from fireline.services import ticker as ticker_service
from fireline.services.worker import dispatcher as worker_dispatch
from fireline.sim import entry as sim_entry
from fireline.sim import kernel as sim_kernel
from fireline.sim import network as sim_network
from fireline.sim import platform as sim_platform

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
    # The account whose concurrency the ticker's reservation is carved from (None: not
    # modelled); an invocation it throttles is that minute's work lost to the next.
    account: sim_platform.Account | None = None
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
        if self.account is not None and not self.account.try_start("ticker"):
            return
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
            try:
                invocation.report = tk.run(lambda: int((deadline - k.now()) * 1000))
            finally:
                if self.account is not None:
                    self.account.finish("ticker")

        k.spawn(handler, process=process, name=f"ticker-{group}-{number}")


# --- workers ---------------------------------------------------------------------------------

# A warm invocation's overhead beyond the handler (the Invoke round trip).
INVOKE_OVERHEAD_SECONDS = 0.015
# An invocation's payload limit (synchronous invoke: 6 MB) and a standard queue's largest
# batch (10,000 records, which needs a batching window of at least a second).
PAYLOAD_LIMIT_BYTES = 6 * 1024 * 1024
MAX_BATCH_RECORDS = 10_000
SQS_RECEIVE_MAX = 10
# The mapping's receives for one batch, side by side (AWS does not say how many a poller
# makes at once; ten keeps a 10,000-record batch's gathering inside its window).
RECEIVES_IN_PARALLEL = 10
# Bytes a record adds to the event beyond its body (message id, receipt handle,
# attributes, ARN, as an SQS event record carries them).
RECORD_OVERHEAD_BYTES = 700


def run_inline(handler: Callable[..., Any], context: Any, timeout: float) -> Any:
    """The Python job runner for simulated jobs: on the calling (simulated) thread."""
    return handler(context)


def forking(fork_cpu_seconds: float, kernel: sim_kernel.Kernel) -> Callable[..., Any]:
    """The deployed Python job runner's cost: each attempt forks a child of the worker
    (fireline.services.isolation), whose fork, exit and reaping cost
    ``fork_cpu_seconds`` of this machine's CPU (``calibrate.fork_cpu_seconds``), charged
    to the invocation at its CPU share; then the handler runs (on the record's simulated
    thread, sharing the invocation's CPU as the children share the function's vCPUs)."""

    def run(handler: Callable[..., Any], context: Any, timeout: float) -> Any:
        kernel.charge(fork_cpu_seconds)
        return handler(context)

    return run


def record_bytes(body: dict[str, Any]) -> int:
    """What one record adds to an invocation's event."""
    return len(json.dumps(body, separators=(",", ":"))) + RECORD_OVERHEAD_BYTES


@dataclass
class WorkerFleet:
    """An event source mapping feeding one job class's worker function.

    Its pollers gather batches as a standard queue's mapping does: up to ``batch_size``
    records, within ``batching_window`` seconds of the first, never over the 6 MB payload
    limit (a record that would cross it starts the poller's next batch). Each batch is one
    invocation, if the account has room for it (else the poller backs off and the batch
    goes back), in a warm environment or a new one that pays its cold start; it runs the
    deployed handler (``entry``), or the real worker's ``handle_batch`` as the handler
    calls it: either way through the real dispatcher, with ``in_flight`` remote records
    (None: all of them) and as many Python ones as the memory buys vCPUs under way at
    once, on the invocation's simulated threads."""

    kernel: sim_kernel.Kernel
    queue: ports.WorkQueue
    peek: Callable[[], float | None]  # virtual time the next message becomes visible
    make_worker: Callable[[], Any]  # a services.worker.Worker for one environment
    job_class: str = "default"
    max_concurrency: int = 50
    batch_size: int = 10
    batching_window: float = 0.0
    timeout_seconds: float = 120.0
    visibility_timeout: int = 720
    memory_mb: int = 512
    measure_cpu: bool = True
    provisioned: bool = False
    minimum_pollers: int | None = None
    in_flight: int | None = None
    account: sim_platform.Account | None = None
    containers: sim_platform.Containers = field(default_factory=sim_platform.Containers)
    # The deployed handler as the entry point (None: the worker's handle_batch, called as
    # the handler calls it, with ``in_flight`` records at once).
    entry: sim_entry.HandlerEntry | None = None
    function: str = ""
    invocations: int = 0
    record_failures: int = 0
    spilled_over_payload: int = 0  # records kept for the next batch
    batch_sizes: list[int] = field(default_factory=list)
    busy: int = 0
    scaling: sim_platform.Scaling | None = None
    durations: list[float] = field(default_factory=list)  # each invocation's wall seconds
    # Most records of one invocation under way at once, by dispatch lane.
    peaks: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= MAX_BATCH_RECORDS:
            raise ValueError(f"batch_size: 1 to {MAX_BATCH_RECORDS}, not {self.batch_size}")
        if self.batch_size > SQS_RECEIVE_MAX and self.batching_window < 1:
            # As Lambda refuses the mapping: a batch over ten needs a window.
            raise ValueError("batching_window: at least 1 s for a batch_size over 10")
        self.function = self.function or f"worker-{self.job_class}"
        if (
            self.entry is not None
            and self.in_flight is not None
            and self.entry.limits.in_flight != self.in_flight
        ):
            raise ValueError(
                f"in_flight: the handler's environment says {self.entry.limits.in_flight}, "
                f"not {self.in_flight}"
            )
        if self.scaling is None:
            maximum = self.max_concurrency
            if not self.provisioned:
                maximum = min(maximum, sim_platform.ESM_MAX_INVOKES)
            self.scaling = sim_platform.Scaling(
                maximum, provisioned=self.provisioned, minimum_pollers=self.minimum_pollers
            )

    def start(self, at: float = 0.0) -> None:
        if self.entry is not None:
            if self.entry.installed:
                # Another event source of the same function (a class's burst queue): its
                # handler is installed already, and the peaks are the function's.
                self.peaks = self.entry.peaks
            else:
                self.entry.peaks = self.peaks
                self.entry.install(self.make_worker)
        for poller in range(self.max_concurrency):
            self.kernel.spawn(self._poller(poller), at=at, name=f"esm-{self.job_class}-{poller}")
        self.kernel.spawn(self._scaler, at=at, name=f"esm-{self.job_class}-scaling")

    def _waiting(self) -> bool:
        upcoming = self.peek()
        return upcoming is not None and upcoming <= self.kernel.now()

    def _scaler(self) -> None:
        assert self.scaling is not None
        while True:
            self.scaling.observe(self.kernel.now(), busy=self.busy, waiting=self._waiting())
            self.kernel.sleep(1.0)

    def _poller(self, index: int) -> Callable[[], None]:
        k = self.kernel
        assert self.scaling is not None
        scaling = self.scaling

        def poll() -> None:
            spill: list[ports.ReceivedMessage] = []
            while True:
                if index >= scaling.allowed() and not spill:
                    k.sleep(1.0)  # not scaled out this far yet
                    continue
                received = self._gather(spill)
                if not received:
                    # Long polling returns as soon as a message arrives.
                    upcoming = self.peek()
                    wait = 1.0 if upcoming is None else upcoming - k.now()
                    k.sleep(min(1.0, max(0.01, wait)))
                    continue
                if self.account is not None and not self.account.try_start(self.function):
                    self._give_back(received)
                    k.sleep(1.0)  # throttled: the mapping backs off, the batch goes back
                    continue
                self.busy += 1
                try:
                    self._invoke(received)
                finally:
                    self.busy -= 1
                    if self.account is not None:
                        self.account.finish(self.function)

        return poll

    def _receive(self, count: int) -> list[ports.ReceivedMessage]:
        return self.queue.receive(
            self.job_class,
            max_messages=min(SQS_RECEIVE_MAX, count),
            visibility_timeout=self.visibility_timeout,
        )

    def _gather(self, spill: list[ports.ReceivedMessage]) -> list[ports.ReceivedMessage]:
        """One batch: receives until it is full, its window is up, or its payload is.
        Records received past the payload limit are kept in ``spill`` to start the
        poller's next batch (received once, never handed back to the queue)."""
        k = self.kernel
        batch: list[ports.ReceivedMessage] = []
        payload = 0
        first_at: float | None = None
        pool = sim_network.SimPool(k, RECEIVES_IN_PARALLEL)
        carried, spill[:] = list(spill), []
        while len(batch) < self.batch_size:
            wanted = self.batch_size - len(batch)
            if carried:
                got, carried = carried[:wanted], carried[wanted:]
                spill.extend(carried)
                carried = []
            else:
                receives = -(-wanted // SQS_RECEIVE_MAX)
                if not batch and self.batching_window <= 0:
                    receives = 1
                calls = [
                    functools.partial(
                        self._receive, min(SQS_RECEIVE_MAX, wanted - i * SQS_RECEIVE_MAX)
                    )
                    for i in range(min(receives, RECEIVES_IN_PARALLEL))
                ]
                got = [m for r in pool.run(calls) if not isinstance(r, Exception) for m in r]
            full = False
            for message in got:
                size = record_bytes(message.body)
                if full or (batch and payload + size > PAYLOAD_LIMIT_BYTES):
                    full = True
                    spill.append(message)
                    continue
                batch.append(message)
                payload += size
            if full:
                self.spilled_over_payload += len(spill)
                break
            if batch and first_at is None:
                first_at = k.now()
            if self.batching_window <= 0 or (first_at is None and not got):
                break
            if first_at is not None and k.now() - first_at >= self.batching_window:
                break
            if not got:
                # Nothing more visible yet: wait for the next message or the window's end.
                assert first_at is not None
                upcoming = self.peek()
                end = first_at + self.batching_window
                until = end if upcoming is None else min(end, max(upcoming, k.now() + 0.01))
                k.sleep(max(0.0, until - k.now()))
        return batch

    def _give_back(self, messages: list[ports.ReceivedMessage]) -> None:
        for message in messages:
            self.queue.change_visibility(self.job_class, message.receipt, 0)

    def _invoke(self, received: list[ports.ReceivedMessage]) -> None:
        k = self.kernel
        self.invocations += 1
        self.batch_sizes.append(len(received))
        k.sleep(INVOKE_OVERHEAD_SECONDS)
        process = sim_kernel.Process(
            f"{self.function}-{self.invocations}",
            share=cpu_share(self.memory_mb),
            measure=self.measure_cpu,
        )
        deadline = k.now() + self.timeout_seconds
        k.kill_at(process, deadline)
        outcomes: list[Any] = []
        environment = self.containers.take()

        def handler() -> None:
            if environment.cold:
                # The new environment imports the handler's module first: on the
                # invocation's clock, before any record.
                k.charge(self.containers.init_cpu_seconds)
            if self.entry is not None:
                context = sim_entry.Context(
                    function_name=self.function,
                    memory_limit_in_mb=self.memory_mb,
                    aws_request_id=process.name,
                    remaining=lambda: int((deadline - k.now()) * 1000),
                )
                for failed in self.entry.call(received, context, environment):
                    outcomes.append(RuntimeError("reported failed") if failed else None)
                return
            # One worker an environment, as the deployed handler's wiring.worker().
            if environment.worker is None:
                environment.worker = self.make_worker()
            worker = environment.worker
            # The real dispatcher, as the handler builds it, on this invocation's
            # simulated threads.
            limits = worker_dispatch.Limits(
                in_flight=min(
                    worker_dispatch.MAX_IN_FLIGHT, self.in_flight or max(1, len(received))
                ),
                compute=worker_dispatch.compute_slots(
                    self.memory_mb, sim_entry.vcpus(self.memory_mb)
                ),
            )

            def remaining() -> int:
                return int((deadline - k.now()) * 1000)

            outcomes.extend(
                worker.handle_batch(
                    [m.body for m in received],
                    remaining_ms=remaining,
                    parallel=sim_network.SimPool(k, 2),
                    receive_counts=[m.receive_count for m in received],
                    dispatcher=worker_dispatch.Dispatcher(
                        limits, remaining, pools=sim_entry.SimPools(k, limits, self.peaks)
                    ),
                )
            )

        began = k.now()
        k.join([k.spawn(handler, process=process, name=process.name)])
        # Lambda bills the invocation's wall time, waits on targets included.
        self.durations.append(k.now() - began)
        self.containers.give_back(environment)
        # What the mapping deletes: the records that did not fail (none if it was killed).
        done = [
            m.receipt
            for m, outcome in zip(received, outcomes, strict=False)
            if not isinstance(outcome, Exception)
        ]
        self.record_failures += len(received) - len(done)
        for first in range(0, len(done), SQS_RECEIVE_MAX):
            self.queue.delete_batch(self.job_class, done[first : first + SQS_RECEIVE_MAX])  # type: ignore[attr-defined]
