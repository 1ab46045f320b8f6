"""OccurrenceStore contract for running an occurrence: claim, annotate, settle, dead letters.

A claim is the idempotency record's put (one delivery wins), a settle its update (only the
running attempt records an outcome), and a dead row is listed until it is redriven.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fireline import ports
from fireline.domain import errors
from fireline.domain.occurrence import Occurrence, State

from .support import MINUTE, OTHER_TENANT, START, TENANT, Backend, an_occurrence

# Whole seconds throughout: the DynamoDB rows keep times to the millisecond.
CLAIMED_AT = START + 5 * MINUTE
HOLD = timedelta(seconds=90)


def queued(
    store: ports.OccurrenceStore,
    schedule_id: str = "nightly",
    fire_time: datetime = START,
    *,
    tenant_id: str = TENANT,
) -> Occurrence:
    item = an_occurrence(schedule_id, fire_time, tenant_id=tenant_id)
    assert store.put_new(item)
    return item


def running(store: ports.OccurrenceStore, *args: Any, **kwargs: Any) -> Occurrence:
    """A queued occurrence claimed at CLAIMED_AT, held for HOLD."""
    item = queued(store, *args, **kwargs)
    claimed, row = store.claim(item.key, now=CLAIMED_AT, until=CLAIMED_AT + HOLD)
    assert claimed and row is not None
    return row


def dead(store: ports.OccurrenceStore, *args: Any, **kwargs: Any) -> Occurrence:
    """An occurrence whose one attempt ran out of retries."""
    item = running(store, *args, **kwargs)
    assert store.settle(item.key, state=State.DEAD, now=CLAIMED_AT + MINUTE, exit_reason="error")
    row = store.get(item.key)
    assert row is not None
    return row


def in_state(store: ports.OccurrenceStore, state: State) -> Occurrence:
    """The nightly START occurrence, brought to ``state`` through the port."""
    if state is State.SKIPPED:
        item = an_occurrence("nightly", START, state=State.SKIPPED, exit_reason="skipped: misfire")
        assert store.put_new(item)
    elif state is State.QUEUED:
        item = queued(store)
    elif state is State.CANCELLED:
        item = queued(store)
        assert store.transition(
            item.moved(State.CANCELLED, exit_reason="cancelled"), expected_state=State.QUEUED
        )
    else:
        item = running(store)
        if state is not State.RUNNING:
            assert store.settle(
                item.key, state=state, now=CLAIMED_AT + MINUTE, exit_reason=state.value
            )
    row = store.get(item.key)
    assert row is not None and row.state is state
    return row


def walk_dead(store: ports.OccurrenceStore, tenant_id: str, limit: int) -> list[list[Occurrence]]:
    """Every page of a tenant's dead letters, following cursors to the end."""
    pages: list[list[Occurrence]] = []
    cursor: str | None = None
    while True:
        page = store.dead_letters(tenant_id, limit=limit, cursor=cursor)
        pages.append(page.items)
        cursor = page.cursor
        if cursor is None:
            return pages
        assert len(pages) < 1_000, "the cursor never reached the end"


# --- claim --------------------------------------------------------------------------------


