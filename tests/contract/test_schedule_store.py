"""ScheduleStore contract: conditional writes, pagination and the sparse due index."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from datetime import datetime

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from fireline import ports
from fireline.adapters import schedules_dynamodb
from fireline.domain import errors, model, policies
from helpers.aws import REGION, Stack, serialized_item_writes, unprocessed_keys

from .support import (
    MINUTE,
    OTHER_TENANT,
    SHARDS,
    START,
    TENANT,
    Backend,
    a_schedule,
    ids_in_shard,
)

LATER = START + 5 * MINUTE
# The store once its due index has seen every write so far (the index lags the table).
Settled = Callable[[ports.ScheduleStore], ports.ScheduleStore]


def due_ids(
    store: ports.ScheduleStore, shard: int, until: datetime, limit: int = 100
) -> list[tuple[str, datetime]]:
    return [(e.schedule_id, e.next_fire) for e in store.due(shard, until=until, limit=limit).items]


def walk(store: ports.ScheduleStore, tenant_id: str, limit: int) -> list[list[str]]:
    """Every page of a tenant's listing, following cursors to the end."""
    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        page = store.list(tenant_id, limit=limit, cursor=cursor)
        pages.append([s.schedule_id for s in page.items])
        cursor = page.cursor
        if cursor is None:
            return pages
        assert len(pages) < 1_000, "the cursor never reached the end"


# --- create / get -------------------------------------------------------------------------


def test_given_a_new_schedule_when_created_then_get_returns_it_whole(
    schedule_store: ports.ScheduleStore,
) -> None:
    # GIVEN
    item = a_schedule("nightly", description="the nightly report", jitter_seconds=5)
    # WHEN
    schedule_store.create(item)
    # THEN every field comes back
    assert schedule_store.get(TENANT, "nightly") == item


def test_given_no_such_schedule_then_get_returns_none(
    schedule_store: ports.ScheduleStore,
) -> None:
    schedule_store.create(a_schedule("nightly"))
    assert schedule_store.get(TENANT, "weekly") is None
    assert schedule_store.get(OTHER_TENANT, "nightly") is None


def test_given_an_existing_id_when_created_again_then_already_exists_and_the_first_stays(
    schedule_store: ports.ScheduleStore, settled: Settled
) -> None:
    # GIVEN
    first = a_schedule("nightly", description="first")
    schedule_store.create(first)
    # WHEN / THEN
    with pytest.raises(errors.AlreadyExists):
        schedule_store.create(a_schedule("nightly", description="second", next_fire=LATER))
    assert schedule_store.get(TENANT, "nightly") == first
    shard = first.shard(SHARDS)
    assert due_ids(settled(schedule_store), shard, LATER) == [("nightly", START)]


def test_given_two_tenants_then_the_same_id_names_two_schedules(
    schedule_store: ports.ScheduleStore,
) -> None:
    # GIVEN
    mine = a_schedule("nightly", description="mine")
    theirs = a_schedule("nightly", tenant_id=OTHER_TENANT, description="theirs")
    # WHEN
    schedule_store.create(mine)
    schedule_store.create(theirs)
    # THEN
    assert schedule_store.get(TENANT, "nightly") == mine
    assert schedule_store.get(OTHER_TENANT, "nightly") == theirs


def test_given_keys_when_fetched_together_then_the_existing_ones_come_back(
    schedule_store: ports.ScheduleStore,
) -> None:
    # GIVEN
    items = [a_schedule(f"s-{n}") for n in range(3)]
    for item in items:
        schedule_store.create(item)
    # WHEN asking for two of them, one twice, and two that do not exist
    keys = [
        (TENANT, "s-2"),
        (TENANT, "s-0"),
        (TENANT, "s-2"),
        (TENANT, "s-9"),
        (OTHER_TENANT, "s-1"),
    ]
    found = schedule_store.get_many(keys)
    # THEN each existing schedule once, in any order
    assert sorted(found, key=lambda s: s.schedule_id) == [items[0], items[2]]
    assert schedule_store.get_many([]) == []


