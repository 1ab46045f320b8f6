"""Each path a job takes, run end to end on moto as deployed, and metered.

The real ticker (one invocation a simulated minute, leased, ticking every second) and
the real worker (a batch of up to ten messages an invocation, as the event source
mapping delivers them and deletes the batch) run on the template's tables and queues,
with the deployment's quota counting on. The meter (fireline.cost.meter) counts every
request and DynamoDB unit, the CPU each function spends outside moto, and the bytes the
product logs as the deployed JSON lines; ``Measured`` turns them into figures per job
and dollars per million.

The benchmark runs the paths at scale; tests/integration/test_cost_paths.py runs them
small and pins their counts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import io
import json
import logging
import random
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

from fireline import ports
from fireline.adapters import quotas_dynamodb, schedules_dynamodb, sweep_dynamodb, threads
from fireline.api import app as api_app
from fireline.cost import meter, model
from fireline.domain import occurrence, quota, workflow
from fireline.services import dispatch, roles, schedules
from fireline.services import sweep as sweep_service
from fireline.services import ticker as ticker_service
from fireline.services import worker as worker_service

from .flows import node, wide_dag
from .receiver import http_receiver
from .system import REGION, System, client_as, flow_on, moto_system
from .transactions import item_scoped_transactions

TARGET = {"type": "python", "handler": "noop"}
TENANT = "tenant-a"
# The template's TenantConcurrencyLimit and the default class's MaximumConcurrency.
DEPLOYED_TENANT_LIMIT = quota.DEFAULT_LIMIT
DEPLOYED_CLASS_CONCURRENCY = 50
# The event source mapping hands the worker batches of up to ten, and deletes a batch's
# successes in one request: neither is a Lambda's call.
EVENT_SOURCE = "event_source_mapping"
#: When a minutely schedule's next pickup comes, seconds after the first tick: the first
#: tick materializes its fires up to the horizon (900 s), so its next fire (960 s on) comes
#: within the lookahead of now at 960 - lookahead: then the pickup takes the fires up to the
#: horizon again, (horizon - lookahead) / 60 of them. The template's defaults.
MINUTELY_PICKUP_AT = 960 - ticker_service.TickerConfig.lookahead_seconds
#: The deployed ticker's invocation: EventBridge every minute, a 60 s timeout. It ticks
#: until its minute is up, so Lambda bills the whole minute whatever it found to do.
TICKER_INVOCATION_MS = 60_000
#: A request through the deployed REST API (its authorizer's answer is cached per key).
API_REQUEST = "apigateway.Request"


@dataclass
class Measured:
    """One path's metered run: its jobs and what the meter counted for them."""

    jobs: int
    usage: model.Usage
    calls: dict[str, float]  # API calls per job by "service.Operation"
    # The worker's CPU metered here, per job, where its billed time is the simulation's
    # (see with_worker_wall).
    metered_worker_cpu_ms: float | None = None

    def plus_fixed(self, minute: Measured, jobs_per_minute: float) -> Measured:
        """This path with the deployment's fixed cost of a minute spread over
        ``jobs_per_minute``."""
        calls = {
            op: self.calls.get(op, 0.0) + minute.calls.get(op, 0.0) / jobs_per_minute
            for op in sorted({*self.calls, *minute.calls})
        }
        return Measured(
            self.jobs,
            self.usage.plus(minute.usage, 1 / jobs_per_minute),
            calls,
            self.metered_worker_cpu_ms,
        )

    def with_worker_wall(self, *, invocations: float, wall_seconds: float) -> Measured:
        """This path with its worker invocations as the latency-model simulation of the
        design load measured them (per job: ``invocations``, and ``wall_seconds`` of
        their wall time, the waits on early fires and on targets and the CPU included):
        Lambda bills the wall time, and how many records an invocation carries is the
        event source mapping's doing at that load, which a metered run here cannot show.
        The worker's CPU metered here stays in ``cpu_ms_per_fire`` and is not billed
        again."""
        u = self.usage

        def worker(values: Mapping[str, float], value: float | None) -> dict[str, float]:
            kept = {f: v for f, v in values.items() if f != "worker"}
            return kept if value is None else {**kept, "worker": value}

        usage = dataclasses.replace(
            u,
            invocations=worker(u.invocations, invocations),
            wall_seconds=worker(u.wall_seconds, wall_seconds),
            network_seconds=worker(u.network_seconds, 0.0),
            aws_calls=worker(u.aws_calls, None),
            target_seconds=worker(u.target_seconds, None),
            wait_seconds=worker(u.wait_seconds, None),
            cpu_seconds=worker(u.cpu_seconds, None),
        ).traced()
        return Measured(self.jobs, usage, self.calls, u.cpu_seconds.get("worker", 0.0) * 1000)

    @classmethod
    def of(cls, log: meter.Meter, jobs: int, **extra: Any) -> Measured:
        assert jobs > 0, "the path ran no job"
        calls = {op: n / jobs for op, n in sorted(log.calls.items())}
        # With tracing as deployed: the fire's own trace at the default rate and Lambda's
        # of the invocations it takes.
        return cls(jobs, model.Usage.of(log, jobs, **extra).traced(), calls)

    def figures(self) -> dict[str, Any]:
        u = self.usage
        return {
            "jobs": self.jobs,
            **model.per_million(u),
            "write_units_per_fire": round(u.write_units, 4),
            "index_write_units_per_fire": round(u.index_write_units, 4),
            "read_units_per_fire": round(u.read_units, 4),
            "log_bytes_per_fire": round(u.all_log_bytes(), 1),
            "product_log_bytes_per_fire": round(u.log_bytes, 1),
            "requests_per_fire": {op: round(n, 4) for op, n in u.billed.items()},
            "lambda_invocations_per_fire": {f: round(n, 4) for f, n in u.invocations.items()},
            "cpu_ms_per_fire": {
                **{f: round(s * 1000, 4) for f, s in u.cpu_seconds.items()},
                **(
                    {}
                    if self.metered_worker_cpu_ms is None
                    else {"worker": round(self.metered_worker_cpu_ms, 4)}
                ),
            },
        }


