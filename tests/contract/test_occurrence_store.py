"""OccurrenceStore contract: one row per key, history newest first, conditional moves."""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime, timedelta
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from fireline import ports
from fireline.adapters import occurrences_dynamodb
from fireline.domain import errors
from fireline.domain.occurrence import State
from helpers.aws import REGION, Stack, serialized_item_writes, unprocessed_keys

from .support import MINUTE, OTHER_TENANT, START, TENANT, Backend, an_occurrence


def walk(store: ports.OccurrenceStore, schedule_id: str, limit: int) -> list[list[str]]:
    """Every page of a schedule's history, following cursors to the end."""
    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        page = store.history(TENANT, schedule_id, limit=limit, cursor=cursor)
        pages.append([o.key for o in page.items])
        cursor = page.cursor
        if cursor is None:
            return pages
        assert len(pages) < 1_000, "the cursor never reached the end"


# --- put_new / get ------------------------------------------------------------------------


def test_given_a_new_key_when_put_then_it_is_stored_whole(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN
    item = an_occurrence("nightly", START, payload={"report": "daily", "n": 3})
    # WHEN
    stored = occurrence_store.put_new(item)
    # THEN
    assert stored is True
    assert occurrence_store.get(item.key) == item


def test_given_a_summary_of_skipped_fires_when_put_then_its_range_comes_back(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN the row that counts 30 skipped fires from START on, a minute apart
    item = dataclasses.replace(
        an_occurrence("nightly", START),
        state=State.SKIPPED,
        skipped_last=START + 29 * MINUTE,
        skipped_count=30,
    )
    # WHEN it is stored and read back, and listed
    assert occurrence_store.put_new(item) is True
    got = occurrence_store.get(item.key)
    (listed,) = occurrence_store.history(TENANT, "nightly", limit=10).items
    # THEN the range is whole in both, and the row answers for the fires it counts only
    assert got == item and listed == item
    assert item.covers(START + 10 * MINUTE) and item.covers(START + 29 * MINUTE)
    assert not item.covers(START + 30 * MINUTE) and not item.covers(START - MINUTE)


def test_given_an_existing_key_when_put_again_then_false_and_the_first_row_stays(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN a ticker stored the occurrence
    first = an_occurrence("nightly", START, payload={"from": "ticker-a"})
    assert occurrence_store.put_new(first)
    # WHEN a second ticker puts the same fire
    second = an_occurrence("nightly", START, payload={"from": "ticker-b"}, job_class="short")
    duplicate = occurrence_store.put_new(second)
    # THEN
    assert duplicate is False
    assert occurrence_store.get(first.key) == first


@pytest.mark.parametrize("consistent", [True, False], ids=["consistent", "eventually"])
def test_given_rows_of_many_schedules_when_got_many_then_those_that_exist_come_back_by_key(
    occurrence_store: ports.OccurrenceStore, consistent: bool
) -> None:
    # GIVEN 150 rows (more than one batch of 100) over three schedules, one a trigger's
    rows = [an_occurrence(f"s{i % 3}", START + i * MINUTE) for i in range(149)]
    rows.append(an_occurrence("s0", START + timedelta(milliseconds=250), exact=True))
    for row in rows:
        assert occurrence_store.put_new(row)
    missing = an_occurrence("s1", START - MINUTE).key
    # WHEN read by their keys, with a key twice and one that has no row
    keys = [r.key for r in rows] + [rows[0].key, missing]
    found = occurrence_store.get_many(keys, consistent=consistent)
    # THEN every stored row comes back whole under its key, and nothing else
    assert found == {r.key: r for r in rows}
    assert occurrence_store.get_many([], consistent=consistent) == {}


def test_given_a_throttled_table_when_got_many_then_unprocessed_keys_go_again_after_waits() -> None:
    with mock_aws(), serialized_item_writes():
        # GIVEN 5 rows on DynamoDB, whose next two batch reads leave all but a key unread
        client = boto3.client("dynamodb", region_name=REGION)
        slept: list[float] = []
        table = Stack.create(prefix="unprocessed").tables["OccurrencesTable"]
        store = occurrences_dynamodb.DynamoOccurrenceStore(client, table, sleep=slept.append)
        rows = [an_occurrence("nightly", START + i * MINUTE) for i in range(5)]
        for row in rows:
            assert store.put_new(row)
        with unprocessed_keys(client, times=2) as asked:
            # WHEN read together
            found = store.get_many([r.key for r in rows], consistent=False)
        # THEN every row came back: the keys left over were asked again after a wait,
        # twice as long the second time
        assert found == {r.key: r for r in rows}
        assert asked == [5, 4, 3]
        assert slept == [0.05, 0.1]
        # AND a table that never lets the keys through makes the read unavailable
        with unprocessed_keys(client, times=100, reads=0), pytest.raises(errors.Unavailable):
            store.get_many([r.key for r in rows])


def test_triggers_keyed_to_the_millisecond_are_rows_of_their_own_in_time_order(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN the fire on a whole second and two triggers within that second
    fire = an_occurrence("nightly", START)
    early = an_occurrence("nightly", START + timedelta(milliseconds=5), exact=True)
    late = an_occurrence("nightly", START + timedelta(milliseconds=750), exact=True)
    after = an_occurrence("nightly", START + timedelta(seconds=1))
    # WHEN each is put
    for row in (late, after, fire, early):
        assert occurrence_store.put_new(row)
    # THEN each is its own row, read back whole by its key
    assert [occurrence_store.get(r.key) for r in (fire, early, late)] == [fire, early, late]
    # AND the history lists them by time, newest first
    assert walk(occurrence_store, "nightly", limit=10) == [
        [after.key, late.key, early.key, fire.key]
    ]


def test_given_tickers_racing_to_put_one_fire_then_exactly_one_row_exists(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN eight tickers that all materialize the same fire
    start = threading.Barrier(8)
    results: dict[int, bool] = {}

    def ticker(n: int) -> None:
        start.wait()
        results[n] = occurrence_store.put_new(
            an_occurrence("nightly", START, payload={"from": f"ticker-{n}"})
        )

    # WHEN they put at once
    threads = [threading.Thread(target=ticker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN one put wins and its row is the one stored
    winners = [n for n, stored in results.items() if stored]
    assert len(results) == 8 and len(winners) == 1
    row = occurrence_store.get(an_occurrence("nightly", START).key)
    assert row is not None and row.payload == {"from": f"ticker-{winners[0]}"}


def test_given_no_such_key_then_get_returns_none(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    occurrence_store.put_new(an_occurrence("nightly", START))
    assert occurrence_store.get(an_occurrence("nightly", START + MINUTE).key) is None
    assert occurrence_store.get(an_occurrence("nightly", START, version=2).key) is None


# --- history ------------------------------------------------------------------------------


def test_given_occurrences_put_in_any_order_then_history_is_newest_fire_first(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN fires put out of order, and other schedules' occurrences
    for offset in (2, 0, 3, 1):
        occurrence_store.put_new(an_occurrence("nightly", START + offset * MINUTE))
    occurrence_store.put_new(an_occurrence("weekly", START + 9 * MINUTE))
    occurrence_store.put_new(an_occurrence("hourly", START + 9 * MINUTE, tenant_id=OTHER_TENANT))
    # WHEN
    page = occurrence_store.history(TENANT, "nightly", limit=10)
    # THEN
    assert [o.fire_time for o in page.items] == [START + n * MINUTE for n in (3, 2, 1, 0)]
    assert page.cursor is None


def test_given_no_occurrences_then_history_is_empty(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    page = occurrence_store.history(TENANT, "nightly", limit=10)
    assert (page.items, page.cursor) == ([], None)


@settings(
    max_examples=30,
    # `backend` only builds ports; each example makes its own empty store.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    deadline=None,
)
@given(
    offsets=st.sets(st.integers(min_value=0, max_value=10_000), max_size=25),
    limit=st.integers(min_value=1, max_value=7),
)
def test_given_any_history_when_paged_then_each_occurrence_comes_once_newest_first(
    backend: Backend, offsets: set[int], limit: int
) -> None:
    # GIVEN
    store = backend.occurrence_store()
    items = [an_occurrence("nightly", START + n * MINUTE) for n in offsets]
    for item in items:
        store.put_new(item)
    # WHEN
    pages = walk(store, "nightly", limit)
    # THEN
    newest_first = [o.key for o in sorted(items, key=lambda o: o.fire_time, reverse=True)]
    assert all(len(page) <= limit for page in pages)
    assert [key for page in pages for key in page] == newest_first


# --- open rows ----------------------------------------------------------------------------


def walk_open(
    store: ports.OccurrenceStore, schedule_id: str, since: datetime, limit: int
) -> list[str]:
    """Every open row of a schedule from ``since`` on, following cursors to the end."""
    keys: list[str] = []
    cursor: str | None = None
    for _ in range(1_000):
        page = store.open_rows(TENANT, schedule_id, since=since, limit=limit, cursor=cursor)
        assert len(page.items) <= limit
        keys += [o.key for o in page.items]
        if (cursor := page.cursor) is None:
            return keys
    raise AssertionError("the cursor never reached the end")


@pytest.mark.parametrize("limit", [1, 3, 100])
def test_open_rows_are_the_queued_and_failed_ones_from_a_time_on_oldest_first(
    occurrence_store: ports.OccurrenceStore, limit: int
) -> None:
    # GIVEN a schedule's rows in every state, before and after a time, of two versions,
    # a trigger's between whole seconds, and another schedule's open rows
    rows = {
        "before": an_occurrence("nightly", START - MINUTE),
        "queued": an_occurrence("nightly", START),
        "trigger": an_occurrence("nightly", START + timedelta(milliseconds=250), exact=True),
        "running": an_occurrence("nightly", START + MINUTE),
        "failed v1": an_occurrence("nightly", START + 2 * MINUTE),
        "failed v2": an_occurrence("nightly", START + 2 * MINUTE, version=2),
        "succeeded": an_occurrence("nightly", START + 3 * MINUTE),
        "ahead": an_occurrence("nightly", START + 60 * MINUTE, version=2),
    }
    for row in rows.values():
        assert occurrence_store.put_new(row)
    occurrence_store.put_new(an_occurrence("weekly", START))
    occurrence_store.put_new(an_occurrence("nightly-other", START, tenant_id=OTHER_TENANT))
    for name in ("running", "failed v1", "failed v2", "succeeded"):
        occurrence_store.claim(rows[name].key, now=START, until=START + MINUTE)
    for name in ("failed v1", "failed v2"):
        occurrence_store.settle(rows[name].key, state=State.FAILED, now=START, exit_reason="x")
    occurrence_store.settle(
        rows["succeeded"].key, state=State.SUCCEEDED, now=START, exit_reason="succeeded"
    )
    # WHEN the open rows from START on are read, page by page
    found = walk_open(occurrence_store, "nightly", START, limit)
    # THEN they are the queued and failed rows at or after START, in fire time order
    expected = ["queued", "trigger", "failed v1", "failed v2", "ahead"]
    assert found == [rows[name].key for name in expected]


def test_no_open_rows_is_an_empty_page(occurrence_store: ports.OccurrenceStore) -> None:
    page = occurrence_store.open_rows(TENANT, "nightly", since=START, limit=10)
    assert (page.items, page.cursor) == ([], None)


# --- transition ---------------------------------------------------------------------------


def test_given_the_state_read_when_transitioned_then_the_new_row_is_stored(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN
    queued = an_occurrence("nightly", START)
    occurrence_store.put_new(queued)
    # WHEN a worker claims it, then finishes it
    running = queued.moved(State.RUNNING, attempts=1, started_at=START + MINUTE)
    claimed = occurrence_store.transition(running, expected_state=State.QUEUED)
    done = running.moved(
        State.SUCCEEDED, finished_at=START + 2 * MINUTE, exit_reason="succeeded", progress={"n": 1}
    )
    finished = occurrence_store.transition(done, expected_state=State.RUNNING)
    # THEN
    assert (claimed, finished) == (True, True)
    assert occurrence_store.get(queued.key) == done


def test_given_two_workers_claiming_one_occurrence_then_the_second_is_refused(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN both workers read it queued
    queued = an_occurrence("nightly", START)
    occurrence_store.put_new(queued)
    first = queued.moved(State.RUNNING, attempts=1, progress={"by": "w1"})
    second = queued.moved(State.RUNNING, attempts=1, progress={"by": "w2"})
    # WHEN they claim one after the other
    won = occurrence_store.transition(first, expected_state=State.QUEUED)
    lost = occurrence_store.transition(second, expected_state=State.QUEUED)
    # THEN the second claim changes nothing
    assert (won, lost) == (True, False)
    assert occurrence_store.get(queued.key) == first


def test_given_a_finished_occurrence_when_a_late_update_expects_running_then_false(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN the occurrence was cancelled while a worker still thought it queued
    queued = an_occurrence("nightly", START)
    occurrence_store.put_new(queued)
    cancelled = queued.moved(State.CANCELLED, exit_reason="cancelled")
    assert occurrence_store.transition(cancelled, expected_state=State.QUEUED)
    # WHEN the worker's claim arrives
    claim = dataclasses.replace(queued, state=State.RUNNING, attempts=1)
    moved = occurrence_store.transition(claim, expected_state=State.QUEUED)
    # THEN
    assert moved is False
    assert occurrence_store.get(queued.key) == cancelled


@pytest.mark.parametrize("limit", [1, 2, 50])
def test_history_keeps_the_fire_times_in_range_and_the_states_asked_for(
    occurrence_store: ports.OccurrenceStore, limit: int
) -> None:
    # GIVEN rows before, at, within and at the end of a range, a trigger's between whole
    # seconds, one of them succeeded, and another schedule's row in the range
    rows = {
        "before": an_occurrence("nightly", START - MINUTE),
        "at start": an_occurrence("nightly", START),
        "trigger": an_occurrence("nightly", START + timedelta(milliseconds=250), exact=True),
        "succeeded": an_occurrence("nightly", START + MINUTE),
        "v2": an_occurrence("nightly", START + 2 * MINUTE, version=2),
        "at end": an_occurrence("nightly", START + 3 * MINUTE),
    }
    for row in rows.values():
        assert occurrence_store.put_new(row)
    occurrence_store.put_new(an_occurrence("weekly", START + MINUTE))
    occurrence_store.claim(rows["succeeded"].key, now=START, until=START + MINUTE)
    occurrence_store.settle(
        rows["succeeded"].key, state=State.SUCCEEDED, now=START, exit_reason="succeeded"
    )

    def read(**filters: Any) -> list[str]:
        found: list[str] = []
        cursor: str | None = None
        for _ in range(100):
            page = occurrence_store.history(
                TENANT,
                "nightly",
                limit=limit,
                cursor=cursor,
                only=ports.OccurrenceFilter(**filters),
            )
            assert len(page.items) <= limit
            found += [o.key for o in page.items]
            if (cursor := page.cursor) is None:
                return found
        raise AssertionError("the cursor never reached the end")

    # WHEN the range [START, START + 3 min) is read THEN its rows come, newest first
    in_range = read(since=START, until=START + 3 * MINUTE)
    assert in_range == [rows[n].key for n in ("v2", "succeeded", "trigger", "at start")]
    # AND a state keeps that state's rows only, with or without a range
    assert read(states=(State.SUCCEEDED,)) == [rows["succeeded"].key]
    queued = read(since=START, until=START + 3 * MINUTE, states=(State.QUEUED,))
    assert queued == [rows[n].key for n in ("v2", "trigger", "at start")]
    assert read(since=START + 3 * MINUTE) == [rows["at end"].key]


def test_history_up_to_a_time_alone_keeps_the_rows_before_it(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN rows before and at a time
    before = an_occurrence("nightly", START - MINUTE)
    at = an_occurrence("nightly", START)
    for row in (before, at):
        assert occurrence_store.put_new(row)
    # WHEN history is read up to that time, with no start (DynamoDB refuses an empty key
    # value as the range's low end)
    page = occurrence_store.history(
        TENANT, "nightly", limit=10, only=ports.OccurrenceFilter(until=START)
    )
    # THEN only the row before it comes
    assert [o.key for o in page.items] == [before.key]


# --- the awaiting-send listing (a trigger's row until its message is confirmed sent) -------


def test_a_row_written_awaiting_its_send_is_listed_from_its_creation_until_sent(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN two rows written before their messages, created two seconds before their fire,
    # and one written plainly
    first = an_occurrence("nightly", START)
    second = an_occurrence("hourly", START + MINUTE)
    assert occurrence_store.put_new(first, awaiting_send=True)
    assert occurrence_store.put_new(second, awaiting_send=True)
    assert occurrence_store.put_new(an_occurrence("plain", START))
    created = first.created_at
    assert created is not None
    # THEN each is listed from its creation on, the plain one never
    assert occurrence_store.awaiting_send(before=created, limit=10) == []
    listed = occurrence_store.awaiting_send(before=START + 2 * MINUTE, limit=10)
    assert sorted((e.key, e.since) for e in listed) == sorted(
        [(first.key, first.created_at), (second.key, second.created_at)]
    )
    assert len(occurrence_store.awaiting_send(before=START + 2 * MINUTE, limit=1)) == 1
    # WHEN one is confirmed sent
    occurrence_store.sent(first.key)
    # THEN only the other is listed, and the row itself is unchanged
    assert [e.key for e in occurrence_store.awaiting_send(before=START + 2 * MINUTE, limit=10)] == [
        second.key
    ]
    assert occurrence_store.get(first.key) == first
    # AND a clear of a row that does not exist writes nothing
    occurrence_store.sent(an_occurrence("gone", START).key)
    assert occurrence_store.get(an_occurrence("gone", START).key) is None


def test_a_listed_row_is_settled_unsent_only_while_queued_and_as_read(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN two rows awaiting their send since their creation
    row = an_occurrence("nightly", START)
    other = an_occurrence("hourly", START)
    occurrence_store.put_new(row, awaiting_send=True)
    occurrence_store.put_new(other, awaiting_send=True)
    since = row.created_at
    assert since is not None
    later = START + 20 * MINUTE
    # WHEN a sweep settles one as read
    assert occurrence_store.settle_unsent(row.key, since=since, now=later)
    # THEN it is skipped as not sent, off the listing, and a second settle is refused
    settled = occurrence_store.get(row.key)
    assert settled is not None
    assert (settled.state, settled.exit_reason, settled.finished_at) == (
        State.SKIPPED,
        "skipped: not sent",
        later,
    )
    assert [e.key for e in occurrence_store.awaiting_send(before=later, limit=10)] == [other.key]
    assert not occurrence_store.settle_unsent(row.key, since=since, now=later)
    # AND a row listed from another time than read, or moved on, is left as it is
    assert not occurrence_store.settle_unsent(other.key, since=later, now=later)
    running = other.moved(State.RUNNING, attempts=1, started_at=later)
    assert occurrence_store.transition(running, expected_state=State.QUEUED)
    assert not occurrence_store.settle_unsent(other.key, since=since, now=later)
    assert occurrence_store.get(other.key) == running
    assert occurrence_store.awaiting_send(before=later, limit=10) == []
