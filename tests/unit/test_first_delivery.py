"""A fire whose sender wrote no row (the ticker's, a one-off job's) has nothing to read on
its first delivery: the worker skips that read, half a read unit a fire, and leaves every
answer it would have given to the claim, which writes the row only where none exists.
What the read used to catch first (a duplicate message, a cancel's row) the refused claim
catches: not run again, and not acted on twice."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from fireline.adapters import threads
from fireline.domain import occurrence
from fireline.handlers import worker as worker_handler
from fireline.services import dispatch, schedules
from fireline.services.worker import Result
from helpers.memory_system import REMAINING_MS, MemorySystem

FIRES = 4


def ticker_fires(system: MemorySystem) -> list[dict[str, Any]]:
    """The messages of FIRES fires of an every-minute schedule as the ticker sends them
    (no row written), the clock at the last one's fire time."""
    item = system.service.create(
        "tenant-a",
        schedules.ScheduleDraft(
            spec="cron(* * * * *)", target={"type": "python", "handler": "noop"}
        ),
    )
    assert item.next_fire is not None
    now = system.clock.now()
    bodies = [
        dispatch.outbound(item, item.next_fire + timedelta(minutes=n), now).message.body
        for n in range(FIRES)
    ]
    last = occurrence.parse_key(bodies[-1]["occurrence_key"]).fire_time
    system.clock.advance((last - system.clock.now()).total_seconds())
    return bodies


def counted_row_reads(system: MemorySystem, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    reads: Counter[str] = Counter()
    store = system.occurrences
    get, get_many = store.get, store.get_many

    def counted_get(key: str, **kwargs: Any) -> occurrence.Occurrence | None:
        reads[key] += 1
        return get(key, **kwargs)

    def counted_get_many(keys: Any, **kwargs: Any) -> Any:
        reads.update(keys)
        return get_many(keys, **kwargs)

    monkeypatch.setattr(store, "get", counted_get)
    monkeypatch.setattr(store, "get_many", counted_get_many)
    return reads


def run_batch(
    system: MemorySystem, bodies: list[dict[str, Any]], counts: list[int], ran: list[str]
) -> list[Result | Exception]:
    def run(handler: str, context: Any, timeout: float) -> None:
        ran.append(context.occurrence_key)

    worker = system.worker(runner=system.runner(python=run))
    with threads.ThreadPool(len(bodies), name="test-record") as pool:
        return worker.handle_batch(
            bodies, remaining_ms=lambda: REMAINING_MS, parallel=pool, receive_counts=counts
        )


def test_a_first_delivery_of_a_fire_sent_without_its_row_reads_no_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN the ticker's fires, each message saying its sender wrote no row
    system = MemorySystem()
    bodies = ticker_fires(system)
    assert all(b["no_row"] is True for b in bodies)
    reads = counted_row_reads(system, monkeypatch)
    ran: list[str] = []
    # WHEN a batch holds their first deliveries
    results = run_batch(system, bodies, [1] * FIRES, ran)
    # THEN each ran once, its claim writing its row, and no row was read before a claim
    assert reads == Counter()
    assert results == [Result.SUCCEEDED] * FIRES
    assert sorted(ran) == sorted(b["occurrence_key"] for b in bodies)
    assert all(system.row(b).state is occurrence.State.SUCCEEDED for b in bodies)


@pytest.mark.parametrize("count", [2, 0], ids=["redelivered", "count unknown"])
def test_a_redelivery_or_an_unknown_count_reads_the_row_first(
    count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the same fires delivered again (or by a caller that does not know the count)
    system = MemorySystem()
    bodies = ticker_fires(system)
    reads = counted_row_reads(system, monkeypatch)
    ran: list[str] = []
    # WHEN the worker handles them
    results = run_batch(system, bodies, [count] * FIRES, ran)
    # THEN each row was read once, in the batch's read, before the claim
    assert reads == Counter(b["occurrence_key"] for b in bodies)
    assert results == [Result.SUCCEEDED] * FIRES


def test_a_duplicate_message_whose_fire_another_delivery_ran_is_not_run_or_counted_again() -> None:
    # GIVEN a fire whose message the ticker sent twice (a redo after a crash), the first
    # delivered and run
    system = MemorySystem()
    [body, *_] = ticker_fires(system)
    ran: list[str] = []
    assert run_batch(system, [body], [1], ran) == [Result.SUCCEEDED]
    # WHEN the second message's first delivery comes, its row unread
    again = run_batch(system, [dict(body)], [1], ran)
    # THEN its claim is refused: the fire is not run again, its success not counted
    # again, and the delivery is counted a duplicate
    assert again == [Result.SETTLED]
    assert ran == [body["occurrence_key"]]
    assert sum(system.metrics.values("Succeeded")) == 1
    assert system.metrics.values("DuplicateDeliveries") == [1]
    row = system.row(body)
    assert (row.state, row.attempts) == (occurrence.State.SUCCEEDED, 1)


def test_a_cancelled_jobs_first_delivery_does_not_run_it() -> None:
    # GIVEN a one-off job due now, its message sent by its create, then cancelled (the
    # cancel writes its row, cancelled, as no delivery has claimed it)
    system = MemorySystem()
    view = system.service.create_job(
        "tenant-a",
        schedules.JobDraft(target={"type": "python", "handler": "noop"}, delay_seconds=0),
    )
    system.service.cancel_job("tenant-a", view.job.schedule_id)
    [message] = system.queue.receive("default")
    assert message.receive_count == 1
    assert message.body["no_row"] is True
    ran: list[str] = []
    # WHEN its first delivery comes
    results = run_batch(system, [message.body], [message.receive_count], ran)
    # THEN it does not run, and its row stays cancelled
    assert results == [Result.SETTLED]
    assert ran == []
    assert system.row(message.body).state is occurrence.State.CANCELLED
    assert system.metrics.values("Succeeded") == []


@pytest.mark.parametrize(
    ("record", "count"),
    [
        ({"attributes": {"ApproximateReceiveCount": "1"}}, 1),
        ({"attributes": {"ApproximateReceiveCount": "3"}}, 3),
        ({"attributes": {}}, 0),
        ({}, 0),
        ({"attributes": {"ApproximateReceiveCount": "many"}}, 0),
    ],
)
def test_the_handler_takes_the_receive_count_from_the_record_and_zero_when_unknown(
    record: dict[str, Any], count: int
) -> None:
    assert worker_handler._receive_count(record) == count
