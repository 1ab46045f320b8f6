"""The stored schedule record, and the shard it is indexed under.

A one-off job is a schedule whose spec is ``at(...)`` and whose kind is ``job``: it goes
through the same due index, ticker, occurrence key and workers as a recurring fire, so
there is one path to keep correct, not two.
"""

from __future__ import annotations

import enum
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from fireline.domain import errors, policies, quota, retry, schedule

DEFAULT_SHARDS = 16
# Arrays and objects inside each other in a tenant's JSON (a payload, progress, an output),
# the value itself counting as one. The API refuses deeper input; what a job reports, and
# rows written before the API checked, are stored or shown as an account instead (a
# decoder, pydantic and the encoder of an answer each recurse per level).
MAX_JSON_DEPTH = 32
# How much of a value that cannot be shown as itself its account keeps.
PREVIEW_CHARS = 1024


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """How deep ``value``'s lists and dicts nest, counted up to ``limit + 1`` at most
    (without recursion, so any depth is measured safely)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > limit:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def too_deep_account(value: Any, limit: int = MAX_JSON_DEPTH) -> dict[str, Any] | None:
    """None if ``value`` nests within ``limit``; else what stands in for it: a marker, and
    the start of its text."""
    if json_depth(value, limit) <= limit:
        return None
    return {
        "truncated": True,
        "reason": f"nests deeper than {limit} levels",
        "preview": _preview(value),
    }


def _preview(value: Any) -> str:
    try:
        return json.dumps(value, default=repr)[:PREVIEW_CHARS]
    except (RecursionError, ValueError):  # deeper than the encoder goes
        return ""


JOB_CLASSES = ("default", "short", "long")
# The queue a class's bursts go to, apart from its steady fires (see services.ticker): the
# workers' event source mapping on it scales out on the burst alone, while the steady
# fires on the class's own queue never wait behind it.
BURST_QUEUES = {"default": "default-burst"}
# The longest attempt each class can give a job, which is also its deadline when it names
# none: the function that runs the attempt (short worker 100 s, default worker 180 s, long
# runner 900 s, Lambda's own limit; infra/template.yaml) less the time to claim, stop the
# job and record its outcome, and the longest a worker holds a fire that came early (a
# burst's). A longer deadline could never be kept: Lambda would kill the attempt first,
# every attempt, so it is refused at registration.
DEADLINES = {"short": 20, "default": 100, "long": 840}
# A long attempt is held to a heartbeat interval shorter than its deadline, of a second
# at least.
MIN_LONG_DEADLINE = 2


def deadline_for(job_class: str, deadline_seconds: int | None) -> int:
    """A job's deadline: its own, else its class's."""
    return deadline_seconds or DEADLINES.get(job_class, DEADLINES["default"])


# One rule for a one-off time in the past, a job's `run_at` and an `at()` spec alike: more
# than this before now it is refused, naming the field. A time in the past is almost always
# a mistake (a wrong zone, a request replayed long after it was made), and running it "now"
# would record a fire time nobody meant and a lag of however long ago it was; a job meant to
# run now says so (`delay_seconds: 0`). Up to this much is the callers'
# clock skew: accepted and run at once, its fire time as given.
PAST_GRACE = timedelta(seconds=60)


def check_not_past(when: datetime, now: datetime, *, field: str) -> None:
    """Refuse a one-off time more than :data:`PAST_GRACE` before ``now`` (bad input)."""
    if when < now - PAST_GRACE:
        raise errors.ValidationError(
            f"{when.astimezone(UTC).isoformat().replace('+00:00', 'Z')} is in the past "
            f"(now {now.astimezone(UTC).isoformat(timespec='seconds').replace('+00:00', 'Z')}"
            f"; up to {int(PAST_GRACE.total_seconds())} s is accepted as clock skew)",
            field=field,
        )


def check_deadline(
    job_class: str, deadline_seconds: int | None, *, field: str = "deadline_seconds"
) -> None:
    """Refuse a deadline the job's class cannot give an attempt (bad input, named)."""
    if deadline_seconds is None:
        return
    if job_class == "long" and deadline_seconds < MIN_LONG_DEADLINE:
        raise errors.ValidationError(
            f"a long job's deadline is at least {MIN_LONG_DEADLINE} s (its heartbeat interval "
            "must be shorter)",
            field=field,
        )
    limit = DEADLINES.get(job_class)
    if limit is not None and deadline_seconds > limit:
        longer = "" if job_class == "long" else f"; class long allows {DEADLINES['long']} s"
        raise errors.ValidationError(
            f"{deadline_seconds} s is longer than class {job_class} can run an attempt "
            f"({limit} s){longer}",
            field=field,
        )


