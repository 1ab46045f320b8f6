"""Lambda as the platform plays it, in virtual time: rules, invocations, timeouts.

A ticker group is an EventBridge ``rate(1 minute)`` rule: at each minute it starts one
invocation (a :class:`kernel.Process` with the function's CPU share, killed at its
timeout) that runs the real ``Ticker.run`` with the real remaining-time callback. Two
invocations of a group overlap when the previous one is still finishing, exactly as
ReservedConcurrentExecutions 2 allows in the template; the lease keeps them apart.
"""

from __future__ import annotations

import functools
import json
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
    # The account whose concurrency the ticker's reservation is carved from (None: not
    # modelled); an invocation it throttles is that minute's work lost to the next.
    account: Account | None = None
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


# --- the account ------------------------------------------------------------------------------

# Every function of the account draws on one pool of concurrent executions: 1,000 unless
# AWS raised it on request. A function's reserved concurrency is carved out of that pool
# (and AWS keeps at least 100 of it unreserved).
ACCOUNT_CONCURRENCY = 1_000
UNRESERVED_MINIMUM = 100


@dataclass
class Account:
    """The account's concurrent executions, shared by every simulated function. A function
    with reserved concurrency runs within its reservation; every other one draws on what
    is left unreserved. An invocation that finds no room is throttled (not started)."""

    limit: int = ACCOUNT_CONCURRENCY
    reserved: dict[str, int] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)  # by function
    throttled: dict[str, int] = field(default_factory=dict)
    peak_unreserved: int = 0

    def __post_init__(self) -> None:
        if self.limit - sum(self.reserved.values()) < UNRESERVED_MINIMUM:
            raise ValueError(
                f"reserved concurrency leaves fewer than {UNRESERVED_MINIMUM} unreserved"
            )

    def unreserved_running(self) -> int:
        return sum(n for f, n in self.running.items() if f not in self.reserved)

    def try_start(self, function: str) -> bool:
        if function in self.reserved:
            room = self.reserved[function] - self.running.get(function, 0)
        else:
            room = self.limit - sum(self.reserved.values()) - self.unreserved_running()
        if room <= 0:
            self.throttled[function] = self.throttled.get(function, 0) + 1
            return False
        self.running[function] = self.running.get(function, 0) + 1
        self.peak_unreserved = max(self.peak_unreserved, self.unreserved_running())
        return True

    def finish(self, function: str) -> None:
        self.running[function] -= 1


@dataclass
class Containers:
    """A function's execution environments. An invocation takes a warm one if one is
    idle, else Lambda starts a new one, which first imports the handler's module: its
    init CPU (measured on this machine, ``calibrate.import_cpu_seconds``) is charged to
    the invocation at the function's CPU share. Environments stay warm for the run (a
    simulated hour is well inside the time Lambda keeps an idle one)."""

    init_cpu_seconds: float = 0.0
    idle: int = 0
    cold_starts: int = 0

    def take(self) -> bool:
        """True: this invocation starts a new environment (a cold start)."""
        if self.idle > 0:
            self.idle -= 1
            return False
        self.cold_starts += 1
        return True

    def give_back(self) -> None:
        self.idle += 1


# --- the event source mapping's scaling ---------------------------------------------------------

# Standard mode (AWS Lambda developer guide, "Configuring scaling behavior for SQS event
# source mappings"): five concurrent invokes when messages appear; while messages are still
# available, up to 300 more a minute; at most 1,250 at once (MaximumConcurrency, where
# set, caps it lower); back to five when traffic is low.
ESM_START = 5
ESM_RAMP_PER_SECOND = 300 / 60
ESM_MAX_INVOKES = 1_250
# How long the mapping sees idle pollers before it scales in to what is busy: AWS says
# only "when traffic is low"; a minute is this model's choice.
ESM_SCALE_IN_AFTER_SECONDS = 60.0
# Provisioned mode (AWS News Blog, "AWS Lambda enhances event processing with provisioned
# mode for SQS event-source mapping"): up to 1,000 more concurrent executions a minute and
# up to 20,000 at once; with MaximumPollers at most 2,000, that is 10 concurrent invokes a
# poller (this model's reading of those two figures). MinimumPollers are always ready.
PROVISIONED_RAMP_PER_SECOND = 1_000 / 60
PROVISIONED_INVOKES_PER_POLLER = 10
PROVISIONED_MAX_INVOKES = 20_000


