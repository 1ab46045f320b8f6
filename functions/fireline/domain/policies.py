"""Runtime policies of a recurring schedule: misfire (catch-up) and overlap.

Misfire: fires whose time passed while nothing was ticking (an outage, a paused schedule
being resumed, a clock jump). The plan says which of them still fire and which are
recorded as skipped; none is dropped without a trace.

Overlap: what a new fire does while an earlier run of the same schedule is unfinished.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from fireline.domain import errors, schedule


class MisfirePolicy(enum.StrEnum):
    FIRE_ALL = "fire_all"  # each missed fire inside the catch-up window, up to a cap
    FIRE_ONCE = "fire_once"  # one fire for all that was missed (the latest)
    SKIP = "skip"  # none; all missed fires are recorded as skipped


@dataclass(frozen=True)
class Misfire:
    policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    # A fire this late or less is simply late, not missed.
    grace_seconds: int = 60
    # FIRE_ALL: only missed fires at most this old run, and at most this many (the latest).
    catch_up_window_seconds: int = 3600
    catch_up_max: int = 10

    def __post_init__(self) -> None:
        # Stored records come back as plain strings; compare by identity only with enums.
        try:
            object.__setattr__(self, "policy", MisfirePolicy(self.policy))
        except ValueError as exc:
            raise errors.ValidationError(
                f"{self.policy!r} is not a policy", field="misfire.policy"
            ) from exc
        for name in ("grace_seconds", "catch_up_window_seconds", "catch_up_max"):
            if getattr(self, name) < 0:
                raise errors.ValidationError("must not be negative", field=f"misfire.{name}")


@dataclass(frozen=True)
class SkippedSummary:
    """Missed fires past the per-fire record cap, kept as one count and range."""

    count: int
    first: datetime
    last: datetime
    exact: bool  # False when the scan limit stopped counting


@dataclass(frozen=True)
class MisfirePlan:
    fire: tuple[datetime, ...]  # missed fires that still run, oldest first
    skipped: tuple[datetime, ...]  # missed fires recorded one by one as skipped
    skipped_summary: SkippedSummary | None  # the rest, when there are more than the cap
    resume_after: datetime | None  # where the schedule continues (next_fire after this)

    @property
    def missed(self) -> int:
        extra = self.skipped_summary.count if self.skipped_summary else 0
        return len(self.fire) + len(self.skipped) + extra


# Per-second schedules that were down for a day missed 86,400 fires: each is accounted for,
# but only this many get a row of their own; the rest are one summary row.
RECORD_CAP = 100
SCAN_LIMIT = 100_000


def plan_misfires(
    timing: schedule.Timing,
    misfire: Misfire,
    due: datetime,
    now: datetime,
    *,
    record_cap: int = RECORD_CAP,
    scan_limit: int = SCAN_LIMIT,
) -> MisfirePlan:
    """Plan the fires from ``due`` (the stored next fire, inclusive) that are missed at ``now``.

    Fires inside the grace period are not missed: the caller fires them normally.
    """
    cutoff = now - timedelta(seconds=misfire.grace_seconds)
    missed: list[datetime] = []
    overflow_count, overflow_first, overflow_last, exact = 0, None, None, True
    # The tail must hold the fires that may still run *and* record_cap skipped ones after
    # them; a tail of only max(record_cap, catch_up_max) listed fewer than record_cap
    # skipped fires (and counted the rest) whenever a fold had just happened.
    keep_tail = record_cap + max(misfire.catch_up_max, 1)
    past_due = schedule.fires(timing, due - timedelta(microseconds=1), until=cutoff)
    for scanned, fire_time in enumerate(past_due, 1):
        if fire_time >= cutoff:
            break
        missed.append(fire_time)
        if len(missed) > 2 * keep_tail:
            # Keep memory bounded: fold the oldest into the summary as we go.
            for old in missed[: len(missed) - keep_tail]:
                overflow_count += 1
                overflow_first = overflow_first or old
                overflow_last = old
            missed = missed[len(missed) - keep_tail :]
        if scanned >= scan_limit:
            exact = False
            break
    if not missed:
        return MisfirePlan((), (), None, None)
    resume_after = missed[-1]
    if not exact:
        # The scan stopped early: whatever lies between the last scanned fire and the
        # cutoff is accounted for by the summary's range, and the schedule resumes there.
        resume_after = cutoff - timedelta(microseconds=1)

    if misfire.policy is MisfirePolicy.FIRE_ALL:
        oldest_allowed = now - timedelta(seconds=misfire.catch_up_window_seconds)
        eligible = [f for f in missed if f >= oldest_allowed][-misfire.catch_up_max :]
        if misfire.catch_up_max == 0:
            eligible = []
    elif misfire.policy is MisfirePolicy.FIRE_ONCE:
        eligible = [missed[-1]]
    else:
        eligible = []
    chosen = set(eligible)
    skipped = [f for f in missed if f not in chosen]
    if len(skipped) > record_cap:
        spill = skipped[: len(skipped) - record_cap]
        overflow_count += len(spill)
        overflow_first = overflow_first or spill[0]
        overflow_last = spill[-1]
        skipped = skipped[len(skipped) - record_cap :]
    summary = None
    if overflow_count:
        assert overflow_first is not None and overflow_last is not None
        summary = SkippedSummary(overflow_count, overflow_first, overflow_last, exact)
    return MisfirePlan(tuple(eligible), tuple(skipped), summary, resume_after)


class OverlapPolicy(enum.StrEnum):
    ALLOW = "allow"  # runs may overlap
    FORBID = "forbid"  # a fire while a run is unfinished is skipped
    BUFFER_ONE = "buffer_one"  # one fire waits for the unfinished run; further ones skip


class OverlapDecision(enum.StrEnum):
    RUN = "run"
    BUFFER = "buffer"  # hold it until the unfinished run ends
    SKIP = "skip"


def decide_overlap(policy: OverlapPolicy, unfinished: int, buffered: int) -> OverlapDecision:
    """What a new fire does given ``unfinished`` runs and ``buffered`` waiting fires."""
    if policy is OverlapPolicy.ALLOW or unfinished == 0:
        return OverlapDecision.RUN
    if policy is OverlapPolicy.BUFFER_ONE and buffered == 0:
        return OverlapDecision.BUFFER
    return OverlapDecision.SKIP