@pytest.mark.parametrize("consistent", [True, False], ids=["consistent", "eventually"])
def test_given_more_keys_than_one_batch_when_fetched_together_then_each_existing_one_once(
    schedule_store: ports.ScheduleStore, consistent: bool
) -> None:
    # GIVEN 120 schedules of two tenants (more than one batch read of 100)
    items = [a_schedule(f"s-{n:03d}", tenant_id=(TENANT, OTHER_TENANT)[n % 2]) for n in range(120)]
    for item in items:
        schedule_store.create(item)
    # WHEN all are asked for, one twice, with one that does not exist and one whose id
    # is another tenant's
    keys = [(i.tenant_id, i.schedule_id) for i in items]
    keys += [keys[7], (TENANT, "s-999"), (TENANT, "s-001")]
    found = schedule_store.get_many(keys, consistent=consistent)
    # THEN each existing schedule comes back whole, once, and nothing else
    assert sorted(found, key=lambda s: s.schedule_id) == items


def test_given_a_throttled_table_when_fetched_together_then_unprocessed_keys_go_again() -> None:
    with mock_aws(), serialized_item_writes():
        # GIVEN 4 schedules on DynamoDB, whose next batch read leaves all but a key unread
        client = boto3.client("dynamodb", region_name=REGION)
        slept: list[float] = []
        table = Stack.create(prefix="unprocessed").tables["SchedulesTable"]
        store = schedules_dynamodb.DynamoScheduleStore(
            client, table, shards=SHARDS, sleep=slept.append
        )
        items = [a_schedule(f"s-{n}") for n in range(4)]
        for item in items:
            store.create(item)
        keys = [(i.tenant_id, i.schedule_id) for i in items]
        with unprocessed_keys(client, times=1) as asked:
            # WHEN read together
            found = store.get_many(keys, consistent=False)
        # THEN every schedule came back: the keys left over were asked again after a wait
        assert sorted(found, key=lambda s: s.schedule_id) == items
        assert asked == [4, 3] and slept == [0.05]
        # AND a table that never lets the keys through makes the read unavailable
        with unprocessed_keys(client, times=100, reads=0), pytest.raises(errors.Unavailable):
            store.get_many(keys)


# --- list ---------------------------------------------------------------------------------


@settings(
    max_examples=40,
    # `backend` only builds ports; each example makes its own empty store.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    deadline=None,
)
@given(
    ids=st.sets(st.from_regex(r"\A[a-z0-9-]{1,12}\Z"), max_size=25),
    limit=st.integers(min_value=1, max_value=7),
)
def test_given_any_schedules_when_listed_page_by_page_then_each_comes_once_in_id_order(
    backend: Backend, ids: set[str], limit: int
) -> None:
    # GIVEN a tenant's schedules, and another tenant's that must not show
    store = backend.schedule_store()
    for schedule_id in ids:
        store.create(a_schedule(schedule_id))
    store.create(a_schedule("zz-not-mine", tenant_id=OTHER_TENANT))
    # WHEN
    pages = walk(store, TENANT, limit)
    # THEN
    assert all(len(page) <= limit for page in pages)
    assert [i for page in pages for i in page] == sorted(ids)


def test_given_fewer_schedules_than_the_limit_then_one_page_with_no_cursor(
    schedule_store: ports.ScheduleStore,
) -> None:
    for n in range(3):
        schedule_store.create(a_schedule(f"s-{n}"))
    page = schedule_store.list(TENANT, limit=10)
    assert ([s.schedule_id for s in page.items], page.cursor) == (["s-0", "s-1", "s-2"], None)


def test_given_more_schedules_than_the_limit_then_a_full_page_and_a_cursor(
    schedule_store: ports.ScheduleStore,
) -> None:
    for n in range(5):
        schedule_store.create(a_schedule(f"s-{n}"))
    page = schedule_store.list(TENANT, limit=2)
    assert [s.schedule_id for s in page.items] == ["s-0", "s-1"]
    assert page.cursor is not None


# --- replace / delete ---------------------------------------------------------------------


