"""Scale, in the latency model: 50 million jobs a day and 50,000 due in one second.

The real ticker runs in fireline.sim: every DynamoDB and SQS call takes a seeded
log-normal latency (5 ms median, 25 ms p99) and charges the SDK's client-side CPU as
measured on this machine (calibrate), the code's own CPU is measured and scaled to the
function's vCPU share (1,769 MB: one vCPU), each group's invocation starts every minute
and is killed at 60 s, and DynamoDB partitions are limited to 1,000 write units a second.
Figures go to .bench/report.json under scale.*; nothing here fails on time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bench import e2e
from bench.report import record
from bench.size import SCALE, scaled
from fireline import ports
from fireline.adapters import memory
from fireline.domain import model, policies, schedule
from fireline.services import ticker
from fireline.sim import calibrate, lambdas
from fireline.sim import network as sim_network
from fireline.sim import world as sim_world
from helpers import reference_schedule

START = datetime(2026, 5, 1, 11, 0, 0, tzinfo=UTC)
# The starting state a running ticker with the deployed settings leaves (the fleet below
# runs with them too).
LOOKAHEAD = ticker.TickerConfig().lookahead_seconds
HORIZON = ticker.TickerConfig().horizon_seconds
MEMORY_MB = 1769


@pytest.fixture(scope="module")
def sdk() -> sim_network.SdkCost:
    measured = calibrate.measure()
    record(
        "scale.sdk_client_cpu_us_per_call",
        {op: round(seconds * 1e6) for op, seconds in sorted(measured.per_call.items())},
    )
    record(
        "scale.sdk_client_cpu_us_per_further_item",
        {op: round(seconds * 1e6) for op, seconds in sorted(measured.per_item.items())},
    )
    return measured


def world_of(sdk: sim_network.SdkCost, seed: int = 1, start: datetime = START) -> sim_world.World:
    return sim_world.World(start=start, seed=seed, sdk=sdk, partition_units_per_second=1_000)


def run_fleet(
    world: sim_world.World, *, groups: int, seconds: float, minutes: int
) -> lambdas.TickerFleet:
    fleet = lambdas.TickerFleet(
        world.kernel,
        world.schedules,
        world.occurrences,
        world.queue,
        world.leases,
        groups=groups,
        memory_mb=MEMORY_MB,
    )
    fleet.start(0.0, minutes=minutes)
    world.kernel.run(seconds)
    return fleet


def busy(fleet: lambdas.TickerFleet) -> dict[str, float]:
    """How much of each invocation's 60 s its vCPU was busy (what headroom is left)."""
    shares = [i.process.cpu_used / 60 for i in fleet.invocations if i.report is not None]
    return {"mean": round(sum(shares) / len(shares), 3), "max": round(max(shares), 3)}


def backlog_at(world: sim_world.World, moment: datetime) -> int:
    """Schedules whose next fire is already past at ``moment`` (late work left)."""
    return sum(
        len(world.memory_schedules.due(shard, until=moment, limit=1_000_000).items)
        for shard in range(world.shards)
    )


# --- the ticker's own CPU per fire ------------------------------------------------------------


class CountingQueue:
    """A queue that only counts: what SQS does with a message is not the ticker's CPU."""

    def __init__(self) -> None:
        self.sent = 0

    def send_batch(self, job_class: str, messages: Sequence[ports.OutboundMessage]) -> list[str]:
        self.sent += len(messages)
        return []


