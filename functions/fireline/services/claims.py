"""Claiming an occurrence when its message arrives: is it still wanted, and is it ours?

Cancel, pause, delete and update are all version checks here, at the last moment, so the
ticker can materialize fires ahead of time without a change ever being outrun: a message
for a cancelled job, a paused or deleted schedule, or an older version is recorded as
skipped (with the reason) and does nothing else. The claim itself is a conditional state
move (queued or failed -> running): of two deliveries of one message, one claims it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fireline import ports
from fireline.domain import errors, model, occurrence


class Outcome(enum.StrEnum):
    CLAIMED = "claimed"  # ours to run
    SKIPPED = "skipped"  # no longer wanted; recorded on the row with the reason
    FINISHED = "finished"  # already succeeded, cancelled, skipped or dead: a no-op
    BUSY = "busy"  # another delivery holds it


@dataclass(frozen=True)
class Claim:
    outcome: Outcome
    occurrence: occurrence.Occurrence | None
    schedule: model.Schedule | None = None
    reason: str | None = None


def occurrence_key_of(body: dict[str, Any]) -> str:
    key = body.get("occurrence_key")
    if not isinstance(key, str) or not key:
        raise errors.MissingIdempotencyKey()
    return key


def claim(
    body: dict[str, Any],
    *,
    schedules: ports.ScheduleStore,
    occurrences: ports.OccurrenceStore,
    now: datetime,
) -> Claim:
    key = occurrence_key_of(body)
    row = occurrences.get(key)
    if row is None:
        # Rows are written before their message is sent; none means it expired (TTL).
        return Claim(Outcome.FINISHED, None, reason="no such occurrence")
    if row.state in occurrence.TERMINAL or row.state is occurrence.State.DEAD:
        return Claim(Outcome.FINISHED, row, reason=f"already {row.state.value}")
    if row.state is occurrence.State.RUNNING:
        return Claim(Outcome.BUSY, row, reason="running elsewhere")

    item = schedules.get(row.tenant_id, row.schedule_id)
    why = unwanted(item, row)
    if why is not None:
        skipped = row.moved(
            occurrence.State.SKIPPED, finished_at=now, exit_reason=f"skipped: {why}"
        )
        if occurrences.transition(skipped, expected_state=row.state):
            return Claim(Outcome.SKIPPED, skipped, item, why)
        return Claim(Outcome.BUSY, row, item, "changed meanwhile")

    running = row.moved(
        occurrence.State.RUNNING, attempts=row.attempts + 1, started_at=now, finished_at=None
    )
    if occurrences.transition(running, expected_state=row.state):
        return Claim(Outcome.CLAIMED, running, item)
    return Claim(Outcome.BUSY, row, item, "claimed by another delivery")


def unwanted(item: model.Schedule | None, row: occurrence.Occurrence) -> str | None:
    if item is None:
        return "schedule deleted"
    if item.state is model.ScheduleState.CANCELLED:
        return "cancelled"
    if item.state is model.ScheduleState.PAUSED:
        return "schedule paused"
    if item.version != row.version:
        # A job's version moves only when it is cancelled, which the state check caught;
        # for a schedule this is an update (or pause/resume) after materialization.
        return f"stale version {row.version} (now {item.version})"
    return None
