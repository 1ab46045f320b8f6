"""``fireline admin migrate schedule-keys`` against the template's schedules table on moto:
schedules stored before a tenant's schedules were spread over partition keys (every one
on the tenant id) are moved to their keys, found and listed again, advanced by the ticker's
conditional write, and a second pass moves nothing. An item changed while it is being
moved is left where it is for the next pass, never overwritten."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import boto3
import pytest
from moto import mock_aws

from contract.support import START, TENANT, a_schedule
from fireline.adapters import schedules_dynamodb
from fireline.adapters.dynamodb import _decode, _encode
from fireline.cli import main as cli
from fireline.domain import model
from helpers.aws import REGION, Stack

IDS = [f"sched-{n:03d}" for n in range(40)]


@pytest.fixture
def table() -> Iterator[str]:
    with mock_aws():
        yield Stack.create(prefix="keys").tables["SchedulesTable"]


def store(table: str) -> schedules_dynamodb.DynamoScheduleStore:
    client = boto3.client("dynamodb", region_name=REGION)
    return schedules_dynamodb.DynamoScheduleStore(client, table, sleep=lambda _: None)


def put_on_the_tenant_id(table: str, item: model.Schedule) -> None:
    """The item as an older version wrote it: on the tenant id, whatever its shard."""
    client = boto3.client("dynamodb", region_name=REGION)
    record = schedules_dynamodb.schedule_to_item(item, model.DEFAULT_SHARDS)
    record["tenant_id"] = item.tenant_id
    client.put_item(TableName=table, Item=_encode(record))


def keys_held(table: str) -> set[str]:
    client = boto3.client("dynamodb", region_name=REGION)
    return {_decode(i)["tenant_id"] for i in client.scan(TableName=table)["Items"]}


def migrate(table: str, *extra: str) -> int:
    return cli.main(
        ["admin", "migrate", "schedule-keys", "--table", table, "--region", REGION, *extra]
    )


def test_older_schedules_are_moved_to_their_keys_found_listed_and_advanced(
    table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN 40 schedules of one tenant, all on the tenant id as an older version put them
    for schedule_id in IDS:
        put_on_the_tenant_id(table, a_schedule(schedule_id))
    schedules = store(table)
    assert keys_held(table) == {TENANT}
    misplaced = [s for s in IDS if model.tenant_key(TENANT, s) != TENANT]
    assert misplaced, "some of the ids belong on another key"
    assert schedules.get(TENANT, misplaced[0]) is None
    # WHEN the migration runs
    assert migrate(table, "--json") == 0
    totals = json.loads(capsys.readouterr().out)
    # THEN every item not on its key was moved, and every schedule is found and listed
    assert (totals["scanned"], totals["moved"]) == (40, len(misplaced))
    assert keys_held(table) == set(model.tenant_keys(TENANT))
    assert all(schedules.get(TENANT, s) == a_schedule(s) for s in IDS)
    listed = schedules.list(TENANT, limit=100).items
    assert [s.schedule_id for s in listed] == IDS
    # AND the ticker's conditional advance finds a moved schedule where it now lies
    assert schedules.advance(
        TENANT,
        misplaced[0],
        expected_next_fire=START,
        expected_version=1,
        next_fire=START + timedelta(minutes=1),
        now=START,
    )
    # AND a second pass moves nothing
    assert migrate(table, "--json") == 0
    assert json.loads(capsys.readouterr().out)["moved"] == 0


def test_an_item_advanced_while_it_is_moved_is_left_for_the_next_pass(table: str) -> None:
    # GIVEN an older item off its key, read by a pass, then advanced before the pass moves it
    schedule_id = next(s for s in IDS if model.tenant_key(TENANT, s) != TENANT)
    put_on_the_tenant_id(table, a_schedule(schedule_id))
    schedules = store(table)
    client = boto3.client("dynamodb", region_name=REGION)
    as_read = _decode(client.scan(TableName=table)["Items"][0])
    client.update_item(
        TableName=table,
        Key={"tenant_id": {"S": TENANT}, "schedule_id": {"S": schedule_id}},
        UpdateExpression="SET next_fire_ms = :n",
        ExpressionAttributeValues={":n": {"N": str(as_read["next_fire_ms"] + 60_000)}},
    )
    # WHEN the pass moves what it read
    moved = schedules._move(as_read, model.tenant_key(TENANT, schedule_id))
    # THEN the move is cancelled: the advanced item stays whole where it was, on no other key
    assert not moved
    assert keys_held(table) == {TENANT}
    # AND the next pass moves it, as advanced
    page = schedules.move_to_tenant_keys()
    assert (page.moved, page.changed) == (1, 0)
    found = schedules.get(TENANT, schedule_id)
    assert found is not None and found.next_fire == START + timedelta(minutes=1)
