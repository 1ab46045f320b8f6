"""The real ticker in the latency model: progress under a backlog, kills at every point of
a round, a lease lost mid-round, a schedule that missed days of fires, network faults.

Deterministic: measured CPU is off; each simulated AWS call charges a fixed client-side
CPU (scaled to the Lambda's share) and a seeded latency, so these count outcomes, never
wall time.
"""

from __future__ import annotations

import contextlib
import itertools
import random
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fireline.domain import errors, lease, model, occurrence, policies, schedule
from fireline.services import claims
from fireline.sim import kernel as sim_kernel
from fireline.sim import lambdas
from fireline.sim import network as sim_network
from fireline.sim import world as sim_world
from helpers import skipped

START = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
SDK_CALL = 0.003  # seconds of this machine's CPU per AWS call (the calibrated order)


@pytest.fixture
def make_world() -> Iterator[Callable[..., sim_world.World]]:
    made: list[sim_world.World] = []

    def make(**fields: Any) -> sim_world.World:
        fields.setdefault("sdk", sim_network.SdkCost(default=SDK_CALL))
        world = sim_world.World(start=START, **fields)
        made.append(world)
        return world

    yield make
    for world in made:
        world.close()


def fleet(world: sim_world.World, **fields: Any) -> lambdas.TickerFleet:
    fields.setdefault("measure_cpu", False)
    return lambdas.TickerFleet(
        world.kernel, world.schedules, world.occurrences, world.queue, world.leases, **fields
    )


def one_off_jobs(count: int, due: datetime) -> list[model.Schedule]:
    made = []
    for n in range(count):
        spec = schedule.AtSpec(when=due)
        made.append(
            model.Schedule(
                tenant_id=f"tenant-{n % 50}",
                schedule_id=f"job{n:06d}",
                timing=schedule.Timing(spec=spec),
                spec_text=str(spec),
                kind=model.Kind.JOB,
                misfire=policies.Misfire(policy=policies.MisfirePolicy.FIRE_ONCE),
                next_fire=due,
            )
        )
    return made


def claim_everything(world: sim_world.World) -> Counter[claims.Outcome]:
    """What the workers would make of every message sent: one claim per delivery."""
    outcomes: Counter[claims.Outcome] = Counter()
    for sent in world.send_log.sent:
        claimed = claims.claim(
            sent.body,
            schedules=world.memory_schedules,
            occurrences=world.memory_occurrences,
            now=START + timedelta(days=1),
        )
        outcomes[claimed.outcome] += 1
    return outcomes


# --- progress under a backlog ----------------------------------------------------------------


def test_a_backlog_larger_than_one_invocation_drains_with_progress_every_invocation(
    make_world: Callable[..., sim_world.World],
) -> None:
    # GIVEN 5,000 one-off jobs all due now, and a ticker on 512 MB whose SDK calls cost
    # 10 ms of CPU each: one invocation can send only part of them
    world = make_world(sdk=sim_network.SdkCost(default=0.010))
    world.add(one_off_jobs(5_000, START))
    tickers = fleet(world, memory_mb=512)
    tickers.start(0.0, minutes=8)
    # WHEN eight minutes pass
    world.kernel.run(8 * 60)
    # THEN it took several invocations, and every one of them sent something until all
    # were sent
    sent_per_invocation = [i.report.totals.dispatched.sent for i in tickers.invocations]
    assert sent_per_invocation[0] < 5_000
    drained_at = next(n for n in range(8) if sum(sent_per_invocation[: n + 1]) == 5_000)
    assert drained_at >= 2
    assert all(sent > 0 for sent in sent_per_invocation[: drained_at + 1])
    # AND each job went out exactly once: nothing lost, nothing repeated
    counts = Counter(s.key for s in world.send_log.sent)
    assert len(counts) == 5_000 and set(counts.values()) == {1}
    assert all(i.report.stopped == "time" for i in tickers.invocations)
    print(
        f"\n5,000 due in one second: sent {sent_per_invocation[: drained_at + 1]} by "
        f"invocation, each once"
    )