def test_given_the_version_read_when_replaced_then_the_new_record_and_due_entry_are_stored(
    schedule_store: ports.ScheduleStore, settled: Settled
) -> None:
    # GIVEN
    item = a_schedule("nightly", version=3)
    schedule_store.create(item)
    # WHEN the spec changes and with it the next fire
    changed = dataclasses.replace(item, version=4, description="changed", next_fire=LATER)
    schedule_store.replace(changed, expected_version=3)
    # THEN the record is replaced, and the due index moved with it (no stale entry)
    assert schedule_store.get(TENANT, "nightly") == changed
    assert due_ids(settled(schedule_store), item.shard(SHARDS), LATER) == [("nightly", LATER)]


def test_given_another_version_when_replaced_then_conflict_and_nothing_changes(
    schedule_store: ports.ScheduleStore, settled: Settled
) -> None:
    # GIVEN the stored version is 3, but the caller read version 2
    item = a_schedule("nightly", version=3)
    schedule_store.create(item)
    stale = dataclasses.replace(item, version=3, description="lost update", next_fire=LATER)
    # WHEN / THEN
    with pytest.raises(errors.ConflictError):
        schedule_store.replace(stale, expected_version=2)
    assert schedule_store.get(TENANT, "nightly") == item
    assert due_ids(settled(schedule_store), item.shard(SHARDS), LATER) == [("nightly", START)]


def test_given_a_schedule_when_deleted_then_it_is_gone_from_get_list_and_due(
    schedule_store: ports.ScheduleStore, settled: Settled
) -> None:
    # GIVEN
    item = a_schedule("nightly")
    schedule_store.create(item)
    schedule_store.create(a_schedule("weekly"))
    # WHEN
    deleted = schedule_store.delete(TENANT, "nightly")
    # THEN
    assert deleted is True
    assert schedule_store.get(TENANT, "nightly") is None
    assert [s.schedule_id for s in schedule_store.list(TENANT, limit=10).items] == ["weekly"]
    assert ("nightly", START) not in due_ids(settled(schedule_store), item.shard(SHARDS), LATER)
    # AND deleting again reports there was nothing
    assert schedule_store.delete(TENANT, "nightly") is False


# --- due ----------------------------------------------------------------------------------


def test_given_schedules_in_several_shards_then_due_returns_this_shards_up_to_until_earliest_first(
    schedule_store: ports.ScheduleStore, settled: Settled
) -> None:
    # GIVEN five schedules in shard 3 at T+4, T+1, T+3, T+2 and T+9 min, and one elsewhere
    here = ids_in_shard(3, 5)
    for schedule_id, offset in zip(here, [4, 1, 3, 2, 9], strict=True):
        schedule_store.create(a_schedule(schedule_id, next_fire=START + offset * MINUTE))
    elsewhere = ids_in_shard(4, 1)[0]
    schedule_store.create(a_schedule(elsewhere, next_fire=START))
    # WHEN asking for everything due by T+4 min (inclusive)
    found = due_ids(settled(schedule_store), 3, START + 4 * MINUTE)
    # THEN
    assert found == [
        (here[1], START + 1 * MINUTE),
        (here[3], START + 2 * MINUTE),
        (here[2], START + 3 * MINUTE),
        (here[0], START + 4 * MINUTE),
    ]


def test_given_more_due_than_the_limit_then_the_earliest_are_returned(
    schedule_store: ports.ScheduleStore, settled: Settled
) -> None:
    ids = ids_in_shard(5, 6)
    for n, schedule_id in enumerate(ids):
        schedule_store.create(a_schedule(schedule_id, next_fire=START + (6 - n) * MINUTE))
    found = settled(schedule_store).due(5, until=LATER + 5 * MINUTE, limit=2)
    assert [(e.tenant_id, e.schedule_id, e.next_fire) for e in found.items] == [
        (TENANT, ids[5], START + 1 * MINUTE),
        (TENANT, ids[4], START + 2 * MINUTE),
    ]
    assert found.cursor is not None


