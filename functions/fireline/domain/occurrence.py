"""Occurrences: one durable row per intended fire, its key and its state machine.

The key ``{schedule_id}#{version}#{fire_time_utc}`` is deterministic, so two tickers that
race on the same fire compute the same key and the store's ``attribute_not_exists`` put
lets only one row exist. The row is also the history of that fire.
"""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from fireline.domain import errors

KEY_SEPARATOR = "#"
FIRE_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# A trigger-now fires at the instant it was asked, to the millisecond (a scheduled fire is
# always on a whole second), so each trigger has a key of its own.
TRIGGER_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
# The reason of a trigger's row whose request failed, or died, before its message's send
# was confirmed: it runs nothing (fireline.services.schedules, fireline.services.sweep).
NOT_SENT = "skipped: not sent"
_VERSION = re.compile(r"[1-9][0-9]*")
# The two spellings format_fire_time writes, field widths and all: a fire time of this
# shape that parses is written back exactly as it came, so parse_key needs no round trip
# (the worker parses every message's key). ".000" is not one: a whole second has none.
_CANONICAL_TIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.(?!000)[0-9]{3})?Z"
)


class State(enum.StrEnum):
    QUEUED = "queued"  # materialized and handed to a queue
    RUNNING = "running"  # claimed by a worker (an attempt is in progress)
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the last attempt failed; a retry is scheduled
    DEAD = "dead"  # attempts exhausted: waits for a human (redrive)
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # never ran, on purpose: misfire, overlap, pause, stale version


# Legal moves. RUNNING -> RUNNING is a new claim after the previous worker's claim expired
# (it crashed or timed out); DEAD -> QUEUED is a redrive. FAILED -> SKIPPED and
# RUNNING -> SKIPPED: a retry (or a holder that died) whose schedule was paused, updated
# or deleted meanwhile is not wanted any more.
TRANSITIONS: dict[State, frozenset[State]] = {
    State.QUEUED: frozenset({State.RUNNING, State.CANCELLED, State.SKIPPED}),
    State.RUNNING: frozenset(
        {State.RUNNING, State.SUCCEEDED, State.FAILED, State.DEAD, State.CANCELLED, State.SKIPPED}
    ),
    State.FAILED: frozenset({State.RUNNING, State.DEAD, State.CANCELLED, State.SKIPPED}),
    State.DEAD: frozenset({State.QUEUED}),
    State.SUCCEEDED: frozenset(),
    State.CANCELLED: frozenset(),
    State.SKIPPED: frozenset(),
}
TERMINAL = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
# States a delivery may claim from (a first attempt, or a retry).
CLAIMABLE = frozenset({State.QUEUED, State.FAILED})
# States in which the occurrence has an outcome a duplicate delivery must not redo.
SETTLED = TERMINAL | {State.DEAD}
# States in which an occurrence still counts as "unfinished" for the overlap policy.
UNFINISHED = frozenset({State.QUEUED, State.RUNNING, State.FAILED})


def can_transition(current: State, requested: State) -> bool:
    return requested in TRANSITIONS[current]


def check_transition(current: State, requested: State) -> None:
    if not can_transition(current, requested):
        raise errors.IllegalTransition(current, requested)


def format_fire_time(fire_time: datetime, *, exact: bool = False) -> str:
    """``2026-12-01T09:00:00Z``: a scheduled fire is on a whole second, and what is finer
    is noise every ticker must drop alike. ``exact``: to the millisecond when it has
    some (``2026-12-01T09:00:00.250Z``), for a trigger-now's instant.

    Written out through isoformat, several times cheaper than strftime: the ticker
    formats every fire it sends."""
    if fire_time.tzinfo is None:
        raise errors.ValidationError("needs a UTC offset", field="fire_time")
    utc = fire_time if fire_time.tzinfo is UTC else fire_time.astimezone(UTC)
    whole = utc.replace(tzinfo=None, microsecond=0).isoformat() + "Z"
    millis = utc.microsecond // 1000
    return f"{whole[:-1]}.{millis:03d}Z" if exact and millis else whole


def _parse_fire_time(text: str) -> datetime:
    """Read through fromisoformat, many times cheaper than strptime: the worker parses
    every message's key. It reads more spellings than the key's two forms (a space for
    the T, other offsets, other fractions); parse_key refuses whatever is not written
    back exactly as it came."""
    if not text.endswith("Z"):
        raise ValueError(f"{text!r} does not end in Z")
    parsed = datetime.fromisoformat(text[:-1])
    if parsed.tzinfo is not None:
        raise ValueError(f"{text!r} has an offset besides its Z")
    return parsed.replace(tzinfo=UTC)