# --- a kill at every point of a round -----------------------------------------------------------


def every_minute(count: int) -> list[model.Schedule]:
    return sim_world.every_minute_at(count, start=START + timedelta(seconds=59), tenants=5)


def killing_the_first_invocation_at(call: int, when: str) -> Callable[[str, int], str | None]:
    """A fault plan: the first ticker invocation dies at its ``call``-th AWS call."""
    seen = 0

    def fault(op: str, n: int) -> str | None:
        nonlocal seen
        current = kernel_of[0].current().process.name
        if current != "ticker-0-0":
            return None
        seen += 1
        return f"kill_{when}" if seen == call + 1 else None

    return fault


kernel_of: list[sim_kernel.Kernel] = []


def first_round_calls(make_world: Callable[..., sim_world.World]) -> int:
    world = make_world()
    world.add(every_minute(10))
    tickers = fleet(world, config={"lookahead_seconds": 10, "horizon_seconds": 180})
    tickers.start(0.0, minutes=1)
    world.kernel.run(2.0)  # the first round and a little
    return sum(world.network.requests.values())


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_invocation_killed_at_any_call_of_its_round_loses_nothing(
    make_world: Callable[..., sim_world.World], when: str
) -> None:
    # GIVEN 10 minutely schedules whose first fire the first invocation's first round
    # materializes, along with the next two (a 180 s horizon)
    calls = first_round_calls(make_world)
    assert calls > 20
    for call in range(calls):
        world = make_world()
        items = every_minute(10)
        world.add(items)
        kernel_of[:] = [world.kernel]
        world.network.fault = killing_the_first_invocation_at(call, when)
        tickers = fleet(world, config={"lookahead_seconds": 10, "horizon_seconds": 180})
        # WHEN the first invocation dies at that call (before it takes effect, or after
        # it took effect but before its answer came back), and the next minute's runs
        tickers.start(0.0, minutes=3)
        world.kernel.run(3 * 60)
        # THEN every fire due up to the end was sent
        expected = sim_world.fires_between(items, START, START + timedelta(seconds=150))
        delivery = sim_world.Delivery.of(world, expected)
        assert delivery.lost == [], f"lost fires when killed {when} call {call}"
        # AND repeats are few (only what the dead invocation's round had sent) and
        # converge: each fire one row, claimed once
        assert delivery.duplicate_messages <= 30
        outcomes = claim_everything(world)
        assert outcomes[claims.Outcome.CLAIMED] == len({s.key for s in world.send_log.sent})
    print(f"\nkilled {when} each of {calls} calls of a round: 0 fires lost")


# --- the lease lost mid-round -------------------------------------------------------------------