@dataclass
class Scaling:
    """How many concurrent invokes an event source mapping allows at a moment.

    ``minimum_pollers`` None and ``provisioned`` False: standard mode. Provisioned mode
    starts at ``minimum_pollers`` worth of invokes (None: all of ``maximum`` at once, the
    idealized mapping of older runs) and ramps at the provisioned rate. The level rises
    while every allowed invoke is busy and messages wait, and falls back to what is busy
    (never below the start) after a quiet spell."""

    maximum: int
    provisioned: bool = False
    minimum_pollers: int | None = None
    level: float = 0.0
    _quiet_since: float | None = None
    _last: float | None = None

    def __post_init__(self) -> None:
        self.level = float(self.floor)

    @property
    def floor(self) -> int:
        if not self.provisioned:
            return min(self.maximum, ESM_START)
        if self.minimum_pollers is None:
            return self.maximum
        return min(self.maximum, self.minimum_pollers * PROVISIONED_INVOKES_PER_POLLER)

    @property
    def rate(self) -> float:
        return PROVISIONED_RAMP_PER_SECOND if self.provisioned else ESM_RAMP_PER_SECOND

    def allowed(self) -> int:
        return int(self.level + 1e-9)  # a ramp summed second by second lands on whole numbers

    def observe(self, now: float, *, busy: int, waiting: bool) -> None:
        """What the mapping sees at ``now``: ``busy`` invokes running, messages
        ``waiting`` (visible, not taken)."""
        elapsed = 0.0 if self._last is None else max(0.0, now - self._last)
        self._last = now
        if waiting and busy >= self.allowed():
            self.level = min(float(self.maximum), self.level + self.rate * elapsed)
            self._quiet_since = None
            return
        if busy < self.allowed() and not waiting:
            if self._quiet_since is None:
                self._quiet_since = now
            elif now - self._quiet_since >= ESM_SCALE_IN_AFTER_SECONDS:
                self.level = float(max(self.floor, busy))
                self._quiet_since = None
        else:
            self._quiet_since = None


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


class _SimThreadPool:
    """adapters.threads.ThreadPool as the deployed handler uses it, on simulated
    threads of the calling invocation."""

    def __init__(self, kernel: sim_kernel.Kernel, max_workers: int = 32, name: str = "") -> None:
        self._pool = sim_network.SimPool(kernel, max_workers)

    def run(self, calls: Any) -> list[Any]:
        return self._pool.run(calls)

    def close(self) -> None:
        return None

    def __enter__(self) -> _SimThreadPool:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@dataclass
class _Context:
    """The Lambda context the deployed handler reads (Powertools' keys, the time left)."""

    function_name: str
    memory_limit_in_mb: int
    aws_request_id: str
    remaining: Callable[[], int]
    function_version: str = "$LATEST"
    log_group_name: str = "/aws/lambda/sim"
    log_stream_name: str = "sim"

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining()


class HandlerEntry:
    """The deployed entry point, fireline.handlers.worker.handler, run as Lambda runs
    it: an SQS event of the batch's records and a context, its partial batch response
    read back. While installed, the handler's worker is the simulation's (wiring.worker)
    and its thread pools are simulated threads (adapters.threads.ThreadPool); the
    function's environment is the template's (``environment``), so whatever the handler
    reads from it (an in-flight bound) is the deployed default. Installed for a run and
    removed after it (``remove``): process-wide, as one simulation runs at a time."""

    def __init__(self, kernel: sim_kernel.Kernel, environment: dict[str, str]) -> None:
        self.kernel = kernel
        self.environment = dict(environment)
        self._saved: list[tuple[Any, str, Any]] = []
        self._saved_env: dict[str, str | None] = {}

    def install(self, make_worker: Callable[[], Any]) -> None:
        import os

        from fireline import wiring
        from fireline.adapters import threads

        kernel = self.kernel

        def pool(max_workers: int = 32, name: str = "") -> _SimThreadPool:
            return _SimThreadPool(kernel, max_workers, name)

        replacements: list[tuple[Any, str, Any]] = [
            (wiring, "worker", make_worker),
            (threads, "ThreadPool", pool),
        ]
        for owner, attribute, replacement in replacements:
            self._saved.append((owner, attribute, getattr(owner, attribute)))
            setattr(owner, attribute, replacement)
        for key, setting in self.environment.items():
            self._saved_env[key] = os.environ.get(key)
            os.environ[key] = setting

    def remove(self) -> None:
        import os

        for owner, attribute, original in reversed(self._saved):
            setattr(owner, attribute, original)
        self._saved.clear()
        for key, before in self._saved_env.items():
            if before is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = before
        self._saved_env.clear()

    def call(
        self,
        received: list[ports.ReceivedMessage],
        context: _Context,
    ) -> list[bool]:
        """Each record's outcome: True if the handler reported it failed."""
        from fireline.handlers import worker as worker_handler

        event = {
            "Records": [
                {
                    "messageId": f"{n}",
                    "receiptHandle": m.receipt,
                    "body": json.dumps(m.body),
                    "attributes": {"ApproximateReceiveCount": str(m.receive_count)},
                    "eventSource": "aws:sqs",
                }
                for n, m in enumerate(received)
            ]
        }
        answer = worker_handler.handler(event, context)
        failed = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
        return [str(n) in failed for n in range(len(received))]


