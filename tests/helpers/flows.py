"""Workflow runs driven end to end: the controller, the workers and their queues.

``Flow`` plays what Lambda does in AWS: it receives the controller's events and the
class queues' messages, hands each to the controller or a worker, and deletes what was
processed. It works on any adapters (memory or moto), so the same scenarios run on both.
A ledger records every node side effect, so a test can tell "ran once in effect" from
"ran twice".
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fireline import ports
from fireline.adapters import memory
from fireline.domain import signing, workflow
from fireline.services import targets, workflows
from fireline.services import worker as worker_service

START = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
# Every tenant's webhook signing key in these systems (the deployed one has a key per tenant).
SIGNING_KEY = signing.SigningKey("sig_test", "test-signing-secret-0123456789", created_ms=0)


def signing_key(tenant_id: str) -> signing.SigningKey:
    return SIGNING_KEY


def counting_worker(
    *,
    schedules: ports.ScheduleStore,
    occurrences: ports.OccurrenceStore,
    queue: ports.WorkQueue,
    clock: ports.Clock,
    handlers: dict[str, Callable[[targets.JobContext], Any]],
) -> worker_service.Worker:
    """A default-class worker on these stores that runs Python targets ``handlers``, with
    one-off jobs' quota counted and no tenant limit (its slots are another test's)."""
    registry = targets.Registry()
    for name, handler in handlers.items():
        registry.register(name)(handler)
    return worker_service.Worker(
        schedules=schedules,
        occurrences=occurrences,
        queue=queue,
        slots=memory.MemorySlotStore(),
        clock=clock,
        runner=targets.TargetRunner(
            registry=registry,
            signing_key=signing_key,
            lambda_client=lambda timeout, credentials: None,
            sqs_client=lambda credentials: None,
        ),
        config=worker_service.WorkerConfig(tenant_limit=0, jobs_counted=True),
    )


# --- graphs the tests share --------------------------------------------------------------

DIAMOND = (["a", "b", "c", "d"], [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
ETL_NODES = ["source", "extract", "validate", "transform", "load", "audit", "cleanup"]
ETL_EDGES = [
    ("source", "extract"),
    ("source", "validate"),
    ("extract", "transform"),
    ("validate", "transform"),
    ("transform", "load"),
    ("load", "audit"),
    *[(n, "cleanup") for n in ETL_NODES if n != "cleanup"],
]


def wide_dag(size: int, seed: int = 7) -> tuple[list[str], list[tuple[str, str]]]:
    """Layers of random width; each node has 1-3 parents in earlier layers."""
    rng = random.Random(seed)
    names = [f"n{i:05d}" for i in range(size)]
    edges: set[tuple[str, str]] = set()
    for index in range(1, size):
        for _ in range(rng.randint(1, 3)):
            edges.add((names[rng.randrange(max(0, index - 60), index)], names[index]))
    return names, sorted(edges)


def assert_dependency_order(order: list[str], edges: list[tuple[str, str]]) -> None:
    position = {n: i for i, n in enumerate(order)}
    for parent, child in edges:
        assert position[parent] < position[child], f"{child} ran before its parent {parent}"


@dataclass
class Ledger:
    """Side effects of node jobs, keyed by the occurrence key (the idempotency key a
    real handler would use) and by node."""

    effects: Counter[str] = field(default_factory=Counter)  # node id -> effects applied
    attempts: Counter[str] = field(default_factory=Counter)  # node id -> attempts made
    order: list[str] = field(default_factory=list)  # node ids in the order they succeeded
    seen_keys: set[str] = field(default_factory=set)
    failing: dict[str, int] = field(default_factory=dict)  # node id -> failures left
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, context: targets.JobContext) -> dict[str, Any]:
        node_id = context.payload["node"]
        with self.lock:
            self.attempts[node_id] += 1
            if self.failing.get(node_id, 0) > 0:
                self.failing[node_id] -= 1
                raise targets.TargetFailed(f"{node_id} failed on purpose")
            if context.occurrence_key not in self.seen_keys:  # an idempotent handler
                self.seen_keys.add(context.occurrence_key)
                self.effects[node_id] += 1
                self.order.append(node_id)
        return {"node": node_id}


def node(node_id: str, **extra: Any) -> workflow.NodeSpec:
    """A node whose job records itself in the ledger (handler "ledger")."""
    return workflow.NodeSpec(
        node_id=node_id,
        target={"type": "python", "handler": "ledger"},
        payload={"node": node_id},
        **extra,
    )


@dataclass
class Flow:
    store: ports.WorkflowStore
    documents: ports.DocumentStore
    occurrences: ports.OccurrenceStore
    queue: ports.WorkQueue
    slots: ports.SlotStore
    schedules: ports.ScheduleStore
    clock: memory.FakeClock
    ledger: Ledger = field(default_factory=Ledger)

    def __post_init__(self) -> None:
        self.definitions = workflows.Definitions(self.store, self.documents)
        self.service = workflows.WorkflowService(
            store=self.store,
            documents=self.documents,
            queue=self.queue,
            clock=self.clock,
            definitions=self.definitions,
        )
        self.controller = self.make_controller()
        self.registry = targets.Registry()
        self.registry.register("ledger")(self.ledger.run)
        self.nodes = workflows.NodeJobs(
            store=self.store, definitions=self.definitions, queue=self.queue
        )
        runner = self.runner = targets.TargetRunner(
            registry=self.registry,
            signing_key=signing_key,
            lambda_client=lambda timeout, credentials: None,
            sqs_client=lambda credentials: None,
            workflows=lambda: self.service,
        )
        self.workers = {
            job_class: worker_service.Worker(
                schedules=self.schedules,
                occurrences=self.occurrences,
                queue=self.queue,
                slots=self.slots,
                clock=self.clock,
                runner=runner,
                config=worker_service.WorkerConfig(job_class=job_class, tenant_limit=0),
                nodes=self.nodes,
            )
            for job_class in ("default", "short")
        }
        self.events: Counter[str] = Counter()

    def make_controller(self, store: ports.WorkflowStore | None = None) -> workflows.Controller:
        return workflows.Controller(
            store=store or self.store,
            documents=self.documents,
            occurrences=self.occurrences,
            queue=self.queue,
            clock=self.clock,
            definitions=self.definitions,
        )

    @classmethod
    def on_memory(cls) -> Flow:
        clock = memory.FakeClock(START)
        return cls(
            store=memory.MemoryWorkflowStore(),
            documents=memory.MemoryDocumentStore(),
            occurrences=memory.MemoryOccurrenceStore(),
            queue=memory.MemoryWorkQueue(clock),
            slots=memory.MemorySlotStore(),
            schedules=memory.MemoryScheduleStore(),
            clock=clock,
        )

    def register(
        self, specs: list[workflow.NodeSpec], edges: list[tuple[str, str]], name: str = "wf"
    ) -> workflow.DefinitionMeta:
        return self.service.register("tenant-a", name, specs, edges)

    def start(self, name: str = "wf") -> workflow.Run:
        return self.service.start("tenant-a", name)

    def step(self, controller: Callable[[dict[str, Any]], Any] | None = None) -> int:
        """Process what is visible on every queue once; how many messages were handled."""
        handle = controller or self.controller.handle
        handled = 0
        for message in self.queue.receive(workflow.CONTROL_QUEUE, max_messages=10):
            self.events[message.body["type"]] += 1
            handle(message.body)
            self.queue.delete(workflow.CONTROL_QUEUE, message.receipt)
            handled += 1
        for job_class, worker in self.workers.items():
            for message in self.queue.receive(job_class, max_messages=10):
                try:
                    worker.handle(message.body, remaining_ms=lambda: 60_000)
                except worker_service.Busy:
                    continue  # left for a redelivery, as SQS would
                self.queue.delete(job_class, message.receipt)
                handled += 1
        return handled

    def drain(self, *, max_steps: int = 100_000, idle_advance: float = 5.0) -> None:
        """Run until every queue is empty for good (retries are delayed: time moves on
        while the queues are idle)."""
        idle = 0
        for _ in range(max_steps):
            if self.step():
                idle = 0
                continue
            idle += 1
            if idle > 400:  # 2,000 s of simulated idleness: nothing is pending
                return
            self.clock.advance(idle_advance)
        raise AssertionError("the run did not settle")

    def run_state(self, run: workflow.Run) -> workflow.RunState:
        found = self.store.get_run(run.run_id)
        assert found is not None
        return found.state


# --- crash points ------------------------------------------------------------------------


class Crash(Exception):
    pass


class CrashAfter:
    """Proxies the controller's stores and queue; raises right after the Nth write."""

    WRITES = frozenset(
        {"put_nodes", "update_run", "move_node", "succeed_node", "put_new", "send_batch"}
    )

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.writes = 0

    def wrap(self, target: Any) -> Any:
        crash = self

        class Proxy:
            def __getattr__(self, name: str) -> Any:
                attr = getattr(target, name)
                if name not in CrashAfter.WRITES:
                    return attr

                def write(*args: Any, **kwargs: Any) -> Any:
                    result = attr(*args, **kwargs)
                    crash.writes += 1
                    if crash.writes == crash.budget:
                        raise Crash(f"stopped after write {crash.writes} ({name})")
                    return result

                return write

        return Proxy()


