"""The workflow controller on the memory adapters: order, failure, retry, crash points.

The same scenarios run on moto in tests/integration/test_workflows.py; here they are
cheap enough to try every crash point and larger graphs.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

import pytest

from fireline import ports
from fireline.domain import dag, errors, model, retry, schedule, workflow
from fireline.services import dispatch, targets, workflows
from helpers.flows import (
    DIAMOND,
    ETL_EDGES,
    ETL_NODES,
    Crash,
    Flow,
    assert_dependency_order,
    node,
    run_with_crash_points,
    wide_dag,
)

NodeState = dag.NodeState
NO_WAIT = retry.RetryPolicy(max_attempts=3, base_seconds=1, cap_seconds=1)


def run_to_end(
    flow: Flow, names: list[str], edges: list[tuple[str, str]], **spec: Any
) -> workflow.Run:
    flow.register([node(n, **spec) for n in names], edges)
    run = flow.start()
    flow.drain()
    return run


def test_the_diamond_runs_in_dependency_order_and_succeeds_once() -> None:
    flow = Flow.on_memory()
    run = run_to_end(flow, *DIAMOND)
    assert flow.run_state(run) is workflow.RunState.SUCCEEDED
    assert flow.ledger.order[0] == "a" and flow.ledger.order[-1] == "d"
    assert_dependency_order(flow.ledger.order, DIAMOND[1])
    assert dict(flow.ledger.effects) == dict.fromkeys(DIAMOND[0], 1)
    view = flow.service.view("tenant-a", run.run_id)
    assert view.counts[NodeState.SUCCEEDED] == 4 and view.progress == 1.0


def test_the_etl_dag_runs_cleanup_last() -> None:
    flow = Flow.on_memory()
    run = run_to_end(flow, ETL_NODES, ETL_EDGES)
    assert flow.run_state(run) is workflow.RunState.SUCCEEDED
    assert_dependency_order(flow.ledger.order, ETL_EDGES)
    assert flow.ledger.order[-1] == "cleanup"
    assert flow.ledger.order.index("transform") > max(
        flow.ledger.order.index("extract"), flow.ledger.order.index("validate")
    )


def test_a_slow_branch_delays_only_its_descendants() -> None:
    # a -> slow -> slow_child ; a -> fast -> fast_child: the graph walk runs fast_child
    # while slow is still failing and retrying (levels would hold it back).
    flow = Flow.on_memory()
    names = ["a", "slow", "slow_child", "fast", "fast_child"]
    edges = [("a", "slow"), ("slow", "slow_child"), ("a", "fast"), ("fast", "fast_child")]
    flow.ledger.failing["slow"] = 2
    run = run_to_end(flow, names, edges, retry=NO_WAIT)
    assert flow.run_state(run) is workflow.RunState.SUCCEEDED
    assert flow.ledger.order.index("fast_child") < flow.ledger.order.index("slow")


def test_a_node_retries_and_no_other_side_effect_repeats() -> None:
    flow = Flow.on_memory()
    names, edges = wide_dag(1000)
    flow.ledger.failing["n00500"] = 2  # fails twice, succeeds on its third attempt
    run = run_to_end(flow, names, edges, retry=NO_WAIT)
    assert flow.run_state(run) is workflow.RunState.SUCCEEDED
    assert flow.ledger.attempts["n00500"] == 3
    assert set(flow.ledger.effects.values()) == {1} and len(flow.ledger.effects) == 1000
    assert_dependency_order(flow.ledger.order, edges)


def test_a_permanent_failure_blocks_only_descendants_and_retry_failed_finishes() -> None:
    flow = Flow.on_memory()
    names, edges = wide_dag(1000)
    graph = dag.validate(names, edges)
    doomed = dag.descendants(graph, "n00500")
    flow.ledger.failing["n00500"] = 3  # every attempt of the default cap of 3
    run = run_to_end(flow, names, edges, retry=NO_WAIT)

    view = flow.service.view("tenant-a", run.run_id)
    assert view.run.state is workflow.RunState.FAILED
    assert view.failed_nodes == ["n00500"]
    assert view.counts[NodeState.BLOCKED] == len(doomed)
    assert view.counts[NodeState.SUCCEEDED] == 1000 - 1 - len(doomed)
    assert not set(flow.ledger.effects) & (doomed | {"n00500"})  # independent ran, not these

    before = dict(flow.ledger.effects)
    flow.service.retry_failed("tenant-a", run.run_id)
    flow.drain()
    assert flow.run_state(run) is workflow.RunState.SUCCEEDED
    assert set(flow.ledger.effects.values()) == {1} and len(flow.ledger.effects) == 1000
    assert all(flow.ledger.attempts[n] == 1 for n in before)  # nothing succeeded ran again
    assert flow.ledger.attempts["n00500"] == 4


def test_retry_failed_resets_in_bounded_steps_and_the_run_is_not_finished_meanwhile() -> None:
    flow = Flow.on_memory()
    names = ["root", *[f"x{i}" for i in range(10)]]
    edges = [("root", f"x{i}") for i in range(10)]
    flow.ledger.failing["root"] = 3
    run = run_to_end(flow, names, edges, retry=NO_WAIT)
    assert flow.run_state(run) is workflow.RunState.FAILED
    flow.controller.reset_budget = 4  # 11 nodes to move: three retry events
    resumed = flow.service.retry_failed("tenant-a", run.run_id)
    assert resumed.state is workflow.RunState.RUNNING and resumed.resetting
    first = flow.controller.reset_failed(run.run_id)
    assert first.continued
    # Part-way: nothing waits or runs yet that could finish the run, and yet it is not
    # recorded as finished (a reconcile or a stray completion changes nothing).
    flow.controller._finish_if_done(resumed, first)
    assert first.finished is None and flow.run_state(run) is workflow.RunState.RUNNING
    flow.drain()
    assert flow.run_state(run) is workflow.RunState.SUCCEEDED
    assert flow.events["retry"] == 3  # the API's, and two continuations
    assert set(flow.ledger.effects.values()) == {1} and len(flow.ledger.effects) == 11


class MovesDuringTheCheck:
    """A workflow store whose count of a finished leaf is followed, before the caller can
    read anything else, by another controller's step (``meanwhile``): a node moves from
    waiting to dispatched while the completion check runs, as a concurrent node_done
    moves it."""

    def __init__(self, store: Any, meanwhile: Any) -> None:
        self._store = store
        self._meanwhile = meanwhile

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def add_finished_leaves(self, run_id: str, generation: int, count: int = 1) -> int:
        counted = self._store.add_finished_leaves(run_id, generation, count)
        if self._meanwhile is not None:
            meanwhile, self._meanwhile = self._meanwhile, None
            meanwhile()
        return counted


def test_a_run_is_not_finished_while_a_node_moves_to_dispatched_during_the_check() -> None:
    flow = Flow.on_memory()
    # GIVEN roots x and y, and z after y; z fails whatever it tries
    flow.register([node(n, retry=NO_WAIT) for n in ("x", "y", "z")], [("y", "z")])
    flow.ledger.failing["z"] = 99
    run = flow.start()
    flow.controller.start(run.run_id)  # x and y dispatched
    for message in flow.queue.receive("default", max_messages=10):
        flow.workers["default"].handle(message.body, remaining_ms=lambda: 60_000)
    # (x and y succeeded; their node_done events are played by hand below)
    # AND y's completion has been applied (y succeeded, z's counter at zero) but z is not
    # dispatched yet
    assert flow.store.succeed_node(run.run_id, "y", chunk=0, children=("z",))

    # WHEN x's completion runs its end-of-run check, and y's controller dispatches z
    # while it runs
    def dispatch_z() -> None:
        flow.controller.node_done(run.run_id, "y", 1)

    racing = flow.make_controller(MovesDuringTheCheck(flow.store, dispatch_z))
    done = racing.node_done(run.run_id, "x", 1)
    # THEN the run is not recorded as finished while z is dispatched
    z = flow.store.get_nodes(run.run_id, ["z"])["z"]
    assert z.state is NodeState.DISPATCHED
    assert done.finished is None
    assert flow.run_state(run) is workflow.RunState.RUNNING
    # AND when z then dies the run ends failed, and "retry failed" is accepted
    flow.drain()
    assert flow.run_state(run) is workflow.RunState.FAILED
    assert flow.service.retry_failed("tenant-a", run.run_id).state is workflow.RunState.RUNNING


class IndexSeesNothing:
    """A workflow store whose state index has not seen any write yet (it lags)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def nodes_in_state(self, run_id: str, state: NodeState, **kwargs: Any) -> Any:
        return ports.Page([], None)


