"""The ticker on moto: the due index, races, leases, clock jumps and cost per fire."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from fireline.adapters import dynamodb, schedules_dynamodb, threads
from fireline.domain import model, occurrence, policies, schedule
from fireline.services import claims, ticker, worker
from fireline.services.schedules import ScheduleDraft
from helpers.faults import ThenAfterSend
from helpers.stale import FrozenReads
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
        for e in system.schedules.due(shard, until=START + timedelta(days=3650), limit=1000).items
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
        items.append(schedules_dynamodb.schedule_to_item(item, model.DEFAULT_SHARDS))
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
    assert report.dispatched.sent == 50
    # AND wrote no occurrence row: the message is the hand-off, the claim writes the row
    assert system.log.writes[system.stack.tables["OccurrencesTable"]] == 0


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
    tickers = [
        system.ticker(name, use_lease=False, lookahead_seconds=10, horizon_seconds=180)
        for name in ("a", "b")
    ]
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
    # AND each schedule moved forward exactly once, past its three fires
    assert a.advanced + b.advanced == 30
    assert a.conflicts + b.conflicts == 30
    for item in made:
        assert system.schedules.get("tenant-a", item.schedule_id).next_fire == START + 4 * MINUTE
    # AND each of the 90 fires was sent by both: the race repeats messages, never loses one
    fires = {
        occurrence.occurrence_key(i.schedule_id, 1, START + n * MINUTE)
        for i in made
        for n in (1, 2, 3)
    }
    assert set(system.log.sent) == fires and set(system.log.sent.values()) == {2}
    # WHEN every delivery is claimed, as the workers would
    system.clock.advance(200)
    outcomes = Counter(system.claim(body).outcome for body in system.receive_all())
    # THEN each fire has one row and was claimed once; each repeat found it taken
    per_key = Counter(o.key for item in made for o in rows(system, item))
    assert set(per_key) == fires and set(per_key.values()) == {1}
    assert outcomes == {claims.Outcome.CLAIMED: 90, claims.Outcome.BUSY: 90}


# --- leases ------------------------------------------------------------------------------


def test_ticker_whose_renewal_fails_stops_and_writes_nothing_more(system: System) -> None:
    # GIVEN ticker A holds the lease and is ticking over schedules due every 10 s
    for _ in range(5):
        create(system, "rate(10 seconds)")
    tk = system.ticker("ticker-a", lookahead_seconds=10, horizon_seconds=10, stop_before_end_ms=0)
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
    print(
        f"\nrenewal failed: stopped {report.stopped!r}; after the takeover 0 occurrence "
        "writes, 0 schedule writes, 0 messages"
    )


def test_stale_ticker_cannot_duplicate_move_backwards_or_lose_a_fire(system: System) -> None:
    # GIVEN 10 schedules every minute, and a stale ticker that read the due set at T...
    made = [create(system) for _ in range(10)]
    system.clock.advance(55)
    config = {"lookahead_seconds": 10, "horizon_seconds": 180}
    stale = system.ticker("stale", use_lease=False, **config)
    stale.schedules = FrozenReads(system.schedules, system.clock.now() + timedelta(seconds=10))
    # ...while the new leader ticked at T and again a few minutes on
    leader = system.ticker("leader", use_lease=False, **config)
    leader.tick()
    system.clock.advance(180)
    leader.tick()
    after_leader = {
        i.schedule_id: system.schedules.get("tenant-a", i.schedule_id).next_fire for i in made
    }
    sent_by_leader = set(system.log.sent)
    # WHEN the stale ticker finally acts on its old view (its fires three minutes late:
    # the misfire policy would skip two of them)
    report = stale.tick()
    # THEN every advance was refused and nothing moved backwards
    assert report.conflicts == 10 and report.advanced == 0
    assert {
        i.schedule_id: system.schedules.get("tenant-a", i.schedule_id).next_fire for i in made
    } == after_leader
    # AND it marked nothing skipped (skips are written only after an advance succeeds), so
    # a fire the leader sent is never overruled; its messages only repeat the leader's
    assert report.dispatched.skipped == 0
    assert all(not rows(system, i) for i in made)
    assert set(report.dispatched.keys) <= sent_by_leader
    # AND no fire is lost: every minute up to the last materialized one was sent
    for item in made:
        fires = sorted(
            parsed.fire_time
            for parsed in map(occurrence.parse_key, sent_by_leader)
            if parsed.schedule_id == item.schedule_id
        )
        assert fires == [START + n * MINUTE for n in range(1, 7)]
    # AND the repeats converge at the claim: one row and one run per fire
    system.clock.advance(600)
    outcomes = Counter(system.claim(body).outcome for body in system.receive_all())
    assert outcomes[claims.Outcome.CLAIMED] == 60
    assert all(len(rows(system, i)) == 6 for i in made)
    print(
        f"\nstale ticker: {report.conflicts} advances refused, 0 moved back, "
        f"{outcomes[claims.Outcome.CLAIMED]} fires claimed once each"
    )


class Crash(BaseException):
    """The ticker's process dies: no release, no goodbye (nothing after it runs)."""


