"""Workflow graphs: validation, dependency counts, the ready set and the resume plan.

A workflow is nodes (each a job) and edges parent -> child: a child runs once every parent
succeeded. Pure logic, no I/O: the controller keeps node states and counters in its store
and asks this module what follows from them.

Limits: 100,000 nodes and 1,000,000 edges per workflow. Fan-in is unbounded (a node may
wait for every other node): the controller keeps a counter per node, not a parent list,
so no item grows with the fan-in.
"""

from __future__ import annotations

import enum
import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fireline.domain import errors

MAX_NODES = 100_000
MAX_EDGES = 1_000_000
NODE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


class NodeState(enum.StrEnum):
    WAITING = "waiting"  # some parent has not succeeded yet
    DISPATCHED = "dispatched"  # sent to its class's queue (queued or running there)
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # attempts exhausted
    BLOCKED = "blocked"  # an ancestor failed: it will not run unless retried
    CANCELLED = "cancelled"


FINISHED = frozenset(
    {NodeState.SUCCEEDED, NodeState.FAILED, NodeState.BLOCKED, NodeState.CANCELLED}
)


@dataclass(frozen=True)
class Graph:
    nodes: tuple[str, ...]  # in the order given
    parents: Mapping[str, tuple[str, ...]]
    children: Mapping[str, tuple[str, ...]]

    @property
    def edge_count(self) -> int:
        return sum(len(c) for c in self.children.values())

    def roots(self) -> list[str]:
        return [n for n in self.nodes if not self.parents[n]]

    def unfinished_parents(self) -> dict[str, int]:
        """The counter each node starts with: how many parents it waits for."""
        return {n: len(self.parents[n]) for n in self.nodes}


def validate(nodes: Sequence[str], edges: Sequence[tuple[str, str]]) -> Graph:
    """Check a definition; a typed error names what is wrong (and the cycle, if any)."""
    if not nodes:
        raise errors.ValidationError("a workflow needs at least one node", field="nodes")
    if len(nodes) > MAX_NODES:
        raise errors.ValidationError(f"{len(nodes)} nodes; the limit is {MAX_NODES}", field="nodes")
    if len(edges) > MAX_EDGES:
        raise errors.ValidationError(f"{len(edges)} edges; the limit is {MAX_EDGES}", field="edges")
    seen: set[str] = set()
    for index, node in enumerate(nodes):
        if not isinstance(node, str) or not NODE_ID.match(node):
            raise errors.ValidationError(
                f"{node!r} is not a node id (1-128 of A-Z a-z 0-9 _ . : -)", field=f"nodes[{index}]"
            )
        if node in seen:
            raise errors.ValidationError(f"duplicate node id {node!r}", field=f"nodes[{index}]")
        seen.add(node)
    parents: dict[str, list[str]] = {n: [] for n in nodes}
    children: dict[str, list[str]] = {n: [] for n in nodes}
    pairs: set[tuple[str, str]] = set()
    for index, (parent, child) in enumerate(edges):
        for end in (parent, child):
            if end not in seen:
                raise errors.ValidationError(
                    f"edge {parent!r} -> {child!r} names no node {end!r}", field=f"edges[{index}]"
                )
        if (parent, child) in pairs:
            raise errors.ValidationError(
                f"duplicate edge {parent!r} -> {child!r}", field=f"edges[{index}]"
            )
        pairs.add((parent, child))
        parents[child].append(parent)
        children[parent].append(child)
    graph = Graph(
        nodes=tuple(nodes),
        parents={n: tuple(p) for n, p in parents.items()},
        children={n: tuple(c) for n, c in children.items()},
    )
    cycle = find_cycle(graph)
    if cycle:
        raise errors.ValidationError(
            "the graph has a cycle: " + " -> ".join([*cycle, cycle[0]]), field="edges"
        )
    return graph


def find_cycle(graph: Graph) -> list[str] | None:
    """One cycle's nodes in order, or None. Iterative (a 100,000-node chain is fine)."""
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(graph.nodes, white)
    for start in graph.nodes:
        if color[start] != white:
            continue
        path: list[str] = []
        stack: list[tuple[str, int]] = [(start, 0)]
        while stack:
            node, child_index = stack.pop()
            if child_index == 0:
                color[node] = grey
                path.append(node)
            kids = graph.children[node]
            if child_index < len(kids):
                stack.append((node, child_index + 1))
                child = kids[child_index]
                if color[child] == grey:
                    return path[path.index(child) :]
                if color[child] == white:
                    stack.append((child, 0))
            else:
                color[node] = black
                path.pop()
    return None