def test_a_lagging_index_that_shows_no_open_node_does_not_end_the_run() -> None:
    flow = Flow.on_memory()
    # GIVEN two roots; the first has succeeded, the second is still dispatched
    flow.register([node("a"), node("b")], [])
    run = flow.start()
    flow.controller.start(run.run_id)
    (first, _) = flow.queue.receive("default", max_messages=10)
    flow.workers["default"].handle(first.body, remaining_ms=lambda: 60_000)
    parsed = workflow.parse_node_schedule_id(first.body["schedule_id"])
    assert parsed is not None
    _, done_id = parsed
    # WHEN its completion is applied by a controller whose index shows nothing open
    lagging = flow.make_controller(IndexSeesNothing(flow.store))
    report = lagging.node_done(run.run_id, done_id, 1)
    # THEN the run is not finished: the other node's row says it is dispatched
    assert report.finished is None
    assert flow.run_state(run) is workflow.RunState.RUNNING
    flow.drain()
    assert flow.run_state(run) is workflow.RunState.SUCCEEDED


def test_a_completion_processed_twice_decrements_once_and_finishes_once() -> None:
    flow = Flow.on_memory()
    flow.register([node(n) for n in DIAMOND[0]], DIAMOND[1])
    run = flow.start()
    flow.drain()
    assert flow.run_state(run) is workflow.RunState.SUCCEEDED
    finished_at = flow.store.get_run(run.run_id).finished_at  # type: ignore[union-attr]
    for name in DIAMOND[0]:  # every completion again, as a redelivery would
        report = flow.controller.node_done(run.run_id, name, 1)
        assert not report.dispatched and report.transactions == 0 and report.finished is None
    rows = {r.node_id: r for r in flow.store.all_nodes(run.run_id)}
    assert rows["d"].pending == 0 and rows["b"].pending == 0
    assert flow.store.get_run(run.run_id).finished_at == finished_at  # type: ignore[union-attr]
    flow.drain()
    assert dict(flow.ledger.effects) == dict.fromkeys(DIAMOND[0], 1)


