"""``fireline admin limits`` and ``fireline admin migrate overrides`` against the
template's slots table on moto: an operator's override lands in the tenant's own item
and in the register of overrides together, and the migration builds the register from
overrides set before it existed, once."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from fireline.adapters import slots_dynamodb
from fireline.cli import main as cli
from helpers.aws import REGION, Stack

TENANT = "tenant-a"


@pytest.fixture
def table() -> Iterator[str]:
    with mock_aws():
        yield Stack.create(prefix="limits").tables["SlotsTable"]


def store(table: str) -> slots_dynamodb.DynamoSlotStore:
    return slots_dynamodb.DynamoSlotStore(boto3.client("dynamodb", region_name=REGION), table)


def run(table: str, *argv: str) -> int:
    return cli.main(["admin", *argv, "--table", table, "--region", REGION, "--json"])


def test_set_and_clear_change_the_override_and_the_register_together(
    table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a deployment whose register is built
    assert run(table, "migrate", "overrides") == 0
    capsys.readouterr()
    # WHEN an operator sets a tenant's limit, then another's to no limit
    assert run(table, "limits", "set", TENANT, "5") == 0
    shown = json.loads(capsys.readouterr().out)
    assert run(table, "limits", "set", "tenant-b", "0") == 0
    # THEN each is the tenant's own override and in the register
    assert shown == {"tenant": TENANT, "limit": 5, "register_built": True}
    assert store(table).held(TENANT) == ([], 5)
    assert store(table).overrides() == {TENANT: 5, "tenant-b": 0}
    # AND WHEN one is cleared, it is gone from both
    assert run(table, "limits", "clear", TENANT) == 0
    assert store(table).held(TENANT) == ([], None)
    assert store(table).overrides() == {"tenant-b": 0}


def test_a_limit_out_of_range_is_refused_and_nothing_is_written(
    table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # WHEN / THEN refused (exit 2), naming the range
    assert run(table, "limits", "set", TENANT, "10001") == 2
    assert "argument N: must be 0 (no limit) to 10000" in capsys.readouterr().err
    assert store(table).held(TENANT) == ([], None)


def test_the_migration_builds_the_register_from_older_overrides_and_a_rerun_changes_nothing(
    table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN two overrides written before the register existed (their own items only)
    client = boto3.client("dynamodb", region_name=REGION)
    for tenant, limit in ((TENANT, 3), ("tenant-b", 0)):
        client.put_item(
            TableName=table,
            Item={"tenant_id": {"S": tenant}, "slot": {"N": "-1"}, "limit": {"N": str(limit)}},
        )
    # THEN until the migration, the register is unknown (every run reads its slots)
    assert store(table).overrides() is None
    assert run(table, "limits", "show", TENANT) == 0
    assert json.loads(capsys.readouterr().out)["register_built"] is False
    # WHEN it runs, twice
    assert run(table, "migrate", "overrides") == 0
    first = json.loads(capsys.readouterr().out)
    assert run(table, "migrate", "overrides") == 0
    again = json.loads(capsys.readouterr().out)
    # THEN the register holds both, once
    assert first == again == {"overrides": 2}
    assert store(table).overrides() == {TENANT: 3, "tenant-b": 0}
