"""What a job costs on AWS, path by path, at us-east-1 list prices (fireline/cost/prices.py).

Each path runs end to end on moto as deployed (tests/helpers/cost_paths.py): the real
ticker and worker, the template's tables and queues, quota counting on, the product's
log lines counted as the deployed JSON lines. Per job, a path's steady-state pickup is
metered on its own (what the ticker writes and sends for the fires it picks up, and the
worker's run of each): its marginal cost. A ticker group's fixed cost of a minute (one
leased invocation that ticks for the whole minute, billed for it: a Query per shard a
tick, the lease's renewals) is measured apart and spread over the jobs of a minute twice:
at the design load (50 million jobs a day, 580 a second, on the two ticker groups
docs/scale.md recommends for it), which is ``usd_per_million``, and at the path's own rate
alone (a deployment that runs nothing else), which is ``usd_per_million_alone``.

Figures go to .bench/report.json under cost.* (tests/bench/report.py); never fails on
time.
"""

from __future__ import annotations

from bench import e2e, report
from fireline.cost import model, prices
from helpers import cost_paths

# The design load, and the ticker groups docs/scale.md recommends for it.
DESIGN_FIRES_PER_MINUTE = 580 * 60
DESIGN_TICKER_GROUPS = 2
# (metered schedules, fires a minute of the path alone)
MINUTELY = (30, 500.0)  # 500 every-minute schedules
# 50 every-second schedules; metered on 10, so that a worker batch holds fires of ten
# schedules as it does deployed (fewer would share one schedule read among its fires)
EVERY_SECOND = (10, 50 * 60.0)
ONE_OFF = (60, 500.0)  # one-off jobs at 500 a minute
ONE_OFF_BATCHED = (200, 500.0)  # the same, created 100 a request (POST /jobs/batch)
WORKFLOW_NODES = 100