def test_a_ticker_cut_off_from_its_lease_writes_nothing_once_another_could_hold_it(
    make_world: Callable[..., sim_world.World],
) -> None:
    # GIVEN a ticker busy with a large backlog (2,000 jobs, SDK calls of 10 ms on 512 MB)
    # whose lease store becomes unreachable 20 s into the invocation
    world = make_world(sdk=sim_network.SdkCost(default=0.010))
    world.add(one_off_jobs(2_000, START + timedelta(seconds=30)))
    writes: list[float] = []
    cut_off_at = 20.0

    def fault(op: str, n: int) -> str | None:
        k = world.kernel
        if k.current().process.name == "ticker-0-0" and op in WRITES:
            writes.append(k.now())
        return None

    world.network.fault = fault
    lease_network = sim_network.Network(world.kernel, seed=2)
    original = lease_network.call

    def unreachable_after_cut(op: sim_network.Op, effect: Any, args: Any, kwargs: Any) -> Any:
        if world.kernel.now() >= cut_off_at:
            raise errors.Unavailable("the lease store is unreachable")
        return original(op, effect, args, kwargs)

    lease_network.call = unreachable_after_cut  # type: ignore[method-assign]
    leases = sim_network.Latent(world.memory_leases, lease_network, sim_network.LEASE_OPS)
    tickers = lambdas.TickerFleet(
        world.kernel,
        world.schedules,
        world.occurrences,
        world.queue,
        leases,  # type: ignore[arg-type]
        memory_mb=512,
        measure_cpu=False,
    )
    tickers.start(0.0, minutes=1)
    # WHEN it runs on, its renewals unanswered
    world.kernel.run(60.0)
    # THEN it stopped for the lost lease...
    (invocation,) = tickers.invocations
    assert invocation.report is not None and invocation.report.stopped == "lease_lost"
    # ...and no write of its landed once another ticker could take the lease over: it
    # stopped issuing them the safety margin before the expiry (those in flight landed
    # within it)
    held = world.memory_leases.get("ticker")
    assert held is not None
    expiry = held.expires_at_ms / 1000 - START.timestamp()
    margin = lease.LeaseTerms().safety_margin_ms / 1000
    assert any(t > cut_off_at for t in writes)  # it kept working while it could trust it
    assert max(writes) < expiry
    assert max(writes) < expiry - margin + 0.5
    print(
        f"\ncut off at {cut_off_at:.0f} s: last write at {max(writes):.2f} s, "
        f"{expiry - max(writes):.2f} s before the lease could pass"
    )


WRITES = ("dynamodb.UpdateItem", "dynamodb.PutItem", "sqs.SendMessageBatch")


# --- one schedule that missed days of fires --------------------------------------------------