def test_a_fan_in_of_ten_thousand_parents_runs_the_sink_once() -> None:
    flow = Flow.on_memory()
    parents = [f"p{i}" for i in range(10_000)]
    names = ["root", *parents, "sink"]
    edges = [("root", p) for p in parents] + [(p, "sink") for p in parents]
    run = run_to_end(flow, names, edges, job_class="short")
    assert flow.run_state(run) is workflow.RunState.SUCCEEDED
    assert flow.ledger.effects["sink"] == 1 and flow.ledger.order[-1] == "sink"
    # root's fan-out of 10,000 took ceil(10000 / 99) transactions, each a bounded item set
    assert workflow.Definition.chunks(flow.definitions.get("tenant-a", "wf", 1), "root") == 102


def test_cancel_stops_what_has_not_started() -> None:
    flow = Flow.on_memory()
    flow.register([node(n) for n in ETL_NODES], ETL_EDGES)
    run = flow.start()
    flow.step()  # the start event: source is dispatched
    flow.step()  # source runs; its completion event is queued
    flow.service.cancel("tenant-a", run.run_id)
    flow.drain()
    view = flow.service.view("tenant-a", run.run_id)
    assert view.run.state is workflow.RunState.CANCELLED
    assert flow.ledger.effects["source"] == 1
    assert "cleanup" not in flow.ledger.effects
    assert view.counts[NodeState.WAITING] == 0 and view.counts[NodeState.DISPATCHED] == 0
    with pytest.raises(Exception, match="only a failed run"):
        flow.service.retry_failed("tenant-a", run.run_id)


