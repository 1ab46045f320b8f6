"""A simulated deployment: the memory stores behind the latency model, and what was sent.

Everything the code under test touches goes through :mod:`network` (latency, SDK CPU,
partition limits, faults); the scenario's own set-up (creating schedules, reading the
results) goes to the memory stores directly and costs no virtual time.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from fireline import ports
from fireline.adapters import memory
from fireline.domain import model, occurrence, schedule, signing
from fireline.services import dispatch, targets
from fireline.services import worker as worker_service
from fireline.services.worker import gathered, slot_views
from fireline.sim import kernel as sim_kernel
from fireline.sim import lambdas
from fireline.sim import network as sim_network

# Every simulated tenant signs with this key (the simulation sends no real webhook).
SIMULATED_SIGNING_KEY = signing.SigningKey("sig_sim", "simulated-signing-secret", created_ms=0)


@dataclass(frozen=True)
class Sent:
    key: str
    fire_time: datetime
    sent_at: float  # virtual seconds
    visible_at: float  # virtual seconds: sent_at + DelaySeconds
    body: dict[str, Any] = field(default_factory=dict, compare=False)


class SendLog:
    """The work queue, recording each message as it goes in (the effect, not the call)."""

    def __init__(self, inner: memory.MemoryWorkQueue, kernel: sim_kernel.Kernel) -> None:
        self.inner = inner
        self.kernel = kernel
        self.sent: list[Sent] = []

    def send_batch(self, job_class: str, messages: Sequence[ports.OutboundMessage]) -> list[str]:
        failed = set(self.inner.send_batch(job_class, messages))
        now = self.kernel.now()
        for message in messages:
            if message.id in failed:
                continue
            body = message.body
            self.sent.append(
                Sent(
                    key=body["occurrence_key"],
                    fire_time=occurrence.parse_key(body["occurrence_key"]).fire_time,
                    sent_at=now,
                    visible_at=now + message.delay_seconds,
                    body=body,
                )
            )
        return sorted(failed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class World:
    start: datetime
    seed: int = 1
    shards: int = model.DEFAULT_SHARDS
    latency: sim_network.LatencyModel = field(default_factory=sim_network.LatencyModel)
    sdk: sim_network.SdkCost = field(default_factory=sim_network.SdkCost)
    partition_units_per_second: float | None = None
    # Attempts a throttled call makes in all, as the deployed client's retries do (see
    # sim.network); 1 where a simulation counts each throttle as a failure.
    client_attempts: int = 1
    # Write units of one schedule item (a unit per KB), what an advance costs its partition.
    schedule_item_units: int = 1

    def __post_init__(self) -> None:
        self.kernel = sim_kernel.Kernel(self.start)
        self.clock = sim_kernel.SimClock(self.kernel)
        self.network = sim_network.Network(
            self.kernel,
            seed=self.seed,
            latency=self.latency,
            sdk=self.sdk,
            partition_units_per_second=self.partition_units_per_second,
            attempts=self.client_attempts,
        )
        self.memory_schedules = memory.MemoryScheduleStore(self.shards)
        self.memory_occurrences = memory.MemoryOccurrenceStore()
        self.memory_queue = memory.MemoryWorkQueue(self.clock)
        self.memory_leases = memory.MemoryLeaseStore()
        self.memory_slots = memory.MemorySlotStore()
        self.send_log = SendLog(self.memory_queue, self.kernel)
        net = self.network
        self.schedules = cast(
            ports.ScheduleStore,
            sim_network.Latent(
                self.memory_schedules,
                net,
                sim_network.schedule_ops(self.shards, item_units=self.schedule_item_units),
            ),
        )
        self.occurrences = cast(
            ports.OccurrenceStore,
            sim_network.Latent(self.memory_occurrences, net, sim_network.OCCURRENCE_OPS),
        )
        self.queue = cast(
            ports.WorkQueue, sim_network.Latent(self.send_log, net, sim_network.QUEUE_OPS)
        )
        self.leases = cast(
            ports.LeaseStore, sim_network.Latent(self.memory_leases, net, sim_network.LEASE_OPS)
        )
        self.slots = cast(
            ports.SlotStore, sim_network.Latent(self.memory_slots, net, sim_network.SLOT_OPS)
        )
        # Fires the set-up counts as already sent before the simulated window (a steady
        # state starts with the next minutes materialized).
        self.present: set[str] = set()

    def at(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)

    def seconds(self, moment: datetime) -> float:
        return (moment - self.start) / timedelta(seconds=1)

    def add(self, items: Iterable[model.Schedule]) -> None:
        for item in items:
            self.memory_schedules.create(item)

    def close(self) -> None:
        self.kernel.close()


def every_minute_at(
    count: int,
    *,
    start: datetime,
    tenants: int = 10_000,
    timezone: str = "UTC",
    prefix: str = "min",
) -> list[model.Schedule]:
    """``count`` every-minute schedules spread evenly over the 60 seconds of a minute."""
    made: list[model.Schedule] = []
    for n in range(count):
        second = n * 60 // count
        spec_text = f"cron({second} * * * * *)"
        timing = schedule.Timing(spec=schedule.parse_spec(spec_text), timezone=timezone)
        made.append(
            model.Schedule(
                tenant_id=f"tenant-{n % tenants:05d}",
                schedule_id=f"{prefix}{n:07d}",
                timing=timing,
                spec_text=spec_text,
                next_fire=schedule.next_fire(timing, start - timedelta(microseconds=1)),
                created_at=start,
            )
        )
    return made


def steady_state(
    world: World, items: list[model.Schedule], *, lookahead: int, horizon: int
) -> list[model.Schedule]:
    """Move each schedule to where a running ticker would have left it: its next fire
    spread over (lookahead, horizon + period] ahead of the start, the fires before
    that already sent (counted in ``world.present``)."""
    settled: list[model.Schedule] = []
    span = horizon - lookahead
    for n, item in enumerate(items):
        assert item.next_fire is not None
        ahead = lookahead + (n * 7919 % 1000) / 1000 * (span + 60)
        after = world.start + timedelta(seconds=ahead)
        nxt = schedule.next_fire(item.timing, after)
        fire: datetime | None = item.next_fire
        while fire is not None and nxt is not None and fire < nxt:
            world.present.add(occurrence.occurrence_key(item.schedule_id, item.version, fire))
            fire = schedule.next_fire(item.timing, fire)
        settled.append(item.advanced(nxt, world.start))
    return settled


def fires_between(
    items: Iterable[model.Schedule], first: datetime, last: datetime
) -> dict[str, datetime]:
    """Every fire of ``items`` in [first, last] by occurrence key (from each next fire)."""
    expected: dict[str, datetime] = {}
    for item in items:
        fire = item.next_fire
        while fire is not None and fire <= last:
            if fire >= first:
                expected[occurrence.occurrence_key(item.schedule_id, item.version, fire)] = fire
            fire = schedule.next_fire(item.timing, fire)
    return expected


@dataclass(frozen=True)
class Spread:
    count: int
    p50: float
    p99: float
    max: float
    mean: float = 0.0  # what a total scales with (a worker's billed wait, for one)

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            return cls(0, 0.0, 0.0, 0.0)
        ordered = sorted(values)

        def pick(q: float) -> float:
            return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

        return cls(len(ordered), pick(0.50), pick(0.99), ordered[-1], sum(ordered) / len(ordered))

    def as_dict(self, digits: int = 3) -> dict[str, float]:
        return {
            "count": self.count,
            "mean": round(self.mean, digits),
            "p50": round(self.p50, digits),
            "p99": round(self.p99, digits),
            "max": round(self.max, digits),
        }


@dataclass
class Delivery:
    """What the ticker delivered against what it should have."""

    expected: int
    lost: list[str]
    duplicate_messages: int
    lateness: Spread  # seconds from fire time to visible, clipped at 0 (never early)
    early: Spread  # seconds visible before the fire time

    @classmethod
    def of(cls, world: World, expected: dict[str, datetime]) -> Delivery:
        counts = Counter(s.key for s in world.send_log.sent)
        first_visible: dict[str, float] = {}
        for sent in world.send_log.sent:
            if sent.key in expected:
                first_visible[sent.key] = min(
                    first_visible.get(sent.key, math.inf), sent.visible_at
                )
        late, early = [], []
        for key, visible in first_visible.items():
            delta = visible - world.seconds(expected[key])
            late.append(max(0.0, delta))
            early.append(max(0.0, -delta))
        lost = [k for k in expected if k not in first_visible and k not in world.present]
        return cls(
            expected=len(expected),
            lost=lost,
            duplicate_messages=sum(n - 1 for n in counts.values() if n > 1),
            lateness=Spread.of(late),
            early=Spread.of(early),
        )


class Jobs:
    """Simulated Python jobs: each records when it started (virtual) and then works for
    its duration, in virtual time: waiting (``cpu`` False), or computing (``cpu`` True:
    ``seconds`` of this machine's CPU, charged at the invocation's share, so the jobs of
    one invocation queue for its vCPU as a Python job's child processes do)."""

    def __init__(
        self, kernel: sim_kernel.Kernel, seconds: float = 1.0, *, cpu: bool = False
    ) -> None:
        self.kernel = kernel
        self.seconds = seconds
        self.cpu = cpu
        self.started: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.runs: Counter[str] = Counter()
        self.registry = targets.Registry()
        self.registry.register("sim.work")(self._work)

    def _work(self, context: targets.JobContext) -> None:
        self.started.setdefault(context.occurrence_key, self.kernel.now())
        self.runs[context.occurrence_key] += 1
        if self.cpu:
            self.kernel.charge(self.seconds)
            self.kernel.sleep(0)  # the CPU is spent: the clock moves past it
        else:
            self.kernel.sleep(self.seconds)
        self.finished[context.occurrence_key] = self.kernel.now()


class SimTargets(targets.TargetRunner):
    """The real target runner, with HTTP targets answered in virtual time: a request
    takes a duration drawn from ``durations`` (seeded), past its timeout it is the
    attempt's deadline, as a slow webhook's is. The HTTP client itself
    (fireline.services.webhook) reads the wall clock and opens sockets, so it is not run
    here; its CPU per request is ``http_cpu_seconds`` of this machine's, charged at the
    invocation's share. Python, Lambda and SQS targets run as the runner runs them."""

    def __init__(
        self,
        kernel: sim_kernel.Kernel,
        *,
        durations: sim_network.TargetDuration = sim_network.ONE_SECOND_TARGET,
        seed: int = 1,
        http_cpu_seconds: float = 0.0,
        **runner: Any,
    ) -> None:
        super().__init__(**runner)
        self.kernel = kernel
        self.durations = durations
        self.http_cpu_seconds = http_cpu_seconds
        self._rng = random.Random(seed)
        self.started: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.runs: Counter[str] = Counter()
        self.waited = 0.0  # virtual seconds spent waiting on targets, all records

    def most_at_once(self) -> int:
        """The most targets that were running at one moment (from their first start to
        their first end)."""
        events = sorted(
            [(t, 1) for t in self.started.values()] + [(t, -1) for t in self.finished.values()]
        )
        running = peak = 0
        for _, step in events:
            running += step
            peak = max(peak, running)
        return peak

    def _http(self, target: dict[str, Any], context: targets.JobContext, timeout: float) -> Any:
        k = self.kernel
        key = context.occurrence_key
        self.started.setdefault(key, k.now())
        self.runs[key] += 1
        k.charge(self.http_cpu_seconds)
        took = self.durations.draw(self._rng)
        limit = min(timeout, float(target.get("timeout_seconds", timeout)))
        k.sleep(min(took, limit))
        self.waited += min(took, limit)
        if took > limit:
            raise targets.DeadlineExceeded(f"no answer in {limit:.0f} s")
        self.finished[key] = k.now()
        return {"status": 200, "body": ""}


def worker_for(
    world: World,
    jobs: Jobs,
    *,
    job_class: str = "default",
    tenant_limit: int = 0,
    class_max_concurrency: int = 0,
    python: targets.PythonRunner = lambdas.run_inline,
    runner: targets.TargetRunner | None = None,
    burst_lead_seconds: float = 0.0,
    in_flight: int = 1,
    pool_member: str | None = None,
) -> worker_service.Worker:
    """The real worker service over the world's simulated stores, running simulated jobs
    (``runner``: a :class:`SimTargets` for HTTP targets, built with :func:`runner_args`).
    ``burst_lead_seconds``: the deployment's BurstLeadSeconds (how early a burst's fire
    may come, and be held); ``in_flight`` and ``pool_member`` as the deployed worker
    has them (WORKER_IN_FLIGHT, and its container in the class's register): a tenant's
    share of the class counts ``class_max_concurrency`` times ``in_flight`` jobs."""
    runner = runner or targets.TargetRunner(**runner_args(jobs, python))
    return worker_service.Worker(
        schedules=world.schedules,
        occurrences=world.occurrences,
        queue=world.queue,
        slots=world.slots,
        clock=world.clock,
        runner=runner,
        config=worker_service.WorkerConfig(
            job_class=job_class,
            tenant_limit=tenant_limit,
            class_max_concurrency=class_max_concurrency,
            early_hold_seconds=worker_service.early_hold_for(job_class, burst_lead_seconds),
            in_flight=in_flight,
            pool_member=pool_member,
        ),
        # Simulated threads wait only on the kernel's clock.
        reads=gathered.GatheredReads(world.clock, poll=True),
        slot_views=slot_views.SlotViews(world.clock, poll=True),
    )


def runner_args(jobs: Jobs, python: targets.PythonRunner = lambdas.run_inline) -> dict[str, Any]:
    """A target runner's arguments for the simulation: the jobs' registry, the simulated
    signing key, no AWS target clients."""
    return {
        "registry": jobs.registry,
        "signing_key": lambda tenant_id: SIMULATED_SIGNING_KEY,
        "lambda_client": lambda timeout, credentials: None,
        "sqs_client": lambda credentials: None,
        "python": python,
    }


HTTP_TARGET = {"type": "http", "url": "https://jobs.example.com/hook"}


def one_off(
    count: int,
    due: datetime,
    *,
    tenants: int = 10_000,
    target: dict[str, Any] | None = None,
    prefix: str = "job",
    **fields: Any,
) -> list[model.Schedule]:
    """``count`` one-off jobs due at ``due`` over ``tenants`` tenants, already
    materialized (completed: the ticker is done with them)."""
    spec = schedule.AtSpec(when=due)
    return [
        model.Schedule(
            tenant_id=f"tenant-{n % tenants:05d}",
            schedule_id=f"{prefix}{n:07d}",
            timing=schedule.Timing(spec=spec),
            spec_text=str(spec),
            kind=model.Kind.JOB,
            target=dict(target or HTTP_TARGET),
            state=model.ScheduleState.COMPLETED,
            **fields,
        )
        for n in range(count)
    ]


def enqueue(world: World, fires: Sequence[tuple[model.Schedule, datetime]]) -> list[str]:
    """Put each fire's message on its class's queue as the ticker would have sent it at
    the world's current time (visible up to a second early, its delay rounded down); the
    set-up's, costing no virtual time. Their occurrence keys."""
    now = world.kernel.wall()
    keys = []
    by_class: dict[str, list[ports.OutboundMessage]] = {}
    for item, fire_time in fires:
        body = dispatch.fire_message(item, fire_time)
        keys.append(body["occurrence_key"])
        batch = by_class.setdefault(item.job_class, [])
        batch.append(
            ports.OutboundMessage(
                body=body, delay_seconds=dispatch.delay_until(fire_time, now), id=str(len(batch))
            )
        )
        if len(batch) == 10:
            world.memory_queue.send_batch(item.job_class, by_class.pop(item.job_class))
    for job_class, batch in by_class.items():
        world.memory_queue.send_batch(job_class, batch)
    return keys


def next_visible(world: World, job_class: str = "default") -> Callable[[], float | None]:
    def peek() -> float | None:
        moment = world.memory_queue.next_visible_at(job_class)
        return None if moment is None else world.seconds(moment)

    return peek
