"""WorkQueue contract: the SQS semantics workers rely on.

Batch limits, delay, visibility timeout, receive count, receipts and redrive. Time moves
only through the FakeClock, and waits step a second past each boundary rather than onto it.
"""

from __future__ import annotations

import pytest

from fireline import ports
from fireline.adapters.memory import FakeClock
from fireline.domain import errors

from .support import MAX_RECEIVE_COUNT, VISIBILITY_TIMEOUT

QUEUE = "short"


def message(n: int, *, delay: int = 0, **extra: object) -> ports.OutboundMessage:
    return ports.OutboundMessage(body={"n": n, **extra}, delay_seconds=delay)


def drain(queue: ports.WorkQueue) -> list[ports.ReceivedMessage]:
    """Everything receivable now, across as many receives as it takes."""
    received: list[ports.ReceivedMessage] = []
    while batch := queue.receive(QUEUE, max_messages=10):
        received.extend(batch)
    return received


# --- send_batch ---------------------------------------------------------------------------


def test_given_a_batch_when_sent_then_each_message_is_received_once_with_its_body(
    work_queue: ports.WorkQueue,
) -> None:
    # WHEN
    failed = work_queue.send_batch(QUEUE, [message(n, key=f"nightly#1#{n}") for n in range(10)])
    # THEN
    assert failed == []
    received = drain(work_queue)
    assert sorted(m.body["n"] for m in received) == list(range(10))
    assert {m.body["key"] for m in received} == {f"nightly#1#{n}" for n in range(10)}
    assert [m.receive_count for m in received] == [1] * 10
    assert len({m.message_id for m in received}) == 10
    assert len({m.receipt for m in received}) == 10


def test_given_one_queue_per_class_then_a_message_goes_only_to_its_class(
    work_queue: ports.WorkQueue,
) -> None:
    work_queue.send_batch("long", [message(1)])
    assert work_queue.receive(QUEUE) == []
    assert [m.body for m in work_queue.receive("long")] == [{"n": 1}]


@pytest.mark.parametrize("count", [0, 11])
def test_given_a_batch_of_zero_or_more_than_ten_then_it_is_refused(
    work_queue: ports.WorkQueue, count: int
) -> None:
    with pytest.raises(errors.ValidationError) as caught:
        work_queue.send_batch(QUEUE, [message(n) for n in range(count)])
    assert caught.value.field == "messages"
    assert drain(work_queue) == []


@pytest.mark.parametrize("delay", [-1, 901])
def test_given_a_delay_outside_zero_to_900_then_the_batch_is_refused_and_nothing_is_sent(
    work_queue: ports.WorkQueue, delay: int
) -> None:
    # GIVEN a batch whose second entry is bad
    batch = [message(1), message(2, delay=delay), message(3)]
    # WHEN / THEN
    with pytest.raises(errors.ValidationError) as caught:
        work_queue.send_batch(QUEUE, batch)
    assert caught.value.field == "delay_seconds"
    # THEN nothing went in: the caller's resend must not duplicate message 1
    assert drain(work_queue) == []


def test_given_a_body_over_the_size_limit_then_the_batch_is_refused_and_nothing_is_sent(
    work_queue: ports.WorkQueue,
) -> None:
    # GIVEN a batch whose second entry is over a mebibyte (past any SQS message limit)
    batch = [message(1), message(2, blob="x" * (1024 * 1024 + 1))]
    # WHEN / THEN
    with pytest.raises(errors.ValidationError) as caught:
        work_queue.send_batch(QUEUE, batch)
    assert caught.value.field == "body"
    assert drain(work_queue) == []


def test_given_a_large_body_under_the_limit_then_it_is_sent_intact(
    work_queue: ports.WorkQueue,
) -> None:
    blob = "x" * (200 * 1024)
    assert work_queue.send_batch(QUEUE, [message(1, blob=blob)]) == []
    assert [m.body for m in work_queue.receive(QUEUE)] == [{"n": 1, "blob": blob}]


# --- delay --------------------------------------------------------------------------------


