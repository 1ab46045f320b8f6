"""Fireline beside APScheduler 3, in real time on this machine.

The same every-minute jobs (30,000 by default, their seconds spread evenly over the
minute: 500 fire each second) for the same window (3 minutes), three ways:

- APScheduler's BackgroundScheduler with its memory job store, as configured out of the
  box (a pool of 10 threads, a misfire grace of 1 s, coalescing);
- the same with its SQLAlchemy job store on a SQLite file;
- Fireline's ticker and worker (the services the Lambdas run) on the memory adapters:
  the ticker ticking every second under its lease, an event source mapping handing
  batches of ten to 50 worker invocations, the deployment's INFO log line and metrics
  per fire, each Python job on its invocation's thread (APScheduler runs its jobs on its
  pool's threads; the deployed worker forks a process per attempt instead, to stop a job
  at its deadline, which costs more than either).

Fireline starts in its steady state: each schedule's next fire spread over the ticker's
lookahead and horizon and the fires before it already on the queue, as a running ticker
leaves them; so the window holds the ticker's steady work (five fires per pickup) rather
than its first pass over everything. Each contender runs in a fresh interpreter of its
own, and is measured over the window only: CPU seconds of its process per 1,000 fires,
lateness (the job's start less its due time), fires run against fires due (lost,
duplicated) and, for APScheduler, the fires it dropped as misfires. Both get the same
garbage-collector treatment (heap_frozen_each_second). Fireline's CPU is reported twice:
on the memory adapters, and with the SDK client CPU of each AWS request it made, measured
on this machine (fireline.sim.calibrate), which is what a deployed ticker and worker spend.

FIRELINE_PEER_JOBS and FIRELINE_PEER_SECONDS shrink a run for a quick look; the figures
go to .bench/report.json under peer.*. Nothing here fails on time.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import math
import os
import queue as queue_module
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from bench.report import record
from bench.size import SCALE

T = TypeVar("T")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# A reduced run (make bench-quick) runs the same load for a shorter window.
JOBS = int(os.environ.get("FIRELINE_PEER_JOBS", "30000"))
SECONDS = int(os.environ.get("FIRELINE_PEER_SECONDS", str(max(30, round(180 * SCALE)))))
# Run before the window (a scheduler settling after its start), and after it for the
# window's last fires to start.
WARMUP_SECONDS = 10
DRAIN_SECONDS = 5
# Fireline's worker invocations: batches of ten, enough of them to hold a second's fires
# (a message is visible up to a second before its fire time and waits it out in the worker).
INVOCATIONS = 50
# A batch's records side by side on a pool of their own, as the deployed handler runs them
# ("pool"), or one after another ("inline").
RECORDS = os.environ.get("FIRELINE_PEER_RECORDS", "inline")
APSCHEDULER_CONTENDERS = ("apscheduler.memory", "apscheduler.sqlite")

GUARANTEES = (
    "APScheduler 3 is a library inside one process: a fire exists only as that process's "
    "next run time. With the memory job store a restart forgets every job; with the "
    "SQLAlchemy store the jobs survive, but a fire in flight does not: the next run time "
    "is moved as the job is handed to its thread pool, so a crash mid-run loses that fire "
    "without a trace, and nothing records a run's outcome (no history). One job store cannot "
    "be shared by two schedulers (its documentation says so: nothing claims a fire, so it "
    "may run twice or not at all): one node runs everything. A fire later than its misfire "
    "grace (1 s by default) is dropped and reported only as an event; with coalescing, a "
    "backlog of one job's fires runs once. In exchange it is cheap, needs no network, and "
    "starts a fire with sub-second precision. "
    "Fireline writes a durable row per fire (its state, attempts, outcome: the history the "
    "API shows), claims each fire exactly once with a conditional write on its occurrence "
    "key however many workers or deliveries race for it, and executes it at least once "
    "across crashes of the ticker or the worker (the SQS message is durable until the "
    "outcome is written; a run whose worker died is taken over after its deadline); a fire "
    "is never dropped for lateness (its schedule's misfire policy decides, and a skipped "
    "fire gets a row saying why). It adds retries with backoff, tenant concurrency limits, "
    "per-schedule overlap policies and, deployed, a process per attempt killed at its "
    "deadline. Its costs: a handler may run twice (a crash after the effect and before "
    "the outcome), so it must be idempotent; every fire is a queue message and database "
    "writes, far more CPU and money than an in-process call; and on AWS, SQS counts "
    "delays in whole seconds, so a fire's message is visible up to a second early and "
    "the worker holds it until its time: precision then rests on the worker's clock and "
    "on how soon a poller takes the message (long polling), not on the scheduler."
)


def offset(n: int, jobs: int = JOBS) -> int:
    """The second of the minute job ``n`` fires at (as fireline.sim.world spreads them)."""
    return n * 60 // jobs


def due_in_window(t0: int, seconds: int, jobs: int) -> int:
    per_second = Counter(offset(n, jobs) for n in range(jobs))
    return sum(per_second[t % 60] for t in range(t0, t0 + seconds))


def spread(values: Sequence[float], never: int = 0) -> dict[str, float | None]:
    """p50, p99 and max of ``values`` and ``never`` fires that never ran, which count as
    later than any: a percentile that falls on one is None (never)."""
    ordered = sorted(values)
    total = len(ordered) + max(never, 0)
    if not total:
        return {"p50": 0.0, "p99": 0.0, "max": 0.0}

    def pick(q: float) -> float | None:
        at = min(total - 1, max(0, math.ceil(q * total) - 1))
        return round(ordered[at], 3) if at < len(ordered) else None

    return {"p50": pick(0.5), "p99": pick(0.99), "max": pick(1.0)}


def figures(
    starts: Sequence[tuple[str, int, float]],
    *,
    t0: int,
    cpu: float,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The window's figures from every job start: (fire's identity, due second, start)."""
    inside = [s for s in starts if t0 <= s[1] < t0 + SECONDS]
    runs = Counter((key, due) for key, due, _ in inside)
    expected = due_in_window(t0, SECONDS, JOBS)
    fired = len(runs)
    # Each fire's lateness is its first start's; a fire due that never started (lost, or
    # dropped as a misfire) counts as later than any, so a scheduler that drops its late
    # fires does not leave them out of its percentiles.
    first: dict[tuple[str, int], float] = {}
    for key, due, started in inside:
        first[(key, due)] = min(started, first.get((key, due), started))
    return {
        "jobs": JOBS,
        "window_seconds": SECONDS,
        "fires_due": expected,
        "fires_run": fired,
        "lost": expected - fired,
        "duplicates": sum(n - 1 for n in runs.values()),
        "lateness_seconds": spread(
            [started - due for (_, due), started in first.items()], never=expected - fired
        ),
        "lateness_seconds_of_fires_run": spread(
            [started - due for (_, due), started in first.items()]
        ),
        "cpu_seconds": round(cpu, 2),
        "cpu_seconds_per_1k_fires": round(cpu / max(fired, 1) * 1000, 3),
        "cpu_busy": round(cpu / SECONDS, 2),
        **extra,
    }