# --- the deployment, metered ---------------------------------------------------------------


@contextlib.contextmanager
def deployed_system(
    counts: type[quotas_dynamodb.DynamoQuotaStore] = quotas_dynamodb.DynamoQuotaStore,
    sleep: Callable[[float], None] = time.sleep,
    *,
    lambda_without_docker: bool = False,
) -> Iterator[System]:
    """A moto system wired as deployed: quota counting on (the slots table keeps the
    counts, in a ``counts``, ``system.quotas``), and the product's log lines counted as
    the deployed JSON lines. ``sleep``: the stores' backoff between retries.
    ``lambda_without_docker``: Lambda targets answer from moto's stub."""
    with (
        moto_system(lambda_without_docker=lambda_without_docker) as system,
        logs_counted(system.log),
    ):
        tables = system.stack.tables
        system.quotas = counts(system.ddb, tables["SlotsTable"], sleep=sleep)
        system.schedules = schedules_dynamodb.DynamoScheduleStore(
            system.ddb, tables["SchedulesTable"], quotas=system.quotas, sleep=sleep
        )
        system.service = schedules.ScheduleService(
            schedules=system.schedules,
            occurrences=system.occurrences,
            queue=system.queue,
            clock=system.clock,
            quotas=dict(quota.DEFAULT_QUOTAS),
            ids=seeded_ids(TENANT),
        )
        system._api = api_app.build_app(
            system.service, system.idempotency, backfills=system.backfills
        )
        # The register of limit overrides, as a deployment has it once the sweep (or
        # `fireline admin migrate overrides`) built it: every later change keeps it.
        system.slots.build_overrides()
        yield system


def seeded_ids(seed: str) -> Callable[[str], str]:
    """Ids of the deployed shape from a seeded stream: the shards they hash to, and so
    the ticker's pages and batches, are the same on every run."""
    stream = random.Random(seed)
    return lambda prefix: f"{prefix}_{stream.getrandbits(80):020x}"


