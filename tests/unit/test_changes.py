"""What pause, update, delete and cancel guarantee when they return (memory adapters):
no fire of an older version stays open with nothing on its way, and no attempt of an
older version starts afterwards, whoever wins a race with a worker."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from fireline.adapters import memory, threads
from fireline.domain import errors, model, occurrence, quota
from fireline.services import schedules, targets, ticker
from fireline.services.worker import Result
from helpers.faults import ThenAfterSend
from helpers.memory_system import REMAINING_MS, MemorySystem
from helpers.supervisors import RecordingSupervisor

MINUTE = timedelta(minutes=1)


class Ledger:
    def __init__(self) -> None:
        self.ran: list[str] = []

    def __call__(self, context: targets.JobContext) -> None:
        self.ran.append(context.occurrence_key)


def schedule_every_minute(system: MemorySystem) -> model.Schedule:
    return system.service.create(
        "tenant-a",
        schedules.ScheduleDraft(
            spec="rate(1 minute)", target={"type": "python", "handler": "ledger"}
        ),
    )


def pause(system: MemorySystem, item: model.Schedule) -> None:
    system.service.pause("tenant-a", item.schedule_id)


def update(system: MemorySystem, item: model.Schedule) -> None:
    draft = schedules.ScheduleDraft(
        spec="rate(2 minutes)", target={"type": "python", "handler": "ledger"}
    )
    system.service.update("tenant-a", item.schedule_id, draft)


def delete(system: MemorySystem, item: model.Schedule) -> None:
    system.service.delete("tenant-a", item.schedule_id)


CHANGES: list[Any] = [
    pytest.param(pause, "skipped: schedule paused", id="pause"),
    pytest.param(update, "skipped: stale version 1 (now 2)", id="update"),
    pytest.param(delete, "skipped: schedule deleted", id="delete"),
]


# --- nothing of an older version stays open --------------------------------------------------


@pytest.mark.parametrize(("change", "reason"), CHANGES)
def test_after_a_change_no_fire_of_the_older_version_stays_open(
    change: Callable[[MemorySystem, model.Schedule], None], reason: str
) -> None:
    system = MemorySystem()
    system.registry.register("ledger")(Ledger())
    item = schedule_every_minute(system)
    start = system.clock.now().replace(second=0, microsecond=0)
    # GIVEN fires of the schedule materialized ahead whose messages never went out (a
    # ticker stopped between its puts and its sends), and one waiting for a retry
    ahead = [
        system.materialize(item.schedule_id, fire_time=start + n * MINUTE) for n in range(1, 4)
    ]
    retrying = system.materialize(item.schedule_id, fire_time=start)
    system.occurrences.claim(retrying["occurrence_key"], now=start, until=start + MINUTE)
    system.occurrences.settle(
        retrying["occurrence_key"], state=occurrence.State.FAILED, now=start, exit_reason="x"
    )
    # WHEN the schedule is changed
    change(system, item)
    # THEN when the call returns each of them is recorded skipped with the reason: none is
    # left open with nothing on its way
    for body in [*ahead, retrying]:
        row = system.row(body)
        assert (row.state, row.exit_reason) == (occurrence.State.SKIPPED, reason)


def test_an_update_leaves_the_new_versions_fires_alone() -> None:
    system = MemorySystem()
    system.registry.register("ledger")(Ledger())
    item = schedule_every_minute(system)
    fire_time = system.clock.now().replace(second=0, microsecond=0) + MINUTE
    old = system.materialize(item.schedule_id, fire_time=fire_time)
    # GIVEN a ticker fast enough to materialize version 2's fire before the update's
    # settling reads the schedule's rows
    new = occurrence.new(
        tenant_id="tenant-a",
        schedule_id=item.schedule_id,
        version=2,
        fire_time=fire_time,
        job_class="default",
        created_at=system.clock.now(),
    )
    system.occurrences.put_new(new)
    # WHEN the schedule is updated to version 2
    update(system, item)
    # THEN version 1's fire is skipped and version 2's stays queued for its worker
    assert system.row(old).state is occurrence.State.SKIPPED
    assert system.occurrences.get(new.key) == new


def test_cancelling_a_job_whose_fire_was_just_materialized_cancels_that_fire() -> None:
    system = MemorySystem()
    ledger = Ledger()
    system.registry.register("ledger")(ledger)
    view = system.service.create_job(
        "tenant-a",
        schedules.JobDraft(delay_seconds=30, target={"type": "python", "handler": "ledger"}),
    )
    # GIVEN the ticker read the job, then the tenant read it (no occurrence yet)...
    seen = system.service.get_job("tenant-a", view.job.schedule_id)
    assert seen.occurrence is None
    # ...and the ticker materialized its fire before the cancel's write
    body = system.materialize(view.job.schedule_id, fire_time=view.fire_time)
    cancelled = cancel_from(system, seen)
    # THEN the cancel answers cancelled, and its fire is cancelled, not left queued
    assert cancelled.state == "cancelled"
    assert system.row(body).state is occurrence.State.CANCELLED
    # AND its message, when it arrives, runs nothing
    assert system.worker().handle(body, remaining_ms=lambda: REMAINING_MS) is Result.SETTLED
    assert ledger.ran == []
    print("\ncancelled inside the lookahead: its fire cancelled, its delivery ran nothing")


def cancel_from(system: MemorySystem, seen: schedules.JobView) -> schedules.JobView:
    """Cancel a job as the service does after it read ``seen`` (its state before the
    ticker's write)."""
    original = system.service.get_job
    calls = iter([seen])
    system.service.get_job = lambda tenant, job_id: next(calls, None) or original(tenant, job_id)  # type: ignore[method-assign]
    try:
        return system.service.cancel_job("tenant-a", seen.job.schedule_id)
    finally:
        system.service.get_job = original  # type: ignore[method-assign]


def test_a_job_waiting_for_a_retry_can_be_cancelled() -> None:
    system = MemorySystem()
    ledger = Ledger()
    system.registry.register("ledger")(ledger)
    body = system.due_job(target={"type": "python", "handler": "ledger"})
    key = body["occurrence_key"]
    now = system.clock.now()
    system.occurrences.claim(key, now=now, until=now + MINUTE)
    system.occurrences.settle(key, state=occurrence.State.FAILED, now=now, exit_reason="x")
    # WHEN the tenant cancels the job between its attempts
    view = system.service.cancel_job("tenant-a", system.row(body).schedule_id)
    # THEN it is cancelled, and the retry's message runs nothing
    assert view.state == "cancelled"
    assert system.worker().handle(body, remaining_ms=lambda: REMAINING_MS) is Result.SETTLED
    assert ledger.ran == []


# --- no attempt of an older version starts afterwards ------------------------------------------


class ChangeAfterRead:
    """A schedule store that makes a change right after the worker's first read of the
    schedule: the worker has decided the fire is wanted, then the change lands and
    returns, then the worker goes on to claim and run."""

    def __init__(self, store: memory.MemoryScheduleStore, change: Callable[[], None]) -> None:
        self._store = store
        self._change: Callable[[], None] | None = change

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def get(
        self, tenant_id: str, schedule_id: str, *, consistent: bool = True
    ) -> model.Schedule | None:
        found = self._store.get(tenant_id, schedule_id, consistent=consistent)
        self._changed()
        return found

    def get_many(
        self, keys: Sequence[tuple[str, str]], *, consistent: bool = True
    ) -> list[model.Schedule]:
        """A batch's read of its schedules (see worker.Prefetch)."""
        found = self._store.get_many(keys, consistent=consistent)
        self._changed()
        return found

    def _changed(self) -> None:
        change, self._change = self._change, None
        if change is not None:
            change()


@pytest.mark.parametrize("late", [False, True], ids=["on time", "twenty minutes late"])
@pytest.mark.parametrize(("change", "reason"), CHANGES)
def test_a_change_that_returns_while_a_worker_is_about_to_claim_stops_the_run(
    change: Callable[[MemorySystem, model.Schedule], None], reason: str, late: bool
) -> None:
    system = MemorySystem()
    ledger = Ledger()
    system.registry.register("ledger")(ledger)
    item = schedule_every_minute(system)
    # GIVEN a fire of version 1 being delivered (on time, or from a backlog)
    fire_time = system.clock.now().replace(second=0, microsecond=0) + MINUTE
    body = system.materialize(item.schedule_id, fire_time=fire_time)
    system.clock.advance(60 + (20 * 60 if late else 0))
    # (the ticker has moved the schedule on past every fire up to now)
    assert item.next_fire is not None
    assert system.schedules.advance(
        "tenant-a",
        item.schedule_id,
        expected_next_fire=item.next_fire,
        expected_version=item.version,
        next_fire=system.clock.now().replace(second=0, microsecond=0) + MINUTE,
        now=system.clock.now(),
    )
    returned = threading.Event()

    def make_change() -> None:
        change(system, item)
        returned.set()

    # WHEN the worker reads the schedule (still version 1), then the change is made and
    # returns, then the worker claims
    worker = system.worker()
    worker.schedules = ChangeAfterRead(system.schedules, make_change)  # type: ignore[assignment]
    result = worker.handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN the target never ran: the fire is skipped, with the change's reason
    assert returned.is_set()
    assert ledger.ran == []
    assert result in (Result.SKIPPED, Result.SETTLED)
    row = system.row(body)
    assert (row.state, row.exit_reason) == (occurrence.State.SKIPPED, reason)


def test_a_run_claimed_before_the_change_finishes_its_attempt_and_is_not_retried() -> None:
    system = MemorySystem()
    started, release = threading.Event(), threading.Event()

    def fails_when_released(context: targets.JobContext) -> None:
        started.set()
        assert release.wait(timeout=30)
        raise targets.TargetFailed("failed after the pause")

    system.registry.register("ledger")(fails_when_released)
    item = schedule_every_minute(system)
    body = system.materialize(item.schedule_id, fire_time=system.clock.now())
    # GIVEN an attempt of version 1 claimed and running
    result: list[Result] = []
    runner = threading.Thread(
        target=lambda: result.append(
            system.worker().handle(body, remaining_ms=lambda: REMAINING_MS)
        )
    )
    runner.start()
    assert started.wait(timeout=30)
    # WHEN the schedule is paused while it runs
    pause(system, item)
    # THEN the running attempt is left to finish (it started before the change)
    assert system.row(body).state is occurrence.State.RUNNING
    release.set()
    runner.join(timeout=30)
    assert result == [Result.RETRYING]
    # AND its retry, when its message arrives, is skipped: no attempt starts after
    system.clock.advance(900)
    (retry_message,) = system.queue.receive("default")
    assert system.worker().handle(retry_message.body, remaining_ms=lambda: REMAINING_MS) is (
        Result.SKIPPED
    )
    assert system.row(body).exit_reason == "skipped: schedule paused"


def test_a_late_long_fire_racing_a_pause_starts_no_execution() -> None:
    system = MemorySystem()
    supervisor = RecordingSupervisor()
    item = system.service.create(
        "tenant-a",
        schedules.ScheduleDraft(
            spec="rate(1 hour)", job_class="long", target={"type": "python", "handler": "noop"}
        ),
    )
    # GIVEN a long fire delivered twenty minutes late (a backlog)
    body = system.materialize(item.schedule_id, fire_time=system.clock.now())
    system.clock.advance(20 * 60)
    # WHEN a pause returns between the long worker's read of the schedule and its claim
    worker = system.worker(job_class="long", long=system.long_jobs(supervisor))
    worker.schedules = ChangeAfterRead(system.schedules, lambda: pause(system, item))  # type: ignore[assignment]
    result = worker.handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN no execution is started and the fire is skipped
    assert result is Result.SKIPPED
    assert supervisor.inputs == []
    assert system.row(body).exit_reason == "skipped: schedule paused"


# --- a one-off job's cancel races its claim on the row -------------------------------------------


def tick(system: MemorySystem, queue: ThenAfterSend) -> ticker.TickReport:
    return ticker.Ticker(
        schedules=system.schedules,
        occurrences=system.occurrences,
        queue=queue,  # type: ignore[arg-type]
        leases=memory.MemoryLeaseStore(),
        clock=system.clock,
        owner="invocation",
        use_lease=False,
    ).tick()


@pytest.mark.parametrize("job_class", ["default", "long"])
@pytest.mark.parametrize("read", ["before the cancel", "after the cancel"])
def test_a_cancel_racing_the_tickers_send_of_a_job_in_the_due_index_stops_its_run(
    read: str, job_class: str
) -> None:
    system = MemorySystem()
    ledger = Ledger()
    system.registry.register("ledger")(ledger)
    supervisor = RecordingSupervisor()
    # GIVEN a job due in twenty minutes: it waits in the due index
    view = system.service.create_job(
        "tenant-a",
        schedules.JobDraft(
            delay_seconds=1200,
            job_class=job_class,
            target={"type": "python", "handler": "ledger"},
        ),
    )
    job_id = view.job.schedule_id
    assert view.job.state is model.ScheduleState.ACTIVE
    system.clock.advance(1200)
    cancels: list[schedules.JobView] = []
    results: list[Result | Exception] = []
    worker = system.worker(
        job_class=job_class,
        long=system.long_jobs(supervisor) if job_class == "long" else None,
    )

    def cancel() -> None:
        cancels.append(system.service.cancel_job("tenant-a", job_id))

    def deliver() -> None:
        # As the handler delivers it: a batch, whose first delivery of a fire sent
        # without a row reads no row
        (message,) = system.queue.receive(job_class)
        assert message.receive_count == 1
        with threads.ThreadPool(1) as pool:
            results.extend(
                worker.handle_batch(
                    [message.body],
                    remaining_ms=lambda: REMAINING_MS,
                    parallel=pool,
                    receive_counts=[message.receive_count],
                )
            )

    after_send = cancel
    if read == "before the cancel":
        # (its delivery comes at once and reads the job, still due and wanted; then the
        # cancel is made and returns; then the delivery claims)
        worker.schedules = ChangeAfterRead(system.schedules, cancel)  # type: ignore[assignment]
        after_send = deliver
    # WHEN the ticker sends its fire and, before the ticker's advance, the tenant cancels
    # the job (the cancel reads it still in the due index, with no row)
    report = tick(system, ThenAfterSend(system.queue, after_send))
    if not results:
        deliver()
    # THEN the cancel answers cancelled, and the ticker's advance is refused
    assert [c.state for c in cancels] == ["cancelled"]
    assert report.conflicts == 1
    # AND the delivery finds the cancel's row: the target never runs, and the job's one
    # fire stays cancelled, no attempt made
    assert results == [Result.SETTLED]
    assert ledger.ran == []
    assert supervisor.inputs == []
    row = system.occurrences.get(
        occurrence.occurrence_key(job_id, view.job.version, view.fire_time)
    )
    assert row is not None
    assert (row.state, row.attempts) == (occurrence.State.CANCELLED, 0)
    # AND the job is cancelled, out of the due index
    after = system.service.get_job("tenant-a", job_id)
    assert after.state == "cancelled"
    assert (after.job.state, after.job.next_fire) == (model.ScheduleState.CANCELLED, None)


class AfterPut:
    """The cancel's occurrence store, where ``then`` runs right after its put of the
    job's row: the job's item is not cancelled yet."""

    def __init__(self, store: memory.MemoryOccurrenceStore, then: Callable[[], None]) -> None:
        self._store = store
        self._then: Callable[[], None] | None = then

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def put_new(self, item: occurrence.Occurrence) -> bool:
        written = self._store.put_new(item)
        then, self._then = self._then, None
        if then is not None:
            then()
        return written


def counted_jobs() -> tuple[MemorySystem, memory.MemoryQuotaStore, str, Ledger]:
    """A system counting the active jobs quota, and a job due in twenty minutes (in the
    due index) beside another job, holding a unit of its own; what the job ran."""
    counts = memory.MemoryQuotaStore()
    system = MemorySystem(schedules=memory.MemoryScheduleStore(quotas=counts))
    system.service.quotas = dict(quota.DEFAULT_QUOTAS)
    ledger = Ledger()
    system.registry.register("ledger")(ledger)
    draft = schedules.JobDraft(delay_seconds=1200, target={"type": "python", "handler": "ledger"})
    view = system.service.create_job("tenant-a", draft)
    system.service.create_job("tenant-a", replace(draft, delay_seconds=3600))
    assert view.job.state is model.ScheduleState.ACTIVE
    assert counts.usage("tenant-a").count(quota.Quota.ACTIVE_JOBS) == 2
    return system, counts, view.job.schedule_id, ledger


def deliver_counted(system: MemorySystem) -> list[Result | Exception]:
    """The job's message handled as deployed: a batch, one-off jobs' units given back."""
    worker = system.worker()
    worker.config = replace(worker.config, jobs_counted=True)
    (message,) = system.queue.receive("default")
    with threads.ThreadPool(1) as pool:
        return worker.handle_batch(
            [message.body],
            remaining_ms=lambda: REMAINING_MS,
            parallel=pool,
            receive_counts=[message.receive_count],
        )


def test_a_cancel_whose_job_gave_its_unit_back_under_it_reads_again_and_ends_it_once() -> None:
    system, counts, job_id, ledger = counted_jobs()
    system.clock.advance(1200)
    delivered: list[Result | Exception] = []
    cancels: list[schedules.JobView] = []

    def cancel() -> None:
        # GIVEN the cancel's row written, and before its item's write the delivery of
        # the fire the ticker had sent finds the row cancelled and gives the unit back
        system.service.occurrences = AfterPut(  # type: ignore[assignment]
            system.occurrences, lambda: delivered.extend(deliver_counted(system))
        )
        cancels.append(system.service.cancel_job("tenant-a", job_id))

    # WHEN the tenant cancels the job right after the ticker's send of its fire
    report = tick(system, ThenAfterSend(system.queue, cancel))
    # THEN the delivery ran nothing, and the cancel's write of the job's item, refused
    # (the unit it read is gone), was made again on a fresh read
    assert delivered == [Result.SETTLED]
    assert ledger.ran == []
    assert [c.state for c in cancels] == ["cancelled"]
    assert report.conflicts == 1
    job = system.service.get_job("tenant-a", job_id).job
    assert (job.state, job.next_fire, job.quota_held) == (
        model.ScheduleState.CANCELLED,
        None,
        False,
    )
    # AND the unit came back once (the other job holds its own)
    assert counts.usage("tenant-a").count(quota.Quota.ACTIVE_JOBS) == 1


@pytest.mark.parametrize("retried", [True, False], ids=["retried", "not retried"])
def test_a_cancel_that_failed_after_its_rows_write_has_stopped_the_run(
    retried: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    system, counts, job_id, ledger = counted_jobs()
    # GIVEN a cancel that failed after writing the job's row (its item's write failed)
    replace_item = system.schedules.replace
    calls = iter([errors.Unavailable("throttled")])

    def failing_once(item: model.Schedule, *, expected_version: int) -> None:
        failure = next(calls, None)
        if failure is not None:
            raise failure
        replace_item(item, expected_version=expected_version)

    monkeypatch.setattr(system.schedules, "replace", failing_once)
    with pytest.raises(errors.Unavailable):
        system.service.cancel_job("tenant-a", job_id)
    # THEN the job reads cancelled already (its fire's row is)
    assert system.service.get_job("tenant-a", job_id).state == "cancelled"
    if retried:
        # WHEN the tenant retries: the job leaves the due index and gives its unit back
        assert system.service.cancel_job("tenant-a", job_id).state == "cancelled"
        job = system.service.get_job("tenant-a", job_id).job
        assert (job.state, job.next_fire) == (model.ScheduleState.CANCELLED, None)
        assert counts.usage("tenant-a").count(quota.Quota.ACTIVE_JOBS) == 1
    # WHEN its time comes
    system.clock.advance(1200)
    report = tick(system, ThenAfterSend(system.queue, lambda: None))
    # THEN retried, nothing is sent for it; not retried, the ticker sends its fire, and
    # the delivery finds the row cancelled, runs nothing and gives the unit back
    if retried:
        assert report.dispatched.sent == 0
    else:
        assert report.dispatched.sent == 1
        assert deliver_counted(system) == [Result.SETTLED]
    assert ledger.ran == []
    assert system.service.get_job("tenant-a", job_id).state == "cancelled"
    assert counts.usage("tenant-a").count(quota.Quota.ACTIVE_JOBS) == 1
