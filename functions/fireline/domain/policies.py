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
        if self.catch_up_max > MAX_CATCH_UP:
            # A plan decides at most SCAN_LIMIT fires and must leave this many undecided.
            raise errors.ValidationError(
                f"must be at most {MAX_CATCH_UP}", field="misfire.catch_up_max"
            )


@dataclass(frozen=True)
class SkippedSummary:
    """Missed fires past the per-fire record cap, kept as one count and range."""

    count: int
    first: datetime
    last: datetime


MISFIRE_REASON = "skipped: misfire"


@dataclass(frozen=True)
class SkippedRange:
    """Every fire of one version of a schedule from ``first`` to ``last`` (both included),
    ``count`` of them, skipped by one misfire plan: the durable record of those fires that
    the ticker writes on the schedule with the advance that moves past them, held there
    until their rows are written (a crash or a lost lease in between loses none)."""

    version: int
    first: datetime
    last: datetime
    count: int
    # Why: a misfire plan's, or an update's that voided fires no ticker had sent yet.
    reason: str = MISFIRE_REASON
    # When they were skipped (the advance's or the update's time). Their rows carry it
    # however late they are written: a later pickup's own clock (stepped back by NTP, or
    # just later) would date a skip before the fire was even due, or after the fact.
    at: datetime | None = None

    def __post_init__(self) -> None:
        if self.count < 1 or self.last < self.first:
            raise errors.ValidationError("an empty range of fires", field="skipped")


@dataclass(frozen=True)
class MisfirePlan:
    fire: tuple[datetime, ...]  # missed fires that still run, oldest first
    skipped: tuple[datetime, ...]  # missed fires recorded one by one as skipped
    skipped_summary: SkippedSummary | None  # the rest, when there are more than the cap
    resume_after: datetime | None  # where the schedule continues (next_fire after this)
    # False when the outage was longer than one plan may look at: this plan only skips
    # the oldest missed fires, and the schedule, still due, is planned again next tick.
    complete: bool = True

    @property
    def missed(self) -> int:
        extra = self.skipped_summary.count if self.skipped_summary else 0
        return len(self.fire) + len(self.skipped) + extra

    def skipped_range(self, version: int, at: datetime) -> SkippedRange | None:
        """The fires this plan skips, as one range: the summary's and the ones recorded one
        by one follow each other (a plan skips the oldest missed fires and fires the rest);
        ``at``, when the plan skips them."""
        summary = self.skipped_summary
        if summary is None and not self.skipped:
            return None
        first = summary.first if summary else self.skipped[0]
        last = self.skipped[-1] if self.skipped else summary.last  # type: ignore[union-attr]
        count = len(self.skipped) + (summary.count if summary else 0)
        return SkippedRange(version, first, last, count, at=at)


MAX_CATCH_UP = 1_000
# Per-second schedules that were down for a day missed 86,400 fires: each is accounted for,
# but only this many get a row of their own; the rest are one summary row.
RECORD_CAP = 100
# Missed fires one plan looks at. The ticker plans every due schedule inside a lease of a
# few seconds: a schedule paused for days (a per-second cron misses 86,400 fires a day)
# must not cost the others their fires, so a longer outage is caught up in chunks, one
# per tick, each an exact count.
SCAN_LIMIT = 5_000


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

    Fires inside the grace period are not missed: the caller fires them normally. At most
    ``scan_limit`` missed fires are looked at; when there are more, the plan is partial
    (``complete`` False): it skips the oldest of them, which no policy would run, and
    leaves the rest to the next plan.
    """
    cutoff = now - timedelta(seconds=misfire.grace_seconds)
    # FIRE_ALL may run the last catch_up_max missed fires: a partial plan cannot tell
    # which those are, so it leaves that many undecided for the next chunk.
    undecided = misfire.catch_up_max if misfire.policy is MisfirePolicy.FIRE_ALL else 0
    if scan_limit <= undecided:
        raise errors.ValidationError(
            f"must exceed catch_up_max ({undecided})", field="misfire.scan_limit"
        )
    missed = list(
        schedule.fires(timing, due - timedelta(microseconds=1), until=cutoff, limit=scan_limit + 1)
    )
    if missed and missed[-1] >= cutoff:
        missed.pop()  # `until` is inclusive; a fire at the cutoff is late, not missed
    if not missed:
        return MisfirePlan((), (), None, None)
    if len(missed) > scan_limit:
        decided = missed[: scan_limit - undecided]
        chunk = SkippedSummary(len(decided), decided[0], decided[-1])
        return MisfirePlan((), (), chunk, decided[-1], complete=False)

    if misfire.policy is MisfirePolicy.FIRE_ALL:
        oldest_allowed = now - timedelta(seconds=misfire.catch_up_window_seconds)
        eligible = [f for f in missed if f >= oldest_allowed]
        keep = min(len(eligible), misfire.catch_up_max)
        eligible = eligible[len(eligible) - keep :]
    elif misfire.policy is MisfirePolicy.FIRE_ONCE:
        eligible = [missed[-1]]
    else:
        eligible = []
    chosen = set(eligible)
    skipped = [f for f in missed if f not in chosen]
    summary: SkippedSummary | None = None
    if len(skipped) > record_cap:
        spill = skipped[: len(skipped) - record_cap]
        summary = SkippedSummary(len(spill), spill[0], spill[-1])
        skipped = skipped[len(spill) :]
    return MisfirePlan(tuple(eligible), tuple(skipped), summary, missed[-1])


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
