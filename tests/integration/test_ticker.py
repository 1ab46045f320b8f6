"""The ticker on moto: the due index, races, leases, clock jumps and cost per fire."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from fireline.adapters import dynamodb
from fireline.domain import model, occurrence, policies, schedule
from fireline.services import claims, ticker
from fireline.services.schedules import ScheduleDraft
from helpers.system import START, System

TARGET = {"type": "python", "handler": "noop"}
MINUTE = timedelta(minutes=1)


def create(system: System, spec: str = "rate(1 minute)", **fields: Any) -> model.Schedule:
    return system.service.create("tenant-a", ScheduleDraft(spec=spec, target=TARGET, **fields))


def run(tk: ticker.Ticker, system: System, seconds: float) -> ticker.RunReport:
    """Run one invocation that lasts ``seconds`` of fake time (stop margin 0)."""
    end = system.clock.monotonic() + seconds
    return tk.run(lambda: int((end - system.clock.monotonic()) * 1000))


def rows(system: System, item: model.Schedule) -> list[occurrence.Occurrence]:
    found: list[occurrence.Occurrence] = []
    cursor = None
    while True:
        page = system.occurrences.history(
            item.tenant_id, item.schedule_id, limit=100, cursor=cursor
        )
        found += page.items
        cursor = page.cursor
        if cursor is None:
            return found


def in_index(system: System, schedule_id: str) -> bool:
    return any(
        e.schedule_id == schedule_id
        for shard in range(model.DEFAULT_SHARDS)
        for e in system.schedules.due(shard, until=START + timedelta(days=3650), limit=1000)
    )


# --- the due lookup ----------------------------------------------------------------------


def write_schedules(system: System, total: int, due: int) -> None:
    """``total`` schedules straight into the table; ``due`` of them due within the tick."""
    # Daily at 12:00:05: the due ones fire 5 s after START, the others a day later.
    timing = schedule.Timing(spec=schedule.parse_spec("cron(5 0 12 * * *)"))
    items = []
    for n in range(total):
        fire = START + timedelta(seconds=5) if n < due else START + timedelta(days=1, seconds=5)
        item = model.Schedule(
            tenant_id=f"tenant-{n % 7}",
            schedule_id=f"sch_{n:06d}",
            timing=timing,
            spec_text=str(timing.spec),
            next_fire=fire,
        )
        items.append(dynamodb.schedule_to_item(item, model.DEFAULT_SHARDS))
    table = system.stack.tables["SchedulesTable"]
    for start in range(0, len(items), 25):
        system.ddb.batch_write_item(
            RequestItems={
                table: [
                    {"PutRequest": {"Item": dynamodb._encode(i)}} for i in items[start : start + 25]
                ]
            }
        )


@pytest.mark.parametrize("total", [1_000, 10_000])
def test_due_lookup_is_a_query_per_shard_reading_only_due_items(system: System, total: int) -> None:
    # GIVEN `total` schedules of which 50 are due
    write_schedules(system, total, due=50)
    tk = system.ticker(use_lease=False)
    system.log.reset()
    # WHEN one tick runs
    report = tk.tick()
    # THEN it queried each shard once, scanned nothing, and read only the 50 due items
    assert system.log.requests["Scan"] == 0
    assert system.log.requests["Query"] == model.DEFAULT_SHARDS
    assert system.log.scanned == 50
    assert report.due_read == 50
    assert report.dispatched.created == 50


# --- racing tickers ----------------------------------------------------------------------


class ReadTogether:
    """A schedule store whose reads wait for the other ticker's: both read the same due
    set before either writes, the worst interleaving for two leaders."""

    def __init__(self, store: Any, barrier: threading.Barrier) -> None:
        self._store = store
        self._barrier = barrier

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def due(self, *args: Any, **kwargs: Any) -> Any:
        found = self._store.due(*args, **kwargs)
        self._barrier.wait(timeout=30)
        return found

    def get_many(self, *args: Any, **kwargs: Any) -> Any:
        found = self._store.get_many(*args, **kwargs)
        self._barrier.wait(timeout=30)
        return found


def test_two_tickers_without_lease_converge_on_one_row_per_key(system: System) -> None:
    # GIVEN 30 schedules due at START + 1 min, and two tickers with the lease disabled
    made = [create(system) for _ in range(30)]
    system.clock.advance(55)  # inside the lookahead of the first fire
    barrier = threading.Barrier(2)
    tickers = [system.ticker(name, use_lease=False) for name in ("a", "b")]
    for tk in tickers:
        tk.schedules = ReadTogether(system.schedules, barrier)
    reports: dict[str, ticker.TickReport] = {}
    failures: list[BaseException] = []

    def tick(tk: ticker.Ticker) -> None:
        try:
            reports[tk.owner] = tk.tick()
        except BaseException as exc:  # the assertion below reports it
            failures.append(exc)

    # WHEN both tick at once
    threads = [threading.Thread(target=tick, args=(tk,)) for tk in tickers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    # THEN both complete without error
    assert failures == []
    a, b = reports["a"], reports["b"]
    # AND every key has exactly one row: three fires each within the horizon
    per_key = Counter(o.key for item in made for o in rows(system, item))
    assert len(per_key) == 30 * 3 and set(per_key.values()) == {1}
    # AND the loser's puts were counted as duplicates, its advances as conflicts
    assert a.dispatched.created + b.dispatched.created == 90
    assert a.dispatched.duplicates + b.dispatched.duplicates == 90
    assert a.advanced + b.advanced == 30
    assert a.conflicts + b.conflicts == 30
    # AND each schedule moved forward exactly once, past the three fires
    for item in made:
        assert system.schedules.get("tenant-a", item.schedule_id).next_fire == START + 4 * MINUTE


# --- leases ------------------------------------------------------------------------------


def test_ticker_whose_renewal_fails_stops_and_writes_nothing_more(system: System) -> None:
    # GIVEN ticker A holds the lease and is ticking over schedules due every 10 s
    for _ in range(5):
        create(system, "rate(10 seconds)")
    tk = system.ticker("ticker-a", horizon_seconds=10, stop_before_end_ms=0)
    calls = 0
    taken: dict[str, Any] = {}

    def remaining() -> int:
        nonlocal calls
        calls += 1
        if calls == 4:
            # A stalls for 15 s (a long GC pause): its lease expires and B takes over.
            system.clock.advance(15)
            taken["lease"] = system.leases.acquire(
                "ticker",
                "ticker-b",
                int(system.clock.now().timestamp() * 1000),
                tk.config.lease_terms,
            )
            system.log.reset()
        return 60_000

    # WHEN A runs on
    report = tk.run(remaining)
    # THEN B got the lease, A stopped on lease loss at its next check
    assert taken["lease"] is not None and taken["lease"].token == 2
    assert report.stopped == "lease_lost"
    # AND after the takeover A wrote no occurrence, no schedule and sent no message
    tables = system.stack.tables
    assert system.log.writes[tables["OccurrencesTable"]] == 0
    assert system.log.writes[tables["SchedulesTable"]] == 0
    assert system.log.requests["SendMessageBatch"] == 0
    # AND the lease is B's
    assert system.leases.get("ticker").owner == "ticker-b"


class FrozenReads:
    """A schedule store that answers reads as they were at capture time (a stale view)."""

    def __init__(self, store: Any, until: Any) -> None:
        self._store = store
        self._due = {s: store.due(s, until=until, limit=500) for s in range(model.DEFAULT_SHARDS)}
        keys = [(e.tenant_id, e.schedule_id) for entries in self._due.values() for e in entries]
        self._items = {(s.tenant_id, s.schedule_id): s for s in store.get_many(keys)}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def due(self, shard: int, **_: Any) -> Any:
        return self._due[shard]

    def get_many(self, keys: Any) -> Any:
        return [self._items[k] for k in keys if k in self._items]


def test_stale_ticker_cannot_duplicate_move_backwards_or_lose_a_fire(system: System) -> None:
    # GIVEN 10 schedules every minute, and a stale ticker that read the due set at T...
    made = [create(system) for _ in range(10)]
    system.clock.advance(55)
    stale = system.ticker("stale", use_lease=False)
    stale.schedules = FrozenReads(system.schedules, system.clock.now() + timedelta(seconds=10))
    # ...while the new leader ticked at T and again a few minutes on
    leader = system.ticker("leader", use_lease=False)
    leader.tick()
    system.clock.advance(180)
    leader.tick()
    after_leader = {
        i.schedule_id: system.schedules.get("tenant-a", i.schedule_id).next_fire for i in made
    }
    keys_before = {o.key for i in made for o in rows(system, i)}
    # WHEN the stale ticker finally acts on its old view
    report = stale.tick()
    # THEN nothing new was created (each of its 6 fires x 10 schedules found its key
    # taken), every advance was refused, and nothing moved backwards
    assert report.dispatched.created == 0 and report.dispatched.skipped == 0
    assert report.dispatched.duplicates == 60
    assert report.conflicts == 10 and report.advanced == 0
    assert {
        i.schedule_id: system.schedules.get("tenant-a", i.schedule_id).next_fire for i in made
    } == after_leader
    assert {o.key for i in made for o in rows(system, i)} == keys_before
    # AND no fire is lost: every minute up to the last materialized one has its row
    for item in made:
        fires = sorted(o.fire_time for o in rows(system, item))
        assert fires == [START + n * MINUTE for n in range(1, len(fires) + 1)]
        assert len(fires) == 6


class Crash(BaseException):
    """The ticker's process dies: no release, no goodbye (nothing after it runs)."""