class Kind(enum.StrEnum):
    SCHEDULE = "schedule"
    JOB = "job"


class ScheduleState(enum.StrEnum):
    ACTIVE = "active"  # in the due index (has next_fire)
    PAUSED = "paused"  # out of the index until resumed
    COMPLETED = "completed"  # no fire left (one-off fired, end of window reached)
    CANCELLED = "cancelled"  # a one-off job cancelled before it ran


# A tenant's schedules lie on this many partition keys of the schedules table, so its
# writes are not capped by one key's 1,000 write units a second: the largest tenant's
# 30,000 every-minute schedules of 4 KB advance at 2,000 units a second, 250 a key here.
# Shard 0's key is the tenant id itself, as before schedules were spread; shard n's is
# ``{tenant_id}#{n}`` (a tenant id holds no ``#``: fireline.domain.api_keys.TENANT_ID).
# A tenant's list reads every key; a point read or write computes its one key.
TENANT_KEY_SHARDS = 8
TENANT_KEY_SEPARATOR = "#"


def tenant_key(tenant_id: str, schedule_id: str) -> str:
    """The schedules table's partition key value of one schedule."""
    shard = zlib.crc32(schedule_id.encode()) % TENANT_KEY_SHARDS
    return tenant_id if shard == 0 else f"{tenant_id}{TENANT_KEY_SEPARATOR}{shard}"


def tenant_keys(tenant_id: str) -> list[str]:
    """Every partition key value a tenant's schedules may lie on, shard 0's first."""
    return [tenant_id] + [
        f"{tenant_id}{TENANT_KEY_SEPARATOR}{shard}" for shard in range(1, TENANT_KEY_SHARDS)
    ]


def tenant_of_key(key: str) -> str:
    """The tenant id a partition key value belongs to."""
    return key.split(TENANT_KEY_SEPARATOR, 1)[0]


def due_shard(schedule_id: str, shards: int = DEFAULT_SHARDS) -> int:
    """A stable shard in [0, shards): spreads index writes over partitions.

    crc32, not ``hash()``: Python salts ``hash`` per process, and every ticker and API
    process must agree on the shard of a schedule.
    """
    if shards < 1:
        raise errors.ValidationError("must be at least 1", field="shards")
    return zlib.crc32(schedule_id.encode()) % shards


# A one-off job's id starts so (a recurring schedule's with "sch_"): a worker tells a
# job's occurrence, whose end gives back the job's unit of quota, by its key alone.
JOB_PREFIX = "job"


def batch_tenant(items: Sequence[Schedule]) -> str | None:
    """The one tenant a batch of items belongs to (None for no items); a batch naming
    two is refused (a quota is taken per tenant, once for its batch)."""
    tenants = {item.tenant_id for item in items}
    if len(tenants) > 1:
        raise errors.ValidationError("a batch is one tenant's", field="tenant_id")
    return next(iter(tenants), None)


def is_job_id(schedule_id: str) -> bool:
    return schedule_id.startswith(f"{JOB_PREFIX}_")


