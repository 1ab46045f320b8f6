"""WorkflowStore and DocumentStore contract: one suite, memory and DynamoDB/S3 on moto.

Every node move is conditional on the state read, and a node's success decrements each
child once however often it is applied. The stores are built here (not in conftest's
Backend) from the template's WorkflowsTable and DefinitionsBucket, deployed on moto fresh
for each test. With FIRELINE_DYNALITE=1 the workflow store runs on dynalite too (see
helpers.dynalite), its documents in memory.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError
from moto import mock_aws

from fireline import ports
from fireline.adapters import memory, s3, workflows_dynamodb
from fireline.domain import errors, workflow
from fireline.domain.dag import NodeState
from helpers import dynalite
from helpers.aws import REGION, Stack, serialized_item_writes, unprocessed_keys

from .support import START, TENANT

_copies = itertools.count()
# memory; memory whose state index lags (as DynamoDB's GSI does); DynamoDB and S3 on moto.
BACKEND_NAMES = ["lagging", "memory", "moto", *(["dynalite"] if dynalite.ENABLED else [])]
# The store once its state index has seen every write so far.
Settled = Callable[[ports.WorkflowStore], ports.WorkflowStore]


@contextlib.contextmanager
def moto_stack() -> Iterator[Stack]:
    with contextlib.ExitStack() as exits:
        exits.enter_context(mock_aws())
        exits.enter_context(serialized_item_writes())
        yield Stack.create(prefix=f"wf{next(_copies)}")


@pytest.fixture(params=BACKEND_NAMES)
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def stack(backend_name: str) -> Iterator[Stack | None]:
    """The template's resources on moto for "moto"; nothing for the memory ones."""
    if backend_name != "moto":
        yield None
        return
    with moto_stack() as deployed:
        yield deployed


@pytest.fixture
def lag(backend_name: str) -> memory.IndexLag | None:
    # No clock: a write reaches the index only when the test lets it catch up.
    return memory.IndexLag() if backend_name == "lagging" else None


@pytest.fixture
def settled(lag: memory.IndexLag | None) -> Settled:
    def wait(store: ports.WorkflowStore) -> ports.WorkflowStore:
        if lag is not None:
            lag.settle()
        return store

    return wait


@pytest.fixture
def store(
    request: pytest.FixtureRequest,
    backend_name: str,
    stack: Stack | None,
    lag: memory.IndexLag | None,
) -> ports.WorkflowStore:
    if backend_name == "dynalite":
        ddb = dynalite.client(request.getfixturevalue("dynalite_endpoint"))
        table = dynalite.create_table(ddb, "WorkflowsTable")
        return workflows_dynamodb.DynamoWorkflowStore(ddb, table, sleep=lambda _: None)
    if stack is None:
        return memory.MemoryWorkflowStore(lag=lag)
    return workflows_dynamodb.DynamoWorkflowStore(
        boto3.client("dynamodb", region_name=REGION),
        stack.tables["WorkflowsTable"],
        sleep=lambda _: None,
    )


def s3_store(stack: Stack) -> s3.S3DocumentStore:
    # SigV4 presigned URLs: botocore's default in us-east-1 is still SigV2 for them.
    client = boto3.client("s3", region_name=REGION, config=Config(signature_version="s3v4"))
    return s3.S3DocumentStore(client, stack.buckets["DefinitionsBucket"])


@pytest.fixture
def documents(stack: Stack | None) -> ports.DocumentStore:
    if stack is None:
        return memory.MemoryDocumentStore()
    return s3_store(stack)


def a_definition(
    version: int = 1, *, workflow_id: str = "etl", tenant_id: str = TENANT, nodes: int = 3
) -> workflow.DefinitionMeta:
    return workflow.DefinitionMeta(
        tenant_id=tenant_id,
        workflow_id=workflow_id,
        version=version,
        nodes=nodes,
        edges=nodes - 1,
        created_at=START + timedelta(minutes=version),
    )


def a_run(run_id: str = "run-1", **fields: object) -> workflow.Run:
    values: dict[str, object] = {
        "tenant_id": TENANT,
        "run_id": run_id,
        "workflow_id": "etl",
        "version": 2,
        "total": 3,
        "created_at": START,
    }
    values.update(fields)
    return workflow.Run(**values)  # type: ignore[arg-type]


def node(
    node_id: str,
    state: NodeState = NodeState.WAITING,
    *,
    pending: int = 0,
    generation: int = 1,
    fanout: int = 0,
) -> workflow.RunNode:
    return workflow.RunNode(node_id, state, pending, generation, fanout)


def ids(count: int, prefix: str = "n") -> list[str]:
    """Node ids that sort the way they are numbered."""
    return [f"{prefix}{i:04d}" for i in range(count)]


def every_page(
    store: ports.WorkflowStore, run_id: str, state: NodeState, limit: int
) -> list[list[workflow.RunNode]]:
    pages: list[list[workflow.RunNode]] = []
    cursor = None
    while True:
        page = store.nodes_in_state(run_id, state, limit=limit, cursor=cursor)
        pages.append(page.items)
        if page.cursor is None:
            return pages
        cursor = page.cursor
        assert len(pages) < 100, "the listing does not end"