def test_given_a_queued_occurrence_when_claimed_then_it_runs_held_until_the_given_time(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN
    item = queued(occurrence_store)
    # WHEN
    claimed, row = occurrence_store.claim(item.key, now=CLAIMED_AT, until=CLAIMED_AT + HOLD)
    # THEN
    expected = dataclasses.replace(
        item,
        state=State.RUNNING,
        attempts=1,
        started_at=CLAIMED_AT,
        in_progress_until=CLAIMED_AT + HOLD,
    )
    assert (claimed, row) == (True, expected)
    assert occurrence_store.get(item.key) == expected


def test_given_a_running_occurrence_when_claimed_before_its_hold_ends_then_refused(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN a worker holds it until CLAIMED_AT + HOLD
    held = running(occurrence_store)
    # WHEN a duplicate delivery claims it at the last second of the hold
    claimed, row = occurrence_store.claim(
        held.key, now=CLAIMED_AT + HOLD, until=CLAIMED_AT + 2 * HOLD
    )
    # THEN it sees the running row, and the row is unchanged
    assert (claimed, row) == (False, held)
    assert occurrence_store.get(held.key) == held


def test_given_a_running_occurrence_whose_hold_passed_when_claimed_then_a_new_attempt(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN its worker timed out: the hold ended a second ago
    held = running(occurrence_store)
    later = CLAIMED_AT + HOLD + timedelta(seconds=1)
    # WHEN another delivery claims it
    claimed, row = occurrence_store.claim(held.key, now=later, until=later + HOLD)
    # THEN
    expected = dataclasses.replace(
        held, attempts=2, started_at=later, in_progress_until=later + HOLD
    )
    assert (claimed, row) == (True, expected)
    assert occurrence_store.get(held.key) == expected


def test_given_a_failed_attempt_when_claimed_then_it_runs_again(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN the first attempt failed and a retry is due
    held = running(occurrence_store)
    assert occurrence_store.settle(
        held.key, state=State.FAILED, now=CLAIMED_AT + MINUTE, exit_reason="error: boom"
    )
    retry_at = CLAIMED_AT + 3 * MINUTE
    # WHEN the retry claims it
    claimed, row = occurrence_store.claim(held.key, now=retry_at, until=retry_at + HOLD)
    # THEN it is running its second attempt, the first one's outcome cleared
    expected = dataclasses.replace(
        held, attempts=2, started_at=retry_at, in_progress_until=retry_at + HOLD
    )
    assert (claimed, row) == (True, expected)
    assert occurrence_store.get(held.key) == expected


@pytest.mark.parametrize(
    "state", [State.SUCCEEDED, State.DEAD, State.CANCELLED, State.SKIPPED], ids=str
)
def test_given_an_occurrence_with_an_outcome_when_claimed_then_refused_and_unchanged(
    occurrence_store: ports.OccurrenceStore, state: State
) -> None:
    # GIVEN
    settled = in_state(occurrence_store, state)
    later = CLAIMED_AT + 10 * MINUTE
    # WHEN a late duplicate delivery claims it
    claimed, row = occurrence_store.claim(settled.key, now=later, until=later + HOLD)
    # THEN
    assert (claimed, row) == (False, settled)
    assert occurrence_store.get(settled.key) == settled


def test_given_no_such_occurrence_when_claimed_then_refused_with_no_row(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN another fire of the schedule exists
    queued(occurrence_store, "nightly", START)
    missing = an_occurrence("nightly", START + MINUTE)
    # WHEN
    claimed, row = occurrence_store.claim(missing.key, now=CLAIMED_AT, until=CLAIMED_AT + HOLD)
    # THEN nothing is claimed, and nothing created
    assert (claimed, row) == (False, None)
    assert occurrence_store.get(missing.key) is None


def test_given_a_fire_without_a_row_when_claimed_with_its_intent_then_the_row_is_written_running(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN a fire whose message was sent without a row (the ticker writes none), and
    # without its send time
    intent = an_occurrence("nightly", START + MINUTE, payload={"n": 1}, created_at=None)
    # WHEN its first delivery claims it
    claimed, row = occurrence_store.claim(
        intent.key, now=CLAIMED_AT, until=CLAIMED_AT + HOLD, intent=intent
    )
    # THEN the row exists, running its first attempt, with the fire's identity
    assert claimed and row is not None
    stored = occurrence_store.get(intent.key)
    assert stored == row
    assert (stored.state, stored.attempts, stored.started_at) == (State.RUNNING, 1, CLAIMED_AT)
    assert (stored.tenant_id, stored.schedule_id, stored.version, stored.fire_time) == (
        intent.tenant_id,
        intent.schedule_id,
        intent.version,
        intent.fire_time,
    )
    assert stored.created_at == CLAIMED_AT
    # AND it is in the schedule's history
    assert [o.key for o in occurrence_store.history(TENANT, "nightly", limit=5).items] == [
        intent.key
    ]


def test_given_a_fire_sent_at_a_known_time_when_claimed_then_the_row_is_created_then(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN a fire's message that says when the ticker sent it, two seconds before its time
    sent = START + MINUTE - timedelta(seconds=2)
    intent = an_occurrence("nightly", START + MINUTE, created_at=sent)
    # WHEN its first delivery claims it
    claimed, row = occurrence_store.claim(
        intent.key, now=CLAIMED_AT, until=CLAIMED_AT + HOLD, intent=intent
    )
    # THEN the row is created at the send time (its enqueue), started at the claim
    assert claimed and row is not None
    stored = occurrence_store.get(intent.key)
    assert stored is not None
    assert (stored.created_at, stored.started_at) == (sent, CLAIMED_AT)


@pytest.mark.parametrize("state", [State.SKIPPED, State.CANCELLED, State.SUCCEEDED])
def test_given_a_settled_row_when_claimed_with_an_intent_then_nothing_changes(
    occurrence_store: ports.OccurrenceStore, state: State
) -> None:
    # GIVEN a row that already has its outcome (a cancel or a misfire skip came first)
    item = in_state(occurrence_store, state)
    before = occurrence_store.get(item.key)
    # WHEN a late delivery claims it with its intent
    claimed, row = occurrence_store.claim(
        item.key, now=CLAIMED_AT + MINUTE, until=CLAIMED_AT + HOLD, intent=item
    )
    # THEN it is refused and the row stands as it was
    assert claimed is False and row == before
    assert occurrence_store.get(item.key) == before


def test_given_deliveries_racing_to_write_a_fires_row_then_exactly_one_claims_it(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN eight deliveries of a fire that has no row yet
    intent = an_occurrence("nightly", START + 2 * MINUTE)
    start = threading.Barrier(8)
    results: dict[int, tuple[bool, Occurrence | None]] = {}

    def delivery(n: int) -> None:
        start.wait()
        now = CLAIMED_AT + timedelta(seconds=n)
        results[n] = occurrence_store.claim(intent.key, now=now, until=now + HOLD, intent=intent)

    # WHEN they claim at once
    threads = [threading.Thread(target=delivery, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN one claim wrote the row and won; the others saw it running
    winners = [n for n, (claimed, _) in results.items() if claimed]
    assert len(winners) == 1
    stored = occurrence_store.get(intent.key)
    assert stored is not None and stored.attempts == 1 and stored.state is State.RUNNING
    assert all(row is not None and row.state is State.RUNNING for _, row in results.values())


def test_given_deliveries_racing_to_claim_one_occurrence_then_exactly_one_runs_it(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN eight deliveries of the same message
    item = queued(occurrence_store)
    start = threading.Barrier(8)
    results: dict[int, tuple[bool, Occurrence | None]] = {}

    def delivery(n: int) -> None:
        start.wait()
        now = CLAIMED_AT + timedelta(seconds=n)
        results[n] = occurrence_store.claim(item.key, now=now, until=now + HOLD)

    # WHEN they claim at once
    threads = [threading.Thread(target=delivery, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN one claim wins, its attempt is the only one, and the others saw it running
    winners = [n for n, (claimed, _) in results.items() if claimed]
    assert len(results) == 8 and len(winners) == 1
    stored = occurrence_store.get(item.key)
    assert stored is not None
    assert (stored.attempts, stored.started_at) == (1, CLAIMED_AT + timedelta(seconds=winners[0]))
    assert all(row == stored for _, row in results.values())


# --- annotate_running ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {"execution": "arn:aws:states:us-east-1:123456789012:execution:long:nightly-1"},
        {"task_token": "token-1"},
        {"attempts": 3},
        {"progress": {"rows": 120, "of": 400}},
        {"in_progress_until": CLAIMED_AT + 30 * MINUTE},
        {"execution": "exec-1", "in_progress_until": CLAIMED_AT + 30 * MINUTE},
    ],
    ids=lambda changes: "+".join(changes),
)
def test_given_a_running_occurrence_when_annotated_then_only_the_given_fields_change(
    occurrence_store: ports.OccurrenceStore, changes: dict[str, Any]
) -> None:
    # GIVEN
    held = running(occurrence_store)
    # WHEN
    annotated = occurrence_store.annotate_running(held.key, **changes)
    # THEN
    assert annotated is True
    assert occurrence_store.get(held.key) == dataclasses.replace(held, **changes)


def test_given_annotations_one_after_another_then_each_keeps_the_others(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN a long job's execution was recorded
    held = running(occurrence_store)
    assert occurrence_store.annotate_running(held.key, execution="exec-1")
    # WHEN its task starts, then reports progress twice
    assert occurrence_store.annotate_running(held.key, task_token="token-1", attempts=1)
    assert occurrence_store.annotate_running(held.key, progress={"step": 1})
    assert occurrence_store.annotate_running(held.key, progress={"step": 2})
    # THEN the row has every fact, progress the latest
    assert occurrence_store.get(held.key) == dataclasses.replace(
        held, execution="exec-1", task_token="token-1", attempts=1, progress={"step": 2}
    )


@pytest.mark.parametrize("state", [State.QUEUED, State.FAILED, State.SUCCEEDED], ids=str)
@pytest.mark.parametrize(
    "changes",
    [{"progress": {"step": 9}, "task_token": "late"}, {}],
    ids=["with-fields", "nothing"],
)
def test_given_an_occurrence_not_running_when_annotated_then_false_and_unchanged(
    occurrence_store: ports.OccurrenceStore, state: State, changes: dict[str, Any]
) -> None:
    # GIVEN
    row = in_state(occurrence_store, state)
    # WHEN a late heartbeat arrives
    annotated = occurrence_store.annotate_running(row.key, **changes)
    # THEN
    assert annotated is False
    assert occurrence_store.get(row.key) == row


def test_given_no_such_occurrence_when_annotated_then_false_and_nothing_created(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    missing = an_occurrence("nightly", START)
    assert occurrence_store.annotate_running(missing.key, progress={"step": 1}) is False
    assert occurrence_store.get(missing.key) is None


# --- settle -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "reason", "result"),
    [
        (State.SUCCEEDED, "succeeded", {"state": "succeeded", "output": {"rows": 3}}),
        (State.FAILED, "error: HTTP 503", {"state": "failed"}),
        (State.DEAD, "error: HTTP 503", None),
        (State.CANCELLED, "cancelled", None),
    ],
    ids=["succeeded", "failed", "dead", "cancelled"],
)
def test_given_a_running_occurrence_when_settled_then_its_outcome_is_recorded(
    occurrence_store: ports.OccurrenceStore,
    state: State,
    reason: str,
    result: dict[str, Any] | None,
) -> None:
    # GIVEN
    held = running(occurrence_store)
    finished = CLAIMED_AT + MINUTE
    # WHEN
    settled = occurrence_store.settle(
        held.key, state=state, now=finished, exit_reason=reason, result=result
    )
    # THEN the hold is gone and everything else stays
    assert settled is True
    assert occurrence_store.get(held.key) == dataclasses.replace(
        held,
        state=state,
        finished_at=finished,
        exit_reason=reason,
        result=result,
        in_progress_until=None,
    )


@pytest.mark.parametrize(
    "state", [State.QUEUED, State.FAILED, State.SUCCEEDED, State.CANCELLED, State.DEAD], ids=str
)
def test_given_an_occurrence_not_running_when_settled_then_false_and_unchanged(
    occurrence_store: ports.OccurrenceStore, state: State
) -> None:
    # GIVEN (a cancel won, or another attempt already recorded its outcome)
    row = in_state(occurrence_store, state)
    # WHEN a worker records its outcome late
    settled = occurrence_store.settle(
        row.key,
        state=State.SUCCEEDED,
        now=CLAIMED_AT + 9 * MINUTE,
        exit_reason="succeeded",
        result={"state": "succeeded"},
    )
    # THEN
    assert settled is False
    assert occurrence_store.get(row.key) == row


def test_given_no_such_occurrence_when_settled_then_false_and_nothing_created(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    missing = an_occurrence("nightly", START)
    settled = occurrence_store.settle(
        missing.key, state=State.SUCCEEDED, now=CLAIMED_AT, exit_reason="succeeded"
    )
    assert settled is False
    assert occurrence_store.get(missing.key) is None


def test_given_a_running_occurrence_when_settled_as_queued_then_illegal_and_unchanged(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    held = running(occurrence_store)
    with pytest.raises(errors.IllegalTransition):
        occurrence_store.settle(held.key, state=State.QUEUED, now=CLAIMED_AT, exit_reason="x")
    assert occurrence_store.get(held.key) == held


def test_given_a_retry_when_settled_without_a_result_then_the_last_attempts_result_is_gone(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN the first attempt failed with a result, and a retry claimed the row
    held = running(occurrence_store)
    assert occurrence_store.settle(
        held.key,
        state=State.FAILED,
        now=CLAIMED_AT + MINUTE,
        exit_reason="error: HTTP 503",
        result={"state": "failed", "exit_reason": "error: HTTP 503"},
    )
    retry_at = CLAIMED_AT + 3 * MINUTE
    claimed, _ = occurrence_store.claim(held.key, now=retry_at, until=retry_at + HOLD)
    assert claimed
    # WHEN the retry's worker dies and its outcome is recorded without a result
    assert occurrence_store.settle(
        held.key, state=State.FAILED, now=retry_at + MINUTE, exit_reason="error: worker died"
    )
    # THEN a replay sees this attempt's outcome, not the previous attempt's result
    row = occurrence_store.get(held.key)
    assert row is not None
    assert (row.exit_reason, row.result) == ("error: worker died", None)


# --- dead letters -------------------------------------------------------------------------


def test_given_occurrences_settled_dead_then_they_are_the_tenants_dead_letters_newest_first(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN dead rows of two schedules, a row that failed but may retry, and another
    # tenant's dead row
    for offset in (1, 3, 0):
        dead(occurrence_store, "nightly", START + offset * MINUTE)
    dead(occurrence_store, "weekly", START + 2 * MINUTE)
    failing = running(occurrence_store, "nightly", START + 9 * MINUTE)
    assert occurrence_store.settle(
        failing.key, state=State.FAILED, now=CLAIMED_AT, exit_reason="error"
    )
    dead(occurrence_store, "hourly", START + 9 * MINUTE, tenant_id=OTHER_TENANT)
    # WHEN
    page = occurrence_store.dead_letters(TENANT, limit=10)
    # THEN
    assert [(o.schedule_id, o.fire_time) for o in page.items] == [
        ("nightly", START + 3 * MINUTE),
        ("weekly", START + 2 * MINUTE),
        ("nightly", START + 1 * MINUTE),
        ("nightly", START),
    ]
    assert all(o == occurrence_store.get(o.key) for o in page.items)
    assert page.cursor is None


def test_given_dead_letters_of_one_tenant_then_another_tenant_sees_none(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    dead(occurrence_store, "nightly", START)
    page = occurrence_store.dead_letters(OTHER_TENANT, limit=10)
    assert (page.items, page.cursor) == ([], None)


def test_given_a_dead_occurrence_when_redriven_then_it_leaves_the_dead_letters(
    occurrence_store: ports.OccurrenceStore,
) -> None:
    # GIVEN two dead rows
    redriven = dead(occurrence_store, "nightly", START)
    kept = dead(occurrence_store, "nightly", START + MINUTE)
    # WHEN one is queued again
    moved = occurrence_store.transition(
        redriven.moved(State.QUEUED, generation=redriven.generation + 1),
        expected_state=State.DEAD,
    )
    # THEN
    assert moved is True
    page = occurrence_store.dead_letters(TENANT, limit=10)
    assert [o.key for o in page.items] == [kept.key]


@settings(
    max_examples=15,
    # `backend` only builds ports; each example makes its own empty store.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    deadline=None,
)
@given(
    # (schedule, minute): two schedules may die at the same fire time
    fires=st.sets(
        st.tuples(st.sampled_from(["nightly", "weekly", "audit"]), st.integers(0, 30)),
        max_size=12,
    ),
    limit=st.integers(min_value=1, max_value=5),
)
def test_given_any_dead_letters_when_paged_then_each_comes_once_newest_fire_first(
    backend: Backend, fires: set[tuple[str, int]], limit: int
) -> None:
    # GIVEN dead rows, and another tenant's dead row at the newest fire
    store = backend.occurrence_store()
    keys = {dead(store, schedule_id, START + n * MINUTE).key for schedule_id, n in fires}
    dead(store, "other", START + 31 * MINUTE, tenant_id=OTHER_TENANT)
    # WHEN
    pages = walk_dead(store, TENANT, limit)
    # THEN
    listed = [o for page in pages for o in page]
    assert all(len(page) <= limit for page in pages)
    assert sorted(o.key for o in listed) == sorted(keys)
    assert [o.fire_time for o in listed] == sorted((o.fire_time for o in listed), reverse=True)
