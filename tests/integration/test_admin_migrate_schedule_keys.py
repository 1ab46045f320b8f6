"""``fireline admin migrate schedule-keys`` against the template's schedules table on moto:
schedules stored before a tenant's schedules were spread over partition keys (every one
on the tenant id) are moved to their keys, found and listed again, advanced by the ticker's
conditional write, and a second pass moves nothing. An item changed while it is being
moved is left where it is for the next pass, never overwritten."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from contract.support import MINUTE, START, TENANT, a_schedule
from fireline.adapters import schedules_dynamodb
from fireline.adapters.dynamodb import _decode, _encode
from fireline.cli import main as cli
from fireline.domain import model, occurrence, policies
from helpers.aws import REGION, Stack
from helpers.system import START as SYSTEM_START
from helpers.system import System

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


def test_an_unmoved_schedules_missed_fires_are_settled_by_its_misfire_policy_once_moved(
    system: System, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN two every-minute schedules off their keys, on the tenant id as an older
    # version wrote them: one that skips missed fires, one that catches up on them all
    skip_id, catch_up_id = [s for s in IDS if model.tenant_key(TENANT, s) != TENANT][:2]
    table = system.stack.tables["SchedulesTable"]
    older = {
        skip_id: policies.Misfire(policy=policies.MisfirePolicy.SKIP),
        catch_up_id: policies.Misfire(policy=policies.MisfirePolicy.FIRE_ALL, catch_up_max=100),
    }
    for schedule_id, misfire in older.items():
        put_on_the_tenant_id(
            table,
            a_schedule(
                schedule_id,
                next_fire=SYSTEM_START,
                created_at=SYSTEM_START - timedelta(days=1),
                target={"type": "python", "handler": "noop"},
                misfire=misfire,
            ),
        )
    tk = system.ticker(use_lease=False)
    # WHEN the ticker runs five minutes before the migration
    for _ in range(5 * 60):
        tk.tick()
        system.clock.advance(1)
    # THEN neither fired: the ticker cannot advance a schedule its key does not hold
    assert not system.log.sent
    # WHEN the migration moves them and the ticker runs two minutes more
    assert migrate(table, "--json") == 0
    assert json.loads(capsys.readouterr().out)["moved"] == 2
    for _ in range(2 * 60):
        tk.tick()
        system.clock.advance(1)
    end = system.clock.now()
    sent = [occurrence.parse_key(k) for k in system.log.sent]
    minutes = int((end - SYSTEM_START) / MINUTE) + 1
    every_minute = [SYSTEM_START + n * MINUTE for n in range(minutes)]
    # THEN the catch-up schedule sent every minute it missed, each once (and the fires of
    # the ticker's lookahead past the end, ahead of their time)
    caught = [k.fire_time for k in sent if k.schedule_id == catch_up_id]
    assert len(caught) == len(set(caught))
    assert sorted(t for t in caught if t <= end) == every_minute
    # AND the skipping one recorded those more than its grace late as skipped, sent the
    # rest, and none twice
    fired = [k.fire_time for k in sent if k.schedule_id == skip_id]
    history = system.occurrences.history(TENANT, skip_id, limit=100).items
    skipped = {o.fire_time: o for o in history if o.state is occurrence.State.SKIPPED}
    assert all(o.exit_reason == "skipped: misfire" for o in skipped.values())
    assert len(fired) == len(set(fired)) and not set(fired) & set(skipped)
    assert sorted({t for t in fired if t <= end} | set(skipped)) == every_minute
    # the move came five minutes after the first fire: those up to its grace (60 s)
    # before it were skipped, the later ones sent
    assert sorted(skipped) == [SYSTEM_START + n * MINUTE for n in range(4)]


def test_items_changing_under_every_pass_stop_the_command_at_its_pass_cap_with_exit_1(
    table: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an older item off its key that an older version writes between every read and
    # every move
    schedule_id = next(s for s in IDS if model.tenant_key(TENANT, s) != TENANT)
    put_on_the_tenant_id(table, a_schedule(schedule_id))
    client = boto3.client("dynamodb", region_name=REGION)
    move = schedules_dynamodb.DynamoScheduleStore._move

    def advanced_first(self: schedules_dynamodb.DynamoScheduleStore, record: Any, key: str) -> bool:
        client.update_item(
            TableName=table,
            Key={"tenant_id": {"S": TENANT}, "schedule_id": {"S": schedule_id}},
            UpdateExpression="SET version = version + :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
        return move(self, record, key)

    monkeypatch.setattr(schedules_dynamodb.DynamoScheduleStore, "_move", advanced_first)
    # WHEN the migration runs with a cap of 3 passes
    code = migrate(table, "--json", "--max-passes", "3")
    out, err = capsys.readouterr()
    # THEN it stops after 3, names the item still changing and exits 1, the item whole
    assert code == 1
    assert json.loads(out) == {"scanned": 3, "moved": 0, "passes": 3, "still_changing": 1}
    assert "1 schedules changed while being moved in the last of 3 passes" in err
    assert keys_held(table) == {TENANT}
    # AND a cap below 1 is refused, naming the option, before any pass
    assert migrate(table, "--max-passes", "0") == 2
    assert "argument --max-passes: must be at least 1" in capsys.readouterr().err


def test_a_pass_resumed_from_a_cursor_is_followed_by_a_whole_pass(
    table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN older items off their keys, and a pass interrupted after its first page
    for schedule_id in IDS:
        put_on_the_tenant_id(table, a_schedule(schedule_id))
    client = boto3.client("dynamodb", region_name=REGION)
    first_page = [
        _decode(i)["schedule_id"] for i in client.scan(TableName=table, Limit=10)["Items"]
    ]
    first = store(table).move_to_tenant_keys(limit=10)
    assert first.cursor is not None
    # AND an item of that page put back on the tenant id (as if its move was cancelled)
    before = next(s for s in first_page if model.tenant_key(TENANT, s) != TENANT)
    store(table).delete(TENANT, before)
    put_on_the_tenant_id(table, a_schedule(before))
    on_the_tenant_id = {"tenant_id": {"S": TENANT}, "schedule_id": {"S": before}}
    assert "Item" in client.get_item(TableName=table, Key=on_the_tenant_id)
    # WHEN the command resumes from the cursor
    assert migrate(table, "--json", "--cursor", first.cursor) == 0
    totals = json.loads(capsys.readouterr().out)
    # THEN a whole pass followed the resumed one, and moved the item before the cursor
    assert totals["passes"] == 2
    assert keys_held(table) == set(model.tenant_keys(TENANT))
    assert store(table).get(TENANT, before) == a_schedule(before)
    assert "Item" not in client.get_item(TableName=table, Key=on_the_tenant_id)
