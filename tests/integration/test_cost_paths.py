"""What each path a job takes costs in AWS requests and DynamoDB units, pinned.

Each path runs end to end on moto as deployed (tests/helpers/cost_paths.py), small: one
steady-state pickup of a few schedules metered on its own (the ticker's pickup, and the
worker's run of every fire it picked up), a few one-off jobs from their creation through
the API to their end, a small workflow run. The counts are deterministic (a fake clock,
seeded ids), so they are pinned: a change that adds a request or a unit to a path fails
here, and a change that saves one updates EXPECTED, the one table below. `make bench`
prices the same paths at scale (tests/bench/bench_cost.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fireline.cost import model, prices
from helpers import cost_dispatch, cost_paths
from helpers.system import System

# Per fire (per node for workflow_node; a one-off job's creation is in its figures):
# requests by service.Operation as billed, DynamoDB write units on the base tables,
# index write units and read units, and the seconds worker invocations are expected to
# hold fires that became visible before their time (0.15 s an invocation of the ticker's
# fires, sent 0.85 into a second; half a second of the API's jobs, sent at any phase:
# these fires are due on a whole second and sent ahead of it; a node is sent when it is
# due).
# Rounded to 4 decimals. A worker reads the register of limit overrides once per cache
# period (one GetItem per path here), and a tenant without a limit reads nothing of its
# slots per fire (no Query). A fire the ticker sent without its row has its schedule read
# after its claim by a BatchGetItem (services.worker.gathered: a moment's claims gathered,
# here one each, the records running in turn).
EXPECTED: dict[str, dict[str, Any]] = {
    "minutely": {
        "requests": {
            "dynamodb.BatchGetItem": 1.1515,
            "dynamodb.GetItem": 0.0303,
            "dynamodb.Query": 0.4848,
            "dynamodb.UpdateItem": 2.0909,
            "sqs.DeleteMessageBatch": 0.1212,
            "sqs.ReceiveMessage": 0.1212,
            "sqs.SendMessageBatch": 0.1212,
        },
        "write_units": 2.0909,
        "index_write_units": 0.1818,
        "read_units": 1.5303,
        "worker_wait_seconds": 0.0182,
    },
    "every_second": {
        "requests": {
            "dynamodb.BatchGetItem": 1.1167,
            "dynamodb.GetItem": 0.0167,
            "dynamodb.Query": 0.2667,
            "dynamodb.UpdateItem": 2.0167,
            "sqs.DeleteMessageBatch": 0.1,
            "sqs.ReceiveMessage": 0.1,
            "sqs.SendMessageBatch": 0.1,
        },
        "write_units": 2.0167,
        "index_write_units": 0.0333,
        "read_units": 1.2083,
        "worker_wait_seconds": 0.015,
    },
    "one_off": {
        "requests": {
            "apigateway.Request": 1.0,
            "dynamodb.BatchGetItem": 0.2,
            "dynamodb.GetItem": 0.2,
            "dynamodb.PutItem": 1.0,
            "dynamodb.Query": 3.2,
            "dynamodb.UpdateItem": 4.2,
            "sqs.DeleteMessageBatch": 0.2,
            "sqs.ReceiveMessage": 0.2,
            "sqs.SendMessageBatch": 1.0,
        },
        "write_units": 5.2,
        "index_write_units": 2.0,
        "read_units": 2.2,
        "worker_wait_seconds": 0.1,
    },
    "one_off_batched": {
        "requests": {
            "apigateway.Request": 0.12,
            "dynamodb.BatchGetItem": 0.24,
            "dynamodb.BatchWriteItem": 0.12,
            "dynamodb.GetItem": 0.08,
            "dynamodb.Query": 1.04,
            "dynamodb.Scan": 0.04,
            "dynamodb.TransactWriteItems": 0.24,
            "dynamodb.UpdateItem": 2.0,
            "sqs.DeleteMessageBatch": 0.12,
            "sqs.ReceiveMessage": 0.12,
            "sqs.SendMessageBatch": 0.12,
        },
        "write_units": 3.96,
        "index_write_units": 0.0,
        "read_units": 1.62,
        "worker_wait_seconds": 0.018,
    },
    # A limited tenant in a class shared out, its worker one container of the 50 the class
    # is configured for: besides each job's tenant slot, each invocation (4 batches for
    # these 33 fires) takes and gives back the tenant's share of the class's running
    # invocations, after a read of its slots (a PutItem, a DeleteItem, a Query: 2 write
    # units and 0.5 read units an invocation, whatever its jobs of the tenant), and the
    # container says it is alive once per 10 s (an UpdateItem). See services/pool.py.
    # The tenant's first job takes its slot unread (one number at random); the later ones
    # read the tenant's slots (one read for the jobs that start within a quarter of a
    # second), which this worker knows it holds (handed on, not given back), and take
    # over one its own finished runs left with no read of their rows
    # (worker/slot_views.py). The schedule's read after each claim is a BatchGetItem
    # (worker/gathered.py).
    "tenant_limited": {
        "requests": {
            "dynamodb.BatchGetItem": 1.1515,
            "dynamodb.DeleteItem": 0.1212,
            "dynamodb.GetItem": 0.0303,
            "dynamodb.PutItem": 1.1212,
            "dynamodb.Query": 0.6364,
            "dynamodb.UpdateItem": 2.1212,
            "sqs.DeleteMessageBatch": 0.1212,
            "sqs.ReceiveMessage": 0.1212,
            "sqs.SendMessageBatch": 0.1212,
        },
        "write_units": 3.3636,
        "index_write_units": 0.1818,
        "read_units": 1.6061,
        "worker_wait_seconds": 0.0182,
    },
    # A backfill's fire: its row put by the API (a PutItem), its message sent by a pass
    # over the backfill's record (a GetItem, a Query of the rows after the last one
    # released, a SendMessageBatch, a PutItem of the record), one pass per fire settled;
    # the worker's claim and outcome as any fire's. The record's index entry is written
    # when it starts and removed when it is done.
    "backfill": {
        "requests": {
            "apigateway.Request": 0.04,
            "dynamodb.BatchGetItem": 1.24,
            "dynamodb.GetItem": 1.08,
            "dynamodb.PutItem": 2.12,
            "dynamodb.Query": 1.04,
            "dynamodb.UpdateItem": 2.0,
            "sqs.DeleteMessageBatch": 0.12,
            "sqs.ReceiveMessage": 0.12,
            "sqs.SendMessageBatch": 0.64,
        },
        "write_units": 4.12,
        "index_write_units": 0.08,
        "read_units": 3.66,
        "worker_wait_seconds": 0.0,
    },
    "workflow_node": {
        "requests": {
            "apigateway.Request": 0.0833,
            "dynamodb.BatchGetItem": 2.6667,
            "dynamodb.BatchWriteItem": 0.0833,
            "dynamodb.GetItem": 4.4167,
            "dynamodb.PutItem": 0.1667,
            "dynamodb.Query": 0.1667,
            "dynamodb.TransactWriteItems": 0.0833,
            "dynamodb.UpdateItem": 6.0833,
            "sqs.DeleteMessageBatch": 0.25,
            "sqs.ReceiveMessage": 0.25,
            "sqs.SendMessageBatch": 1.6667,
        },
        "write_units": 7.5833,
        "index_write_units": 0.1667,
        "read_units": 7.7917,
        "worker_wait_seconds": 0.0,
    },
}

# A dispatch target's job: the one-off path (5 jobs of one tenant) with the target's call
# made as the tenant's role: one request each, and the two AssumeRole calls (the target
# caller role, then the tenant's) shared by the jobs of the worker's hour, here 5.
_DISPATCH_ONE_OFF = EXPECTED["one_off"]["requests"]
for _kind, _call in (
    ("stepfunctions", "stepfunctions.StartExecution"),
    ("eventbridge", "events.PutEvents"),
    ("sns", "sns.Publish"),
):
    EXPECTED[f"one_off_{_kind}"] = {
        **EXPECTED["one_off"],
        "requests": dict(sorted({**_DISPATCH_ONE_OFF, _call: 1.0, "sts.AssumeRole": 0.4}.items())),
    }

SYSTEM_PATHS: dict[str, Callable[[System], cost_paths.Measured]] = {
    # 3 schedules every minute: the pickup 11 minutes on, 10 fires each
    "minutely": lambda system: cost_paths.recurring(
        system,
        "rate(1 minute)",
        3,
        pickup_at=cost_paths.MINUTELY_PICKUP_AT,
        tenant="tenant-minutely",
    ),
    # 1 schedule every second: a pickup a minute, 60 fires
    "every_second": lambda system: cost_paths.recurring(
        system, "cron(* * * * * *)", 1, warm_ticks=11, pickup_at=61, tenant="tenant-second"
    ),
    # 5 one-off jobs, created through the API
    "one_off": lambda system: cost_paths.one_off(system, 5, tenant="tenant-one-off"),
    # 25 one-off jobs, created through the API 10 a request (POST /jobs/batch)
    "one_off_batched": lambda system: cost_paths.one_off_batched(
        system, 25, batch=10, tenant="tenant-one-off-batched"
    ),
    # 5 one-off jobs to a tenant's state machine, bus or topic, as its role
    **{
        f"one_off_{kind}": lambda system, kind=kind: cost_dispatch.one_off(system, kind, 5)
        for kind in ("stepfunctions", "eventbridge", "sns")
    },
    # 25 past hourly fires backfilled through the API, ten in flight
    "backfill": lambda system: cost_paths.backfill(system, 25, tenant="tenant-backfill"),
    # the minutely path in a tenant with the deployed concurrency limit
    "tenant_limited": lambda system: cost_paths.recurring(
        system,
        "rate(1 minute)",
        3,
        pickup_at=cost_paths.MINUTELY_PICKUP_AT,
        tenant="tenant-limited",
        tenant_limit=cost_paths.DEPLOYED_TENANT_LIMIT,
    ),
}


def figures(measured: cost_paths.Measured) -> dict[str, Any]:
    usage = measured.usage
    found = {
        "requests": {op: round(n, 4) for op, n in usage.billed.items()},
        "write_units": round(usage.write_units, 4),
        "index_write_units": round(usage.index_write_units, 4),
        "read_units": round(usage.read_units, 4),
        "worker_wait_seconds": round(usage.wait_seconds.get("worker", 0.0), 4),
    }
    print(f"\n{found}")
    return found


@pytest.mark.parametrize("path", sorted(SYSTEM_PATHS))
def test_requests_and_units_per_fire_are_pinned(path: str) -> None:
    # GIVEN a path run end to end on a deployment of its own, metered
    with cost_paths.deployed_system() as system:
        found = figures(SYSTEM_PATHS[path](system))
    # THEN its requests and units per fire are the pinned ones
    assert found == EXPECTED[path]


def test_requests_and_units_per_workflow_node_are_pinned() -> None:
    # GIVEN a wide DAG of 12 nodes run to success, the controller and workers metered
    found = figures(cost_paths.workflow_nodes(12))
    # THEN its requests and units per node are the pinned ones
    assert found == EXPECTED["workflow_node"]
    # AND a node costs at most 8 write units, transactions at twice and index writes
    # included (the run's own writes spread over 12 nodes among them)
    assert found["write_units"] + found["index_write_units"] <= 8


def test_a_worker_invocation_is_billed_its_wait_for_the_fire_time() -> None:
    # GIVEN the minutely path: its fires sent by the ticker 0.85 into a second (its send
    # phase), with SQS's whole-second delays rounded down and counted from the ticker's
    # tenth-of-a-second margin, so deployed each fire is visible 0.15 s early and the
    # worker holds it until its time
    with cost_paths.deployed_system() as system:
        usage = SYSTEM_PATHS["minutely"](system).usage
    lines = model.per_million(usage)["usd_by_service"]
    # THEN each worker invocation is billed that wait at its memory, as a line of its own
    gb_seconds = usage.invocations["worker"] * 0.15 * model.FUNCTIONS["worker"].memory_mb / 1024
    assert lines["lambda.wait"] == pytest.approx(
        gb_seconds * prices.LAMBDA_GB_SECOND_ARM.usd * 1e6, abs=1e-4
    )