def on_success(graph: Graph, counters: dict[str, int], node: str) -> list[str]:
    """Decrement each child's unfinished-parent counter for ``node``'s success; the
    children that became ready (their counter reached zero). The controller applies the
    same step in its store, once per (parent, child) edge."""
    ready = []
    for child in graph.children[node]:
        counters[child] -= 1
        if counters[child] == 0:
            ready.append(child)
    return ready


def descendants(graph: Graph, node: str) -> set[str]:
    found: set[str] = set()
    todo = deque(graph.children[node])
    while todo:
        child = todo.popleft()
        if child not in found:
            found.add(child)
            todo.extend(graph.children[child])
    return found


@dataclass(frozen=True)
class Plan:
    """What a reconcile must do so the run converges from whatever state it is in."""

    dispatch: tuple[str, ...]  # every parent succeeded, not yet sent
    block: tuple[str, ...]  # an ancestor failed, not yet marked
    counters: Mapping[str, int]  # each waiting node's true count of unfinished parents
    complete: bool  # nothing left to run or wait for
    failed: tuple[str, ...]


def plan(graph: Graph, states: Mapping[str, NodeState]) -> Plan:
    """Recompute from persisted node states alone (no counter is trusted): a lost
    decrement, a lost dispatch or a controller crash between any two writes is repaired
    by doing what this says, and doing it twice changes nothing."""
    counters: dict[str, int] = {}
    dispatch: list[str] = []
    block: list[str] = []
    failed_roots = [n for n in graph.nodes if states.get(n) is NodeState.FAILED]
    doomed: set[str] = set()
    for node in failed_roots:
        doomed |= descendants(graph, node)
    for node in graph.nodes:
        state = states.get(node, NodeState.WAITING)
        if state is not NodeState.WAITING:
            continue
        if node in doomed:
            block.append(node)
            continue
        waiting = sum(1 for p in graph.parents[node] if states.get(p) is not NodeState.SUCCEEDED)
        counters[node] = waiting
        if waiting == 0:
            dispatch.append(node)
    unfinished = any(states.get(n, NodeState.WAITING) not in FINISHED for n in graph.nodes)
    return Plan(
        dispatch=tuple(dispatch),
        block=tuple(block),
        counters=counters,
        complete=not unfinished and not dispatch and not block,
        failed=tuple(failed_roots),
    )


def retry_failed(graph: Graph, states: Mapping[str, NodeState]) -> dict[str, NodeState]:
    """States after "retry failed": failed and blocked nodes wait again; nothing that
    succeeded is touched."""
    return {
        n: NodeState.WAITING if s in (NodeState.FAILED, NodeState.BLOCKED) else s
        for n, s in states.items()
    }


def levels(graph: Graph) -> list[list[str]]:
    """Nodes grouped by depth (longest path from a root): the precomputed-levels way of
    running a DAG, which waits for a whole level before starting the next. Kept for the
    benchmark that compares it with the graph walk."""
    depth: dict[str, int] = {}
    indegree = {n: len(graph.parents[n]) for n in graph.nodes}
    todo = deque(n for n in graph.nodes if indegree[n] == 0)
    for n in todo:
        depth[n] = 0
    while todo:
        node = todo.popleft()
        for child in graph.children[node]:
            depth[child] = max(depth.get(child, 0), depth[node] + 1)
            indegree[child] -= 1
            if indegree[child] == 0:
                todo.append(child)
    grouped: dict[int, list[str]] = {}
    for node, d in depth.items():
        grouped.setdefault(d, []).append(node)
    return [grouped[d] for d in sorted(grouped)]


def around(graph: Graph, focus: Sequence[str], limit: int) -> list[str]:
    """At most ``limit`` nodes to draw of a large graph: the focus nodes (the failures)
    first, then their parents and children breadth first, then the graph's nodes in order
    to fill what is left. With no focus, the roots start the walk."""
    chosen: dict[str, None] = {}
    todo = deque(n for n in focus if n in graph.parents)
    if not todo:
        todo.extend(graph.roots())
    while todo and len(chosen) < limit:
        node = todo.popleft()
        if node in chosen:
            continue
        chosen[node] = None
        todo.extend(graph.parents[node])
        todo.extend(graph.children[node])
    for node in graph.nodes:
        if len(chosen) >= limit:
            break
        chosen.setdefault(node, None)
    return list(chosen)
