"""The ticker: turns due schedules into queue messages, minutes ahead of their fire time.

Groups. The due index is split into shards (``DUE_SHARDS``); the shards are split over K
ticker groups (shard % K == group). Each group has its own EventBridge rule, its own
lease and its own Lambda, so throughput grows with K.

The lease (10 s TTL, renewed every 3 s) only keeps two invocations of a group from doing
the same work; correctness comes from conditions on each item: the schedule advance on
the next fire and version it read, the worker's claim on the occurrence key. A ticker
that cannot renew stops at once, and stops trusting its lease before the store would hand
it to someone else (the safety margin), on the monotonic clock so a wall-clock jump
cannot stretch it. Every write checks that trust just before it is issued.

Working ahead. Each pass sweeps the group's shards for schedules due up to now +
``lookahead_seconds`` (5 minutes), earliest first, and each pickup materializes the
schedule's fires up to now + ``horizon_seconds`` (15 minutes; SQS delays at most 900 s),
delivered with DelaySeconds. So whatever capacity the ticker has left over goes into
fires minutes ahead, and a burst known in advance (50,000 hourly jobs at the top of the
hour) is sent over the five minutes before it rather than the second it is due: no
burst detector, no extra index state. What the ticker counts is how many fires of each
second ahead it has sent: past a threshold, that second's further fires go to their
class's burst queue, visible a minute before their time (``burst_lead_seconds``), so the
workers' event source mapping there has scaled out by the second they are due, and the
steady fires never wait behind them (see TickerConfig). A frequent schedule
is picked up once per several fires (a minutely one every 10 minutes), which is one index
write per several fires.

Rounds. A pass is a sequence of bounded rounds: a page from each shard (following the
index's cursor, never re-reading what this pass already handled), one BatchGetItem per
hundred keys (the table, read consistently, is the authority: the index lags), the plans
(CPU), then the round's messages in batches of ten, then the advances: messages before
advances, so a crash in between repeats fires (harmless: the worker's claim is
conditional) and never loses one. Fires a misfire plan skips are held on the schedule by
the advance that moves past them (the same conditional write), and get their rows after
it: a crash or a lost lease in between leaves the range held, never a fire unrecorded.
Calls within a phase go out side by side through a bounded pool. A round starts only
while the invocation's remaining time and the lease allow it. Every entry the index
lists is read from the table before anything is done with it, those this invocation just
advanced too: an entry listing the next fire it moved from is either the lagging index
or a change made since (an update, a pause and resume, a delete and create again under
the same id) that put the schedule back on that fire, and only the table can tell which.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from aws_lambda_powertools import Logger

from fireline import ports
from fireline.domain import errors, exclusions, lease, model, policies, schedule
from fireline.services import dispatch

logger = Logger(service="fireline", child=True)

T = TypeVar("T")
BATCH_GET_MAX = 100
# The longest burst lead: a worker holds a fire that long and then gives it its whole
# deadline, within its function's timeout (infra/template.yaml's BurstLeadSeconds).
MAX_BURST_LEAD_SECONDS = 120
MIN_PAGE = 25
SKIP_WRITE_ATTEMPTS = 3


@dataclass(frozen=True)
class TickerConfig:
    shards: int = model.DEFAULT_SHARDS
    groups: int = 1
    group: int = 0
    # A schedule is picked up this long before its next fire, as capacity allows.
    # The longer the gap to the horizon, the more fires one advance (a base write and two
    # index writes) pays for: ten of a minutely schedule at 300, five at 600.
    lookahead_seconds: int = 300
    # One pickup materializes fires this far ahead of now (SQS delays at most 900 s).
    horizon_seconds: int = 900
    max_fires_per_pickup: int = 60
    # A round reads as many index entries as it can handle in about this long (measured
    # as it goes): well inside the lease renewal period, whatever a call costs here.
    round_seconds: float = 1.0
    round_entries_min: int = 32
    round_entries_max: int = 1_000
    tick_seconds: float = 1.0
    # SQS counts delays in whole seconds and a delay is rounded down, counted from
    # dispatch.IN_FLIGHT (0.1 s) past the send's clock reading: a fire due on a whole
    # second (as cron and rate fires are) sent f into a second is visible 1 - f early
    # while f + IN_FLIGHT is under the second's end, 2 - f once past it, and the worker
    # invocation that takes it holds it until its time, billed. So while the ticker keeps
    # up, its ticks start tick_phase into a second of the wall clock (a fraction of
    # tick_seconds), and a round done reading between tick_phase and send_phase into a
    # second holds its sends until send_phase, unless one of its fires is due sooner:
    # they are visible 1 - send_phase early, 0.15 s, where sends at any phase made it
    # 0.6 s on average. The hold ends early enough for the sends to be out by the send
    # phase, as long as the last round's took; and while the ticker keeps up, a pass's
    # first round reads every shard, so a steady tick is one round, its sends together.
    # A round that reads past the phase sends at once, and its fires wait longer, never
    # late. (In the latency-model simulation at 580 fires a second: 0.24 s on average,
    # p50 0.19 s, where rounds of a shard or two, each sending in turn, left p50 0.86 s.)
    tick_phase: float = 0.6
    send_phase: float = 0.85
    # Bursts. A second this ticker has sent more than dense_second_fires fires for
    # (divided among the groups: each counts its own) is a burst, such as the top of an
    # hour: each further fire of it goes to its class's burst queue (burst_queues, where
    # the deployment has one: model.BURST_QUEUES), visible burst_lead_seconds before its
    # time. An event source mapping adds invocations only while messages wait (300 a
    # minute, as AWS scales a standard queue's), so a burst visible in its second would
    # wait minutes for the invocations to start it. Visible a minute ahead on a queue of
    # its own, the burst's mapping has scaled out by its second (its invocations warm,
    # each holding a full batch until the fires' time), and the class's steady fires on
    # their own queue never wait behind it. The first dense_second_fires of a second are
    # the steady load's share: they stay on the class's queue. 0 turns it off.
    burst_lead_seconds: int = 90
    dense_second_fires: int = 1_000
    burst_queues: Mapping[str, str] = field(default_factory=dict)
    # The classes whose fires are visible early, their workers holding them until their
    # time: by the event source mapping's batching window (a batch is gathered for up to
    # that long from its first record, so a fire visible at its time would start that
    # much late: visible a window early, its batch is gathered before its time), and by
    # a burst's lead.
    held_classes: frozenset[str] = dispatch.HELD_CLASSES
    batching_window_seconds: float = dispatch.BATCHING_WINDOW_SECONDS
    # A pass starts again from the top of the index after this long, so fires that
    # became due meanwhile are not left behind the rest of a long pass.
    pass_seconds: float = 5.0
    stop_before_end_ms: int = 5_000
    lease_terms: lease.LeaseTerms = field(default_factory=lease.LeaseTerms)

    def __post_init__(self) -> None:
        if not 0 <= self.lookahead_seconds <= self.horizon_seconds <= 900:
            # SQS delays at most 900 s: nothing may be picked up earlier than that.
            raise errors.ValidationError(
                "need 0 <= lookahead <= horizon <= 900 seconds", field="horizon_seconds"
            )
        if not 0 <= self.tick_phase < 1:
            raise errors.ValidationError("must be 0 or more and less than 1", field="tick_phase")
        if not 0 <= self.send_phase < 1 - dispatch.IN_FLIGHT.total_seconds():
            raise errors.ValidationError(
                f"must be 0 or more and less than {1 - dispatch.IN_FLIGHT.total_seconds()}"
                " (a send's delay counts from dispatch.IN_FLIGHT past its clock)",
                field="send_phase",
            )
        if not 1 <= self.groups <= self.shards:
            raise errors.ValidationError(
                f"must be 1 to the number of shards ({self.shards})", field="groups"
            )
        if not 0 <= self.group < self.groups:
            raise errors.ValidationError(f"must be 0 to {self.groups - 1}", field="group")
        if not 0 <= self.burst_lead_seconds <= MAX_BURST_LEAD_SECONDS:
            raise errors.ValidationError(
                f"must be 0 to {MAX_BURST_LEAD_SECONDS} seconds", field="burst_lead_seconds"
            )
        if self.dense_second_fires < 1:
            raise errors.ValidationError("must be at least 1", field="dense_second_fires")

    @property
    def dense_per_group(self) -> int:
        """Fires of one second this group sends before the rest count as a burst."""
        return max(1, self.dense_second_fires // self.groups)

    @property
    def lease_name(self) -> str:
        return lease.ticker_lease_name(self.group, self.groups)

    @property
    def my_shards(self) -> list[int]:
        return [s for s in range(self.shards) if s % self.groups == self.group]


@dataclass
class TickReport:
    due_read: int = 0  # index entries read
    backlog: int = 0  # entries already due (not just inside the lookahead)
    stale: int = 0  # entries whose schedule moved on since the index was written
    advanced: int = 0
    conflicts: int = 0  # advances refused: another ticker or an update got there first
    held_back: int = 0  # schedules not advanced because a write failed (retried next pass)
    rounds: int = 0
    drained: bool = True  # the pass reached the end of the window
    out_of_time: bool = False  # stopped: no room for another round in this invocation
    dispatched: dispatch.DispatchReport = field(default_factory=dispatch.DispatchReport)
    lags_ms: list[float] = field(default_factory=list)  # pickup lateness of due fires
    # Per fire sent: its message's send time less its fire time, 0 when sent ahead (the
    # lookahead's delay makes it visible at its time). What a user feels of the ticker.
    enqueue_lags_ms: list[float] = field(default_factory=list)

    def add(self, other: TickReport) -> None:
        self.due_read += other.due_read
        self.backlog += other.backlog
        self.stale += other.stale
        self.advanced += other.advanced
        self.conflicts += other.conflicts
        self.held_back += other.held_back
        self.rounds += other.rounds
        self.drained = other.drained
        self.out_of_time = other.out_of_time
        self.dispatched.add(other.dispatched)
        self.lags_ms += other.lags_ms
        self.enqueue_lags_ms += other.enqueue_lags_ms


@dataclass
class RunReport:
    acquired: bool
    stopped: str  # "time" | "lease_lost" | "not_acquired"
    ticks: int = 0
    token: int | None = None
    totals: TickReport = field(default_factory=TickReport)


@dataclass(frozen=True)
class _Plan:
    fires: list[datetime]
    skips: list[dispatch.Skip]
    summary: policies.SkippedSummary | None
    next_fire: datetime | None
    # The skips and the summary as one range: held on the schedule by the advance.
    skipped: policies.SkippedRange | None = None
    # Fires the schedule's exclusions and skips took away, each run between two sent
    # fires as one entry (a run of one is a fire's own row); their range is ``skipped``.
    excluded: tuple[policies.SkippedSummary, ...] = ()


@dataclass
class _Pickup:
    """One due schedule in a round: what it sends and where it continues."""

    item: model.Schedule
    plan: _Plan
    keys: list[str] = field(default_factory=list)


class _NoMetrics:
    def add_metric(self, name: str, unit: str, value: float) -> None:
        return None


class _Sequential:
    """A Parallel that runs one call at a time (tests and tools that need no pool)."""

    def run(self, calls: Sequence[Callable[[], T]]) -> list[T | Exception]:
        results: list[T | Exception] = []
        for call in calls:
            try:
                results.append(call())
            except Exception as exc:  # handed back as the call's outcome
                results.append(exc)
        return results


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
        parallel: ports.Parallel | None = None,
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
        self.parallel: ports.Parallel = parallel or _Sequential()
        self._held: lease.Lease | None = None
        self._renewed_at = 0.0  # monotonic
        self._trusted_until = 0.0  # monotonic
        self._slowest_round = 0.0  # monotonic seconds
        # How long the last round's sends took, first to last (monotonic seconds): a round
        # holds its sends to end by the send phase, not to start at it.
        self._send_span = 0.0
        # Did the last pass keep up (drained within a tick)? Then the next pass's first
        # round reads every shard; a cold ticker, or one behind, sizes its rounds by pace.
        self._kept_up = False
        self._round_entries = self.config.round_entries_min
        # Fires this invocation sent, by the whole second they are due (epoch seconds):
        # past TickerConfig.dense_per_group, a second's further fires are a burst's.
        self._sent_per_second: dict[int, int] = {}

    # --- the invocation loop ---------------------------------------------------------------

    def run(self, remaining_ms: Callable[[], int]) -> RunReport:
        """Tick every second until ``stop_before_end_ms`` before the invocation ends."""
        if self.use_lease and not self._acquire_within(remaining_ms):
            logger.info("lease held elsewhere", extra={"action": "ticker.skip"})
            self.metrics.add_metric("LeaseBusy", "Count", 1)
            return RunReport(acquired=False, stopped="not_acquired")
        report = RunReport(acquired=True, stopped="time", token=self._token())
        try:
            while remaining_ms() > self.config.stop_before_end_ms:
                drained = True
                started = self.clock.monotonic()
                try:
                    tick = self.tick(remaining_ms)
                    drained = tick.drained
                    report.totals.add(tick)
                    report.ticks += 1
                    self.metrics.add_metric("TicksCompleted", "Count", 1)
                    if tick.out_of_time:
                        break
                except errors.Unavailable as exc:
                    # Throttling or a service fault on a read: this pass is lost, not the
                    # minute. Whatever it had sent is sent again by the next (keys converge).
                    logger.warning(
                        "tick failed", extra={"action": "ticker.unavailable", "error": str(exc)}
                    )
                    self.metrics.add_metric("TicksFailed", "Count", 1)
                if self.after_tick is not None:
                    self.after_tick()
                behind = self.clock.monotonic() - started >= self.config.tick_seconds
                if drained and not behind:
                    # Keeping up: the next tick at the phase of the wall clock's second
                    # (tick_phase), about a period after this one started. Behind, or with
                    # work left, the next tick starts at once (never a burst to catch up).
                    self.clock.sleep(self._until_phase(started))
        except errors.LeaseLost:
            report.stopped = "lease_lost"
            logger.warning("lease lost: stopping", extra={"action": "ticker.lease_lost"})
            self._held = None
        except Exception:
            self._release()  # an error ends this invocation: hand over at once
            raise
        self._release()
        return report

    def _until_phase(self, started: float) -> float:
        """Seconds from now to the next moment ``tick_phase`` into a period of the wall
        clock that is at least half a period after the tick that ``started`` (on the
        monotonic clock): ticks land on the phase, never two in a row a moment apart (a
        clock that reads a hair before the phase after sleeping up to it)."""
        period = self.config.tick_seconds
        into = self.clock.now().timestamp() % period
        wait = (self.config.tick_phase * period - into) % period
        earliest = started + period / 2 - self.clock.monotonic()
        while wait < earliest:
            wait += period
        return wait

    def _release(self) -> None:
        """Hand the lease over now, so the next invocation need not wait for the TTL."""
        if self._held is not None:
            held, self._held = self._held, None
            with contextlib.suppress(errors.Unavailable):  # it expires within the TTL anyway
                self.leases.release(held)

    def _acquire_within(self, remaining_ms: Callable[[], int]) -> bool:
        """Try for the lease until it is ours or this invocation's time is up: the
        previous minute's invocation may still be finishing its last seconds."""
        while True:
            try:
                if self._acquire():
                    return True
            except errors.Unavailable as exc:
                logger.warning(
                    "lease read failed", extra={"action": "ticker.unavailable", "error": str(exc)}
                )
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

        Called before every phase of a round (one thread), so a long pass renews on time
        and a ticker that lost its lease starts nothing more.
        """
        if not self.use_lease:
            return
        if self._held is None:
            raise errors.LeaseLost("no lease held")
        now = self.clock.monotonic()
        if now >= self._trusted_until:
            raise errors.LeaseLost("lease no longer trusted")
        if now - self._renewed_at >= self.config.lease_terms.renew_every_ms / 1000:
            # Refused (someone else holds it): stop at once. Unanswered (a timeout, a
            # throttle): the lease is still ours until the trust window ends, so try
            # again before the next phase; a network blip must not cost the minute.
            try:
                self._held = self.leases.renew(self._held, self._now_ms(), self.config.lease_terms)
            except errors.Unavailable as exc:
                logger.warning(
                    "lease renewal unanswered",
                    extra={"action": "ticker.renew_failed", "error": str(exc)},
                )
                self.metrics.add_metric("LeaseRenewalsFailed", "Count", 1)
                return
            self._trust(now)

    def _guarded(self, write: Callable[[], T]) -> Callable[[], T]:
        """A write that is issued only while the lease is trusted (checked at the moment
        it starts, on whichever pool thread runs it)."""

        def guarded() -> T:
            if self.use_lease and (
                self._held is None or self.clock.monotonic() >= self._trusted_until
            ):
                raise errors.LeaseLost("lease no longer trusted")
            return write()

        return guarded

    def _now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)

    # --- one pass ----------------------------------------------------------------------------

    def tick(self, remaining_ms: Callable[[], int] | None = None) -> TickReport:
        """One pass over this group's shards, up to now + lookahead, in bounded rounds.

        Stops early (``drained`` False) when the invocation's time or the pass's own
        length runs out; the next pass starts again from the top of the index.
        """
        report = TickReport()
        started = self.clock.monotonic()
        until = self.clock.now() + timedelta(seconds=self.config.lookahead_seconds)
        cursors: dict[int, str | None] = dict.fromkeys(self.config.my_shards)
        frontier: dict[int, datetime] = {}  # each shard's last fire time read this pass
        while cursors:
            if self.clock.monotonic() - started >= self.config.pass_seconds:
                report.drained = False
                break
            if not self._room_for_a_round(remaining_ms):
                report.drained = False
                report.out_of_time = True
                break
            round_started = self.clock.monotonic()
            read_before = report.due_read
            self._round(cursors, frontier, until, report)
            report.rounds += 1
            took = self.clock.monotonic() - round_started
            self._slowest_round = max(self._slowest_round, took)
            self._size_rounds(report.due_read - read_before, took)
        self._kept_up = report.drained and (
            self.clock.monotonic() - started < self.config.tick_seconds
        )
        self._emit(report)
        return report

    def _size_rounds(self, entries: int, took: float) -> None:
        """The next round's size from this one's pace: at most double, and no more than
        fits in ``round_seconds`` (a slow call, a slow CPU, throttling: it shrinks)."""
        config = self.config
        if entries < self._round_entries // 2 or took <= 0:
            return  # a short round (the index ran dry) says nothing about pace
        fits = int(config.round_seconds * entries / took)
        self._round_entries = max(
            config.round_entries_min,
            min(config.round_entries_max, 2 * self._round_entries, fits),
        )

    def _room_for_a_round(self, remaining_ms: Callable[[], int] | None) -> bool:
        if remaining_ms is None:
            return True
        # A round must end before the invocation does: keep room for the slowest so far.
        spare_ms = remaining_ms() - self.config.stop_before_end_ms
        return spare_ms > 1.5 * self._slowest_round * 1000

    def _round(
        self,
        cursors: dict[int, str | None],
        frontier: dict[int, datetime],
        until: datetime,
        report: TickReport,
    ) -> None:
        self.keep_lease()
        if report.rounds == 0 and self._kept_up:
            # While the ticker keeps up, a pass's first round reads a page of every shard,
            # the round's size shared out: a steady tick is then one round, its sends held
            # together to the send phase (see TickerConfig), where rounds of a shard or two
            # each sent most of a tick's fires after it. (A round's size grows while rounds
            # fill up and fit in round_seconds, so a steady tick's pages soon hold what is
            # due.)
            page_size = max(1, math.ceil(self._round_entries / len(cursors)))
            shards = sorted(cursors)
        else:
            # Pages of at least MIN_PAGE entries (a Query costs the same for 2 entries as
            # for 50), from as many shards as the round's size takes: those whose stream is
            # furthest behind in fire time, so a pass goes earliest first across shards too.
            page_size = max(MIN_PAGE, math.ceil(self._round_entries / len(cursors)))
            count = max(1, math.ceil(self._round_entries / page_size))
            shards = sorted(cursors, key=lambda s: (frontier.get(s, _DAWN), s))[:count]
        pages = self._all(
            [
                functools.partial(
                    self.schedules.due, s, until=until, limit=page_size, cursor=cursors[s]
                )
                for s in shards
            ]
        )
        entries: list[ports.DueEntry] = []
        for shard, page in zip(shards, pages, strict=True):
            entries += page.items
            if page.cursor is None:
                del cursors[shard]
            else:
                cursors[shard] = page.cursor
                frontier[shard] = page.items[-1].next_fire if page.items else until
        now = self.clock.now()
        report.due_read += len(entries)
        report.backlog += sum(1 for e in entries if e.next_fire <= now)
        if not entries:
            return
        pickups = self._pick_up(entries, now, report)
        if not pickups:
            return
        self._send(pickups, now, report)
        self._record_held(pickups, now, report)
        advanced = self._advance(pickups, now, report)
        self._record_skips(advanced, now, report)

    def _pick_up(
        self, entries: list[ports.DueEntry], now: datetime, report: TickReport
    ) -> list[_Pickup]:
        keys = [(e.tenant_id, e.schedule_id) for e in entries]
        chunks = [keys[i : i + BATCH_GET_MAX] for i in range(0, len(keys), BATCH_GET_MAX)]
        found: dict[tuple[str, str], model.Schedule] = {}
        for chunk in self._all([functools.partial(self.schedules.get_many, c) for c in chunks]):
            found.update({(s.tenant_id, s.schedule_id): s for s in chunk})
        pickups: list[_Pickup] = []
        for entry in entries:
            item = found.get((entry.tenant_id, entry.schedule_id))
            if item is None or item.next_fire != entry.next_fire:
                # The index lags the table (it is eventually consistent), or the schedule
                # was changed, paused or deleted since: nothing to do.
                report.stale += 1
                continue
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
            pickups.append(_Pickup(item, plan))
        return pickups

    def _record_held(self, pickups: list[_Pickup], now: datetime, report: TickReport) -> None:
        """Rows for a range of skipped fires an earlier advance held on the schedule and
        whose rows were never confirmed (that tick died, or lost its lease, in between),
        written before this round's advance replaces the range. A schedule whose rows
        cannot be written now is held back, its range kept."""
        held = [p for p in pickups if p.item.skipped is not None]
        if not held:
            return
        reports = [dispatch.DispatchReport() for _ in held]
        outcomes = self._outcomes(
            [
                self._guarded(
                    functools.partial(
                        _retried,
                        functools.partial(
                            dispatch.record_range,
                            p.item,
                            now=now,
                            occurrences=self.occurrences,
                            report=r,
                        ),
                    )
                )
                for p, r in zip(held, reports, strict=True)
            ]
        )
        failed = []
        for pickup, outcome, part in zip(held, outcomes, reports, strict=True):
            report.dispatched.add(part)
            if isinstance(outcome, errors.Unavailable):
                failed.append(pickup)
        if failed:
            report.held_back += len(failed)
            pickups[:] = [p for p in pickups if p not in failed]

    def _record_skips(self, pickups: list[_Pickup], now: datetime, report: TickReport) -> None:
        """Rows for the fires a misfire plan skipped (rare: after an outage or a resume),
        then the range the advance held on the schedule is dropped.

        The advance wrote the range on the schedule in the same conditional write that
        moved past those fires: that is their durable record. So the rows come only after
        it, which proves this ticker's view was current (a stale ticker, whose advance is
        refused, must not mark as skipped a fire another ticker sent), and a crash or a
        lost lease in between loses nothing: the range stays on the schedule, the history
        shows it, and the next pickup writes its rows before moving on.
        """
        skipping = [p for p in pickups if p.plan.skipped is not None]
        if not skipping:
            return
        reports = [dispatch.DispatchReport() for _ in skipping]
        outcomes = self._outcomes(
            [
                self._guarded(functools.partial(self._write_skips, p, now=now, report=r))
                for p, r in zip(skipping, reports, strict=True)
            ]
        )
        for outcome, part in zip(outcomes, reports, strict=True):
            report.dispatched.add(part)
            if isinstance(outcome, errors.Unavailable):
                logger.warning(
                    "skipped fires' rows deferred",
                    extra={"action": "ticker.skips_deferred", "error": str(outcome)},
                )
                self.metrics.add_metric("SkipRowsDeferred", "Count", 1)

    def _write_skips(
        self, pickup: _Pickup, *, now: datetime, report: dispatch.DispatchReport
    ) -> None:
        plan, item = pickup.plan, pickup.item
        assert plan.skipped is not None
        _retried(
            functools.partial(
                dispatch.record_skips,
                item,
                plan.skips,
                plan.summary,
                now=now,
                occurrences=self.occurrences,
                report=report,
            )
        )
        _retried(
            functools.partial(
                dispatch.record_excluded,
                item,
                plan.excluded,
                now=now,
                occurrences=self.occurrences,
                report=report,
            )
        )
        # The rows are in: the range need not be held any longer. (Unanswered, it stays,
        # and the next pickup finds its rows there at the cost of a conditional put.)
        _retried(
            self._guarded(
                functools.partial(
                    self.schedules.clear_skipped, item.tenant_id, item.schedule_id, plan.skipped
                )
            )
        )

    def _send(self, pickups: list[_Pickup], now: datetime, report: TickReport) -> None:
        pending: list[dispatch.Outbound] = []
        fire_times: dict[str, datetime] = {}
        sending_at = self._hold_until_send_phase(pickups, now)
        self._forget_seconds_before(now)
        for pickup in pickups:
            for fire_time in pickup.plan.fires:
                lead = self._window_lead(pickup.item)
                burst = self._burst(pickup.item, fire_time)
                if burst is not None:
                    lead += timedelta(seconds=self.config.burst_lead_seconds)
                out = dispatch.outbound(pickup.item, fire_time, sending_at, lead=lead, queue=burst)
                pickup.keys.append(out.key)
                pending.append(out)
                fire_times[out.key] = fire_time
                if fire_time <= now:
                    report.lags_ms.append((now - fire_time) / _MS)
        if not pending:
            return
        self.keep_lease()
        guarded = _GuardedQueue(self.queue, self._guarded)
        sending = self.clock.monotonic()
        failed = dispatch.send_batches(
            guarded, pending, report.dispatched, self.parallel, self.clock
        )
        self._send_span = self.clock.monotonic() - sending
        if guarded.lease_lost:
            raise errors.LeaseLost("lease no longer trusted")
        sent_at = self.clock.now()
        report.enqueue_lags_ms += [
            max(0.0, (sent_at - fire_time) / _MS)
            for key, fire_time in fire_times.items()
            if key not in failed
        ]
        if failed:
            kept = [p for p in pickups if not failed.intersection(p.keys)]
            report.held_back += len(pickups) - len(kept)
            pickups[:] = kept

    def _window_lead(self, item: model.Schedule) -> timedelta:
        """How much earlier than its time a fire of ``item``'s class is visible, for its
        batch to be gathered before then (see TickerConfig.batching_window_seconds)."""
        if item.job_class not in self.config.held_classes:
            return timedelta(0)
        return timedelta(seconds=self.config.batching_window_seconds)

    def _burst(self, item: model.Schedule, fire_time: datetime) -> str | None:
        """The burst queue this fire goes to, visible the burst lead early, or None: its
        class has none, or its second is not (yet) a burst's (see
        TickerConfig.burst_lead_seconds)."""
        config = self.config
        queue = config.burst_queues.get(item.job_class)
        if queue is None or not config.burst_lead_seconds:
            return None
        second = math.floor(fire_time.timestamp())
        sent = self._sent_per_second.get(second, 0) + 1
        self._sent_per_second[second] = sent
        return queue if sent > config.dense_per_group else None

    def _forget_seconds_before(self, now: datetime) -> None:
        # Seconds gone by are sent and done: the count is for those still ahead.
        if len(self._sent_per_second) > 1_000:
            past = math.floor(now.timestamp())
            self._sent_per_second = {s: n for s, n in self._sent_per_second.items() if s >= past}

    def _hold_until_send_phase(self, pickups: list[_Pickup], now: datetime) -> datetime:
        """Wait until ``send_phase`` into the second, less the last round's send span,
        when this round is done reading between ``tick_phase`` and then and none of its
        fires is due before that moment and its send's way to SQS (see TickerConfig): the
        clock then, or ``now``."""
        into = round(now.microsecond / 1_000_000, 3)  # to the ms: a tick lands on its phase
        config = self.config
        # Sends take a while (a second's worth of batches, each its client CPU): the last
        # of them must still go out before the phase, so the hold ends that much earlier.
        phase = config.send_phase - self._send_span
        if not config.tick_phase <= into < phase:
            return now
        hold = phase - into
        earliest = min(
            (
                dispatch.deliver_time(p.item, f) - self._window_lead(p.item)
                for p in pickups
                for f in p.plan.fires
            ),
            default=None,
        )
        if earliest is None or earliest < now + timedelta(seconds=hold) + dispatch.IN_FLIGHT:
            return now
        self.clock.sleep(hold)
        return self.clock.now()

    def _advance(self, pickups: list[_Pickup], now: datetime, report: TickReport) -> list[_Pickup]:
        """Move each schedule past what it sent; the pickups whose advance went through."""
        self.keep_lease()
        calls = []
        for pickup in pickups:
            item = pickup.item
            assert item.next_fire is not None
            calls.append(
                self._guarded(
                    functools.partial(
                        self.schedules.advance,
                        item.tenant_id,
                        item.schedule_id,
                        expected_next_fire=item.next_fire,
                        expected_version=item.version,
                        next_fire=pickup.plan.next_fire,
                        now=now,
                        skipped=pickup.plan.skipped,
                    )
                )
            )
        done: list[_Pickup] = []
        for pickup, outcome in zip(pickups, self._outcomes(calls), strict=True):
            if isinstance(outcome, errors.Unavailable):
                report.held_back += 1
            elif outcome:
                report.advanced += 1
                done.append(pickup)
            else:
                report.conflicts += 1
        return done

    # --- plumbing ------------------------------------------------------------------------------

    def _all(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        """Run reads side by side; any failure fails the round (nothing was written)."""
        results = self.parallel.run(calls)
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results  # type: ignore[return-value]

    def _outcomes(self, calls: Sequence[Callable[[], T]]) -> list[T | Exception]:
        """Run writes side by side. A write that is throttled or fails in transit is that
        schedule's failure alone (retried next pass); a lost lease stops the ticker once
        every write already started has finished; anything else is a bug and raises."""
        results = self.parallel.run(calls)
        lost = False
        for result in results:
            if isinstance(result, errors.LeaseLost):
                lost = True
            elif isinstance(result, Exception) and not isinstance(result, errors.Unavailable):
                raise result
        if lost:
            raise errors.LeaseLost("lease no longer trusted")
        return results

    def _emit(self, report: TickReport) -> None:
        self.metrics.add_metric("Backlog", "Count", report.backlog)
        for lag in report.lags_ms:
            self.metrics.add_metric("ScheduleLag", "Milliseconds", lag)
        for lag in report.enqueue_lags_ms:
            self.metrics.add_metric("EnqueueLag", "Milliseconds", lag)
        if report.dispatched.sent:
            self.metrics.add_metric("Fired", "Count", report.dispatched.sent)
        if report.dispatched.skipped:
            self.metrics.add_metric("Skipped", "Count", report.dispatched.skipped)
        if report.held_back:
            self.metrics.add_metric("HeldBack", "Count", report.held_back)
        if report.due_read:
            logger.info(
                "tick",
                extra={
                    "action": "ticker.tick",
                    "due": report.due_read,
                    "backlog": report.backlog,
                    "sent": report.dispatched.sent,
                    "skipped": report.dispatched.skipped,
                    "conflicts": report.conflicts,
                    "held_back": report.held_back,
                    "rounds": report.rounds,
                },
            )

    def _plan(self, item: model.Schedule, now: datetime) -> _Plan:
        """Which fires of a due schedule to send, which to record as skipped, and where the
        schedule continues."""
        assert item.next_fire is not None
        due = item.next_fire
        fires: list[datetime] = []
        skips: list[dispatch.Skip] = []
        summary = None
        skipped = None
        after = due - timedelta(microseconds=1)
        if due < now - timedelta(seconds=item.misfire.grace_seconds):
            plan = policies.plan_misfires(item.timing, item.misfire, due, now)
            skipped = plan.skipped_range(item.version, at=now)
            if not plan.complete:
                # A long outage, caught up a chunk per pass: the schedule stays due.
                assert plan.resume_after is not None
                following = schedule.next_fire(item.timing, plan.resume_after)
                return _Plan([], [], plan.skipped_summary, following, skipped)
            fires += plan.fire
            skips += [dispatch.Skip(f, policies.MISFIRE_REASON) for f in plan.skipped]
            summary = plan.skipped_summary
            if plan.resume_after is not None:
                after = plan.resume_after

        room = self.config.max_fires_per_pickup - len(fires)
        considered = [after, *fires, *(s.fire_time for s in skips)]
        if summary is not None:
            considered.append(summary.last)
        upcoming, following = schedule.fires_and_next(
            item.timing,
            max(considered),
            until=now + timedelta(seconds=self.config.horizon_seconds),
            limit=max(room, 0),
        )
        # Every missed or skipped fire precedes the upcoming ones, so the fire after the
        # last upcoming one is where the schedule continues.
        planned = _Plan([*fires, *upcoming], skips, summary, following, skipped)
        if not item.timing.excludes_any:
            return planned
        if skipped is None:
            return _with_excluded(item, planned, now)
        # The schedule holds one range, this catch-up's: the fires past it wait for the
        # next pickup, which records the excluded ones among them. (Those inside the
        # catch-up are not fires of the schedule, and it counts none of them.)
        if not upcoming or not schedule.excluded_fires(
            item.timing, max(considered), until=following or upcoming[-1], limit=1
        ):
            return planned
        return replace(planned, fires=fires, next_fire=upcoming[0])


# The most excluded fires one pickup records: about 10 ms of enumerating a per-second
# schedule's fires. An excluded day of one (86,400 fires) is recorded a chunk a pickup,
# each chunk one summary row, the schedule's next fire left on the chunk's end.
EXCLUDED_PER_PICKUP = 1_000


def _with_excluded(item: model.Schedule, plan: _Plan, now: datetime) -> _Plan:
    """The plan with the excluded fires it moves past: their range held by the advance,
    their runs between sent fires to record after it."""
    assert item.next_fire is not None
    if plan.next_fire is not None:
        until = plan.next_fire - timedelta(microseconds=1)
    else:
        until = max(plan.fires, default=item.next_fire)
    excluded = schedule.excluded_fires(
        item.timing,
        item.next_fire - timedelta(microseconds=1),
        until=until,
        limit=EXCLUDED_PER_PICKUP + 1,
    )
    if not excluded:
        return plan
    fires, following = plan.fires, plan.next_fire
    if len(excluded) > EXCLUDED_PER_PICKUP:
        excluded = excluded[:EXCLUDED_PER_PICKUP]
        fires = [f for f in fires if f < excluded[-1]]
        following = schedule.next_fire(item.timing.unexcluded, excluded[-1])
    runs: list[list[datetime]] = [[]]
    sent = iter(fires)
    upcoming_sent = next(sent, None)
    for fire_time in excluded:
        while upcoming_sent is not None and upcoming_sent < fire_time:
            if runs[-1]:
                runs.append([])  # a sent fire ends the run
            upcoming_sent = next(sent, None)
        runs[-1].append(fire_time)
    held = policies.SkippedRange(
        item.version, excluded[0], excluded[-1], len(excluded), reason=exclusions.REASON, at=now
    )
    return replace(
        plan,
        fires=fires,
        next_fire=following,
        skipped=held,
        excluded=tuple(policies.SkippedSummary(len(r), r[0], r[-1]) for r in runs if r),
    )


_MS = timedelta(milliseconds=1)
_DAWN = datetime.min.replace(tzinfo=UTC)


def _retried(write: Callable[[], object]) -> None:
    """A write that must not be redone by a later pass: a few tries before giving up."""
    for attempt in range(SKIP_WRITE_ATTEMPTS):
        try:
            write()
            return
        except errors.Unavailable:
            if attempt == SKIP_WRITE_ATTEMPTS - 1:
                raise


class _GuardedQueue:
    """The work queue, each send checked against the lease as it starts."""

    def __init__(
        self,
        queue: ports.WorkQueue,
        guard: Callable[[Callable[[], list[str]]], Callable[[], list[str]]],
    ) -> None:
        self._queue = queue
        self._guard = guard
        self.lease_lost = False

    def send_batch(self, job_class: str, messages: Sequence[ports.OutboundMessage]) -> list[str]:
        try:
            return self._guard(lambda: self._queue.send_batch(job_class, messages))()
        except errors.LeaseLost:
            self.lease_lost = True
            raise errors.Unavailable("lease no longer trusted") from None
