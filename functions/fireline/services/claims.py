"""Claiming an occurrence when its message arrives: is it still wanted, and is it ours?

Cancel, pause, delete and update are all version checks here, at the last moment, so the
ticker can materialize fires ahead of time without a change ever being outrun: a message
for a cancelled job, a paused or deleted schedule, or an older version is recorded as
skipped (with the reason) and does nothing else. The claim itself is a conditional state
move (queued or failed -> running): of two deliveries of one message, one claims it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from fireline import ports
from fireline.domain import errors, model, occurrence

# How long a claim made here holds the row (the worker holds it for its invocation).
CLAIM_HOLD = timedelta(minutes=15)
# A pause, update or delete settles, before it returns, every open occurrence of an
# older version whose fire time is no more than this before the change (or after it: the
# fires materialized ahead). 15 minutes: the longest SQS delivery delay, so a retry's or
# a deferral's row usually falls inside. (A job's cancel settles its one fire's row,
# whatever its time.)
SETTLED_ON_CHANGE = timedelta(minutes=15)
# A worker that claims an occurrence whose fire time is older than this reads the
# schedule again after its claim, since a change racing it may have settled only the
# rows inside its own window; younger rows are inside that window, whose settling
# races the claim on the row itself. The five minutes between the two are a margin for
# the clocks of the API and the worker. (A one-off job is never read again: its cancel
# writes the job's row itself, see Worker._unwanted_after_claim.)
RECHECK_OLDER_THAN = SETTLED_ON_CHANGE - timedelta(minutes=5)


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


# Beyond any plausible send time (2100-01-01): a larger number is not one.
LAST_MS = 4_102_444_800_000


def intent_of(body: dict[str, Any], key: str) -> occurrence.Occurrence:
    """The row a fire's message stands for, before any delivery has written it.

    Identity comes from the key (schedule, version, fire time), so a message cannot
    point a row at a fire other than its own; tenant and class come from the body.
    """
    parsed = occurrence.parse_key(key)
    tenant_id = body.get("tenant_id")
    job_class = body.get("job_class", "default")
    if not isinstance(tenant_id, str) or not tenant_id:
        raise errors.ValidationError("is missing", field="tenant_id")
    if not isinstance(job_class, str):
        raise errors.ValidationError("must be a string", field="job_class")
    sent_ms = body.get("sent_at_ms")
    return occurrence.Occurrence(
        key=key,
        tenant_id=tenant_id,
        schedule_id=parsed.schedule_id,
        version=parsed.version,
        fire_time=parsed.fire_time,
        job_class=job_class,
        # When the ticker sent it (the claim writing the row keeps it as the row's
        # creation); a message without one is created at its claim.
        created_at=(
            datetime.fromtimestamp(sent_ms / 1000, UTC)
            if isinstance(sent_ms, int) and not isinstance(sent_ms, bool) and 0 < sent_ms < LAST_MS
            else None
        ),
    )


def claim(
    body: dict[str, Any],
    *,
    schedules: ports.ScheduleStore,
    occurrences: ports.OccurrenceStore,
    now: datetime,
) -> Claim:
    key = occurrence_key_of(body)
    row = occurrences.get(key)
    stored = row is not None
    if row is None:
        # The ticker sends fires without rows: this delivery writes it.
        row = intent_of(body, key)
    elif row.state in occurrence.TERMINAL or row.state is occurrence.State.DEAD:
        return Claim(Outcome.FINISHED, row, reason=f"already {row.state.value}")
    elif row.state is occurrence.State.RUNNING:
        return Claim(Outcome.BUSY, row, reason="running elsewhere")

    item = schedules.get(row.tenant_id, row.schedule_id)
    why = unwanted(item, row)
    if why is not None:
        skipped = row.moved(
            occurrence.State.SKIPPED, finished_at=now, exit_reason=f"skipped: {why}"
        )
        if stored:
            written = occurrences.transition(skipped, expected_state=row.state)
        else:
            written = occurrences.put_new(replace(skipped, created_at=now))
        if written:
            return Claim(Outcome.SKIPPED, skipped, item, why)
        return Claim(Outcome.BUSY, row, item, "changed meanwhile")

    claimed, current = occurrences.claim(key, now=now, until=now + CLAIM_HOLD, intent=row)
    if claimed:
        return Claim(Outcome.CLAIMED, current, item)
    if current is not None and current.state in occurrence.SETTLED:
        return Claim(Outcome.FINISHED, current, item, f"already {current.state.value}")
    return Claim(Outcome.BUSY, current, item, "claimed by another delivery")


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


def settle_open(
    occurrences: ports.OccurrenceStore,
    tenant_id: str,
    schedule_id: str,
    after: model.Schedule | None,
    *,
    since: datetime,
    now: datetime,
    page: int = 100,
) -> int:
    """After a change to a schedule (``after``: what it is now; None: deleted), settle
    its open occurrences from ``since`` on that are no longer wanted: skipped with the
    reason (cancelled, for a cancelled job). Returns how many were settled.

    Each is a conditional move on the state read (queued or failed). A worker's claim is
    the same kind of move, so of the two, whichever lands first wins: a claim that lost
    finds the row settled and runs nothing; a claim that won was made before this
    returned, and its attempt is left to finish (its retry will be skipped)."""
    settled = 0
    cursor: str | None = None
    while True:
        found = occurrences.open_rows(
            tenant_id, schedule_id, since=since, limit=page, cursor=cursor
        )
        for row in found.items:
            why = unwanted(after, row)
            if why is None:
                continue  # the current version's fire: its worker runs it
            if after is not None and after.state is model.ScheduleState.CANCELLED:
                moved = row.moved(
                    occurrence.State.CANCELLED, finished_at=now, exit_reason="cancelled"
                )
            else:
                moved = row.moved(
                    occurrence.State.SKIPPED, finished_at=now, exit_reason=f"skipped: {why}"
                )
            try:
                settled += occurrences.transition(moved, expected_state=row.state)
            except errors.NotFound:
                continue  # expired meanwhile (TTL)
        if found.cursor is None:
            return settled
        cursor = found.cursor