def test_cost_per_path() -> None:
    minute = cost_paths.idle_ticker_minute()
    fixed = minute.figures()
    report.record(
        "cost.fixed_per_minute",
        {**fixed, "per": "minute", "usd_per_day": round(fixed["usd_per_million"] * 1440 / 1e6, 3)},
    )
    idempotent_alternative = model.alternatives()["eventbridge_scheduler_lambda_idempotency"]
    paths = {}
    with cost_paths.deployed_system() as system:
        paths["minutely"] = (
            cost_paths.recurring(
                system, "rate(1 minute)", MINUTELY[0], pickup_at=cost_paths.MINUTELY_PICKUP_AT
            ),
            MINUTELY[1],
        )
    with cost_paths.deployed_system() as system:
        paths["every_second"] = (
            cost_paths.recurring(
                system, "cron(* * * * * *)", EVERY_SECOND[0], warm_ticks=11, pickup_at=61
            ),
            EVERY_SECOND[1],
        )
    with cost_paths.deployed_system() as system:
        paths["one_off"] = (cost_paths.one_off(system, ONE_OFF[0]), ONE_OFF[1])
    with cost_paths.deployed_system() as system:
        paths["one_off_batched"] = (
            cost_paths.one_off_batched(system, ONE_OFF_BATCHED[0]),
            ONE_OFF_BATCHED[1],
        )
    with cost_paths.deployed_system() as system:
        paths["tenant_limited"] = (
            cost_paths.recurring(
                system,
                "rate(1 minute)",
                MINUTELY[0],
                pickup_at=cost_paths.MINUTELY_PICKUP_AT,
                tenant_limit=cost_paths.DEPLOYED_TENANT_LIMIT,
            ),
            MINUTELY[1],
        )
    # Jobs whose targets are remote and take their time: the worker waits on them, and
    # Lambda bills the wait. Metered here for their requests and units, with the
    # template's batch size and in-flight bound; their invocations' wall time, and how
    # many records each carries, are the latency-model simulation's of the design load of
    # such jobs at the template's defaults (bench.e2e.steady_run): what Lambda bills.
    deployed = e2e.deployed_defaults()
    worker = deployed.worker()
    sdk, platform = e2e.measured_sdk(), e2e.measured_platform()
    simulated = {
        seconds: e2e.steady_run(sdk, deployed, platform, seconds=seconds) for seconds in (1.0, 3.0)
    }
    for seconds, figures in simulated.items():
        report.record(
            f"cost.simulated_workers.remote_{seconds:.0f}s",
            {**figures, "calibration": e2e.calibration(sdk, platform)},
        )

    def billed_as_simulated(measured: cost_paths.Measured, seconds: float) -> cost_paths.Measured:
        figures = simulated[seconds]
        return measured.with_worker_wall(
            invocations=figures["worker_invocations_per_1000_jobs"] / 1000,
            wall_seconds=figures["worker_wall_seconds_per_job"],
        )

    for name, seconds in (("http_1s", 1.0), ("http_3s", 3.0)):
        with cost_paths.deployed_system() as system:
            paths[name] = (
                billed_as_simulated(
                    cost_paths.remote_http(
                        system,
                        MINUTELY[0],
                        seconds=seconds,
                        batch_size=worker.batch_size,
                        in_flight=worker.in_flight,
                    ),
                    seconds,
                ),
                DESIGN_FIRES_PER_MINUTE,
            )
    with cost_paths.deployed_system(lambda_without_docker=True) as system:
        # A tenant's function invoked RequestResponse holds the worker as an HTTP
        # target does: the same simulated invocations, its own requests and units.
        paths["lambda_3s"] = (
            billed_as_simulated(
                cost_paths.remote_lambda(
                    system,
                    MINUTELY[0],
                    seconds=3.0,
                    batch_size=worker.batch_size,
                    in_flight=worker.in_flight,
                ),
                3.0,
            ),
            DESIGN_FIRES_PER_MINUTE,
        )
    for name, (measured, per_minute) in paths.items():
        design = DESIGN_FIRES_PER_MINUTE / DESIGN_TICKER_GROUPS
        figures = measured.plus_fixed(minute, design).figures()
        marginal = measured.figures()["usd_per_million"]
        figures["marginal_usd_per_million"] = marginal
        figures["design_fires_per_minute"] = DESIGN_FIRES_PER_MINUTE
        figures["design_ticker_groups"] = DESIGN_TICKER_GROUPS
        alone = measured.plus_fixed(minute, per_minute).figures()
        figures["usd_per_million_alone"] = alone["usd_per_million"]
        gb_seconds = measured.plus_fixed(minute, design).usage.lambda_gb_seconds()
        figures["lambda_gb_seconds_per_fire"] = {f: round(v, 6) for f, v in gb_seconds.items()}
        figures["worker_invocations_per_1000_fires"] = round(
            measured.usage.invocations.get("worker", 0.0) * 1000, 1
        )
        figures["fires_per_minute_alone"] = per_minute
        # Where one ticker group's fixed cost, spread, meets the idempotent alternative's
        # price per fire (which has none): fewer fires a minute than this, the
        # alternative costs less.
        saved = idempotent_alternative["usd_per_million"] - marginal
        figures["break_even_fires_per_minute"] = (
            round(fixed["usd_per_million"] / saved) if saved > 0 else None
        )
        report.record(f"cost.{name}", figures)
    # Workflow nodes: the controller and the workers, no ticker.
    report.record("cost.workflow_node", cost_paths.workflow_nodes(WORKFLOW_NODES).figures())

    # The same guarantees bought from EventBridge Scheduler: a function that makes no
    # call but the idempotency layer's (the job's own work is on neither side).
    for name, figures in model.alternatives().items():
        report.record(f"cost.alternatives.{name}", figures)
    report.record(
        "cost.prices",
        {
            name: {"usd": p.usd, "unit": p.unit, "read_on": p.read_on, "source": p.source}
            for name, p in prices.all_prices().items()
        },
    )
