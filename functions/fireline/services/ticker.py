"""The ticker: turns due schedules into occurrences and queue messages, once a second.

One ticker holds the lease of its shard group (10 s TTL, renewed every 3 s). The lease
only keeps two tickers from doing the same work; correctness comes from conditions on
each item: the occurrence put on its key, the schedule advance on the next fire and
version it read. A ticker that cannot renew stops at once, and also stops trusting its
lease before the store would hand it to someone else (the safety margin), measured on the
monotonic clock so a wall-clock jump cannot stretch it.

Per tick and shard: one Query on the sparse due index for everything due up to now plus
the lookahead (early pickups are delivered with SQS DelaySeconds, which spreads a
top-of-the-hour burst over the seconds before it), one BatchGetItem for those schedules,
then per schedule the misfire plan, the occurrence puts and
messages, and one conditional advance. A schedule whose overlap policy is ``allow`` is
materialized up to the horizon in one pickup, so a frequent schedule writes its index
entry once per several fires; changes made after that are caught by the worker's version
check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from aws_lambda_powertools import Logger

from fireline import ports
from fireline.domain import errors, lease, model, policies, schedule
from fireline.services import dispatch

logger = Logger(service="fireline", child=True)


@dataclass(frozen=True)
class TickerConfig:
    shards: int = model.DEFAULT_SHARDS
    lookahead_seconds: int = 10
    horizon_seconds: int = 180
    max_fires_per_pickup: int = 60
    due_page_size: int = 500
    tick_seconds: float = 1.0
    stop_before_end_ms: int = 5_000
    lease_name: str = "ticker"
    lease_terms: lease.LeaseTerms = field(default_factory=lease.LeaseTerms)

    def __post_init__(self) -> None:
        if not 0 <= self.lookahead_seconds <= self.horizon_seconds <= 900:
            # SQS delays at most 900 s: nothing may be picked up earlier than that.
            raise errors.ValidationError(
                "need 0 <= lookahead <= horizon <= 900 seconds", field="horizon_seconds"
            )


@dataclass
class TickReport:
    due_read: int = 0  # index entries read
    backlog: int = 0  # entries already due (not just inside the lookahead)
    stale: int = 0  # entries whose schedule moved on since the index was written
    advanced: int = 0
    conflicts: int = 0  # advances refused: another ticker or an update got there first
    dispatched: dispatch.DispatchReport = field(default_factory=dispatch.DispatchReport)
    lags_ms: list[float] = field(default_factory=list)

    def add(self, other: TickReport) -> None:
        self.due_read += other.due_read
        self.backlog += other.backlog
        self.stale += other.stale
        self.advanced += other.advanced
        self.conflicts += other.conflicts
        self.dispatched.add(other.dispatched)
        self.lags_ms += other.lags_ms


@dataclass
class RunReport:
    acquired: bool
    stopped: str  # "time" | "lease_lost" | "not_acquired"
    ticks: int = 0
    token: int | None = None
    totals: TickReport = field(default_factory=TickReport)


@dataclass
class _Round:
    """What one round of a tick put and must now send and advance."""

    outbound: list[dispatch.Outbound] = field(default_factory=list)
    picked: list[tuple[model.Schedule, datetime | None]] = field(default_factory=list)


@dataclass(frozen=True)
class _Plan:
    fires: list[datetime]
    skips: list[dispatch.Skip]
    summary: policies.SkippedSummary | None
    next_fire: datetime | None


class _NoMetrics:
    def add_metric(self, name: str, unit: str, value: float) -> None:
        return None


class Ticker:
    def __init__(
        self,
        *,
        schedules: ports.ScheduleStore,
        occurrences: ports.OccurrenceStore,
        queue: ports.WorkQueue,
        leases: ports.LeaseStore,
        clock: ports.Clock,
        owner: str,
        config: TickerConfig | None = None,
        metrics: ports.Metrics | None = None,
        use_lease: bool = True,
        after_tick: Callable[[], None] | None = None,
    ) -> None:
        self.schedules = schedules
        self.occurrences = occurrences
        self.queue = queue
        self.leases = leases
        self.clock = clock
        self.owner = owner
        self.config = config or TickerConfig()
        self.metrics = metrics or _NoMetrics()
        self.use_lease = use_lease
        # Called after every tick: the Lambda handler flushes its metrics here, so lag
        # reaches CloudWatch within seconds rather than at the end of the invocation.
        self.after_tick = after_tick
        self._held: lease.Lease | None = None
        self._renewed_at = 0.0  # monotonic
        self._trusted_until = 0.0  # monotonic

    # --- the invocation loop ---------------------------------------------------------------

    def run(self, remaining_ms: Callable[[], int]) -> RunReport:
        """Tick every second until ``stop_before_end_ms`` before the invocation ends."""
        if self.use_lease and not self._acquire_within(remaining_ms):
            logger.info("lease held elsewhere", extra={"action": "ticker.skip"})
            self.metrics.add_metric("LeaseBusy", "Count", 1)
            return RunReport(acquired=False, stopped="not_acquired")
        report = RunReport(acquired=True, stopped="time", token=self._token())
        next_tick = self.clock.monotonic()
        try:
            while remaining_ms() > self.config.stop_before_end_ms:
                try:
                    report.totals.add(self.tick())
                    report.ticks += 1
                    self.metrics.add_metric("TicksCompleted", "Count", 1)
                except errors.Unavailable as exc:
                    # Throttling or a service fault: this tick is lost, not the minute.
                    # Whatever it had written is redone by the next tick (keys converge).
                    logger.warning(
                        "tick failed", extra={"action": "ticker.unavailable", "error": str(exc)}
                    )
                    self.metrics.add_metric("TicksFailed", "Count", 1)
                if self.after_tick is not None:
                    self.after_tick()
                next_tick += self.config.tick_seconds
                wait = next_tick - self.clock.monotonic()
                if wait > 0:
                    self.clock.sleep(wait)
                else:
                    next_tick = self.clock.monotonic()  # behind: do not burst to catch up
        except errors.LeaseLost:
            report.stopped = "lease_lost"
            logger.warning("lease lost: stopping", extra={"action": "ticker.lease_lost"})
            self._held = None
        except Exception:
            self._release()  # an error ends this invocation: hand over at once
            raise
        self._release()
        return report

    def _release(self) -> None:
        """Hand the lease over now, so the next invocation need not wait for the TTL."""
        if self._held is not None:
            self.leases.release(self._held)
            self._held = None

    def _acquire_within(self, remaining_ms: Callable[[], int]) -> bool:
        """Try for the lease until it is ours or this invocation's time is up: the
        previous minute's invocation may still be finishing its last seconds."""
        while True:
            if self._acquire():
                return True
            if remaining_ms() <= self.config.stop_before_end_ms + self.config.lease_terms.ttl_ms:
                return False
            self.clock.sleep(1)

    def _token(self) -> int | None:
        return self._held.token if self._held else None

    def _acquire(self) -> bool:
        held = self.leases.acquire(
            self.config.lease_name, self.owner, self._now_ms(), self.config.lease_terms
        )
        if held is None:
            return False
        self._held = held
        self._trust(self.clock.monotonic())
        logger.info("lease acquired", extra={"action": "ticker.lease", "token": held.token})
        return True

    def _trust(self, renewed_at: float) -> None:
        terms = self.config.lease_terms
        self._renewed_at = renewed_at
        self._trusted_until = renewed_at + (terms.ttl_ms - terms.safety_margin_ms) / 1000

    def keep_lease(self) -> None:
        """Renew when due; raise LeaseLost when the lease cannot be trusted any more.

        Called before every schedule's writes, so a slow tick renews on time and a
        ticker that lost its lease stops before its next write.
        """
        if not self.use_lease:
            return
        if self._held is None:
            raise errors.LeaseLost("no lease held")
        now = self.clock.monotonic()
        if now - self._renewed_at >= self.config.lease_terms.renew_every_ms / 1000:
            # Any failure to renew ends the invocation: better a missed second than two
            # leaders. LeaseLost and Unavailable both propagate.
            try:
                self._held = self.leases.renew(self._held, self._now_ms(), self.config.lease_terms)
            except errors.Unavailable as exc:
                raise errors.LeaseLost(f"renewal failed: {exc}") from exc
            self._trust(now)
        elif now >= self._trusted_until:
            raise errors.LeaseLost("lease no longer trusted")

    def _now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)

    # --- one tick --------------------------------------------------------------------------

    def tick(self) -> TickReport:
        report = TickReport()
        now = self.clock.now()
        until = now + timedelta(seconds=self.config.lookahead_seconds)
        shards = list(range(self.config.shards))
        while shards:
            # One round: a page from every shard, then one send for all of them (ten
            # messages to a request across schedules and shards), then the advances. A
            # shard whose page came back full has more due: it goes again next round,
            # once this round's schedules have left the index.
            collected = _Round()
            shards = [s for s in shards if self._collect(s, now, until, report, collected)]
            self._flush(collected, now, report)
        self.metrics.add_metric("Backlog", "Count", report.backlog)
        for lag in report.lags_ms:
            self.metrics.add_metric("ScheduleLag", "Milliseconds", lag)
        if report.dispatched.sent:
            self.metrics.add_metric("Fired", "Count", report.dispatched.sent)
        if report.dispatched.skipped:
            self.metrics.add_metric("Skipped", "Count", report.dispatched.skipped)
        if report.dispatched.duplicates:
            self.metrics.add_metric("DuplicateOccurrences", "Count", report.dispatched.duplicates)
        if report.due_read:
            logger.info(
                "tick",
                extra={
                    "action": "ticker.tick",
                    "due": report.due_read,
                    "backlog": report.backlog,
                    "sent": report.dispatched.sent,
                    "skipped": report.dispatched.skipped,
                    "duplicates": report.dispatched.duplicates,
                    "conflicts": report.conflicts,
                },
            )
        return report

    def _collect(
        self, shard: int, now: datetime, until: datetime, report: TickReport, into: _Round
    ) -> bool:
        """Put the occurrences of one page of one shard; True when the page was full."""
        limit = self.config.due_page_size
        self.keep_lease()
        entries = self.schedules.due(shard, until=until, limit=limit)
        report.due_read += len(entries)
        report.backlog += sum(1 for e in entries if e.next_fire <= now)
        if not entries:
            return False
        found = {
            (s.tenant_id, s.schedule_id): s
            for s in self.schedules.get_many([(e.tenant_id, e.schedule_id) for e in entries])
        }
        picked = 0
        for entry in entries:
            item = found.get((entry.tenant_id, entry.schedule_id))
            if item is None or item.next_fire != entry.next_fire:
                # The index lags the table (it is eventually consistent), or the schedule
                # was changed, paused or deleted since: nothing to do.
                report.stale += 1
                continue
            self.keep_lease()
            try:
                plan = self._plan(item, now)
            except (errors.ValidationError, ValueError, OverflowError) as exc:
                # One schedule that cannot be planned must not hold up the others.
                logger.error(
                    "schedule skipped",
                    extra={
                        "action": "ticker.bad_schedule",
                        "key": item.schedule_id,
                        "error": str(exc),
                    },
                )
                self.metrics.add_metric("BadSchedules", "Count", 1)
                continue
            into.outbound += dispatch.record(
                item,
                plan.fires,
                now=now,
                occurrences=self.occurrences,
                report=report.dispatched,
                skips=plan.skips,
                summary=plan.summary,
            )
            report.lags_ms += [max(0.0, (now - f).total_seconds() * 1000) for f in plan.fires]
            into.picked.append((item, plan.next_fire))
            picked += 1
        return len(entries) == limit and picked > 0

    def _flush(self, collected: _Round, now: datetime, report: TickReport) -> None:
        """Send what the round put, then advance its schedules: never the other way
        round, so a crash in between redoes the round instead of losing its fires."""
        self.keep_lease()
        dispatch.send(self.queue, collected.outbound, report.dispatched)
        for item, next_fire in collected.picked:
            self.keep_lease()
            assert item.next_fire is not None
            advanced = self.schedules.advance(
                item.tenant_id,
                item.schedule_id,
                expected_next_fire=item.next_fire,
                expected_version=item.version,
                next_fire=next_fire,
                now=now,
            )
            if advanced:
                report.advanced += 1
            else:
                report.conflicts += 1

    def _plan(self, item: model.Schedule, now: datetime) -> _Plan:
        """Which fires of a due schedule to send, which to record as skipped, and where the
        schedule continues."""
        assert item.next_fire is not None
        due = item.next_fire
        fires: list[datetime] = []
        skips: list[dispatch.Skip] = []
        summary = None
        after = due - timedelta(microseconds=1)
        if due < now - timedelta(seconds=item.misfire.grace_seconds):
            plan = policies.plan_misfires(item.timing, item.misfire, due, now)
            fires += plan.fire
            skips += [dispatch.Skip(f, "skipped: misfire") for f in plan.skipped]
            summary = plan.skipped_summary
            if plan.resume_after is not None:
                after = plan.resume_after

        # Overlap is decided by the worker when a fire is due (only then is it known
        # whether the previous run is still running); such schedules are materialized
        # only the lookahead ahead, so few rows wait on a decision.
        allow = item.overlap is policies.OverlapPolicy.ALLOW
        reach = self.config.horizon_seconds if allow else self.config.lookahead_seconds
        room = self.config.max_fires_per_pickup - len(fires)
        considered = [after, *fires, *(s.fire_time for s in skips)]
        if summary is not None:
            considered.append(summary.last)
        upcoming, following = schedule.fires_and_next(
            item.timing, max(considered), until=now + timedelta(seconds=reach), limit=max(room, 0)
        )
        # Every missed or skipped fire precedes the upcoming ones, so the fire after the
        # last upcoming one is where the schedule continues.
        return _Plan([*fires, *upcoming], skips, summary, following)
