"""Fires a misfire plan skips keep their record whatever happens to the tick between the
advance that moves the schedule past them and their rows: the advance itself holds them
(the range on the schedule), the rows follow, and the history shows them either way."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from fireline.adapters import memory
from fireline.domain import occurrence, policies, schedule
from fireline.services import schedules, ticker
from helpers.memory_system import MemorySystem

TARGET = {"type": "python", "handler": "noop"}
SKIP = policies.Misfire(policy=policies.MisfirePolicy.SKIP, grace_seconds=5)
EVERY_SECOND = "cron(* * * * * *)"


class Crash(BaseException):
    """The tick's process dies: nothing after it runs."""


class SlowAdvance:
    """The schedule store, each advance taking ``seconds`` of the fake clock (the write
    lands; its answer comes back that much later), or dying once it landed."""

    def __init__(self, store: memory.MemoryScheduleStore, clock: memory.FakeClock) -> None:
        self._store = store
        self._clock = clock
        self.seconds = 0.0
        self.crash = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def advance(self, *args: Any, **kwargs: Any) -> bool:
        moved = self._store.advance(*args, **kwargs)
        self._clock.advance(self.seconds)
        if self.crash:
            raise Crash
        return moved


def leased_ticker(system: MemorySystem, store: Any, leases: memory.MemoryLeaseStore) -> Any:
    return ticker.Ticker(
        schedules=store,
        occurrences=system.occurrences,
        queue=system.queue,
        leases=leases,
        clock=system.clock,
        owner="invocation",
        config=ticker.TickerConfig(stop_before_end_ms=0),
    )


def one_tick(tk: ticker.Ticker, system: MemorySystem) -> ticker.RunReport:
    """An invocation with room for one tick."""
    end = system.clock.monotonic() + 1.5
    return tk.run(lambda: int((end - system.clock.monotonic()) * 1000))


def resumed_after(system: MemorySystem, minutes: int) -> Any:
    """A per-second schedule that skips missed fires, paused at NOW and resumed later."""
    made = system.service.create(
        "tenant-a", schedules.ScheduleDraft(spec=EVERY_SECOND, target=TARGET, misfire=SKIP)
    )
    system.service.pause("tenant-a", made.schedule_id)
    system.clock.advance(minutes * 60)
    return system.service.resume("tenant-a", made.schedule_id)


def missed_fires(item: Any, now: datetime) -> list[datetime]:
    """Every fire from the resumed next fire that is past the grace at ``now``."""
    cutoff = now - timedelta(seconds=SKIP.grace_seconds)
    fires = list(
        schedule.fires(item.timing, item.next_fire - timedelta(microseconds=1), until=cutoff)
    )
    return [f for f in fires if f < cutoff]


def skipped_in_history(system: MemorySystem, item: Any) -> set[datetime]:
    """The fires the history API lists as skipped, each summary row opened into the fires
    it counts."""
    found: set[datetime] = set()
    cursor = None
    while True:
        page = system.service.history("tenant-a", item.schedule_id, limit=100, cursor=cursor)
        for row in page.items:
            if row.state is occurrence.State.SKIPPED:
                found.update(_fires_of(item, row))
        cursor = page.cursor
        if cursor is None:
            return found


def _fires_of(item: Any, row: occurrence.Occurrence) -> list[datetime]:
    if row.skipped_last is None:
        return [row.fire_time]
    return list(
        schedule.fires(
            item.timing, row.fire_time - timedelta(microseconds=1), until=row.skipped_last
        )
    )


def rows_of(system: MemorySystem, item: Any) -> list[occurrence.Occurrence]:
    return system.occurrences.history("tenant-a", item.schedule_id, limit=1_000).items


