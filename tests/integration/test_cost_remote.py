"""What a job whose target is remote and slow costs, pinned: an HTTP target answering after
1 s or 3 s, a Lambda target in the tenant's account answering after 3 s, their fires picked
up and run on moto as deployed (tests/helpers/cost_paths.py), in batches of 10 and of 100.
The counts are deterministic (a fake clock, seeded ids): the requests and units per fire,
the worker invocations per 1,000 fires, and the seconds per fire the invocations wait on
their targets, which Lambda bills as duration. (The CPU part of the duration is measured,
so not pinned.)
"""

from __future__ import annotations

import pytest

from fireline.cost import model
from helpers import cost_paths

SCHEDULES = 3  # every minute: one pickup of 33 fires
REQUESTS = {
    "dynamodb.GetItem": 0.0303,
    "dynamodb.Query": 0.4848,
    "dynamodb.UpdateItem": 2.0909,
    "sqs.DeleteMessageBatch": 0.1212,
    "sqs.ReceiveMessage": 0.1212,
    "sqs.SendMessageBatch": 0.1212,
}
# (seconds, batch size) -> (BatchGetItem and read units per fire, invocations per 1,000
# fires, target wait per fire, network wait per fire: the calls and targets of a batch's
# records side by side, 5 ms a call). A BatchGetItem a fire is its consistent read after
# its claim (services.worker.gathered: here the records run in turn, a read each).
EXPECTED = {
    (1.0, 10): (1.1515, 1.5303, 121.2, 0.1212, 0.1238),
    (3.0, 10): (1.1515, 1.5303, 121.2, 0.3636, 0.3662),
    (3.0, 100): (1.0606, 1.3939, 30.3, 0.0909, 0.0917),
}


@pytest.mark.parametrize(("seconds", "batch_size"), sorted(EXPECTED))
def test_a_slow_http_targets_counts_per_fire(seconds: float, batch_size: int) -> None:
    # GIVEN minutely schedules whose HTTP target answers after `seconds`
    with cost_paths.deployed_system() as system:
        # WHEN one pickup's fires run in batches of `batch_size`
        measured = cost_paths.remote_http(system, SCHEDULES, seconds=seconds, batch_size=batch_size)
    batch_gets, reads, invocations, waited, network = EXPECTED[(seconds, batch_size)]
    usage = measured.usage
    # THEN every fire ran once, with the requests and units pinned
    assert measured.jobs == 33
    requests = {op: round(n, 4) for op, n in usage.billed.items()}
    assert requests == {**REQUESTS, "dynamodb.BatchGetItem": batch_gets}
    assert round(usage.write_units, 4) == 2.0909
    assert round(usage.index_write_units, 4) == 0.1818
    assert round(usage.read_units, 4) == reads
    # AND the invocations per 1,000 fires the batch shape gives
    assert round(usage.invocations["worker"] * 1000, 1) == invocations
    # AND each invocation is billed its wait on the targets and its calls, side by side
    assert round(usage.target_seconds["worker"], 4) == waited
    assert round(usage.network_seconds["worker"], 4) == network


def test_a_slow_lambda_targets_counts_per_fire() -> None:
    # GIVEN minutely schedules whose target is a function in the tenant's account, called
    # as the tenant's role, answering after 3 s
    with cost_paths.deployed_system(lambda_without_docker=True) as system:
        # WHEN one pickup's fires run in batches of ten
        measured = cost_paths.remote_lambda(system, SCHEDULES, seconds=3.0)
    usage = measured.usage
    # THEN every fire ran once, and Fireline's requests and units are the HTTP path's (the
    # invoke is billed to the tenant's account, the role's credentials by STS for free)
    assert measured.jobs == 33
    requests = {op: round(n, 4) for op, n in usage.billed.items()}
    assert requests == {**REQUESTS, "dynamodb.BatchGetItem": 1.1515}
    assert round(usage.write_units, 4) == 2.0909
    assert round(usage.invocations["worker"] * 1000, 1) == 121.2
    # AND each invocation is billed its 3 s wait
    assert round(usage.target_seconds["worker"], 4) == 0.3636
    assert round(usage.network_seconds["worker"], 4) == 0.3662


def test_the_wait_on_targets_is_billed_as_duration() -> None:
    # GIVEN two usages alike but for three seconds a fire waiting on targets
    base = model.Usage(billed={}, invocations={"worker": 0.1}, aws_calls={"worker": 3.0})
    waiting = model.Usage(
        billed={}, invocations={"worker": 0.1}, aws_calls={"worker": 3.0},
        target_seconds={"worker": 3.0},
    )  # fmt: skip
    # THEN the second is billed three more seconds at the worker's memory
    extra = waiting.lambda_gb_seconds()["worker"] - base.lambda_gb_seconds()["worker"]
    assert round(extra, 6) == round(3.0 * model.FUNCTIONS["worker"].memory_mb / 1024, 6)


def test_an_overlapped_wait_replaces_the_calls_in_turn() -> None:
    # GIVEN a worker's 30 calls a fire, once in turn and once known to overlap into 0.02 s
    in_turn = model.Usage(billed={}, aws_calls={"worker": 30.0})
    overlapped = model.Usage(
        billed={}, aws_calls={"worker": 30.0}, network_seconds={"worker": 0.02}
    )
    # THEN the overlapped one is billed its 0.02 s, the other 30 x 5 ms
    memory = model.FUNCTIONS["worker"].memory_mb / 1024
    assert round(in_turn.lambda_gb_seconds()["worker"], 6) == round(0.15 * memory, 6)
    assert round(overlapped.lambda_gb_seconds()["worker"], 6) == round(0.02 * memory, 6)


def test_in_flight_rounds_make_the_wait_on_targets() -> None:
    wait = cost_paths.TargetWait(3.0, in_flight=4)
    assert [wait.span(n) for n in (0, 1, 4, 5, 10)] == [0.0, 3.0, 3.0, 6.0, 9.0]
    assert cost_paths.TargetWait(1.0).span(256) == 1.0