def pending_of(store: ports.WorkflowStore, run_id: str, node_ids: list[str]) -> list[int]:
    rows = store.get_nodes(run_id, node_ids)
    return [rows[n].pending for n in node_ids]


# ---------------------------------------------------------------- definitions


def test_given_a_new_version_when_indexed_then_it_can_be_got_and_a_repeat_is_refused(
    store: ports.WorkflowStore,
) -> None:
    # WHEN
    first = store.put_definition(a_definition(1, nodes=3))
    # A racing registration of the same version, with another graph
    again = store.put_definition(a_definition(1, nodes=7))
    # THEN the first stays
    assert (first, again) == (True, False)
    assert store.get_definition(TENANT, "etl", 1) == a_definition(1, nodes=3)
    assert store.latest_definition(TENANT, "etl") == a_definition(1, nodes=3)


def test_given_many_versions_then_latest_is_the_highest_number_not_the_last_written(
    store: ports.WorkflowStore,
) -> None:
    # GIVEN versions written out of order, 10 sorting before 9 as text
    for version in (2, 10, 1, 9):
        assert store.put_definition(a_definition(version))
    # THEN
    assert store.latest_definition(TENANT, "etl") == a_definition(10)
    assert store.get_definition(TENANT, "etl", 9) == a_definition(9)
    assert store.get_definition(TENANT, "etl", 3) is None


def test_given_definitions_of_others_then_each_workflow_and_tenant_has_its_own_versions(
    store: ports.WorkflowStore,
) -> None:
    assert store.put_definition(a_definition(3, workflow_id="etl"))
    assert store.put_definition(a_definition(5, workflow_id="etl-daily"))
    assert store.put_definition(a_definition(1, workflow_id="etl", tenant_id="tenant-b"))

    assert store.latest_definition(TENANT, "etl") == a_definition(3)
    assert store.latest_definition("tenant-b", "etl") == a_definition(1, tenant_id="tenant-b")
    assert store.latest_definition(TENANT, "unknown") is None
    assert store.get_definition("tenant-b", "etl", 3) is None


# ---------------------------------------------------------------- runs


def test_given_a_new_run_when_created_then_it_reads_back_whole_and_a_repeat_is_refused(
    store: ports.WorkflowStore,
) -> None:
    run = a_run(source="nightly#1#2026-03-01T12:00:00Z", materialized=1)
    # WHEN
    created = store.create_run(run)
    repeated = store.create_run(replace(run, total=99))
    # THEN
    assert (created, repeated) == (True, False)
    assert store.get_run("run-1") == run
    assert store.get_run("run-2") is None


def test_given_a_run_with_no_field_at_its_default_then_every_field_reads_back(
    store: ports.WorkflowStore,
) -> None:
    run = a_run(
        state=workflow.RunState.FAILED,
        finished_at=START + timedelta(seconds=90),
        generation=3,
        materialized=3,
        source="nightly#1#2026-03-01T12:00:00Z",
        has_failures=True,
        resetting=True,
    )
    # A field added to Run must be given a value here, so the stores are held to keep it.
    assert [f.name for f in fields(workflow.Run) if getattr(run, f.name) == f.default] == []

    assert store.create_run(run)
    assert store.get_run("run-1") == run
    assert store.update_run(
        replace(run, resetting=False), expected_state=run.state, expected_generation=3
    )
    assert store.get_run("run-1") == replace(run, resetting=False)


def test_given_a_run_when_updated_from_what_was_read_then_it_lands_once(
    store: ports.WorkflowStore,
) -> None:
    # GIVEN
    assert store.create_run(a_run())
    done = a_run(state=workflow.RunState.SUCCEEDED, finished_at=START + timedelta(minutes=1))
    # WHEN two controllers record the end from the same read
    first = store.update_run(done, expected_state=workflow.RunState.RUNNING, expected_generation=1)
    second = store.update_run(
        replace(done, state=workflow.RunState.FAILED),
        expected_state=workflow.RunState.RUNNING,
        expected_generation=1,
    )
    # THEN
    assert (first, second) == (True, False)
    assert store.get_run("run-1") == done


def test_given_a_run_when_its_generation_moved_on_then_a_stale_writer_loses(
    store: ports.WorkflowStore,
) -> None:
    # GIVEN "retry failed" moved the run to generation 2
    assert store.create_run(a_run(generation=2))
    # WHEN a writer that read generation 1 finishes it
    stale = store.update_run(
        a_run(state=workflow.RunState.FAILED),
        expected_state=workflow.RunState.RUNNING,
        expected_generation=1,
    )
    # THEN
    assert stale is False
    assert store.get_run("run-1") == a_run(generation=2)


def test_given_a_materialized_count_when_another_start_wrote_more_then_the_update_loses(
    store: ports.WorkflowStore,
) -> None:
    assert store.create_run(a_run(materialized=2))
    # WHEN a start that read materialized 1 records 2
    stale = store.update_run(
        a_run(materialized=2),
        expected_state=workflow.RunState.RUNNING,
        expected_generation=1,
        expected_materialized=1,
    )
    # AND the start that read 2 records 3
    current = store.update_run(
        a_run(materialized=3),
        expected_state=workflow.RunState.RUNNING,
        expected_generation=1,
        expected_materialized=2,
    )
    # THEN
    assert (stale, current) == (False, True)
    assert store.get_run("run-1") == a_run(materialized=3)