def test_given_a_cursor_then_due_pages_continue_after_it_to_the_end(
    schedule_store: ports.ScheduleStore, settled: Settled
) -> None:
    # GIVEN seven due in one shard, three of them at the same instant, one past `until`
    ids = ids_in_shard(5, 8)
    fires = [1, 2, 2, 2, 3, 4, 5, 9]
    for schedule_id, minute in zip(ids, fires, strict=True):
        schedule_store.create(a_schedule(schedule_id, next_fire=START + minute * MINUTE))
    # WHEN read two at a time, following the cursor
    seen: list[tuple[str, datetime]] = []
    cursor: str | None = None
    for _ in range(10):
        page = settled(schedule_store).due(5, until=START + 5 * MINUTE, limit=2, cursor=cursor)
        seen += [(e.schedule_id, e.next_fire) for e in page.items]
        cursor = page.cursor
        if cursor is None:
            break
    # THEN each entry up to `until` comes once, earliest first, and the walk ends
    assert cursor is None
    assert sorted(seen, key=lambda s: s[1]) == seen
    assert sorted(seen) == sorted(
        (i, START + m * MINUTE) for i, m in zip(ids, fires, strict=True) if m <= 5
    )


def test_given_paused_schedules_then_they_are_not_due(
    schedule_store: ports.ScheduleStore, settled: Settled
) -> None:
    # GIVEN one created paused and one paused after creation
    created_paused, paused_later, active = ids_in_shard(7, 3)
    schedule_store.create(a_schedule(created_paused, next_fire=None))
    item = a_schedule(paused_later, version=1)
    schedule_store.create(item)
    schedule_store.create(a_schedule(active))
    # WHEN
    paused = dataclasses.replace(item.paused(START), version=2)
    schedule_store.replace(paused, expected_version=1)
    # THEN only the active one is due, and the paused one is still stored
    assert due_ids(settled(schedule_store), 7, LATER) == [(active, START)]
    assert schedule_store.get(TENANT, paused_later) == paused


# --- advance ------------------------------------------------------------------------------


def test_given_the_next_fire_read_when_advanced_then_it_moves_in_the_record_and_the_index(
    schedule_store: ports.ScheduleStore, settled: Settled
) -> None:
    # GIVEN
    item = a_schedule("nightly", version=2)
    schedule_store.create(item)
    # WHEN
    moved = schedule_store.advance(
        TENANT,
        "nightly",
        expected_next_fire=START,
        expected_version=2,
        next_fire=START + MINUTE,
        now=START,
    )
    # THEN
    assert moved is True
    assert schedule_store.get(TENANT, "nightly") == item.advanced(START + MINUTE, START)
    assert due_ids(settled(schedule_store), item.shard(SHARDS), LATER) == [
        ("nightly", START + MINUTE)
    ]


def test_given_skipped_fires_when_advanced_then_the_same_write_holds_them_until_cleared(
    schedule_store: ports.ScheduleStore,
) -> None:
    # GIVEN a schedule whose plan skips three fires (a misfire after an outage)
    item = a_schedule("nightly", version=2)
    schedule_store.create(item)
    skipped = policies.SkippedRange(2, START - 3 * MINUTE, START - MINUTE, 3, at=START)
    # WHEN it is advanced past them with the range (dated when they were skipped)
    moved = schedule_store.advance(
        TENANT,
        "nightly",
        expected_next_fire=START,
        expected_version=2,
        next_fire=START + MINUTE,
        now=START,
        skipped=skipped,
    )
    # THEN the item holds the range, as read back whole
    assert moved is True
    assert schedule_store.get(TENANT, "nightly") == item.advanced(START + MINUTE, START, skipped)
    # WHEN a clear names another range (a later advance's, or the same fires skipped at
    # another time), then the range it holds
    other = policies.SkippedRange(2, START, START, 1)
    undated = dataclasses.replace(skipped, at=None)
    assert schedule_store.clear_skipped(TENANT, "nightly", undated) is False
    refused = schedule_store.clear_skipped(TENANT, "nightly", other)
    cleared = schedule_store.clear_skipped(TENANT, "nightly", skipped)
    # THEN only the matching clear drops it, and nothing else on the item changes
    assert (refused, cleared) == (False, True)
    assert schedule_store.get(TENANT, "nightly") == item.advanced(START + MINUTE, START)
    assert schedule_store.clear_skipped(TENANT, "nightly", skipped) is False
    assert schedule_store.clear_skipped(TENANT, "missing", skipped) is False