def key_time(fire_time: datetime, *, exact: bool = False) -> datetime:
    """The fire time a key names: in UTC, to the second (to the millisecond if exact)."""
    utc = fire_time.astimezone(UTC)
    return utc.replace(microsecond=utc.microsecond // 1000 * 1000 if exact else 0)


def occurrence_key(
    schedule_id: str, version: int, fire_time: datetime, *, exact: bool = False
) -> str:
    if not schedule_id or KEY_SEPARATOR in schedule_id:
        raise errors.ValidationError(
            f"must be non-empty and free of {KEY_SEPARATOR!r}", field="schedule_id"
        )
    if version < 1:
        raise errors.ValidationError("must be at least 1", field="version")
    return KEY_SEPARATOR.join((schedule_id, str(version), format_fire_time(fire_time, exact=exact)))


@dataclass(frozen=True)
class OccurrenceKey:
    schedule_id: str
    version: int
    fire_time: datetime

    def __str__(self) -> str:
        # Only a trigger's key has milliseconds, so a parsed one that has some is exact.
        exact = self.fire_time.microsecond != 0
        return occurrence_key(self.schedule_id, self.version, self.fire_time, exact=exact)


@functools.lru_cache(maxsize=4096)
def parse_key(key: str) -> OccurrenceKey:
    """A key's schedule, version and fire time; ValidationError unless it is a key in
    canonical form. Remembered for the last few thousand keys: a worker reads one
    message's key several times over (its row's key, its claim's, its completion's), and
    the parse is most of the cost of each."""
    parts = key.split(KEY_SEPARATOR)
    # ASCII digits without a leading zero: str.isdigit() also passes "²" (int() fails) and
    # "03" or other scripts' digits (which parse, but to a key spelled differently).
    if len(parts) != 3 or not parts[0] or _VERSION.fullmatch(parts[1]) is None:
        raise errors.ValidationError(
            f"{key!r} is not schedule_id#version#fire_time", field="occurrence_key"
        )
    try:
        fire_time = _parse_fire_time(parts[2])
    except ValueError as exc:
        raise errors.ValidationError(
            f"{parts[2]!r} is not {FIRE_TIME_FORMAT}", field="occurrence_key"
        ) from exc
    if _CANONICAL_TIME.fullmatch(parts[2]) is None:
        # fromisoformat also reads other spellings ("2026-03-01 09:30:00Z", other
        # fractions): the same fire, but a different store key, so it would not find (or
        # dedupe against) the real row.
        raise errors.ValidationError(f"{key!r} is not in canonical form", field="occurrence_key")
    return OccurrenceKey(parts[0], int(parts[1]), fire_time)


@dataclass(frozen=True)
class Occurrence:
    """The history row of one intended fire."""

    key: str
    tenant_id: str
    schedule_id: str
    version: int
    fire_time: datetime  # nominal (the key's); delivery may be jittered later
    job_class: str
    state: State = State.QUEUED
    attempts: int = 0
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_reason: str | None = None  # succeeded | error: ... | deadline | cancelled | skipped: why
    progress: dict[str, Any] = field(default_factory=dict)
    payload: dict[str, Any] = field(default_factory=dict)
    # While running: the claim is the holder's until then (its invocation's end); after
    # that another delivery may claim it again (the holder timed out or crashed).
    in_progress_until: datetime | None = None
    result: dict[str, Any] | None = None  # what the target returned, for a replay
    execution: str | None = None  # a long job's state machine execution
    task_token: str | None = None  # a long job's current task (heartbeats go to it)
    generation: int = 0  # +1 on each redrive: a new run gets a new execution name
    # The backfill that wrote this row (its history shows the origin); None for the
    # ticker's, a trigger's and a workflow's rows.
    backfill_id: str | None = None
    # A summary row of skipped fires: every fire of its version from its own to
    # ``skipped_last``, ``skipped_count`` of them, was skipped, but for a fire with a row
    # of its own (that row says what happened to it).
    skipped_last: datetime | None = None
    skipped_count: int | None = None

    def covers(self, fire_time: datetime) -> bool:
        """Is this row the record of the fire at ``fire_time`` (its own, or a summary's)?"""
        if self.skipped_last is None:
            return fire_time == self.fire_time
        return self.fire_time <= fire_time <= self.skipped_last

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()

    def moved(self, state: State, **changes: Any) -> Occurrence:
        """This occurrence in ``state``; raises IllegalTransition for an illegal move."""
        check_transition(self.state, state)
        return replace(self, state=state, **changes)


def new(
    *,
    tenant_id: str,
    schedule_id: str,
    version: int,
    fire_time: datetime,
    job_class: str,
    created_at: datetime,
    state: State = State.QUEUED,
    exit_reason: str | None = None,
    payload: dict[str, Any] | None = None,
    exact: bool = False,
    backfill_id: str | None = None,
) -> Occurrence:
    """A new row; ``exact``: keyed to the millisecond (a trigger-now), else to the second.
    Its fire time is the one its key names, so the two always agree."""
    if state not in (State.QUEUED, State.SKIPPED):
        raise errors.ValidationError("a new occurrence is queued or skipped", field="state")
    return Occurrence(
        key=occurrence_key(schedule_id, version, fire_time, exact=exact),
        tenant_id=tenant_id,
        schedule_id=schedule_id,
        version=version,
        fire_time=key_time(fire_time, exact=exact),
        job_class=job_class,
        state=state,
        created_at=created_at,
        finished_at=created_at if state is State.SKIPPED else None,
        exit_reason=exit_reason,
        payload=dict(payload or {}),
        backfill_id=backfill_id,
    )