@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_ticker_cpu_per_fire_before_and_after(zone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN 5,000 every-minute cron schedules in `zone`, each picked up for a quarter
    # hour of fires, on the memory adapters (the code's CPU alone, no SDK)
    def one_pass() -> tuple[float, int]:
        clock = memory.FakeClock(START)
        schedules = memory.MemoryScheduleStore()
        for item in sim_world.every_minute_at(5_000, start=START, timezone=zone):
            schedules.create(item)
        tk = ticker.Ticker(
            schedules=schedules,
            occurrences=memory.MemoryOccurrenceStore(),
            queue=CountingQueue(),
            leases=memory.MemoryLeaseStore(),
            clock=clock,
            owner="bench",
            use_lease=False,
        )
        started = time.process_time()
        report = tk.tick()
        while not report.drained:
            report.add(tk.tick())
        return time.process_time() - started, report.dispatched.sent

    # WHEN one pass runs with the engine as it was (croniter per fire) and as it is
    with monkeypatch.context() as before:
        before.setattr(schedule, "_next_cron", reference_schedule.next_cron)
        before_cpu, before_fires = one_pass()
    after_cpu, after_fires = one_pass()
    # THEN the same fires, for less CPU each
    assert before_fires == after_fires > 5_000 * 15 - 1
    record(
        f"scale.ticker_cpu_us_per_fire.{'utc' if zone == 'UTC' else 'new_york'}",
        {
            "before_croniter": round(before_cpu / before_fires * 1e6, 1),
            "after_compiled": round(after_cpu / after_fires * 1e6, 1),
            "fires": after_fires,
        },
    )


# --- 50 million a day --------------------------------------------------------------------------


def test_steady_580_fires_a_second(sdk: sim_network.SdkCost) -> None:
    # GIVEN 34,800 every-minute schedules (580 fires/s) over 10,000 tenants, in the
    # state a running ticker leaves them: each one's next fire 5 to 16 minutes ahead, the
    # fires before it materialized
    world = world_of(sdk)
    items = sim_world.every_minute_at(scaled(34_800), start=START)
    settled = sim_world.steady_state(world, items, lookahead=LOOKAHEAD, horizon=HORIZON)
    world.add(settled)
    # WHEN one ticker group runs until every fire of a ten-minute window was due for
    # pickup: the window starts after the last fire the starting state materialized and
    # ends a lookahead (and half a minute's slack) before the run's end: 21.5 minutes with
    # the deployed settings
    first = START + timedelta(seconds=HORIZON + 60)
    last = first + timedelta(minutes=10)
    run_seconds = int((last - START).total_seconds()) - LOOKAHEAD + 30
    started = time.perf_counter()
    fleet = run_fleet(world, groups=1, seconds=run_seconds, minutes=run_seconds // 60 + 1)
    wall = time.perf_counter() - started
    # THEN every fire of the window (all of them sent during the run) is visible at its
    # fire time, none lost or sent twice, and nothing is left behind
    expected = sim_world.fires_between(settled, first, last)
    delivery = sim_world.Delivery.of(world, expected)
    end = world.at(run_seconds)
    figures: dict[str, Any] = {
        "schedules": scaled(34_800),
        "scale": SCALE,
        "fires_measured": delivery.expected,
        "lateness_seconds": delivery.lateness.as_dict(),
        "early_seconds": delivery.early.as_dict(),
        "lost": len(delivery.lost),
        "duplicate_messages": delivery.duplicate_messages,
        "backlog_at_end": backlog_at(world, end),
        "ticker_vcpu_busy": busy(fleet),
        "throttled_writes": sum(world.network.throttled.values()),
        "requests_per_fire": {
            op: round(n / max(1, len(world.send_log.sent)), 4)
            for op, n in sorted(world.network.requests.items())
        },
        "groups": 1,
        "memory_mb": MEMORY_MB,
        "simulated_seconds": run_seconds,
        "wall_seconds": round(wall, 1),
    }
    record("scale.steady_580", figures)
    assert delivery.lost == [] and delivery.duplicate_messages == 0
    world.close()


# --- 50,000 due in one second -------------------------------------------------------------------


@pytest.mark.parametrize(("count", "groups"), [(50_000, 1), (50_000, 2), (100_000, 2)])
def test_burst_due_in_one_second(sdk: sim_network.SdkCost, count: int, groups: int) -> None:
    # GIVEN the steady 580 fires/s, and `count` hourly schedules all due at 12:00:00,
    # eleven minutes from the start
    start = datetime(2026, 5, 1, 11, 49, 0, tzinfo=UTC)
    due = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
    world = world_of(sdk, start=start)
    steady = sim_world.every_minute_at(scaled(34_800), start=start)
    settled = sim_world.steady_state(world, steady, lookahead=LOOKAHEAD, horizon=HORIZON)
    nominal, count = count, scaled(count)
    burst = e2e.hourly_burst(count, due=due)
    world.add([*settled, *burst])
    # WHEN the ticker groups run until just after the burst is due
    started = time.perf_counter()
    seconds = world.seconds(due) + 30
    fleet = run_fleet(world, groups=groups, seconds=seconds, minutes=12)
    wall = time.perf_counter() - started
    # THEN the burst was enqueued before its second, visible at its fire time
    expected = {k: f for k, f in sim_world.fires_between(burst, due, due).items()}
    delivery = sim_world.Delivery.of(world, expected)
    sends = [s for s in world.send_log.sent if s.key in expected]
    visible_by_due = sum(1 for s in sends if s.visible_at <= world.seconds(due))
    last_sent = max(s.sent_at for s in sends) - world.seconds(due)
    steady_delivery = sim_world.Delivery.of(
        world, sim_world.fires_between(settled, due - timedelta(minutes=1), due)
    )
    figures = {
        "burst": count,
        "groups": groups,
        "enqueued_visible_by_due_share": round(visible_by_due / count, 4),
        "last_enqueued_seconds_after_due": round(last_sent, 1),
        "first_enqueued_seconds_before_due": round(
            world.seconds(due) - min(s.sent_at for s in sends), 1
        ),
        "lateness_seconds": delivery.lateness.as_dict(),
        "lost": len(delivery.lost),
        "duplicate_messages": delivery.duplicate_messages,
        "steady_load_lateness_seconds": steady_delivery.lateness.as_dict(),
        "ticker_vcpu_busy": busy(fleet),
        "throttled_writes": sum(world.network.throttled.values()),
        "wall_seconds": round(wall, 1),
    }
    figures["scale"] = SCALE
    record(f"scale.burst_{nominal // 1000}k.groups_{groups}", figures)
    if nominal == 50_000 and groups == 2:
        record("scale.burst_50k", figures)
    if nominal == 100_000:
        record("scale.burst_100k", figures)
    if groups == 1:
        # One group is measured, not held to it: at the deployed 300 s lookahead a 50,000
        # burst on top of the steady load overruns it (docs/scale.md gives its figures and
        # recommends two groups for such bursts).
        world.close()
        return
    assert delivery.lost == [] and delivery.duplicate_messages == 0
    world.close()


# --- throughput per ticker group ----------------------------------------------------------------


def one_off_jobs(count: int, due: datetime) -> Iterator[model.Schedule]:
    for n in range(count):
        spec = schedule.AtSpec(when=due)
        yield model.Schedule(
            tenant_id=f"tenant-{n % 10_000:05d}",
            schedule_id=f"job{n:07d}",
            timing=schedule.Timing(spec=spec),
            spec_text=str(spec),
            kind=model.Kind.JOB,
            misfire=policies.Misfire(policy=policies.MisfirePolicy.FIRE_ONCE),
            next_fire=due,
        )


def test_throughput_grows_with_ticker_groups(sdk: sim_network.SdkCost) -> None:
    # GIVEN a backlog no group count drains in a minute: one-off jobs, one fire (and so
    # one advance) each, the ticker's most expensive kind of fire
    figures: dict[str, Any] = {}
    backlog = scaled(120_000)
    for groups in (1, 2, 4):
        world = world_of(sdk)
        world.add(one_off_jobs(backlog, START))
        # WHEN the groups run for one invocation
        fleet = run_fleet(world, groups=groups, seconds=60, minutes=1)
        sent = len(world.send_log.sent)
        # THEN fires per second over the invocation's 55 working seconds
        figures[f"groups_{groups}"] = {
            "fires_per_second": round(sent / 55),
            "vcpu_busy": busy(fleet),
            "throttled_writes": sum(world.network.throttled.values()),
            "backlog_drained": sent >= backlog,
        }
        world.close()
    one = figures["groups_1"]["fires_per_second"]
    figures["speedup"] = {
        name: round(value["fires_per_second"] / one, 2)
        for name, value in figures.items()
        if name.startswith("groups_")
    }
    record("scale.groups", figures)
    if figures["groups_1"]["backlog_drained"]:
        # A reduced run's backlog (FIRELINE_BENCH_SCALE) is one group's minute of work or
        # less: every count drains it, and the rates measure the backlog, not the groups.
        assert all(figures[f"groups_{g}"]["backlog_drained"] for g in (1, 2, 4))
    else:
        assert figures["groups_4"]["fires_per_second"] > figures["groups_1"]["fires_per_second"]