@pytest.mark.parametrize("delay", [1, 60, 900])
def test_given_a_delay_then_the_message_is_hidden_until_the_clock_passes_it(
    work_queue: ports.WorkQueue, clock: FakeClock, delay: int
) -> None:
    # GIVEN
    work_queue.send_batch(QUEUE, [message(1, delay=delay), message(2)])
    # WHEN / THEN only the undelayed one is there at once
    (undelayed,) = drain(work_queue)
    assert undelayed.body["n"] == 2
    work_queue.delete(QUEUE, undelayed.receipt)
    clock.advance(delay - 1)
    assert work_queue.receive(QUEUE) == []
    # WHEN the delay has passed
    clock.advance(2)
    # THEN
    assert [m.body["n"] for m in work_queue.receive(QUEUE)] == [1]


def test_given_ready_delayed_and_taken_messages_then_the_load_counts_each(
    work_queue: ports.WorkQueue, clock: FakeClock
) -> None:
    # GIVEN three messages ready, two delayed, and one of the ready ones taken
    work_queue.send_batch(QUEUE, [message(n) for n in range(3)])
    work_queue.send_batch(QUEUE, [message(n, delay=60) for n in range(3, 5)])
    (taken,) = work_queue.receive(QUEUE, max_messages=1, visibility_timeout=30)
    # WHEN / THEN the queue's load counts each kind, and the other classes are empty
    assert work_queue.load(QUEUE) == ports.QueueLoad(ready=2, delayed=2, in_flight=1)
    assert work_queue.load("long") == ports.QueueLoad(ready=0, delayed=0, in_flight=0)
    # WHEN the taken one is deleted and the delay has passed
    work_queue.delete(QUEUE, taken.receipt)
    clock.advance(61)
    # THEN every message left is ready
    assert work_queue.load(QUEUE) == ports.QueueLoad(ready=4, delayed=0, in_flight=0)


# --- visibility ---------------------------------------------------------------------------


def test_given_a_received_message_then_it_is_hidden_for_the_timeout_and_comes_back(
    work_queue: ports.WorkQueue, clock: FakeClock
) -> None:
    # GIVEN a worker received it with a 60 s visibility timeout and then crashed
    work_queue.send_batch(QUEUE, [message(1)])
    (first,) = work_queue.receive(QUEUE, visibility_timeout=60)
    # WHEN / THEN nobody else sees it while the timeout runs
    assert work_queue.receive(QUEUE) == []
    clock.advance(59)
    assert work_queue.receive(QUEUE) == []
    # WHEN the timeout has passed
    clock.advance(2)
    (again,) = work_queue.receive(QUEUE)
    # THEN it is the same message, received a second time under a new receipt
    assert (again.message_id, again.body, again.receive_count) == (first.message_id, {"n": 1}, 2)
    assert again.receipt != first.receipt


def test_given_no_timeout_on_receive_then_the_queue_default_applies(
    work_queue: ports.WorkQueue, clock: FakeClock
) -> None:
    work_queue.send_batch(QUEUE, [message(1)])
    assert len(work_queue.receive(QUEUE)) == 1
    clock.advance(VISIBILITY_TIMEOUT - 1)
    assert work_queue.receive(QUEUE) == []
    clock.advance(2)
    assert [m.receive_count for m in work_queue.receive(QUEUE)] == [2]


def test_given_a_received_message_when_deleted_then_it_never_comes_back(
    work_queue: ports.WorkQueue, clock: FakeClock
) -> None:
    # GIVEN
    work_queue.send_batch(QUEUE, [message(1), message(2)])
    received = {m.body["n"]: m for m in work_queue.receive(QUEUE)}
    # WHEN the worker finishes message 1
    work_queue.delete(QUEUE, received[1].receipt)
    # THEN after the timeout only message 2 returns
    clock.advance(VISIBILITY_TIMEOUT + 1)
    assert [m.body["n"] for m in drain(work_queue)] == [2]