def sleep_until(moment: float) -> None:
    while (left := moment - time.time()) > 0:
        time.sleep(min(left, 1.0))


@contextlib.contextmanager
def heap_frozen_each_second() -> Iterator[None]:
    """The garbage collector's treatment, the same for every contender: once a second,
    what the process holds so far moves out of the collector's sight (``gc.freeze``), so a
    full collection walks only what is new since.

    Deployed, Fireline's tables and queue live in DynamoDB and SQS, outside the ticker's
    and the workers' processes; here they share one interpreter, and unfrozen, a full
    collection walking 90,000 rows and messages stalled every thread for up to half a
    second, more the longer the run (0.1 s early in a 3-minute run, 0.48 s at its end).
    APScheduler's job store is its own heap, so freezing it is the same favour to it: the
    lateness either shows is then its scheduler's, not the collector's."""
    stop = threading.Event()

    def freeze() -> None:
        while not stop.wait(1.0):
            gc.freeze()

    thread = threading.Thread(target=freeze, name="gc-freeze", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


# --- APScheduler ---------------------------------------------------------------------------

STARTS: list[tuple[int, float]] = []


def fired(n: int) -> None:
    """The job: note when it started (list.append is atomic under the GIL)."""
    STARTS.append((n, time.time()))


def run_apscheduler(store: str) -> dict[str, Any]:
    from apscheduler.events import EVENT_JOB_MISSED, JobExecutionEvent
    from apscheduler.jobstores.memory import MemoryJobStore
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    # Its misfire warnings go nowhere (made, not printed); the file on tmpfs where there is
    # one, so the set-up's 30,000 commits do not wait on the disk.
    logging.getLogger("apscheduler").addHandler(logging.NullHandler())
    shm = Path("/dev/shm")
    folder = tempfile.mkdtemp(prefix="peer-", dir=shm if shm.is_dir() else None)
    jobstore = (
        MemoryJobStore()
        if store == "memory"
        else SQLAlchemyJobStore(url=f"sqlite:///{folder}/jobs.sqlite")
    )
    scheduler = BackgroundScheduler(jobstores={"default": jobstore}, timezone=UTC)
    missed: list[float] = []

    def on_missed(event: JobExecutionEvent) -> None:
        missed.append(event.scheduled_run_time.timestamp())

    scheduler.add_listener(on_missed, EVENT_JOB_MISSED)
    scheduler.start()
    for n in range(JOBS):
        scheduler.add_job(fired, "cron", second=offset(n), args=[n], id=f"job{n}")
    t0 = math.ceil(time.time()) + WARMUP_SECONDS
    with heap_frozen_each_second():
        sleep_until(t0)
        cpu = time.process_time()
        sleep_until(t0 + SECONDS)
        cpu = time.process_time() - cpu
        sleep_until(t0 + SECONDS + DRAIN_SECONDS)
        scheduler.shutdown(wait=False)
    starts = []
    for n, started in list(STARTS):
        # Never early, and later than the grace only as a misfire: the due second is the
        # last one of the job's offset at or before the start.
        second = int(started)
        starts.append((str(n), second - (second - offset(n)) % 60, started))
    misfires = sum(1 for due in missed if t0 <= due < t0 + SECONDS)
    return figures(
        starts,
        t0=t0,
        cpu=cpu,
        extra={
            "misfires": misfires,
            "settings": "BackgroundScheduler, ThreadPoolExecutor(10), misfire grace 1 s, "
            f"coalesce; {type(jobstore).__name__}" + (", SQLite file" if store != "memory" else ""),
        },
    )


# --- Fireline -------------------------------------------------------------------------------


class _Inline:
    """ports.Parallel one call after another: a poller's batch, as one invocation."""

    def run(self, calls: Sequence[Callable[[], T]]) -> list[T | Exception]:
        results: list[T | Exception] = []
        for call in calls:
            try:
                results.append(call())
            except Exception as exc:  # the record's outcome, as the Lambda handler sees it
                results.append(exc)
        return results


class _InvocationMetrics:
    """One invocation's Powertools metrics, its own as in a deployed Lambda's process
    (Powertools' Metrics keeps one set per process, so here each invocation thread has an
    EphemeralMetrics: the same provider, its own set). ``flush`` is what the handlers'
    log_metrics does after each invocation (and the ticker's after each tick): the
    metrics so far written out as one EMF line, and cleared."""

    def __init__(self) -> None:
        from aws_lambda_powertools.metrics import EphemeralMetrics

        self.inner = EphemeralMetrics(namespace="Fireline", service="fireline")

    def add_metric(self, name: str, unit: str, value: float) -> None:
        self.inner.add_metric(name=name, unit=unit, value=value)

    def flush(self) -> None:
        if self.inner.metric_set:
            self.inner.flush_metrics()


class _Requests:
    """The AWS requests Fireline's ticker and workers make, counted by operation under the
    names the simulator gives them (fireline.sim.network's tables): on the memory adapters
    they cost no SDK CPU, which a deployed worker spends on each. The event source
    mapping's receives and deletes are SQS's own work, not counted."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        # Items past the first that batch requests carried, by operation (their SDK CPU
        # grows with them: SdkCost.per_item).
        self.further_items: Counter[str] = Counter()
        self._lock = threading.Lock()

    def counted(self, inner: Any, ops: dict[str, Any]) -> Any:
        """``inner`` with each of ``ops``' methods counted as its operation."""
        requests = self

        class Counted:
            def __getattr__(self, name: str) -> Any:
                attr = getattr(inner, name)
                op = ops.get(name)
                if op is None or not callable(attr):
                    return attr

                def call(*args: Any, **kwargs: Any) -> Any:
                    items = 1 if op.items is None else op.items(args, kwargs)
                    with requests._lock:
                        requests.counts[op.name] += 1
                        requests.further_items[op.name] += items - 1
                    return attr(*args, **kwargs)

                return call

        return Counted()

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)

    def further_snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.further_items)