def test_second_ticker_takes_over_within_ttl_plus_one_tick_and_loses_nothing(
    system: System,
) -> None:
    # GIVEN ticker A holds the lease, renewing it, for 20 s, then its process dies
    made = [create(system, "rate(5 seconds)") for _ in range(5)]
    a = system.ticker("ticker-a", horizon_seconds=10, stop_before_end_ms=0)
    died_at = system.clock.monotonic() + 20

    def remaining() -> int:
        if system.clock.monotonic() >= died_at:
            raise Crash
        return 60_000

    with pytest.raises(Crash):
        a.run(remaining)
    expires_at_ms = system.leases.get("ticker").expires_at_ms
    assert expires_at_ms > int(system.clock.now().timestamp() * 1000)  # still A's
    # WHEN B tries once a second, as the scheduled invocations do
    b = system.ticker("ticker-b", horizon_seconds=10, stop_before_end_ms=0)
    attempts = 0
    while not (report := run(b, system, 1)).acquired:
        system.clock.advance(1)  # the next invocation, a second later
        attempts += 1
        assert attempts < 30
    took_over_at_ms = int(system.clock.now().timestamp() * 1000) - 1_000  # before its tick
    # THEN B got the lease within the TTL plus one tick of A's last renewal
    terms = b.config.lease_terms
    assert took_over_at_ms <= expires_at_ms + 1_000
    assert took_over_at_ms - (expires_at_ms - terms.ttl_ms) <= terms.ttl_ms + 1_000
    assert report.token == 2
    # AND after B runs a minute, every 5-second fire since the start has a row
    run(b, system, 60)
    now = system.clock.now()
    for item in made:
        fires = {o.fire_time for o in rows(system, item)}
        assert set(schedule.fires(item.timing, START, until=now)) <= fires


