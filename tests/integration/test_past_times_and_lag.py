"""One rule for one-off times in the past (a job's run_at and an at() spec alike), and the
lag metrics that measure what a tenant feels: EnqueueLag (the ticker's send) and StartLag
(a fire's first attempt starting in a worker), each less the fire time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from fireline.domain import model
from fireline.services import targets
from helpers.system import START, System

PYTHON = {"type": "python", "handler": "noop"}
GRACE = int(model.PAST_GRACE.total_seconds())

pytestmark = pytest.mark.filterwarnings(
    "ignore:Couldn't determine the remaining time left:UserWarning"
)


def iso(seconds_from_start: float) -> str:
    return (START + timedelta(seconds=seconds_from_start)).strftime("%Y-%m-%dT%H:%M:%SZ")


def nothing_stored(system: System) -> bool:
    return system.schedules.list("tenant-a", limit=100, cursor=None).items == []


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/jobs", {"run_at": iso(-GRACE - 1), "target": PYTHON}, "run_at"),
        ("/jobs", {"run_at": "2020-01-01T00:00:00Z", "target": PYTHON}, "run_at"),
        ("/schedules", {"spec": f"at({iso(-GRACE - 1)})", "target": PYTHON}, "spec"),
        ("/schedules", {"spec": "at(2026-05-01T11:00:00)", "target": PYTHON}, "spec"),
        ("/schedules", {"spec": "on 2026-04-30 at 09:00", "target": PYTHON}, "spec"),
    ],
    ids=["job-61s", "job-years", "at-61s", "at-wall-clock", "natural-date"],
)
def test_a_one_off_time_past_the_grace_is_refused_naming_its_field(
    system: System, path: str, body: dict[str, Any], field: str
) -> None:
    # WHEN a job or a one-off schedule is asked for more than the grace before now
    status, answer = system.call("POST", path, body)
    # THEN it is refused naming the field, saying why, and nothing is stored
    assert status == 400, answer
    assert answer["error"]["field"] == field
    assert "is in the past" in answer["error"]["message"]
    assert nothing_stored(system)


@pytest.mark.parametrize(
    ("path", "body", "fire_time_field"),
    [
        ("/jobs", {"run_at": iso(-GRACE), "target": PYTHON}, "run_at"),
        ("/schedules", {"spec": f"at({iso(-GRACE)})", "target": PYTHON}, "next_fire"),
    ],
    ids=["job", "at"],
)
def test_a_one_off_time_within_the_grace_runs_at_once_with_its_own_fire_time(
    system: System, path: str, body: dict[str, Any], fire_time_field: str
) -> None:
    # GIVEN a job or a one-off schedule asked for exactly the grace before now (clock skew)
    status, created = system.call("POST", path, body)
    assert status == 201, created
    assert created[fire_time_field] == iso(-GRACE)
    # WHEN the ticker passes
    system.ticker(use_lease=False).tick()
    # THEN its fire is on its way at once, keyed to the time it was given
    (body_sent,) = system.receive_all()
    assert body_sent["occurrence_key"].endswith(f"#{iso(-GRACE)}")


def test_enqueue_lag_is_the_send_less_the_fire_time_and_zero_when_sent_ahead(
    system: System,
) -> None:
    # GIVEN a one-off schedule due 7 s ago that no ticker saw yet (the ticker was down),
    # and one due in five minutes, inside the lookahead (schedules: a one-off job due
    # this soon is sent by its create, not the ticker, so its enqueue lag is nil)
    status, late = system.call("POST", "/schedules", {"spec": f"at({iso(0)})", "target": PYTHON})
    assert status == 201, late
    status, ahead = system.call("POST", "/schedules", {"spec": f"at({iso(300)})", "target": PYTHON})
    assert status == 201, ahead
    system.clock.advance(7)
    # WHEN the ticker sends both
    system.ticker(use_lease=False).tick()
    # THEN the late one's enqueue lag is 7 s, the one sent ahead of its time 0
    assert sorted(system.metrics.values("EnqueueLag")) == [0, 7_000]


def test_start_lag_counts_a_fires_first_start_only(system: System) -> None:
    # GIVEN a job that always fails, due now, whose message waits 3 s for a worker
    def fail(context: Any) -> None:
        raise targets.TargetFailed("down")

    system.registry.register("down")(fail)
    status, job = system.call(
        "POST",
        "/jobs",
        {
            "delay_seconds": 0,
            "target": {"type": "python", "handler": "down"},
            "retry": {"max_attempts": 2, "base_seconds": 1},
        },
    )
    assert status == 201, job
    system.ticker(use_lease=False).tick()
    system.clock.advance(3)
    worker = system.worker()
    # WHEN a worker starts it, and later its retry
    for body in system.receive_all():
        worker.handle(body, remaining_ms=lambda: 60_000)
    assert system.metrics.values("StartLag") == [3_000]
    system.clock.advance(30)
    for body in system.receive_all():
        worker.handle(body, remaining_ms=lambda: 60_000)
    # THEN only the first start counted: 3 s (the retry waited for its backoff by design)
    status, read = system.call("GET", f"/jobs/{job['id']}")
    assert (read["state"], read["occurrence"]["attempts"]) == ("dead", 2), read["occurrence"]
    assert system.metrics.values("StartLag") == [3_000]
