"""The worker handler's partial batch response for a mixed batch: every record reported,
as what happened to it says (acknowledged, or left to SQS), through the dispatcher."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from fireline import wiring
from fireline.domain import occurrence
from fireline.handlers import worker as worker_handler
from fireline.services import targets
from fireline.services.worker.dispatcher import Limits, Pools
from helpers import events
from helpers.memory_system import MemorySystem
from helpers.remote_targets import HTTP, PYTHON, FakeTargets, fires


@dataclass
class FakeClockContext(events.LambdaContext):
    """A Lambda context whose remaining time counts down on the test's fake clock."""

    system: Any = None
    _ends: float = 0.0

    def __post_init__(self) -> None:
        self._ends = self.system.clock.monotonic() + self.timeout_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._ends - self.system.clock.monotonic()) * 1000))


def record(message_id: str, body: Any) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "receiptHandle": f"receipt-{message_id}",
        "body": json.dumps(body),
        "attributes": {"ApproximateReceiveCount": "1"},
        "eventSource": "aws:sqs",
    }


def test_a_mixed_batch_reports_only_the_records_sqs_must_deliver_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a batch of: an HTTP job that answers, one whose target fails (a retry is
    # sent), a Python job, a message with no occurrence key, a fire another delivery is
    # running now, and a fire whose 100 s deadline no longer fits in the invocation
    system = MemorySystem()
    [answers, fails, running] = fires(system, 3, deadline=30)
    [python] = fires(system, 1, target=PYTHON, deadline=30)
    [too_long] = fires(system, 1, target=HTTP, deadline=100)
    intent = occurrence.Occurrence(
        key=running["occurrence_key"],
        tenant_id="tenant-a",
        schedule_id=running["schedule_id"],
        version=1,
        fire_time=occurrence.parse_key(running["occurrence_key"]).fire_time,
        job_class="default",
    )
    now = system.clock.now()
    assert system.occurrences.claim(
        running["occurrence_key"], now=now, until=now + timedelta(minutes=5), intent=intent
    )[0]

    def act(key: str) -> None:
        if key == fails["occurrence_key"]:
            raise targets.TargetFailed("503 from the tenant's endpoint")

    runner = FakeTargets(system, act)
    monkeypatch.setattr(wiring, "worker", lambda: system.worker(runner=runner))
    limits = Limits(in_flight=2, compute=1)
    pools = Pools(limits)
    monkeypatch.setattr(wiring, "dispatch_limits", lambda: limits)
    monkeypatch.setattr(wiring, "dispatch_pools", lambda: pools)
    bodies = {
        "answers": answers,
        "fails": fails,
        "python": python,
        "keyless": {"tenant_id": "tenant-a"},
        "running": running,
        "too_long": too_long,
    }
    event = {"Records": [record(name, body) for name, body in bodies.items()]}
    # WHEN the handler takes it, with 60 s of its invocation left
    try:
        response = worker_handler.handler(event, FakeClockContext(timeout_ms=60_000, system=system))
    finally:
        pools.close()
    # THEN only the keyless record and the one running elsewhere are reported failed
    failed = sorted(f["itemIdentifier"] for f in response["batchItemFailures"])
    assert failed == ["keyless", "running"]
    # AND the others have their outcomes: one succeeded, one failed with a retry queued,
    # the Python job succeeded, and the long one was sent again unstarted (no row)
    assert system.row(answers).state is occurrence.State.SUCCEEDED
    assert system.row(fails).state is occurrence.State.FAILED
    assert system.row(python).state is occurrence.State.SUCCEEDED
    assert system.occurrences.get(too_long["occurrence_key"]) is None
    queued = [m.body["occurrence_key"] for m in system.queue.receive("default", max_messages=10)]
    assert sorted(queued) == sorted([too_long["occurrence_key"]])
