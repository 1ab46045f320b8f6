"""One contract suite for every implementation of the ports.

Each test asks for a port (``schedule_store``, ``occurrence_store``, ``work_queue``,
``lease_store``, ``slot_store``) and runs once per backend in BACKENDS: memory, memory
with a lagging index, and DynamoDB and SQS on moto. The tests speak
only through the Protocols in fireline.ports, so a backend passes by behaving like the
others, not by sharing their internals. To hold another implementation to the same
behaviour (DynamoDB and SQS on moto), add a Backend to BACKENDS; its factories honour the
settings in support.

The DynamoDB ports also run on dynalite, an independent DynamoDB implementation started
on 127.0.0.1 for the session (helpers.dynalite): a strictness check on moto and on our
reading of DynamoDB. What dynalite does not implement is named in DYNALITE_DEPARTURES.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fireline import ports
from fireline.adapters import (
    leases_dynamodb,
    memory,
    occurrences_dynamodb,
    schedules_dynamodb,
    slots_dynamodb,
    sqs,
)
from fireline.domain import model
from helpers import dynalite
from helpers.aws import REGION, Stack, serialized_item_writes, sqs_follows

from .support import MAX_RECEIVE_COUNT, SHARDS, START, VISIBILITY_TIMEOUT, Backend


def _memory_queue(clock: memory.FakeClock) -> ports.WorkQueue:
    config = memory.QueueConfig(
        visibility_timeout=VISIBILITY_TIMEOUT, max_receive_count=MAX_RECEIVE_COUNT
    )
    return memory.MemoryWorkQueue(clock, {name: config for name in model.JOB_CLASSES})


class _Moto:
    """DynamoDB and SQS adapters on moto, with the template's tables and queues.

    Every factory call deploys a fresh copy of the template's tables and queues, so each
    port starts empty (hypothesis examples build one each).
    """

    exits: contextlib.ExitStack

    @contextlib.contextmanager
    def session(self) -> Iterator[object]:
        with contextlib.ExitStack() as exits:
            exits.enter_context(mock_aws())
            exits.enter_context(serialized_item_writes())
            self.exits = exits
            yield self

    def _fresh(self) -> Stack:
        return Stack.create(prefix=f"c{next(_copies)}")

    def _ddb(self) -> Any:
        return boto3.client("dynamodb", region_name=REGION)

    def schedule_store(self) -> ports.ScheduleStore:
        table = self._fresh().tables["SchedulesTable"]
        return schedules_dynamodb.DynamoScheduleStore(self._ddb(), table, shards=SHARDS)

    def occurrence_store(self) -> ports.OccurrenceStore:
        return occurrences_dynamodb.DynamoOccurrenceStore(
            self._ddb(), self._fresh().tables["OccurrencesTable"]
        )

    def lease_store(self) -> ports.LeaseStore:
        return leases_dynamodb.DynamoLeaseStore(self._ddb(), self._fresh().tables["LeasesTable"])

    def slot_store(self) -> ports.SlotStore:
        return slots_dynamodb.DynamoSlotStore(self._ddb(), self._fresh().tables["SlotsTable"])

    def work_queue(self, clock: memory.FakeClock) -> ports.WorkQueue:
        stack = self._fresh()
        self.exits.enter_context(sqs_follows(clock))
        client = boto3.client("sqs", region_name=REGION)
        urls, dead = {}, {}
        for job_class in model.JOB_CLASSES:
            name = job_class.capitalize()
            urls[job_class] = stack.queues[f"{name}Queue"]
            dead[job_class] = stack.queues[f"{name}DeadLetterQueue"]
            dead_arn = client.get_queue_attributes(
                QueueUrl=dead[job_class], AttributeNames=["QueueArn"]
            )["Attributes"]["QueueArn"]
            client.set_queue_attributes(
                QueueUrl=urls[job_class],
                Attributes={
                    "VisibilityTimeout": str(VISIBILITY_TIMEOUT),
                    "RedrivePolicy": json.dumps(
                        {"deadLetterTargetArn": dead_arn, "maxReceiveCount": MAX_RECEIVE_COUNT}
                    ),
                },
            )
        return sqs.SqsWorkQueue(client, urls, dead)


class _Lagging:
    """The memory adapters with their indexes lagging, as DynamoDB's GSIs do: a write
    reaches the due index only when the test lets the index catch up (``settle``), so
    every test that reads the index right after a write sees it stale, and the contract
    states what must hold then too."""

    lag: memory.IndexLag

    @contextlib.contextmanager
    def session(self) -> Iterator[object]:
        self.lag = memory.IndexLag()  # no clock: nothing shows until settled
        yield self

    def schedule_store(self) -> ports.ScheduleStore:
        return memory.MemoryScheduleStore(shards=SHARDS, lag=self.lag)

    def settle(self) -> None:
        self.lag.settle()


class _Dynalite:
    """The DynamoDB adapters on dynalite (the server runs for the whole session); each
    factory call creates a fresh copy of the template's table. It has no SQS."""

    endpoint: str

    def _table(self, logical: str) -> tuple[Any, str]:
        ddb = dynalite.client(self.endpoint)
        return ddb, dynalite.create_table(ddb, logical)

    def schedule_store(self) -> ports.ScheduleStore:
        return schedules_dynamodb.DynamoScheduleStore(*self._table("SchedulesTable"), shards=SHARDS)

    def occurrence_store(self) -> ports.OccurrenceStore:
        return occurrences_dynamodb.DynamoOccurrenceStore(*self._table("OccurrencesTable"))

    def lease_store(self) -> ports.LeaseStore:
        return leases_dynamodb.DynamoLeaseStore(*self._table("LeasesTable"))

    def slot_store(self) -> ports.SlotStore:
        return slots_dynamodb.DynamoSlotStore(*self._table("SlotsTable"))

    def work_queue(self, clock: memory.FakeClock) -> ports.WorkQueue:
        pytest.skip("dynalite is DynamoDB only: the queue's contract runs on memory and moto")


