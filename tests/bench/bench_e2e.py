"""End to end, in the latency model, at the deployed defaults: when do jobs start?

The real ticker and the deployed worker handler (fireline.handlers.worker, with the
function's environment from the template) run together in fireline.sim, every setting
read from infra/template.yaml's defaults (fireline.sim.deployment): the ticker's groups and memory,
the default class's batch size, batching window, maximum concurrency (or provisioned
pollers), memory, timeout and in-flight bound, the tenant limit and class share. The
platform is modelled as fireline.sim.lambdas says: the account's 1,000 concurrent
executions shared by every function, the event source mapping's standard scaling, the
6 MB payload limit, a cold start per new environment (the worker handler's import, CPU
measured here), a fork per Python attempt (measured here). Every AWS call costs the SDK
client CPU measured on this machine (calibrate) and a seeded log-normal latency.

Figures go to .bench/report.json under e2e.*; nothing here fails on time. Sizes scale with
FIRELINE_BENCH_SCALE (``make bench-quick``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bench.report import record
from bench.size import SCALE, scaled
from fireline.domain import model, occurrence, policies, schedule
from fireline.services import ticker
from fireline.sim import calibrate, deployment, lambdas
from fireline.sim import entry as sim_entry
from fireline.sim import network as sim_network
from fireline.sim import platform as sim_platform
from fireline.sim import world as sim_world
from helpers import aws

DUE = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
LOOKAHEAD = ticker.TickerConfig().lookahead_seconds
HORIZON = ticker.TickerConfig().horizon_seconds
# The run starts early enough for the ticker to pick the burst up in its lookahead, as a
# running ticker does, and ends when every burst job that will start soon has.
LEAD_SECONDS = LOOKAHEAD + 30
AFTER_SECONDS = 60
STEADY_SCHEDULES = 34_800  # every-minute schedules: 580 fires a second
BURST = 50_000
TENANTS = 10_000


@pytest.fixture(scope="module")
def sdk() -> sim_network.SdkCost:
    return calibrate.measure(repeats=max(40, scaled(200)))


@pytest.fixture(scope="module")
def deployed() -> deployment.Deployment:
    return deployment.from_template(aws.load_template())


@pytest.fixture(scope="module")
def platform_costs() -> dict[str, float]:
    return {
        "import_cpu_seconds": calibrate.import_cpu_seconds(),
        "fork_cpu_seconds": calibrate.fork_cpu_seconds(),
    }


def times(sdk: sim_network.SdkCost, factor: float) -> sim_network.SdkCost:
    return sdk.times(factor)


def calibration(sdk: sim_network.SdkCost, costs: dict[str, float]) -> dict[str, Any]:
    return {
        "sdk_client_cpu_us_per_call": {
            op: round(s * 1e6) for op, s in sorted(sdk.per_call.items())
        },
        "sdk_client_cpu_us_per_further_item": {
            op: round(s * 1e6) for op, s in sorted(sdk.per_item.items())
        },
        "worker_import_cpu_ms": round(costs["import_cpu_seconds"] * 1000, 1),
        "fork_cpu_ms": round(costs["fork_cpu_seconds"] * 1000, 3),
        "measured_on": "this machine (shared with other work while it ran)",
    }


def settings_of(deployed: deployment.Deployment) -> dict[str, Any]:
    w = deployed.worker()
    return {
        "ticker_groups": deployed.ticker_groups,
        "ticker_memory_mb": deployed.ticker_memory_mb,
        "burst_lead_seconds": deployed.burst_lead_seconds,
        "worker_memory_mb": w.memory_mb,
        "batch_size": w.batch_size,
        "batching_window_seconds": w.batching_window_seconds,
        "max_concurrency": w.max_concurrency,
        "minimum_pollers": w.minimum_pollers,
        "in_flight": w.in_flight,
        "tenant_limit": deployed.tenant_limit,
        "class_max_concurrency": w.class_max_concurrency,
        "worker_timeout_seconds": w.timeout_seconds,
    }


def fleet_of(w: deployment.WorkerSettings, scale: float = 1.0) -> dict[str, Any]:
    """The default class's invocations at once, as its event source allows them: its
    MaximumConcurrency, or in provisioned mode MaximumPollers' worth of invokes (10 a
    poller) with MinimumPollers ready. ``scale`` below 1 (a reduced run) shrinks the
    fleet with the load, so each invocation carries the share of a burst it carries at
    full size (the mapping's ramp rates and the account's limit are not scaled)."""
    if w.minimum_pollers is not None:
        pollers = w.maximum_pollers or w.minimum_pollers
        most = min(
            sim_platform.PROVISIONED_MAX_INVOKES,
            pollers * sim_platform.PROVISIONED_INVOKES_PER_POLLER,
        )
    else:
        most = w.max_concurrency or sim_platform.ESM_MAX_INVOKES
    minimum = w.minimum_pollers
    if scale < 1:
        most = max(2, math.ceil(most * scale))
        minimum = None if minimum is None else max(1, math.ceil(minimum * scale))
    return {"max_invokes": most, "minimum_pollers": minimum, "scaled_by": min(1.0, scale)}


def hourly_burst(count: int, target: dict[str, Any], tenants: int) -> list[model.Schedule]:
    timing = schedule.Timing(spec=schedule.parse_spec("cron(0 0 * * * *)"))
    return [
        model.Schedule(
            tenant_id=f"tenant-{n % tenants:05d}",
            schedule_id=f"hour{n:07d}",
            timing=timing,
            spec_text="cron(0 0 * * * *)",
            target=dict(target),
            misfire=policies.Misfire(),
            next_fire=DUE,
        )
        for n in range(count)
    ]


class Run:
    """One end-to-end run: the world, its fleets and what the targets saw."""

    def __init__(
        self,
        sdk: sim_network.SdkCost,
        deployed: deployment.Deployment,
        costs: dict[str, float],
        *,
        burst: int,
        steady: int,
        tenants: int,
        target: dict[str, Any],
        jobs_seconds: float = 1.0,
        python_jobs: bool = False,
        seed: int = 1,
        measure_cpu: bool = True,
        fleet_scale: float = 1.0,
        schedule_item_units: int = 1,
        limit_overrides: dict[str, int] | None = None,
    ) -> None:
        start = DUE - timedelta(seconds=LEAD_SECONDS)
        self.world = world = sim_world.World(
            start=start,
            seed=seed,
            sdk=sdk,
            partition_units_per_second=1_000,
            schedule_item_units=schedule_item_units,
        )
        # Tenants' limit overrides, in the register as the sweep builds it after a deploy.
        for tenant_id, limit in (limit_overrides or {}).items():
            world.memory_slots.set_limit(tenant_id, limit)
        world.memory_slots.build_overrides()
        self.deployed = deployed
        steady_items = [
            dataclasses.replace(item, target=dict(target))
            for item in sim_world.every_minute_at(steady, start=start, tenants=tenants)
        ]
        settled = sim_world.steady_state(world, steady_items, lookahead=LOOKAHEAD, horizon=HORIZON)
        self.burst_items = hourly_burst(burst, target, tenants)
        world.add([*settled, *self.burst_items])
        # The messages a running ticker has sent already: the fires the starting state
        # counts as sent, within the run.
        end = DUE + timedelta(seconds=AFTER_SECONDS)
        sent = []
        for item, later in zip(steady_items, settled, strict=True):
            fire = item.next_fire
            while fire is not None and later.next_fire is not None and fire < later.next_fire:
                if fire <= end:
                    sent.append((later, fire))
                fire = schedule.next_fire(item.timing, fire)
        sim_world.enqueue(world, sent)
        # The steady load's fires of the minute before the burst (from the unsettled
        # schedules: most of them were sent before the run began).
        self.steady_keys = set(
            sim_world.fires_between(steady_items, DUE - timedelta(minutes=1), DUE)
        )
        self.expected = sim_world.fires_between(self.burst_items, DUE, DUE)

        self.account = sim_platform.Account(reserved={"ticker": 2 * deployed.ticker_groups})
        self.tickers = lambdas.TickerFleet(
            world.kernel,
            world.schedules,
            world.occurrences,
            world.queue,
            world.leases,
            groups=deployed.ticker_groups,
            memory_mb=deployed.ticker_memory_mb,
            measure_cpu=measure_cpu,
            account=self.account,
            config={"burst_lead_seconds": deployed.burst_lead_seconds},
        )
        w = deployed.worker()
        self.members = itertools.count(1)
        self.fleet = fleet_of(w, fleet_scale)
        self.python_jobs = python_jobs
        self.jobs = sim_world.Jobs(world.kernel, seconds=jobs_seconds, cpu=python_jobs)
        python = lambdas.forking(costs["fork_cpu_seconds"], world.kernel)
        self.runner = sim_world.SimTargets(
            world.kernel,
            durations=sim_network.ONE_SECOND_TARGET,
            seed=seed,
            # An HTTPS request's client side (serialize, sign, TLS, parse) is taken to
            # cost what a typical SDK call does.
            http_cpu_seconds=sdk.default,
            **sim_world.runner_args(self.jobs, python),
        )
        self.workers = lambdas.WorkerFleet(
            world.kernel,
            world.queue,
            sim_world.next_visible(world),
            lambda: sim_world.worker_for(
                world,
                self.jobs,
                runner=self.runner,
                tenant_limit=deployed.tenant_limit,
                class_max_concurrency=w.class_max_concurrency,
                burst_lead_seconds=deployed.burst_lead_seconds,
                # As deployed: WORKER_IN_FLIGHT jobs an invocation (a tenant's share of
                # the class counts them), and a container in the class's register.
                in_flight=w.in_flight or 1,
                pool_member=f"container-{next(self.members)}",
            ),
            max_concurrency=self.fleet["max_invokes"],
            batch_size=w.batch_size,
            batching_window=w.batching_window_seconds,
            timeout_seconds=w.timeout_seconds,
            visibility_timeout=w.visibility_timeout,
            memory_mb=w.memory_mb,
            measure_cpu=measure_cpu,
            provisioned=w.minimum_pollers is not None,
            minimum_pollers=self.fleet["minimum_pollers"],
            in_flight=w.in_flight,
            account=self.account,
            containers=sim_platform.Containers(init_cpu_seconds=costs["import_cpu_seconds"]),
            # The deployed handler itself, with the function's environment as the
            # template sets it: its batch intake, dispatch and in-flight bound.
            entry=sim_entry.HandlerEntry(world.kernel, dict(w.environment), memory_mb=w.memory_mb),
        )

    def go(self) -> float:
        started = time.perf_counter()
        minutes = (LEAD_SECONDS + AFTER_SECONDS) // 60 + 1
        self.tickers.start(0.0, minutes=minutes)
        self.workers.start(0.0)
        try:
            self.world.kernel.run(LEAD_SECONDS + AFTER_SECONDS)
        finally:
            if self.workers.entry is not None:
                self.workers.entry.remove()
        return time.perf_counter() - started

    def seen(self) -> sim_world.Jobs | sim_world.SimTargets:
        """Where the starts are recorded: the Python jobs, or the HTTP targets."""
        return self.jobs if self.python_jobs else self.runner

    def figures(self, wall: float) -> dict[str, Any]:
        world = self.world
        due = world.seconds(DUE)
        seen = self.seen()
        started, finished, runs = seen.started, seen.finished, seen.runs
        keys = list(self.expected)
        lags = [started[k] - due for k in keys if k in started]
        delivery = sim_world.Delivery.of(world, self.expected)
        sends = [s for s in world.send_log.sent if s.key in self.expected]
        visible = {s.key for s in sends if s.visible_at <= due}
        steady_lags = [
            started[k] - world.seconds(occurrence.parse_key(k).fire_time)
            for k in self.steady_keys
            if k in started
        ]
        return {
            "burst": len(keys),
            "started_within_2s_share": round(sum(1 for x in lags if x <= 2.0) / len(keys), 4),
            "start_lag_seconds": sim_world.Spread.of(lags).as_dict(2),
            "not_started_by_due_plus_seconds": {
                str(AFTER_SECONDS): len(keys) - len(lags),
            },
            "finished_by_due_plus_10s_share": round(
                sum(1 for k in keys if finished.get(k, float("inf")) <= due + 10) / len(keys), 4
            ),
            "visible_by_due_share": round(len(visible) / len(keys), 4),
            "lost": len(delivery.lost),
            "started_twice": sum(1 for k in keys if runs.get(k, 0) > 1),
            "steady_load_start_lag_seconds": sim_world.Spread.of(steady_lags).as_dict(2),
            "worker_invocations": self.workers.invocations,
            # Lambda bills each invocation's wall time: measured here in virtual time, its
            # waits on targets and AWS calls and its CPU at the function's share.
            "worker_gb_seconds_per_job_started": round(
                sum(self.workers.durations) * self.workers.memory_mb / 1024 / max(1, len(started)),
                4,
            ),
            "worker_batch_size": sim_world.Spread.of(
                [float(n) for n in self.workers.batch_sizes]
            ).as_dict(1),
            "worker_cold_starts": self.workers.containers.cold_starts,
            "account_peak_unreserved": self.account.peak_unreserved,
            "account_throttles": dict(Counter(self.account.throttled)),
            "event_source_allowed_at_end": self.workers.scaling.allowed()
            if self.workers.scaling
            else None,
            "throttled_writes": sum(world.network.throttled.values()),
            "fleet": self.fleet,
            "records_in_flight_per_invocation_peak": dict(self.workers.peaks),
            # Every message of the run's fires sent more than once: records a worker
            # handed back unstarted, deferrals, retries.
            "messages_sent_again": sum(
                n - 1 for n in Counter(s.key for s in world.send_log.sent).values() if n > 1
            ),
            "simulated_seconds": LEAD_SECONDS + AFTER_SECONDS,
            "wall_seconds": round(wall, 1),
            "scale": SCALE,
        }


def burst_run(
    sdk: sim_network.SdkCost,
    deployed: deployment.Deployment,
    costs: dict[str, float],
    **kwargs: Any,
) -> dict[str, Any]:
    run = Run(
        sdk,
        deployed,
        costs,
        burst=scaled(BURST),
        steady=scaled(STEADY_SCHEDULES),
        tenants=scaled(TENANTS),
        target=sim_world.HTTP_TARGET,
        fleet_scale=SCALE,
        **kwargs,
    )
    try:
        wall = run.go()
        return run.figures(wall)
    finally:
        run.world.close()


def test_burst_of_one_second_http_jobs_at_the_defaults(
    sdk: sim_network.SdkCost,
    deployed: deployment.Deployment,
    platform_costs: dict[str, float],
) -> None:
    # GIVEN the steady 580 one-second HTTP jobs a second, and 50,000 more due at 12:00:00
    # over 10,000 tenants, on a deployment with the template's defaults
    # WHEN the ticker and the workers run from a lookahead before until a minute after
    figures = burst_run(sdk, deployed, platform_costs)
    # THEN how soon they started (no assertion on time: the figures are the result)
    record(
        "e2e.burst_50k.defaults",
        {
            **figures,
            "settings": settings_of(deployed),
            "calibration": calibration(sdk, platform_costs),
        },
    )
    assert figures["lost"] == 0


def test_the_same_burst_at_twice_the_sdk_cpu(
    sdk: sim_network.SdkCost,
    deployed: deployment.Deployment,
    platform_costs: dict[str, float],
) -> None:
    # GIVEN the same, with every AWS call's client CPU doubled (headroom for a Lambda
    # vCPU slower than this machine's)
    doubled = times(sdk, 2.0)
    figures = burst_run(doubled, deployed, platform_costs)
    record(
        "e2e.burst_50k.defaults_cpu_x2",
        {
            **figures,
            "settings": settings_of(deployed),
            "calibration": calibration(doubled, platform_costs),
        },
    )
    assert figures["lost"] == 0


def test_python_handler_jobs_started_a_second_at_the_defaults(
    sdk: sim_network.SdkCost,
    deployed: deployment.Deployment,
    platform_costs: dict[str, float],
) -> None:
    # GIVEN one-second Python handler jobs (a second of this machine's CPU each, in a
    # forked child per attempt), a burst of them due at once and no other load
    count = scaled(BURST)
    run = Run(
        sdk,
        deployed,
        platform_costs,
        burst=count,
        steady=0,
        tenants=scaled(TENANTS),
        target={"type": "python", "handler": "sim.work"},
        python_jobs=True,
        fleet_scale=SCALE,
    )
    try:
        wall = run.go()
        figures = run.figures(wall)
    finally:
        run.world.close()
    # THEN starts a second, once the mapping has scaled as far as it goes: over the run's
    # last 30 s
    due = run.world.seconds(DUE)
    starts = sorted(run.jobs.started.values())
    window = [t for t in starts if due + AFTER_SECONDS - 30 <= t <= due + AFTER_SECONDS]
    w = deployed.worker()
    share = lambdas.cpu_share(w.memory_mb)
    record(
        "e2e.python_jobs",
        {
            **figures,
            "jobs_started_per_second": round(len(window) / 30, 1),
            "jobs_started_per_second_whole_run": round(len(starts) / (AFTER_SECONDS + 1), 1),
            # What starting 50,000 one-second compute jobs within 10 s takes: 5,000 vCPUs
            # busy at once. Lambda gives vCPUs in proportion to memory (one at 1,769 MB, six
            # at 10,240 MB), and a Python attempt's child may use any of its invocation's:
            # invocations needed at each memory, against the account's 1,000 (arithmetic
            # from the CPU model, not a run: the simulation gives an invocation at most
            # one vCPU).
            "derived_invocations_for_50k_within_10s": {
                f"{mb}mb": round(50_000 / 10 / (mb / lambdas.FULL_VCPU_MB))
                for mb in (w.memory_mb, 1769, 10240)
            },
            "vcpu_share": round(share, 3),
            "settings": settings_of(deployed),
            "calibration": calibration(sdk, platform_costs),
        },
    )
    assert figures["lost"] == 0


BIG_TENANT = "tenant-00000"
BIG_TENANT_SCHEDULES = 30_000  # every minute: 500 fires a second
BIG_TENANT_BURST = 10_000
BIG_TENANT_ITEM_UNITS = 4  # schedules of 4 KB: an advance is 4 write units on its key
# Its limit override: 500 one-second jobs a second, and room for their spread.
BIG_TENANT_LIMIT = 600


def test_the_largest_tenant(
    sdk: sim_network.SdkCost,
    deployed: deployment.Deployment,
    platform_costs: dict[str, float],
) -> None:
    # GIVEN one tenant with 30,000 every-minute schedules of 4 KB (500 one-second HTTP
    # jobs a second) and 10,000 more of its own due at 12:00:00, its limit override 600,
    # every DynamoDB partition key at 1,000 write units a second
    run = Run(
        sdk,
        deployed,
        platform_costs,
        burst=scaled(BIG_TENANT_BURST),
        steady=scaled(BIG_TENANT_SCHEDULES),
        tenants=1,
        target=sim_world.HTTP_TARGET,
        fleet_scale=SCALE,
        schedule_item_units=BIG_TENANT_ITEM_UNITS,
        limit_overrides={BIG_TENANT: scaled(BIG_TENANT_LIMIT)},
    )
    try:
        wall = run.go()
        figures = run.figures(wall)
        network = run.world.network
        throttled_by_op = dict(network.throttled)
    finally:
        run.world.close()
    # THEN how late its fires were and how many of its writes were throttled
    due = run.world.seconds(DUE)
    # A fire's lateness: when its first message turned visible, less its due time.
    first_visible: dict[str, float] = {}
    for sent in run.world.send_log.sent:
        if sent.key in run.expected:
            first_visible[sent.key] = min(sent.visible_at, first_visible.get(sent.key, math.inf))
    lateness = [max(0.0, at - due) for at in first_visible.values()]
    record(
        "e2e.big_tenant",
        {
            **figures,
            "lateness_seconds": sim_world.Spread.of(lateness).as_dict(2),
            "throttled_by_operation": throttled_by_op,
            "tenant": {
                "schedules": scaled(BIG_TENANT_SCHEDULES),
                "burst": scaled(BIG_TENANT_BURST),
                "schedule_item_units": BIG_TENANT_ITEM_UNITS,
                "limit_override": scaled(BIG_TENANT_LIMIT),
            },
            "settings": settings_of(deployed),
            "calibration": calibration(sdk, platform_costs),
        },
    )
    assert figures["lost"] == 0
