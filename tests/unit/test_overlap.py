"""Overlap policies at run time (memory adapters): however many fires are materialized
ahead of a running one, and whatever became of a worker that died holding one."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from fireline.domain import occurrence, policies
from fireline.services import schedules, targets
from fireline.services.worker import Result
from helpers.memory_system import REMAINING_MS, MemorySystem

AHEAD = 40  # queued fires materialized ahead of the running one (a ticker's horizon)


class Held:
    """A handler that holds the first fire it runs until released, and runs any other at
    once; ``running`` is set while the held one runs."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.release = threading.Event()
        self.held: str | None = None
        self.ran: list[str] = []

    def __call__(self, context: targets.JobContext) -> None:
        self.ran.append(context.occurrence_key)
        if self.held is None:
            self.held = context.occurrence_key
            self.running.set()
            assert self.release.wait(timeout=30)


class Killed(BaseException):
    """The Lambda is killed mid-job (timeout, OOM): nothing after this line runs."""


def every_second(
    system: MemorySystem, policy: str, handler: str, ahead: int = AHEAD, **draft: Any
) -> tuple[str, list[dict[str, Any]]]:
    """A per-second schedule with ``policy``, and the messages of its next fires, all
    materialized (queued) as a ticker's horizon would have them."""
    item = system.service.create(
        "tenant-a",
        schedules.ScheduleDraft(
            spec="rate(1 second)",
            target={"type": "python", "handler": handler},
            overlap=policies.OverlapPolicy(policy),
            **draft,
        ),
    )
    start = system.clock.now().replace(microsecond=0)
    bodies = [
        system.materialize(item.schedule_id, fire_time=start + timedelta(seconds=n))
        for n in range(ahead)
    ]
    return item.schedule_id, bodies


def hold_first(system: MemorySystem, held: Held, body: dict[str, Any]) -> threading.Thread:
    thread = threading.Thread(
        target=lambda: system.worker().handle(body, remaining_ms=lambda: REMAINING_MS),
        daemon=True,
    )
    thread.start()
    assert held.running.wait(timeout=30)
    return thread


@pytest.mark.parametrize(
    ("policy", "second"), [("forbid", Result.SKIPPED), ("buffer_one", Result.DEFERRED)]
)
def test_a_running_fire_is_seen_however_many_fires_are_queued_ahead_of_it(
    policy: str, second: Result
) -> None:
    system = MemorySystem()
    held = Held()
    system.registry.register("held")(held)
    # GIVEN a per-second schedule with 40 fires queued, its first one running
    _, bodies = every_second(system, policy, "held")
    holder = hold_first(system, held, bodies[0])
    # WHEN the next fire and the one after arrive while it runs
    worker = system.worker()
    results = [worker.handle(b, remaining_ms=lambda: REMAINING_MS) for b in bodies[1:3]]
    # THEN forbid skips both; buffer_one holds the next and skips the one after
    expected = [second, Result.SKIPPED]
    assert results == expected
    assert held.ran == [bodies[0]["occurrence_key"]]
    held.release.set()
    holder.join(timeout=30)
    # AND once the run ended, a buffered fire runs
    if policy == "buffer_one":
        assert worker.handle(bodies[1], remaining_ms=lambda: REMAINING_MS) is Result.SUCCEEDED


def test_forbid_does_not_skip_behind_a_worker_that_died_holding_a_fire() -> None:
    system = MemorySystem()
    calls: list[str] = []

    def dies_first(context: targets.JobContext) -> None:
        calls.append(context.occurrence_key)
        if len(calls) == 1:
            raise Killed

    system.registry.register("dies")(dies_first)
    # GIVEN a forbid schedule whose first fire's worker was killed mid-job (5 s deadline)
    _, bodies = every_second(system, "forbid", "dies", ahead=3, deadline_seconds=5)
    with pytest.raises(Killed):
        system.worker().handle(bodies[0], remaining_ms=lambda: 10_000)
    assert system.row(bodies[0]).state is occurrence.State.RUNNING
    # WHEN a later fire arrives once the dead run's deadline and claim are long past
    system.clock.advance(90)
    result = system.worker().handle(bodies[2], remaining_ms=lambda: REMAINING_MS)
    # THEN it runs: a run that cannot be running any more does not block the schedule
    assert result is Result.SUCCEEDED
    assert calls == [bodies[0]["occurrence_key"], bodies[2]["occurrence_key"]]