@pytest.mark.parametrize("fault", ["lease_ends", "killed"])
def test_skipped_fires_keep_their_record_when_the_tick_ends_right_after_the_advance(
    fault: str,
) -> None:
    # GIVEN a per-second schedule with misfire skip, resumed after 3 minutes paused
    system = MemorySystem()
    store = SlowAdvance(system.schedules, system.clock)
    leases = memory.MemoryLeaseStore()
    item = resumed_after(system, 3)
    missed = missed_fires(item, system.clock.now())
    assert len(missed) == 174
    # WHEN the tick that picks it up ends between its advance and the skip rows: the
    # advance's answer takes 9 s under a lease trusted for 8 s, or the process dies
    ticked_at = system.clock.now()
    if fault == "lease_ends":
        store.seconds = 9
        report = one_tick(leased_ticker(system, store, leases), system)
        assert report.stopped == "lease_lost"
    else:
        store.crash = True
        with pytest.raises(Crash):
            one_tick(leased_ticker(system, store, leases), system)
    # THEN the schedule moved past those fires, and not one of them is without a record:
    # the advance held them on the schedule, and the history shows them all skipped
    after = system.schedules.get("tenant-a", item.schedule_id)
    assert after is not None and after.next_fire > missed[-1]
    assert after.skipped == policies.SkippedRange(
        item.version, missed[0], missed[-1], 174, at=ticked_at
    )
    assert rows_of(system, item) == []
    assert skipped_in_history(system, item) == set(missed)
    # WHEN the next pickup of the schedule comes (a pickup sends at most 60 fires ahead,
    # so the next invocation's first tick picks it up again)
    store.seconds, store.crash = 0, False
    system.clock.advance(2)
    one_tick(leased_ticker(system, store, memory.MemoryLeaseStore()), system)
    # THEN the range's rows were written before it moved on, and it holds nothing more
    after = system.schedules.get("tenant-a", item.schedule_id)
    assert after is not None and after.skipped is None
    assert skipped_in_history(system, item) == set(missed)
    assert all(r.state is occurrence.State.SKIPPED for r in rows_of(system, item))
    print(
        f"\ntick {'past its lease' if fault == 'lease_ends' else 'killed'} after the advance: "
        f"{len(missed)} fires skipped, {len(skipped_in_history(system, item))} in the history"
    )


def test_skipped_fires_rows_follow_the_advance_and_the_range_is_dropped() -> None:
    # GIVEN the same resumed schedule and a tick that nothing interrupts
    system = MemorySystem()
    item = resumed_after(system, 3)
    missed = missed_fires(item, system.clock.now())
    # WHEN it is picked up
    report = one_tick(leased_ticker(system, system.schedules, memory.MemoryLeaseStore()), system)
    # THEN the rows are written (the latest 100 one by one, the 74 before in a summary)
    # and the schedule holds no range any longer
    assert report.totals.dispatched.skipped == 101
    after = system.schedules.get("tenant-a", item.schedule_id)
    assert after is not None and after.skipped is None
    assert skipped_in_history(system, item) == set(missed)


def test_the_history_answers_for_a_fire_counted_in_a_summary_row() -> None:
    # GIVEN the resumed schedule's 174 skipped fires recorded: 74 in a summary row keyed
    # by the first of them, the latest 100 one by one
    system = MemorySystem()
    item = resumed_after(system, 3)
    missed = missed_fires(item, system.clock.now())
    one_tick(leased_ticker(system, system.schedules, memory.MemoryLeaseStore()), system)
    # WHEN the history is asked what happened to a fire inside the summary's range, and to
    # one recorded on its own
    inside, alone = missed[40], missed[-1]
    second = timedelta(seconds=1)
    found_inside = system.service.history(
        "tenant-a", item.schedule_id, since=inside, until=inside + second
    ).items
    found_alone = system.service.history(
        "tenant-a", item.schedule_id, since=alone, until=alone + second
    ).items
    # THEN each answer is the row that counts that fire, skipped
    (summary,) = found_inside
    assert summary.state is occurrence.State.SKIPPED and summary.covers(inside)
    assert (summary.fire_time, summary.skipped_last, summary.skipped_count) == (
        missed[0],
        missed[73],
        74,
    )
    (own,) = found_alone
    assert own.fire_time == alone and own.skipped_last is None
    # AND a listing filtered to another state leaves the summary out
    assert (
        system.service.history(
            "tenant-a", item.schedule_id, since=inside, until=inside + second, state="succeeded"
        ).items
        == []
    )