def test_given_no_run_when_updated_then_false_and_nothing_is_created(
    store: ports.WorkflowStore,
) -> None:
    updated = store.update_run(
        a_run(), expected_state=workflow.RunState.RUNNING, expected_generation=1
    )

    assert updated is False
    assert store.get_run("run-1") is None


def active(store: ports.WorkflowStore, limit: int) -> list[list[str]]:
    pages: list[list[str]] = []
    cursor = None
    while True:
        page = store.active_runs(limit=limit, cursor=cursor)
        pages.append(page.items)
        if page.cursor is None:
            return pages
        cursor = page.cursor
        assert len(pages) < 100, "the listing does not end"


@pytest.mark.parametrize(("limit", "sizes"), [(3, [3, 3, 1]), (7, [7]), (10, [7])])
def test_active_runs_pages_through_running_runs_only(
    store: ports.WorkflowStore, limit: int, sizes: list[int]
) -> None:
    # GIVEN 8 running runs, then one finished and one cancelled, and 2 created finished
    for i in range(8):
        assert store.create_run(a_run(f"run-{i}"))
    for run_id, state in (
        ("run-2", workflow.RunState.SUCCEEDED),
        ("run-5", workflow.RunState.CANCELLED),
    ):
        assert store.update_run(
            a_run(run_id, state=state),
            expected_state=workflow.RunState.RUNNING,
            expected_generation=1,
        )
    assert store.create_run(a_run("run-8", state=workflow.RunState.FAILED))
    assert store.create_run(a_run("run-9", state=workflow.RunState.SUCCEEDED))
    # "retry failed" puts a failed run back to running
    assert store.update_run(
        a_run("run-8", generation=2),
        expected_state=workflow.RunState.FAILED,
        expected_generation=1,
    )
    # WHEN
    pages = active(store, limit)
    # THEN every running run once, the last page says it is the last
    assert [len(p) for p in pages] == sizes
    listed = [run_id for page in pages for run_id in page]
    assert sorted(listed) == ["run-0", "run-1", "run-3", "run-4", "run-6", "run-7", "run-8"]


def test_given_no_running_run_then_active_runs_is_one_empty_page(
    store: ports.WorkflowStore,
) -> None:
    assert store.create_run(a_run(state=workflow.RunState.SUCCEEDED))

    page = store.active_runs(limit=10)

    assert (page.items, page.cursor) == ([], None)


# ---------------------------------------------------------------- nodes


def test_given_rows_written_in_many_batches_then_all_and_any_read_back(
    store: ports.WorkflowStore,
) -> None:
    # GIVEN 130 rows (more than one BatchWriteItem), in no particular order
    rows = [node(n, pending=i % 4, generation=1 + i % 2) for i, n in enumerate(ids(130))]
    store.put_nodes("run-1", list(reversed(rows)))
    store.put_nodes("run-2", [node("n0000", NodeState.DISPATCHED)])
    # THEN every row, by node id
    assert store.all_nodes("run-1") == rows
    assert store.all_nodes("run-3") == []
    # AND more than one BatchGetItem of them, a missing id and a repeated one left out
    wanted = [*ids(130)[::-1], "missing", "n0007"]
    assert store.get_nodes("run-1", wanted) == {r.node_id: r for r in rows}
    assert store.get_nodes("run-2", ["n0000", "n0001"]) == {
        "n0000": node("n0000", NodeState.DISPATCHED)
    }
    assert store.get_nodes("run-1", []) == {}


def test_given_a_row_when_put_again_then_the_new_one_replaces_it(
    store: ports.WorkflowStore,
    settled: Settled,
) -> None:
    store.put_nodes("run-1", [node("a", pending=2)])
    store.put_nodes("run-1", [node("a", NodeState.DISPATCHED, generation=2, fanout=1)])

    assert store.all_nodes("run-1") == [node("a", NodeState.DISPATCHED, generation=2, fanout=1)]
    assert settled(store).count_states("run-1")[NodeState.WAITING] == 0


@pytest.mark.parametrize(("limit", "sizes"), [(5, [5, 5, 2]), (6, [6, 6]), (50, [12])])
def test_nodes_in_state_pages_through_one_state_by_node_id(
    store: ports.WorkflowStore, settled: Settled, limit: int, sizes: list[int]
) -> None:
    # GIVEN 12 waiting nodes among dispatched ones, and another run's waiting nodes
    waiting = [node(n, pending=1 + i % 3, generation=2, fanout=0) for i, n in enumerate(ids(12))]
    dispatched = [node(n, NodeState.DISPATCHED) for n in ids(5, prefix="d")]
    store.put_nodes("run-1", [*dispatched, *reversed(waiting)])
    store.put_nodes("run-2", [node(n) for n in ids(7)])
    # WHEN
    pages = every_page(settled(store), "run-1", NodeState.WAITING, limit)
    # THEN the rows as written, in order, the last page ending the listing
    assert [len(p) for p in pages] == sizes
    assert [row for page in pages for row in page] == waiting
    assert every_page(settled(store), "run-1", NodeState.DISPATCHED, 100) == [dispatched]
    assert every_page(settled(store), "run-1", NodeState.FAILED, 10) == [[]]


