"""What a fire costs the ticker in AWS requests and DynamoDB write units, counted on moto.

The figures are printed (they are the point); the assertions hold the design's ratios,
which are deterministic: no row written by the ticker (the message is the hand-off, the
worker's claim writes the row), one SQS request per ten fires, one schedule advance (with
its two index writes) per several fires of a frequent schedule, two writes per fire in
the worker (the claim and the completion) and one more per slot a tenant limit takes.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

from fireline.services.schedules import ScheduleDraft
from helpers.system import System

TARGET = {"type": "python", "handler": "noop"}


def test_requests_and_write_units_per_materialized_fire(
    system: System, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN 20 schedules every minute and 1 every second
    minutely = [
        system.service.create("tenant-a", ScheduleDraft(spec="rate(1 minute)", target=TARGET))
        for _ in range(20)
    ]
    secondly = [
        system.service.create("tenant-b", ScheduleDraft(spec="cron(* * * * * *)", target=TARGET))
        for _ in range(1)
    ]
    tk = system.ticker(use_lease=False)
    system.log.reset()
    # WHEN the ticker ticks once a second for a minute
    ticks = 60
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


@pytest.mark.parametrize(
    ("tenant_limit", "class_share"),
    [(0, 0), (5, 0), (5, 4)],
    ids=["unlimited", "tenant-limit", "tenant-limit-and-class-share"],
)
def test_requests_and_write_units_per_fire_end_to_end(
    system: System, capsys: pytest.CaptureFixture[str], tenant_limit: int, class_share: int
) -> None:
    # GIVEN 10 schedules every minute, run by the ticker and a worker (a limit of 5 with
    # one job running at a time: each slot is handed on many times over)
    for _ in range(10):
        system.service.create("tenant-a", ScheduleDraft(spec="rate(1 minute)", target=TARGET))
    system.slots.build_overrides()  # the register of limit overrides, as deployed
    system.slots.set_limit("tenant-a", tenant_limit)
    tk = system.ticker(use_lease=False)
    worker = system.worker()
    worker.config = replace(worker.config, class_max_concurrency=class_share)
    reads: Counter[str] = Counter()

    def count_read(params: dict[str, Any], model: Any, **_: Any) -> None:
        if not delivering:
            return  # the ticker's reads are the ticker's (see the test above)
        if model.name == "BatchGetItem":  # the worker's gathered reads: count items
            for wanted in params["RequestItems"].values():
                how = "consistent" if wanted.get("ConsistentRead") else "eventual"
                reads[f"GetItem {how}"] += len(wanted["Keys"])
            reads["BatchGetItem requests"] += 1
            return
        how = "consistent" if params.get("ConsistentRead") else "eventual"
        reads[f"{model.name} {how}"] += 1

    for operation in ("GetItem", "Query", "BatchGetItem"):
        system.ddb.meta.events.register(f"before-parameter-build.dynamodb.{operation}", count_read)
    logged = LoggedBytes()
    product = logging.getLogger("fireline")
    level = product.level
    product.addHandler(logged)
    product.setLevel(logging.INFO)  # the deployed LOG_LEVEL
    system.log.reset()
    created = succeeded = batches = 0
    delivering = False

    def deliver() -> None:
        """What the event source mapping does: batches of up to 10, delete the successes."""
        nonlocal succeeded, batches, delivering
        delivering = True
        while messages := system.queue.receive("default", max_messages=10):
            batches += 1
            for message in messages:
                outcome = worker.handle(message.body, remaining_ms=lambda: 60_000)
                succeeded += outcome.value == "succeeded"
                system.queue.delete("default", message.receipt)
        delivering = False

    # WHEN the ticker ticks every 10 s for five minutes while the worker keeps up
    ticks = 30
    for _ in range(ticks):
        created += tk.tick().dispatched.sent
        deliver()
        system.clock.advance(10)
    # ...and then every fire materialized ahead (up to the 900 s horizon) comes due and runs
    system.clock.advance(900)
    deliver()
    product.removeHandler(logged)
    product.setLevel(level)
    log = system.log
    tables = system.stack.tables
    advances = log.writes[tables["SchedulesTable"]]
    slot_writes = log.writes[tables["SlotsTable"]]
    # The event source mapping deletes a batch in one DeleteMessageBatch and long-polls
    # (its empty receives are a fixed cost per queue, not per fire).
    sqs = log.requests["SendMessageBatch"] + 2 * batches
    invocations = ticks / 6 + batches  # the ticker: one invocation a minute
    figures = {
        "DynamoDB write units (base tables)": log.write_units / succeeded,
        "DynamoDB index write units (due index)": log.index_write_units / succeeded,
        "slot writes (take, hand-on, give-back)": slot_writes / succeeded,
        "worker GetItem, eventually consistent": reads["GetItem eventual"] / succeeded,
        "worker GetItem, consistent": reads["GetItem consistent"] / succeeded,
        "slot Query (eventually consistent)": (log.requests["Query"] - 16 * ticks) / succeeded,
        "SQS requests (send, receive, delete batch)": sqs / succeeded,
        "Lambda invocations (ticker + worker)": invocations / succeeded,
        "product log bytes (INFO and up, JSON lines)": logged.bytes / succeeded,
    }
    with capsys.disabled():
        label = f"tenant limit {tenant_limit}, class share {class_share}"
        print(f"\nend to end, {succeeded} fires run to success ({label}):")
        for name, value in figures.items():
            print(f"  {name:52s} {value:7.3f} per fire")
        print(f"  {'DynamoDB ticker queries (one per shard)':52s} {16:7d} per tick")
        print(f"  {'schedule advances':52s} {advances / succeeded:7.3f} per fire")
    # THEN every fire materialized ran once, to success
    assert succeeded == created >= 10 * 5
    # AND the writes are the claim (which writes the row), the completion and the schedule
    # advances; with a tenant limit one slot take per job (a finished run hands its slot
    # on instead of giving it back), and one more for the class's share
    per_fire = 2 + (1 if tenant_limit else 0) + (1 if class_share else 0)
    assert log.write_units == pytest.approx(per_fire * succeeded + advances, abs=0.5)
    assert slot_writes == (per_fire - 2) * succeeded
    assert log.index_write_units == 2 * advances
    assert advances <= 10 * 2
    # AND one consistent read per fire (the schedule after the claim that wrote the row);
    # the row and the schedule before the claim, the tenant's slots and a slot's holder
    # are read eventually consistently (see the worker)
    assert reads["GetItem consistent"] == succeeded
    assert reads["GetItem eventual"] >= 2 * succeeded
    assert reads["Query consistent"] == 0
    # AND the tenant's slots are read at most once per fire when it is limited, never when
    # it is not (the register of overrides says so, read once per cache period). Fires
    # that start within a quarter of a second of each other share one read
    # (services.worker.slot_views): here the clock stands still while a delivery runs, so
    # each delivery's fires read once between them, and a slot a finished run left is
    # handed to the next with no read of its holder's row
    slot_reads = log.requests["Query"] - 16 * ticks
    if tenant_limit:
        assert 1 <= slot_reads <= succeeded
        assert reads["GetItem eventual"] < 3 * succeeded
    else:
        assert slot_reads == 0
    # AND at most 100 bytes of log per fire: a success is a metric, not a line
    assert logged.bytes <= 100 * succeeded


class LoggedBytes(logging.Handler):
    """The bytes the product logs, as the deployed Powertools JSON lines."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(LambdaPowertoolsFormatter())
        self.bytes = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.bytes += len(self.format(record).encode()) + 1
