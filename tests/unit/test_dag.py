"""Workflow graphs: validation with the fault named, the ready set and the resume plan."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fireline.domain import dag, errors
from fireline.domain.dag import NodeState

DIAMOND = (["a", "b", "c", "d"], [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
ETL = (
    ["source", "extract", "validate", "transform", "load", "audit", "cleanup"],
    [
        ("source", "extract"),
        ("source", "validate"),
        ("extract", "transform"),
        ("validate", "transform"),
        ("transform", "load"),
        ("load", "audit"),
        *((n, "cleanup") for n in ["source", "extract", "validate", "transform", "load", "audit"]),
    ],
)


def test_diamond_counts_and_roots() -> None:
    graph = dag.validate(*DIAMOND)
    assert graph.roots() == ["a"]
    assert graph.unfinished_parents() == {"a": 0, "b": 1, "c": 1, "d": 2}
    assert graph.edge_count == 4


def test_a_cycle_is_rejected_with_the_cycle_named() -> None:
    with pytest.raises(errors.ValidationError) as caught:
        dag.validate(["a", "b", "c", "d"], [("a", "b"), ("b", "c"), ("c", "d"), ("d", "b")])
    assert caught.value.field == "edges"
    assert "b -> c -> d -> b" in caught.value.message


def test_a_self_loop_is_a_cycle() -> None:
    with pytest.raises(errors.ValidationError, match="a -> a"):
        dag.validate(["a"], [("a", "a")])


@pytest.mark.parametrize(
    "nodes,edges,field,fragment",
    [
        ([], [], "nodes", "at least one"),
        (["a", "a"], [], "nodes[1]", "duplicate node id 'a'"),
        (["a", "b"], [("a", "x")], "edges[0]", "no node 'x'"),
        (["a", "b"], [("a", "b"), ("a", "b")], "edges[1]", "duplicate edge"),
        (["a b"], [], "nodes[0]", "not a node id"),
    ],
)
def test_bad_definitions_name_the_fault(
    nodes: list[str], edges: list[tuple[str, str]], field: str, fragment: str
) -> None:
    with pytest.raises(errors.ValidationError) as caught:
        dag.validate(nodes, edges)
    assert caught.value.field == field
    assert fragment in caught.value.message


def test_size_limits() -> None:
    with pytest.raises(errors.ValidationError) as caught:
        dag.validate([f"n{i}" for i in range(dag.MAX_NODES + 1)], [])
    assert caught.value.field == "nodes"


def test_a_100000_node_chain_validates_without_recursion_limits() -> None:
    nodes = [f"n{i}" for i in range(100_000)]
    graph = dag.validate(nodes, list(itertools.pairwise(nodes)))
    assert graph.roots() == ["n0"]
    assert len(dag.levels(graph)) == 100_000


def test_plan_of_a_fresh_run_dispatches_the_roots() -> None:
    graph = dag.validate(*ETL)
    plan = dag.plan(graph, {})
    assert plan.dispatch == ("source",)
    assert plan.counters["cleanup"] == 6 and not plan.complete


def test_plan_recomputes_counters_from_states_alone() -> None:
    # GIVEN extract and validate succeeded but their decrements of transform were lost
    graph = dag.validate(*ETL)
    states = {
        "source": NodeState.SUCCEEDED,
        "extract": NodeState.SUCCEEDED,
        "validate": NodeState.SUCCEEDED,
    }
    plan = dag.plan(graph, states)
    # THEN transform is ready, and cleanup still waits for three
    assert plan.dispatch == ("transform",)
    assert plan.counters["cleanup"] == 3
    # AND planning again from the same states says the same (idempotent)
    assert dag.plan(graph, states) == plan


def test_a_failed_node_blocks_only_its_descendants() -> None:
    graph = dag.validate(["a", "b", "c", "x", "y"], [("a", "b"), ("b", "c"), ("x", "y")])
    plan = dag.plan(
        graph, {"a": NodeState.SUCCEEDED, "b": NodeState.FAILED, "x": NodeState.SUCCEEDED}
    )
    assert plan.block == ("c",)
    assert plan.dispatch == ("y",)  # the independent branch goes on
    assert plan.failed == ("b",)


def test_retry_failed_rewinds_failed_and_blocked_only() -> None:
    states = {"a": NodeState.SUCCEEDED, "b": NodeState.FAILED, "c": NodeState.BLOCKED}
    assert dag.retry_failed(dag.validate(["a", "b", "c"], [("a", "b"), ("b", "c")]), states) == {
        "a": NodeState.SUCCEEDED,
        "b": NodeState.WAITING,
        "c": NodeState.WAITING,
    }


def test_complete_when_every_node_finished() -> None:
    graph = dag.validate(*DIAMOND)
    done = dict.fromkeys(DIAMOND[0], NodeState.SUCCEEDED)
    assert dag.plan(graph, done).complete


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10_000), size=st.integers(min_value=1, max_value=60))
def test_walking_any_dag_by_the_plan_runs_every_node_once_after_its_parents(
    seed: int, size: int
) -> None:
    rng = random.Random(seed)
    nodes = [f"n{i}" for i in range(size)]
    edges = [(nodes[i], nodes[j]) for j in range(size) for i in range(j) if rng.random() < 0.15]
    graph = dag.validate(nodes, edges)
    states: dict[str, NodeState] = {}
    order: list[str] = []
    while not (plan := dag.plan(graph, states)).complete:
        assert plan.dispatch, "a run that is not complete must have something ready"
        node = rng.choice(plan.dispatch)  # any ready node may finish first
        order.append(node)
        states[node] = NodeState.SUCCEEDED
    assert sorted(order) == sorted(nodes)
    position = {n: i for i, n in enumerate(order)}
    assert all(position[p] < position[c] for p, c in edges)


def test_on_success_releases_a_child_when_its_last_parent_succeeds() -> None:
    graph = dag.validate(*DIAMOND)
    counters = graph.unfinished_parents()
    assert dag.on_success(graph, counters, "a") == ["b", "c"]
    assert dag.on_success(graph, counters, "b") == []
    assert counters["d"] == 1
    assert dag.on_success(graph, counters, "c") == ["d"]