@pytest.mark.parametrize("limit", [1, 4, 100])
def test_nodes_pages_through_a_runs_nodes_in_every_state_by_node_id(
    store: ports.WorkflowStore, limit: int
) -> None:
    # GIVEN a run's nodes in several states, and another run's nodes
    rows = [
        node(n, NodeState.DISPATCHED if i % 2 else NodeState.WAITING) for i, n in enumerate(ids(9))
    ]
    store.put_nodes("run-1", list(reversed(rows)))
    store.put_nodes("run-2", [node(n) for n in ids(3, prefix="z")])
    # WHEN the run's nodes are read page by page
    found: list[object] = []
    cursor: str | None = None
    for _ in range(100):
        page = store.nodes("run-1", limit=limit, cursor=cursor)
        assert len(page.items) <= limit
        found += page.items
        if (cursor := page.cursor) is None:
            break
    # THEN each comes once, as written, by node id, and no other run's
    assert found == rows


def test_count_states_counts_every_state_of_one_run(
    store: ports.WorkflowStore,
    settled: Settled,
) -> None:
    # GIVEN
    states = [NodeState.WAITING] * 4 + [NodeState.SUCCEEDED] * 3 + [NodeState.FAILED]
    store.put_nodes("run-1", [node(f"n{i}", s) for i, s in enumerate(states)])
    store.put_nodes("run-2", [node("n0", NodeState.DISPATCHED)])
    # THEN every state is there, zeros too
    assert settled(store).count_states("run-1") == {
        NodeState.WAITING: 4,
        NodeState.DISPATCHED: 0,
        NodeState.SUCCEEDED: 3,
        NodeState.FAILED: 1,
        NodeState.BLOCKED: 0,
        NodeState.CANCELLED: 0,
    }
    assert settled(store).count_states("run-3") == dict.fromkeys(NodeState, 0)


def test_given_moves_the_index_has_not_seen_then_a_listing_holds_only_rows_in_that_state(
    store: ports.WorkflowStore, settled: Settled
) -> None:
    # GIVEN four waiting nodes the index lists, two of them then dispatched
    store.put_nodes("run-1", [node(n) for n in ids(4)])
    settled(store)
    for moving in ids(2):
        assert store.move_node("run-1", moving, expected=NodeState.WAITING, to=NodeState.DISPATCHED)
    # WHEN both states are listed before the index has caught up
    waiting = [r.node_id for page in every_page(store, "run-1", NodeState.WAITING, 1) for r in page]
    dispatched = [
        r.node_id for page in every_page(store, "run-1", NodeState.DISPATCHED, 1) for r in page
    ]
    # THEN every row listed is in the state asked for (read back from the table): a node
    # that moved may be missing from both listings for a moment, never in the wrong one
    assert waiting == ids(4)[2:]
    assert dispatched in ([], ids(2))
    # AND once caught up, the index lists each node under its state
    assert every_page(settled(store), "run-1", NodeState.DISPATCHED, 10) == [
        [node(n, NodeState.DISPATCHED) for n in ids(2)]
    ]


# ---------------------------------------------------------------- move_node


def test_given_a_node_when_moved_from_the_state_read_then_once_and_the_index_follows(
    store: ports.WorkflowStore,
    settled: Settled,
) -> None:
    store.put_nodes("run-1", [node("a", pending=0, generation=1, fanout=0)])
    # WHEN two controllers dispatch it from the same read
    first = store.move_node("run-1", "a", expected=NodeState.WAITING, to=NodeState.DISPATCHED)
    second = store.move_node("run-1", "a", expected=NodeState.WAITING, to=NodeState.DISPATCHED)
    # THEN
    assert (first, second) == (True, False)
    assert store.get_nodes("run-1", ["a"]) == {"a": node("a", NodeState.DISPATCHED)}
    assert every_page(settled(store), "run-1", NodeState.WAITING, 10) == [[]]
    assert every_page(settled(store), "run-1", NodeState.DISPATCHED, 10) == [
        [node("a", NodeState.DISPATCHED)]
    ]
    assert settled(store).count_states("run-1")[NodeState.DISPATCHED] == 1


def test_given_no_node_when_moved_then_false_and_no_row_appears(
    store: ports.WorkflowStore,
    settled: Settled,
) -> None:
    moved = store.move_node("run-1", "ghost", expected=NodeState.WAITING, to=NodeState.BLOCKED)

    assert moved is False
    assert store.all_nodes("run-1") == []
    assert settled(store).count_states("run-1") == dict.fromkeys(NodeState, 0)