@contextlib.contextmanager
def logs_counted(log: meter.Meter) -> Iterator[None]:
    """Count the bytes the product logs at the deployed level (INFO), formatted as the
    deployed Powertools logger writes them inside a handler (its Lambda context keys)."""
    formatter = LambdaPowertoolsFormatter()
    formatter.append_keys(
        service="fireline",
        cold_start=False,
        function_name="fireline-WorkerFunction-AbCdEf123456",
        function_memory_size="512",
        function_arn=(
            "arn:aws:lambda:us-east-1:123456789012:function:fireline-WorkerFunction-AbCdEf123456"
        ),
        function_request_id="8f507cfc-1a2b-4697-b07a-ac58fc914c95",
        xray_trace_id="1-5759e988-bd862e3fe1be46a994272793",
    )
    handler = log.log_handler(formatter)
    product = logging.getLogger("fireline")
    level = product.level
    product.addHandler(handler)
    product.setLevel(logging.INFO)
    try:
        yield
    finally:
        product.removeHandler(handler)
        product.setLevel(level)


def deployed_worker(system: System, *, tenant_limit: int) -> worker_service.Worker:
    """The default class's worker as wiring builds it (jobs' quota given back, a
    backfill's pass after each of its fires settles)."""
    return worker_service.Worker(
        schedules=system.schedules,
        occurrences=system.occurrences,
        queue=system.queue,
        slots=system.slots,
        clock=system.clock,
        runner=system.runner(),
        config=worker_service.WorkerConfig(
            job_class="default",
            tenant_limit=tenant_limit,
            class_max_concurrency=DEPLOYED_CLASS_CONCURRENCY if tenant_limit else 0,
            jobs_counted=True,
            pool_member="container-1",
        ),
        metrics=system.metrics,
        backfills=system.backfills,
    )


def deployed_sweep(system: System) -> sweep_service.Sweep:
    """The sweep as wiring builds it, on the system's tables."""
    tables = system.stack.tables
    return sweep_service.Sweep(
        store=sweep_dynamodb.DynamoSweepStore(
            system.ddb, schedules_table=tables["SchedulesTable"], slots_table=tables["SlotsTable"]
        ),
        schedules=system.schedules,
        occurrences=system.occurrences,
        queue=system.queue,
        clock=system.clock,
    )


def deliver(
    system: System,
    worker: worker_service.Worker,
    *,
    sent_by_ticker: bool = True,
    at_phase: bool | None = None,
    batch_size: int = 10,
    target: TargetWait | None = None,
) -> int:
    """What the event source mapping does with what is visible now: batches of up to ten
    to a worker invocation each (the worker's handle_batch, as the deployed handler
    calls it), the batch's successes deleted in one request. Its empty polls are a fixed
    cost per queue, not per job: only the receives that found work are counted. The
    jobs that succeeded. ``sent_by_ticker``: the ticker sent what is on the queue (it
    counts delays from a margin past its clock, see model.expected_wait), else the API.
    ``at_phase``: the sender chose the phase of the second it sent at (the ticker does, and
    the API for a batch); by default, as ``sent_by_ticker``.

    A batch holds what comes due together: deployed, each fire becomes visible at its
    time (up to a second before it: the invocation waits, see ``_batch_wait``), so a
    batch holds fires of one moment, of as many schedules. Here every fire a pickup sent
    is visible at once (the clock jumps past them all), in the order the ticker sent
    them, a schedule's fires together; so they are batched in fire time order, as they
    would arrive. ``batch_size``: the event source mapping's (the template's BatchSize);
    ``target``: the records' remote targets take this long, and the invocation waits."""
    log = system.log
    url = system.stack.queues["DefaultQueue"]
    succeeded = 0
    while True:
        visible: list[ports.ReceivedMessage] = []
        with log.unmetered():
            while received := system.queue.receive("default", max_messages=10):
                visible += received
        if not visible:
            return succeeded
        visible.sort(key=lambda m: _fire_time(m.body))
        for start in range(0, len(visible), batch_size):
            batch = visible[start : start + batch_size]
            wait = _batch_wait(
                system,
                batch,
                sent_by_ticker,
                sent_by_ticker if at_phase is None else at_phase,
            )
            succeeded += _deliver_batch(system, worker, url, batch, wait, target)


