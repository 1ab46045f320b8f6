"""Per-tenant count quotas through the API, the services and the worker, on the memory
stores and on DynamoDB (moto): the same answers from both.

Over a quota the API answers 403 (429 for uploads per day, which a new day frees) with the
quota, its limit and its use, and writes nothing; a delete, or a one-off job's end, gives
its unit back once, whatever repeats.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fireline import ports
from fireline.adapters import (
    memory,
    occurrences_dynamodb,
    quotas_dynamodb,
    schedules_dynamodb,
    sqs,
    workflows_dynamodb,
)
from fireline.api import app as api_app
from fireline.domain import errors, model, quota, schedule
from fireline.services import dispatch, schedules, workflows
from fireline.services import worker as worker_service
from helpers import flows
from helpers.aws import REGION, RequestLog, Stack, serialized_item_writes
from helpers.system import api_event

A, B = "tenant-a", "tenant-b"
START = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
PYTHON = {"type": "python", "handler": "noop"}
SCHEDULE = {"spec": "rate(1 minute)", "target": PYTHON}
NOW_JOB = {"target": PYTHON, "delay_seconds": 0}
LIMITS = {
    quota.Quota.SCHEDULES: 2,
    quota.Quota.ACTIVE_JOBS: 2,
    quota.Quota.WORKFLOWS: 1,
    quota.Quota.WORKFLOW_VERSIONS: 2,
    quota.Quota.UPLOADS_PER_DAY: 2,
}
NODE = {"nodes": [{"id": "a", "target": PYTHON}], "edges": []}
_copies = itertools.count()

# The calls pass no Lambda context, so Powertools cannot tie the idempotency record's
# in-progress expiry to an invocation and says so; nothing to act on in a test.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Couldn't determine the remaining time left:UserWarning"
)


class LosesAnswers:
    """A schedule store whose next create takes effect and then fails as a lost answer
    does (the caller cannot know it landed)."""

    def __init__(self, inner: ports.ScheduleStore) -> None:
        self.inner = inner
        self.lose_next = False

    def create(self, item: model.Schedule, *, charge: quota.Charge | None = None) -> None:
        self.inner.create(item, charge=charge)
        if self.lose_next:
            self.lose_next = False
            raise errors.Unavailable("the answer was lost")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class Quotas:
    clock: memory.FakeClock
    schedules: LosesAnswers
    quotas: ports.QuotaStore
    occurrences: ports.OccurrenceStore
    queue: ports.WorkQueue
    documents: ports.DocumentStore
    service: schedules.ScheduleService
    workflows: workflows.WorkflowService

    def __post_init__(self) -> None:
        self.app = api_app.build_app(
            self.service, memory.MemoryIdempotencyStore(), workflows=self.workflows
        )

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        tenant: str = A,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        event = api_event(method, path, body, tenant=tenant, headers=headers)
        response = api_app.handle(self.app, event, None)
        text = response.get("body") or ""
        return response["statusCode"], json.loads(text) if text else None

    def used(self, name: quota.Quota, tenant: str = A) -> int:
        return self.quotas.usage(tenant).count(name)

    def stored(self, tenant: str = A) -> list[str]:
        return [s.schedule_id for s in self.schedules.list(tenant, limit=100).items]

    def worker(self) -> worker_service.Worker:
        def fail(context: Any) -> None:
            raise RuntimeError("always fails")

        return flows.counting_worker(
            schedules=self.schedules,
            occurrences=self.occurrences,
            queue=self.queue,
            clock=self.clock,
            handlers={"noop": lambda context: None, "fail": fail},
        )

    def run_due(self, job_id: str, tenant: str = A) -> dict[str, Any]:
        """The job's fire as the ticker sends it, handled by a worker; its message."""
        job = self.schedules.get(tenant, job_id)
        assert job is not None
        # Its one fire (a job due soon was sent by its create and is out of the due index).
        fire_time = schedule.next_fire(job.timing, schedule.EPOCH)
        assert fire_time is not None
        body = dispatch.fire_message(job, fire_time)
        self.worker().handle(body, remaining_ms=lambda: 60_000)
        return body