def test_given_a_message_received_again_when_deleted_with_the_old_receipt_then_it_stays(
    work_queue: ports.WorkQueue, clock: FakeClock
) -> None:
    # GIVEN worker A's receipt went stale: the timeout passed and worker B received it
    work_queue.send_batch(QUEUE, [message(1)])
    (by_a,) = work_queue.receive(QUEUE)
    clock.advance(VISIBILITY_TIMEOUT + 1)
    (by_b,) = work_queue.receive(QUEUE)
    # WHEN worker A, finishing late, deletes with its receipt
    work_queue.delete(QUEUE, by_a.receipt)
    # THEN the message is not deleted: B's receive is still the live one
    clock.advance(VISIBILITY_TIMEOUT + 1)
    (again,) = work_queue.receive(QUEUE)
    assert (again.message_id, again.receive_count) == (by_b.message_id, 3)
    # AND the live receipt does delete it
    work_queue.delete(QUEUE, again.receipt)
    clock.advance(VISIBILITY_TIMEOUT + 1)
    assert work_queue.receive(QUEUE) == []


def test_given_a_long_job_when_it_extends_its_visibility_then_it_stays_hidden_longer(
    work_queue: ports.WorkQueue, clock: FakeClock
) -> None:
    # GIVEN
    work_queue.send_batch(QUEUE, [message(1)])
    (held,) = work_queue.receive(QUEUE)
    # WHEN, 20 s in, the worker asks for 120 s more
    clock.advance(20)
    work_queue.change_visibility(QUEUE, held.receipt, 120)
    # THEN it stays hidden past the original timeout, until 120 s after the change
    clock.advance(VISIBILITY_TIMEOUT)
    assert work_queue.receive(QUEUE) == []
    clock.advance(120 - VISIBILITY_TIMEOUT + 1)
    assert [m.message_id for m in work_queue.receive(QUEUE)] == [held.message_id]


def test_given_a_worker_giving_up_when_visibility_is_set_to_zero_then_it_is_receivable_now(
    work_queue: ports.WorkQueue,
) -> None:
    work_queue.send_batch(QUEUE, [message(1)])
    (held,) = work_queue.receive(QUEUE)
    work_queue.change_visibility(QUEUE, held.receipt, 0)
    assert [(m.message_id, m.receive_count) for m in work_queue.receive(QUEUE)] == [
        (held.message_id, 2)
    ]


def test_given_many_messages_then_a_receive_returns_at_most_max_messages(
    work_queue: ports.WorkQueue,
) -> None:
    work_queue.send_batch(QUEUE, [message(n) for n in range(10)])
    first = work_queue.receive(QUEUE, max_messages=4)
    rest = drain(work_queue)
    assert 1 <= len(first) <= 4
    assert sorted(m.body["n"] for m in first + rest) == list(range(10))


# --- redrive ------------------------------------------------------------------------------


def test_given_a_message_received_max_receive_count_times_then_it_moves_to_dead_letters(
    work_queue: ports.WorkQueue, clock: FakeClock
) -> None:
    # GIVEN a poison message: every worker that receives it fails without deleting it
    work_queue.send_batch(QUEUE, [message(1, poison=True), message(2)])
    healthy = [m for m in work_queue.receive(QUEUE) if m.body["n"] == 2]
    work_queue.delete(QUEUE, healthy[0].receipt)
    counts = [1]
    for _ in range(MAX_RECEIVE_COUNT - 1):
        clock.advance(VISIBILITY_TIMEOUT + 1)
        counts.extend(m.receive_count for m in work_queue.receive(QUEUE))
    assert counts == list(range(1, MAX_RECEIVE_COUNT + 1))
    assert work_queue.dead_letters(QUEUE) == []
    # WHEN its last visibility timeout passes
    clock.advance(VISIBILITY_TIMEOUT + 1)
    # THEN no worker receives it again; it waits in the dead-letter queue for a human
    assert work_queue.receive(QUEUE) == []
    assert [m.body for m in work_queue.dead_letters(QUEUE)] == [{"n": 1, "poison": True}]
    assert work_queue.dead_letters("long") == []