def test_given_a_node_with_an_unfinished_parent_when_moved_ready_only_then_refused(
    store: ports.WorkflowStore,
) -> None:
    store.put_nodes("run-1", [node("a", pending=1), node("b", pending=0), node("c", pending=-1)])

    moved = {
        n: store.move_node(
            "run-1", n, expected=NodeState.WAITING, to=NodeState.DISPATCHED, ready_only=True
        )
        for n in ("a", "b", "c")
    }

    # A counter below zero (a decrement applied twice by an earlier bug) is still ready.
    assert moved == {"a": False, "b": True, "c": True}
    assert store.get_nodes("run-1", ["a"]) == {"a": node("a", pending=1)}
    # Without ready_only the counter is not looked at (the reconcile trusts the parents).
    assert store.move_node("run-1", "a", expected=NodeState.WAITING, to=NodeState.DISPATCHED)


def test_given_a_retry_when_moved_with_generation_and_pending_then_both_reset_and_fanout_too(
    store: ports.WorkflowStore,
    settled: Settled,
) -> None:
    # GIVEN a failed node and a succeeded one whose fan-out ran
    store.put_nodes(
        "run-1",
        [
            node("a", NodeState.FAILED, pending=0, generation=1, fanout=0),
            node("b", NodeState.SUCCEEDED, pending=-1, generation=1, fanout=2),
        ],
    )
    # WHEN "retry failed" re-arms them
    moved_a = store.move_node(
        "run-1", "a", expected=NodeState.FAILED, to=NodeState.WAITING, generation=2, pending=1
    )
    moved_b = store.move_node(
        "run-1", "b", expected=NodeState.SUCCEEDED, to=NodeState.WAITING, pending=0
    )
    # AND one with only a generation
    store.put_nodes("run-1", [node("c", NodeState.BLOCKED, pending=2, fanout=1)])
    moved_c = store.move_node(
        "run-1", "c", expected=NodeState.BLOCKED, to=NodeState.WAITING, generation=5
    )
    # THEN
    assert (moved_a, moved_b, moved_c) == (True, True, True)
    assert store.all_nodes("run-1") == [
        node("a", NodeState.WAITING, pending=1, generation=2, fanout=0),
        node("b", NodeState.WAITING, pending=0, generation=1, fanout=0),
        node("c", NodeState.WAITING, pending=2, generation=5, fanout=1),
    ]
    assert [n.node_id for n in every_page(settled(store), "run-1", NodeState.WAITING, 10)[0]] == [
        "a",
        "b",
        "c",
    ]


# ---------------------------------------------------------------- succeed_node


def test_given_a_dispatched_node_when_it_succeeds_then_each_child_is_decremented_once(
    store: ports.WorkflowStore,
    settled: Settled,
) -> None:
    store.put_nodes(
        "run-1",
        [node("p", NodeState.DISPATCHED), node("c1", pending=2), node("c2", pending=1)],
    )
    # WHEN the completion is applied, then applied again (a redelivered event)
    first = store.succeed_node("run-1", "p", chunk=0, children=["c1", "c2"])
    second = store.succeed_node("run-1", "p", chunk=0, children=["c1", "c2"])
    # THEN
    assert (first, second) == (True, False)
    assert store.get_nodes("run-1", ["p"]) == {"p": node("p", NodeState.SUCCEEDED, fanout=1)}
    assert pending_of(store, "run-1", ["c1", "c2"]) == [1, 0]
    assert settled(store).count_states("run-1")[NodeState.SUCCEEDED] == 1


@pytest.mark.parametrize("state", [NodeState.WAITING, NodeState.FAILED, NodeState.CANCELLED])
def test_given_a_node_not_dispatched_when_it_succeeds_then_nothing_changes(
    store: ports.WorkflowStore, state: NodeState
) -> None:
    store.put_nodes("run-1", [node("p", state), node("c", pending=1)])

    applied = store.succeed_node("run-1", "p", chunk=0, children=["c"])

    assert applied is False
    assert store.all_nodes("run-1") == [node("c", pending=1), node("p", state)]


def test_given_a_leaf_when_it_succeeds_then_it_has_no_fanout_to_run(
    store: ports.WorkflowStore,
) -> None:
    store.put_nodes("run-1", [node("leaf", NodeState.DISPATCHED, generation=3)])

    first = store.succeed_node("run-1", "leaf", chunk=0, children=[])
    second = store.succeed_node("run-1", "leaf", chunk=0, children=[])

    assert (first, second) == (True, False)
    assert store.all_nodes("run-1") == [node("leaf", NodeState.SUCCEEDED, generation=3)]


def test_given_a_missing_node_or_child_then_no_row_appears_and_a_repeat_changes_nothing(
    store: ports.WorkflowStore,
) -> None:
    store.put_nodes("run-1", [node("p", NodeState.DISPATCHED), node("c", pending=1)])

    missing_parent = store.succeed_node("run-1", "ghost", chunk=0, children=["c"])
    # The parent's move is the guard, then each child that exists is decremented: a
    # missing child gets no stray row.
    missing_child = store.succeed_node("run-1", "p", chunk=0, children=["c", "ghost"])
    again = store.succeed_node("run-1", "p", chunk=0, children=["c", "ghost"])

    assert (missing_parent, missing_child, again) == (False, True, False)
    assert store.all_nodes("run-1") == [node("c"), node("p", NodeState.SUCCEEDED, fanout=1)]


