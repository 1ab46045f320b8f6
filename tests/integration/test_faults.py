"""The fault layer the failure stories put on boto3 clients (helpers.faults), on moto."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from moto import mock_aws

from helpers.aws import REGION
from helpers.faults import FaultPlan


@pytest.fixture(scope="module")
def ddb() -> Iterator[Any]:
    """One table for the module: each test writes keys of its own."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        client.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


def put(ddb: Any, key: str) -> None:
    ddb.put_item(TableName="t", Item={"pk": {"S": key}})


def detach(ddb: Any, plan: FaultPlan) -> None:
    ddb.meta.events.unregister("before-call.dynamodb", plan._before_call)
    ddb.meta.events.unregister("after-call.dynamodb", plan._after_call)


def stored(ddb: Any, key: str) -> bool:
    return "Item" in ddb.get_item(TableName="t", Key={"pk": {"S": key}})


@pytest.mark.parametrize(
    ("kind", "raised", "applied"),
    [
        ("before", EndpointConnectionError, False),
        ("after", ReadTimeoutError, True),
        ("throttle", ClientError, False),
    ],
)
def test_a_fault_at_a_call_index_fails_that_call_before_or_after_its_effect(
    ddb: Any, kind: str, raised: type[Exception], applied: bool
) -> None:
    # GIVEN a plan that faults the second call
    plan = FaultPlan(at={1: kind})
    plan.attach(ddb)
    put(ddb, f"{kind}-first")
    # WHEN the second call is made
    with pytest.raises(raised) as caught:
        put(ddb, f"{kind}-second")
    # THEN it failed as asked, having taken effect only for "after"; the rest went through
    plan.enabled = False
    assert stored(ddb, f"{kind}-second") is applied and stored(ddb, f"{kind}-first")
    if kind == "throttle":
        code = caught.value.response["Error"]["Code"]  # type: ignore[attr-defined]
        assert code in ("ThrottlingException", "ProvisionedThroughputExceededException")
    assert plan.fired == {kind: 1} and plan.calls == 2
    detach(ddb, plan)


def test_rates_draw_per_request_whatever_the_order_of_the_calls(ddb: Any) -> None:
    # GIVEN two plans with the same seed and a 50% rate
    keys = [f"k{n}" for n in range(40)]
    outcomes = []
    for order in (keys, keys[::-1]):
        plan = FaultPlan(seed=3, rates={"before": 0.5})
        plan.attach(ddb)
        failed = set()
        # WHEN the same requests are made in another order
        for key in order:
            try:
                put(ddb, key)
            except EndpointConnectionError:
                failed.add(key)
        detach(ddb, plan)
        outcomes.append(failed)
    # THEN the same requests failed, about half of them
    assert outcomes[0] == outcomes[1] and 10 < len(outcomes[0]) < 30