def _build(
    clock: memory.FakeClock,
    schedule_store: ports.ScheduleStore,
    quotas: ports.QuotaStore,
    occurrences: ports.OccurrenceStore,
    queue: ports.WorkQueue,
    workflow_store: ports.WorkflowStore,
    documents: ports.DocumentStore,
) -> Quotas:
    losing = LosesAnswers(schedule_store)
    flows = workflows.WorkflowService(
        store=workflow_store,
        documents=documents,
        queue=queue,
        clock=clock,
        quotas=quotas,
        limits=LIMITS,
    )
    service = schedules.ScheduleService(
        schedules=losing,
        occurrences=occurrences,
        queue=queue,
        clock=clock,
        workflows=flows,
        quotas=LIMITS,
    )
    return Quotas(clock, losing, quotas, occurrences, queue, documents, service, flows)


@contextlib.contextmanager
def _memory() -> Iterator[Quotas]:
    clock = memory.FakeClock(START)
    counts = memory.MemoryQuotaStore()
    yield _build(
        clock,
        memory.MemoryScheduleStore(quotas=counts),
        counts,
        memory.MemoryOccurrenceStore(),
        memory.MemoryWorkQueue(clock),
        memory.MemoryWorkflowStore(quotas=counts),
        memory.MemoryDocumentStore(),
    )


@contextlib.contextmanager
def _moto() -> Iterator[Quotas]:
    with mock_aws(), serialized_item_writes():
        stack = Stack.create(prefix=f"qi{next(_copies)}")
        ddb = boto3.client("dynamodb", region_name=REGION)
        tables = stack.tables
        counts = quotas_dynamodb.DynamoQuotaStore(ddb, tables["SlotsTable"])
        urls = {c: stack.queues[f"{c.capitalize()}Queue"] for c in model.JOB_CLASSES}
        queue = sqs.SqsWorkQueue(boto3.client("sqs", region_name=REGION), urls, {})
        yield _build(
            memory.FakeClock(START),
            schedules_dynamodb.DynamoScheduleStore(ddb, tables["SchedulesTable"], quotas=counts),
            counts,
            occurrences_dynamodb.DynamoOccurrenceStore(ddb, tables["OccurrencesTable"]),
            queue,
            workflows_dynamodb.DynamoWorkflowStore(ddb, tables["WorkflowsTable"], quotas=counts),
            memory.MemoryDocumentStore(),
        )


@pytest.fixture(params=["memory", "moto"])
def system(request: pytest.FixtureRequest) -> Iterator[Quotas]:
    with {"memory": _memory, "moto": _moto}[request.param]() as built:
        yield built


def quota_error(response: tuple[int, Any]) -> tuple[int, dict[str, Any]]:
    status, body = response
    return status, body["error"]


# --- schedules -----------------------------------------------------------------------------


def test_at_the_schedule_quota_a_create_is_403_naming_it_and_nothing_is_written(
    system: Quotas,
) -> None:
    for _ in range(2):
        assert system.call("POST", "/schedules", SCHEDULE)[0] == 201
    before = system.stored()
    # WHEN a third is created
    status, error = quota_error(system.call("POST", "/schedules", SCHEDULE))
    # THEN 403, the quota named with its limit and use
    assert status == 403
    assert error == {
        "type": "quota_exceeded",
        "message": "the schedules quota is used up: 2 of 2",
        "field": None,
        "quota": "schedules",
        "limit": 2,
        "used": 2,
    }
    # AND nothing was written
    assert system.stored() == before
    assert system.used(quota.Quota.SCHEDULES) == 2
    # AND another tenant is not held back
    assert system.call("POST", "/schedules", SCHEDULE, tenant=B)[0] == 201


def test_deleting_a_schedule_frees_its_unit_once(system: Quotas) -> None:
    created = [system.call("POST", "/schedules", SCHEDULE)[1] for _ in range(2)]
    doomed = created[0]["id"]
    # WHEN one is deleted, and the delete repeated
    assert system.call("DELETE", f"/schedules/{doomed}")[0] == 204
    assert system.call("DELETE", f"/schedules/{doomed}")[0] == 404
    # THEN one unit came back: one create fits, the next does not
    assert system.used(quota.Quota.SCHEDULES) == 1
    assert system.call("POST", "/schedules", SCHEDULE)[0] == 201
    assert system.call("POST", "/schedules", SCHEDULE)[0] == 403


