"""Workflow runs on moto: the template's WorkflowsTable, DefinitionsBucket, class queues
and WorkflowQueue, the DynamoDB and S3 adapters, the controller and the real worker.

What is counted here comes from the request log (what AWS would bill), not guessed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from fireline.domain import dag, errors, retry, workflow
from fireline.services import worker as worker_service
from helpers.aws import REGION
from helpers.flows import (
    DIAMOND,
    ETL_EDGES,
    ETL_NODES,
    Flow,
    assert_dependency_order,
    node,
    run_with_crash_points,
    wide_dag,
)
from helpers.system import System, flow_on, moto_flow, moto_system, run_wide_dag_on_moto
from helpers.transactions import item_scoped_transactions

NodeState = dag.NodeState
NO_WAIT = retry.RetryPolicy(max_attempts=3, base_seconds=1, cap_seconds=1)


def test_item_scoped_transactions_keep_all_or_nothing() -> None:
    with moto_system() as system, item_scoped_transactions():
        table = system.stack.tables["WorkflowsTable"]
        put = {"pk": {"S": "R#x"}, "sk": {"S": "N#a"}, "pending": {"N": "2"}}
        system.ddb.put_item(TableName=table, Item=put)
        decrement = {
            "TableName": table,
            "Key": {"pk": {"S": "R#x"}, "sk": {"S": "N#a"}},
            "UpdateExpression": "SET #p = #p - :one",
            "ExpressionAttributeNames": {"#p": "pending"},
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        }
        refused = {
            "TableName": table,
            "Item": {"pk": {"S": "R#x"}, "sk": {"S": "N#a"}},
            "ConditionExpression": "attribute_not_exists(pk)",
        }
        new = {"TableName": table, "Item": {"pk": {"S": "R#x"}, "sk": {"S": "N#b"}}}
        system.ddb.put_item(TableName=table, Item={**put, "sk": {"S": "N#c"}})
        with pytest.raises(system.ddb.exceptions.TransactionCanceledException):
            # the third item's condition fails after the first two were applied
            system.ddb.transact_write_items(
                TransactItems=[
                    {"Update": decrement},
                    {"Put": new},
                    {"Put": {**refused, "Item": {**refused["Item"], "sk": {"S": "N#c"}}}},
                ]
            )
        key = {"pk": {"S": "R#x"}, "sk": {"S": "N#a"}}
        assert system.ddb.get_item(TableName=table, Key=key)["Item"]["pending"] == {"N": "2"}
        assert "Item" not in system.ddb.get_item(
            TableName=table, Key={"pk": {"S": "R#x"}, "sk": {"S": "N#b"}}
        )
        system.ddb.transact_write_items(TransactItems=[{"Update": decrement}, {"Put": new}])
        assert system.ddb.get_item(TableName=table, Key=key)["Item"]["pending"] == {"N": "1"}


def test_the_diamond_and_the_etl_dag_run_in_dependency_order_on_moto() -> None:
    with moto_flow() as (_, flow):
        flow.register([node(n) for n in DIAMOND[0]], DIAMOND[1], name="diamond")
        flow.register([node(n) for n in ETL_NODES], ETL_EDGES, name="etl")
        diamond = flow.start("diamond")
        etl = flow.start("etl")
        flow.drain()
        assert flow.run_state(diamond) is workflow.RunState.SUCCEEDED
        assert flow.run_state(etl) is workflow.RunState.SUCCEEDED
        assert_dependency_order(flow.ledger.order, DIAMOND[1] + ETL_EDGES)
        assert flow.ledger.order.index("cleanup") == len(flow.ledger.order) - 1 or (
            flow.ledger.order.index("cleanup")
            > max(flow.ledger.order.index(n) for n in ETL_NODES[:-1])
        )
        assert set(flow.ledger.effects.values()) == {1}
        view = flow.service.view("tenant-a", etl.run_id)
        assert view.counts[NodeState.SUCCEEDED] == 7 and view.progress == 1.0


def test_a_cycle_is_rejected_at_registration_with_the_cycle_named() -> None:
    with moto_flow() as (system, flow):
        with pytest.raises(errors.ValidationError) as caught:
            flow.register(
                [node(n) for n in "abcd"], [("a", "b"), ("b", "c"), ("c", "d"), ("d", "b")]
            )
        assert caught.value.field == "edges"
        assert "b -> c -> d -> b" in str(caught.value)
        assert flow.store.latest_definition("tenant-a", "wf") is None  # nothing stored
        assert system.log.requests.get("PutObject", 0) == 0


def test_a_failing_node_of_1000_retries_and_no_other_effect_repeats() -> None:
    with moto_flow() as (_, flow):
        names, edges = wide_dag(1000)
        flow.ledger.failing["n00500"] = 2
        flow.register([node(n, retry=NO_WAIT) for n in names], edges)
        run = flow.start()
        flow.drain()
        assert flow.run_state(run) is workflow.RunState.SUCCEEDED
        assert flow.ledger.attempts["n00500"] == 3
        assert len(flow.ledger.effects) == 1000 and set(flow.ledger.effects.values()) == {1}
        assert_dependency_order(flow.ledger.order, edges)
        print("\n1 node of 1,000 failing twice: 3 attempts, 1,000 effects once each")


def test_a_permanent_failure_of_1000_blocks_descendants_and_retry_failed_finishes() -> None:
    with moto_flow() as (_, flow):
        names, edges = wide_dag(1000)
        doomed = dag.descendants(dag.validate(names, edges), "n00500")
        flow.ledger.failing["n00500"] = 3
        flow.register([node(n, retry=NO_WAIT) for n in names], edges)
        run = flow.start()
        flow.drain()
        view = flow.service.view("tenant-a", run.run_id)
        assert view.run.state is workflow.RunState.FAILED
        assert view.failed_nodes == ["n00500"]
        assert view.counts[NodeState.BLOCKED] == len(doomed)
        assert view.counts[NodeState.SUCCEEDED] == 999 - len(doomed)
        blocked = flow.service.nodes("tenant-a", run.run_id, NodeState.BLOCKED, limit=1000)
        assert {n.node.node_id for n in blocked.items} == doomed

        succeeded_before = set(flow.ledger.effects)
        flow.service.retry_failed("tenant-a", run.run_id)
        flow.drain()
        assert flow.run_state(run) is workflow.RunState.SUCCEEDED
        assert len(flow.ledger.effects) == 1000 and set(flow.ledger.effects.values()) == {1}
        assert all(flow.ledger.attempts[n] == 1 for n in succeeded_before)
        print(
            f"\n1 node of 1,000 dead: {len(doomed)} blocked, {999 - len(doomed)} succeeded; "
            "after retry 1,000 effects once each"
        )


def test_crash_points_on_moto_then_reconcile() -> None:
    with moto_system() as system, item_scoped_transactions():
        # Every write of the diamond's run in turn (a new workflow and run each time).
        crashes = run_with_crash_points(lambda: flow_on(system), DIAMOND)
        assert crashes >= 12  # every dispatch, send and success write of the diamond


# The writes a node costs are the same at any size: 300 nodes here; `make bench` counts
# them on 2,000 (tests/bench/bench_workflow.py), whose figures docs/workflows.md quotes.
WRITES_COUNTED_NODES = 300


def test_a_wide_workflow_completes_on_moto_with_writes_counted() -> None:
    per_node, requests = run_wide_dag_on_moto(WRITES_COUNTED_NODES)
    assert per_node > 0 and requests


def test_a_long_class_node_runs_under_the_state_machine_between_its_neighbours() -> None:
    # GIVEN a -> b -> c where b is a long job (moto runs the real state machine, in real
    # time) and the long worker and its runner know workflow nodes
    with moto_system() as system, item_scoped_transactions():
        flow = flow_on(system)
        supervised = with_long_worker(system, flow)
        flow.register([node("a"), node("b", job_class="long"), node("c")], [("a", "b"), ("b", "c")])
        run = flow.start()
        # WHEN the queues and the long task queue are played until the run ends
        play_until(system, flow, supervised, lambda: flow.run_state(run) is not RUNNING)
        # THEN it succeeded in order, b under its own execution
        assert flow.run_state(run) is workflow.RunState.SUCCEEDED
        assert flow.ledger.order == ["a", "b", "c"]
        stored = flow.store.get_run(run.run_id)
        assert stored is not None
        b = flow.store.get_nodes(run.run_id, ["b"])["b"]
        row = flow.occurrences.get(workflow.node_occurrence_key(stored, b))
        assert row is not None and row.execution and row.state.value == "succeeded"


def test_cancelling_a_run_stops_its_running_long_node() -> None:
    # GIVEN a -> b where b is a long job that runs until told otherwise
    with moto_system() as system, item_scoped_transactions():
        flow = flow_on(system)
        supervised = with_long_worker(system, flow)
        release = threading.Event()
        flow.registry.register("slow")(lambda context: release.wait(30))
        slow = workflow.NodeSpec("b", {"type": "python", "handler": "slow"}, job_class="long")
        flow.register([slow, node("a")], [("b", "a")])
        run = flow.start()
        key = None

        def b_running() -> bool:
            nonlocal key
            stored = flow.store.get_run(run.run_id)
            b = flow.store.get_nodes(run.run_id, ["b"]).get("b")
            if stored is None or b is None or b.state is not dag.NodeState.DISPATCHED:
                return False
            key = workflow.node_occurrence_key(stored, b)
            row = flow.occurrences.get(key)
            return row is not None and row.execution is not None and bool(row.task_token)

        play_until(system, flow, supervised, b_running, in_threads=True)
        # WHEN the run is cancelled while b runs
        flow.service.cancel("tenant-a", run.run_id)
        play_until(system, flow, supervised, lambda: flow.step() == 0)
        # THEN b's execution was stopped and b recorded cancelled; a never ran
        assert key is not None
        row = flow.occurrences.get(key)
        assert row is not None and row.state.value == "cancelled" and row.execution
        sfn = boto3.client("stepfunctions", region_name=REGION)
        for _ in range(50):  # the interpreter stops the execution on its own thread
            if sfn.describe_execution(executionArn=row.execution)["status"] != "RUNNING":
                break
            time.sleep(0.1)
        # AWS reports a stopped execution as ABORTED; moto's interpreter as FAILED.
        assert sfn.describe_execution(executionArn=row.execution)["status"] in ("ABORTED", "FAILED")
        release.set()
        for thread in TASK_THREADS:
            thread.join(timeout=30)  # before moto goes away under its heartbeats
        view = flow.service.view("tenant-a", run.run_id)
        assert view.run.state is workflow.RunState.CANCELLED
        assert view.counts[dag.NodeState.CANCELLED] == 2 and "a" not in flow.ledger.effects


RUNNING = workflow.RunState.RUNNING
TASK_THREADS: list[threading.Thread] = []


def with_long_worker(system: System, flow: Flow) -> Any:
    """A long-class worker and runner that know workflow nodes, on the flow's queues; the
    controller gets the supervisor too (cancel stops executions)."""
    supervised = system.long_jobs(heartbeat_seconds=2)
    supervised.runner, supervised.nodes = flow.runner, flow.nodes
    flow.workers["long"] = worker_service.Worker(
        schedules=flow.schedules,
        occurrences=flow.occurrences,
        queue=flow.queue,
        slots=flow.slots,
        clock=flow.clock,
        runner=flow.runner,
        config=worker_service.WorkerConfig(job_class="long", tenant_limit=0),
        long_jobs=supervised,
        nodes=flow.nodes,
    )
    flow.controller.long_jobs = supervised
    return supervised


def play_until(
    system: System,
    flow: Flow,
    supervised: Any,
    done: Callable[[], bool],
    *,
    in_threads: bool = False,
    timeout: float = 60,
) -> None:
    """Play the flow's queues and the long task queue (moto runs the state machine in
    real time) until ``done``; task attempts run in threads when asked, as each would be
    its own Lambda."""
    task_queue = system.stack.queues["LongTaskQueue"]
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        flow.step()
        answer = system.sqs_client.receive_message(QueueUrl=task_queue, MaxNumberOfMessages=10)
        for raw in answer.get("Messages", []):
            system.sqs_client.delete_message(
                QueueUrl=task_queue, ReceiptHandle=raw["ReceiptHandle"]
            )
            task = json.loads(raw["Body"])
            if in_threads:
                thread = threading.Thread(
                    target=supervised.run_task,
                    args=(task,),
                    kwargs={"remaining_ms": lambda: 900_000},
                    daemon=True,
                )
                thread.start()
                TASK_THREADS.append(thread)
            else:
                supervised.run_task(task, remaining_ms=lambda: 900_000)
        time.sleep(0.1)