def test_a_two_second_cron_resumed_after_three_days_costs_the_others_nothing(
    make_world: Callable[..., sim_world.World], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN each next-fire computation costs 30 us of CPU (the engine before it was
    # compiled), on 512 MB
    world = make_world()
    original = schedule.next_fire

    def costly(*args: Any, **kwargs: Any) -> Any:
        # (the test's own calls, outside the simulation, charge nothing)
        with contextlib.suppress(RuntimeError):
            world.kernel.charge(30e-6)
        return original(*args, **kwargs)

    monkeypatch.setattr(schedule, "next_fire", costly)
    # AND a cron(*/2 * * * * *) schedule due three days ago (paused, just resumed), beside
    # 1,000 minutely schedules
    resumed_timing = schedule.Timing(spec=schedule.parse_spec("cron(*/2 * * * * *)"))
    resumed = model.Schedule(
        tenant_id="tenant-r",
        schedule_id="resumed",
        timing=resumed_timing,
        spec_text="cron(*/2 * * * * *)",
        next_fire=START - timedelta(days=3),
    )
    others = sim_world.every_minute_at(1_000, start=START + timedelta(seconds=30), tenants=20)
    world.add([resumed, *others])
    tickers = fleet(world, memory_mb=512)
    tickers.start(0.0, minutes=3)
    # WHEN three minutes pass
    world.kernel.run(3 * 60)
    # THEN the ticker kept its lease throughout and every other fire was visible on time
    # (within the second the whole-second SQS delay allows)
    assert all(i.report.stopped == "time" for i in tickers.invocations)
    expected = sim_world.fires_between(others, START, START + timedelta(seconds=170))
    delivery = sim_world.Delivery.of(world, expected)
    assert delivery.lost == [] and delivery.lateness.max < 1.0
    # AND the resumed schedule was caught up chunk by chunk: every fire from three days
    # ago to its latest is sent, listed as skipped, or counted in a summary, exactly once
    covered: list[tuple[datetime, datetime, int]] = []
    for row in world.memory_occurrences.history("tenant-r", "resumed", limit=1_000).items:
        reason = row.exit_reason or ""
        if "fires from" in reason:
            count = int(reason.split("(")[1].split(" ")[0])
            last = row.fire_time + (count - 1) * timedelta(seconds=2)
            covered.append((row.fire_time, last, count))
        else:
            covered.append((row.fire_time, row.fire_time, 1))
    covered += [
        (s.fire_time, s.fire_time, 1) for s in world.send_log.sent if s.key.startswith("resumed#")
    ]
    covered.sort()
    assert covered[0][0] == START - timedelta(days=3)
    for (_, last, _), (first, _, _) in itertools.pairwise(covered):
        assert first == last + timedelta(seconds=2)
    assert covered[-1][1] > START  # and it fires on


# --- network faults -----------------------------------------------------------------------------


def test_one_call_in_ten_failing_or_timing_out_loses_no_fire_and_no_invocation(
    make_world: Callable[..., sim_world.World],
) -> None:
    # GIVEN 300 minutely schedules with a 10 s misfire grace, and one ticker call in ten
    # failing: half before taking effect, half after (the answer lost)
    world = make_world()
    rng = random.Random(11)

    def fault(op: str, n: int) -> str | None:
        if world.kernel.current().process.name.startswith("ticker"):
            draw = rng.random()
            if draw < 0.05:
                return "before"
            if draw < 0.10:
                return "after"
        return None

    world.network.fault = fault
    items = [
        _replace_misfire(item, policies.Misfire(grace_seconds=10))
        for item in sim_world.every_minute_at(300, start=START + timedelta(seconds=30), tenants=7)
    ]
    world.add(items)
    tickers = fleet(world)
    tickers.start(0.0, minutes=4)
    # WHEN four minutes pass
    world.kernel.run(4 * 60)
    # THEN faults were injected throughout, no invocation ended early for them
    assert sum(world.network.faults.values()) > 100
    assert all(i.report.stopped == "time" for i in tickers.invocations)
    # AND every fire was sent (late by at most a pass), none skipped as missed
    expected = sim_world.fires_between(items, START, START + timedelta(seconds=230))
    delivery = sim_world.Delivery.of(world, expected)
    assert delivery.lost == []
    assert delivery.lateness.max <= 2.0
    assert not any(
        o.state is occurrence.State.SKIPPED
        for item in items
        for o in world.memory_occurrences.history(item.tenant_id, item.schedule_id, limit=50).items
    )
    print(
        f"\n{sum(world.network.faults.values())} ticker calls failed: {len(expected)} fires, "
        f"0 lost, latest {delivery.lateness.max:.2f} s late"
    )


def _replace_misfire(item: model.Schedule, misfire: policies.Misfire) -> model.Schedule:
    from dataclasses import replace

    return replace(item, misfire=misfire)


# --- skipped fires' records under a kill ------------------------------------------------------


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_invocation_killed_at_any_call_of_its_round_leaves_no_skipped_fire_unrecorded(
    make_world: Callable[..., sim_world.World], when: str
) -> None:
    # GIVEN 10 minutely schedules and a cron(*/2 * * * * *) one that skips missed fires,
    # resumed with three minutes of fires missed: the first round plans 88 of them skipped
    skip_timing = schedule.Timing(spec=schedule.parse_spec("cron(*/2 * * * * *)"))
    skipping = model.Schedule(
        tenant_id="tenant-s",
        schedule_id="skipping",
        timing=skip_timing,
        spec_text="cron(*/2 * * * * *)",
        misfire=policies.Misfire(policy=policies.MisfirePolicy.SKIP, grace_seconds=5),
        next_fire=START - timedelta(minutes=3),
    )
    missed_at_start = list(
        schedule.fires(
            skip_timing,
            START - timedelta(minutes=3, microseconds=1),
            until=START - timedelta(seconds=6),
        )
    )
    assert len(missed_at_start) == 88
    probe = make_world()
    probe.add([*every_minute(10), skipping])
    fleet(probe, config={"lookahead_seconds": 10, "horizon_seconds": 180}).start(0.0, minutes=1)
    probe.kernel.run(2.0)
    calls = sum(probe.network.requests.values())
    unrecorded: dict[int, int] = {}
    for call in range(calls):
        world = make_world()
        world.add([*every_minute(10), skipping])
        kernel_of[:] = [world.kernel]
        world.network.fault = killing_the_first_invocation_at(call, when)
        tickers = fleet(world, config={"lookahead_seconds": 10, "horizon_seconds": 180})
        # WHEN the first invocation dies at that call, and the next minutes' run on
        tickers.start(0.0, minutes=3)
        world.kernel.run(3 * 60)
        # THEN every fire missed when the first round planned is recorded as skipped (its
        # row, a summary row that counts it, or the range the schedule holds), none sent
        records = skipped.recorded_skips(world.memory_schedules, world.memory_occurrences, skipping)
        missing = [f for f in missed_at_start if f not in records]
        if missing:
            unrecorded[call] = len(missing)
        sent = {s.key for s in world.send_log.sent if s.key.startswith("skipping#")}
        assert not any(occurrence.parse_key(k).fire_time in missed_at_start for k in sent)
    assert unrecorded == {}, f"killed {when}: fires unrecorded by call {unrecorded}"
    print(f"\nkilled {when} each of {calls} calls of a round: 0 skipped fires unrecorded")


# --- one tenant's writes past one partition key's limit ---------------------------------------


def big_tenant_run(world: sim_world.World) -> tuple[int, dict[str, float]]:
    """One tenant's 3,000 every-minute schedules of 4 KB (50 fires a second) on a world
    whose partition keys take 100 write units a second each, the first due a minute after
    the ticker starts: the advances throttled, and how late each fire of the first two
    minutes first turned visible (negative: early). A throttled advance has its fires
    sent again by a later round: harmless, the claim is conditional."""
    world.add(sim_world.every_minute_at(3_000, start=START + timedelta(minutes=1), tenants=1))
    fleet(world, memory_mb=1769).start(0.0, minutes=4)
    world.kernel.run(4 * 60)
    first_visible: dict[str, float] = {}
    for sent in world.send_log.sent:
        if sent.fire_time < START + timedelta(minutes=3):
            late = sent.visible_at - world.seconds(sent.fire_time)
            first_visible[sent.key] = min(late, first_visible.get(sent.key, late))
    return world.network.throttled["dynamodb.UpdateItem"], first_visible


def test_one_tenants_advances_spread_over_its_keys_are_throttled_far_less_and_none_late(
    make_world: Callable[..., sim_world.World], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN one tenant whose first pickups (every schedule due within the lookahead at
    # once, 4 write units each) ask of its partition key far more than 100 units a second
    spread = make_world(partition_units_per_second=100, schedule_item_units=4)
    throttled, fires = big_tenant_run(spread)
    # AND the same on one key, as when a tenant's schedules all lay on its id
    with monkeypatch.context() as patched:
        patched.setattr(model, "tenant_key", lambda tenant_id, schedule_id: tenant_id)
        one_key = make_world(partition_units_per_second=100, schedule_item_units=4)
        throttled_on_one_key, fires_on_one_key = big_tenant_run(one_key)
    # THEN spread over its keys, its advances are throttled fewer times by at least the
    # number of keys
    assert throttled * model.TENANT_KEY_SHARDS <= throttled_on_one_key
    # AND every fire of the first two minutes went out, visible by its second
    assert len(fires) == 6_000
    assert max(fires.values()) <= 0
    late_on_one_key = sum(lateness > 0 for lateness in fires_on_one_key.values())
    print(
        f"\n3,000 schedules of 4 KB on one tenant: advances throttled {throttled} on its "
        f"{model.TENANT_KEY_SHARDS} keys, {throttled_on_one_key} on one key; fires late "
        f"0 and {late_on_one_key}"
    )
