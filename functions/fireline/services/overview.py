"""The figures of the console's overview: a tenant's last hour, read from its own ledger.

Backlog and in-flight are the tenant's occurrences queued and running (by class); the
lags come from the rows themselves: start lag is a first attempt's start less its fire
time (what a user waiting for the job feels), enqueue lag is the row's creation less its
fire time: a fire's row is created when the ticker sent it (the first delivery writes it
with the message's send time), so this is 0 for a fire sent ahead. Both are bucketed by the
minute of the fire time, p50 and p99 each. Ticker groups are the deployment's: each
group's lease and who holds it.

An operator's key (``deployment=True``) also sees the class queues themselves, every
tenant's messages: one GetQueueAttributes a class.

Reads are bounded: at most MAX_SCHEDULES schedules and MAX_JOBS jobs, each schedule's
last hour at most MAX_ROWS rows, and MAX_DEAD dead letters counted (the figures say when
a bound was met, so a capped count is never shown as exact).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from fireline import ports
from fireline.domain import lease, model, occurrence, workflow
from fireline.services.schedules import ScheduleService

WINDOW = timedelta(hours=1)
MAX_SCHEDULES = 200
MAX_JOBS = 200
MAX_ROWS = 100
MAX_DEAD = 500
PAGE = 100


@dataclass(frozen=True)
class LagPoint:
    minute: datetime
    count: int
    start_p50_ms: float | None
    start_p99_ms: float | None
    enqueue_p50_ms: float | None
    enqueue_p99_ms: float | None


@dataclass(frozen=True)
class TickerGroup:
    group: int
    lease: str
    holder: str | None  # None: no live holder
    token: int | None
    expires_at_ms: int | None


@dataclass(frozen=True)
class Figures:
    tenant_id: str
    now: datetime
    since: datetime
    classes: dict[str, tuple[int, int]]  # class -> (backlog, in flight)
    states: dict[str, int]  # occurrences fired in the window, by state
    lags: list[LagPoint]
    tickers: list[TickerGroup]
    dead_letters: int  # waiting for a redrive, whenever they died
    schedules: int
    capped: bool  # a read bound was met: the counts are at least these
    # dead_letters by what they are of: "schedules", "jobs", "workflow nodes"
    dead_by_source: dict[str, int] = dataclasses.field(default_factory=dict)
    queues: dict[str, ports.QueueLoad] | None = None  # the deployment's; operators' only


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank percentile of ``values`` (None for none)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def lag_series(rows: Iterable[occurrence.Occurrence]) -> list[LagPoint]:
    """p50 and p99 of start and enqueue lag per minute of fire time, oldest first."""
    starts: dict[datetime, list[float]] = defaultdict(list)
    enqueues: dict[datetime, list[float]] = defaultdict(list)
    seen: Counter[datetime] = Counter()
    for row in rows:
        minute = row.fire_time.replace(second=0, microsecond=0)
        seen[minute] += 1
        if row.started_at is not None and row.attempts >= 1:
            starts[minute].append(_ms(row.started_at - row.fire_time))
        if row.created_at is not None:
            enqueues[minute].append(_ms(row.created_at - row.fire_time))
    return [
        LagPoint(
            minute=minute,
            count=seen[minute],
            start_p50_ms=percentile(starts[minute], 50),
            start_p99_ms=percentile(starts[minute], 99),
            enqueue_p50_ms=percentile(enqueues[minute], 50),
            enqueue_p99_ms=percentile(enqueues[minute], 99),
        )
        for minute in sorted(seen)
    ]


def _ms(delta: timedelta) -> float:
    return max(0.0, delta.total_seconds() * 1000)


DEAD_SOURCES = ("schedules", "jobs", "workflow nodes")


def dead_source(schedule_id: str) -> str:
    """What a dead letter is of, by its schedule id."""
    if workflow.parse_node_schedule_id(schedule_id) is not None:
        return "workflow nodes"
    return "jobs" if model.is_job_id(schedule_id) else "schedules"


class Overview:
    def __init__(
        self,
        service: ScheduleService,
        *,
        leases: ports.LeaseStore | None = None,
        ticker_groups: int = 1,
        queues: ports.WorkQueue | None = None,
    ) -> None:
        self.service = service
        self.leases = leases
        self.ticker_groups = ticker_groups
        self.queues = queues

    def figures(self, tenant_id: str, *, deployment: bool = False) -> Figures:
        """The tenant's figures; with ``deployment`` (an operator's key) the class queues'
        counts too, which are every tenant's."""
        now = self.service.clock.now()
        since = now - WINDOW
        rows, schedules, capped = self._rows(tenant_id, since)
        classes = {c: (0, 0) for c in model.JOB_CLASSES}
        states: Counter[str] = Counter()
        for row in rows:
            backlog, in_flight = classes.get(row.job_class, (0, 0))
            if row.state is occurrence.State.QUEUED:
                backlog += 1
            elif row.state is occurrence.State.RUNNING:
                in_flight += 1
            classes[row.job_class] = (backlog, in_flight)
            if row.fire_time <= now:
                states[row.state.value] += 1
        dead_by_source, dead_capped = self._dead_letters(tenant_id)
        fired = [r for r in rows if r.fire_time <= now]
        return Figures(
            tenant_id=tenant_id,
            now=now,
            since=since,
            classes=classes,
            states={s.value: states.get(s.value, 0) for s in occurrence.State},
            lags=lag_series(fired),
            tickers=self._tickers(now),
            dead_letters=sum(dead_by_source.values()),
            dead_by_source=dead_by_source,
            schedules=schedules,
            capped=capped or dead_capped,
            queues=(
                {c: self.queues.load(c) for c in model.JOB_CLASSES}
                if deployment and self.queues is not None
                else None
            ),
        )

    def _rows(
        self, tenant_id: str, since: datetime
    ) -> tuple[list[occurrence.Occurrence], int, bool]:
        """The last hour's rows of the tenant's schedules and jobs (and those queued ahead)."""
        rows: list[occurrence.Occurrence] = []
        capped = False
        ids: list[str] = []
        cursor: str | None = None
        while len(ids) < MAX_SCHEDULES:
            page = self.service.list(tenant_id, limit=PAGE, cursor=cursor)
            ids += [s.schedule_id for s in page.items]
            cursor = page.cursor
            if cursor is None:
                break
        capped = cursor is not None
        for schedule_id in ids[:MAX_SCHEDULES]:
            history = self.service.history(tenant_id, schedule_id, limit=MAX_ROWS, since=since)
            rows += history.items
            capped = capped or history.cursor is not None
        jobs = 0
        cursor = None
        while jobs < MAX_JOBS:
            listed = self.service.list_jobs(tenant_id, limit=PAGE, cursor=cursor)
            jobs += len(listed.items)
            rows += [
                v.occurrence
                for v in listed.items
                if v.occurrence is not None and v.occurrence.fire_time >= since
            ]
            cursor = listed.cursor
            if cursor is None:
                break
        capped = capped or cursor is not None
        return rows, len(ids), capped

    def _dead_letters(self, tenant_id: str) -> tuple[dict[str, int], bool]:
        """The tenant's dead letters counted by source: a node's are apart, since the
        occurrences of the last hour are read from schedules and jobs only."""
        counts = dict.fromkeys(DEAD_SOURCES, 0)
        cursor: str | None = None
        while sum(counts.values()) < MAX_DEAD:
            page = self.service.dead_letters(tenant_id, limit=PAGE, cursor=cursor)
            for row in page.items:
                counts[dead_source(row.schedule_id)] += 1
            cursor = page.cursor
            if cursor is None:
                return counts, False
        return counts, True

    def _tickers(self, now: datetime) -> list[TickerGroup]:
        if self.leases is None:
            return []
        now_ms = int(now.timestamp() * 1000)
        groups = []
        for group in range(self.ticker_groups):
            name = lease.ticker_lease_name(group, self.ticker_groups)
            held = self.leases.get(name)
            live = held is not None and not held.expired(now_ms)
            groups.append(
                TickerGroup(
                    group=group,
                    lease=name,
                    holder=held.owner[:8] if held is not None and live else None,
                    token=held.token if held is not None else None,
                    expires_at_ms=held.expires_at_ms if held is not None else None,
                )
            )
        return groups