def test_second_ticker_takes_over_within_ttl_plus_one_tick_and_loses_nothing(
    system: System,
) -> None:
    # GIVEN ticker A holds the lease, renewing it, for 20 s, then its process dies
    made = [create(system, "rate(5 seconds)") for _ in range(5)]
    a = system.ticker("ticker-a", lookahead_seconds=10, horizon_seconds=10, stop_before_end_ms=0)
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
    b = system.ticker("ticker-b", lookahead_seconds=10, horizon_seconds=10, stop_before_end_ms=0)
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
    # AND after B runs a minute, every 5-second fire since the start was sent
    run(b, system, 60)
    now = system.clock.now()
    for item in made:
        expected = {
            occurrence.occurrence_key(item.schedule_id, item.version, f)
            for f in schedule.fires(item.timing, START, until=now)
        }
        assert expected <= set(system.log.sent)
    print(
        f"\ntakeover {(took_over_at_ms - expires_at_ms) / 1000:+.1f} s from the lease's expiry "
        f"(TTL {terms.ttl_ms / 1000:.0f} s), token {report.token}, "
        f"{len(set(system.log.sent))} fires sent, none lost"
    )


# --- pause, resume, cancel, update ---------------------------------------------------------


def test_pause_removes_from_index_and_resume_applies_the_misfire_policy(system: System) -> None:
    # GIVEN a schedule every minute that skips missed fires, materialized a quarter hour
    # ahead (the ticker's horizon)
    item = create(system, misfire=policies.Misfire(policy=policies.MisfirePolicy.SKIP))
    system.clock.advance(55)
    system.ticker(use_lease=False).tick()
    assert len(system.log.sent) == 15
    # WHEN it is paused
    paused = system.service.pause("tenant-a", item.schedule_id)
    # THEN it left the due index (the raw item has neither index attribute)
    raw = system.ddb.get_item(
        TableName=system.stack.tables["SchedulesTable"],
        Key={
            "tenant_id": {"S": model.tenant_key("tenant-a", item.schedule_id)},
            "schedule_id": {"S": item.schedule_id},
        },
    )["Item"]
    assert "next_fire_ms" not in raw and "due_shard" not in raw
    assert not in_index(system, item.schedule_id)
    # AND every fire materialized before the pause does nothing when its message arrives
    system.clock.advance(900)
    ahead = system.receive_all()
    assert len(ahead) == 15
    outcomes = [system.claim(body) for body in ahead]
    assert {c.outcome for c in outcomes} == {claims.Outcome.SKIPPED}
    assert {c.reason for c in outcomes} == {"schedule paused"}
    # WHEN resumed a while later
    system.clock.advance(600)
    resumed = system.service.resume("tenant-a", item.schedule_id)
    # THEN it is back in the index at the first fire after the pause...
    assert in_index(system, item.schedule_id)
    assert resumed.next_fire == schedule.next_fire(item.timing, paused.paused_at)
    # ...and the ticker records the fires missed while paused as skipped, then goes on
    system.log.reset()
    system.ticker(use_lease=False).tick()
    latest = [o for o in rows(system, item) if o.version == resumed.version]
    missed = sorted(o.fire_time for o in latest if o.state is occurrence.State.SKIPPED)
    cutoff = system.clock.now() - timedelta(seconds=60)
    assert missed == list(schedule.fires(item.timing, paused.paused_at, until=cutoff))
    assert all(o.exit_reason == "skipped: misfire" for o in latest)
    sent = sorted(occurrence.parse_key(k).fire_time for k in system.log.sent)
    assert sent and min(sent) > cutoff


