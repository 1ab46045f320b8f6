"""Workflow runs: the controller that walks a DAG, and the use cases the API offers.

The controller reacts to events on its own queue (``workflow``):

- ``start``: write the run's node rows (in slices, resumable), then dispatch the roots;
- ``node_done``: a node's occurrence settled (the worker sends it after every outcome,
  and again on a redelivery): on success, decrement each child's unfinished-parent
  counter and dispatch every child that reached zero; on a dead occurrence, fail the node
  and block its descendants; then, if nothing is left, record the run's end once;
- ``cancel``: mark the waiting nodes of a cancelled run;
- ``retry``: move a retried run's failed and blocked nodes back to waiting, then dispatch;
- ``reconcile``: recompute from persisted node states what must be dispatched, failed,
  blocked or completed (run on demand and periodically).

Nodes run as ordinary occurrences through the per-class queues and workers, with the same
idempotency, retries and deadlines as any job. It is a graph walk: a child is dispatched
when its own parents are done, so a slow node delays only its descendants.

Order of writes, and why a crash between any two of them is safe:

1. a node's move waiting -> dispatched (conditional: of two controllers, one dispatches),
2. its message (a repeat is harmless: the worker's claim is conditional, and writes the
   occurrence row: the controller writes none, as the ticker writes none for a fire).
A crash after 1 leaves a dispatched node without a message: the reconcile (and a
redelivered event) sends it again.

A node's success is applied in steps of up to 99 children: the first moves it dispatched
-> succeeded, the next ones need its fan-out cursor at their index; each advances the
cursor (a conditional write) and then decrements that step's children, one plain write
each. Only the writer whose move applied decrements, so a completion processed twice
decrements nothing; a crash after a move leaves counters too high, never too low (the
reconcile dispatches from the parents' states), and one between steps resumes at the
cursor. No item grows with the fan-in: a child keeps a counter, not a list of parents.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger

from fireline import ports
from fireline.domain import aws_target, dag, errors, model, occurrence, quota, workflow
from fireline.domain import egress as egress_rules
from fireline.domain import target as target_rules
from fireline.services import dispatch
from fireline.services import schedules as schedules_service

if TYPE_CHECKING:  # long_jobs imports this module (NodeJobs)
    from fireline.services import long_jobs as long_jobs_service

logger = Logger(service="fireline", child=True)

NodeState = dag.NodeState
UPLOAD_EXPIRES_SECONDS = 900
# An uploaded definition: the POST policy's content-length-range, and what the API reads.
MAX_UPLOAD_BYTES = 64 * 1024 * 1024
UPLOAD_CONTENT_TYPE = "application/json"
# Node rows written per step of a start, and fan-out transactions per event: bounded work
# per event, so a 100,000-node start or fan-out continues in a fresh event instead of
# running into a Lambda timeout.
START_SLICE = 5_000
FANOUT_BUDGET = 100
RESET_BUDGET = 5_000


class _NoMetrics:
    def add_metric(self, name: str, unit: str, value: float) -> None:
        return None


class Definitions:
    """Definitions by (tenant, workflow, version), cached: versions never change."""

    def __init__(
        self, store: ports.WorkflowStore, documents: ports.DocumentStore, size: int = 8
    ) -> None:
        self.store = store
        self.documents = documents
        self._cache: OrderedDict[tuple[str, str, int], workflow.Definition] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, tenant_id: str, workflow_id: str, version: int) -> workflow.Definition:
        key = (tenant_id, workflow_id, version)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        meta = self.store.get_definition(tenant_id, workflow_id, version)
        raw = self.documents.get(meta.document_key) if meta is not None else None
        if raw is None:
            raise errors.NotFound(f"workflow {workflow_id!r} version {version} has no document")
        assert meta is not None  # a document was read by its key
        # The key names the document's digest: a document changed after registration (an
        # object store or emulator that let a write past the upload's conditions) would
        # otherwise run as the version its owner registered.
        if meta.digest and hashlib.sha256(raw).hexdigest()[: len(meta.digest)] != meta.digest:
            logger.error(
                "workflow definition corrupt",
                extra={"action": "workflow.corrupt", "key": meta.document_key},
            )
            raise errors.CorruptDefinition(
                f"workflow {workflow_id!r} version {version}: its stored document does not "
                "match its digest; register it again"
            )
        found = workflow.Definition.from_document(tenant_id, workflow_id, version, raw)
        with self._lock:
            self._cache[key] = found
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return found

    def remember(self, definition: workflow.Definition) -> None:
        with self._lock:
            key = (definition.tenant_id, definition.workflow_id, definition.version)
            self._cache[key] = definition


def event(kind: str, run: workflow.Run | str, **fields: Any) -> ports.OutboundMessage:
    run_id = run if isinstance(run, str) else run.run_id
    return ports.OutboundMessage(body={"type": kind, "run_id": run_id, **fields})


def send_events(queue: ports.WorkQueue, messages: Sequence[ports.OutboundMessage]) -> None:
    for start in range(0, len(messages), 10):
        batch = [replace(m, id=str(i)) for i, m in enumerate(messages[start : start + 10])]
        failed = queue.send_batch(workflow.CONTROL_QUEUE, batch)
        if failed:  # one more try for the entries SQS refused, then a loud failure
            again = [m for m in batch if m.id in failed]
            if queue.send_batch(workflow.CONTROL_QUEUE, again):
                raise errors.Unavailable("workflow events could not be sent")


@dataclass
class Report:
    """What one controller step did (for logs, tests and the reconcile's answer)."""

    dispatched: list[str] = field(default_factory=list)
    resent: list[str] = field(default_factory=list)
    succeeded: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    transactions: int = 0
    continued: bool = False  # the rest was handed to a follow-up event
    finished: workflow.RunState | None = None
    leaves_done: int | None = None  # the run's finished leaves, as last counted here


class Controller:
    def __init__(
        self,
        *,
        store: ports.WorkflowStore,
        documents: ports.DocumentStore,
        occurrences: ports.OccurrenceStore,
        queue: ports.WorkQueue,
        clock: ports.Clock,
        metrics: ports.Metrics | None = None,
        definitions: Definitions | None = None,
        start_slice: int = START_SLICE,
        fanout_budget: int = FANOUT_BUDGET,
        reset_budget: int = RESET_BUDGET,
        long_jobs: long_jobs_service.LongJobs | None = None,
    ) -> None:
        self.reset_budget = reset_budget
        self.long_jobs = long_jobs
        self.store = store
        self.occurrences = occurrences
        self.queue = queue
        self.clock = clock
        self.metrics = metrics or _NoMetrics()
        self.definitions = definitions or Definitions(store, documents)
        self.start_slice = start_slice
        self.fanout_budget = fanout_budget

    # --- events ----------------------------------------------------------------------------

    def handle(self, body: dict[str, Any]) -> Report:
        kind = body.get("type")
        run_id = body.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            raise errors.ValidationError("a workflow event names its run", field="run_id")
        if kind == "start":
            return self.start(run_id)
        if kind == "node_done":
            node_id, generation = body.get("node_id"), body.get("generation")
            if not isinstance(node_id, str) or not isinstance(generation, int):
                raise errors.ValidationError(
                    "node_done needs node_id and generation", field="node_id"
                )
            return self.node_done(run_id, node_id, generation)
        if kind == "cancel":
            return self.cancel_nodes(run_id)
        if kind == "reconcile":
            return self.reconcile(run_id)
        if kind == "retry":
            return self.reset_failed(run_id)
        raise errors.ValidationError(f"unknown workflow event {kind!r}", field="type")

    def start(self, run_id: str) -> Report:
        """Write the node rows (resuming at ``materialized``), then dispatch the roots."""
        report = Report()
        run = self.store.get_run(run_id)
        if run is None or run.state is not workflow.RunState.RUNNING:
            return report
        try:
            definition = self._definition(run)
        except errors.CorruptDefinition:
            self._end_unrunnable(run, report)
            return report
        graph = definition.graph
        while run.materialized < run.total:
            begin = run.materialized
            names = graph.nodes[begin : begin + self.start_slice]
            self.store.put_nodes(
                run_id,
                [
                    workflow.RunNode(n, pending=len(graph.parents[n]), generation=run.generation)
                    for n in names
                ],
            )
            advanced = replace(run, materialized=begin + len(names))
            if not self.store.update_run(
                advanced,
                expected_state=run.state,
                expected_generation=run.generation,
                expected_materialized=begin,
            ):
                return report  # another start is writing the rows
            run = advanced
            if run.materialized < run.total:
                send_events(self.queue, [event("start", run)])
                report.continued = True
                return report
        roots = self.store.get_nodes(run_id, graph.roots())
        self._dispatch(run, definition, list(roots.values()), report, repair=True)
        return report

    def node_done(self, run_id: str, node_id: str, generation: int) -> Report:
        """Apply a settled node occurrence to the run (idempotent: safe to repeat)."""
        report = Report()
        run = self.store.get_run(run_id)
        if run is None:
            return report
        node = self.store.get_nodes(run_id, [node_id]).get(node_id)
        if node is None or node.generation != generation:
            return report  # a stale event: the node was reset by "retry failed"
        row = self.occurrences.get(workflow.node_occurrence_key(run, node))
        if row is None or row.state not in occurrence.SETTLED:
            return report  # not finished (a long job in flight, a retry pending)
        definition = self._definition(run)
        if row.state is occurrence.State.SUCCEEDED:
            self._succeed(run, definition, node, report)
        elif row.state is occurrence.State.DEAD:
            self._fail(run, definition, node, report)
        elif node.state is NodeState.DISPATCHED and self.store.move_node(
            run_id, node_id, expected=NodeState.DISPATCHED, to=NodeState.CANCELLED
        ):  # skipped or cancelled: not wanted now
            report.cancelled.append(node_id)
            self._leaf_finished(run, definition, node_id, report)
        if not report.dispatched and run.state is workflow.RunState.RUNNING:
            self._finish_if_done(run, report)
        return report

    def cancel_nodes(self, run_id: str) -> Report:
        """A cancelled run's waiting nodes become cancelled, and its running long nodes'
        executions are stopped. Queued ones are skipped by the worker when their message
        arrives (it checks the run); a short job already running finishes its attempt."""
        report = Report()
        run = self.store.get_run(run_id)
        if run is None or run.state is not workflow.RunState.CANCELLED:
            return report
        # The node rows, not the state index: a node the index has not seen move (it
        # lags) would keep waiting, or its long job running, under a cancelled run.
        for node in self.store.all_nodes(run_id):
            if node.state is NodeState.DISPATCHED and not self._stop_long(run, node):
                continue
            if node.state in (NodeState.WAITING, NodeState.DISPATCHED) and self.store.move_node(
                run_id, node.node_id, expected=node.state, to=NodeState.CANCELLED
            ):
                report.cancelled.append(node.node_id)
        return report

    def _stop_long(self, run: workflow.Run, node: workflow.RunNode) -> bool:
        """Stop a dispatched node's long-job execution; True when it was stopped here."""
        if self.long_jobs is None:
            return False
        row = self.occurrences.get(workflow.node_occurrence_key(run, node))
        if row is None or row.state is not occurrence.State.RUNNING or not row.execution:
            return False
        return self.long_jobs.cancel(row)

    def reset_failed(self, run_id: str) -> Report:
        """ "Retry failed", the controller's half: failed and blocked nodes wait again (a
        new generation each), at most ``reset_budget`` per event, then what is ready is
        dispatched. Safe to repeat: only nodes still failed or blocked move."""
        report = Report()
        run = self.store.get_run(run_id)
        if run is None or run.state is not workflow.RunState.RUNNING or not run.resetting:
            return report
        definition = self._definition(run)
        rows = {r.node_id: r for r in self.store.all_nodes(run_id)}
        again = dag.retry_failed(definition.graph, {n: r.state for n, r in rows.items()})
        moved = 0
        for node_id, state in again.items():
            row = rows[node_id]
            if state is not NodeState.WAITING or row.state is NodeState.WAITING:
                continue
            if moved == self.reset_budget:
                send_events(self.queue, [event("retry", run)])
                report.continued = True
                return report
            pending = sum(
                1
                for p in definition.graph.parents[node_id]
                if again.get(p) is not NodeState.SUCCEEDED
            )
            self.store.move_node(
                run_id,
                node_id,
                expected=row.state,
                to=NodeState.WAITING,
                generation=row.generation + 1,
                pending=pending,
            )
            moved += 1
        # The new generation's count of finished leaves starts at those that succeeded
        # before (they will not finish again). Counted before the reset ends: a repeat
        # counts them twice, which costs the end's check a read, never the end itself.
        kept = sum(
            1
            for n, r in rows.items()
            if r.state is NodeState.SUCCEEDED and not definition.graph.children[n]
        )
        if kept:
            self.store.add_finished_leaves(run_id, run.generation, kept)
        if self.store.update_run(
            replace(run, resetting=False),
            expected_state=run.state,
            expected_generation=run.generation,
        ):
            return self.reconcile(run_id)
        return report

    def reconcile(self, run_id: str) -> Report:
        """Converge a running run from its persisted node states alone.

        Repairs, each idempotent: a start that stopped part-way; a dispatched node whose
        row or message was lost (put and sent again); a settled node whose completion was
        lost (applied now); a fan-out that stopped part-way (continued at its cursor); a
        child that every parent finished but that was never dispatched (a lost decrement);
        a descendant of a failed node not yet blocked; a run whose end was not recorded.
        """
        report = Report()
        run = self.store.get_run(run_id)
        if run is None:
            return report
        if run.state is workflow.RunState.CANCELLED:
            return self.cancel_nodes(run_id)
        if run.state is not workflow.RunState.RUNNING:
            return report
        if run.materialized < run.total:
            return self.start(run_id)
        if run.resetting:
            return self.reset_failed(run_id)
        definition = self._definition(run)
        rows = {r.node_id: r for r in self.store.all_nodes(run_id)}
        for node in rows.values():
            if node.state is NodeState.DISPATCHED:
                self._repair_dispatched(run, definition, node, report)
            elif node.state is NodeState.SUCCEEDED and node.fanout < definition.chunks(
                node.node_id
            ):
                self._succeed(run, definition, node, report)
            elif node.state is NodeState.FAILED:
                self._block_descendants(run, definition, node.node_id, report)
        rows = {r.node_id: r for r in self.store.all_nodes(run_id)}
        states = {n: r.state for n, r in rows.items()}
        plan = dag.plan(definition.graph, states)
        for node_id in plan.block:
            if self.store.move_node(
                run_id, node_id, expected=NodeState.WAITING, to=NodeState.BLOCKED
            ):
                report.blocked.append(node_id)
                self._leaf_finished(run, definition, node_id, report)
        # Parents all succeeded: dispatch whatever its counter says (a lost decrement
        # leaves it above zero; the parents' states are the truth).
        self._dispatch(run, definition, [rows[n] for n in plan.dispatch], report, ready_only=False)
        if not report.dispatched:
            self._finish_if_done(run, report, full=True)
        if any((report.dispatched, report.resent, report.succeeded, report.blocked)):
            logger.warning(
                "reconcile repaired a run",
                extra={
                    "action": "workflow.reconcile",
                    "run_id": run_id,
                    "dispatched": len(report.dispatched),
                    "resent": len(report.resent),
                    "blocked": len(report.blocked),
                },
            )
        return report

    def reconcile_active(self, *, limit: int = 100) -> int:
        """The periodic step: reconcile every running run; how many were looked at."""
        seen = 0
        cursor = None
        while True:
            page = self.store.active_runs(limit=limit, cursor=cursor)
            for run_id in page.items:
                try:
                    self.reconcile(run_id)
                except errors.FirelineError:
                    logger.exception("reconcile failed", extra={"run_id": run_id})
                seen += 1
            if page.cursor is None:
                return seen
            cursor = page.cursor

    # --- steps -----------------------------------------------------------------------------

    def _definition(self, run: workflow.Run) -> workflow.Definition:
        return self.definitions.get(run.tenant_id, run.workflow_id, run.version)

    def _end_unrunnable(self, run: workflow.Run, report: Report) -> None:
        """A run whose definition cannot be trusted ends failed before any node is written:
        redelivering its start would meet the same document."""
        failed = replace(
            run,
            state=workflow.RunState.FAILED,
            has_failures=True,
            finished_at=self.clock.now(),
        )
        # Conditional on the run as read: a cancel or another start that moved it first wins.
        if self.store.update_run(
            failed, expected_state=run.state, expected_generation=run.generation
        ):
            report.finished = workflow.RunState.FAILED
            self.metrics.add_metric("WorkflowRunsFailed", "Count", 1)

    def _succeed(
        self,
        run: workflow.Run,
        definition: workflow.Definition,
        node: workflow.RunNode,
        report: Report,
    ) -> None:
        node_id = node.node_id
        chunks = definition.chunks(node_id)
        redo = node.state is NodeState.SUCCEEDED
        if node.state is NodeState.DISPATCHED:
            kids = definition.chunk(node_id, 0) if chunks else ()
            if not self.store.succeed_node(run.run_id, node_id, chunk=0, children=kids):
                # Someone else applied it: carry on from where the row says.
                current = self.store.get_nodes(run.run_id, [node_id]).get(node_id)
                if current is None or current.state is not NodeState.SUCCEEDED:
                    return
                node, redo = current, True
            else:
                report.transactions += 1
                report.succeeded.append(node_id)
                node = replace(node, state=NodeState.SUCCEEDED, fanout=1 if chunks else 0)
                self._leaf_finished(run, definition, node_id, report)
                self._dispatch_ready(run, definition, kids, report)
        elif node.state is not NodeState.SUCCEEDED:
            return
        if run.state is not workflow.RunState.RUNNING:
            return  # a cancelled run records outcomes but starts nothing new
        if redo:
            # A repeat: the earlier pass may have decremented children and stopped
            # before dispatching them. Dispatching is conditional, so look again.
            done = definition.graph.children[node_id][: node.fanout * workflow.FANOUT_CHUNK]
            self._dispatch_ready(run, definition, done, report)
        budget = self.fanout_budget
        index = node.fanout
        while index < chunks:
            if budget == 0:
                send_events(
                    self.queue,
                    [event("node_done", run, node_id=node_id, generation=node.generation)],
                )
                report.continued = True
                return
            kids = definition.chunk(node_id, index)
            if self.store.succeed_node(run.run_id, node_id, chunk=index, children=kids):
                report.transactions += 1
                self._dispatch_ready(run, definition, kids, report)
                index += 1
                budget -= 1
                continue
            current = self.store.get_nodes(run.run_id, [node_id]).get(node_id)
            if current is None or current.fanout <= index:
                raise errors.ConflictError(f"fan-out of {node_id} did not advance")
            index = current.fanout  # another controller applied it: follow the cursor

    def _dispatch_ready(
        self,
        run: workflow.Run,
        definition: workflow.Definition,
        candidates: Sequence[str],
        report: Report,
    ) -> None:
        for start in range(0, len(candidates), 100):
            rows = self.store.get_nodes(run.run_id, candidates[start : start + 100])
            ready = [r for r in rows.values() if r.state is NodeState.WAITING and r.pending <= 0]
            self._dispatch(run, definition, ready, report)

    def _dispatch(
        self,
        run: workflow.Run,
        definition: workflow.Definition,
        nodes: Iterable[workflow.RunNode],
        report: Report,
        *,
        ready_only: bool = True,
        repair: bool = False,
    ) -> None:
        now = self.clock.now()
        outbound: list[dispatch.Outbound] = []
        for node in nodes:
            if node.state is NodeState.WAITING and self.store.move_node(
                run.run_id,
                node.node_id,
                expected=NodeState.WAITING,
                to=NodeState.DISPATCHED,
                ready_only=ready_only,
            ):
                report.dispatched.append(node.node_id)
            elif repair and node.state in (NodeState.WAITING, NodeState.DISPATCHED):
                current = self.store.get_nodes(run.run_id, [node.node_id]).get(node.node_id)
                if current is None or current.state is not NodeState.DISPATCHED:
                    continue
                node = current
            else:
                continue
            fresh = node.node_id in report.dispatched
            out = self._occurrence(run, definition, node, now, report, fresh=fresh)
            if out is not None:
                outbound.append(out)
        dispatch.send(self.queue, outbound, dispatch.DispatchReport())

    def _occurrence(
        self,
        run: workflow.Run,
        definition: workflow.Definition,
        node: workflow.RunNode,
        now: datetime,
        report: Report,
        *,
        fresh: bool = False,
    ) -> dispatch.Outbound | None:
        """The node's message; None when its row is past queued (its message did its
        work). A node this controller just moved to dispatched (``fresh``) has no row:
        the message is the hand-off, as a ticker's fire is, and the first delivery's
        claim writes the row (conditional on the key). The node row says it was
        dispatched, so a lost message is found by the reconcile (a dispatched node with
        no row, or a queued one) and sent again. ``fresh`` also skips the read for a
        caller that read the row itself."""
        assert run.created_at is not None
        spec = definition.specs[node.node_id]
        row = occurrence.new(
            tenant_id=run.tenant_id,
            schedule_id=workflow.node_schedule_id(run.run_id, node.node_id),
            version=node.generation,
            fire_time=run.created_at,
            job_class=spec.job_class,
            created_at=now,
        )
        if not fresh:
            existing = self.occurrences.get(row.key)
            if existing is not None and existing.state is not occurrence.State.QUEUED:
                return None
            if node.node_id not in report.dispatched:
                report.resent.append(node.node_id)
        message = ports.OutboundMessage(body=dispatch.job_message(row))
        return dispatch.Outbound(spec.job_class, row.key, message)

    def _repair_dispatched(
        self,
        run: workflow.Run,
        definition: workflow.Definition,
        node: workflow.RunNode,
        report: Report,
    ) -> None:
        row = self.occurrences.get(workflow.node_occurrence_key(run, node))
        if row is None or row.state is occurrence.State.QUEUED:
            # Its row read just now: the message goes again without a second read.
            out = self._occurrence(run, definition, node, self.clock.now(), report, fresh=True)
            report.resent.append(node.node_id)
            if out is not None:
                dispatch.send(self.queue, [out], dispatch.DispatchReport())
        elif row.state in occurrence.SETTLED:
            done = self.node_done(run.run_id, node.node_id, node.generation)
            for name in ("dispatched", "succeeded", "failed", "blocked", "cancelled"):
                getattr(report, name).extend(getattr(done, name))
            report.transactions += done.transactions

    def _fail(
        self,
        run: workflow.Run,
        definition: workflow.Definition,
        node: workflow.RunNode,
        report: Report,
    ) -> None:
        if node.state is NodeState.DISPATCHED:
            if self.store.move_node(
                run.run_id, node.node_id, expected=NodeState.DISPATCHED, to=NodeState.FAILED
            ):
                report.failed.append(node.node_id)
                self.metrics.add_metric("WorkflowNodesFailed", "Count", 1)
                self._leaf_finished(run, definition, node.node_id, report)
        elif node.state is not NodeState.FAILED:
            return
        self._note_failure(run)
        self._block_descendants(run, definition, node.node_id, report)

    def _note_failure(self, run: workflow.Run) -> None:
        """Record on the run that a node failed, so its end is "failed" whatever the
        node index shows at that moment."""
        for _ in range(10):
            current = self.store.get_run(run.run_id)
            if current is None or current.has_failures or current.state is not run.state:
                return
            if self.store.update_run(
                replace(current, has_failures=True),
                expected_state=current.state,
                expected_generation=current.generation,
            ):
                return
        raise errors.ConflictError(f"run {run.run_id} kept changing")

    def _block_descendants(
        self, run: workflow.Run, definition: workflow.Definition, node_id: str, report: Report
    ) -> None:
        doomed = sorted(dag.descendants(definition.graph, node_id))
        for start in range(0, len(doomed), 100):
            rows = self.store.get_nodes(run.run_id, doomed[start : start + 100])
            for row in rows.values():
                if row.state is NodeState.WAITING and self.store.move_node(
                    run.run_id, row.node_id, expected=NodeState.WAITING, to=NodeState.BLOCKED
                ):
                    report.blocked.append(row.node_id)
                    self._leaf_finished(run, definition, row.node_id, report)

    def _leaf_finished(
        self, run: workflow.Run, definition: workflow.Definition, node_id: str, report: Report
    ) -> None:
        """Count a leaf this controller just moved to a final state (once: only the
        writer whose move applied counts it)."""
        if not definition.graph.children[node_id]:
            report.leaves_done = self.store.add_finished_leaves(run.run_id, run.generation)

    def _finish_if_done(self, run: workflow.Run, report: Report, *, full: bool = False) -> None:
        """Record the run's end once, if no node is waiting or dispatched.

        The count of finished leaves answers "not yet" cheaply: a run is not over before
        every leaf has finished, and a leaf is counted once, after the move that finished
        it, so the count is never above the truth (one read, or none when this step
        counted a leaf). A crash between a leaf's move and its count leaves it short: the
        periodic reconcile (``full``) skips it and records that run's end. Its "every
        leaf" is not trusted either: a leaf blocked by a failure finishes before the
        other branches do. The end is decided on the node rows themselves, read
        consistently from the base table: about once per run.
        Finished node states are final within a generation, and a new generation ("retry
        failed") changes the run's generation, on which the end's write is conditional;
        so rows read page after page that are all finished were all finished at the end
        of the read.
        """
        if not full:
            done = report.leaves_done
            if done is None:
                done = self.store.finished_leaves(run.run_id, run.generation)
            if done < self._definition(run).leaves:
                return
        rows = self.store.all_nodes(run.run_id)
        if any(r.state in (NodeState.WAITING, NodeState.DISPATCHED) for r in rows):
            return
        current = self.store.get_run(run.run_id)
        if current is None or current.state is not workflow.RunState.RUNNING:
            return
        if current.materialized < current.total or current.resetting:
            return
        end = workflow.RunState.FAILED if current.has_failures else workflow.RunState.SUCCEEDED
        finished = replace(current, state=end, finished_at=self.clock.now())
        if self.store.update_run(
            finished, expected_state=current.state, expected_generation=current.generation
        ):
            report.finished = end
            self.metrics.add_metric(
                "WorkflowRunsSucceeded"
                if end is workflow.RunState.SUCCEEDED
                else "WorkflowRunsFailed",
                "Count",
                1,
            )
            logger.info(
                "workflow run finished",
                extra={"action": "workflow.finish", "run_id": run.run_id, "state": end.value},
            )


def new_run_id() -> str:
    return "r" + uuid.uuid4().hex[:24]


@dataclass(frozen=True)
class RunView:
    run: workflow.Run
    counts: dict[NodeState, int]
    failed_nodes: list[str]

    @property
    def progress(self) -> float:
        finished = sum(self.counts[s] for s in dag.FINISHED)
        return round(finished / self.run.total, 4) if self.run.total else 1.0


@dataclass(frozen=True)
class NodeView:
    node: workflow.RunNode
    exit_reason: str | None  # of the node's latest attempt; None before it has run


@dataclass(frozen=True)
class RunGraph:
    """What a picture of a run draws: some of its nodes (all of a small run), each with its
    state and its depth (longest path from a root), and the edges between them."""

    run: workflow.Run
    nodes: list[tuple[str, NodeState, int]]
    edges: list[tuple[str, str]]
    complete: bool  # every node of the run is here


RUN_STATES = tuple(s.value for s in workflow.RunState)


class WorkflowService:
    """What the API offers: register, start, inspect, cancel, retry, reconcile."""

    def __init__(
        self,
        *,
        store: ports.WorkflowStore,
        documents: ports.DocumentStore,
        queue: ports.WorkQueue,
        clock: ports.Clock,
        definitions: Definitions | None = None,
        egress: egress_rules.EgressPolicy = egress_rules.STRICT,
        aws_targets: aws_target.AwsTargetPolicy = aws_target.ROLES_ONLY,
        quotas: ports.QuotaStore | None = None,
        limits: Mapping[quota.Quota, int] | None = None,
        occurrences: ports.OccurrenceStore | None = None,
        handlers: Container[str] | None = None,
    ) -> None:
        self.store = store
        self.documents = documents
        # The Python handlers this deployment's workers run (None: not checked here).
        self.handlers = handlers
        self.queue = queue
        self.clock = clock
        # Where nodes' attempts are recorded (their exit reasons); None: not shown.
        self.occurrences = occurrences
        self.definitions = definitions or Definitions(store, documents)
        # What HTTP targets may name (the operator's widening of https-to-public-only).
        self.egress = egress
        # Whom AWS targets are called as: a tenant's role, or the operator's allowlist.
        self.aws_targets = aws_targets
        # Quota use and overrides, and the deployment's default quotas (None: not counted).
        self.quotas = quotas
        self.limits = limits if quotas is not None else None

    def _check_versions(self, tenant_id: str, version: int) -> quota.Charge | None:
        """Refuse a version past the tenant's quota of versions per workflow (counted by
        the version number: versions are never removed), before anything is written; a
        new workflow's charge, which its index entry takes."""
        if self.quotas is None or self.limits is None:
            return None
        usage = self.quotas.usage(tenant_id)
        versions = usage.limit(quota.Quota.WORKFLOW_VERSIONS, self.limits)
        if not quota.under(versions, version - 1):
            raise quota.exceeded(quota.Quota.WORKFLOW_VERSIONS, versions, version - 1)
        if version != 1:
            return None
        # Checked here too, so a refusal writes no document; the index entry's
        # transaction is what holds under a race (its loser's document stays unreferenced).
        workflows = usage.limit(quota.Quota.WORKFLOWS, self.limits)
        used = usage.count(quota.Quota.WORKFLOWS)
        if not quota.under(workflows, used):
            raise quota.exceeded(quota.Quota.WORKFLOWS, workflows, used)
        return quota.Charge(quota.Quota.WORKFLOWS, self.limits.get(quota.Quota.WORKFLOWS, 0))

    def register(
        self,
        tenant_id: str,
        workflow_id: str,
        specs: list[workflow.NodeSpec],
        edges: list[tuple[str, str]],
    ) -> workflow.DefinitionMeta:
        """Validate and store a new version (the first is 1). Bad input changes nothing."""
        checked: set[int] = set()  # nodes mostly share a few target dicts
        for index, spec in enumerate(specs):
            if id(spec.target) not in checked:
                target_rules.check(
                    spec.target,
                    tenant_id=tenant_id,
                    policy=self.egress,
                    aws=self.aws_targets,
                    field=f"nodes[{index}].target",
                )
                self._check_handler(spec.target, field=f"nodes[{index}].target.handler")
                checked.add(id(spec.target))
            model.check_deadline(
                spec.job_class, spec.deadline_seconds, field=f"nodes[{index}].deadline_seconds"
            )
        latest = self.store.latest_definition(tenant_id, workflow_id)
        version = (latest.version if latest else 0) + 1
        charge = self._check_versions(tenant_id, version)
        definition = workflow.Definition.build(tenant_id, workflow_id, version, specs, edges)
        document = definition.to_document()
        meta = workflow.DefinitionMeta(
            tenant_id=tenant_id,
            workflow_id=workflow_id,
            version=version,
            nodes=len(definition.graph.nodes),
            edges=definition.graph.edge_count,
            created_at=self.clock.now(),
            digest=hashlib.sha256(document).hexdigest()[:16],
        )
        # The document first: an index entry never points at a missing document.
        self.documents.put(meta.document_key, document)
        if not self.store.put_definition(meta, charge=charge):
            raise errors.ConflictError(
                f"workflow {workflow_id!r} version {version} was registered meanwhile; retry"
            )
        self.definitions.remember(definition)
        return meta

    def _check_handler(self, target: Mapping[str, Any], *, field: str) -> None:
        """A node naming a handler the workers do not have would fail every attempt of
        every run: refused at registration, as a schedule's or a job's is."""
        known = self.handlers
        if target.get("type") != "python" or known is None:
            return
        if target.get("handler") not in known:
            raise errors.ValidationError(
                f"no handler {target.get('handler')!r} is registered in this deployment",
                field=field,
            )

    def upload(self, tenant_id: str) -> tuple[str, ports.UploadForm]:
        """An upload id and the presigned POST to upload a large definition with; counted
        against the tenant's uploads per day (nothing else is written)."""
        if self.quotas is not None and self.limits is not None:
            self.quotas.count_upload(
                tenant_id,
                quota.day_of(self.clock.now()),
                quota.Charge(
                    quota.Quota.UPLOADS_PER_DAY,
                    self.limits.get(quota.Quota.UPLOADS_PER_DAY, quota.UNLIMITED),
                ),
            )
        upload_id = uuid.uuid4().hex
        form = self.documents.upload_form(
            upload_key(tenant_id, upload_id),
            expires_seconds=UPLOAD_EXPIRES_SECONDS,
            max_bytes=MAX_UPLOAD_BYTES,
            content_type=UPLOAD_CONTENT_TYPE,
        )
        return upload_id, form

    def uploaded(self, tenant_id: str, upload_id: str) -> bytes:
        """The uploaded document's bytes. Its size comes from its metadata first: one
        larger than the limit (put behind the POST policy's back) is refused unread, and
        the body is then read in chunks, never past the size checked."""
        if not upload_id.isalnum() or len(upload_id) > 64:
            raise errors.ValidationError("is not an upload id", field="upload_id")
        key = upload_key(tenant_id, upload_id)
        info = self.documents.describe(key)
        if info is None:
            raise errors.ValidationError(
                f"nothing was uploaded for {upload_id!r} (POST the definition with its form first)",
                field="upload_id",
            )
        limit = MAX_UPLOAD_BYTES
        if info.size > limit:
            raise errors.TooLarge(
                f"the uploaded definition is {info.size} bytes; the limit is {limit}",
                field="upload_id",
            )
        media = info.content_type.split(";", 1)[0].strip().lower()
        if media != UPLOAD_CONTENT_TYPE:
            raise errors.ValidationError(
                f"the upload is {media or 'untyped'}; it must be {UPLOAD_CONTENT_TYPE}",
                field="upload_id",
            )
        body = bytearray()
        for chunk in self.documents.chunks(key, etag=info.etag):
            body += chunk
            if len(body) > info.size:  # the store said otherwise: never read past it
                raise errors.ConflictError(f"upload {upload_id} changed while it was read")
        return bytes(body)

    def exists(self, tenant_id: str, workflow_id: str, version: int | None = None) -> bool:
        """Whether the tenant has the workflow (the given version, or any)."""
        if version is None:
            return self.store.latest_definition(tenant_id, workflow_id) is not None
        return self.store.get_definition(tenant_id, workflow_id, version) is not None

    def get(self, tenant_id: str, workflow_id: str) -> workflow.DefinitionMeta:
        meta = self.store.latest_definition(tenant_id, workflow_id)
        if meta is None:
            raise errors.NotFound(f"no workflow {workflow_id!r}")
        return meta

    def start(
        self,
        tenant_id: str,
        workflow_id: str,
        *,
        version: int | None = None,
        run_id: str | None = None,
        source: str | None = None,
    ) -> workflow.Run:
        meta = (
            self.store.get_definition(tenant_id, workflow_id, version)
            if version is not None
            else self.store.latest_definition(tenant_id, workflow_id)
        )
        if meta is None:
            what = (
                f"{workflow_id!r} version {version}" if version is not None else repr(workflow_id)
            )
            raise errors.NotFound(f"no workflow {what}")
        run = workflow.Run(
            tenant_id=tenant_id,
            run_id=run_id or new_run_id(),
            workflow_id=workflow_id,
            version=meta.version,
            total=meta.nodes,
            created_at=self.clock.now().replace(microsecond=0),
            source=source,
        )
        if not self.store.create_run(run):
            existing = self.store.get_run(run.run_id)
            if existing is None or existing.tenant_id != tenant_id:
                raise errors.AlreadyExists(f"run {run.run_id!r} exists")
            run = existing  # a repeated start (same source): the same run
        send_events(self.queue, [event("start", run)])
        return run

    def run(self, tenant_id: str, run_id: str) -> workflow.Run:
        found = self.store.get_run(run_id)
        if found is None or found.tenant_id != tenant_id:
            raise errors.NotFound(f"no run {run_id!r}")
        return found

    def catalog(
        self, tenant_id: str, *, limit: int, cursor: str | None = None
    ) -> ports.Page[workflow.DefinitionMeta]:
        """The tenant's workflows by id, each as its latest version.

        Reads: one Query on the tenant's catalog partition, ``limit`` rows a page."""
        return self.store.workflows(tenant_id, limit=limit, cursor=cursor)

    def runs(
        self,
        tenant_id: str,
        workflow_id: str,
        *,
        state: str | None = None,
        limit: int,
        cursor: str | None = None,
    ) -> ports.Page[workflow.Run]:
        """A workflow's runs, newest first, those in ``state`` only when given.

        Reads: Query on the workflow's runs partition and a BatchGetItem of those runs;
        a filtered page reads on, each read asking for what the page still lacks, at most
        MAX_LIST_READS reads of ``limit`` runs. A first page is empty only when no run is
        in that state, or those reads met none."""
        schedules_service.one_of(state, RUN_STATES)
        self.get(tenant_id, workflow_id)
        found: list[workflow.Run] = []
        for _ in range(schedules_service.MAX_LIST_READS):
            page = self.store.runs_of(
                tenant_id, workflow_id, limit=limit - len(found), cursor=cursor
            )
            found += [r for r in page.items if state is None or r.state.value == state]
            cursor = page.cursor
            if cursor is None or len(found) == limit:
                break
        return ports.Page(found, cursor)

    def view(self, tenant_id: str, run_id: str, *, failed_limit: int = 100) -> RunView:
        found = self.run(tenant_id, run_id)
        counts = self.store.count_states(run_id)
        # Rows not written yet (a start in progress) are waiting.
        counts[NodeState.WAITING] += found.total - sum(counts.values())
        failed = self.store.nodes_in_state(run_id, NodeState.FAILED, limit=failed_limit)
        return RunView(found, counts, [n.node_id for n in failed.items])

    def nodes(
        self,
        tenant_id: str,
        run_id: str,
        state: NodeState | None,
        *,
        limit: int,
        cursor: str | None = None,
    ) -> ports.Page[NodeView]:
        """A run's nodes by node id, those in ``state`` only when given, each with the
        exit reason of its latest attempt.

        Reads: with a state, Query on that state's partition of the ``by_state`` index
        (keys) and a BatchGetItem of the rows; without, Query on the run's partition.
        Then one BatchGetItem per 100 nodes of their occurrence rows (for the exit
        reasons)."""
        found = self.run(tenant_id, run_id)
        if state is None:
            page = self.store.nodes(run_id, limit=limit, cursor=cursor)
        else:
            page = self.store.nodes_in_state(run_id, state, limit=limit, cursor=cursor)
        # A waiting node has not run (this generation): it has no row to read.
        ran = {
            n.node_id: workflow.node_occurrence_key(found, n)
            for n in page.items
            if n.state is not NodeState.WAITING
        }
        rows = self.occurrences.get_many(list(ran.values())) if self.occurrences else {}
        views = []
        for node in page.items:
            row = rows.get(ran[node.node_id]) if node.node_id in ran else None
            views.append(NodeView(node, row.exit_reason if row else None))
        return ports.Page(views, page.cursor)

    def graph(self, tenant_id: str, run_id: str, *, limit: int) -> RunGraph:
        """A run's graph to draw: all of it up to ``limit`` nodes; past that, ``limit``
        nodes around its failures (or from its roots), with their states.

        Reads: the run, its definition (cached), then all its node rows (a run of at most
        ``limit`` nodes), or its first ``limit`` failed nodes and a BatchGetItem of the
        nodes chosen around them."""
        found = self.run(tenant_id, run_id)
        graph = self.definitions.get(tenant_id, found.workflow_id, found.version).graph
        if len(graph.nodes) <= limit:
            rows = {n.node_id: n for n in self.store.all_nodes(run_id)}
            chosen = list(graph.nodes)
        else:
            failed = self.store.nodes_in_state(run_id, NodeState.FAILED, limit=limit)
            chosen = dag.around(graph, [n.node_id for n in failed.items], limit)
            rows = self.store.get_nodes(run_id, chosen)
        depth = {n: d for d, level in enumerate(dag.levels(graph)) for n in level}
        kept = set(chosen)
        return RunGraph(
            run=found,
            # A row not written yet (a start in progress) is a waiting node.
            nodes=[
                (n, rows[n].state if n in rows else NodeState.WAITING, depth[n]) for n in chosen
            ],
            edges=[(p, c) for c in chosen for p in graph.parents[c] if p in kept],
            complete=len(chosen) == len(graph.nodes),
        )

    def cancel(self, tenant_id: str, run_id: str) -> workflow.Run:
        current = self.run(tenant_id, run_id)
        if current.state is workflow.RunState.CANCELLED:
            return current
        if current.state is not workflow.RunState.RUNNING:
            raise errors.ConflictError(f"run {run_id} is {current.state.value}")
        cancelled = replace(
            current, state=workflow.RunState.CANCELLED, finished_at=self.clock.now()
        )
        return self._move(current, cancelled, "cancel")

    def retry_failed(self, tenant_id: str, run_id: str) -> workflow.Run:
        """Re-run the failed and blocked nodes (each as a new generation, a new
        occurrence); nothing that succeeded runs again. The run is running again at once;
        the controller moves the nodes (a ``retry`` event, resumable) and dispatches."""
        current = self.run(tenant_id, run_id)
        if current.state is not workflow.RunState.FAILED:
            raise errors.ConflictError(
                f"run {run_id} is {current.state.value}; only a failed run is retried"
            )
        resumed = replace(
            current,
            state=workflow.RunState.RUNNING,
            generation=current.generation + 1,
            has_failures=False,
            resetting=True,
            finished_at=None,
        )
        return self._move(current, resumed, "retry")

    def _move(self, current: workflow.Run, changed: workflow.Run, then: str) -> workflow.Run:
        """Store the run's new state if nobody moved it meanwhile, then hand the rest to
        the controller (an event named ``then``)."""
        if not self.store.update_run(
            changed, expected_state=current.state, expected_generation=current.generation
        ):
            raise errors.ConflictError(f"run {current.run_id} changed meanwhile; retry")
        send_events(self.queue, [event(then, changed)])
        return changed

    def reconcile(self, tenant_id: str, run_id: str) -> workflow.Run:
        found = self.run(tenant_id, run_id)
        send_events(self.queue, [event("reconcile", found)])
        return found


def upload_key(tenant_id: str, upload_id: str) -> str:
    return f"uploads/{tenant_id}/{upload_id}.json"


class NodeJobs:
    """The worker's view of workflow nodes: the job a node occurrence runs (or why it is
    not wanted any more), and the completion event it sends after each outcome."""

    def __init__(
        self,
        *,
        store: ports.WorkflowStore,
        definitions: Definitions,
        queue: ports.WorkQueue,
    ) -> None:
        self.store = store
        self.definitions = definitions
        self.queue = queue

    def job_for(self, row: occurrence.Occurrence) -> tuple[model.Schedule | None, str | None]:
        parsed = workflow.parse_node_schedule_id(row.schedule_id)
        if parsed is None:
            return None, "not a workflow node"
        run_id, node_id = parsed
        run = self.store.get_run(run_id)
        if run is None or run.tenant_id != row.tenant_id:
            return None, "workflow run deleted"
        if run.state is workflow.RunState.CANCELLED:
            return None, "workflow run cancelled"
        node = self.store.get_nodes(run_id, [node_id]).get(node_id)
        if node is None or node.generation != row.version:
            return None, "stale node generation"
        if node.state is not NodeState.DISPATCHED:
            return None, f"node is {node.state.value}"
        try:
            definition = self.definitions.get(run.tenant_id, run.workflow_id, run.version)
        except errors.CorruptDefinition:
            return None, "workflow definition corrupt"
        return workflow.node_job(run, definition.specs[node_id], row.version), None

    def finished(self, key: str) -> None:
        parsed_key = occurrence.parse_key(key)
        parsed = workflow.parse_node_schedule_id(parsed_key.schedule_id)
        if parsed is None:
            return
        run_id, node_id = parsed
        send_events(
            self.queue,
            [event("node_done", run_id, node_id=node_id, generation=parsed_key.version)],
        )
