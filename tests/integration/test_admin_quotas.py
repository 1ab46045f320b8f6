"""``fireline admin quotas`` against the template's slots table on moto: an operator's
override reaches the store the API's creates read, and clears back to the default."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from fireline.adapters import quotas_dynamodb
from fireline.cli import main as cli
from fireline.domain import quota
from helpers.aws import REGION, Stack

TENANT = "tenant-a"


@pytest.fixture
def table() -> Iterator[str]:
    with mock_aws():
        yield Stack.create(prefix="admin").tables["SlotsTable"]


def store(table: str) -> quotas_dynamodb.DynamoQuotaStore:
    return quotas_dynamodb.DynamoQuotaStore(boto3.client("dynamodb", region_name=REGION), table)


def run(*argv: str) -> int:
    return cli.main(["admin", "quotas", *argv])


def test_set_overrides_a_tenants_quotas_and_show_reads_them_back(
    table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # WHEN an operator sets two overrides
    code = run("set", TENANT, "--schedules", "500", "--uploads-per-day", "0",
               "--table", table, "--region", REGION, "--json")  # fmt: skip
    # THEN they are stored where the creates' conditions read them
    assert code == 0
    assert store(table).usage(TENANT).overrides == {
        quota.Quota.SCHEDULES: 500,
        quota.Quota.UPLOADS_PER_DAY: 0,
    }
    shown = json.loads(capsys.readouterr().out)
    assert shown["quotas"]["schedules"] == {"limit": 500, "used": 0}
    assert shown["quotas"]["active_jobs"] == {"limit": "default", "used": 0}


def test_clear_returns_one_quota_or_all_to_the_default(table: str) -> None:
    store(table).set_limit(TENANT, quota.Quota.SCHEDULES, 5)
    store(table).set_limit(TENANT, quota.Quota.WORKFLOWS, 7)

    assert run("clear", TENANT, "--quota", "schedules", "--table", table, "--region", REGION) == 0
    assert store(table).usage(TENANT).overrides == {quota.Quota.WORKFLOWS: 7}
    assert run("clear", TENANT, "--table", table, "--region", REGION) == 0
    assert store(table).usage(TENANT).overrides == {}


def test_a_limit_out_of_range_is_a_usage_error_and_changes_nothing(table: str) -> None:
    assert run("set", TENANT, "--schedules", "-1", "--table", table, "--region", REGION) == 2
    assert store(table).usage(TENANT).overrides == {}


def test_without_a_table_or_its_stack_the_command_says_how_to_name_them(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN no table named and no stack of the default name (an account on moto)
    monkeypatch.delenv("FIRELINE_SLOTS_TABLE", raising=False)
    monkeypatch.delenv("FIRELINE_STACK", raising=False)
    with mock_aws():
        # WHEN a command looks for the slots table
        code = run("show", TENANT, "--region", REGION)
    # THEN it is refused, naming the stack it looked for and how to name either
    assert code == 1
    err = capsys.readouterr().err
    assert "no stack 'fireline'" in err and "--stack" in err