def test_a_held_range_outlives_an_update_and_is_written_by_a_delete() -> None:
    # GIVEN a tick that died right after the advance that moved past 174 skipped fires
    system = MemorySystem()
    store = SlowAdvance(system.schedules, system.clock)
    item = resumed_after(system, 3)
    missed = missed_fires(item, system.clock.now())
    ticked_at = system.clock.now()
    store.crash = True
    with pytest.raises(Crash):
        one_tick(leased_ticker(system, store, memory.MemoryLeaseStore()), system)
    # WHEN the schedule is updated (a new version)
    updated = system.service.update(
        "tenant-a",
        item.schedule_id,
        schedules.ScheduleDraft(spec=EVERY_SECOND, target=TARGET, misfire=SKIP, payload={"v": 2}),
    )
    # THEN the new version still holds the old version's range, shown by the history
    assert updated.skipped == policies.SkippedRange(
        item.version, missed[0], missed[-1], 174, at=ticked_at
    )
    assert skipped_in_history(system, item) == set(missed)
    # WHEN it is deleted
    system.service.delete("tenant-a", item.schedule_id)
    # THEN the range's record was written first: one summary row for the 174 fires
    (row,) = rows_of(system, item)
    assert row.state is occurrence.State.SKIPPED and row.version == item.version
    assert (row.fire_time, row.skipped_last, row.skipped_count) == (missed[0], missed[-1], 174)


def minutely_behind(system: MemorySystem) -> Any:
    """A minutely schedule that skips missed fires, whose ticker has been down since it
    was created: at 12:03:30, its fires of 12:01, 12:02 and 12:03 were due and not sent."""
    made = system.service.create(
        "tenant-a",
        schedules.ScheduleDraft(
            spec="cron(0 * * * * *)",
            target=TARGET,
            misfire=policies.Misfire(policy=policies.MisfirePolicy.SKIP, grace_seconds=5),
        ),
    )
    system.clock.advance(3 * 60 + 30)
    return made


def test_a_pause_while_the_ticker_is_behind_keeps_the_fires_it_had_not_sent() -> None:
    # GIVEN a schedule with three fires due and unsent
    system = MemorySystem()
    item = minutely_behind(system)
    start = item.next_fire
    # WHEN it is paused, resumed at 12:10:30, and the ticker (back) picks it up
    system.service.pause("tenant-a", item.schedule_id)
    system.clock.advance(7 * 60)
    resumed = system.service.resume("tenant-a", item.schedule_id)
    one_tick(leased_ticker(system, system.schedules, memory.MemoryLeaseStore()), system)
    # THEN the misfire policy recorded every fire from the first unsent one: 12:01 to 12:10
    assert resumed.next_fire == start
    expected = {start + timedelta(minutes=n) for n in range(10)}
    assert skipped_in_history(system, item) == expected


def test_an_update_while_the_ticker_is_behind_records_the_old_versions_unsent_fires() -> None:
    # GIVEN a schedule with three fires due and unsent
    system = MemorySystem()
    item = minutely_behind(system)
    start = item.next_fire
    # WHEN it is updated (version 2 fires from 12:04 on)
    updated = system.service.update(
        "tenant-a",
        item.schedule_id,
        schedules.ScheduleDraft(spec="cron(0 * * * * *)", target=TARGET, payload={"v": 2}),
    )
    # THEN the update held version 1's three fires as skipped, voided by version 2, and
    # the history shows them
    assert updated.next_fire == start + timedelta(minutes=3)
    voided = policies.SkippedRange(
        1,
        start,
        start + timedelta(minutes=2),
        3,
        reason="skipped: voided by version 2",
        at=updated.updated_at,
    )
    assert updated.skipped == voided
    (row,) = system.service.history("tenant-a", item.schedule_id).items
    assert row.version == 1 and row.exit_reason is not None
    assert row.exit_reason.startswith("skipped: voided by version 2 (3 fires")
    # WHEN the ticker picks version 2 up
    one_tick(leased_ticker(system, system.schedules, memory.MemoryLeaseStore()), system)
    # THEN their row is written, the range is no longer held, and version 2 goes on
    after = system.schedules.get("tenant-a", item.schedule_id)
    assert after is not None and after.skipped is None
    (stored,) = rows_of(system, item)
    assert (stored.fire_time, stored.skipped_last, stored.skipped_count) == (
        start,
        start + timedelta(minutes=2),
        3,
    )


