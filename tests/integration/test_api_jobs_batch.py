"""POST /jobs/batch on moto, through the real resolver, with quota counting on: a batch is
created all or none (checked whole before any write, its quota taken in one transaction
with its holders), is safe to retry under its Idempotency-Key, and its units come back
from its holders, not from its jobs' workers: at the sweep's visit, together.

One deployment for the file; each test has a tenant of its own.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fireline.adapters import quotas_dynamodb
from fireline.domain import occurrence, quota
from fireline.services import dispatch
from fireline.services import ticker as ticker_service
from fireline.services import worker as worker_service
from helpers import cost_paths
from helpers.faults import FaultPlan
from helpers.system import System

PYTHON = {"type": "python", "handler": "noop"}
SOON = {"delay_seconds": 60, "target": PYTHON}
JOBS = quota.Quota.ACTIVE_JOBS
_tenants = itertools.count()

# system.call passes no Lambda context, so Powertools cannot tie the idempotency record's
# in-progress expiry to the invocation and says so; nothing to act on in a test.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Couldn't determine the remaining time left:UserWarning"
)


class CountedGiveBacks(quotas_dynamodb.DynamoQuotaStore):
    """The deployed quota store, its plain give-backs counted."""

    calls: list[int]

    def give_back(self, tenant_id: str, name: quota.Quota, count: int = 1) -> None:
        self.calls.append(count)
        super().give_back(tenant_id, name, count)


@pytest.fixture(scope="module")
def system() -> Iterator[System]:
    with cost_paths.deployed_system(CountedGiveBacks, sleep=lambda _: None) as built:
        quotas(built).calls = []
        yield built


@pytest.fixture
def tenant(system: System) -> str:
    system.receive_all()  # what earlier tests left on the queue is not this test's
    return f"tenant-batch-{next(_tenants)}"


def quotas(system: System) -> CountedGiveBacks:
    assert isinstance(system.quotas, CountedGiveBacks)
    return system.quotas


def used(system: System, tenant: str) -> int:
    return quotas(system).usage(tenant).count(JOBS)


def stored(system: System, tenant: str) -> list[str]:
    return sorted(s.schedule_id for s in system.schedules.list(tenant, limit=100).items)


def batch(
    system: System, tenant: str, jobs: list[dict[str, Any]], key: str | None = None
) -> tuple[int, Any]:
    headers = {"Idempotency-Key": key} if key else None
    return system.call("POST", "/jobs/batch", {"jobs": jobs}, tenant=tenant, headers=headers)


def sent_for(system: System, ids: list[str]) -> dict[str, int]:
    """Messages sent per job, of ``ids``."""
    found = {i: 0 for i in ids}
    for key, count in system.log.sent.items():
        job_id = occurrence.parse_key(key).schedule_id
        if job_id in found:
            found[job_id] += count
    return found


def tenant_bodies(system: System, tenant: str) -> list[dict[str, Any]]:
    return [b for b in system.receive_all() if b["tenant_id"] == tenant]


# --- creating ------------------------------------------------------------------------------


def test_a_batch_is_created_in_order_its_units_taken_and_its_soon_jobs_sent(
    system: System, tenant: str
) -> None:
    # GIVEN three jobs: two due in a minute, one in an hour
    later = {"delay_seconds": 3600, "target": PYTHON, "payload": {"n": 3}}
    jobs = [{**SOON, "payload": {"n": 1}}, {**SOON, "payload": {"n": 2}}, later]
    # WHEN they are created in one request
    status, body = batch(system, tenant, jobs)
    # THEN 201 with the three jobs in the request's order, each scheduled
    assert status == 201, body
    ids = [j["id"] for j in body["jobs"]]
    assert [j["state"] for j in body["jobs"]] == ["scheduled"] * 3
    payloads = [system.call("GET", f"/jobs/{i}", tenant=tenant)[1]["payload"] for i in ids]
    assert payloads == [{"n": 1}, {"n": 2}, {"n": 3}]
    # AND three units are taken, and the two due soon are on their queue
    assert used(system, tenant) == 3
    assert sent_for(system, ids) == {ids[0]: 1, ids[1]: 1, ids[2]: 0}


@pytest.mark.parametrize(
    ("bad", "status", "field"),
    [
        ({"target": {"type": "http", "url": "https://10.0.0.1/"}}, 400, "jobs[3].target.url"),
        ({"target": {"type": "python", "handler": "x"}, "job_class": "huge"}, 422, "jobs.3"),
        ({"delay_seconds": 60, "run_at": "2030-01-01T00:00:00Z"}, 422, "jobs.3.delay_seconds"),
    ],
    ids=["refused target", "unknown class", "two times"],
)
def test_a_bad_job_refuses_the_whole_batch_naming_it_and_nothing_is_written(
    system: System, tenant: str, bad: dict[str, Any], status: int, field: str
) -> None:
    # GIVEN a tenant with one job already
    assert batch(system, tenant, [SOON])[0] == 201
    before, units = stored(system, tenant), used(system, tenant)
    sends = sum(system.log.sent.values())
    # WHEN a batch of five holds a bad job at index 3
    jobs = [SOON, SOON, SOON, {**SOON, **bad}, SOON]
    answer = batch(system, tenant, jobs)
    # THEN it is refused naming that job's field
    assert answer[0] == status, answer
    assert answer[1]["error"]["field"].startswith(field)
    # AND nothing was written, taken or sent
    assert stored(system, tenant) == before
    assert used(system, tenant) == units
    assert sum(system.log.sent.values()) == sends


def test_over_the_active_jobs_quota_a_batch_is_refused_whole(system: System, tenant: str) -> None:
    # GIVEN a tenant whose limit is 5, with 3 jobs
    quotas(system).set_limit(tenant, JOBS, 5)
    assert batch(system, tenant, [SOON] * 3)[0] == 201
    before = stored(system, tenant)
    # WHEN a batch of 3 would pass the limit
    status, body = batch(system, tenant, [SOON] * 3)
    # THEN it is refused as a single create over the quota is, naming the limit and use
    assert status == 403
    error = body["error"]
    assert (error["type"], error["quota"], error["limit"], error["used"]) == (
        "quota_exceeded",
        "active_jobs",
        5,
        3,
    )
    # AND nothing was written or taken
    assert stored(system, tenant) == before
    assert used(system, tenant) == 3
    # AND a batch that fits, to the limit, is taken
    assert batch(system, tenant, [SOON] * 2)[0] == 201
    assert used(system, tenant) == 5
    assert batch(system, tenant, [SOON])[0] == 403


def test_a_batch_larger_than_the_limit_is_refused_though_nothing_is_used(
    system: System, tenant: str
) -> None:
    # GIVEN a tenant with a limit of 2 and nothing used (a batch cannot ride an empty count)
    quotas(system).set_limit(tenant, JOBS, 2)
    # WHEN it sends 3 jobs
    status, body = batch(system, tenant, [SOON] * 3)
    # THEN refused, nothing written
    assert (status, body["error"]["quota"], body["error"]["used"]) == (403, "active_jobs", 0)
    assert stored(system, tenant) == []
    assert used(system, tenant) == 0


def test_101_jobs_are_refused_naming_the_list(system: System, tenant: str) -> None:
    status, body = batch(system, tenant, [SOON] * 101)

    assert (status, body["error"]["field"]) == (422, "jobs")
    assert stored(system, tenant) == []


def test_an_empty_batch_is_refused(system: System, tenant: str) -> None:
    status, body = batch(system, tenant, [])

    assert (status, body["error"]["field"]) == (422, "jobs")


def test_100_jobs_are_one_request(system: System, tenant: str) -> None:
    status, body = batch(system, tenant, [SOON] * 100)

    assert status == 201
    assert len({j["id"] for j in body["jobs"]}) == 100
    assert len(stored(system, tenant)) == 100
    assert used(system, tenant) == 100


def test_a_batch_body_may_exceed_a_single_requests_limit_up_to_its_own(
    system: System, tenant: str
) -> None:
    # GIVEN jobs with 20 KiB payloads: 10 of them are more than a single create's 128 KiB
    large = {**SOON, "payload": {"blob": "x" * 20_000}}
    # WHEN 10 are sent in one batch, and then 60 (more than the batch's 1 MiB)
    fits = batch(system, tenant, [large] * 10)
    too_large = batch(system, tenant, [large] * 60)
    # THEN the first is created, the second refused naming the body, nothing written
    assert fits[0] == 201
    assert (too_large[0], too_large[1]["error"]["field"]) == (413, "body")
    assert len(stored(system, tenant)) == 10


def test_a_job_due_later_than_direct_send_waits_for_the_ticker(system: System, tenant: str) -> None:
    # GIVEN a batch with a job due in 30 minutes
    status, body = batch(system, tenant, [SOON, {"delay_seconds": 1800, "target": PYTHON}])
    assert status == 201
    soon, later = (j["id"] for j in body["jobs"])
    assert sent_for(system, [later]) == {later: 0}
    # WHEN the ticker runs within its lookahead of the job's time
    tk = system.ticker(use_lease=False)
    system.clock.advance(1800 - tk.config.lookahead_seconds + 5)
    tk.tick()
    # THEN the ticker sent it, once, and the one sent by the create was not sent again
    assert sent_for(system, [soon, later]) == {soon: 1, later: 1}


# --- Idempotency-Key ------------------------------------------------------------------------


def test_a_replayed_batch_gets_the_same_answer_and_writes_nothing_again(
    system: System, tenant: str
) -> None:
    jobs = [SOON, SOON, {"delay_seconds": 3600, "target": PYTHON}]
    first = batch(system, tenant, jobs, key="batch-1")
    assert first[0] == 201
    ids = [j["id"] for j in first[1]["jobs"]]
    # WHEN the same request comes again with its key
    again = batch(system, tenant, jobs, key="batch-1")
    # THEN the same answer, and nothing written, taken or sent twice
    assert again == first
    assert stored(system, tenant) == sorted(ids)
    assert used(system, tenant) == 3
    assert sent_for(system, ids) == {ids[0]: 1, ids[1]: 1, ids[2]: 0}
    # AND another body with that key is refused
    other = batch(system, tenant, [SOON], key="batch-1")
    assert (other[0], other[1]["error"]["field"]) == (422, "Idempotency-Key")


def test_a_batch_whose_writes_gave_up_is_finished_by_its_retry(system: System, tenant: str) -> None:
    # GIVEN DynamoDB throttles the second batch write of 25 for good
    jobs = [SOON] * 60
    plan = FaultPlan(at={1 + i: "throttle" for i in range(7)}, only={"BatchWriteItem"})
    plan.attach(system.ddb)
    try:
        status, body = batch(system, tenant, jobs, key="big-1")
    finally:
        plan.enabled = False
    # THEN the client is told to retry (503), and the units of the jobs not written
    # went back: the count is the jobs that exist
    assert (status, body["error"]["type"]) == (503, "unavailable")
    written = stored(system, tenant)
    assert 0 < len(written) < 60
    assert used(system, tenant) == len(written)
    # WHEN the client retries with the same key
    status, body = batch(system, tenant, jobs, key="big-1")
    # THEN every job exists once, with a unit each, and each was sent (at least) once
    assert status == 201
    ids = [j["id"] for j in body["jobs"]]
    assert stored(system, tenant) == sorted(ids)
    assert used(system, tenant) == 60
    assert set(written) <= set(ids)
    assert min(sent_for(system, ids).values()) == 1


def test_a_batch_whose_sends_failed_is_sent_by_its_retry(system: System, tenant: str) -> None:
    # GIVEN SQS refuses every send, and the fallback (the due index) fails as well
    jobs = [SOON] * 12
    sqs_down = FaultPlan(rates={"before": 1.0}, only={"SendMessageBatch"})
    sqs_down.attach(system.sqs_client)
    fallback = FaultPlan(at={1: "before"}, only={"PutItem"})  # 0: the first job's put
    fallback.attach(system.ddb)
    try:
        status, _ = batch(system, tenant, jobs, key="unsent-1")
    finally:
        sqs_down.enabled = fallback.enabled = False
    # THEN the client is told to retry; the jobs are stored, none sent
    assert status == 503
    assert len(stored(system, tenant)) == 12
    # WHEN it retries with the same key
    status, body = batch(system, tenant, jobs, key="unsent-1")
    # THEN the same jobs (no second item, no second unit), each on its queue once now
    assert status == 201
    ids = [j["id"] for j in body["jobs"]]
    assert stored(system, tenant) == sorted(ids)
    assert used(system, tenant) == 12
    system.clock.advance(60)
    queued = sorted(b["schedule_id"] for b in tenant_bodies(system, tenant))
    assert queued == sorted(ids)


# --- when its messages go ------------------------------------------------------------------


def test_a_batch_due_later_is_sent_at_its_phase_and_one_due_now_at_once(
    system: System, tenant: str
) -> None:
    # GIVEN the API's clock 0.2 s into a second
    system.clock.advance(1.2 - system.clock.now().microsecond / 1e6 % 1)
    assert round(system.clock.now().microsecond / 1e6, 3) == 0.2
    # WHEN a batch of jobs due in a minute is created
    before = system.clock.monotonic()
    assert batch(system, tenant, [SOON, SOON])[0] == 201
    # THEN its answer waited for the send phase, and its messages went then, with the
    # delay that makes them visible 0.15 s before their fire time
    assert round(system.clock.monotonic() - before, 3) == 0.65
    system.clock.advance(60)
    sent = tenant_bodies(system, tenant)
    assert len(sent) == 2
    for body in sent:
        sent_at = datetime.fromtimestamp(body["sent_at_ms"] / 1000, UTC)
        fire_time = occurrence.parse_key(body["occurrence_key"]).fire_time
        delay = dispatch.delay_until(fire_time, sent_at)
        assert (body["sent_at_ms"] % 1000, delay) == (850, 59)
        assert fire_time - (sent_at + timedelta(seconds=delay)) == timedelta(seconds=0.15)
    # WHEN a batch with a job due now is created
    before = system.clock.monotonic()
    assert batch(system, tenant, [{"delay_seconds": 0, "target": PYTHON}, SOON])[0] == 201
    # THEN nothing waited: the job due now is not held back
    assert system.clock.monotonic() == before


# --- their units back ------------------------------------------------------------------------


def run_batch(system: System, bodies: list[dict[str, Any]]) -> list[Any]:
    worker = cost_paths.deployed_worker(system, tenant_limit=0)
    return worker.handle_batch(
        bodies, remaining_ms=lambda: 60_000, parallel=ticker_service._Sequential()
    )


def test_a_batchs_jobs_give_nothing_back_at_their_end_and_the_sweep_gives_back_together(
    system: System, tenant: str
) -> None:
    # GIVEN ten jobs of one tenant, their messages due
    assert batch(system, tenant, [{"delay_seconds": 0, "target": PYTHON}] * 10)[0] == 201
    assert used(system, tenant) == 10
    bodies = tenant_bodies(system, tenant)
    assert len(bodies) == 10
    quotas(system).calls.clear()
    # WHEN one worker batch runs them all
    system.log.reset()
    outcomes = run_batch(system, bodies)
    # THEN all succeeded, and the worker wrote nothing for their units: no give-back, no
    # write on a job's item (its holder holds its unit)
    assert outcomes == [worker_service.Result.SUCCEEDED] * 10
    assert quotas(system).calls == []
    assert system.log.writes[system.stack.tables["SchedulesTable"]] == 0
    assert system.log.writes[system.stack.tables["SlotsTable"]] == 0
    assert used(system, tenant) == 10
    # WHEN the sweep runs once their minute is over
    system.clock.advance(120)
    system.log.reset()
    report = cost_paths.deployed_sweep(system).run()
    # THEN the ten units came back in one transaction (the holder deleted with them)
    assert report.released == 10
    assert used(system, tenant) == 0
    assert system.log.calls["dynamodb.TransactWriteItems"] == 1
    assert quotas(system).holders(tenant) == []
    # AND a redelivery of the batch, and the sweep again, give nothing back again
    assert run_batch(system, bodies) == [worker_service.Result.SETTLED] * 10
    assert cost_paths.deployed_sweep(system).run().released == 0
    assert used(system, tenant) == 0


@pytest.mark.parametrize("fault", ["before", "after"])
def test_a_sweep_visit_that_fails_or_loses_its_answer_leaves_the_count_exact(
    system: System, tenant: str, fault: str
) -> None:
    # GIVEN ten jobs of one tenant that ran, and a sweep whose visit's transaction fails
    # before it is sent, or lands and loses its answer
    assert batch(system, tenant, [{"delay_seconds": 0, "target": PYTHON}] * 10)[0] == 201
    run_batch(system, tenant_bodies(system, tenant))
    system.clock.advance(120)
    plan = FaultPlan(at={0: fault}, only={"TransactWriteItems"}).attach(system.ddb)
    try:
        assert cost_paths.deployed_sweep(system).run().released == 0
    finally:
        plan.enabled = False
    # THEN the count is ten (nothing given back) or none (given back once), the holder
    # listing them or gone with them
    held = sum(len(h.jobs) for h in quotas(system).holders(tenant))
    assert used(system, tenant) == held == (10 if fault == "before" else 0)
    # WHEN the sweep runs again
    again = cost_paths.deployed_sweep(system).run()
    # THEN the units are back, once
    assert again.released == (10 if fault == "before" else 0)
    assert used(system, tenant) == 0
