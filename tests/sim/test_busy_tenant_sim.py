"""A tenant running many jobs at once, in the latency model: one invocation's records of
the tenant share one view of its slots (services.worker.slot_views), and a record at the
tenant's limit waits in its invocation for a slot while the invocation is at work anyway
(SlotKeeping._in_turn). Deterministic (no measured CPU); counts, not times of
the machine.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fireline.domain import occurrence
from fireline.sim import lambdas
from fireline.sim import network as sim_network
from fireline.sim import world as sim_world

START = datetime(2026, 5, 1, 11, 59, 0, tzinfo=UTC)
DUE = START + timedelta(seconds=10)
TENANT = "tenant-00000"


@pytest.fixture
def world() -> Iterator[sim_world.World]:
    made = sim_world.World(start=START, sdk=sim_network.SdkCost(default=0.001))
    yield made
    made.close()


class SlotCalls:
    """The calls made on the world's slot store: reads of a tenant's slots, and takes
    (refused ones apart)."""

    def __init__(self, world: sim_world.World) -> None:
        self.counts: Counter[str] = Counter()
        store = world.memory_slots
        held, take = store.held, store.take

        def counted_held(tenant_id: str, **kwargs: Any) -> Any:
            self.counts["held"] += 1
            return held(tenant_id, **kwargs)

        def counted_take(*args: Any, **kwargs: Any) -> bool:
            taken = take(*args, **kwargs)
            self.counts["taken" if taken else "refused"] += 1
            return taken

        store.held = counted_held  # type: ignore[method-assign]
        store.take = counted_take  # type: ignore[method-assign]


def one_tenants_jobs(
    world: sim_world.World, count: int, *, limit: int
) -> tuple[list[str], sim_world.SimTargets]:
    """``count`` one-second HTTP jobs of one tenant due at DUE, on the queue, the tenant's
    limit override ``limit`` in the register; their keys and the runner answering them."""
    world.memory_slots.set_limit(TENANT, limit)
    world.memory_slots.build_overrides()
    items = sim_world.one_off(count, DUE, tenants=1)
    world.add(items)
    keys = sim_world.enqueue(world, [(item, DUE) for item in items])
    runner = sim_world.SimTargets(
        world.kernel,
        durations=sim_network.TargetDuration((1.0,), (1.0,), tail_p99=1.0),
        **sim_world.runner_args(sim_world.Jobs(world.kernel)),
    )
    return keys, runner


def one_container(
    world: sim_world.World, runner: sim_world.SimTargets, batch_size: int
) -> lambdas.WorkerFleet:
    """A class of one invocation taking up to ``batch_size`` records, all in flight."""
    jobs = sim_world.Jobs(world.kernel)
    return lambdas.WorkerFleet(
        world.kernel,
        world.queue,
        sim_world.next_visible(world),
        lambda: sim_world.worker_for(
            world, jobs, runner=runner, tenant_limit=25, in_flight=batch_size
        ),
        max_concurrency=1,
        batch_size=batch_size,
        batching_window=1.0,
        provisioned=True,
        measure_cpu=False,
    )


def test_one_invocations_burst_of_a_tenant_reads_its_slots_a_few_times_and_never_races_itself(
    world: sim_world.World,
) -> None:
    # GIVEN 200 of one tenant's jobs due at one instant, its limit 300, and one
    # invocation taking them all
    keys, runner = one_tenants_jobs(world, 200, limit=300)
    calls = SlotCalls(world)
    one_container(world, runner, batch_size=200).start()
    # WHEN they come due
    world.kernel.run(world.seconds(DUE) + 30)
    # THEN every one ran once
    assert sorted(runner.started) == sorted(keys) and set(runner.runs.values()) == {1}
    # AND the tenant's slots were read a handful of times for the 200 (one view shared by
    # the records that start together), never a read each, and no record of the
    # invocation was refused a number another of its records took
    assert calls.counts["held"] <= 5
    assert calls.counts["refused"] == 0
    assert calls.counts["taken"] == 200
    print(
        f"\n200 jobs of one tenant in one invocation: {calls.counts['held']} reads of its "
        f"slots, {calls.counts['refused']} takes refused"
    )


def test_a_record_at_its_tenants_limit_waits_in_its_busy_invocation_for_a_slot(
    world: sim_world.World,
) -> None:
    # GIVEN 10 of one tenant's one-second jobs due at one instant, its limit 5, and one
    # invocation taking them all
    keys, runner = one_tenants_jobs(world, 10, limit=5)
    one_container(world, runner, batch_size=10).start()
    # WHEN they come due
    world.kernel.run(world.seconds(DUE) + 60)
    # THEN never more than 5 ran at once; the 5 over the limit waited in the invocation,
    # which the first 5 kept at work, and started as their slots freed, about a second
    # on: none was deferred to the queue (10 to 20 s)
    assert runner.most_at_once() == 5
    lags = sorted(at - world.seconds(DUE) for at in runner.started.values())
    assert all(lag < 0.5 for lag in lags[:5])
    assert all(1.0 <= lag < 2.0 for lag in lags[5:])
    assert set(runner.runs.values()) == {1}
    states = {world.memory_occurrences.get(k).state for k in keys}  # type: ignore[union-attr]
    assert states == {occurrence.State.SUCCEEDED}
    print(
        f"\nlimit 5, 10 jobs in one invocation: the last 5 started {lags[5]:.2f} to "
        f"{lags[-1]:.2f} s after their time, none deferred"
    )