def test_given_a_wide_fanout_then_chunks_apply_in_order_once_each(
    store: ports.WorkflowStore,
    settled: Settled,
) -> None:
    # GIVEN a parent with 250 children: three transactions of at most 99
    kids = ids(250, prefix="k")
    chunks = [kids[i : i + workflow.FANOUT_CHUNK] for i in range(0, 250, workflow.FANOUT_CHUNK)]
    assert [len(c) for c in chunks] == [99, 99, 52]
    store.put_nodes("run-1", [node("p", NodeState.DISPATCHED), *(node(k, pending=1) for k in kids)])
    # WHEN a continuation arrives before the success it continues
    early = store.succeed_node("run-1", "p", chunk=1, children=chunks[1])
    assert early is False
    assert store.get_nodes("run-1", ["p"])["p"] == node("p", NodeState.DISPATCHED)
    # AND then every chunk is applied, each twice
    applied = []
    for index, chunk in enumerate(chunks):
        applied.append(store.succeed_node("run-1", "p", chunk=index, children=chunk))
        applied.append(store.succeed_node("run-1", "p", chunk=index, children=chunk))
        # THEN the cursor says which chunk is next
        assert store.get_nodes("run-1", ["p"])["p"] == node(
            "p", NodeState.SUCCEEDED, fanout=index + 1
        )
    assert applied == [True, False] * 3
    # AND a chunk from the past or beyond the cursor changes nothing
    assert store.succeed_node("run-1", "p", chunk=1, children=chunks[1]) is False
    assert store.succeed_node("run-1", "p", chunk=5, children=chunks[0]) is False
    assert pending_of(store, "run-1", kids) == [0] * 250
    assert settled(store).count_states("run-1") == {
        **dict.fromkeys(NodeState, 0),
        NodeState.WAITING: 250,
        NodeState.SUCCEEDED: 1,
    }


def test_given_more_than_99_children_then_refused_and_nothing_changes(
    store: ports.WorkflowStore,
) -> None:
    kids = ids(workflow.FANOUT_CHUNK + 1, prefix="k")
    store.put_nodes("run-1", [node("p", NodeState.DISPATCHED), *(node(k, pending=1) for k in kids)])

    with pytest.raises(errors.ValidationError) as raised:
        store.succeed_node("run-1", "p", chunk=0, children=kids)

    assert raised.value.field == "children"
    assert store.get_nodes("run-1", ["p"])["p"] == node("p", NodeState.DISPATCHED)
    assert pending_of(store, "run-1", kids) == [1] * len(kids)


