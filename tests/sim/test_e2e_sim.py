"""The end-to-end harness (tests/bench/bench_e2e.py) small and deterministic: the ticker and
the deployed worker handler together at the template's defaults, the platform's limits on,
no measured CPU. Whatever the figures, no fire is lost and no target is called twice.
"""

from __future__ import annotations

from bench import bench_e2e
from fireline.sim import deployment
from fireline.sim import network as sim_network
from fireline.sim import world as sim_world
from helpers import aws

COSTS = {"import_cpu_seconds": 0.3, "fork_cpu_seconds": 0.002}


def test_a_small_burst_on_a_steady_load_at_the_defaults_loses_nothing() -> None:
    # GIVEN 120 every-minute schedules (2 fires a second) and 200 one-second HTTP jobs due
    # at once over 50 tenants, on the template's defaults
    run = bench_e2e.Run(
        sim_network.SdkCost(default=0.002),
        deployment.from_template(aws.load_template()),
        COSTS,
        burst=200,
        steady=120,
        tenants=50,
        target=sim_world.HTTP_TARGET,
        measure_cpu=False,
    )
    try:
        # WHEN the ticker and workers run from a lookahead before until a minute after
        figures = run.figures(run.go())
    finally:
        run.world.close()
    # THEN every burst fire was sent, visible by its time, started once, none lost; the
    # steady load's fires of the minute before started too
    assert figures["burst"] == 200 and figures["lost"] == 0
    assert figures["visible_by_due_share"] == 1.0
    assert figures["start_lag_seconds"]["count"] == 200
    assert figures["started_twice"] == 0
    assert figures["steady_load_start_lag_seconds"]["count"] == len(run.steady_keys) > 120
    # AND the cold starts are what the concurrency needed, not one an invocation
    assert 0 < figures["worker_cold_starts"] < figures["worker_invocations"]