def run_fireline() -> dict[str, Any]:
    os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "fireline")
    os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "Fireline")
    os.environ.setdefault("LOG_LEVEL", "INFO")  # as deployed (infra/template.yaml)
    from fireline import ports, wiring
    from fireline.adapters import clock as clock_adapter
    from fireline.adapters import memory
    from fireline.adapters import threads as pools
    from fireline.domain import schedule
    from fireline.services import dispatch, targets, ticker, worker
    from fireline.sim import lambdas as sim_lambdas
    from fireline.sim import network as sim_network
    from fireline.sim import world as sim_world

    wiring.logger()  # the services' loggers' parent, as each Lambda handler makes it
    ticker_metrics = _InvocationMetrics()
    clock = clock_adapter.SystemClock()
    schedules = memory.MemoryScheduleStore()
    occurrences = memory.MemoryOccurrenceStore()
    queue = memory.MemoryWorkQueue(clock)
    config = ticker.TickerConfig()
    starts: list[tuple[str, int, float]] = []

    def job(context: targets.JobContext) -> None:
        starts.append((context.occurrence_key, int(context.fire_time.timestamp()), time.time()))

    registry = targets.Registry()
    registry.register("bench.fired")(job)
    target = {"type": "python", "handler": "bench.fired"}

    # The steady state a running ticker leaves, from `base` on: each schedule's next fire
    # spread over the ticker's window ahead (lookahead to horizon, plus a period), the
    # fires before it already on the queue. Queued only up to the window's end: later ones
    # would wait in SQS the whole window, not in the worker.
    made = [
        replace(s, target=target)
        for s in sim_world.every_minute_at(JOBS, start=EPOCH, tenants=1_000, prefix="sch_")
    ]
    t0 = math.ceil(time.time()) + 5 + JOBS // 3_000 + WARMUP_SECONDS
    base = datetime.fromtimestamp(t0 - WARMUP_SECONDS, UTC)
    last = base + timedelta(seconds=WARMUP_SECONDS + SECONDS + DRAIN_SECONDS)
    span = config.horizon_seconds - config.lookahead_seconds + 60
    pending = []
    for n, item in enumerate(made):
        ahead = timedelta(seconds=config.lookahead_seconds + (n * 7919 % 1000) / 1000 * span)
        nxt = schedule.next_fire(item.timing, base + ahead)
        fire = schedule.next_fire(item.timing, base - timedelta(microseconds=1))
        while fire is not None and nxt is not None and fire < nxt and fire <= last:
            pending.append(dispatch.outbound(item, fire, base))
            fire += timedelta(minutes=1)  # every minute: the next fire without the engine
        schedules.create(item.advanced(nxt, base))
    pending.sort(key=lambda out: out.deliver_at or base)
    dispatch.send_batches(queue, pending, dispatch.DispatchReport(), clock=clock)

    requests = _Requests()
    counted_schedules = requests.counted(schedules, sim_network.schedule_ops())
    counted_occurrences = requests.counted(occurrences, sim_network.OCCURRENCE_OPS)
    counted_queue = requests.counted(queue, sim_network.QUEUE_OPS)
    the_ticker = ticker.Ticker(
        schedules=counted_schedules,
        occurrences=counted_occurrences,
        queue=counted_queue,
        leases=requests.counted(memory.MemoryLeaseStore(), sim_network.LEASE_OPS),
        clock=clock,
        owner="bench",
        config=config,
        metrics=ticker_metrics,
        after_tick=ticker_metrics.flush,
    )
    slots = memory.MemorySlotStore()
    # The register of limit overrides (none here), as the sweep builds it within minutes of
    # a deploy: an unlimited tenant's fire then reads nothing of the slots table.
    slots.build_overrides()
    counted_slots = requests.counted(slots, sim_network.SLOT_OPS)

    def a_worker(metrics: _InvocationMetrics) -> worker.Worker:
        """A worker Lambda's own Worker (deployed, each invocation's process makes one);
        the tables and the queue are the ones every invocation shares."""
        return worker.Worker(
            schedules=counted_schedules,
            occurrences=counted_occurrences,
            queue=counted_queue,
            slots=counted_slots,
            clock=clock,
            runner=targets.TargetRunner(
                registry=registry,
                signing_key=lambda tenant_id: sim_world.SIMULATED_SIGNING_KEY,
                lambda_client=lambda timeout, credentials: None,
                sqs_client=lambda credentials: None,
                python=sim_lambdas.run_inline,
            ),
            config=worker.WorkerConfig(tenant_limit=0),
            metrics=metrics,
        )

    end = t0 + SECONDS + DRAIN_SECONDS
    stop = threading.Event()
    results: Counter[str] = Counter()

    def remaining_ms() -> int:
        return int((end - time.time()) * 1000) + config.stop_before_end_ms

    batches: queue_module.Queue[list[ports.ReceivedMessage] | None] = queue_module.Queue(
        maxsize=INVOCATIONS
    )

    def source_mapping() -> None:
        """SQS's event source mapping: long-polls the queue, a batch to each invocation."""
        while not stop.is_set():
            got = queue.receive("default", max_messages=10)
            if got:
                batches.put(got)
                continue
            nxt = queue.next_visible_at("default")
            wait = 0.05 if nxt is None else (nxt - clock.now()).total_seconds()
            time.sleep(min(0.05, max(0.001, wait)))
        for _ in range(INVOCATIONS):
            batches.put(None)

    def invocation() -> None:
        """A worker Lambda, warm: its batch's records one after another, the successes deleted."""
        side_by_side: ports.Parallel = (
            pools.ThreadPool(10, name="worker-record") if RECORDS == "pool" else _Inline()
        )
        metrics = _InvocationMetrics()
        the_worker = a_worker(metrics)
        while (got := batches.get()) is not None:
            outcomes = the_worker.handle_batch(
                [m.body for m in got],
                remaining_ms=lambda: 900_000,
                parallel=side_by_side,
                receive_counts=[m.receive_count for m in got],
            )
            metrics.flush()
            results.update(type(o).__name__ if isinstance(o, Exception) else o for o in outcomes)
            done = [m for m, o in zip(got, outcomes, strict=True) if not isinstance(o, Exception)]
            queue.delete_batch("default", [m.receipt for m in done])
        if isinstance(side_by_side, pools.ThreadPool):
            side_by_side.close()

    threads = [threading.Thread(target=invocation, daemon=True) for _ in range(INVOCATIONS)]
    ticker_thread = threading.Thread(target=the_ticker.run, args=(remaining_ms,), daemon=True)
    mapping = threading.Thread(target=source_mapping, daemon=True)
    if (spare := t0 - WARMUP_SECONDS - time.time()) < 0:
        print(f"set-up overran by {-spare:.1f} s: the warm-up has a backlog", file=sys.stderr)
    sleep_until(t0 - WARMUP_SECONDS)
    with heap_frozen_each_second():
        for thread in [ticker_thread, mapping, *threads]:
            thread.start()
        sleep_until(t0)
        ticker_clock = time.pthread_getcpuclockid(ticker_thread.ident or 0)
        mapping_clock = time.pthread_getcpuclockid(mapping.ident or 0)
        cpu, ticker_cpu = time.process_time(), time.clock_gettime(ticker_clock)
        mapping_cpu = time.clock_gettime(mapping_clock)
        before, further_before = requests.snapshot(), requests.further_snapshot()
        sleep_until(t0 + SECONDS)
        cpu, ticker_cpu = time.process_time() - cpu, time.clock_gettime(ticker_clock) - ticker_cpu
        mapping_cpu = time.clock_gettime(mapping_clock) - mapping_cpu
        requested = requests.snapshot() - before
        further = requests.further_snapshot() - further_before
        sleep_until(end)
        stop.set()
        for thread in [mapping, *threads]:
            thread.join()
        ticker_thread.join()
    return figures(
        starts,
        t0=t0,
        cpu=cpu,
        extra={
            "ticker_cpu_seconds": round(ticker_cpu, 2),
            # SQS's side, deployed (receives, and the bodies' parsing the handler does).
            "source_mapping_cpu_seconds": round(mapping_cpu, 2),
            # The ticker's and the workers' requests over the window, by operation.
            "aws_requests": dict(sorted(requested.items())),
            "aws_request_further_items": dict(sorted(further.items())),
            "worker_results": dict(results),
            "settings": f"ticker (lookahead {config.lookahead_seconds} s, horizon "
            f"{config.horizon_seconds} s, ticks {config.tick_phase} s into a second) + "
            f"worker, {INVOCATIONS} invocations of 10 messages, each its own Worker and "
            "metrics, memory adapters, the deployment's INFO logging, jobs on the "
            "invocation's thread",
        },
    )


