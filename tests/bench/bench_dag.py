"""Workflow graphs at scale (memory only): validation and the walk of 100,000 nodes, and
graph walk against precomputed levels on a simulated clock. Prints figures."""

from __future__ import annotations

import heapq
import random
import time

from bench.report import record
from fireline.domain import dag


def wide_dag(size: int, seed: int = 7) -> tuple[list[str], list[tuple[str, str]]]:
    """Layers of a few hundred nodes; each node has 1-3 parents in the layers above."""
    rng = random.Random(seed)
    nodes = [f"n{i}" for i in range(size)]
    edges = []
    width = 500
    for i in range(width, size):
        layer_start = (i // width) * width
        for parent in rng.sample(
            range(max(0, layer_start - 2 * width), layer_start), rng.randint(1, 3)
        ):
            edges.append((nodes[parent], nodes[i]))
    return nodes, edges


def test_a_100000_node_workflow_validates_and_walks() -> None:
    nodes, edges = wide_dag(100_000)
    started = time.perf_counter()
    graph = dag.validate(nodes, edges)
    validated = time.perf_counter() - started
    counters = graph.unfinished_parents()
    ready = graph.roots()
    done = 0
    started = time.perf_counter()
    while ready:
        node = ready.pop()
        done += 1
        ready.extend(dag.on_success(graph, counters, node))
    walked = time.perf_counter() - started
    print(
        f"\n100,000 nodes, {graph.edge_count:,} edges: validated in {validated:.2f} s; "
        f"walked in {walked:.2f} s ({walked / done * 1e6:.1f} us of controller logic per node)"
    )
    assert done == 100_000


def test_graph_walk_against_precomputed_levels() -> None:
    nodes, edges = wide_dag(20_000, seed=3)
    graph = dag.validate(nodes, edges)
    rng = random.Random(11)
    # Variable durations: mostly short, a few slow nodes (a slow node should only delay
    # its own descendants).
    duration = {n: rng.choice([1, 1, 1, 2, 3]) + (60 if rng.random() < 0.01 else 0) for n in nodes}
    # Graph walk: a node starts when its last parent finishes (unbounded workers).
    finish: dict[str, float] = {}
    counters = graph.unfinished_parents()
    events = [(duration[n], n) for n in graph.roots()]
    heapq.heapify(events)
    while events:
        at, node = heapq.heappop(events)
        finish[node] = at
        for child in dag.on_success(graph, counters, node):
            start = max(finish[p] for p in graph.parents[child])
            heapq.heappush(events, (start + duration[child], child))
    walk = max(finish.values())
    # Levels: each level starts when the whole previous level finished.
    clock = 0.0
    for level in dag.levels(graph):
        clock += max(duration[n] for n in level)
    print(
        f"\n20,000-node wide DAG, {len(dag.levels(graph))} levels, 1% slow nodes (60 s): "
        f"graph walk makespan {walk:.0f} s, precomputed levels {clock:.0f} s "
        f"({clock / walk:.1f}x longer)"
    )
    record(
        "workflow.walk_against_levels",
        {
            "nodes": 20_000,
            "levels": len(dag.levels(graph)),
            "walk_makespan_seconds": round(walk),
            "levels_makespan_seconds": round(clock),
        },
    )
    assert walk <= clock
