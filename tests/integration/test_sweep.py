"""The sweep on DynamoDB (moto): a one-off job whose create died between its write and
its send is sent after the grace and runs once; quota units held by nothing (a crash
between a count's two writes) are given back once provably so, and never more; what was
created a moment ago, or is missing from a lagging index, is left alone.

The queue is the memory one on the test's clock (a message's delay is the fake clock's);
every store the sweep reads and writes is DynamoDB's, as deployed (infra/template.yaml).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
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
    slots_dynamodb,
    sweep_dynamodb,
)
from fireline.domain import errors, model, occurrence, quota, schedule
from fireline.services import schedules, sweep
from fireline.services import worker as worker_service
from helpers import flows
from helpers.aws import REGION, Stack, serialized_item_writes
from helpers.faults import FaultPlan

START = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
LIMITS = {quota.Quota.ACTIVE_JOBS: 1000}
JOBS = quota.Quota.ACTIVE_JOBS
_copies = itertools.count()

pytestmark = pytest.mark.filterwarnings(
    "ignore:Couldn't determine the remaining time left:UserWarning"
)


class Crash(BaseException):
    """The invocation dies here: nothing after this point of it happens (not an error any
    layer handles)."""


class CrashingQueue:
    """The work queue, whose sends die while ``crash`` is set (a create killed between its
    job's write and its send)."""

    def __init__(self, inner: memory.MemoryWorkQueue) -> None:
        self.inner = inner
        self.crash = False

    def send_batch(self, job_class: str, messages: Any) -> list[str]:
        if self.crash:
            raise Crash
        return self.inner.send_batch(job_class, messages)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Counts(quotas_dynamodb.DynamoQuotaStore):
    """The count store, whose give-backs can be held back (run later, or never: a crash
    between a release's two writes)."""

    held_back: list[Callable[[], None]]
    hold: bool = False

    def give_back(self, tenant_id: str, name: quota.Quota, count: int = 1) -> None:
        if self.hold:
            self.held_back.append(lambda: super(Counts, self).give_back(tenant_id, name, count))
            return
        super().give_back(tenant_id, name, count)


class LaggingIndex:
    """The sweep's store, whose held index has not yet seen the jobs in ``unseen``."""

    def __init__(self, inner: ports.SweepStore) -> None:
        self.inner = inner
        self.unseen: set[str] = set()
        self.before_call: Callable[[], None] = lambda: None

    def held_jobs(
        self, tenant_id: str, *, limit: int, cursor: str | None = None
    ) -> ports.Page[ports.HeldJob]:
        self.before_call()
        page = self.inner.held_jobs(tenant_id, limit=limit, cursor=cursor)
        return ports.Page([j for j in page.items if j.schedule_id not in self.unseen], page.cursor)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def called(*args: Any, **kwargs: Any) -> Any:
            self.before_call()
            return method(*args, **kwargs)

        return called


@dataclass
class Cloud:
    clock: memory.FakeClock
    ddb: Any
    counts: Counts
    store: schedules_dynamodb.DynamoScheduleStore
    occurrences: occurrences_dynamodb.DynamoOccurrenceStore
    queue: CrashingQueue
    service: schedules.ScheduleService
    index: LaggingIndex
    sweep: sweep.Sweep
    tenant: str
    ran: list[str] = field(default_factory=list)
    tables: dict[str, str] = field(default_factory=dict)

    def used(self, tenant: str | None = None) -> int:
        return self.counts.usage(tenant or self.tenant).count(JOBS)

    def marked(self, tenant: str | None = None) -> int:
        items = self.store.list(tenant or self.tenant, limit=1000).items
        return sum(1 for item in items if item.quota_held)

    def create(self, delay_seconds: int = 60) -> str:
        draft = schedules.JobDraft(
            delay_seconds=delay_seconds, target={"type": "python", "handler": "count"}
        )
        return self.service.create_job(self.tenant, draft).job.schedule_id

    def create_batch(self, *delays: int, dying_before_send: bool = False) -> list[str]:
        """A batch of jobs (POST /jobs/batch), one per delay; its create may die after
        writing them, before sending them."""
        drafts = [
            schedules.JobDraft(delay_seconds=d, target={"type": "python", "handler": "count"})
            for d in delays
        ]
        before = {i.schedule_id for i in self.store.list(self.tenant, limit=1000).items}
        if not dying_before_send:
            return [v.job.schedule_id for v in self.service.create_jobs(self.tenant, drafts)]
        self.queue.crash = True
        with pytest.raises(Crash):
            self.service.create_jobs(self.tenant, drafts)
        self.queue.crash = False
        return sorted(
            {i.schedule_id for i in self.store.list(self.tenant, limit=1000).items} - before
        )

    def holding(self) -> list[int]:
        """How many jobs each of the tenant's holders lists."""
        return [len(h.jobs) for h in self.counts.holders(self.tenant)]

    def create_dying_before_send(self, delay_seconds: int = 60) -> str:
        before = {i.schedule_id for i in self.store.list(self.tenant, limit=1000).items}
        self.queue.crash = True
        with pytest.raises(Crash):
            self.create(delay_seconds)
        self.queue.crash = False
        (job_id,) = {i.schedule_id for i in self.store.list(self.tenant, limit=1000).items} - before
        return job_id

    def worker(self) -> worker_service.Worker:
        return flows.counting_worker(
            schedules=self.store,
            occurrences=self.occurrences,
            queue=self.queue,
            clock=self.clock,
            handlers={"count": lambda context: self.ran.append(context.occurrence_key)},
        )

    def deliver(self) -> int:
        """Hand every visible message to a worker; how many there were."""
        worker = self.worker()
        delivered = 0
        while batch := self.queue.receive("default", max_messages=10):
            for message in batch:
                worker.handle(message.body, remaining_ms=lambda: 60_000)
                self.queue.delete("default", message.receipt)
                delivered += 1
        return delivered


@pytest.fixture(scope="module")
def aws() -> Iterator[None]:
    with mock_aws(), serialized_item_writes():
        yield


@pytest.fixture
def cloud(aws: None) -> Cloud:
    # A stack of its own per test: the sweep scans every tenant's usage item.
    stack = Stack.create(prefix=f"sw{next(_copies)}")
    ddb = boto3.client("dynamodb", region_name=REGION)
    tables = stack.tables
    clock = memory.FakeClock(START)
    counts = Counts(ddb, tables["SlotsTable"], sleep=lambda s: None)
    counts.held_back = []
    store = schedules_dynamodb.DynamoScheduleStore(ddb, tables["SchedulesTable"], quotas=counts)
    occurrences = occurrences_dynamodb.DynamoOccurrenceStore(ddb, tables["OccurrencesTable"])
    queue = CrashingQueue(memory.MemoryWorkQueue(clock))
    service = schedules.ScheduleService(
        schedules=store,
        occurrences=occurrences,
        queue=queue,
        clock=clock,
        quotas=LIMITS,
    )
    index = LaggingIndex(
        sweep_dynamodb.DynamoSweepStore(
            ddb, schedules_table=tables["SchedulesTable"], slots_table=tables["SlotsTable"]
        )
    )
    swept = sweep.Sweep(
        store=index, schedules=store, occurrences=occurrences, queue=queue, clock=clock
    )
    return Cloud(
        clock,
        ddb,
        counts,
        store,
        occurrences,
        queue,
        service,
        index,
        swept,
        "tenant-a",
        tables=tables,
    )


def minutes(n: float) -> float:
    return n * 60


# --- a create that died between its write and its send ------------------------------------


def test_a_job_whose_create_died_before_its_send_is_sent_after_the_grace_and_runs_once(
    cloud: Cloud,
) -> None:
    # GIVEN a job due in a minute whose create died after writing it, before sending it
    job_id = cloud.create_dying_before_send(delay_seconds=60)
    assert cloud.used() == 1
    # WHEN the sweep runs before its fire time is past by the grace
    cloud.clock.advance(60 + minutes(14))
    early = cloud.sweep.run()
    # THEN nothing is sent: it may still be on its way
    assert early.resent == 0
    assert cloud.deliver() == 0
    # WHEN the sweep runs once the grace has passed, twice (two runs, or two sweeps)
    cloud.clock.advance(minutes(2))
    first, second = cloud.sweep.run(), cloud.sweep.run()
    # THEN it is sent once, runs once, and its unit of quota is given back
    assert (first.resent, second.resent) == (1, 0)
    assert cloud.deliver() == 1
    assert len(cloud.ran) == 1 and cloud.ran[0].startswith(job_id)
    assert cloud.used() == 0
    assert cloud.service.get_job(cloud.tenant, job_id).state == "succeeded"
    # AND the sweep no longer reads it: it left the held index with its mark
    cloud.clock.advance(minutes(30))
    later = cloud.sweep.run()
    assert (later.tenants, later.resent) == (0, 0)


def test_a_second_message_of_a_job_that_was_sent_runs_it_once(cloud: Cloud) -> None:
    # GIVEN a job sent by its create whose message waits in a backlog past the grace
    job_id = cloud.create(delay_seconds=30)
    cloud.clock.advance(30 + minutes(16))
    # WHEN the sweep sends it again, and both messages are delivered
    assert cloud.sweep.run().resent == 1
    assert cloud.deliver() == 2
    # THEN it ran once (the claim is conditional on the occurrence key) and its unit is
    # given back once
    assert cloud.ran == [cloud.ran[0]] and cloud.ran[0].startswith(job_id)
    assert cloud.used() == 0


def test_a_job_created_a_moment_ago_is_not_touched(cloud: Cloud) -> None:
    # GIVEN a job whose create is still between its write and its send (due now), and
    # one due in ten minutes, sent
    waiting = cloud.create(delay_seconds=600)
    cloud.queue.crash = True
    with pytest.raises(Crash):
        cloud.create(delay_seconds=0)
    cloud.queue.crash = False
    # WHEN the sweep runs every five minutes until just inside the grace of the first
    for _ in range(3):
        report = cloud.sweep.run()
        # THEN it sends nothing and takes nothing off the count
        assert (report.resent, report.released, report.forgiven) == (0, 0, 0)
        cloud.clock.advance(minutes(4.9))
    assert cloud.used() == 2
    # AND the one message on its way is the sent job's own
    assert cloud.deliver() == 1
    assert len(cloud.ran) == 1 and cloud.ran[0].startswith(waiting)


# --- units held by nothing ------------------------------------------------------------------


def _runs(cloud: Cloud, count: int, every: float = minutes(5)) -> list[sweep.SweepReport]:
    reports = []
    for _ in range(count):
        reports.append(cloud.sweep.run())
        cloud.clock.advance(every)
    return reports


def test_a_unit_taken_by_a_create_that_died_before_its_item_is_given_back(
    cloud: Cloud,
) -> None:
    # GIVEN a live job far in the future, and a create that took its unit and died
    # before writing its job
    cloud.create(delay_seconds=86_400)
    cloud.counts.take(cloud.tenant, quota.Charge(JOBS, 1000))
    assert (cloud.used(), cloud.marked()) == (2, 1)
    # WHEN the sweep runs every five minutes, nothing else happening
    reports = _runs(cloud, 8)
    # THEN only after the count stayed unchanged past the settling and release windows
    # is the one unit held by nothing taken off, once
    forgiven = [r.forgiven for r in reports]
    assert sum(forgiven) == 1 and forgiven.index(1) >= 5
    assert (cloud.used(), cloud.marked()) == (1, 1)


def test_a_mark_removed_without_its_decrement_is_reconciled(cloud: Cloud) -> None:
    # GIVEN two jobs; one ends and its release dies between the mark and the count
    first = cloud.create(delay_seconds=30)
    cloud.create(delay_seconds=86_400)
    cloud.counts.hold = True
    cloud.clock.advance(31)
    assert cloud.deliver() == 1
    cloud.counts.hold = False
    cloud.counts.held_back.clear()  # the crash: the decrement never happens
    assert cloud.service.get_job(cloud.tenant, first).state == "succeeded"
    assert (cloud.used(), cloud.marked()) == (2, 1)
    # WHEN the sweep runs every five minutes
    reports = _runs(cloud, 8)
    # THEN the count comes down to the one live job, once
    assert sum(r.forgiven for r in reports) == 1
    assert (cloud.used(), cloud.marked()) == (1, 1)


def test_a_job_missing_from_a_lagging_index_is_not_taken_off_the_count(cloud: Cloud) -> None:
    # GIVEN a job the held index has not seen yet when the sweep first reads the count
    job_id = cloud.create(delay_seconds=86_400)
    cloud.index.unseen = {job_id}
    noted = cloud.sweep.run()
    assert noted.noted == 1  # the count looks one too high
    # WHEN the index catches up and the sweep runs on
    cloud.index.unseen = set()
    cloud.clock.advance(minutes(5))
    reports = _runs(cloud, 8)
    # THEN nothing is taken off: the job was listed before any unit could be
    assert sum(r.forgiven for r in reports) == 0
    assert cloud.used() == 1


def test_a_create_between_the_count_read_and_the_listing_is_not_taken_off(cloud: Cloud) -> None:
    # GIVEN a sweep that reads the count while a create has taken its unit and not yet
    # written its job, which it writes once the sweep has listed the held index
    job = replace(_job(cloud, "job_inflight", START + timedelta(days=1)), quota_held=True)
    cloud.counts.take(cloud.tenant, quota.Charge(JOBS, 1000))
    calls = itertools.count()

    def write_after_the_listing() -> None:
        # The sweep's calls: the scan, the count, the listing, then its note.
        if next(calls) == 3:
            cloud.store.create(job)

    cloud.index.before_call = write_after_the_listing
    # WHEN the sweep runs on and on
    reports = _runs(cloud, 8)
    # THEN the count keeps the job's unit
    assert sum(r.forgiven for r in reports) == 0
    assert (cloud.used(), cloud.marked()) == (1, 1)


def _job(cloud: Cloud, job_id: str, when: datetime) -> model.Schedule:
    spec = schedule.AtSpec(when=when)
    return model.Schedule(
        tenant_id=cloud.tenant,
        schedule_id=job_id,
        timing=schedule.Timing(spec=spec),
        spec_text=str(spec),
        kind=model.Kind.JOB,
        target={"type": "python", "handler": "count"},
        state=model.ScheduleState.COMPLETED,
        created_at=cloud.clock.now(),
        updated_at=cloud.clock.now(),
    )


# --- a batch's holders ---------------------------------------------------------------------


def test_a_holder_gives_back_the_units_of_the_jobs_that_ended_and_goes_with_the_last(
    cloud: Cloud,
) -> None:
    # GIVEN a batch of three jobs of one minute; two have run, one has not (a backlog)
    first, second, third = cloud.create_batch(60, 60, 60)
    cloud.clock.advance(61)
    worker = cloud.worker()
    waiting = []
    for message in cloud.queue.receive("default", max_messages=10):
        if message.body["schedule_id"] == third:
            waiting.append(message)
            continue
        worker.handle(message.body, remaining_ms=lambda: 60_000)
    assert (cloud.used(), cloud.holding()) == (3, [3])
    # WHEN the sweep runs just before the holder's visit time (its minute's end, 30 s on)
    (holder,) = cloud.counts.holders(cloud.tenant)
    assert holder.visit_at == datetime.fromtimestamp(
        (cloud.clock.now().timestamp() - 1) // 60 * 60 + 90, UTC
    )
    cloud.clock.advance((holder.visit_at - cloud.clock.now()).total_seconds() - 1)
    assert cloud.sweep.run().released == 0
    # AND once it is past
    cloud.clock.advance(1)
    visited = cloud.sweep.run()
    # THEN the two ended jobs' units are back, the waiting one's held
    assert visited.released == 2
    assert (cloud.used(), cloud.holding()) == (1, [1])
    # WHEN the third runs and the sweep comes again
    worker.handle(waiting[0].body, remaining_ms=lambda: 60_000)
    assert cloud.sweep.run().released == 1
    # THEN every unit is back, once, and no holder is left
    assert (cloud.used(), cloud.holding()) == (0, [])
    assert cloud.sweep.run().released == 0
    assert sorted(occurrence.parse_key(k).schedule_id for k in cloud.ran) == sorted(
        [first, second, third]
    )


def test_a_batch_whose_create_died_before_its_send_is_sent_after_the_grace_and_freed(
    cloud: Cloud,
) -> None:
    # GIVEN a batch due in a minute whose create died after writing it, before sending it
    jobs = cloud.create_batch(60, 60, dying_before_send=True)
    assert len(jobs) == 2 and cloud.used() == 2
    # WHEN the sweep runs each minute until just before the grace has passed
    cloud.clock.advance(60 + minutes(2))
    for _ in range(12):
        assert cloud.sweep.run().resent == 0
        cloud.clock.advance(60)
    # THEN nothing was sent: they may still be on their way
    assert cloud.deliver() == 0
    # WHEN it runs past the grace, twice
    cloud.clock.advance(60)
    first, second = cloud.sweep.run(), cloud.sweep.run()
    # THEN each job was sent once, and runs once
    assert (first.resent, second.resent) == (2, 0)
    assert cloud.deliver() == 2
    assert len(cloud.ran) == 2
    # AND the next visit gives their units back
    assert cloud.sweep.run().released == 2
    assert (cloud.used(), cloud.holding()) == (0, [])


def test_a_batch_job_never_written_is_freed_only_once_no_create_can_write_it(
    cloud: Cloud,
) -> None:
    # GIVEN a batch whose units were taken (its holder lists its jobs) and whose create
    # died in its writes: one job written, the other never, nothing sent
    written, lost = cloud.create_batch(0, 0, dying_before_send=True)
    cloud.ddb.delete_item(
        TableName=cloud.tables["SchedulesTable"],
        Key={"tenant_id": {"S": model.tenant_key(cloud.tenant, lost)}, "schedule_id": {"S": lost}},
    )
    # WHEN the sweep visits the holder within the settling time of its creation
    cloud.clock.advance(90)
    assert cloud.sweep.run().released == 0
    # THEN the missing job keeps its unit (its create might still write it); once no
    # create could, its unit comes back, and the written job keeps its own
    cloud.clock.advance(minutes(5))
    assert cloud.sweep.run().released == 1
    assert (cloud.used(), cloud.holding()) == (1, [1])
    assert cloud.store.get(cloud.tenant, written) is not None


def test_a_cancelled_batch_job_gives_its_unit_back_at_its_cancel_or_at_the_visit(
    cloud: Cloud,
) -> None:
    # GIVEN a batch of two jobs due in an hour
    first, second = cloud.create_batch(3600, 3600)
    # WHEN one is cancelled
    cloud.service.cancel_job(cloud.tenant, first)
    # THEN its unit came back at once
    assert (cloud.used(), cloud.holding()) == (1, [1])
    # WHEN the other's cancel loses its give-back (the holder's transaction fails)
    plan = FaultPlan(at={0: "before"}, only={"TransactWriteItems"}).attach(cloud.ddb)
    try:
        cloud.service.cancel_job(cloud.tenant, second)
    finally:
        plan.enabled = False
    assert cloud.used() == 1
    # THEN the sweep's visit, after its minute, gives it back
    cloud.clock.advance(3600 + 90)
    assert cloud.sweep.run().released == 1
    assert (cloud.used(), cloud.holding()) == (0, [])
    assert cloud.ran == []


def test_units_held_by_holders_are_never_taken_off_as_held_by_nothing(cloud: Cloud) -> None:
    # GIVEN a batch far in the future, a job created alone, and a unit a create took and
    # died before writing anything
    cloud.create_batch(86_400, 86_400, 86_400)
    cloud.create(delay_seconds=86_400)
    cloud.counts.take(cloud.tenant, quota.Charge(JOBS, 1000))
    assert (cloud.used(), cloud.marked(), cloud.holding()) == (5, 1, [3])
    # WHEN the sweep runs every five minutes, nothing else happening
    reports = _runs(cloud, 8)
    # THEN the one unit held by nothing is taken off, once, and the holder's are kept
    assert sum(r.forgiven for r in reports) == 1
    assert (cloud.used(), cloud.marked(), cloud.holding()) == (4, 1, [3])


# --- creates and releases racing the sweep -----------------------------------------------


@pytest.mark.parametrize("seed", [1, 2])
def test_creates_and_releases_racing_sweeps_never_leave_the_count_too_low(
    cloud: Cloud, seed: int
) -> None:
    """Creates (count, then job), releases (mark, then count) and their crashes, in a
    seeded order interleaved with every read and write of the sweep. Each create's and
    release's second write comes within its invocation's time (or never: a crash). After
    every step the count is at least what is legitimately held: the marked jobs, the
    creates between their two writes and the releases between theirs."""
    rng = random.Random(seed)
    ids = (f"job_{seed}_{n:04d}" for n in itertools.count())
    pending: list[tuple[datetime, Callable[[], None]]] = []  # deadline, second write
    marked: set[str] = set()  # the jobs holding their mark, as the steps wrote them
    leaked = 0

    def legit() -> int:
        return len(marked) + len(pending)

    def create_second(job: model.Schedule) -> Callable[[], None]:
        def write() -> None:
            cloud.store.create(job)
            marked.add(job.schedule_id)

        return write

    def step() -> None:
        nonlocal leaked
        cloud.clock.advance(rng.uniform(0, 20))
        now = cloud.clock.now()
        # A second write whose invocation is about to end goes now, or never (a crash).
        for entry in [p for p in pending if p[0] <= now + timedelta(seconds=20)]:
            pending.remove(entry)
            if rng.random() < 0.2:
                leaked += 1
            else:
                entry[1]()
        roll = rng.random()
        if roll < 0.35:
            job = replace(_job(cloud, next(ids), now + timedelta(days=1)), quota_held=True)
            cloud.counts.take(cloud.tenant, quota.Charge(JOBS, 1000))
            pending.append((now + timedelta(seconds=30), create_second(job)))
        elif roll < 0.6 and marked:
            chosen = rng.choice(sorted(marked))
            cloud.counts.hold = True
            assert cloud.store.release(cloud.tenant, chosen, JOBS)
            cloud.counts.hold = False
            marked.discard(chosen)
            (write,) = cloud.counts.held_back
            cloud.counts.held_back.clear()
            pending.append((now + timedelta(seconds=rng.uniform(1, 900)), write))
        elif pending and roll < 0.9:
            entry = rng.choice(pending)
            pending.remove(entry)
            entry[1]()
        assert cloud.used() >= legit()

    # Inside each sweep run, before each of its reads and writes, the others move on.
    cloud.index.before_call = lambda: step() if rng.random() < 0.5 else None
    forgiven = 0
    for _ in range(20):
        for _ in range(rng.randint(0, 8)):
            step()
        forgiven += cloud.sweep.run().forgiven
        assert cloud.used() >= legit()
    # WHEN things quieten: every write in flight lands, and the sweep runs on
    cloud.index.before_call = lambda: None
    for _, write in pending:
        write()
    pending.clear()
    forgiven += sum(r.forgiven for r in _runs(cloud, 8))
    # THEN the count is exactly the live jobs: every leaked unit given back, no more
    assert (cloud.used(), cloud.marked()) == (len(marked), len(marked))
    assert forgiven == leaked


# --- what a sweep reads ------------------------------------------------------------------


def test_a_sweep_reads_the_usage_items_and_the_live_jobs_not_the_history(
    cloud: Cloud,
) -> None:
    # GIVEN two tenants: one with 10 finished jobs and 3 live ones (one overdue, its
    # create having died before the send), one with 2 live jobs; and a third tenant
    # whose jobs all ended
    for _ in range(10):
        cloud.create(delay_seconds=0)
    assert cloud.deliver() == 10
    for _ in range(2):
        cloud.create(delay_seconds=86_400)
    cloud.create_dying_before_send(delay_seconds=0)
    other = replace(cloud, tenant="tenant-b")
    for _ in range(2):
        other.create(delay_seconds=86_400)
    done = replace(cloud, tenant="tenant-c")
    done.create(delay_seconds=0)
    assert cloud.deliver() == 1
    cloud.clock.advance(minutes(16))
    # WHEN the sweep runs
    report = cloud.sweep.run()
    # THEN it read the usage items the scan examined (3 tenants' and nothing else in the
    # slots table), each counted tenant's count and held index entries (3 + 2), and the
    # overdue job and its row: 3 + (1 + 3) + (1 + 2) + 2 = 12 items, none of the 11
    # finished jobs
    assert report.tenants == 2
    assert report.resent == 1
    print(f"\nsweep items read: {report.items_read} (2 counted tenants, 5 live jobs, 1 overdue)")
    assert report.items_read == 3 + (1 + 3) + (1 + 2) + 2


def test_a_job_the_index_never_listed_keeps_its_unit(cloud: Cloud) -> None:
    # GIVEN a live job that the held index never lists (marked before the index existed)
    job_id = cloud.create(delay_seconds=86_400)
    cloud.index.unseen = {job_id}
    # WHEN the sweep runs on, the count looking one too high all along
    reports = _runs(cloud, 8)
    # THEN the count keeps its unit: the table, read before the write, holds the mark
    assert sum(r.noted for r in reports) == 2
    assert sum(r.forgiven for r in reports) == 0
    assert cloud.used() == 1


# --- the register of limit overrides ----------------------------------------------------


def test_a_sweep_builds_the_register_of_overrides_set_before_it_once(cloud: Cloud) -> None:
    # GIVEN a deployment whose one limit override predates the register (its own item only)
    slots = slots_dynamodb.DynamoSlotStore(cloud.ddb, cloud.counts._table)
    cloud.ddb.put_item(
        TableName=cloud.counts._table,
        Item={"tenant_id": {"S": "tenant-a"}, "slot": {"N": "-1"}, "limit": {"N": "3"}},
    )
    cloud.sweep.slots = slots
    assert slots.overrides() is None
    # WHEN the sweep runs, twice
    first, second = cloud.sweep.run(), cloud.sweep.run()
    # THEN the first built the register with the override, and the second left it as it was
    assert (first.overrides, second.overrides) == (1, 1)
    assert slots.overrides() == {"tenant-a": 3}


# --- a trigger whose message never went ---------------------------------------------------


class TransitionsFail:
    """The occurrence store as the trigger's request sees it while DynamoDB fails its
    writes after the row's put: the settle of a row whose send failed does not land."""

    def __init__(self, inner: ports.OccurrenceStore) -> None:
        self.inner = inner

    def transition(self, item: Any, *, expected_state: Any) -> bool:
        raise errors.Unavailable("DynamoDB did not answer (injected)")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class SendRefused:
    """The work queue refusing every send (SQS unavailable)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def send_batch(self, job_class: str, messages: Any) -> list[str]:
        raise errors.Unavailable("SQS did not answer (injected)")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def trigger_failing(cloud: Cloud, how: str) -> str:
    """Trigger an hourly schedule so that its row is written and its message never goes:
    the request dies before the send, or the send fails and so does the row's settle."""
    made = cloud.service.create(
        cloud.tenant,
        schedules.ScheduleDraft("rate(1 hour)", target={"type": "python", "handler": "count"}),
    )
    service = cloud.service
    if how == "died":
        cloud.queue.crash = True
        with pytest.raises(Crash):
            service.trigger(cloud.tenant, made.schedule_id)
        cloud.queue.crash = False
    else:
        failing = replace_parts(
            service, SendRefused(cloud.queue), TransitionsFail(cloud.occurrences)
        )
        with pytest.raises(errors.Unavailable):
            failing.trigger(cloud.tenant, made.schedule_id)
    return made.schedule_id


def replace_parts(service: schedules.ScheduleService, queue: Any, occurrences: Any) -> Any:
    failing = schedules.ScheduleService(
        schedules=service.schedules,
        occurrences=occurrences,
        queue=queue,
        clock=service.clock,
        quotas=LIMITS,
    )
    return failing


def open_rows(cloud: Cloud, schedule_id: str) -> list[occurrence.Occurrence]:
    return cloud.occurrences.history(cloud.tenant, schedule_id, limit=10).items


@pytest.mark.parametrize("how", ["died", "send-and-settle-failed"])
def test_a_trigger_whose_request_failed_before_its_send_is_settled_after_the_grace(
    cloud: Cloud, how: str
) -> None:
    # GIVEN a trigger whose row was written, queued, and whose request failed before its
    # message went (the client was answered with an error, or nothing)
    schedule_id = trigger_failing(cloud, how)
    (row,) = open_rows(cloud, schedule_id)
    assert row.state is occurrence.State.QUEUED
    # WHEN the sweep runs within the grace
    cloud.clock.advance(minutes(14))
    early = cloud.sweep.run()
    # THEN the row is left as it is: its request may still be under way
    assert (early.triggers_settled, early.triggers_cleared) == (0, 0)
    assert open_rows(cloud, schedule_id)[0].state is occurrence.State.QUEUED
    # WHEN the sweep runs once the grace has passed, twice (two runs, or two sweeps)
    cloud.clock.advance(minutes(2))
    first, second = cloud.sweep.run(), cloud.sweep.run()
    # THEN it is settled once, skipped as not sent, as the request's own settle would
    # have: nothing runs it, nothing is left queued
    assert (first.triggers_settled, second.triggers_settled) == (1, 0)
    settled = open_rows(cloud, schedule_id)[0]
    assert (settled.state, settled.exit_reason) == (occurrence.State.SKIPPED, "skipped: not sent")
    assert cloud.deliver() == 0 and cloud.ran == []
    assert cloud.occurrences.awaiting_send(before=cloud.clock.now(), limit=10) == []
    # AND the client's retry is a trigger of its own, which runs once
    retried = cloud.service.trigger(cloud.tenant, schedule_id)
    assert cloud.deliver() == 1 and cloud.ran == [retried.key]


def test_a_trigger_sent_is_not_listed_and_never_touched(cloud: Cloud) -> None:
    # GIVEN a trigger whose send went
    made = cloud.service.create(
        cloud.tenant,
        schedules.ScheduleDraft("rate(1 hour)", target={"type": "python", "handler": "count"}),
    )
    row = cloud.service.trigger(cloud.tenant, made.schedule_id)
    # THEN it is off the listing at once, and a sweep past the grace leaves it alone
    far = cloud.clock.now() + timedelta(days=1)
    assert cloud.occurrences.awaiting_send(before=far, limit=10) == []
    cloud.clock.advance(minutes(16))
    report = cloud.sweep.run()
    assert (report.triggers_settled, report.triggers_cleared) == (0, 0)
    assert cloud.deliver() == 1
    assert cloud.ran == [row.key]


def test_a_sent_trigger_whose_clear_failed_runs_and_is_then_only_taken_off_the_listing(
    cloud: Cloud,
) -> None:
    # GIVEN a trigger whose message went but whose listing's clear failed
    made = cloud.service.create(
        cloud.tenant,
        schedules.ScheduleDraft("rate(1 hour)", target={"type": "python", "handler": "count"}),
    )
    cleared = cloud.occurrences.sent
    cloud.occurrences.sent = lambda key: (_ for _ in ()).throw(  # type: ignore[method-assign]
        errors.Unavailable("DynamoDB did not answer (injected)")
    )
    row = cloud.service.trigger(cloud.tenant, made.schedule_id)
    cloud.occurrences.sent = cleared  # type: ignore[method-assign]
    # WHEN its message is delivered, and the sweep runs past the grace
    assert cloud.deliver() == 1
    cloud.clock.advance(minutes(16))
    report = cloud.sweep.run()
    # THEN it ran once, and the sweep only took it off the listing
    assert cloud.ran == [row.key]
    assert (report.triggers_settled, report.triggers_cleared) == (0, 1)
    assert open_rows(cloud, made.schedule_id)[0].state is occurrence.State.SUCCEEDED
    assert cloud.occurrences.awaiting_send(before=cloud.clock.now(), limit=10) == []


def test_a_listing_the_sweep_cannot_read_is_left_to_the_next_run(cloud: Cloud) -> None:
    # GIVEN a trigger whose request died before its send, past the grace
    schedule_id = trigger_failing(cloud, "died")
    cloud.clock.advance(minutes(16))
    # WHEN DynamoDB fails the sweep's read of the row
    read = cloud.occurrences.get
    cloud.occurrences.get = lambda key, **kw: (_ for _ in ()).throw(  # type: ignore[method-assign]
        errors.Unavailable("DynamoDB did not answer (injected)")
    )
    failing = cloud.sweep.run()
    cloud.occurrences.get = read  # type: ignore[method-assign]
    # THEN the run still ends and reports it, and the next run settles the row
    assert (failing.failed, failing.triggers_settled) == (1, 0)
    assert cloud.sweep.run().triggers_settled == 1
    assert open_rows(cloud, schedule_id)[0].state is occurrence.State.SKIPPED