# Where dynalite departs from DynamoDB, named with the reason; these run on the others.
# Each of these calls a conditional write that reads the failed condition's item back.
DYNALITE_DEPARTURES: dict[str, str] = dict.fromkeys(
    [
        "test_given_a_running_occurrence_when_claimed_before_its_hold_ends_then_refused",
        "test_given_an_occurrence_with_an_outcome_when_claimed_then_refused_and_unchanged",
        "test_given_a_settled_row_when_claimed_with_an_intent_then_nothing_changes",
        "test_given_deliveries_racing_to_write_a_fires_row_then_exactly_one_claims_it",
        "test_given_deliveries_racing_to_claim_one_occurrence_then_exactly_one_runs_it",
        "test_given_two_workers_claiming_one_occurrence_then_the_second_is_refused",
        "test_given_a_finished_occurrence_when_a_late_update_expects_running_then_false",
        "test_given_another_version_when_replaced_then_conflict_and_nothing_changes",
    ],
    dynalite.NO_RETURN_VALUES_ON_FAILURE,
) | dict.fromkeys(
    # A run's creation with its entry among the workflow's runs is one transaction
    # (test_workflow_store.py); a node's success is plain writes, and runs there too.
    [
        "test_given_a_new_run_when_created_then_it_reads_back_whole_and_a_repeat_is_refused",
        "test_given_a_run_with_no_field_at_its_default_then_every_field_reads_back",
        "test_given_a_run_when_updated_from_what_was_read_then_it_lands_once",
        "test_given_a_run_when_its_generation_moved_on_then_a_stale_writer_loses",
        "test_given_a_materialized_count_when_another_start_wrote_more_then_the_update_loses",
        "test_active_runs_pages_through_running_runs_only",
        "test_given_no_running_run_then_active_runs_is_one_empty_page",
        # A limit override and its entry in the register are one transaction.
        "test_given_a_limit_override_then_held_shows_it_beside_the_slots",
        "test_given_a_limit_override_when_set_again_then_the_last_one_holds",
        "test_given_a_limit_override_when_set_to_none_then_the_tenant_has_the_default_again",
        "test_given_an_out_of_range_limit_when_set_then_refused_and_the_override_stays",
        "test_given_two_tenants_then_their_slots_and_limits_are_independent",
        "test_given_a_built_register_then_each_change_of_an_override_shows_in_it",
        "test_given_overrides_set_before_the_register_then_it_is_unknown_until_built",
        "test_given_an_out_of_range_limit_then_the_register_is_unchanged",
        "test_given_a_full_register_when_another_override_is_set_then_refused_and_nothing_written",
    ],
    dynalite.NO_TRANSACTIONS,
)