@pytest.mark.parametrize(
    ("policy", "paused_for", "held_count"),
    [
        # fire_once runs the latest missed fire and skips the 173 before it
        (policies.MisfirePolicy.FIRE_ONCE, 3 * 60, 173),
        # 3 hours of a per-second schedule is more than one plan may look at: the first
        # chunk of 5,000 is skipped, the schedule stays due for the next
        (policies.MisfirePolicy.SKIP, 3 * 60 * 60, policies.SCAN_LIMIT),
    ],
)
def test_a_killed_tick_loses_no_skipped_fire_of_a_catch_up_either(
    policy: policies.MisfirePolicy, paused_for: int, held_count: int
) -> None:
    # GIVEN a per-second schedule paused for a while and resumed, under that policy
    system = MemorySystem()
    made = system.service.create(
        "tenant-a",
        schedules.ScheduleDraft(
            spec=EVERY_SECOND,
            target=TARGET,
            misfire=policies.Misfire(policy=policy, grace_seconds=5),
        ),
    )
    system.service.pause("tenant-a", made.schedule_id)
    system.clock.advance(paused_for)
    item = system.service.resume("tenant-a", made.schedule_id)
    first = item.next_fire
    # WHEN the tick that picks it up dies right after its advance
    store = SlowAdvance(system.schedules, system.clock)
    store.crash = True
    with pytest.raises(Crash):
        one_tick(leased_ticker(system, store, memory.MemoryLeaseStore()), system)
    # THEN the schedule holds every fire it moved past unsent, and the history shows them
    after = system.schedules.get("tenant-a", item.schedule_id)
    assert after is not None and after.skipped is not None
    assert (after.skipped.first, after.skipped.count) == (first, held_count)
    expected = {first + timedelta(seconds=n) for n in range(held_count)}
    assert skipped_in_history(system, item) == expected


def test_an_update_of_a_paused_schedule_records_the_fires_its_pause_had_passed() -> None:
    # GIVEN a minutely schedule paused at 12:00:30 whose resume would have decided the
    # fires since then by its misfire policy
    system = MemorySystem()
    made = system.service.create(
        "tenant-a", schedules.ScheduleDraft(spec="cron(0 * * * * *)", target=TARGET)
    )
    system.clock.advance(30)
    system.service.pause("tenant-a", made.schedule_id)
    # WHEN it is updated at 12:05:30 (still paused: version 3 starts its pause over)
    system.clock.advance(5 * 60)
    updated = system.service.update(
        "tenant-a",
        made.schedule_id,
        schedules.ScheduleDraft(spec="cron(0 * * * * *)", target=TARGET, payload={"v": 3}),
    )
    # THEN version 2's five fires of the pause are held as skipped, voided by version 3
    first = made.next_fire
    assert first is not None
    assert updated.skipped == policies.SkippedRange(
        2,
        first,
        first + timedelta(minutes=4),
        5,
        reason="skipped: voided by version 3",
        at=updated.updated_at,
    )
    assert skipped_in_history(system, made) == {first + timedelta(minutes=n) for n in range(5)}


def test_held_fires_are_dated_when_they_were_skipped_even_after_the_clock_steps_back() -> None:
    # GIVEN a tick that died right after the advance that moved past 174 skipped fires
    system = MemorySystem()
    store = SlowAdvance(system.schedules, system.clock)
    item = resumed_after(system, 3)
    missed = missed_fires(item, system.clock.now())
    skipped_at = system.clock.now()
    store.crash = True
    with pytest.raises(Crash):
        one_tick(leased_ticker(system, store, memory.MemoryLeaseStore()), system)
    store.crash = False
    # WHEN the wall clock then steps back 5 minutes (an NTP step), and the ticker goes on
    # until the schedule comes due again and its range's rows are written
    system.clock.set_wall(system.clock.now() - timedelta(minutes=5))
    for _ in range(400):
        system.clock.advance(1)
        one_tick(leased_ticker(system, store, memory.MemoryLeaseStore()), system)
        after = system.schedules.get("tenant-a", item.schedule_id)
        if after is not None and after.skipped is None:
            break
    # THEN the row that records them is dated when they were skipped, more than their
    # grace after the last of them, not by the later pickup's clock (which read a time
    # before the first of them was even due)
    (row,) = [r for r in rows_of(system, item) if r.state is occurrence.State.SKIPPED]
    assert (row.fire_time, row.skipped_last, row.skipped_count) == (missed[0], missed[-1], 174)
    assert row.created_at == skipped_at
    assert row.created_at - missed[-1] > timedelta(seconds=SKIP.grace_seconds)
    print(
        f"\nclock stepped back 5 minutes: the row of {row.skipped_count} skipped fires dated "
        f"{row.created_at:%H:%M:%S}, {(row.created_at - missed[-1]).total_seconds():.0f} s "
        "after the last of them"
    )
    assert skipped_in_history(system, item) == set(missed)