def _fire_time(body: dict[str, Any]) -> datetime:
    return occurrence.parse_key(body["occurrence_key"]).fire_time


def _batch_wait(
    system: System, batch: list[ports.ReceivedMessage], sent_by_ticker: bool, at_phase: bool
) -> float:
    """How long, deployed, the batch's invocation is expected to hold its records before
    their fire time (model.expected_wait): the longest of their waits, a batch's records
    of one moment having become visible together. Here the clock jumps past every fire
    before the worker runs, so nothing waits: the wait is billed apart. A record whose
    occurrence row is written already was sent at or after its fire time (a trigger, or
    sent again after a delivery: a retry, a deferral, a redelivery): it does not wait."""
    with system.log.unmetered():
        stored = system.occurrences.get_many([m.body["occurrence_key"] for m in batch])
        ids = {(m.body["tenant_id"], m.body["schedule_id"]) for m in batch}
        items = {(s.tenant_id, s.schedule_id): s for s in system.schedules.get_many(list(ids))}
    counted_from = dispatch.IN_FLIGHT if sent_by_ticker else timedelta(0)
    waits = [0.0]
    for message in batch:
        body = message.body
        if body["occurrence_key"] in stored:
            continue
        fire_time = _fire_time(body)
        item = items.get((body["tenant_id"], body["schedule_id"]))
        deliver_at = dispatch.deliver_time(item, fire_time) if item else fire_time
        sent_at = datetime.fromtimestamp(body["sent_at_ms"] / 1000, UTC)
        waits.append(
            model.expected_wait(
                fire_time,
                deliver_at,
                sent_at,
                counted_from=counted_from,
                at_its_phase=at_phase,
            )
        )
    return max(waits)