# Where moto departs from AWS, named with the reason; these tests run on memory only.
MOTO_DEPARTURES = {
    "test_given_a_message_received_again_when_deleted_with_the_old_receipt_then_it_stays": (
        "moto deletes a message with any receipt it ever had; AWS documents that a stale "
        "receipt may not delete it, which the memory queue models"
    ),
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = getattr(item, "originalname", item.name)
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec else {}
        chosen = params.get("backend", params.get("backend_name"))
        if chosen == "moto" and name in MOTO_DEPARTURES:
            item.add_marker(pytest.mark.skip(reason=MOTO_DEPARTURES[name]))
        if chosen == "dynalite" and name in DYNALITE_DEPARTURES:
            item.add_marker(pytest.mark.skip(reason=DYNALITE_DEPARTURES[name]))


_copies = itertools.count()
_moto = _Moto()
_lagging = _Lagging()
_dynalite = _Dynalite()

BACKENDS: dict[str, Backend] = {
    "memory": Backend(
        schedule_store=lambda: memory.MemoryScheduleStore(shards=SHARDS),
        occurrence_store=memory.MemoryOccurrenceStore,
        work_queue=_memory_queue,
        lease_store=memory.MemoryLeaseStore,
        slot_store=memory.MemorySlotStore,
    ),
    "lagging": Backend(
        schedule_store=_lagging.schedule_store,
        occurrence_store=memory.MemoryOccurrenceStore,
        work_queue=_memory_queue,
        lease_store=memory.MemoryLeaseStore,
        slot_store=memory.MemorySlotStore,
        session=_lagging.session,
        settle=_lagging.settle,
    ),
    "moto": Backend(
        schedule_store=_moto.schedule_store,
        occurrence_store=_moto.occurrence_store,
        work_queue=_moto.work_queue,
        lease_store=_moto.lease_store,
        slot_store=_moto.slot_store,
        session=_moto.session,
    ),
}

if dynalite.ENABLED:
    BACKENDS["dynalite"] = Backend(
        schedule_store=_dynalite.schedule_store,
        occurrence_store=_dynalite.occurrence_store,
        work_queue=_dynalite.work_queue,
        lease_store=_dynalite.lease_store,
        slot_store=_dynalite.slot_store,
    )


@pytest.fixture(scope="session")
def dynalite_endpoint() -> Iterator[str]:
    """dynalite on 127.0.0.1 for the session (installed on first use)."""
    why = dynalite.unavailable()
    if why is not None:
        pytest.skip(why)
    with dynalite.server() as endpoint:
        yield endpoint


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "dynalite":
        _dynalite.endpoint = request.getfixturevalue("dynalite_endpoint")
    chosen = BACKENDS[request.param]
    with chosen.session():
        yield chosen


@pytest.fixture
def clock() -> memory.FakeClock:
    return memory.FakeClock(START)


@pytest.fixture
def schedule_store(backend: Backend) -> ports.ScheduleStore:
    return backend.schedule_store()


@pytest.fixture
def settled(backend: Backend) -> Callable[[ports.ScheduleStore], ports.ScheduleStore]:
    """``settled(store)``: the store once its index has seen every write made so far."""

    def wait(store: ports.ScheduleStore) -> ports.ScheduleStore:
        backend.settle()
        return store

    return wait


@pytest.fixture
def occurrence_store(backend: Backend) -> ports.OccurrenceStore:
    return backend.occurrence_store()


@pytest.fixture
def work_queue(backend: Backend, clock: memory.FakeClock) -> ports.WorkQueue:
    return backend.work_queue(clock)


@pytest.fixture
def lease_store(backend: Backend) -> ports.LeaseStore:
    return backend.lease_store()


@pytest.fixture
def slot_store(backend: Backend) -> ports.SlotStore:
    return backend.slot_store()