# --- pause, resume, cancel, update ---------------------------------------------------------


def test_pause_removes_from_index_and_resume_applies_the_misfire_policy(system: System) -> None:
    # GIVEN a schedule every minute that skips missed fires, materialized ahead
    item = create(system, misfire=policies.Misfire(policy=policies.MisfirePolicy.SKIP))
    system.clock.advance(55)
    system.ticker(use_lease=False).tick()
    # WHEN it is paused
    paused = system.service.pause("tenant-a", item.schedule_id)
    # THEN it left the due index (the raw item has neither index attribute)
    raw = system.ddb.get_item(
        TableName=system.stack.tables["SchedulesTable"],
        Key={"tenant_id": {"S": "tenant-a"}, "schedule_id": {"S": item.schedule_id}},
    )["Item"]
    assert "next_fire_ms" not in raw and "due_shard" not in raw
    assert not in_index(system, item.schedule_id)
    # AND fires materialized before the pause were skipped by it, and do nothing when
    # their messages arrive
    system.clock.advance(240)
    ahead = system.receive_all()
    assert len(ahead) == 3
    outcomes = [system.claim(body) for body in ahead]
    assert {c.outcome for c in outcomes} == {claims.Outcome.FINISHED}
    assert {c.reason for c in outcomes} == {"already skipped"}
    assert {c.occurrence.exit_reason for c in outcomes if c.occurrence} == {
        "skipped: schedule paused"
    }
    # WHEN resumed ten minutes after the pause
    system.clock.advance(600 - 240)
    resumed = system.service.resume("tenant-a", item.schedule_id)
    # THEN it is back in the index at the first fire after the pause...
    assert in_index(system, item.schedule_id)
    assert resumed.next_fire == schedule.next_fire(item.timing, paused.paused_at)
    # ...and the ticker records the fires missed while paused as skipped, then goes on
    system.ticker(use_lease=False).tick()
    latest = [o for o in rows(system, item) if o.version == resumed.version]
    skipped = [o for o in latest if o.state is occurrence.State.SKIPPED]
    queued = [o for o in latest if o.state is occurrence.State.QUEUED]
    assert len(skipped) == 10 - 1  # missed (older than the 60 s grace), recorded one by one
    assert all(o.exit_reason == "skipped: misfire" for o in skipped)
    assert queued and min(o.fire_time for o in queued) > system.clock.now() - timedelta(seconds=60)