@dataclass(frozen=True)
class TargetWait:
    """Remote targets that answer after ``seconds``, ``in_flight`` of an invocation's
    records waiting on theirs at once (None: all of the batch)."""

    seconds: float
    in_flight: int | None = None

    def span(self, records: int) -> float:
        """How long an invocation of ``records`` such records waits on them: rounds of
        ``in_flight`` side by side."""
        if records == 0:
            return 0.0
        slots = records if self.in_flight is None else min(self.in_flight, records)
        return -(-records // slots) * self.seconds


class _CountingRunner:
    """A target runner that counts the target calls made through it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls = 0

    def run(self, target: dict[str, Any], context: Any, *, timeout: float) -> Any:
        self.calls += 1
        return self._inner.run(target, context, timeout=timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Chains:
    """ports.Parallel on one thread that notes, for each call it runs, the AWS calls and
    target calls it made: what that call would have waited on, run side by side with
    the others of its run as the deployed handler runs them."""

    def __init__(self, log: meter.Meter, function: str, inner: Any, targets: _CountingRunner):
        self._log = log
        self._function = function
        self._inner = inner
        self._targets = targets
        self.runs: list[list[tuple[int, int]]] = []

    def run(self, calls: Any) -> list[Any]:
        notes: list[tuple[int, int]] = [(0, 0)] * len(calls)

        def noted(index: int, call: Callable[[], Any]) -> Callable[[], Any]:
            def go() -> Any:
                aws, targets = self._log.function_calls[self._function], self._targets.calls
                try:
                    return call()
                finally:
                    notes[index] = (
                        self._log.function_calls[self._function] - aws,
                        self._targets.calls - targets,
                    )

            return go

        results = self._inner.run([noted(i, c) for i, c in enumerate(calls)])
        self.runs.append(notes)
        return list(results)

    def wall(self, calls: int, target: TargetWait | None) -> float:
        """The invocation's wait on the network: its ``calls`` AWS calls at 5 ms each,
        those made inside a run side by side with the run's others (the records of a
        batch ``target.in_flight`` at a time), each record also waiting on its target."""
        inside = sum(n for run in self.runs for n, _ in run)
        waited = (calls - inside) * model.SECONDS_PER_AWS_CALL
        for run in self.runs:
            remote = any(t for _, t in run)
            slots = len(run)
            if remote and target is not None and target.in_flight is not None:
                slots = min(slots, target.in_flight)
            chains = [
                n * model.SECONDS_PER_AWS_CALL + (t * target.seconds if target else 0.0)
                for n, t in run
            ]
            waited += _span(chains, max(1, slots))
        return waited


def _span(chains: list[float], slots: int) -> float:
    """How long ``chains`` take on ``slots`` side by side, each taken in turn by the
    first slot free."""
    free = [0.0] * slots  # a heap of when each slot is free
    for chain in chains:
        heapq.heapreplace(free, free[0] + chain)
    return max(free) if chains else 0.0


def _deliver_batch(
    system: System,
    worker: worker_service.Worker,
    url: str,
    batch: list[ports.ReceivedMessage],
    wait: float,
    target: TargetWait | None = None,
) -> int:
    log = system.log
    # The mapping receives ten a request; each request is billed per 64 KB of payload.
    for first in range(0, len(batch), 10):
        payload = sum(len(json.dumps(m.body)) for m in batch[first : first + 10])
        log.charge("sqs.ReceiveMessage", meter.sqs_requests(payload))
    log.hold("worker", wait)
    # One thread: the records in turn, so the requests they make (and the slots they race
    # for) are the same on every run; the deployed handler runs them side by side, so the
    # invocation's wait is worked out from each record's calls as if it had (_Chains).
    runner = worker.runner
    counted = _CountingRunner(runner)
    worker.runner = counted  # type: ignore[assignment]
    calls_before = log.function_calls["worker"]
    try:
        with (
            log.within("worker"),
            threads.ThreadPool(1, name="worker-record") as pool,
        ):
            chains = _Chains(log, "worker", pool, counted)
            outcomes = worker.handle_batch(
                [m.body for m in batch],
                remaining_ms=lambda: 60_000,
                parallel=chains,
                receive_counts=[m.receive_count for m in batch],
            )
    finally:
        worker.runner = runner
    calls = log.function_calls["worker"] - calls_before
    log.waited("worker", chains.wall(calls, target))
    succeeded = 0
    done = []
    for message, outcome in zip(batch, outcomes, strict=True):
        if isinstance(outcome, worker_service.Busy):
            continue  # reported as a batch item failure: SQS redelivers it
        if isinstance(outcome, Exception):
            raise outcome
        succeeded += outcome is worker_service.Result.SUCCEEDED
        done.append(message)
    if target is not None:
        # The targets answer at once here; deployed, the invocation waits on them.
        log.on_targets("worker", target.span(succeeded))
    for first in range(0, len(done), 10):
        with log.within(EVENT_SOURCE, invocations=0):
            system.sqs_client.delete_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m.receipt}
                    for i, m in enumerate(done[first : first + 10])
                ],
            )
    return succeeded


def run_minutes(system: System, worker: worker_service.Worker, minutes: int) -> int:
    """``minutes`` ticker invocations, one a minute, the worker keeping up after every
    tick; the jobs that succeeded."""
    succeeded = 0
    log = system.log

    def after_tick() -> None:
        nonlocal succeeded
        succeeded += deliver(system, worker)

    for minute in range(minutes):
        end = system.clock.monotonic() + TICKER_INVOCATION_MS / 1000
        tk = system.ticker(owner=f"invocation-{minute}")
        tk.after_tick = after_tick
        with log.within("ticker"):
            tk.run(lambda end=end: int((end - system.clock.monotonic()) * 1000))
        system.clock.advance(max(0.0, end - system.clock.monotonic()))
        succeeded += deliver(system, worker)
    return succeeded


def pickup_cycle(
    system: System,
    worker: worker_service.Worker,
    *,
    warm_ticks: int,
    pickup_at: int,
    batch_size: int = 10,
    target: TargetWait | None = None,
) -> int:
    """One steady-state pickup, metered: what the ticker writes and sends for the fires
    it picks up in one tick, and what the worker does to run them all. Warm-up ticks
    (once a second, left out, their messages dropped) first bring the schedules to where
    every later pickup finds them, a horizon ahead; the metered tick is the next pickup,
    ``pickup_at`` seconds after the first tick. The ticker's idle reads (one Query per
    shard a tick, found or not) are a cost per deployment, not per fire, and left out."""
    started = system.clock.monotonic()
    with system.log.unmetered():
        tk = system.ticker(use_lease=False)
        for _ in range(warm_ticks):
            tk.tick()
            system.clock.advance(1)
        system.sqs_client.purge_queue(QueueUrl=system.stack.queues["DefaultQueue"])
    # The metered tick at the phase of the second the leased ticker's ticks start at: it
    # holds its sends until its send phase, as deployed.
    phase = ticker_service.TickerConfig().tick_phase
    system.clock.advance(pickup_at - (system.clock.monotonic() - started) + phase)
    system.log.reset()
    with system.log.within("ticker", invocations=1 / 55):
        report = tk.tick()
    assert report.advanced, "the metered tick picked nothing up"
    system.clock.advance(900)
    return deliver(system, worker, batch_size=batch_size, target=target)


# --- the paths -------------------------------------------------------------------------------


def recurring(
    system: System,
    spec: str,
    schedules_count: int,
    *,
    pickup_at: int,
    warm_ticks: int = 1,
    tenant: str = TENANT,
    tenant_limit: int = 0,
    target: dict[str, Any] | None = None,
    batch_size: int = 10,
    waits: TargetWait | None = None,
) -> Measured:
    """``schedules_count`` schedules of ``spec`` in ``tenant``: their pickup at
    ``pickup_at`` seconds, metered on its own (``pickup_cycle``). The schedules are
    deleted after (not metered), so the system can serve the next path."""
    system.service.ids = seeded_ids(tenant)
    with system.log.unmetered():
        system.slots.set_limit(tenant, tenant_limit or None)
        created = [
            system.service.create(
                tenant, schedules.ScheduleDraft(spec=spec, target=target or TARGET)
            )
            for _ in range(schedules_count)
        ]
    worker = deployed_worker(system, tenant_limit=tenant_limit)
    succeeded = pickup_cycle(
        system,
        worker,
        warm_ticks=warm_ticks,
        pickup_at=pickup_at,
        batch_size=batch_size,
        target=waits,
    )
    measured = Measured.of(system.log, succeeded)
    with system.log.unmetered():
        for schedule in created:
            system.service.delete(tenant, schedule.schedule_id)
    return measured


def backfill(system: System, fires: int, *, tenant: str = TENANT) -> Measured:
    """An hourly schedule's ``fires`` past hours backfilled through the API (one
    request) and run, ten side by side (overlap allow): each fire's row put by the API,
    its message sent by a pass over the backfill's record, and a pass after each fire
    settles, which releases the next. The schedule's creation is not metered."""
    system.service.ids = seeded_ids(tenant)
    system.backfills.ids = seeded_ids(f"{tenant}-backfill")
    with system.log.unmetered():
        created = system.service.create(
            tenant, schedules.ScheduleDraft(spec="rate(1 hour)", target=TARGET)
        )
    system.clock.advance((fires + 1) * 3600)
    now = system.clock.now().replace(minute=0, second=0, microsecond=0)
    request = {
        "from": (now - timedelta(hours=fires)).isoformat(),
        "to": now.isoformat(),
        "overlap": "allow",
    }
    system.log.reset()
    system.log.charge(API_REQUEST)
    with system.log.within("api"):
        status, body = system.call(
            "POST", f"/schedules/{created.schedule_id}/backfill", request, tenant=tenant
        )
    assert status == 202 and body["created"] == fires, body
    succeeded = deliver(system, deployed_worker(system, tenant_limit=0), sent_by_ticker=False)
    assert succeeded == fires, (succeeded, fires)
    measured = Measured.of(system.log, succeeded)
    with system.log.unmetered():
        system.service.delete(tenant, created.schedule_id)
    return measured


