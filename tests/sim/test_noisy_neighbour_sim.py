"""A noisy neighbour in the latency model: tenant A floods a class with runaway jobs (each
would run an hour; its deadline is a minute), tenant B runs short jobs beside it. The real
worker, slot store and event source mapping (invocations that end when their whole batch
has) run in virtual time; the Python runner plays the process per attempt: a job works for
its payload's seconds, and one past its deadline is stopped at the deadline.

Deterministic: virtual time, no measured CPU, a seeded world."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fireline import ports
from fireline.domain import model, occurrence, policies, quota, retry, schedule
from fireline.services import dispatch, targets
from fireline.sim import kernel as sim_kernel
from fireline.sim import lambdas
from fireline.sim import network as sim_network
from fireline.sim import world as sim_world

START = datetime(2026, 5, 1, 11, 59, 0, tzinfo=UTC)
# The class: ten invocations of ten records each.
MAX_CONCURRENCY = 10
RUNAWAY_SECONDS = 3600.0
RUNAWAY_DEADLINE = 60
B_JOB_SECONDS = 1.0
# B's jobs start within this of their fire time while A floods the class: an invocation's
# start and its batch's SDK calls (the latency model's), and a poller's long-poll wait.
B_START_BOUND_SECONDS = 1.0
RUN_SECONDS = 400


class StoppedAtDeadline:
    """The process per attempt, in virtual time: the job works ``seconds`` (from its
    payload); past ``timeout`` its process is killed at the deadline."""

    def __init__(self, kernel: sim_kernel.Kernel) -> None:
        self.kernel = kernel
        self.started: dict[str, float] = {}
        self.stopped: list[str] = []
        self.running: dict[str, int] = {"A": 0, "B": 0}
        self.most_running: dict[str, int] = {"A": 0, "B": 0}

    def __call__(
        self,
        handler: Callable[[targets.JobContext], Any],
        context: targets.JobContext,
        timeout: float,
    ) -> Any:
        tenant = context.tenant_id
        self.started[context.occurrence_key] = self.kernel.now()
        self.running[tenant] += 1
        self.most_running[tenant] = max(self.most_running[tenant], self.running[tenant])
        try:
            seconds = float(context.payload["seconds"])
            if seconds > timeout:
                self.kernel.sleep(timeout)
                self.stopped.append(context.occurrence_key)
                raise targets.DeadlineExceeded(f"ran past {timeout:.0f} s and was stopped")
            self.kernel.sleep(seconds)
            return handler(context)
        finally:
            self.running[tenant] -= 1


@pytest.fixture
def world() -> Iterator[sim_world.World]:
    made = sim_world.World(start=START, sdk=sim_network.SdkCost(default=0.003))
    yield made
    made.close()


def due(
    world: sim_world.World, tenant: str, name: str, at: float, seconds: float, **fields: Any
) -> str:
    """One one-off job of ``tenant`` due ``at`` virtual seconds, its message on the queue
    (visible at its time, as the ticker's delay makes it); its occurrence key."""
    when = START + timedelta(seconds=at)
    spec = schedule.AtSpec(when=when)
    item = model.Schedule(
        tenant_id=tenant,
        schedule_id=name,
        timing=schedule.Timing(spec=spec),
        spec_text=str(spec),
        kind=model.Kind.JOB,
        target={"type": "python", "handler": "sim.payload"},
        payload={"seconds": seconds},
        misfire=policies.Misfire(policy=policies.MisfirePolicy.FIRE_ONCE),
        state=model.ScheduleState.COMPLETED,
        **fields,
    )
    world.add([item])
    body = dispatch.fire_message(item, when)
    delay = dispatch.delay_until(when, world.clock.now())
    world.memory_queue.send_batch(
        "default", [ports.OutboundMessage(body=body, delay_seconds=delay, id="0")]
    )
    return str(body["occurrence_key"])


def run(world: sim_world.World, class_max_concurrency: int) -> tuple[Any, list[str], list[str]]:
    """A: 100 runaway jobs due at 5 s; B: a 1-second job every 2 s from 10 s to 208 s.
    The runner, A's keys and B's keys after RUN_SECONDS virtual seconds."""
    a_keys = [
        due(
            world,
            "A",
            f"runaway{n:03d}",
            5.0,
            RUNAWAY_SECONDS,
            deadline_seconds=RUNAWAY_DEADLINE,
            retry=retry.RetryPolicy(max_attempts=1),
        )
        for n in range(100)
    ]
    b_keys = [due(world, "B", f"report{n:03d}", 10.0 + 2 * n, B_JOB_SECONDS) for n in range(100)]
    runner = StoppedAtDeadline(world.kernel)
    jobs = sim_world.Jobs(world.kernel)
    jobs.registry.register("sim.payload")(lambda context: {"ok": True})
    workers = lambdas.WorkerFleet(
        world.kernel,
        world.queue,
        sim_world.next_visible(world),
        lambda: sim_world.worker_for(
            world,
            jobs,
            tenant_limit=quota.DEFAULT_LIMIT,
            class_max_concurrency=class_max_concurrency,
            python=runner,
        ),
        max_concurrency=MAX_CONCURRENCY,
        timeout_seconds=120,
        measure_cpu=False,
        provisioned=True,
    )
    workers.start()
    world.kernel.run(RUN_SECONDS)
    return runner, a_keys, b_keys


def state_of(world: sim_world.World, key: str) -> occurrence.Occurrence:
    row = world.memory_occurrences.get(key)
    assert row is not None
    return row


def b_start_delays(
    world: sim_world.World, runner: StoppedAtDeadline, keys: list[str]
) -> list[float]:
    return [runner.started[k] - (10.0 + 2 * n) for n, k in enumerate(keys)]


def test_a_tenants_runaway_jobs_do_not_change_another_tenants_outcomes(
    world: sim_world.World,
) -> None:
    # GIVEN a class of 10 invocations shared out (a tenant runs at most half at once),
    # A's 100 runaway jobs and B's 100 short ones
    runner, a_keys, b_keys = run(world, class_max_concurrency=MAX_CONCURRENCY)

    # THEN every one of B's jobs succeeded on its first attempt, none died of a deadline
    for key in b_keys:
        row = state_of(world, key)
        assert row.state is occurrence.State.SUCCEEDED, (key, row.exit_reason)
        assert row.attempts == 1
    # AND each started within the stated bound of its fire time
    delays = b_start_delays(world, runner, b_keys)
    assert min(delays) >= 0.0
    assert max(delays) <= B_START_BOUND_SECONDS
    # AND A never ran more than its share of the class at once
    assert runner.most_running["A"] == quota.class_limit(MAX_CONCURRENCY) == 5
    # AND each of A's jobs that ran was stopped at its deadline and recorded so (but the
    # last few, still within their deadline when the run ends); the others wait their
    # turn (deferred, never dropped)
    ran = [k for k in a_keys if k in runner.started]
    assert len(runner.stopped) >= 5 * (RUN_SECONDS // RUNAWAY_DEADLINE - 1)
    for key in ran:
        row = state_of(world, key)
        if key in runner.stopped:
            assert row.state is occurrence.State.DEAD and row.exit_reason == "deadline"
        else:
            assert runner.started[key] > RUN_SECONDS - RUNAWAY_DEADLINE
            assert row.state is occurrence.State.RUNNING
    # (a deferred job has its queued row; one handed back unstarted, after waiting its
    # turn for a vCPU, has no row yet, and its message is on the queue)
    waiting = [k for k in a_keys if k not in runner.started]
    rows = {k: world.memory_occurrences.get(k) for k in waiting}
    assert {r.state for r in rows.values() if r is not None} <= {occurrence.State.QUEUED}
    queued = {
        json.loads(m.body)["occurrence_key"]
        for m in world.memory_queue._queues["default"].messages.values()
    }
    assert {k for k, r in rows.items() if r is None} <= queued
    print(
        f"\nB's {len(b_keys)} jobs started at most {max(delays):.2f} s late, A ran at most "
        f"{runner.most_running['A']} of {MAX_CONCURRENCY} at once"
    )


def test_without_a_class_share_the_same_flood_delays_the_other_tenant_by_a_deadline(
    world: sim_world.World,
) -> None:
    # GIVEN the same load on a class that is not shared out (A's tenant limit, 50, is
    # above the class's 10 invocations)
    runner, _, b_keys = run(world, class_max_concurrency=0)

    # THEN A holds every invocation, and B's jobs wait until A's runaways are stopped:
    # up to a whole deadline, far past the bound the class share keeps
    assert runner.most_running["A"] >= MAX_CONCURRENCY
    delays = b_start_delays(world, runner, [k for k in b_keys if k in runner.started])
    assert max(delays) > RUNAWAY_DEADLINE / 2 > B_START_BOUND_SECONDS
