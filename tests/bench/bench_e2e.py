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

import math

import pytest

from bench import e2e
from bench.e2e import (
    AFTER_SECONDS,
    BURST,
    DUE,
    TENANTS,
    Run,
    burst_run,
    calibration,
    settings_of,
    times,
)
from bench.report import record
from bench.size import SCALE, scaled
from fireline.domain import occurrence
from fireline.sim import deployment, lambdas
from fireline.sim import network as sim_network
from fireline.sim import world as sim_world


@pytest.fixture(scope="module")
def sdk() -> sim_network.SdkCost:
    return e2e.measured_sdk()


@pytest.fixture(scope="module")
def deployed() -> deployment.Deployment:
    return e2e.deployed_defaults()


@pytest.fixture(scope="module")
def platform_costs() -> dict[str, float]:
    return e2e.measured_platform()


# The largest tenant first: the longest of the runs, so make bench starts it first.
BIG_TENANT = "tenant-00000"
BIG_TENANT_SCHEDULES = 30_000  # every minute: 500 fires a second
BIG_TENANT_BURST = 10_000
BIG_TENANT_ITEM_UNITS = 4  # schedules of 4 KB: an advance is 4 write units on its key
# Its limit override: 500 one-second jobs a second hold a slot each from the take to the
# hand-on, the target's second and the claim, the settle and the SDK's calls around it
# (up to half a second more in a burst's second): by Little's law, 500 x 1.5 s = 750 at
# once, and room for their spread.
BIG_TENANT_LIMIT = 800
# Its every-minute jobs' lag is counted from this far into the run (the fleet scales up
# from nothing first).
BIG_TENANT_WARM_UP_SECONDS = 60.0


def test_the_largest_tenant(
    sdk: sim_network.SdkCost,
    deployed: deployment.Deployment,
    platform_costs: dict[str, float],
) -> None:
    # GIVEN one tenant with 30,000 every-minute schedules of 4 KB (500 one-second HTTP
    # jobs a second) and 10,000 more of its own due at 12:00:00, its limit override
    # BIG_TENANT_LIMIT, every DynamoDB partition key at 1,000 write units a second
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
        # Calls that failed: every attempt the client makes throttled.
        throttled_out = dict(network.throttled_out)
        hottest = dict(network.throttled_partitions.most_common(5))
        started = dict(run.seen().started)
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
    # What its limit lets it run: its starts a second over the minute after due (its burst
    # and its every-minute jobs together keep it at its limit all that minute).
    at_limit = sum(1 for at in started.values() if due <= at < due + AFTER_SECONDS)
    # Its every-minute jobs' start lag below its limit: those due before the burst, past
    # the first minute (the fleet scaling up from nothing).
    below_limit = [
        at - fire
        for key, at in started.items()
        if key in run.steady_keys
        and BIG_TENANT_WARM_UP_SECONDS
        <= (fire := run.world.seconds(occurrence.parse_key(key).fire_time))
        < due
    ]
    record(
        "e2e.big_tenant",
        {
            **figures,
            "started_per_second_in_the_minute_after_due": round(at_limit / AFTER_SECONDS, 1),
            "steady_start_lag_before_the_burst_seconds": sim_world.Spread.of(below_limit).as_dict(
                2
            ),
            "lateness_seconds": sim_world.Spread.of(lateness).as_dict(2),
            "throttled_by_operation": throttled_by_op,
            "throttled_calls_failed": throttled_out,
            "throttled_partitions_most": hottest,
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
    slower, costs = times(sdk, 2.0), e2e.doubled(platform_costs, 2.0)
    figures = burst_run(slower, deployed, costs)
    record(
        "e2e.burst_50k.defaults_cpu_x2",
        {
            **figures,
            "settings": settings_of(deployed),
            "calibration": calibration(slower, costs),
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