def remote_http(
    system: System,
    schedules_count: int,
    *,
    seconds: float,
    batch_size: int = 10,
    in_flight: int | None = None,
) -> Measured:
    """``schedules_count`` minutely schedules whose target is an HTTP endpoint (a
    receiver on 127.0.0.1, through the real webhook client and its SSRF guard) that
    answers after ``seconds``: their pickup metered as :func:`recurring`'s, batches of
    ``batch_size``, the invocation billed its wait on the targets, ``in_flight`` of a
    batch's records waiting at once. The receiver answers at once and the wait is
    counted, not slept (a bench of thousands of fires would otherwise take hours); the
    latency-model simulation runs the same wait in virtual time."""
    system.allow_local_webhooks()  # the receiver: plain http on 127.0.0.1
    with http_receiver("/hook") as (url, received):
        measured = recurring(
            system,
            "rate(1 minute)",
            schedules_count,
            pickup_at=MINUTELY_PICKUP_AT,
            target={"type": "http", "url": url},
            batch_size=batch_size,
            waits=TargetWait(seconds, in_flight),
        )
        assert len(received) == measured.jobs, (len(received), measured.jobs)
    return measured


#: A tenant's account and the role Fireline assumes there to call its targets.
TENANT_ACCOUNT = "111122223333"
TENANT_ROLE = f"arn:aws:iam::{TENANT_ACCOUNT}:role/fireline-target/fireline-jobs"


