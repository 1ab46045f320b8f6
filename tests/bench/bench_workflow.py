"""A 100,000-node workflow run end to end on the memory adapters: the controller and the
real worker (claims, Powertools idempotency, outcomes) with a plain FIFO queue in place of
SQS (the memory queue's visibility bookkeeping is not what is measured here).

Prints the controller's time per node and the writes per node, by store, and records
them in .bench/report.json under workflow.* (tests/bench/report.py).
"""

from __future__ import annotations

import random
import time
from collections import Counter, deque
from collections.abc import Sequence
from typing import Any

from bench import report
from fireline import ports
from fireline.adapters import memory
from fireline.domain import workflow
from helpers.flows import Flow, node
from helpers.system import run_wide_dag_on_moto

OCCURRENCE_WRITES = frozenset({"put_new", "transition", "claim", "settle", "annotate_running"})


class FifoQueue:
    """Deliver-once queues: enough for a run with no crashes."""

    def __init__(self) -> None:
        self.queues: dict[str, deque[dict[str, Any]]] = {}
        self.requests = Counter[str]()

    def send_batch(self, job_class: str, messages: Sequence[ports.OutboundMessage]) -> list[str]:
        self.requests["SendMessageBatch"] += 1
        self.queues.setdefault(job_class, deque()).extend(m.body for m in messages)
        return []

    def pop(self, job_class: str) -> dict[str, Any] | None:
        queue = self.queues.get(job_class)
        return queue.popleft() if queue else None


class CountingOccurrences:
    def __init__(self, inner: memory.MemoryOccurrenceStore) -> None:
        self.inner = inner
        self.writes = Counter[str]()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in OCCURRENCE_WRITES:
            return attr

        def write(*args: Any, **kwargs: Any) -> Any:
            self.writes[name] += 1
            return attr(*args, **kwargs)

        return write


def wide_dag(size: int, seed: int = 5) -> tuple[list[str], list[tuple[str, str]]]:
    """Random and wide: layers of about 1,000 nodes, each node with 1-3 parents among the
    two layers above, a few nodes with a fan-out in the thousands."""
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(size)]
    edges: set[tuple[str, str]] = set()
    width = 1000
    for index in range(width, size):
        layer = (index // width) * width
        for parent in rng.sample(range(max(0, layer - 2 * width), layer), rng.randint(1, 3)):
            edges.add((names[parent], names[index]))
    for hub in range(0, size - width, size // 10):  # a few wide fan-outs
        for child in rng.sample(range(hub + width, size), 2000):
            edges.add((names[hub], names[child]))
    return names, sorted(edges)


def test_a_100000_node_workflow_completes_on_the_memory_adapters() -> None:
    clock = memory.FakeClock()
    store = memory.MemoryWorkflowStore()
    occurrences = CountingOccurrences(memory.MemoryOccurrenceStore())
    queue = FifoQueue()
    flow = Flow(
        store=store,
        documents=memory.MemoryDocumentStore(),
        occurrences=occurrences,  # type: ignore[arg-type]
        queue=queue,  # type: ignore[arg-type]
        slots=memory.MemorySlotStore(),
        schedules=memory.MemoryScheduleStore(),
        clock=clock,
    )
    names, edges = wide_dag(100_000)
    started = time.perf_counter()
    flow.register([node(n) for n in names], edges)
    registered = time.perf_counter() - started
    run = flow.start()
    worker = flow.workers["default"]
    controller_seconds = worker_seconds = 0.0
    events = Counter[str]()
    while True:
        if (body := queue.pop(workflow.CONTROL_QUEUE)) is not None:
            events[body["type"]] += 1
            tick = time.perf_counter()
            flow.controller.handle(body)
            controller_seconds += time.perf_counter() - tick
        elif (body := queue.pop("default")) is not None:
            tick = time.perf_counter()
            worker.handle(body, remaining_ms=lambda: 60_000)
            worker_seconds += time.perf_counter() - tick
        else:
            break
    final = store.get_run(run.run_id)
    assert final is not None and final.state is workflow.RunState.SUCCEEDED
    assert len(flow.ledger.effects) == 100_000 and set(flow.ledger.effects.values()) == {1}
    nodes = len(names)
    node_writes = store.writes["node"]
    occurrence_writes = sum(occurrences.writes.values())
    print(
        f"\n{nodes:,} nodes, {len(edges):,} edges (registered in {registered:.1f} s): "
        f"run succeeded, every node's effect once\n"
        f"controller: {controller_seconds:.1f} s over {sum(events.values()):,} events "
        f"({controller_seconds / nodes * 1e6:.0f} us per node); workers "
        f"{worker_seconds:.1f} s ({worker_seconds / nodes * 1e6:.0f} us per node)\n"
        f"writes per node: {node_writes / nodes:.2f} node-row item writes "
        f"(of which {len(edges) / nodes:.2f} are child decrements, one per edge) + "
        f"{occurrence_writes / nodes:.2f} occurrence writes ({dict(occurrences.writes)}) + "
        f"{store.writes['run'] / nodes:.4f} run writes; "
        f"SQS send requests per node {queue.requests['SendMessageBatch'] / nodes:.2f}"
    )
    report.record(
        "workflow.memory_100k",
        {
            "nodes": nodes,
            "edges": len(edges),
            "registered_seconds": round(registered, 1),
            "controller_us_per_node": round(controller_seconds / nodes * 1e6),
            "worker_us_per_node": round(worker_seconds / nodes * 1e6),
            "node_row_writes_per_node": round(node_writes / nodes, 2),
            "occurrence_writes_per_node": round(occurrence_writes / nodes, 2),
            "run_writes_per_node": round(store.writes["run"] / nodes, 4),
            "sqs_send_requests_per_node": round(queue.requests["SendMessageBatch"] / nodes, 2),
        },
    )


def test_a_2000_node_workflow_on_moto_counts_its_writes_per_node() -> None:
    """The figures of docs/workflows.md of a workflow on moto: item writes and requests per node."""
    per_node, requests = run_wide_dag_on_moto(2000)
    assert per_node > 0 and requests
    report.record(
        "workflow.moto_2000",
        {
            "nodes": 2000,
            "node_row_writes_per_node": round(per_node, 2),
            "requests_per_node": requests,
        },
    )