@dataclass
class WorkerFleet:
    """An event source mapping feeding one job class's worker function.

    Its pollers gather batches as a standard queue's mapping does: up to ``batch_size``
    records, within ``batching_window`` seconds of the first, never over the 6 MB payload
    limit (a record that would cross it starts the poller's next batch). Each batch is one
    invocation, if the account has room for it (else the poller backs off and the batch
    goes back), in a warm environment or a new one that pays its cold start; it runs the
    real worker's ``handle_batch`` as the handler calls it, with ``in_flight`` records
    (None: all of them) on the invocation's simulated threads at once."""

    kernel: sim_kernel.Kernel
    queue: ports.WorkQueue
    peek: Callable[[], float | None]  # virtual time the next message becomes visible
    make_worker: Callable[[], Any]  # a services.worker.Worker for one invocation
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
    account: Account | None = None
    containers: Containers = field(default_factory=Containers)
    # The deployed handler as the entry point (None: the worker's handle_batch, called as
    # the handler calls it, with ``in_flight`` records at once).
    entry: HandlerEntry | None = None
    function: str = ""
    invocations: int = 0
    record_failures: int = 0
    spilled_over_payload: int = 0  # records kept for the next batch
    batch_sizes: list[int] = field(default_factory=list)
    busy: int = 0
    scaling: Scaling | None = None
    durations: list[float] = field(default_factory=list)  # each invocation's wall seconds

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= MAX_BATCH_RECORDS:
            raise ValueError(f"batch_size: 1 to {MAX_BATCH_RECORDS}, not {self.batch_size}")
        if self.batch_size > SQS_RECEIVE_MAX and self.batching_window < 1:
            # As Lambda refuses the mapping: a batch over ten needs a window.
            raise ValueError("batching_window: at least 1 s for a batch_size over 10")
        self.function = self.function or f"worker-{self.job_class}"
        if self.scaling is None:
            maximum = self.max_concurrency
            if not self.provisioned:
                maximum = min(maximum, ESM_MAX_INVOKES)
            self.scaling = Scaling(
                maximum, provisioned=self.provisioned, minimum_pollers=self.minimum_pollers
            )

    def start(self, at: float = 0.0) -> None:
        if self.entry is not None:
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
        cold = self.containers.take()

        def handler() -> None:
            if cold:
                # The new environment imports the handler's module first: on the
                # invocation's clock, before any record.
                k.charge(self.containers.init_cpu_seconds)
            if self.entry is not None:
                context = _Context(
                    function_name=self.function,
                    memory_limit_in_mb=self.memory_mb,
                    aws_request_id=process.name,
                    remaining=lambda: int((deadline - k.now()) * 1000),
                )
                for failed in self.entry.call(received, context):
                    outcomes.append(RuntimeError("reported failed") if failed else None)
                return
            worker = self.make_worker()
            pool = len(received) if self.in_flight is None else min(self.in_flight, len(received))
            outcomes.extend(
                worker.handle_batch(
                    [m.body for m in received],
                    remaining_ms=lambda: int((deadline - k.now()) * 1000),
                    parallel=sim_network.SimPool(k, max(1, pool)),
                    receive_counts=[m.receive_count for m in received],
                )
            )

        began = k.now()
        k.join([k.spawn(handler, process=process, name=process.name)])
        # Lambda bills the invocation's wall time, waits on targets included.
        self.durations.append(k.now() - began)
        self.containers.give_back()
        # What the mapping deletes: the records that did not fail (none if it was killed).
        done = [
            m.receipt
            for m, outcome in zip(received, outcomes, strict=False)
            if not isinstance(outcome, Exception)
        ]
        self.record_failures += len(received) - len(done)
        for first in range(0, len(done), SQS_RECEIVE_MAX):
            self.queue.delete_batch(self.job_class, done[first : first + SQS_RECEIVE_MAX])  # type: ignore[attr-defined]