def run_with_crash_points(
    make_flow: Callable[[], Flow], graph: tuple[list[str], list[tuple[str, str]]]
) -> int:
    """Run ``graph`` once per write of the controller, stopping the controller right after
    that write: the event it was handling is lost (received, never deleted), then one
    reconcile, then the rest. Each run must succeed with every node's effect once.
    Returns how many runs crashed (the loop ends with the first run that did not)."""
    names, edges = graph
    budget = 0
    while True:
        budget += 1
        flow = make_flow()
        name = f"crash{budget}"
        flow.register([node(n) for n in names], edges, name=name)
        run = flow.start(name)
        crash = CrashAfter(budget)
        faulty = workflows.Controller(
            store=crash.wrap(flow.store),
            documents=flow.documents,
            occurrences=crash.wrap(flow.occurrences),
            queue=crash.wrap(flow.queue),
            clock=flow.clock,
            definitions=flow.definitions,
        )
        crashed = False
        try:
            while flow.step(faulty.handle):
                pass
        except Crash:
            crashed = True
            while flow.queue.receive(workflow.CONTROL_QUEUE, max_messages=10):
                pass  # whatever the crashed controller had in hand is lost
            flow.controller.reconcile(run.run_id)
        flow.drain()
        where = f"crash after write {budget}"
        assert flow.run_state(run) is workflow.RunState.SUCCEEDED, where
        assert dict(flow.ledger.effects) == dict.fromkeys(names, 1), where
        position = {n: i for i, n in enumerate(flow.ledger.order)}
        assert all(position[p] < position[c] for p, c in edges), where
        if not crashed:
            return budget - 1