def test_cancel_reaches_every_open_node_even_when_the_index_shows_none() -> None:
    flow = Flow.on_memory()
    # GIVEN a run whose source is dispatched and the rest waiting
    flow.register([node(n) for n in ETL_NODES], ETL_EDGES)
    run = flow.start()
    flow.controller.start(run.run_id)
    # WHEN it is cancelled and the controller's index has not seen any node yet
    flow.service.cancel("tenant-a", run.run_id)
    report = flow.make_controller(IndexSeesNothing(flow.store)).cancel_nodes(run.run_id)
    # THEN every waiting node is cancelled (the dispatched one is left to its worker,
    # which skips it: a short job's run is not stopped)
    assert sorted(report.cancelled) == sorted(n for n in ETL_NODES if n != "source")
    rows = flow.store.all_nodes(run.run_id)
    assert {r.node_id for r in rows if r.state is NodeState.WAITING} == set()


# --- crash points ------------------------------------------------------------------------


def test_a_controller_stopped_after_any_write_then_reconciled_completes_once() -> None:
    crashes = run_with_crash_points(Flow.on_memory, (ETL_NODES, ETL_EDGES))
    assert crashes >= 20  # every dispatch, send and fan-out write of 7 nodes


def test_reconcile_recomputes_a_lost_decrement_and_a_lost_dispatch() -> None:
    flow = Flow.on_memory()
    flow.register([node(n) for n in DIAMOND[0]], DIAMOND[1])
    run = flow.start()
    flow.drain()
    assert flow.run_state(run) is workflow.RunState.SUCCEEDED
    # Rewind d as if b's decrement and d's dispatch were lost, with the run still running.
    stored = flow.store.get_run(run.run_id)
    assert stored is not None
    flow.store.update_run(
        workflow.Run(
            **{**stored.__dict__, "state": workflow.RunState.RUNNING, "finished_at": None}
        ),
        expected_state=stored.state,
        expected_generation=stored.generation,
    )
    flow.store.put_nodes(run.run_id, [workflow.RunNode("d", pending=1, generation=2)])
    report = flow.controller.reconcile(run.run_id)
    assert report.dispatched == ["d"]
    flow.drain()
    assert flow.run_state(run) is workflow.RunState.SUCCEEDED
    assert flow.ledger.effects["d"] == 2  # a new generation is a new run of d, by design


def test_a_schedule_whose_target_is_a_workflow_starts_one_run_per_fire() -> None:
    flow = Flow.on_memory()
    flow.register([node(n) for n in DIAMOND[0]], DIAMOND[1], name="nightly")
    fire = flow.clock.now()
    item = model.Schedule(
        tenant_id="tenant-a",
        schedule_id="nightly-etl",
        timing=schedule.Timing(spec=schedule.parse_spec("rate(1 day)"), start=fire),
        spec_text="rate(1 day)",
        target={"type": "workflow", "workflow_id": "nightly"},
        next_fire=fire,
    )
    flow.schedules.create(item)
    dispatch.dispatch(item, [fire], now=fire, occurrences=flow.occurrences, queue=flow.queue)
    message = flow.queue.receive("default")[0]
    # The fire is delivered twice (a lost acknowledgement): one run, not two.
    flow.workers["default"].handle(message.body, remaining_ms=lambda: 60_000)
    row = flow.occurrences.get(message.body["occurrence_key"])
    assert row is not None and row.result is not None
    run_id = row.result["output"]["run_id"]
    assert run_id == targets.run_id_for("tenant-a", row.key)
    again = flow.service.start("tenant-a", "nightly", run_id=run_id, source=row.key)
    assert again.run_id == run_id and again.created_at == flow.store.get_run(run_id).created_at  # type: ignore[union-attr]
    flow.drain()
    assert flow.store.get_run(run_id).state is workflow.RunState.SUCCEEDED  # type: ignore[union-attr]
    assert dict(flow.ledger.effects) == dict.fromkeys(DIAMOND[0], 1)
    assert flow.store.active_runs(limit=10).items == []


