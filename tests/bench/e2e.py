"""End-to-end runs in the latency model, at the deployed defaults: the world, the ticker's
and the workers' fleets as infra/template.yaml's defaults make them, and what the targets
saw (tests/bench/bench_e2e.py's scenarios; bench_cost.py bills the workers' wall time of
its remote-target paths from the same runs).

The real ticker and the deployed worker handler (fireline.handlers.worker, with the
function's environment from the template) run together in fireline.sim, every setting read
from the template's defaults (fireline.sim.deployment). The platform is modelled as
fireline.sim.lambdas says; every AWS call costs the SDK client CPU measured on this machine
(calibrate) and a seeded log-normal latency.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.size import SCALE, scaled
from fireline import wiring
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
# A throttled call goes again as the deployed client's retries make it.
DEPLOYED_CLIENT_ATTEMPTS = int(wiring.BOTO_CONFIG.retries["max_attempts"])
STEADY_SCHEDULES = 34_800  # every-minute schedules: 580 fires a second
BURST = 50_000
TENANTS = 10_000


def measured_sdk() -> sim_network.SdkCost:
    """The SDK's client CPU per call, measured here (at a reduced run's fewer repeats)."""
    return calibrate.measure(repeats=max(40, scaled(200)))


def deployed_defaults() -> deployment.Deployment:
    """The deployment a ``sam deploy`` with no parameters makes."""
    return deployment.from_template(aws.load_template())


def measured_platform() -> dict[str, float]:
    """A new worker environment's import CPU, a Python attempt's fork and an HTTPS
    target's call (its client side: signing, the address checks, TLS's handshake, the
    POST), measured here."""
    return {
        "import_cpu_seconds": calibrate.import_cpu_seconds(),
        "fork_cpu_seconds": calibrate.fork_cpu_seconds(),
        "http_target_cpu_seconds": calibrate.http_target_cpu_seconds(repeats=max(20, scaled(100))),
    }


def doubled(costs: dict[str, float], factor: float) -> dict[str, float]:
    """``costs`` with the calls' client CPU (an HTTP target's) ``factor`` times."""
    return {
        **costs,
        "http_target_cpu_seconds": costs["http_target_cpu_seconds"] * factor,
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
        "http_target_cpu_us_per_call": round(costs["http_target_cpu_seconds"] * 1e6),
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


def hourly_burst(
    count: int, target: dict[str, Any] | None = None, tenants: int = TENANTS, *, due: datetime = DUE
) -> list[model.Schedule]:
    """``count`` top-of-the-hour schedules, all next due at ``due``, over ``tenants``."""
    timing = schedule.Timing(spec=schedule.parse_spec("cron(0 0 * * * *)"))
    return [
        model.Schedule(
            tenant_id=f"tenant-{n % tenants:05d}",
            schedule_id=f"hour{n:07d}",
            timing=timing,
            spec_text="cron(0 0 * * * *)",
            target=dict(target or {}),
            misfire=policies.Misfire(),
            next_fire=due,
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
        durations: sim_network.TargetDuration = sim_network.ONE_SECOND_TARGET,
    ) -> None:
        start = DUE - timedelta(seconds=LEAD_SECONDS)
        self.world = world = sim_world.World(
            start=start,
            seed=seed,
            sdk=sdk,
            partition_units_per_second=1_000,
            client_attempts=DEPLOYED_CLIENT_ATTEMPTS,
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
            config={
                # A burst's threshold scales with the load (a reduced run's steady load
                # puts a tenth of the fires in each second).
                "dense_second_fires": scaled(ticker.TickerConfig.dense_second_fires),
                "burst_lead_seconds": deployed.burst_lead_seconds,
                "burst_queues": {
                    c: model.BURST_QUEUES[c] for c in deployed.bursts if c in model.BURST_QUEUES
                },
            },
        )
        w = deployed.worker()
        self.members = itertools.count(1)
        self.fleet = fleet_of(w, fleet_scale)
        self.python_jobs = python_jobs
        self.jobs = sim_world.Jobs(world.kernel, seconds=jobs_seconds, cpu=python_jobs)
        python = lambdas.forking(costs["fork_cpu_seconds"], world.kernel)
        self.runner = sim_world.SimTargets(
            world.kernel,
            durations=durations,
            seed=seed,
            # An HTTPS target's call: its client side as measured here (calibrate).
            http_cpu_seconds=costs.get("http_target_cpu_seconds", sdk.default),
            **sim_world.runner_args(self.jobs, python),
        )
        # One function's environments and one handler entry, whichever of its event
        # sources invokes it.
        containers = sim_platform.Containers(init_cpu_seconds=costs["import_cpu_seconds"])
        entry = sim_entry.HandlerEntry(world.kernel, dict(w.environment), memory_mb=w.memory_mb)

        def fleet(
            settings: deployment.WorkerSettings, queue: str, scaled_fleet: dict[str, Any]
        ) -> lambdas.WorkerFleet:
            return lambdas.WorkerFleet(
                world.kernel,
                world.queue,
                sim_world.next_visible(world, queue),
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
                job_class=queue,
                function=f"worker-{w.job_class}",
                max_concurrency=scaled_fleet["max_invokes"],
                batch_size=settings.batch_size,
                batching_window=settings.batching_window_seconds,
                timeout_seconds=settings.timeout_seconds,
                visibility_timeout=settings.visibility_timeout,
                memory_mb=settings.memory_mb,
                measure_cpu=measure_cpu,
                provisioned=settings.minimum_pollers is not None,
                minimum_pollers=scaled_fleet["minimum_pollers"],
                in_flight=settings.in_flight,
                account=self.account,
                containers=containers,
                # The deployed handler itself, with the function's environment as the
                # template sets it: its batch intake, dispatch and in-flight bound.
                entry=entry,
            )

        self.workers = fleet(w, w.job_class, self.fleet)
        self.fleets = [self.workers]
        burst = deployed.burst(w.job_class)
        if burst is not None and deployed.burst_lead_seconds:
            self.burst_fleet = fleet_of(burst, fleet_scale)
            self.fleets.append(fleet(burst, model.BURST_QUEUES[w.job_class], self.burst_fleet))

    def go(self, seconds: float = LEAD_SECONDS + AFTER_SECONDS) -> float:
        """Run ``seconds`` of virtual time (by default, from the lead before the burst to a
        minute after it); the wall seconds it took here."""
        started = time.perf_counter()
        minutes = int(seconds) // 60 + 1
        self.tickers.start(0.0, minutes=minutes)
        for fleet in self.fleets:
            fleet.start(0.0)
        try:
            self.world.kernel.run(seconds)
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
            "worker_invocations": sum(f.invocations for f in self.fleets),
            "worker_invocations_by_queue": {f.job_class: f.invocations for f in self.fleets},
            # Lambda bills each invocation's wall time: measured here in virtual time, its
            # waits on targets and AWS calls and its CPU at the function's share.
            "worker_gb_seconds_per_job_started": round(
                sum(sum(f.durations) * f.memory_mb / 1024 for f in self.fleets)
                / max(1, len(started)),
                4,
            ),
            "worker_batch_size": sim_world.Spread.of(
                [float(n) for f in self.fleets for n in f.batch_sizes]
            ).as_dict(1),
            "worker_cold_starts": self.workers.containers.cold_starts,
            "account_peak_unreserved": self.account.peak_unreserved,
            "account_throttles": dict(Counter(self.account.throttled)),
            "event_source_allowed_at_end": {
                f.job_class: f.scaling.allowed() if f.scaling else None for f in self.fleets
            },
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


# A run of the steady load alone: its first seconds (the fleet scaling out from cold) are
# not counted in the start lags, nor are fires due too near its end to have started.
STEADY_SECONDS = 150.0
STEADY_WARM_UP_SECONDS = 30.0


def steady_run(
    sdk: sim_network.SdkCost,
    deployed: deployment.Deployment,
    costs: dict[str, float],
    *,
    seconds: float,
) -> dict[str, Any]:
    """The design load alone (34,800 every-minute schedules, 580 fires a second, over
    10,000 tenants; scaled with FIRELINE_BENCH_SCALE) of remote jobs whose targets answer
    after ``seconds`` (and a log-normal tail): what the workers' invocations last, billed
    as Lambda bills them (wall time, the waits on targets and on early fires included),
    per job; how large their batches are; how late the jobs start."""
    run = Run(
        sdk,
        deployed,
        costs,
        burst=0,
        steady=scaled(STEADY_SCHEDULES),
        tenants=scaled(TENANTS),
        target=sim_world.HTTP_TARGET,
        fleet_scale=SCALE,
        durations=sim_network.TargetDuration((seconds,), (1.0,)),
    )
    try:
        wall = run.go(STEADY_SECONDS)
        world, workers = run.world, run.workers
        started = run.runner.started
        counted = [
            at - world.seconds(fire)
            for key, at in started.items()
            if STEADY_WARM_UP_SECONDS
            <= world.seconds(fire := occurrence.parse_key(key).fire_time)
            <= STEADY_SECONDS - seconds - 10
        ]
        jobs = max(1, len(started))
        worker_seconds = sum(workers.durations)
        return {
            "target_seconds": seconds,
            "jobs_started": len(started),
            "start_lag_seconds": sim_world.Spread.of(counted).as_dict(2),
            "worker_invocations_per_1000_jobs": round(workers.invocations / jobs * 1000, 1),
            "worker_wall_seconds_per_job": round(worker_seconds / jobs, 5),
            "worker_gb_seconds_per_job": round(worker_seconds * workers.memory_mb / 1024 / jobs, 5),
            "worker_batch_size": sim_world.Spread.of(
                [float(n) for n in workers.batch_sizes]
            ).as_dict(1),
            "worker_memory_mb": workers.memory_mb,
            "throttled_writes": sum(world.network.throttled.values()),
            "simulated_seconds": STEADY_SECONDS,
            "wall_seconds": round(wall, 1),
            "scale": SCALE,
        }
    finally:
        run.world.close()


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
