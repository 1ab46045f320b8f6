"""A trigger whose message could not be sent leaves no row queued with nothing on its way."""

from __future__ import annotations

from typing import Any

import pytest

from fireline.domain import errors, occurrence
from fireline.services import schedules
from helpers.memory_system import MemorySystem


class SendFails:
    """A work queue whose sends fail: refused, or applied with the answer lost."""

    def __init__(self, inner: Any, *, applied: bool) -> None:
        self._inner = inner
        self._applied = applied

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def send_batch(self, job_class: str, messages: Any) -> list[str]:
        if self._applied:
            self._inner.send_batch(job_class, messages)
        raise errors.Unavailable("SQS did not answer (injected)")


@pytest.mark.parametrize("applied", [False, True], ids=["refused", "answer-lost"])
def test_a_trigger_whose_send_failed_fails_and_leaves_its_row_settled(applied: bool) -> None:
    # GIVEN a schedule, and SQS failing the trigger's send
    system = MemorySystem()
    target = {"type": "python", "handler": "noop"}
    made = system.service.create("tenant-a", schedules.ScheduleDraft("rate(1 hour)", target=target))
    system.service.queue = SendFails(system.queue, applied=applied)  # type: ignore[assignment]
    # WHEN it is triggered
    with pytest.raises(errors.Unavailable):
        system.service.trigger("tenant-a", made.schedule_id)
    # THEN the request failed, and its row is settled skipped, not left queued
    rows = system.occurrences.history("tenant-a", made.schedule_id, limit=10).items
    assert [(r.state, r.exit_reason) for r in rows] == [
        (occurrence.State.SKIPPED, "skipped: not sent")
    ]
    # AND a message that went out after all runs nothing: its claim finds the row settled
    for message in system.queue.receive("default", max_messages=10):
        system.worker().handle(message.body, remaining_ms=lambda: 60_000)
    assert system.occurrences.get(rows[0].key).state is occurrence.State.SKIPPED