def tenant_function(name: str = "job") -> str:
    """A function in the tenant's own account (moto's Lambda stub answers its invokes):
    its ARN."""
    answer = boto3.client("sts", region_name=REGION).assume_role(
        RoleArn=f"arn:aws:iam::{TENANT_ACCOUNT}:role/admin", RoleSessionName="tenant-admin"
    )["Credentials"]
    admin = roles.Credentials(
        answer["AccessKeyId"],
        answer["SecretAccessKey"],
        answer["SessionToken"],
        answer["Expiration"].timestamp(),
    )
    runtime = client_as("iam", admin).create_role(
        RoleName=f"{name}-runtime",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "lambda.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return event\n")
    return str(
        client_as("lambda", admin).create_function(
            FunctionName=name,
            Runtime="python3.11",
            Role=runtime,
            Handler="handler.handler",
            Code={"ZipFile": code.getvalue()},
        )["FunctionArn"]
    )


def remote_lambda(
    system: System,
    schedules_count: int,
    *,
    seconds: float,
    batch_size: int = 10,
    in_flight: int | None = None,
) -> Measured:
    """``schedules_count`` minutely schedules whose target is a function in the tenant's
    account, invoked RequestResponse as the tenant's role (a system built with
    ``lambda_without_docker``), taking ``seconds`` to answer: metered as
    :func:`remote_http`'s. The invoke and the function's duration are billed to the
    tenant's account, not Fireline's; Fireline's invocation waits for the answer, which
    is counted, not slept."""
    target = {"type": "lambda", "function_arn": tenant_function(), "role_arn": TENANT_ROLE}
    return recurring(
        system,
        "rate(1 minute)",
        schedules_count,
        pickup_at=MINUTELY_PICKUP_AT,
        target=target,
        batch_size=batch_size,
        waits=TargetWait(seconds, in_flight),
    )


def one_off(
    system: System, jobs: int, *, delay_seconds: int = 120, tenant: str = TENANT
) -> Measured:
    """``jobs`` one-off jobs created through the API (one request each, as a tenant
    sends them) and run, picked up by one tick: their creation is metered with the rest
    (the API function's)."""
    system.service.ids = seeded_ids(tenant)
    system.log.reset()
    for _ in range(jobs):
        system.log.charge(API_REQUEST)
        with system.log.within("api"):
            status, _ = system.call(
                "POST",
                "/jobs",
                {"delay_seconds": delay_seconds, "target": TARGET},
                tenant=tenant,
            )
        assert status == 201
    return _run_created(system, jobs, tenant, batched=False)


def one_off_batched(
    system: System,
    jobs: int,
    *,
    batch: int = schedules.MAX_BATCH,
    delay_seconds: int = 120,
    tenant: str = TENANT,
) -> Measured:
    """``jobs`` one-off jobs created through the API ``batch`` a request (POST
    /jobs/batch) and run, as :func:`one_off`: one API request, quota write and
    invocation per batch, the items in batch writes and the messages ten a request."""
    system.service.ids = seeded_ids(tenant)
    system.log.reset()
    job = {"delay_seconds": delay_seconds, "target": TARGET}
    for start in range(0, jobs, batch):
        system.log.charge(API_REQUEST)
        started = system.clock.monotonic()
        with system.log.within("api"):
            status, body = system.call(
                "POST", "/jobs/batch", {"jobs": [job] * min(batch, jobs - start)}, tenant=tenant
            )
        assert status == 201, body
        # Its hold for the send phase (a sleep: the emulator's clock moved, no CPU spent).
        system.log.hold("api", system.clock.monotonic() - started)
    return _run_created(system, jobs, tenant, batched=True)