def test_given_a_fan_in_of_150_parents_when_each_succeeds_twice_at_once_then_zero_exactly(
    store: ports.WorkflowStore,
    settled: Settled,
) -> None:
    # GIVEN one child waiting for 150 dispatched parents
    parents = ids(150, prefix="p")
    store.put_nodes(
        "run-1", [*(node(p, NodeState.DISPATCHED) for p in parents), node("join", pending=150)]
    )
    results: list[bool] = []
    lock = threading.Lock()
    work = iter(parents * 2)

    def complete() -> None:
        for parent in work:
            applied = store.succeed_node("run-1", parent, chunk=0, children=["join"])
            with lock:
                results.append(applied)

    # WHEN every completion is delivered twice, eight controllers at once
    threads = [threading.Thread(target=complete) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN each parent decremented the child once: down to zero, never below
    assert (results.count(True), results.count(False)) == (150, 150)
    assert store.get_nodes("run-1", ["join"]) == {"join": node("join", pending=0)}
    assert settled(store).count_states("run-1")[NodeState.SUCCEEDED] == 150
    # AND the child is now ready, once
    assert store.move_node(
        "run-1", "join", expected=NodeState.WAITING, to=NodeState.DISPATCHED, ready_only=True
    )


def test_finished_leaves_count_per_generation_from_zero(store: ports.WorkflowStore) -> None:
    # GIVEN nothing counted
    assert store.finished_leaves("run-1", 1) == 0
    # WHEN leaves are counted in two generations
    counted = [store.add_finished_leaves("run-1", 1) for _ in range(3)]
    kept = store.add_finished_leaves("run-1", 2, 5)
    # THEN each add answers the count after it, and each generation has its own
    assert (counted, kept) == ([1, 2, 3], 5)
    assert (store.finished_leaves("run-1", 1), store.finished_leaves("run-1", 2)) == (3, 5)
    assert store.finished_leaves("run-2", 1) == 0
    # AND the count is no node of the run
    assert store.all_nodes("run-1") == []


# ---------------------------------------------------------------- documents

DOCUMENT_KEY = workflow.definition_key(TENANT, "etl", 1)


def test_given_a_document_when_put_then_got_byte_for_byte(
    documents: ports.DocumentStore,
) -> None:
    body = b'{"nodes":[{"id":"a","target":{"type":"http"}}],"edges":[]}\xe2\x9c\x93'

    documents.put(DOCUMENT_KEY, body)

    assert documents.get(DOCUMENT_KEY) == body
    assert documents.get(workflow.definition_key(TENANT, "etl", 2)) is None


def test_given_a_document_when_put_again_then_the_last_body_is_kept(
    documents: ports.DocumentStore,
) -> None:
    documents.put(DOCUMENT_KEY, b"first")
    documents.put(DOCUMENT_KEY, b"second")

    assert documents.get(DOCUMENT_KEY) == b"second"


def test_given_nothing_stored_then_get_is_none(documents: ports.DocumentStore) -> None:
    assert documents.get("uploads/tenant-a/nothing.json") is None


UPLOAD_KEY = "uploads/tenant-a/abc123.json"


def test_given_a_document_then_its_size_and_type_are_described_without_its_body(
    documents: ports.DocumentStore,
) -> None:
    documents.put(DOCUMENT_KEY, b'{"nodes":[]}')

    info = documents.describe(DOCUMENT_KEY)

    assert info is not None
    assert (info.size, info.content_type) == (12, "application/json")
    assert documents.describe("uploads/tenant-a/nothing.json") is None


def test_given_a_described_document_then_its_chunks_are_its_body(
    documents: ports.DocumentStore,
) -> None:
    body = b"x" * (3 * 1024 * 1024 + 5)  # more than one chunk in every store
    documents.put(DOCUMENT_KEY, body)
    info = documents.describe(DOCUMENT_KEY)
    assert info is not None

    chunks = list(documents.chunks(DOCUMENT_KEY, etag=info.etag))

    assert len(chunks) > 1
    assert b"".join(chunks) == body


def test_given_a_document_replaced_after_it_was_described_then_its_chunks_are_refused(
    documents: ports.DocumentStore,
) -> None:
    documents.put(DOCUMENT_KEY, b"small")
    info = documents.describe(DOCUMENT_KEY)
    assert info is not None
    # WHEN something larger is put over it before it is read
    documents.put(DOCUMENT_KEY, b"much larger than what was described")

    # THEN the read refuses it, rather than read what was never sized
    with pytest.raises(errors.ConflictError):
        list(documents.chunks(DOCUMENT_KEY, etag=info.etag))


def test_an_upload_form_names_the_key_and_the_content_type(
    documents: ports.DocumentStore,
) -> None:
    form = documents.upload_form(
        UPLOAD_KEY, expires_seconds=900, max_bytes=1024, content_type="application/json"
    )

    assert form.fields["key"] == UPLOAD_KEY
    assert form.fields["Content-Type"] == "application/json"


# ---------------------------------------------------------------- AWS only


@pytest.fixture
def aws() -> Iterator[Stack]:
    with moto_stack() as deployed:
        yield deployed


def dynamo_store(stack: Stack, **options: Any) -> workflows_dynamodb.DynamoWorkflowStore:
    client = options.pop("client", None) or boto3.client("dynamodb", region_name=REGION)
    return workflows_dynamodb.DynamoWorkflowStore(client, stack.tables["WorkflowsTable"], **options)


def post_form(form: ports.UploadForm, body: bytes, **fields: str) -> requests.Response:
    """What a client does with an upload form: its fields, then the file, last."""
    return requests.post(
        form.url,
        data={**form.fields, **fields},
        files={"file": ("definition.json", body)},
        timeout=5,
    )


def test_the_upload_forms_policy_limits_key_type_size_and_time(aws: Stack) -> None:
    store = s3_store(aws)
    signed_at = datetime.now(UTC)

    form = store.upload_form(
        UPLOAD_KEY, expires_seconds=900, max_bytes=1024, content_type="application/json"
    )

    # THEN the signed policy S3 checks the form against holds every condition
    policy = json.loads(base64.b64decode(form.fields["policy"]))
    conditions = policy["conditions"]
    assert {"bucket": aws.buckets["DefinitionsBucket"]} in conditions
    assert {"key": UPLOAD_KEY} in conditions
    assert {"Content-Type": "application/json"} in conditions
    assert ["content-length-range", 1, 1024] in conditions
    # AND it expires with the form, 15 minutes after it was signed
    expires = datetime.fromisoformat(policy["expiration"].replace("Z", "+00:00"))
    assert timedelta(seconds=895) <= expires - signed_at <= timedelta(seconds=905)
    # AND it is signed with SigV4 (the fields S3 needs to verify it)
    assert form.fields["x-amz-algorithm"] == "AWS4-HMAC-SHA256"
    assert {"x-amz-credential", "x-amz-date", "x-amz-signature"} <= set(form.fields)


def test_a_document_posted_with_the_form_is_stored_with_its_type(aws: Stack) -> None:
    store = s3_store(aws)
    form = store.upload_form(
        UPLOAD_KEY, expires_seconds=900, max_bytes=1024, content_type="application/json"
    )

    response = post_form(form, b'{"nodes":[],"edges":[]}')

    assert response.status_code == 204
    assert store.get(UPLOAD_KEY) == b'{"nodes":[],"edges":[]}'
    info = store.describe(UPLOAD_KEY)
    assert info is not None and (info.size, info.content_type) == (23, "application/json")


def test_moto_stores_a_form_past_its_policy_so_the_api_checks_the_metadata(aws: Stack) -> None:
    """moto (5.x) checks none of a POST policy's conditions, nor its signature: a body
    past content-length-range and another content type are stored as sent. S3 refuses
    both (EntityTooLarge, AccessDenied); the API checks size and type from the object's
    metadata either way, so a store that lets them through changes nothing."""
    store = s3_store(aws)
    form = store.upload_form(
        UPLOAD_KEY, expires_seconds=900, max_bytes=16, content_type="application/json"
    )

    response = post_form(form, b"x" * 17, **{"Content-Type": "text/html"})

    assert response.status_code == 204
    info = store.describe(UPLOAD_KEY)
    assert info is not None and (info.size, info.content_type) == (17, "text/html")


@pytest.mark.parametrize("seconds", [0, 7 * 24 * 3600 + 1])
def test_an_upload_form_beyond_what_s3_signs_is_refused(aws: Stack, seconds: int) -> None:
    store = s3_store(aws)

    with pytest.raises(errors.ValidationError) as raised:
        store.upload_form(
            UPLOAD_KEY, expires_seconds=seconds, max_bytes=1024, content_type="application/json"
        )

    assert raised.value.field == "expires_seconds"


def test_a_cursor_of_another_listing_or_forged_is_refused(aws: Stack) -> None:
    store = dynamo_store(aws)
    store.put_nodes("run-1", [node(n) for n in ids(3)])
    store.put_nodes("run-2", [node(n) for n in ids(3)])
    cursor = store.nodes_in_state("run-1", NodeState.WAITING, limit=1).cursor
    assert cursor is not None

    for other in (
        lambda: store.nodes_in_state("run-2", NodeState.WAITING, limit=1, cursor=cursor),
        lambda: store.nodes_in_state("run-1", NodeState.FAILED, limit=1, cursor=cursor),
        lambda: store.active_runs(limit=1, cursor=cursor),
        lambda: store.nodes_in_state("run-1", NodeState.WAITING, limit=1, cursor="n0000"),
    ):
        with pytest.raises(errors.ValidationError) as raised:
            other()
        assert raised.value.field == "cursor"


def test_the_run_item_is_in_the_state_index_only_while_running(aws: Stack) -> None:
    client = boto3.client("dynamodb", region_name=REGION)
    table = aws.tables["WorkflowsTable"]
    store = dynamo_store(aws, client=client)
    assert store.create_run(a_run())

    def state_key() -> object:
        item = client.get_item(TableName=table, Key={"pk": {"S": "R#run-1"}, "sk": {"S": "run"}})
        return item["Item"].get("state_key")

    assert state_key() == {"S": "active-runs"}
    assert store.update_run(
        a_run(state=workflow.RunState.FAILED),
        expected_state=workflow.RunState.RUNNING,
        expected_generation=1,
    )
    assert state_key() is None


def test_a_success_cut_short_after_its_move_never_decrements_a_child_twice(
    aws: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a parent whose success moves it, then fails on its second child's decrement
    # (a throttle past the SDK's retries, or the controller stopped there)
    client = boto3.client("dynamodb", region_name=REGION)
    store = dynamo_store(aws, client=client)
    store.put_nodes(
        "run-1", [node("p", NodeState.DISPATCHED), node("c1", pending=2), node("c2", pending=1)]
    )
    real = client.update_item
    calls = itertools.count()

    def failing_third(**kwargs: Any) -> Any:
        if next(calls) == 2:
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "UpdateItem"
            )
        return real(**kwargs)

    monkeypatch.setattr(client, "update_item", failing_third)
    with pytest.raises(errors.Unavailable):
        store.succeed_node("run-1", "p", chunk=0, children=["c1", "c2"])
    # WHEN the completion is applied again (a redelivered event)
    assert store.succeed_node("run-1", "p", chunk=0, children=["c1", "c2"]) is False
    # THEN the parent moved once, the first child was decremented once and the second
    # not at all: a counter is left too high, never too low (the reconcile dispatches
    # from the parents' states), so no child runs before its parents
    assert store.get_nodes("run-1", ["p"])["p"] == node("p", NodeState.SUCCEEDED, fanout=1)
    assert pending_of(store, "run-1", ["c1", "c2"]) == [1, 1]


def test_unprocessed_rows_and_keys_are_asked_for_again_after_a_backoff(
    aws: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = boto3.client("dynamodb", region_name=REGION)
    slept: list[float] = []
    store = dynamo_store(aws, client=client, sleep=slept.append)
    table = aws.tables["WorkflowsTable"]
    real_write = client.batch_write_item

    def throttled_write(**kwargs: Any) -> Any:
        # DynamoDB writes the first row and hands the rest back unprocessed, once.
        first, *rest = kwargs["RequestItems"][table]
        response = real_write(RequestItems={table: [first]})
        monkeypatch.setattr(client, "batch_write_item", real_write)
        return {**response, "UnprocessedItems": {table: rest}}

    monkeypatch.setattr(client, "batch_write_item", throttled_write)
    rows = [node(n, pending=1) for n in ids(10)]
    store.put_nodes("run-1", rows)
    assert store.all_nodes("run-1") == rows

    with unprocessed_keys(client, times=1):
        assert store.get_nodes("run-1", ids(10)) == {r.node_id: r for r in rows}
    assert len(slept) == 2