def test_a_registration_that_lost_the_race_for_a_version_changes_nothing() -> None:
    flow = Flow.on_memory()
    first = flow.register([node(n) for n in DIAMOND[0]], DIAMOND[1])
    # A second registration read "no version yet" before the first was indexed: it
    # computes version 1 too, with another graph.
    stale = flow.store.latest_definition
    flow.store.latest_definition = lambda *_: None  # type: ignore[method-assign]
    with pytest.raises(errors.ConflictError, match="registered meanwhile"):
        flow.register([node(n) for n in "xy"], [("x", "y")])
    flow.store.latest_definition = stale  # type: ignore[method-assign]
    # The winner's index entry still points at the winner's document.
    fresh = workflows.Definitions(flow.store, flow.documents)
    assert fresh.get("tenant-a", "wf", 1).graph.nodes == tuple(DIAMOND[0])
    assert first.document_key in set(flow.documents.keys())  # type: ignore[attr-defined]


class StopsAfterTheMove:
    """A workflow store whose first success with children stops right after the parent's
    move, before any child is decremented (the controller stopped there)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.stopped = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def succeed_node(self, run_id: str, node_id: str, *, chunk: int, children: Any) -> bool:
        moved = self._store.succeed_node(run_id, node_id, chunk=chunk, children=children)
        if self.stopped or not moved or not children:
            return bool(moved)
        self.stopped = True
        # Undo the decrements the move was followed by: as if none had been sent.
        rows = self._store.get_nodes(run_id, children)
        self._store.put_nodes(run_id, [replace(r, pending=r.pending + 1) for r in rows.values()])
        raise Crash(f"stopped after {node_id}'s move")


def test_a_success_stopped_after_its_move_leaves_children_waiting_until_the_reconcile() -> None:
    flow = Flow.on_memory()
    # GIVEN the diamond, its controller stopping after a's move and before a's decrements
    # (the event in hand is lost with it)
    flow.register([node(n) for n in DIAMOND[0]], DIAMOND[1])
    run = flow.start()
    stopping = StopsAfterTheMove(flow.store)
    controller = flow.make_controller(stopping)

    def handle(body: dict[str, Any]) -> None:
        with contextlib.suppress(Crash):  # the event in hand is lost
            controller.handle(body)

    for _ in range(50):
        if not flow.step(handle):
            flow.clock.advance(5)
    # THEN a succeeded once, and its children wait with counters too high: nothing ran
    # before its parents, and the redelivered completions decremented nothing
    assert stopping.stopped
    rows = flow.store.get_nodes(run.run_id, ["a", "b", "c"])
    assert rows["a"].state is NodeState.SUCCEEDED
    assert [(rows[n].state, rows[n].pending) for n in "bc"] == [(NodeState.WAITING, 1)] * 2
    assert dict(flow.ledger.effects) == {"a": 1}
    # WHEN the reconcile runs (every minute for a running run)
    flow.controller.reconcile(run.run_id)
    flow.drain()
    # THEN the run completes, each node once, in dependency order
    assert flow.run_state(run) is workflow.RunState.SUCCEEDED
    assert dict(flow.ledger.effects) == dict.fromkeys(DIAMOND[0], 1)
    assert_dependency_order(flow.ledger.order, DIAMOND[1])