def test_skipped_fires_record_costs_one_write_unit_per_advance_that_skips(
    system: System,
) -> None:
    # GIVEN a per-second schedule that skips missed fires, resumed after 3 minutes paused
    skip = policies.Misfire(policy=policies.MisfirePolicy.SKIP, grace_seconds=5)
    item = create(system, "cron(* * * * * *)", misfire=skip)
    system.service.pause("tenant-a", item.schedule_id)
    system.clock.advance(180)
    system.service.resume("tenant-a", item.schedule_id)
    system.log.reset()
    # WHEN one tick picks it up: 174 fires missed past the 5 s grace
    report = system.ticker(use_lease=False).tick()
    # THEN the advance held the range in its own write (one unit, the two index units of
    # its next fire moving), the rows cost a unit each (100 fires one by one and a summary
    # of the 74 before them), and dropping the range once they were in cost one unit
    # more and no index unit: the record's whole price is that one unit
    schedules_table = system.stack.tables["SchedulesTable"]
    occurrences_table = system.stack.tables["OccurrencesTable"]
    assert report.dispatched.skipped == 101
    assert system.log.requests["UpdateItem"] == 2
    assert system.log.write_units_by[f"UpdateItem {schedules_table}"] == 2.0
    assert system.log.index_write_units == 2.0
    assert system.log.write_units_by[f"PutItem {occurrences_table}"] == 101.0
    held = system.schedules.get("tenant-a", item.schedule_id)
    assert held is not None and held.skipped is None
    print(
        f"\n174 fires skipped: {system.log.write_units:.0f} write units "
        f"(101 rows, the advance, 1 to drop the held range), "
        f"{system.log.index_write_units:.0f} index units"
    )


def test_resume_with_fire_once_runs_the_latest_missed_fire_once(system: System) -> None:
    item = create(system, misfire=policies.Misfire(policy=policies.MisfirePolicy.FIRE_ONCE))
    system.service.pause("tenant-a", item.schedule_id)
    system.clock.advance(30 * 60)
    system.service.resume("tenant-a", item.schedule_id)
    system.ticker(use_lease=False).tick()
    fired_late = [
        f for f in (occurrence.parse_key(k).fire_time for k in system.log.sent)
        if f < system.clock.now() - MINUTE
    ]  # fmt: skip
    assert len(fired_late) == 1
    # the latest fire older than the 60 s grace; the one inside it fires as usual
    assert fired_late[0] == START + 28 * MINUTE


def test_cancelled_queued_job_message_is_a_no_op(system: System) -> None:
    # GIVEN a one-off job due in 30 s, its message sent by its create (delayed)
    view = system.service.create_job("tenant-a", _job(delay_seconds=30))
    system.clock.advance(25)
    system.ticker(use_lease=False).tick()
    assert list(system.log.sent) == [
        occurrence.occurrence_key(view.job.schedule_id, view.job.version, view.fire_time)
    ]
    assert system.service.get_job("tenant-a", view.job.schedule_id).state == "scheduled"
    # WHEN the job is cancelled before the message arrives
    cancelled = system.service.cancel_job("tenant-a", view.job.schedule_id)
    assert cancelled.state == "cancelled"
    system.clock.advance(10)
    (body,) = system.receive_all()
    claimed = system.claim(body)
    # THEN the message is a no-op: nothing claimed, the row stays cancelled, 0 attempts
    assert claimed.outcome is claims.Outcome.FINISHED
    after = system.service.get_job("tenant-a", view.job.schedule_id)
    assert after.state == "cancelled"
    assert after.occurrence is not None and after.occurrence.attempts == 0
    print(f"\ncancelled queued job: delivery {claimed.outcome.value}, 0 attempts")


def test_a_job_cancelled_between_the_tickers_send_and_its_advance_never_runs(
    system: System,
) -> None:
    # GIVEN a job waiting in the due index
    view = system.service.create_job("tenant-a", _job(delay_seconds=1200))
    job_id = view.job.schedule_id
    system.clock.advance(1200)
    cancelled: list[str] = []
    # WHEN the ticker sends its fire, and the tenant cancels the job before the ticker's
    # advance (the cancel reads it still in the due index, no row written)
    tk = system.ticker(use_lease=False)
    tk.queue = ThenAfterSend(
        system.queue,
        lambda: cancelled.append(system.service.cancel_job("tenant-a", job_id).state),
    )
    report = tk.tick()
    assert report.dispatched.sent == 1
    # THEN the cancel answers cancelled, the job left the due index, the advance failed
    assert cancelled == ["cancelled"]
    assert not in_index(system, job_id)
    assert report.conflicts == 1
    # AND the fire's delivery finds the cancel's row: nothing runs, no attempt is made
    ran: list[object] = []
    system.registry.register("noop")(ran.append)
    [message] = system.receive()
    with threads.ThreadPool(1) as pool:
        results = system.worker(tenant_limit=0).handle_batch(
            [message.body],
            remaining_ms=lambda: 60_000,
            parallel=pool,
            receive_counts=[message.receive_count],
        )
    assert results == [worker.Result.SETTLED]
    assert ran == []
    after = system.service.get_job("tenant-a", job_id)
    assert after.state == "cancelled"
    assert after.occurrence is not None and after.occurrence.attempts == 0