def test_given_a_held_range_when_advanced_without_one_then_the_advance_drops_it(
    schedule_store: ports.ScheduleStore,
) -> None:
    # GIVEN a schedule holding a range of skipped fires
    item = a_schedule("nightly")
    schedule_store.create(item)
    skipped = policies.SkippedRange(1, START - MINUTE, START - MINUTE, 1)
    assert schedule_store.advance(
        TENANT,
        "nightly",
        expected_next_fire=START,
        expected_version=1,
        next_fire=START + MINUTE,
        now=START,
        skipped=skipped,
    )
    # WHEN the next advance skips nothing, and the one after completes it
    assert schedule_store.advance(
        TENANT,
        "nightly",
        expected_next_fire=START + MINUTE,
        expected_version=1,
        next_fire=START + 2 * MINUTE,
        now=START,
    )
    held = schedule_store.get(TENANT, "nightly")
    # THEN the item holds nothing more
    assert held is not None and held.skipped is None
    assert schedule_store.advance(
        TENANT,
        "nightly",
        expected_next_fire=START + 2 * MINUTE,
        expected_version=1,
        next_fire=None,
        now=START,
        skipped=skipped,
    )
    done = schedule_store.get(TENANT, "nightly")
    assert done is not None and done.state is model.ScheduleState.COMPLETED
    assert done.skipped == skipped


def test_given_a_stale_next_fire_when_advanced_then_false_and_nothing_moves_backwards(
    schedule_store: ports.ScheduleStore, settled: Settled
) -> None:
    # GIVEN ticker A read next fire T, then ticker B advanced it to T+1 min
    item = a_schedule("nightly")
    schedule_store.create(item)
    assert schedule_store.advance(
        TENANT,
        "nightly",
        expected_next_fire=START,
        expected_version=1,
        next_fire=START + MINUTE,
        now=START,
    )
    after_b = schedule_store.get(TENANT, "nightly")
    # WHEN ticker A, stale, advances from what it read
    moved = schedule_store.advance(
        TENANT,
        "nightly",
        expected_next_fire=START,
        expected_version=1,
        next_fire=START + MINUTE,
        now=START + MINUTE,
    )
    # THEN
    assert moved is False
    assert schedule_store.get(TENANT, "nightly") == after_b
    assert due_ids(settled(schedule_store), item.shard(SHARDS), LATER) == [
        ("nightly", START + MINUTE)
    ]


def test_given_a_new_version_with_the_same_next_fire_when_advanced_by_the_old_then_false(
    schedule_store: ports.ScheduleStore,
) -> None:
    # GIVEN a ticker read version 1; an update made version 2, keeping the next fire
    item = a_schedule("nightly", version=1)
    schedule_store.create(item)
    updated = dataclasses.replace(item, version=2, description="updated")
    schedule_store.replace(updated, expected_version=1)
    # WHEN the ticker advances what it read
    moved = schedule_store.advance(
        TENANT,
        "nightly",
        expected_next_fire=START,
        expected_version=1,
        next_fire=START + MINUTE,
        now=START,
    )
    # THEN version 2's fire at START is still to come
    assert moved is False
    assert schedule_store.get(TENANT, "nightly") == updated


def test_given_no_next_fire_when_advanced_then_the_schedule_completes_and_leaves_due(
    schedule_store: ports.ScheduleStore, settled: Settled
) -> None:
    # GIVEN a one-off job due at START
    job = a_schedule("once", kind=model.Kind.JOB)
    schedule_store.create(job)
    # WHEN
    moved = schedule_store.advance(
        TENANT, "once", expected_next_fire=START, expected_version=1, next_fire=None, now=START
    )
    # THEN
    assert moved is True
    stored = schedule_store.get(TENANT, "once")
    assert stored is not None
    assert (stored.state, stored.next_fire) == (model.ScheduleState.COMPLETED, None)
    assert due_ids(settled(schedule_store), job.shard(SHARDS), LATER) == []


