"""Quota contract: creates take a unit of the tenant's quota in the same atomic write,
deletes and a job's end give it back once, and a refusal writes nothing.

The same tests run on the memory stores and on DynamoDB (moto, the template's tables):
the schedule store and the workflow store sharing one quota store (the slots table).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fireline import ports
from fireline.adapters import (
    memory,
    quotas_dynamodb,
    schedules_dynamodb,
    slots_dynamodb,
    workflows_dynamodb,
)
from fireline.domain import errors, model, quota, workflow
from helpers.aws import REGION, Stack, serialized_item_writes
from helpers.faults import FaultPlan

from .support import OTHER_TENANT, SHARDS, START, TENANT, a_schedule

SCHEDULES = quota.Quota.SCHEDULES
JOBS = quota.Quota.ACTIVE_JOBS
_copies = itertools.count()


@dataclass
class Stores:
    schedules: ports.ScheduleStore
    quotas: ports.QuotaStore
    workflows: ports.WorkflowStore
    slots: ports.SlotStore
    # The DynamoDB client under the stores (None on memory), for faults.
    client: Any = None


@contextlib.contextmanager
def _memory() -> Iterator[Stores]:
    quotas = memory.MemoryQuotaStore()
    yield Stores(
        schedules=memory.MemoryScheduleStore(shards=SHARDS, quotas=quotas),
        quotas=quotas,
        workflows=memory.MemoryWorkflowStore(quotas=quotas),
        slots=memory.MemorySlotStore(),
    )


@contextlib.contextmanager
def _moto() -> Iterator[Stores]:
    with mock_aws(), serialized_item_writes():
        stack = Stack.create(prefix=f"q{next(_copies)}")
        client = boto3.client("dynamodb", region_name=REGION)
        quotas = quotas_dynamodb.DynamoQuotaStore(
            client, stack.tables["SlotsTable"], sleep=lambda _: None
        )
        yield Stores(
            schedules=schedules_dynamodb.DynamoScheduleStore(
                client, stack.tables["SchedulesTable"], shards=SHARDS, quotas=quotas
            ),
            quotas=quotas,
            workflows=workflows_dynamodb.DynamoWorkflowStore(
                client, stack.tables["WorkflowsTable"], quotas=quotas
            ),
            slots=slots_dynamodb.DynamoSlotStore(client, stack.tables["SlotsTable"]),
            client=client,
        )


BACKENDS = {"memory": _memory, "moto": _moto}


@pytest.fixture(params=sorted(BACKENDS))
def stores(request: pytest.FixtureRequest) -> Iterator[Stores]:
    with BACKENDS[request.param]() as built:
        yield built


def charge(name: quota.Quota = SCHEDULES, limit: int = 2) -> quota.Charge:
    return quota.Charge(name, limit)


def held(schedule_id: str, **fields: Any) -> model.Schedule:
    return replace(a_schedule(schedule_id, **fields), quota_held=True)


def used(stores: Stores, name: quota.Quota = SCHEDULES, tenant_id: str = TENANT) -> int:
    return stores.quotas.usage(tenant_id).count(name)


# --- taking and refusing -----------------------------------------------------------------


def test_given_a_tenant_at_its_limit_when_it_creates_then_refused_and_nothing_written(
    stores: Stores,
) -> None:
    # GIVEN two schedules under a limit of 2
    stores.schedules.create(held("a"), charge=charge())
    stores.schedules.create(held("b"), charge=charge())
    assert used(stores) == 2
    # WHEN a third is created
    with pytest.raises(errors.QuotaExceeded) as refused:
        stores.schedules.create(held("c"), charge=charge())
    # THEN the error names the quota, its limit and the use
    assert (refused.value.quota, refused.value.limit, refused.value.used) == ("schedules", 2, 2)
    assert refused.value.retry_later is False
    # AND nothing was written: no item, no unit
    assert stores.schedules.get(TENANT, "c") is None
    assert used(stores) == 2
    # AND another tenant's quota is its own
    stores.schedules.create(held("c", tenant_id=OTHER_TENANT), charge=charge())
    assert used(stores, tenant_id=OTHER_TENANT) == 1


def test_given_a_created_schedule_then_it_is_marked_as_holding_a_unit(stores: Stores) -> None:
    stores.schedules.create(held("a"), charge=charge())

    found = stores.schedules.get(TENANT, "a")

    assert found is not None and found.quota_held is True


def test_given_a_full_quota_when_one_is_deleted_then_a_unit_is_free_again(
    stores: Stores,
) -> None:
    stores.schedules.create(held("a"), charge=charge(limit=1))
    # WHEN it is deleted, giving its unit back
    assert stores.schedules.delete(TENANT, "a", refund=SCHEDULES) is True
    # THEN the count is back to zero and another fits
    assert used(stores) == 0
    stores.schedules.create(held("b"), charge=charge(limit=1))
    assert used(stores) == 1


def test_given_a_deleted_schedule_when_the_delete_is_repeated_then_nothing_is_given_back_twice(
    stores: Stores,
) -> None:
    stores.schedules.create(held("a"), charge=charge())
    stores.schedules.create(held("b"), charge=charge())
    assert stores.schedules.delete(TENANT, "a", refund=SCHEDULES) is True
    # WHEN the same delete comes again (a retried request)
    again = stores.schedules.delete(TENANT, "a", refund=SCHEDULES)
    # THEN it finds nothing and the count keeps the one schedule left
    assert again is False
    assert used(stores) == 1


def test_given_an_id_taken_when_created_again_then_already_exists_and_no_second_unit(
    stores: Stores,
) -> None:
    stores.schedules.create(held("a"), charge=charge())

    with pytest.raises(errors.AlreadyExists):
        stores.schedules.create(held("a"), charge=charge())

    assert used(stores) == 1


@pytest.mark.parametrize("limit", [3, 1])
def test_given_creates_racing_for_the_last_unit_then_exactly_one_takes_it(
    stores: Stores, limit: int
) -> None:
    # GIVEN a tenant one unit under its limit
    for i in range(limit - 1):
        stores.schedules.create(held(f"s{i}"), charge=charge(limit=limit))
    # WHEN eight creates race for the last unit
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def create(i: int) -> None:
        barrier.wait()
        try:
            stores.schedules.create(held(f"race{i}"), charge=charge(limit=limit))
            outcomes.append("created")
        except errors.QuotaExceeded:
            outcomes.append("refused")

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    # THEN one was created, seven refused, and the count is the limit
    assert sorted(outcomes) == ["created"] + ["refused"] * 7
    assert used(stores) == limit
    created = [i for i in range(8) if stores.schedules.get(TENANT, f"race{i}") is not None]
    assert len(created) == 1


# --- limits and overrides ----------------------------------------------------------------


def test_given_an_override_then_it_is_the_limit_in_place_of_the_default(stores: Stores) -> None:
    stores.quotas.set_limit(TENANT, SCHEDULES, 1)
    stores.schedules.create(held("a"), charge=charge(limit=100))

    with pytest.raises(errors.QuotaExceeded) as refused:
        stores.schedules.create(held("b"), charge=charge(limit=100))

    assert refused.value.limit == 1
    assert stores.quotas.usage(TENANT).overrides == {SCHEDULES: 1}
    # WHEN the override is lifted (0: no limit) the default no longer applies either
    stores.quotas.set_limit(TENANT, SCHEDULES, 0)
    stores.schedules.create(held("b"), charge=charge(limit=1))
    # AND when it is removed, the default applies again
    stores.quotas.set_limit(TENANT, SCHEDULES, None)
    with pytest.raises(errors.QuotaExceeded):
        stores.schedules.create(held("c"), charge=charge(limit=2))
    assert stores.quotas.usage(TENANT).overrides == {}


def test_given_a_default_of_zero_then_there_is_no_limit(stores: Stores) -> None:
    for i in range(5):
        stores.schedules.create(held(f"s{i}"), charge=charge(limit=0))

    assert used(stores) == 5


def test_an_override_out_of_range_is_refused_naming_the_quota(stores: Stores) -> None:
    with pytest.raises(errors.ValidationError) as refused:
        stores.quotas.set_limit(TENANT, SCHEDULES, -1)

    assert refused.value.field == "schedules"
    assert stores.quotas.usage(TENANT).overrides == {}


def test_the_quota_item_is_not_among_the_tenants_slots(stores: Stores) -> None:
    # GIVEN quota use and an override, and a concurrency override, in the same table
    stores.schedules.create(held("a"), charge=charge())
    stores.quotas.set_limit(TENANT, SCHEDULES, 5)
    stores.slots.set_limit(TENANT, 3)
    # THEN the slot store reads no slot and its own override only
    assert stores.slots.held(TENANT) == ([], 3)


# --- a job's end ---------------------------------------------------------------------------


def test_given_a_job_holding_a_unit_when_released_twice_then_given_back_once(
    stores: Stores,
) -> None:
    stores.schedules.create(held("job_1", kind=model.Kind.JOB), charge=charge(JOBS))
    stores.schedules.create(held("job_2", kind=model.Kind.JOB), charge=charge(JOBS))
    # WHEN its end is seen twice (a redelivery, a cancel and the worker)
    first = stores.schedules.release(TENANT, "job_1", JOBS)
    second = stores.schedules.release(TENANT, "job_1", JOBS)
    # THEN the unit came back once, and the job stays, unmarked
    assert (first, second) == (True, False)
    assert used(stores, JOBS) == 1
    kept = stores.schedules.get(TENANT, "job_1")
    assert kept is not None and kept.quota_held is False
    # AND a job that does not exist gives nothing back
    assert stores.schedules.release(TENANT, "job_9", JOBS) is False
    assert used(stores, JOBS) == 1


def test_given_a_released_job_then_a_replace_from_before_cannot_mark_it_again(
    stores: Stores,
) -> None:
    # GIVEN a job read while it held its unit, then released
    stores.schedules.create(held("job_1", kind=model.Kind.JOB), charge=charge(JOBS))
    read = stores.schedules.get(TENANT, "job_1")
    assert read is not None
    assert stores.schedules.release(TENANT, "job_1", JOBS)
    # WHEN a write from that read lands (a cancel racing the job's end)
    cancelled = replace(read, state=model.ScheduleState.CANCELLED, next_fire=None)
    with pytest.raises(errors.ConflictError):
        stores.schedules.replace(cancelled, expected_version=read.version)
    # THEN the job is not marked again, so its unit cannot be given back twice
    after = stores.schedules.get(TENANT, "job_1")
    assert after is not None and after.quota_held is False
    assert stores.schedules.release(TENANT, "job_1", JOBS) is False
    assert used(stores, JOBS) == 0


# --- batches ------------------------------------------------------------------------------


def jobs(*ids: str) -> list[model.Schedule]:
    return [a_schedule(i, kind=model.Kind.JOB) for i in ids]


@pytest.mark.parametrize("override", [None, 4])
def test_given_a_batch_that_would_pass_the_limit_then_refused_whole_and_nothing_written(
    stores: Stores, override: int | None
) -> None:
    # GIVEN a limit of 4 (the default, or an override over a larger default) and 2 used
    stores.quotas.set_limit(TENANT, JOBS, override)
    limit = charge(JOBS, limit=4 if override is None else 100)
    stores.schedules.create_many(jobs("job_1", "job_2"), charge=limit)
    # WHEN a batch of 3 comes
    with pytest.raises(errors.QuotaExceeded) as refused:
        stores.schedules.create_many(jobs("job_3", "job_4", "job_5"), charge=limit)
    # THEN refused naming the limit and the use, nothing written
    assert (refused.value.quota, refused.value.limit, refused.value.used) == ("active_jobs", 4, 2)
    assert [stores.schedules.get(TENANT, f"job_{i}") for i in (3, 4, 5)] == [None] * 3
    assert used(stores, JOBS) == 2
    # AND a batch of 2 fits, to the limit, its holder holding each job's unit
    stored = stores.schedules.create_many(jobs("job_3", "job_4"), charge=limit)
    assert used(stores, JOBS) == 4
    found = stores.schedules.get(TENANT, "job_4")
    assert found is not None and found.held_in is not None and found.quota_held is False
    assert found == stored[1]


def test_given_no_limit_then_a_batch_of_any_size_fits(stores: Stores) -> None:
    stores.quotas.set_limit(TENANT, JOBS, 0)

    stores.schedules.create_many(jobs(*(f"job_{i}" for i in range(30))), charge=charge(JOBS, 2))

    assert used(stores, JOBS) == 30


def test_given_a_batch_whose_first_id_is_taken_then_already_exists_and_nothing_taken(
    stores: Stores,
) -> None:
    # GIVEN a batch that took the tenant to its limit
    stores.schedules.create_many(jobs("job_1", "job_2"), charge=charge(JOBS))
    # WHEN the same batch comes again, its first job written alone and conditionally
    # THEN it is told so (not refused over the quota its own units fill)
    with pytest.raises(errors.AlreadyExists):
        stores.schedules.create_many(jobs("job_1", "job_2"), charge=charge(JOBS), first_new=True)
    # THEN no unit was kept
    assert used(stores, JOBS) == 2


def test_given_jobs_released_together_then_each_unit_comes_back_once(stores: Stores) -> None:
    for job in jobs("job_1", "job_2", "job_3"):  # each created alone: each holds a mark
        stores.schedules.create(job, charge=charge(JOBS, 5))
    # WHEN two are released together, one of them twice in the call, then again
    first = stores.schedules.release_many(TENANT, ["job_1", "job_2", "job_1"], JOBS)
    again = stores.schedules.release_many(TENANT, ["job_2", "job_3"], JOBS)
    # THEN each came back once
    assert (first, again) == (["job_1", "job_2"], ["job_3"])
    assert used(stores, JOBS) == 0
    assert stores.schedules.release_many(TENANT, ["job_1", "job_9"], JOBS) == []
    assert used(stores, JOBS) == 0


# --- a batch's holders ---------------------------------------------------------------------


def holders(stores: Stores) -> list[quota.Holder]:
    assert isinstance(stores.quotas, memory.MemoryQuotaStore | quotas_dynamodb.DynamoQuotaStore)
    return stores.quotas.holders(TENANT)


def job_at(job_id: str, minute: int, second: int = 0) -> model.Schedule:
    return a_schedule(
        job_id, kind=model.Kind.JOB, next_fire=START + timedelta(minutes=minute, seconds=second)
    )


def test_given_a_batch_then_one_holder_per_fire_minute_lists_its_jobs_as_many_as_counted(
    stores: Stores,
) -> None:
    # WHEN a batch of five jobs firing in two minutes is created
    batch = [
        job_at("job_1", 0),
        job_at("job_2", 0, 59),
        job_at("job_3", 1),
        job_at("job_4", 1, 30),
        job_at("job_5", 0, 1),
    ]
    stored = stores.schedules.create_many(batch, charge=charge(JOBS, 10))
    # THEN two holders, each visited once its minute is over, list the jobs of their minute
    found = sorted(holders(stores), key=lambda h: h.number)
    assert [len(h.jobs) for h in found] == [3, 2]
    assert [h.visit_at for h in found] == [START + timedelta(minutes=m, seconds=30) for m in (1, 2)]
    assert {model.held_entry(j) for j in stored} == found[0].jobs | found[1].jobs
    # AND each job names its holder, and the count is the jobs the holders list
    assert {j.schedule_id: j.held_in for j in stored} == {
        quota.parse_held_entry(e)[0]: h.number for h in found for e in h.jobs
    }
    assert used(stores, JOBS) == 5


def test_given_a_batch_over_more_minutes_than_a_transaction_holds_then_minutes_share_holders(
    stores: Stores,
) -> None:
    # WHEN a batch of 100 jobs, each in a minute of its own, is created
    batch = [job_at(f"job_{m}", m) for m in range(100)]
    stored = stores.schedules.create_many(batch, charge=charge(JOBS, 0))
    # THEN at most 99 holders (with the count, one transaction) list each job once, each
    # visited after the minute of every job it lists
    found = holders(stores)
    assert len(found) <= quota.MOST_HOLDERS
    entries = [e for h in found for e in h.jobs]
    assert sorted(entries) == sorted(model.held_entry(j) for j in stored)
    for holder in found:
        fires = [quota.parse_held_entry(e)[1] for e in holder.jobs]
        assert holder.visit_at == quota.visit_time(max(fires))
    assert used(stores, JOBS) == 100


def test_given_a_batch_jobs_cancel_then_its_unit_comes_back_once(stores: Stores) -> None:
    stored = stores.schedules.create_many(jobs("job_1", "job_2"), charge=charge(JOBS, 10))
    # WHEN one job's unit is released twice (a cancel, then its retry)
    first = stores.schedules.release_held(stored[0])
    second = stores.schedules.release_held(stored[0])
    # THEN it came back once, and the holder lists the other job only
    assert (first, second) == (True, False)
    assert used(stores, JOBS) == 1
    (holder,) = holders(stores)
    assert holder.jobs == {model.held_entry(stored[1])}


def test_given_a_holder_read_then_a_change_since_makes_its_visit_wait(stores: Stores) -> None:
    stored = stores.schedules.create_many(jobs("job_1", "job_2", "job_3"), charge=charge(JOBS, 10))
    (read,) = holders(stores)
    # GIVEN a cancel after the sweep read the holder
    assert stores.schedules.release_held(stored[0])
    # WHEN the sweep gives back a job it saw ended, or the whole holder, as it read it
    assert (
        stores.quotas.unhold(
            TENANT, read.number, [model.held_entry(stored[1])], version=read.version
        )
        is False
    )
    assert stores.quotas.drop_holder(read) is False
    # THEN nothing more came back
    assert used(stores, JOBS) == 2
    # AND once read again, the visit applies: one job, then the holder with its last
    (again,) = holders(stores)
    assert stores.quotas.unhold(
        TENANT, again.number, [model.held_entry(stored[1])], version=again.version
    )
    (last,) = holders(stores)
    assert stores.quotas.drop_holder(last)
    assert (used(stores, JOBS), holders(stores)) == (0, [])


def test_given_a_batch_whose_first_id_is_taken_then_no_holder_is_left(stores: Stores) -> None:
    stores.schedules.create_many(jobs("job_1"), charge=charge(JOBS))
    with pytest.raises(errors.AlreadyExists):
        stores.schedules.create_many(jobs("job_1", "job_2"), charge=charge(JOBS, 5), first_new=True)
    assert used(stores, JOBS) == 1
    assert sum(len(h.jobs) for h in holders(stores)) == 1


# --- workflows -----------------------------------------------------------------------------


def a_meta(workflow_id: str, version: int = 1) -> workflow.DefinitionMeta:
    return workflow.DefinitionMeta(
        tenant_id=TENANT,
        workflow_id=workflow_id,
        version=version,
        nodes=1,
        edges=0,
        created_at=START,
        digest="0" * 16,
    )


def test_given_a_tenant_at_its_workflow_limit_then_a_new_workflow_is_refused(
    stores: Stores,
) -> None:
    workflows = charge(quota.Quota.WORKFLOWS, limit=1)
    assert stores.workflows.put_definition(a_meta("etl"), charge=workflows) is True
    # WHEN a second workflow is indexed
    with pytest.raises(errors.QuotaExceeded) as refused:
        stores.workflows.put_definition(a_meta("billing"), charge=workflows)
    # THEN refused, nothing indexed
    assert refused.value.quota == "workflows"
    assert stores.workflows.latest_definition(TENANT, "billing") is None
    # AND a version taken already is False, taking no unit
    assert stores.workflows.put_definition(a_meta("etl"), charge=workflows) is False
    assert used(stores, quota.Quota.WORKFLOWS) == 1


# --- uploads per day -----------------------------------------------------------------------


def test_uploads_are_counted_per_day_and_refused_past_the_limit_until_the_next(
    stores: Stores,
) -> None:
    uploads = charge(quota.Quota.UPLOADS_PER_DAY, limit=2)
    assert stores.quotas.count_upload(TENANT, "2026-03-01", uploads) == 1
    assert stores.quotas.count_upload(TENANT, "2026-03-01", uploads) == 2
    # WHEN a third comes the same day
    with pytest.raises(errors.QuotaExceeded) as refused:
        stores.quotas.count_upload(TENANT, "2026-03-01", uploads)
    # THEN refused as retryable later, the count unchanged
    assert (refused.value.quota, refused.value.limit, refused.value.used) == (
        "uploads_per_day",
        2,
        2,
    )
    assert refused.value.retry_later is True
    assert stores.quotas.usage(TENANT).count(quota.Quota.UPLOADS_PER_DAY, "2026-03-01") == 2
    # AND the next day starts from one
    assert stores.quotas.count_upload(TENANT, "2026-03-02", uploads) == 1


# --- lost answers (DynamoDB only: the fault is the client's) -------------------------------


@pytest.fixture
def on_moto() -> Iterator[Stores]:
    with _moto() as built:
        yield built


def test_given_a_create_whose_answer_was_lost_when_retried_then_one_item_and_one_unit(
    on_moto: Stores,
) -> None:
    stores = on_moto
    client = stores.client
    plan = FaultPlan(at={0: "after"}, only={"PutItem"})
    plan.attach(client)
    # WHEN the create takes effect (its unit, then its item) but the item's answer is lost
    with pytest.raises(errors.Unavailable):
        stores.schedules.create(held("a"), charge=charge())
    assert plan.fired["after"] == 1
    # AND the request is retried with the same id (its Idempotency-Key's)
    with pytest.raises(errors.AlreadyExists):
        stores.schedules.create(held("a"), charge=charge())
    # THEN there is one schedule and one unit taken
    assert stores.schedules.get(TENANT, "a") is not None
    assert used(stores) == 1


def test_given_a_delete_whose_answer_was_lost_when_retried_then_the_unit_came_back_once(
    on_moto: Stores,
) -> None:
    stores = on_moto
    client = stores.client
    stores.schedules.create(held("a"), charge=charge())
    stores.schedules.create(held("b"), charge=charge())
    FaultPlan(at={0: "after"}, only={"TransactWriteItems"}).attach(client)
    with pytest.raises(errors.Unavailable):
        stores.schedules.delete(TENANT, "a", refund=SCHEDULES)
    # WHEN retried
    assert stores.schedules.delete(TENANT, "a", refund=SCHEDULES) is False
    # THEN the count holds the one schedule left
    assert used(stores) == 1


def test_given_a_release_whose_answer_was_lost_then_it_is_given_back_once(
    on_moto: Stores,
) -> None:
    stores = on_moto
    client = stores.client
    stores.schedules.create(held("job_1", kind=model.Kind.JOB), charge=charge(JOBS))
    # GIVEN the mark's removal takes effect but its answer is lost
    plan = FaultPlan(at={0: "after"}, only={"UpdateItem"})
    plan.attach(client)
    # WHEN the job is released (the release sends it again, and finds its own write)
    assert stores.schedules.release(TENANT, "job_1", JOBS) is True
    assert plan.fired["after"] == 1
    # THEN the unit came back once, and a repeat gives nothing
    assert stores.schedules.release(TENANT, "job_1", JOBS) is False
    assert used(stores, JOBS) == 0


@pytest.mark.parametrize("operation", ["take", "give back"])
def test_given_a_count_change_whose_answer_was_lost_then_it_counts_once(
    on_moto: Stores, operation: str
) -> None:
    stores = on_moto
    quotas = stores.quotas
    assert isinstance(quotas, quotas_dynamodb.DynamoQuotaStore)
    quotas.take(TENANT, charge(JOBS, limit=2))
    # GIVEN the count's change takes effect but its answer is lost
    plan = FaultPlan(at={0: "after"}, only={"UpdateItem"})
    plan.attach(stores.client)
    # WHEN it is made (it is sent again, and finds its own token)
    if operation == "take":
        quotas.take(TENANT, charge(JOBS, limit=2))
    else:
        quotas.give_back(TENANT, JOBS)
    assert plan.fired["after"] == 1
    # THEN it counted once
    assert used(stores, JOBS) == (2 if operation == "take" else 0)