def test_job_cancelled_before_materialization_never_fires(system: System) -> None:
    # GIVEN a job due later than its create sends it (it waits in the due index)
    view = system.service.create_job("tenant-a", _job(delay_seconds=1200))
    assert in_index(system, view.job.schedule_id)
    system.service.cancel_job("tenant-a", view.job.schedule_id)
    assert not in_index(system, view.job.schedule_id)
    system.clock.advance(1260)
    report = system.ticker(use_lease=False).tick()
    assert report.dispatched.sent == 0
    assert system.receive_all() == []
    assert system.service.get_job("tenant-a", view.job.schedule_id).state == "cancelled"


def test_update_never_fires_the_old_versions_pending_occurrence(system: System) -> None:
    # GIVEN v1 materialized its fires a quarter hour ahead
    item = create(system)
    system.clock.advance(55)
    system.ticker(use_lease=False).tick()
    v1_sent = len(system.log.sent)
    assert v1_sent == 15
    # WHEN the schedule is updated (v2) and the v1 messages arrive
    updated = system.service.update(
        "tenant-a", item.schedule_id, ScheduleDraft(spec="rate(2 minutes)", target=TARGET)
    )
    assert updated.version == 2
    tk = system.ticker(use_lease=False)
    for _ in range(6 * 60):
        tk.tick()
        system.clock.advance(1)
    system.clock.advance(900)
    outcomes: Counter[tuple[int, claims.Outcome]] = Counter()
    for body in system.receive_all():
        result = system.claim(body)
        outcomes[(body["version"], result.outcome)] += 1
    # THEN every v1 fire was skipped as stale and v2's fires were claimed
    assert outcomes[(1, claims.Outcome.SKIPPED)] == v1_sent
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
    # THEN no occurrence was sent twice, and no fire was left out
    assert sent and max(sent.values()) == 1
    print(f"\nclock back 5 min: {len(sent)} fires sent, at most {max(sent.values())} each")
    last = max(occurrence.parse_key(k).fire_time for k in sent)
    for item in made:
        expected = {
            occurrence.occurrence_key(item.schedule_id, item.version, f)
            for f in schedule.fires(item.timing, START, until=last)
        }
        assert expected <= set(sent)


def test_clock_set_forward_five_minutes_follows_the_misfire_policy(system: System) -> None:
    catch_up = create(
        system, misfire=policies.Misfire(policy=policies.MisfirePolicy.FIRE_ALL, catch_up_max=100)
    )
    skip = create(system, misfire=policies.Misfire(policy=policies.MisfirePolicy.SKIP))
    # A short lookahead, so the jump lands past fires not yet materialized.
    tk = system.ticker(use_lease=False, lookahead_seconds=10, horizon_seconds=10)
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
    # THEN the catch-up schedule sent every minute, missed ones included
    sent = {occurrence.parse_key(k) for k in system.log.sent}
    caught = {k.fire_time for k in sent if k.schedule_id == catch_up.schedule_id}
    assert expected <= caught
    # AND the skipping schedule recorded each missed minute as skipped and sent the rest
    skipped = {o.fire_time: o for o in rows(system, skip) if o.state is occurrence.State.SKIPPED}
    fired = {k.fire_time for k in sent if k.schedule_id == skip.schedule_id}
    # 12:04-12:06 were more than the 60 s grace late when the clock landed on 12:08
    assert sorted(skipped) == [START + n * MINUTE for n in (4, 5, 6)]
    assert all(o.exit_reason == "skipped: misfire" for o in skipped.values())
    assert expected == fired | set(skipped)
    print(
        f"\nclock forward 5 min: fire_all sent {len(caught)} of {len(expected)}, "
        f"skip sent {len(fired)} and recorded {len(skipped)} skipped"
    )


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
    bad = schedules_dynamodb.schedule_to_item(good, model.DEFAULT_SHARDS)
    bad.update(schedule_id="sch_corrupt", spec="cron(61 * * * *)")
    system.ddb.put_item(TableName=system.stack.tables["SchedulesTable"], Item=dynamodb._encode(bad))
    system.clock.advance(55)
    # WHEN the ticker ticks
    report = system.ticker(use_lease=False).tick()
    # THEN the good schedule fired (a quarter hour of fires) and the bad one was left out
    assert {occurrence.parse_key(k).schedule_id for k in system.log.sent} == {good.schedule_id}
    assert report.dispatched.sent == 15
    assert report.stale == 1
