"""What a one-off job and a workflow node cost in DynamoDB writes, counted on moto.

The counts are pinned (requests and items written, per job and per node), so a change that
adds a write fails here; the unit figures are printed. A write unit is 1 per item write of
up to 1 KB (2 in a transaction), an index write unit 1 per index item written or deleted.

- A one-off job due within SQS's longest delay is sent by its create: its item never
  enters the due index and the ticker never advances it. Its quota unit is a conditional
  increment before the item's put and a decrement after its mark's removal: plain writes.
  While it holds the unit it is in the held index (one index write in, one out), which
  is what the sweep reads to find a job its create never sent.
- A one-off job's run reads its item once, before its claim (eventually consistent), and
  nothing of the schedules table after it: the job's cancel writes the job's row first,
  racing the claim on it, so no read after the claim could see a cancel the claim missed.
- A workflow node's occurrence row is written by the worker's claim, not the controller:
  the message is the hand-off, as for a ticker's fire. Its success is one plain write and
  its children's decrements one plain write each (no transaction), and no node in waiting,
  dispatched or succeeded is in the state index.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fireline.adapters import quotas_dynamodb, schedules_dynamodb
from fireline.domain import quota, workflow
from fireline.services import schedules
from helpers import cost_paths
from helpers.flows import node, wide_dag
from helpers.system import System, flow_on, moto_system
from helpers.transactions import item_scoped_transactions

PYTHON = {"type": "python", "handler": "noop"}
JOBS = 10
NODES = 60

pytestmark = pytest.mark.filterwarnings(
    "ignore:Couldn't determine the remaining time left:UserWarning"
)


class Requests:
    """DynamoDB requests in the order they are sent, while ``recording``: the operation,
    the table (each table of a batch read) and whether the read was consistent."""

    def __init__(self, system: System) -> None:
        self.made: list[tuple[str, str, bool]] = []
        self.recording = False
        self.names = {name: logical for logical, name in system.stack.tables.items()}
        self._events = system.ddb.meta.events
        self._events.register("before-parameter-build.dynamodb", self._note)

    def close(self) -> None:
        self._events.unregister("before-parameter-build.dynamodb", self._note)

    def _note(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if not self.recording:
            return
        tables = [params["TableName"]] if "TableName" in params else []
        tables += list(params.get("RequestItems", {}))
        consistent = bool(params.get("ConsistentRead"))
        self.made += [(model.name, self.names[t], consistent) for t in tables]


class Writes:
    """Item writes by operation and table (``PutItem SchedulesTable``), transactions' and
    batches' items included, counted as they are sent."""

    def __init__(self, system: System) -> None:
        self.by: Counter[str] = Counter()
        self.names = {name: logical for logical, name in system.stack.tables.items()}
        system.ddb.meta.events.register("before-parameter-build.dynamodb", self._note)

    def _note(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        name = model.name
        if name in ("PutItem", "UpdateItem", "DeleteItem"):
            self.by[f"{name} {self.names[params['TableName']]}"] += 1
        elif name == "TransactWriteItems":
            for entry in params["TransactItems"]:
                ((kind, action),) = entry.items()
                self.by[f"Transact{kind} {self.names[action['TableName']]}"] += 1
        elif name == "BatchWriteItem":
            for table, requests in params["RequestItems"].items():
                self.by[f"BatchWriteItem {self.names[table]}"] += len(requests)

    def measure(self, system: System, action: Callable[[], object]) -> dict[str, Any]:
        system.log.reset()
        self.by.clear()
        action()
        return {
            "writes": dict(self.by),
            "requests": dict(system.log.requests),
            "write_units": system.log.write_units,
            "index_write_units": system.log.index_write_units,
        }


def per(figures: dict[str, Any], count: int) -> dict[str, Any]:
    return {
        key: {k: round(v / count, 3) for k, v in value.items()}
        if isinstance(value, dict)
        else round(value / count, 3)
        for key, value in figures.items()
    }


def purge(system: System) -> None:
    """Empty every queue: the messages other tests of the file left are not this test's
    (the file shares one system, and its tests may run in any order)."""
    for url in system.stack.queues.values():
        system.sqs_client.purge_queue(QueueUrl=url)


@pytest.fixture(scope="module")
def counted() -> Iterator[tuple[System, schedules.ScheduleService, Writes]]:
    """One local cloud for the file, with the deployment's default quotas counted."""
    with moto_system() as system:
        tables = system.stack.tables
        counts = quotas_dynamodb.DynamoQuotaStore(system.ddb, tables["SlotsTable"])
        system.schedules = schedules_dynamodb.DynamoScheduleStore(
            system.ddb, tables["SchedulesTable"], quotas=counts
        )
        service = schedules.ScheduleService(
            schedules=system.schedules,
            occurrences=system.occurrences,
            queue=system.queue,
            clock=system.clock,
            quotas=dict(quota.DEFAULT_QUOTAS),
        )
        system.slots.build_overrides()  # the register of limit overrides, as deployed
        yield system, service, Writes(system)


def test_a_one_off_job_due_soon_costs_four_plain_writes_beside_its_run(
    counted: tuple[System, schedules.ScheduleService, Writes],
    capsys: pytest.CaptureFixture[str],
) -> None:
    system, service, writes = counted
    purge(system)
    draft = schedules.JobDraft(delay_seconds=60, target=PYTHON)
    ids: list[str] = []
    # WHEN ten jobs due in a minute are created
    created = writes.measure(
        system,
        lambda: ids.extend(
            service.create_job("tenant-a", draft).job.schedule_id for _ in range(JOBS)
        ),
    )
    # AND the ticker ticks past their time
    tk = system.ticker(use_lease=False)

    def tick() -> None:
        for _ in range(3):
            tk.tick()
            system.clock.advance(1)

    ticked = writes.measure(system, tick)
    system.clock.advance(60)
    # AND a worker runs them (no tenant limit: the slots are another path's writes)
    worker = cost_paths.deployed_worker(system, tenant_limit=0)
    results: Counter[str] = Counter()

    def run() -> None:
        while messages := system.queue.receive("default", max_messages=10):
            for message in messages:
                results[worker.handle(message.body, remaining_ms=lambda: 60_000).value] += 1
                system.queue.delete("default", message.receipt)

    ran = writes.measure(system, run)
    with capsys.disabled():
        print(f"\none-off job due in 60 s, per job: create {per(created, JOBS)}")
        print(f"  ticker {per(ticked, JOBS)}")
        print(f"  worker (run and end) {per(ran, JOBS)}")
    # THEN each ran once, and gave its unit back
    assert results == {"succeeded": JOBS}
    assert {service.get_job("tenant-a", j).state for j in ids} == {"succeeded"}
    # AND its create was the count's conditional increment and the job's put (with its
    # held index entry, no due index entry), and one message (no transaction, no read)
    assert created["writes"] == {"UpdateItem SlotsTable": JOBS, "PutItem SchedulesTable": JOBS}
    assert created["index_write_units"] == JOBS
    assert created["requests"] == {"UpdateItem": JOBS, "PutItem": JOBS, "SendMessageBatch": JOBS}
    assert created["write_units"] == 2 * JOBS
    # AND the ticker wrote nothing for them (it read its shards, found nothing due)
    assert ticked["writes"] == {}
    assert set(ticked["requests"]) == {"Query"}
    # AND the worker's writes beside the run's own two occurrence writes (claim, outcome)
    # are the end's: the mark's removal and the count's decrement
    assert ran["writes"] == {
        "UpdateItem OccurrencesTable": 2 * JOBS,
        "UpdateItem SchedulesTable": JOBS,
        "UpdateItem SlotsTable": JOBS,
    }
    # (the mark's removal takes the job out of the held index)
    assert ran["index_write_units"] == JOBS
    assert "TransactWriteItems" not in ran["requests"]
    # AND without a tenant limit nothing of the slots is read per job (the register of
    # overrides, read once, says the tenant is unlimited)
    assert "Query" not in ran["requests"]


def test_a_one_off_job_due_later_waits_in_the_due_index(
    counted: tuple[System, schedules.ScheduleService, Writes],
) -> None:
    system, service, writes = counted
    draft = schedules.JobDraft(delay_seconds=1800, target=PYTHON)
    # WHEN a job due in half an hour is created
    created = writes.measure(system, lambda: service.create_job("tenant-a", draft))
    # THEN it is the same two plain writes, with the due and held indexes' entries, and
    # no message
    assert created["writes"] == {"UpdateItem SlotsTable": 1, "PutItem SchedulesTable": 1}
    assert created["index_write_units"] == 2
    assert "SendMessageBatch" not in created["requests"]
    # AND the ticker sends it within its lookahead and takes it out of the index
    system.clock.advance(1800 - 300)
    advanced = writes.measure(system, lambda: system.ticker(use_lease=False).tick())
    assert advanced["writes"] == {"UpdateItem SchedulesTable": 1}
    assert advanced["index_write_units"] == 1
    assert advanced["requests"]["SendMessageBatch"] == 1


@pytest.mark.parametrize(
    "delay_seconds", [60, 1200], ids=["sent by its create", "sent by the ticker"]
)
def test_a_one_off_jobs_run_reads_no_schedule_after_its_claim(
    counted: tuple[System, schedules.ScheduleService, Writes], delay_seconds: int
) -> None:
    system, service, _ = counted
    purge(system)
    requests = Requests(system)
    draft = schedules.JobDraft(delay_seconds=delay_seconds, target=PYTHON)
    # GIVEN jobs sent by their create (due within 900 s), or waiting in the due index
    # until the ticker sends them
    ids = {service.create_job("tenant-a", draft).job.schedule_id for _ in range(JOBS)}
    system.clock.advance(delay_seconds - 60)
    system.ticker(use_lease=False).tick()
    system.clock.advance(120)
    worker = cost_paths.deployed_worker(system, tenant_limit=0)
    runs: list[list[tuple[str, str, bool]]] = []
    results: Counter[str] = Counter()
    # WHEN a worker runs each
    try:
        while messages := system.queue.receive("default", max_messages=10):
            for message in messages:
                system.queue.delete("default", message.receipt)
                if message.body["schedule_id"] not in ids:
                    continue  # another test's job
                requests.made.clear()
                requests.recording = True
                results[worker.handle(message.body, remaining_ms=lambda: 60_000).value] += 1
                requests.recording = False
                runs.append(list(requests.made))
    finally:
        requests.close()
    # THEN each ran once, its claim the first write of its row
    assert results == {"succeeded": JOBS}
    claim = ("UpdateItem", "OccurrencesTable", False)
    for made in runs:
        after = made[made.index(claim) + 1 :]
        # AND before its claim it read its item once, eventually consistently; after
        # it, nothing of the schedules table but its end's write (its unit given back)
        assert [m for m in made[: made.index(claim)] if m[1] == "SchedulesTable"] == [
            ("GetItem", "SchedulesTable", False)
        ]
        assert [m for m in after if m[1] == "SchedulesTable"] == [
            ("UpdateItem", "SchedulesTable", False)
        ]


def test_a_workflow_node_costs_at_most_eight_write_units_with_its_index_writes(
    counted: tuple[System, schedules.ScheduleService, Writes],
    capsys: pytest.CaptureFixture[str],
) -> None:
    system, _, writes = counted
    purge(system)
    with item_scoped_transactions():
        flow = flow_on(system)
        names, edges = wide_dag(NODES)
        flow.register([node(n, job_class="short") for n in names], edges)
        leaves = sum(1 for n in names if not any(parent == n for parent, _ in edges))

        def run() -> None:
            started = flow.start()
            flow.drain()
            assert flow.run_state(started) is workflow.RunState.SUCCEEDED

        figures = writes.measure(system, run)
        units, index_units = figures["write_units"], figures["index_write_units"]
        with capsys.disabled():
            print(
                f"\n{NODES} nodes, {len(edges)} edges: per node {per(figures, NODES)}; "
                f"write units {units / NODES:.2f} + index {index_units / NODES:.2f}"
            )
    w = figures["writes"]
    # THEN every node's effect happened once, with per node: its row (in batches), its
    # dispatch, its success (one plain write, the guard of its children's decrements),
    # one plain decrement per edge, one count per leaf, and the worker's claim and outcome
    # on its occurrence: no transaction, and the controller writes no occurrence row
    assert len(flow.ledger.effects) == NODES
    assert w["BatchWriteItem WorkflowsTable"] == NODES
    assert w["UpdateItem WorkflowsTable"] == 2 * NODES + len(edges) + leaves
    assert "TransactUpdate WorkflowsTable" not in w
    assert "PutItem OccurrencesTable" not in w
    # AND the state index is written only by the run's own entry (in while it runs): no
    # node in waiting, dispatched or succeeded is in it
    assert index_units == 2
    # AND all of it, transactions at twice and index writes included, is at most eight
    # write units a node (14.6 when successes were transactions and every state indexed)
    assert (units + index_units) / NODES <= 8
    # (give or take a repeated delivery's write: the drain's idle reconciles resend
    # messages of nodes not yet claimed)
    occurrence_writes = system.log.item_writes[system.stack.tables["OccurrencesTable"]]
    assert 2 * NODES <= occurrence_writes <= 2 * NODES + NODES // 10
