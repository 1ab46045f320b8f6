"""What a fire costs the ticker in AWS requests and DynamoDB write units, counted on moto.

The figures are printed (they are the point); the assertions hold the design's ratios,
which are deterministic: no row written by the ticker (the message is the hand-off, the
worker's claim writes the row), one SQS request per ten fires, and one schedule advance
(with its two index writes) per several fires of a frequent schedule.
"""

from __future__ import annotations

import math

import pytest

from fireline.services.schedules import ScheduleDraft
from helpers.system import System

TARGET = {"type": "python", "handler": "noop"}


def test_requests_and_write_units_per_materialized_fire(
    system: System, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN 100 schedules every minute and 2 every second
    minutely = [
        system.service.create("tenant-a", ScheduleDraft(spec="rate(1 minute)", target=TARGET))
        for _ in range(100)
    ]
    secondly = [
        system.service.create("tenant-b", ScheduleDraft(spec="cron(* * * * * *)", target=TARGET))
        for _ in range(2)
    ]
    tk = system.ticker(use_lease=False)
    system.log.reset()
    # WHEN the ticker ticks once a second for five minutes
    ticks = 300
    sent = 0
    sent_per_tick: list[int] = []
    rounds = 0
    for _ in range(ticks):
        report = tk.tick()
        sent += report.dispatched.sent
        sent_per_tick.append(report.dispatched.sent)
        rounds += report.rounds
        system.clock.advance(1)
    log = system.log
    tables = system.stack.tables
    occurrence_writes = log.writes[tables["OccurrencesTable"]]
    advances = log.writes[tables["SchedulesTable"]]
    per_fire = {
        "DynamoDB write units (base tables)": log.write_units / sent,
        "DynamoDB index write units": log.index_write_units / sent,
        "occurrence rows written": occurrence_writes / sent,
        "schedule advances": advances / sent,
        "SQS SendMessageBatch": log.requests["SendMessageBatch"] / sent,
        "DynamoDB BatchGetItem": log.requests["BatchGetItem"] / sent,
    }
    with capsys.disabled():
        print(f"\nticker cost over {ticks} ticks, {sent} fires materialized:")
        for name, value in per_fire.items():
            print(f"  {name:38s} {value:8.4f} per fire")
        queries = log.requests["Query"] / ticks
        print(f"  {'DynamoDB Query (one per shard)':38s} {queries:8.1f} per tick")
    # THEN every fire was sent once, and no row was written for it
    assert sent == len(log.sent) and set(log.sent.values()) == {1}
    assert occurrence_writes == 0
    # AND messages went out ten to a request: one SendMessageBatch per started ten per
    # tick (one class here), give or take one part-filled batch per extra round
    full = sum(math.ceil(n / 10) for n in sent_per_tick)
    assert full <= log.requests["SendMessageBatch"] <= full + rounds - ticks
    # AND a minutely schedule advanced once per its quarter hour of fires (the 900 s
    # horizon), a per-second one once per sixty (the pickup cap): never once per fire
    assert advances <= len(minutely) + len(secondly) * (ticks // 60 + 11)
    assert advances < sent / 10
    # AND each advance rewrote the index entry once (delete + put), nothing more
    assert log.index_write_units == 2 * advances
    # AND the base-table units are the advances alone
    assert log.write_units == pytest.approx(advances, abs=advances * 0.01)


@pytest.mark.parametrize("tenant_limit", [50, 0], ids=["tenant-limit", "unlimited"])
def test_requests_and_write_units_per_fire_end_to_end(
    system: System, capsys: pytest.CaptureFixture[str], tenant_limit: int
) -> None:
    # GIVEN 50 schedules every minute, run by the ticker and a worker
    for _ in range(50):
        system.service.create("tenant-a", ScheduleDraft(spec="rate(1 minute)", target=TARGET))
    system.slots.set_limit("tenant-a", tenant_limit)
    tk = system.ticker(use_lease=False)
    worker = system.worker()
    system.log.reset()
    created = succeeded = batches = 0

    def deliver() -> None:
        """What the event source mapping does: batches of up to 10, delete the successes."""
        nonlocal succeeded, batches
        while messages := system.queue.receive("default", max_messages=10):
            batches += 1
            for message in messages:
                outcome = worker.handle(message.body, remaining_ms=lambda: 60_000)
                succeeded += outcome.value == "succeeded"
                system.queue.delete("default", message.receipt)

    # WHEN the ticker ticks for five minutes while the worker keeps up
    ticks = 300
    for _ in range(ticks):
        created += tk.tick().dispatched.sent
        deliver()
        system.clock.advance(1)
    # ...and then every fire materialized ahead (up to the 900 s horizon) comes due and runs
    system.clock.advance(900)
    deliver()
    log = system.log
    advances = log.writes[system.stack.tables["SchedulesTable"]]
    # The event source mapping deletes a batch in one DeleteMessageBatch and long-polls
    # (its empty receives are a fixed cost per queue, not per fire).
    sqs = log.requests["SendMessageBatch"] + 2 * batches
    invocations = ticks / 60 + batches  # the ticker: one invocation a minute
    figures = {
        "DynamoDB write units (base tables)": log.write_units / succeeded,
        "DynamoDB index write units (due index)": log.index_write_units / succeeded,
        "DynamoDB worker reads (occurrence, schedule, slots)": (
            log.count("GetItem", "Query", "BatchGetItem") - 16 * ticks
        )
        / succeeded,
        "SQS requests (send, receive, delete batch)": sqs / succeeded,
        "Lambda invocations (ticker + worker)": invocations / succeeded,
    }
    with capsys.disabled():
        label = "with a tenant limit" if tenant_limit else "tenant unlimited"
        print(f"\nend to end, {succeeded} fires run to success ({label}):")
        for name, value in figures.items():
            print(f"  {name:52s} {value:7.3f} per fire")
        print(f"  {'DynamoDB ticker queries (one per shard)':52s} {16:7d} per tick")
        print(f"  {'schedule advances':52s} {advances / succeeded:7.3f} per fire")
    # THEN every fire materialized ran once, to success
    assert succeeded == created >= 50 * 5
    # AND the writes are the claim (which writes the row), the completion, the schedule
    # advances, and with a tenant limit the slot's take and give-back
    per_fire = 2 + (2 if tenant_limit else 0)
    assert log.write_units == pytest.approx(per_fire * succeeded + advances, abs=0.5)
    assert log.index_write_units == 2 * advances
    assert advances <= 50 * 2
