"""The real worker in the latency model: a batch's remote jobs side by side, each with its
own deadline, and a fire delivered early held until its time. Deterministic (no measured
CPU). The jobs are HTTP targets answered in virtual time: a remote job is what an
invocation keeps many of in flight at once (a Python job is compute, run as many at once
as the function has vCPUs: tests/sim/test_platform_sim.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from fireline import ports
from fireline.domain import model, occurrence, policies, schedule
from fireline.services import dispatch
from fireline.sim import lambdas
from fireline.sim import network as sim_network
from fireline.sim import world as sim_world

START = datetime(2026, 5, 1, 11, 59, 0, tzinfo=UTC)


@pytest.fixture
def world() -> Iterator[sim_world.World]:
    made = sim_world.World(start=START, sdk=sim_network.SdkCost(default=0.003))
    yield made
    made.close()


def jobs_due(world: sim_world.World, count: int, due: datetime, **fields: object) -> list[str]:
    """``count`` one-off jobs due at ``due``, already materialized: their messages are on
    the queue, visible from ``visible_at`` (virtual seconds) as the ticker's delays make
    them. Their occurrence keys."""
    keys = []
    items = []
    for n in range(count):
        spec = schedule.AtSpec(when=due)
        items.append(
            model.Schedule(
                tenant_id=f"tenant-{n % 7}",
                schedule_id=f"job{n:05d}",
                timing=schedule.Timing(spec=spec),
                spec_text=str(spec),
                kind=model.Kind.JOB,
                target=dict(sim_world.HTTP_TARGET),
                misfire=policies.Misfire(policy=policies.MisfirePolicy.FIRE_ONCE),
                state=model.ScheduleState.COMPLETED,
                **fields,  # type: ignore[arg-type]
            )
        )
    world.add(items)
    for start in range(0, count, 10):
        batch = items[start : start + 10]
        messages = []
        for n, item in enumerate(batch):
            body = dispatch.fire_message(item, due)
            keys.append(body["occurrence_key"])
            delay = dispatch.delay_until(due, world.start)
            messages.append(ports.OutboundMessage(body=body, delay_seconds=delay, id=str(n)))
        world.memory_queue.send_batch("default", messages)
    return keys


def targets_taking(world: sim_world.World, seconds: float) -> sim_world.SimTargets:
    """HTTP targets that answer after ``seconds`` each (no tail)."""
    return sim_world.SimTargets(
        world.kernel,
        durations=sim_network.TargetDuration((seconds,), (1.0,), tail_p99=1.0),
        **sim_world.runner_args(sim_world.Jobs(world.kernel)),
    )


def fleet(
    world: sim_world.World, jobs: sim_world.SimTargets, **fields: object
) -> lambdas.WorkerFleet:
    return lambdas.WorkerFleet(
        world.kernel,
        world.queue,
        sim_world.next_visible(world),
        lambda: sim_world.worker_for(world, sim_world.Jobs(world.kernel), runner=jobs),
        measure_cpu=False,
        provisioned=True,
        **fields,  # type: ignore[arg-type]
    )


def test_records_of_a_batch_run_side_by_side_each_within_its_own_deadline(
    world: sim_world.World,
) -> None:
    # GIVEN ten 7-second jobs with a 10 s deadline, delivered in one batch to a function
    # with a 30 s timeout (one after another they would need 70 s)
    due = START + timedelta(seconds=30)
    keys = jobs_due(world, 10, due, deadline_seconds=10)
    jobs = targets_taking(world, 7.0)
    workers = fleet(world, jobs, max_concurrency=1, timeout_seconds=30)
    workers.start()
    # WHEN the batch is delivered
    world.kernel.run(120)
    # THEN all ten ran at once, each to success, none past its deadline, in one invocation
    assert workers.invocations == 1
    assert sorted(jobs.started) == sorted(keys)
    assert max(jobs.started.values()) - min(jobs.started.values()) < 1.0
    states = {world.memory_occurrences.get(k).state for k in keys}  # type: ignore[union-attr]
    assert states == {occurrence.State.SUCCEEDED}
    assert workers.record_failures == 0


def test_a_fire_delivered_before_its_time_starts_at_its_time(world: sim_world.World) -> None:
    # GIVEN fires due at 12:00:00 whose messages (delays rounded down, as the ticker sends
    # them from a fraction of a second) become visible up to a second early
    due = START + timedelta(seconds=60)
    world.kernel.run(0.3)  # the "ticker" sends at 11:59:00.3: visible at 11:59:59.3
    keys = jobs_due(world, 20, due)
    jobs = targets_taking(world, 1.0)
    workers = fleet(world, jobs, max_concurrency=2, memory_mb=1769)
    workers.start(at=world.kernel.now())
    # WHEN the workers receive them as soon as they are visible
    world.kernel.run(90)
    # THEN no job started before its fire time, and each started within a moment of it
    # (the moment: its batch's SDK calls after the hold, on a full vCPU)
    starts = [jobs.started[k] - 60.0 for k in keys]
    assert min(starts) >= 0.0
    assert max(starts) < 0.5
    assert sum(jobs.runs.values()) == 20