@dataclass(frozen=True)
class Schedule:
    tenant_id: str
    schedule_id: str
    timing: schedule.Timing
    spec_text: str  # the spec as stored and shown back (cron(...), rate(...), at(...))
    kind: Kind = Kind.SCHEDULE
    description: str = ""
    job_class: str = "default"
    target: dict[str, Any] = field(default_factory=dict)
    payload: dict[str, Any] = field(default_factory=dict)
    retry: retry.RetryPolicy = field(default_factory=retry.RetryPolicy)
    misfire: policies.Misfire = field(default_factory=policies.Misfire)
    overlap: policies.OverlapPolicy = policies.OverlapPolicy.ALLOW
    jitter_seconds: int = 0
    deadline_seconds: int | None = None
    state: ScheduleState = ScheduleState.ACTIVE
    version: int = 1
    next_fire: datetime | None = None  # set iff ACTIVE: the item is in the due index
    paused_at: datetime | None = None  # resume counts missed fires from here
    created_at: datetime | None = None
    updated_at: datetime | None = None
    # Holds a unit of its tenant's quota (schedules, or active jobs for a job), given back
    # once: by its delete, or by a job's end.
    quota_held: bool = False
    # A batch's job: the number of the holder that holds its unit instead (see
    # fireline.domain.quota.Holder); it never holds a mark of its own.
    held_in: int | None = None
    # The last advance: the first fire it moved past (every fire from there to next_fire
    # was sent then, ahead of its time, and has no row until a worker claims it) and when.
    # A new version starts without them: what an older version sent is void.
    sent_from: datetime | None = None
    sent_at: datetime | None = None
    # Fires an advance moved past without sending them (a misfire plan skipped them),
    # written with that advance and kept until their rows are written: the ticker's
    # proof that none of them goes unrecorded if it dies or loses its lease in between.
    skipped: policies.SkippedRange | None = None

    def __post_init__(self) -> None:
        if self.job_class not in JOB_CLASSES:
            raise errors.ValidationError(
                f"{self.job_class!r} is not one of {', '.join(JOB_CLASSES)}", field="job_class"
            )
        if self.jitter_seconds < 0:
            raise errors.ValidationError("must not be negative", field="jitter_seconds")
        if self.deadline_seconds is not None and self.deadline_seconds < 1:
            raise errors.ValidationError("must be at least 1", field="deadline_seconds")
        if (self.next_fire is not None) != (self.state is ScheduleState.ACTIVE):
            raise errors.ValidationError(
                "an active schedule has a next fire, any other has none", field="next_fire"
            )

    @property
    def jitter(self) -> timedelta:
        return timedelta(seconds=self.jitter_seconds)

    def shard(self, shards: int = DEFAULT_SHARDS) -> int:
        return due_shard(self.schedule_id, shards)

    def paused(self, now: datetime) -> Schedule:
        # A new version: occurrences already materialized ahead of time become stale and
        # the worker's version check skips them while the schedule is paused.
        # Resumed, it counts missed fires from its next fire when that had passed (a
        # ticker behind, or down, had not handed those fires on): the pause must not move
        # it past them, or they would have no record at all.
        # (A millisecond before it: the stored precision, and no fire is finer.)
        since = now
        if self.next_fire is not None and self.next_fire <= now:
            since = self.next_fire - timedelta(milliseconds=1)
        return replace(
            self,
            state=ScheduleState.PAUSED,
            next_fire=None,
            paused_at=since,
            version=self.version + 1,
            updated_at=now,
            sent_from=None,
            sent_at=None,
        )

    def advanced(
        self,
        next_fire: datetime | None,
        now: datetime,
        skipped: policies.SkippedRange | None = None,
    ) -> Schedule:
        """After firing: the next fire, or completed when there is none; the fires from
        the one it moved past were sent ``now``; ``skipped``, the fires this advance moved
        past unsent, replaces what the item held."""
        moved = replace(
            self, updated_at=now, sent_from=self.next_fire, sent_at=now, skipped=skipped
        )
        if next_fire is None:
            return replace(moved, state=ScheduleState.COMPLETED, next_fire=None)
        return replace(moved, next_fire=next_fire)

    def upcoming(self, now: datetime) -> datetime | None:
        """The earliest fire after ``now`` that has not run: ``next_fire`` is the next
        one the ticker has still to send, and the fires before it were sent ahead (up to
        its horizon), so the earliest of those still to come is the next one to run. One
        overdue and not sent yet (the ticker behind) is ``next_fire`` itself. (A next fire
        the exclusions take away, where the ticker left a long excluded run to record the
        rest of, is not one: the first fire after it is.)"""
        if self.next_fire is not None and self.timing.excluded(self.next_fire):
            return schedule.next_fire(self.timing, max(now, self.next_fire))
        if self.next_fire is None or self.next_fire <= now:
            return self.next_fire
        sooner = schedule.next_fire(self.timing, now)
        if sooner is not None and sooner < self.next_fire:
            return sooner
        return self.next_fire

    def sent_time(self, fire_time: datetime) -> datetime | None:
        """When the last advance sent ``fire_time`` ahead, if it did (None: not sent, or
        sent by an earlier advance, whose time is not kept)."""
        if self.sent_from is None or self.next_fire is None:
            return None
        if self.sent_from <= fire_time < self.next_fire:
            return self.sent_at
        return None


def held_entry(job: Schedule) -> str:
    """A batch's one-off job as its holder lists it (see quota.Holder)."""
    spec = job.timing.spec
    assert isinstance(spec, schedule.AtSpec), "only one-off jobs are held by holders"
    return quota.held_entry(job.schedule_id, spec.when)


def batch_created(jobs: Sequence[Schedule]) -> datetime:
    """When a batch of jobs was created (its holders' creation time)."""
    created = jobs[0].created_at
    assert created is not None, "a job is created with its creation time"
    return created
