"""BackfillStore contract: one suite, memory and DynamoDB on moto (the template's
WorkflowsTable, deployed fresh for each test). A record is created once, replaced only
from the revision read, read by its own tenant only, and listed as active while it runs.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from datetime import timedelta

import boto3
import pytest
from moto import mock_aws

from fireline import ports
from fireline.adapters import backfills_dynamodb, memory
from fireline.domain import backfill, errors
from helpers.aws import REGION, Stack, serialized_item_writes

from .support import START, TENANT

_copies = itertools.count()


@pytest.fixture(params=["memory", "moto"])
def store(request: pytest.FixtureRequest) -> Iterator[ports.BackfillStore]:
    if request.param == "memory":
        yield memory.MemoryBackfillStore()
        return
    with contextlib.ExitStack() as exits:
        exits.enter_context(mock_aws())
        exits.enter_context(serialized_item_writes())
        stack = Stack.create(prefix=f"bf{next(_copies)}")
        client = boto3.client("dynamodb", region_name=REGION)
        yield backfills_dynamodb.DynamoBackfillStore(client, stack.tables["WorkflowsTable"])


def a_backfill(backfill_id: str = "bf_1", schedule_id: str = "sch_1") -> backfill.Backfill:
    return backfill.Backfill(
        tenant_id=TENANT,
        schedule_id=schedule_id,
        backfill_id=backfill_id,
        version=3,
        job_class="default",
        start=START,
        end=START + timedelta(hours=3),
        overlap=backfill.Overlap.BUFFER_ALL,
        created_at=START + timedelta(hours=4),
        fires=3,
    )


def test_given_a_new_record_when_created_then_it_reads_back_whole_and_a_repeat_is_refused(
    store: ports.BackfillStore,
) -> None:
    # GIVEN a record with every field away from its default
    item = a_backfill().moved(
        created=2,
        existed=1,
        released=1,
        released_until=START,
        in_flight=("sch_1#3#2026-05-01T12:00:00Z",),
        run=1,
        cancelled=1,
    )
    # WHEN it is created
    store.create(item)
    # THEN it reads back as written, and a second create of its id is refused
    assert store.get(TENANT, "sch_1", "bf_1") == item
    with pytest.raises(errors.AlreadyExists):
        store.create(a_backfill())
    assert store.get(TENANT, "sch_1", "bf_1") == item


def test_given_a_record_when_replaced_from_a_stale_revision_then_refused_and_unchanged(
    store: ports.BackfillStore,
) -> None:
    # GIVEN a record moved on once
    first = a_backfill()
    store.create(first)
    moved = first.moved(released=1)
    assert store.replace(moved, expected_revision=first.revision)
    # WHEN a writer that read the first revision replaces it
    stale = first.moved(released=2)
    # THEN it is refused and the record stays as the first writer left it
    assert not store.replace(stale, expected_revision=first.revision)
    assert store.get(TENANT, "sch_1", "bf_1") == moved


def test_given_another_tenants_record_then_it_is_not_found(store: ports.BackfillStore) -> None:
    # GIVEN tenant-a's record
    store.create(a_backfill())
    # WHEN tenant-b reads it, or an id that was never created is read
    # THEN neither is found
    assert store.get("tenant-b", "sch_1", "bf_1") is None
    assert store.get(TENANT, "sch_1", "bf_2") is None


def test_active_lists_running_and_cancelling_records_only(store: ports.BackfillStore) -> None:
    # GIVEN a running, a cancelling and a finished record
    running, cancelling, done = (a_backfill(f"bf_{n}") for n in range(3))
    for item in (running, cancelling, done):
        store.create(item)
    store.replace(
        cancelling.moved(state=backfill.State.CANCELLING), expected_revision=cancelling.revision
    )
    store.replace(done.moved(state=backfill.State.DONE), expected_revision=done.revision)
    # WHEN the active ones are listed a page of one at a time
    found: list[tuple[str, str, str]] = []
    cursor = None
    for _ in range(5):
        page = store.active(limit=1, cursor=cursor)
        found += page.items
        cursor = page.cursor
        if cursor is None:
            break
    # THEN the running and the cancelling one are listed, with their tenant
    assert sorted(found) == [(TENANT, "sch_1", "bf_0"), (TENANT, "sch_1", "bf_1")]