def run(name: str) -> dict[str, Any]:
    if name == "fireline.memory":
        return run_fireline()
    return run_apscheduler(name.removeprefix("apscheduler."))


# --- the benchmark ---------------------------------------------------------------------------


def contender(name: str) -> dict[str, Any]:
    """One contender in a fresh interpreter (its output, logs included, discarded)."""
    tests = str(Path(__file__).resolve().parents[1])
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "figures.json"
        subprocess.run(
            [sys.executable, "-m", "bench.bench_peer", name, str(out)],
            check=True,
            cwd=tests,
            env={**os.environ, "PYTHONPATH": tests},
            stdout=subprocess.DEVNULL,
        )
        return json.loads(out.read_text())  # type: ignore[no-any-return]


def with_sdk_cpu(figures: dict[str, Any], sdk: Any) -> dict[str, Any]:
    """Fireline's CPU a second way: its process's on the memory adapters, plus the SDK
    client CPU (serializing, signing, the exchange, parsing) this machine spends on each of
    the window's requests, as measured through the DynamoDB and SQS adapters. That is what
    a deployed ticker and worker spend. The memory adapters' own work stays in too, so the
    line is a slight overstatement."""
    further = figures.get("aws_request_further_items", {})
    sdk_cpu = sum(
        n * sdk.of(op) + further.get(op, 0) * sdk.per_item.get(op, 0.0)
        for op, n in figures["aws_requests"].items()
    )
    fired = max(figures["fires_run"], 1)
    return {
        **figures,
        "sdk_client_cpu_seconds": round(sdk_cpu, 2),
        "cpu_seconds_per_1k_fires_with_sdk_client_cpu": round(
            (figures["cpu_seconds"] + sdk_cpu) / fired * 1000, 3
        ),
        "aws_requests_per_fire": round(sum(figures["aws_requests"].values()) / fired, 3),
        "sdk_client_cpu_us_per_call": {
            op: round(sdk.of(op) * 1e6) for op in sorted(figures["aws_requests"])
        },
    }


def test_beside_apscheduler() -> None:
    pytest.importorskip("apscheduler", reason="make bench installs the bench extra")
    from fireline.sim import calibrate

    print(
        f"\n{JOBS:,} every-minute jobs, {SECONDS} s each, in real time: about "
        f"{3 * (SECONDS + WARMUP_SECONDS + DRAIN_SECONDS + 15)} s"
    )
    for name in APSCHEDULER_CONTENDERS:
        record(f"peer.{name}", contender(name))
    # Measured before Fireline's contender and apart from it, so neither run slows the other.
    sdk = calibrate.measure()
    record("peer.fireline.memory", with_sdk_cpu(contender("fireline.memory"), sdk))
    record("peer.guarantees", GUARANTEES)


if __name__ == "__main__":
    name, out = sys.argv[1:3]
    Path(out).write_text(json.dumps(run(name)))