def test_updates_pauses_and_resumes_keep_the_schedules_unit(system: Quotas) -> None:
    _, created = system.call("POST", "/schedules", SCHEDULE)
    sid = created["id"]
    updated = {**SCHEDULE, "spec": "rate(5 minutes)"}
    assert system.call("PUT", f"/schedules/{sid}", updated)[0] == 200
    assert system.call("POST", f"/schedules/{sid}/pause")[0] == 200
    assert system.call("POST", f"/schedules/{sid}/resume")[0] == 200
    # THEN its delete still gives its unit back
    assert system.call("DELETE", f"/schedules/{sid}")[0] == 204
    assert system.used(quota.Quota.SCHEDULES) == 0


def test_a_create_retried_with_its_idempotency_key_after_a_lost_answer_takes_one_unit(
    system: Quotas,
) -> None:
    key = {"Idempotency-Key": "create-nightly-1"}
    # GIVEN a create that took effect but whose answer was lost
    system.schedules.lose_next = True
    status, _ = system.call("POST", "/schedules", SCHEDULE, headers=key)
    assert status == 503
    # WHEN the client retries with the same key
    status, retried = system.call("POST", "/schedules", SCHEDULE, headers=key)
    # THEN it gets the schedule the first attempt created, and one unit is taken
    assert status == 201
    assert system.stored() == [retried["id"]]
    assert system.used(quota.Quota.SCHEDULES) == 1
    # AND a replay of the answered request takes none either
    assert system.call("POST", "/schedules", SCHEDULE, headers=key) == (201, retried)
    assert system.used(quota.Quota.SCHEDULES) == 1


# --- one-off jobs --------------------------------------------------------------------------


def test_at_the_active_jobs_quota_a_job_is_refused_until_one_finishes_once(
    system: Quotas,
) -> None:
    jobs = [system.call("POST", "/jobs", NOW_JOB)[1] for _ in range(2)]
    status, error = quota_error(system.call("POST", "/jobs", NOW_JOB))
    assert (status, error["quota"], error["limit"], error["used"]) == (403, "active_jobs", 2, 2)
    # WHEN one runs to success, and its message is delivered again
    body = system.run_due(jobs[0]["id"])
    system.worker().handle(body, remaining_ms=lambda: 60_000)
    # THEN its unit came back once
    assert system.used(quota.Quota.ACTIVE_JOBS) == 1
    assert system.call("GET", f"/jobs/{jobs[0]['id']}")[1]["state"] == "succeeded"
    assert system.call("POST", "/jobs", NOW_JOB)[0] == 201
    assert system.call("POST", "/jobs", NOW_JOB)[0] == 403


def test_a_job_that_fails_for_good_frees_its_unit(system: Quotas) -> None:
    target = {"type": "python", "handler": "fail"}
    _, job = system.call(
        "POST", "/jobs", {"target": target, "delay_seconds": 0, "retry": {"max_attempts": 1}}
    )
    system.run_due(job["id"])

    assert system.call("GET", f"/jobs/{job['id']}")[1]["state"] == "dead"
    assert system.used(quota.Quota.ACTIVE_JOBS) == 0


def test_a_cancelled_job_frees_its_unit_once(system: Quotas) -> None:
    _, job = system.call("POST", "/jobs", {"target": PYTHON, "delay_seconds": 3600})
    _, other = system.call("POST", "/jobs", {"target": PYTHON, "delay_seconds": 3600})
    # WHEN it is cancelled, twice
    assert system.call("POST", f"/jobs/{job['id']}/cancel")[1]["state"] == "cancelled"
    assert system.call("POST", f"/jobs/{job['id']}/cancel")[1]["state"] == "cancelled"
    # THEN one unit came back (the other job still holds its own)
    assert system.used(quota.Quota.ACTIVE_JOBS) == 1
    assert other["id"] != job["id"]


# --- workflows and uploads -----------------------------------------------------------------


def test_workflows_and_versions_are_refused_past_their_quotas_before_any_document(
    system: Quotas,
) -> None:
    assert system.call("PUT", "/workflows/etl", NODE)[0] == 201
    assert system.call("PUT", "/workflows/etl", NODE)[0] == 201
    documents = list(system.documents.keys())  # type: ignore[attr-defined]
    # WHEN a third version, and a second workflow, are registered
    status, error = quota_error(system.call("PUT", "/workflows/etl", NODE))
    assert (status, error["quota"], error["limit"], error["used"]) == (
        403,
        "workflow_versions",
        2,
        2,
    )
    status, error = quota_error(system.call("PUT", "/workflows/billing", NODE))
    assert (status, error["quota"], error["limit"], error["used"]) == (403, "workflows", 1, 1)
    # THEN no document and no index entry was written
    assert system.documents.keys() == documents  # type: ignore[attr-defined]
    assert system.call("GET", "/workflows/billing")[0] == 404
    assert system.call("GET", "/workflows/etl")[1]["version"] == 2