@pytest.mark.parametrize("paused", [True, False], ids=["paused", "missing"])
def test_given_a_paused_or_missing_schedule_when_advanced_then_false_and_nothing_appears(
    schedule_store: ports.ScheduleStore, settled: Settled, paused: bool
) -> None:
    # GIVEN
    if paused:
        schedule_store.create(a_schedule("nightly", next_fire=None))
    before = schedule_store.get(TENANT, "nightly")
    # WHEN
    moved = schedule_store.advance(
        TENANT,
        "nightly",
        expected_next_fire=START,
        expected_version=1,
        next_fire=START + MINUTE,
        now=START,
    )
    # THEN
    assert moved is False
    assert schedule_store.get(TENANT, "nightly") == before
    assert due_ids(settled(schedule_store), model.due_shard("nightly", SHARDS), LATER) == []


def test_given_tickers_racing_to_advance_one_fire_then_exactly_one_succeeds(
    schedule_store: ports.ScheduleStore, settled: Settled
) -> None:
    # GIVEN eight tickers that all read next fire START
    schedule_store.create(a_schedule("nightly"))
    start = threading.Barrier(8)
    results: dict[int, bool] = {}

    def ticker(n: int) -> None:
        start.wait()
        results[n] = schedule_store.advance(
            TENANT,
            "nightly",
            expected_next_fire=START,
            expected_version=1,
            next_fire=START + (n + 1) * MINUTE,
            now=START,
        )

    # WHEN they advance at once
    threads = [threading.Thread(target=ticker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN one wins, and the stored next fire is the winner's
    winners = [n for n, moved in results.items() if moved]
    assert len(results) == 8 and len(winners) == 1
    expected = START + (winners[0] + 1) * MINUTE
    shard = model.due_shard("nightly", SHARDS)
    assert due_ids(settled(schedule_store), shard, START + 10 * MINUTE) == [("nightly", expected)]


# --- the index lags the table ---------------------------------------------------------------


def test_given_an_advance_the_index_has_not_seen_then_its_entry_is_older_never_newer(
    schedule_store: ports.ScheduleStore, settled: Settled
) -> None:
    # GIVEN a schedule the index lists at START, advanced to START + 1 min
    item = a_schedule("nightly")
    schedule_store.create(item)
    shard = item.shard(SHARDS)
    settled(schedule_store)
    assert schedule_store.advance(
        TENANT,
        "nightly",
        expected_next_fire=START,
        expected_version=1,
        next_fire=START + MINUTE,
        now=START,
    )
    # WHEN the index is read before it has caught up
    listed = due_ids(schedule_store, shard, LATER)
    # THEN it shows the new next fire or the one the schedule has left, one entry
    # either way, while the table read is current
    assert listed in ([("nightly", START + MINUTE)], [("nightly", START)])
    stored = schedule_store.get(TENANT, "nightly")
    assert stored is not None and stored.next_fire == START + MINUTE
    # AND once caught up, only the new one
    assert due_ids(settled(schedule_store), shard, LATER) == [("nightly", START + MINUTE)]


def test_given_a_pause_the_index_has_not_seen_then_the_table_says_paused(
    schedule_store: ports.ScheduleStore, settled: Settled
) -> None:
    # GIVEN a due schedule the index lists, then paused
    item = a_schedule("nightly")
    schedule_store.create(item)
    settled(schedule_store)
    schedule_store.replace(item.paused(START), expected_version=1)
    # WHEN the lagging index still lists it
    listed = due_ids(schedule_store, item.shard(SHARDS), LATER)
    # THEN the table, read by key, is the authority: paused, with no next fire
    assert listed in ([], [("nightly", START)])
    (stored,) = schedule_store.get_many([(TENANT, "nightly")])
    assert stored.state is model.ScheduleState.PAUSED and stored.next_fire is None
    assert due_ids(settled(schedule_store), item.shard(SHARDS), LATER) == []