def test_resume_with_fire_once_runs_the_latest_missed_fire_once(system: System) -> None:
    item = create(system, misfire=policies.Misfire(policy=policies.MisfirePolicy.FIRE_ONCE))
    system.service.pause("tenant-a", item.schedule_id)
    system.clock.advance(30 * 60)
    system.service.resume("tenant-a", item.schedule_id)
    system.ticker(use_lease=False).tick()
    fired_late = [
        o for o in rows(system, item)
        if o.state is occurrence.State.QUEUED and o.fire_time < system.clock.now() - MINUTE
    ]  # fmt: skip
    assert len(fired_late) == 1
    # the latest fire older than the 60 s grace; the one inside it fires as usual
    assert fired_late[0].fire_time == START + 28 * MINUTE


def test_cancelled_queued_job_message_is_a_no_op(system: System) -> None:
    # GIVEN a one-off job due in 30 s, materialized and its message sent (delayed)
    view = system.service.create_job("tenant-a", _job(delay_seconds=30))
    system.clock.advance(25)
    system.ticker(use_lease=False).tick()
    assert system.service.get_job("tenant-a", view.job.schedule_id).state == "queued"
    # WHEN the job is cancelled before the message arrives
    system.service.cancel_job("tenant-a", view.job.schedule_id)
    system.clock.advance(10)
    (body,) = system.receive_all()
    claimed = system.claim(body)
    # THEN the message is a no-op: nothing claimed, the row stays cancelled, 0 attempts
    assert claimed.outcome is claims.Outcome.FINISHED
    after = system.service.get_job("tenant-a", view.job.schedule_id)
    assert after.state == "cancelled"
    assert after.occurrence is not None and after.occurrence.attempts == 0


def test_job_cancelled_before_materialization_never_fires(system: System) -> None:
    view = system.service.create_job("tenant-a", _job(delay_seconds=120))
    system.service.cancel_job("tenant-a", view.job.schedule_id)
    assert not in_index(system, view.job.schedule_id)
    system.clock.advance(180)
    report = system.ticker(use_lease=False).tick()
    assert report.dispatched.sent == 0
    assert system.receive_all() == []
    assert system.service.get_job("tenant-a", view.job.schedule_id).state == "cancelled"


def test_update_never_fires_the_old_versions_pending_occurrence(system: System) -> None:
    # GIVEN v1 materialized three fires ahead
    item = create(system)
    system.clock.advance(55)
    system.ticker(use_lease=False).tick()
    # WHEN the schedule is updated (v2) and the v1 messages arrive
    updated = system.service.update(
        "tenant-a", item.schedule_id, ScheduleDraft(spec="rate(2 minutes)", target=TARGET)
    )
    assert updated.version == 2
    tk = system.ticker(use_lease=False)
    for _ in range(6 * 60):
        tk.tick()
        system.clock.advance(1)
    outcomes: Counter[tuple[int, claims.Outcome]] = Counter()
    for body in system.receive_all():
        result = system.claim(body)
        outcomes[(body["version"], result.outcome)] += 1
    # THEN every v1 fire had been skipped as stale by the update, and v2's were claimed
    assert outcomes[(1, claims.Outcome.FINISHED)] == 3
    assert outcomes[(1, claims.Outcome.CLAIMED)] == 0
    assert outcomes[(2, claims.Outcome.CLAIMED)] >= 1