def test_uploads_past_the_daily_quota_are_429_until_the_next_day(system: Quotas) -> None:
    for _ in range(2):
        assert system.call("POST", "/workflow-uploads")[0] == 201
    status, error = quota_error(system.call("POST", "/workflow-uploads"))
    assert (status, error["quota"], error["limit"], error["used"]) == (
        429,
        "uploads_per_day",
        2,
        2,
    )
    # WHEN the UTC day turns
    system.clock.advance(12 * 3600)
    # THEN uploads are counted from zero again
    assert system.call("POST", "/workflow-uploads")[0] == 201
    assert system.quotas.usage(A).count(quota.Quota.UPLOADS_PER_DAY, "2026-05-02") == 1


def test_an_operators_override_is_the_tenants_limit(system: Quotas) -> None:
    system.quotas.set_limit(A, quota.Quota.SCHEDULES, 3)
    for _ in range(3):
        assert system.call("POST", "/schedules", SCHEDULE)[0] == 201

    status, error = quota_error(system.call("POST", "/schedules", SCHEDULE))

    assert (status, error["limit"], error["used"]) == (403, 3, 3)


# --- what it costs (moto, every request counted) --------------------------------------------


def test_a_counted_create_and_job_end_cost_two_plain_writes_and_a_delete_one_transaction(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with mock_aws(), serialized_item_writes():
        stack = Stack.create(prefix=f"qc{next(_copies)}")
        ddb = boto3.client("dynamodb", region_name=REGION)
        log = RequestLog()
        log.attach(ddb)
        counts = quotas_dynamodb.DynamoQuotaStore(ddb, stack.tables["SlotsTable"])
        store = schedules_dynamodb.DynamoScheduleStore(
            ddb, stack.tables["SchedulesTable"], quotas=counts
        )
        service = schedules.ScheduleService(
            schedules=store,
            occurrences=occurrences_dynamodb.DynamoOccurrenceStore(
                ddb, stack.tables["OccurrencesTable"]
            ),
            queue=memory.MemoryWorkQueue(memory.FakeClock(START)),
            clock=memory.FakeClock(START),
            quotas=LIMITS,
        )
        figures: dict[str, dict[str, Any]] = {}

        def measure(name: str, action: Any) -> Any:
            log.reset()
            try:
                return action()
            finally:
                figures[name] = {"requests": +log.requests, "items": dict(+log.item_writes)}

        draft = schedules.ScheduleDraft(spec="rate(1 minute)", target=PYTHON)
        created = measure("create", lambda: service.create(A, draft))
        measure("delete", lambda: service.delete(A, created.schedule_id))
        job = service.create_job(A, schedules.JobDraft(delay_seconds=60, target=PYTHON))
        measure("job end", lambda: store.release(A, job.job.schedule_id, quota.Quota.ACTIVE_JOBS))
        service.create(A, draft)
        service.create(A, draft)
        with pytest.raises(errors.QuotaExceeded):
            measure("refused", lambda: service.create(A, draft))
    with capsys.disabled():
        print(f"\nquota costs on moto: {json.dumps(figures, default=str)}")
    # THEN each counted create and job end is two plain writes, the count's and the item's
    # (1 unit each where a transaction of the two took 4), and no transaction
    for name in ("create", "job end"):
        assert figures[name]["requests"] == {
            "UpdateItem": 2 if name == "job end" else 1,
            **({"PutItem": 1} if name == "create" else {}),
        }, figures[name]
        assert figures[name]["items"] == {
            stack.tables["SchedulesTable"]: 1,
            stack.tables["SlotsTable"]: 1,
        }, figures[name]
    # AND a schedule's delete is one transaction writing the item and the count
    assert figures["delete"]["requests"]["TransactWriteItems"] == 1, figures["delete"]
    assert figures["delete"]["items"] == {
        stack.tables["SchedulesTable"]: 1,
        stack.tables["SlotsTable"]: 1,
    }
    # AND a refusal writes nothing and reads the count once to name it
    assert figures["refused"]["items"] == {}
    assert figures["refused"]["requests"]["GetItem"] == 1