def _run_created(system: System, jobs: int, tenant: str, *, batched: bool) -> Measured:
    """Run the jobs just created (a tick, then the worker once they are due), metered
    with their creation."""
    worker = deployed_worker(system, tenant_limit=0)
    with system.log.within("ticker", invocations=1 / 55):
        system.ticker(use_lease=False).tick()
    system.clock.advance(900)
    # Each create sent its jobs; a batch's at its send phase.
    succeeded = deliver(system, worker, sent_by_ticker=False, at_phase=batched)
    assert succeeded == jobs, (succeeded, jobs)
    if batched:
        # The sweep's run once the jobs' minute is over: their holders give their units
        # back (a job created alone gave its back at its end). It runs once a minute for
        # every tenant: its invocation is a share of a minute's, as the ticker's.
        system.clock.advance(120)
        with system.log.within("sweep", invocations=1 / 55):
            deployed_sweep(system).run()
    with system.log.unmetered():
        used = system.quotas.usage(tenant).count(quota.Quota.ACTIVE_JOBS)
    assert used == 0, f"{used} of the jobs' units are not back"
    return Measured.of(system.log, succeeded)


def idle_ticker_minute() -> Measured:
    """One leased ticker invocation with nothing due: what one ticker group pays each
    minute whatever it runs (a Query per shard a tick, the lease's renewals, the
    invocation's whole minute of duration), as the usage of one "job" to spread over a
    minute's jobs."""
    with deployed_system() as system:
        system.service.create(TENANT, schedules.ScheduleDraft(spec="rate(1 day)", target=TARGET))
        worker = deployed_worker(system, tenant_limit=0)
        with system.log.unmetered():
            run_minutes(system, worker, 1)  # its pickup: a day ahead, nothing more due
        system.log.reset()
        run_minutes(system, worker, 1)
        return Measured.of(system.log, 1, wall_seconds={"ticker": TICKER_INVOCATION_MS / 1000})


def workflow_nodes(size: int) -> Measured:
    """A wide DAG of ``size`` short nodes run to success: per node, the controller's and
    the workers' requests (a batch of ten messages an invocation)."""
    with moto_system() as system, item_scoped_transactions(), logs_counted(system.log):
        system.slots.build_overrides()  # as deployed (see deployed_system)
        flow = flow_on(system)
        names, edges = wide_dag(size)
        flow.register([node(n, job_class="short") for n in names], edges)
        log = system.log
        log.reset()
        controller = flow.controller.handle

        def metered_controller(body: dict[str, Any]) -> Any:
            with log.within("workflow", invocations=0.1):
                return controller(body)

        for worker in flow.workers.values():
            handle = worker.handle

            def metered(*args: Any, _handle: Any = handle, **kwargs: Any) -> Any:
                with log.within("worker", invocations=0.1):
                    return _handle(*args, **kwargs)

            worker.handle = metered  # type: ignore[method-assign]
        log.charge(API_REQUEST)
        with log.within("api"):
            run = flow.start()
        handled = 0
        for _ in range(100_000):
            # The harness's polls and per-message deletes are left out; the event source
            # mappings' receives and batch deletes (one each per ten) are counted below.
            with log.unmetered():
                step = flow.step(metered_controller)
                done = not step and flow.run_state(run) is workflow.RunState.SUCCEEDED
            if done:
                break
            handled += step
            if not step:
                system.clock.advance(5.0)
        for _ in range(-(-handled // 10)):
            log.charge("sqs.ReceiveMessage")
            log.charge("sqs.DeleteMessageBatch")
        assert flow.run_state(run) is workflow.RunState.SUCCEEDED
        assert len(flow.ledger.effects) == size
        return Measured.of(log, size)