# --- clock jumps -------------------------------------------------------------------------


def test_clock_set_back_five_minutes_fires_nothing_twice(system: System) -> None:
    made = [create(system) for _ in range(5)]
    tk = system.ticker(use_lease=False)
    sent: Counter[str] = Counter()
    for _ in range(10 * 60):
        sent.update(tk.tick().dispatched.keys)
        system.clock.advance(1)
    # WHEN the wall clock steps back five minutes and ticking goes on for ten
    system.clock.set_wall(system.clock.now() - 5 * MINUTE)
    for _ in range(10 * 60):
        sent.update(tk.tick().dispatched.keys)
        system.clock.advance(1)
    # THEN no occurrence was sent twice, and every key has one row
    assert sent and max(sent.values()) == 1
    assert all(Counter(o.key for o in rows(system, i)).most_common(1)[0][1] == 1 for i in made)


def test_clock_set_forward_five_minutes_follows_the_misfire_policy(system: System) -> None:
    catch_up = create(
        system, misfire=policies.Misfire(policy=policies.MisfirePolicy.FIRE_ALL, catch_up_max=100)
    )
    skip = create(system, misfire=policies.Misfire(policy=policies.MisfirePolicy.SKIP))
    tk = system.ticker(use_lease=False, horizon_seconds=10)
    for _ in range(3 * 60):
        tk.tick()
        system.clock.advance(1)
    # WHEN the wall clock jumps five minutes forward
    system.clock.set_wall(system.clock.now() + 5 * MINUTE)
    for _ in range(2 * 60):
        tk.tick()
        system.clock.advance(1)
    end = system.clock.now()
    expected = set(schedule.fires(catch_up.timing, START, until=end))
    # THEN the catch-up schedule has a queued row for every minute, missed ones included
    caught = {o.fire_time: o.state for o in rows(system, catch_up)}
    assert expected <= set(caught) and {caught[f] for f in expected} == {occurrence.State.QUEUED}
    # AND the skipping schedule recorded each missed minute as skipped, none dropped
    skipped = {o.fire_time: o for o in rows(system, skip)}
    assert expected <= set(skipped)
    missed = sorted(f for f in expected if skipped[f].state is occurrence.State.SKIPPED)
    # 12:04-12:06 were more than the 60 s grace late when the clock landed on 12:08
    assert missed == [START + n * MINUTE for n in (4, 5, 6)]
    assert all(skipped[f].exit_reason == "skipped: misfire" for f in missed)


# --- metrics -----------------------------------------------------------------------------


def test_ticker_emits_lag_and_backlog(system: System) -> None:
    create(system)
    system.clock.advance(60 + 7)  # the first fire is 7 s late
    system.ticker(use_lease=False).tick()
    assert system.metrics.values("ScheduleLag")[0] == 7_000
    assert system.metrics.values("Backlog") == [1]
    assert system.metrics.total("Fired") >= 1


def _job(**fields: Any) -> Any:
    from fireline.services.schedules import JobDraft

    return JobDraft(target=TARGET, **fields)


def test_one_unreadable_schedule_does_not_stop_the_others(system: System) -> None:
    # GIVEN a good schedule and, beside it, an item no code can read (a corrupt spec)
    good = create(system)
    bad = dynamodb.schedule_to_item(good, model.DEFAULT_SHARDS)
    bad.update(schedule_id="sch_corrupt", spec="cron(61 * * * *)")
    system.ddb.put_item(TableName=system.stack.tables["SchedulesTable"], Item=dynamodb._encode(bad))
    system.clock.advance(55)
    # WHEN the ticker ticks
    report = system.ticker(use_lease=False).tick()
    # THEN the good schedule fired and the bad one was left out
    assert {o.schedule_id for o in rows(system, good)} == {good.schedule_id}
    assert report.dispatched.created == 3
    assert report.stale == 1
