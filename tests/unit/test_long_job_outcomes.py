"""How a long job's outcome message becomes the occurrence's outcome (memory adapters)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fireline.adapters import memory
from fireline.domain import occurrence
from fireline.services import long_jobs
from helpers import events
from helpers.supervisors import RecordingSupervisor

KEY = "job_0123456789abcdef0123#1#2026-05-01T12:00:00Z"


@pytest.fixture
def service() -> long_jobs.LongJobs:
    clock = memory.FakeClock(datetime(2026, 5, 1, 12, 0, tzinfo=UTC))
    store = memory.MemoryOccurrenceStore()
    row = occurrence.new(
        tenant_id="tenant-a",
        schedule_id="job_0123456789abcdef0123",
        version=1,
        fire_time=clock.now(),
        job_class="long",
        created_at=clock.now(),
    )
    store.put_new(row)
    store.claim(KEY, now=clock.now(), until=clock.now() + timedelta(hours=2))
    return long_jobs.LongJobs(
        schedules=memory.MemoryScheduleStore(),
        occurrences=store,
        supervisor=RecordingSupervisor(),
        clock=clock,
    )


def test_a_succeeded_outcome_is_recorded_with_its_output(service: long_jobs.LongJobs) -> None:
    assert (
        service.record_outcome(events.load("sfn", "outcome_succeeded"))
        is occurrence.State.SUCCEEDED
    )
    row = service.occurrences.get(KEY)
    assert row.exit_reason == "succeeded" and row.result["output"] == {"result": {"steps": 30}}


def test_a_timeout_before_the_deadline_is_a_missed_heartbeat(service: long_jobs.LongJobs) -> None:
    # The attempt ran 60 s of its 3600 s deadline: the timeout was the heartbeat's.
    assert (
        service.record_outcome(events.load("sfn", "outcome_heartbeat_timeout"))
        is occurrence.State.DEAD
    )
    assert service.occurrences.get(KEY).exit_reason == "heartbeat timeout"


def test_a_timeout_at_the_deadline_is_the_deadline(service: long_jobs.LongJobs) -> None:
    body = events.load("sfn", "outcome_heartbeat_timeout")
    body["ended"] = "2026-05-01T13:10:00.000Z"  # 3600 s after the attempt started
    service.record_outcome(body)
    assert service.occurrences.get(KEY).exit_reason == "deadline"


@pytest.mark.parametrize(
    "error,reason",
    [
        ({"Error": "States.HeartbeatTimeout"}, "heartbeat timeout"),
        ({"Error": "JobFailed", "Cause": "ValueError: bad row 7"}, "error: ValueError: bad row 7"),
        ({"Error": "States.TaskFailed"}, "error"),
    ],
)
def test_other_errors_name_their_reason(
    service: long_jobs.LongJobs, error: dict[str, str], reason: str
) -> None:
    body = events.load("sfn", "outcome_heartbeat_timeout")
    body["error"] = error
    service.record_outcome(body)
    assert service.occurrences.get(KEY).exit_reason == reason


def test_an_outcome_for_a_cancelled_job_changes_nothing(service: long_jobs.LongJobs) -> None:
    service.occurrences.settle(
        KEY, state=occurrence.State.CANCELLED, now=service.clock.now(), exit_reason="cancelled"
    )
    assert service.record_outcome(events.load("sfn", "outcome_succeeded")) is None
    assert service.occurrences.get(KEY).state is occurrence.State.CANCELLED
