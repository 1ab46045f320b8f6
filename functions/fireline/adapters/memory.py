"""In-memory implementations of every port, shipped in the package.

They are for tests, simulations and benchmarks of our own code (the emulator is a
correctness tool, not a speed substrate). They keep the same conditional-write semantics
as the AWS adapters (tests/contract runs one suite against both) and are thread-safe, so
racing tickers and workers can be simulated. Time comes from an injected Clock.
"""

from __future__ import annotations

import bisect
import builtins
import hashlib
import heapq
import itertools
import json
import math
import random
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import (
    STATUS_CONSTANTS,
    DataRecord,
)

from fireline import ports
from fireline.domain import (
    backfill,
    dag,
    errors,
    lease,
    model,
    occurrence,
    policies,
    quota,
    workflow,
)

SQS_MAX_BATCH = 10
SQS_MAX_BODY_BYTES = 256 * 1024
SQS_MAX_DELAY_SECONDS = 900


class FakeClock:
    """A clock that moves only when told: ``advance`` and ``sleep`` move both readings."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise errors.ValidationError("needs a UTC offset", field="start")
        self._monotonic = 1000.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._monotonic

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            self._monotonic += seconds

    def set_wall(self, moment: datetime) -> None:
        """Jump the wall clock (NTP step, VM resume); the monotonic clock does not jump."""
        with self._lock:
            self._now = moment


class IndexLag:
    """How far an index trails its table, as DynamoDB's global secondary indexes do.

    Each write reaches the index after a delay drawn from a seeded source (0 to
    ``max_seconds`` on ``clock``'s monotonic reading), one item's writes in the order they
    were made, so the index always converges on the table. Reads of the table itself stay
    current. Nothing that decides correctness may trust an index to be current; stores
    built with a lag make any code that does show it. ``settle`` makes every write made so
    far visible (what waiting long enough does).
    """

    def __init__(
        self, clock: ports.Clock | None = None, *, max_seconds: float = 2.0, seed: int = 0
    ) -> None:
        self.clock = clock
        self.max_seconds = max_seconds
        self._rng = random.Random(seed)
        self._writes = itertools.count()
        self._settled_below = 0
        self._lock = threading.Lock()

    def schedule(self) -> tuple[float, int]:
        """When the write being made now reaches the index (inf without a clock: only
        ``settle`` shows it), and its place in the order of writes."""
        with self._lock:
            seq = next(self._writes)
            if self.clock is None:
                return math.inf, seq
            return self.clock.monotonic() + self._rng.uniform(0, self.max_seconds), seq

    def visible(self, at: float, seq: int) -> bool:
        with self._lock:
            if seq < self._settled_below:
                return True
        return self.clock is not None and at <= self.clock.monotonic()

    def settle(self) -> None:
        with self._lock:
            self._settled_below = next(self._writes)


class _Propagation:
    """The writes an index has yet to see, applied in the order they were made once
    visible. (A write is visible once its own delay and every earlier write of its item
    have passed, so each item's writes reach the index in order.)"""

    def __init__(self, lag: IndexLag | None) -> None:
        self.lag = lag
        self._pending: list[tuple[float, int, Callable[[], None]]] = []
        self._last: dict[Any, float] = {}

    def write(self, key: Any, apply: Callable[[], None]) -> None:
        if self.lag is None:
            apply()
            return
        at, seq = self.lag.schedule()
        at = max(at, self._last.get(key, -math.inf))
        self._last[key] = at
        self._pending.append((at, seq, apply))

    def catch_up(self) -> None:
        if self.lag is None or not self._pending:
            return
        lag = self.lag
        ready = [p for p in self._pending if lag.visible(p[0], p[1])]
        if not ready:
            return
        self._pending = [p for p in self._pending if not lag.visible(p[0], p[1])]
        for _, _, apply in ready:  # in the order the writes were made
            apply()


class MemoryQuotaStore:
    """Quota use and overrides; the memory stores take and give back units through
    ``charge`` and ``refund`` under their own lock, as DynamoDB's transactions do."""

    def __init__(self) -> None:
        self._used: dict[str, dict[quota.Quota, int]] = defaultdict(dict)
        self._overrides: dict[str, dict[quota.Quota, int]] = defaultdict(dict)
        self._uploads: dict[str, tuple[str, int]] = {}
        self._holders: dict[tuple[str, int], quota.Holder] = {}
        self._lock = threading.RLock()

    def usage(self, tenant_id: str) -> quota.Usage:
        with self._lock:
            day, count = self._uploads.get(tenant_id, (None, 0))
            return quota.Usage(
                used=dict(self._used[tenant_id]),
                overrides=dict(self._overrides[tenant_id]),
                uploads_day=day,
                uploads=count,
            )

    def set_limit(self, tenant_id: str, name: quota.Quota, limit: int | None) -> None:
        with self._lock:
            if limit is None:
                self._overrides[tenant_id].pop(name, None)
            else:
                self._overrides[tenant_id][name] = quota.check_quota(name, limit)

    def count_upload(self, tenant_id: str, day: str, charge: quota.Charge) -> int:
        with self._lock:
            last_day, count = self._uploads.get(tenant_id, (day, 0))
            count = count if last_day == day else 0
            limit = self._limit(tenant_id, charge)
            if not quota.under(limit, count):
                raise quota.exceeded(charge.quota, limit, count)
            self._uploads[tenant_id] = (day, count + 1)
            return count + 1

    def check(self, tenant_id: str, charge: quota.Charge, count: int = 1) -> None:
        """QuotaExceeded unless ``count`` units are free (call ``charge`` under the same
        lock)."""
        with self._lock:
            used = self._used[tenant_id].get(charge.quota, 0)
            limit = self._limit(tenant_id, charge)
            if not quota.under(limit, used + count - 1):
                raise quota.exceeded(charge.quota, limit, max(0, used), asked=count)

    def charge(self, tenant_id: str, charge: quota.Charge, count: int = 1) -> None:
        with self._lock:
            self.check(tenant_id, charge, count)
            used = self._used[tenant_id].get(charge.quota, 0)
            self._used[tenant_id][charge.quota] = used + count

    def refund(self, tenant_id: str, name: quota.Quota, count: int = 1) -> None:
        with self._lock:
            self._used[tenant_id][name] = self._used[tenant_id].get(name, 0) - count

    # A batch's holders (see fireline.domain.quota.Holder), as the DynamoDB store keeps
    # them: the count and the holders change together, under the lock.

    def hold_jobs(
        self, tenant_id: str, charge: quota.Charge, entries: Sequence[str], created_at: datetime
    ) -> builtins.list[quota.Holder]:
        groups = quota.by_visit(entries, quota.MOST_HOLDERS)
        with self._lock:
            self.charge(tenant_id, charge, sum(len(g) for g in groups.values()))
            made = []
            for visit, jobs in groups.items():
                number = quota.holder_number(visit, 0)
                while (tenant_id, number) in self._holders:
                    number += 1
                holder = quota.Holder(tenant_id, number, frozenset(jobs), created_at)
                self._holders[(tenant_id, number)] = holder
                made.append(holder)
            return made

    def unhold(
        self, tenant_id: str, number: int, entries: Sequence[str], *, version: int | None = None
    ) -> bool:
        gone = frozenset(entries)
        with self._lock:
            holder = self._holders.get((tenant_id, number))
            if holder is None or not gone or not gone <= holder.jobs:
                return False
            if version is not None and holder.version != version:
                return False
            self._holders[(tenant_id, number)] = replace(
                holder, jobs=holder.jobs - gone, version=holder.version + 1
            )
            self.refund(tenant_id, quota.Quota.ACTIVE_JOBS, len(gone))
            return True

    def drop_holder(self, holder: quota.Holder) -> bool:
        with self._lock:
            current = self._holders.get((holder.tenant_id, holder.number))
            if current is None or current.version != holder.version:
                return False
            del self._holders[(holder.tenant_id, holder.number)]
            if current.jobs:
                self.refund(holder.tenant_id, quota.Quota.ACTIVE_JOBS, len(current.jobs))
            return True

    def unhold_jobs(self, holders: Sequence[quota.Holder], entries: Sequence[str]) -> None:
        wanted = set(entries)
        for holder in holders:
            mine = sorted(holder.jobs & wanted)
            if mine:
                self.unhold(holder.tenant_id, holder.number, mine)

    def holders(
        self, tenant_id: str, *, due_by: datetime | None = None
    ) -> builtins.list[quota.Holder]:
        high = quota.holders_due_by(due_by)[1]
        with self._lock:
            return sorted(
                (h for (t, n), h in self._holders.items() if t == tenant_id and n <= high),
                key=lambda h: h.number,
            )

    def _limit(self, tenant_id: str, charge: quota.Charge) -> int:
        return self._overrides[tenant_id].get(charge.quota, charge.default)


class MemoryScheduleStore:
    def __init__(
        self,
        shards: int = model.DEFAULT_SHARDS,
        *,
        lag: IndexLag | None = None,
        quotas: MemoryQuotaStore | None = None,
    ) -> None:
        self.shards = shards
        self.quotas = quotas
        self._items: dict[tuple[str, str], model.Schedule] = {}
        # Per shard, sorted (next_fire, tenant_id, schedule_id): the sparse due index.
        self._index: dict[int, list[tuple[datetime, str, str]]] = defaultdict(list)
        self._propagation = _Propagation(lag)
        self._lock = threading.RLock()
        #: Entries read by ``due`` (the memory twin of a Query's ScannedCount).
        self.index_reads = 0

    def _counted(self) -> MemoryQuotaStore:
        if self.quotas is None:
            raise errors.ValidationError("this deployment counts no quotas", field="quota")
        return self.quotas

    def create(self, item: model.Schedule, *, charge: quota.Charge | None = None) -> None:
        key = (item.tenant_id, item.schedule_id)
        with self._lock:
            if key in self._items:
                raise errors.AlreadyExists(f"schedule {item.schedule_id} exists")
            if charge is not None:
                self._counted().charge(item.tenant_id, charge)
                item = replace(item, quota_held=True)
            self._store(item)

    def create_many(
        self,
        items: Sequence[model.Schedule],
        *,
        charge: quota.Charge | None = None,
        first_new: bool = False,
    ) -> builtins.list[model.Schedule]:
        tenant_id = model.batch_tenant(items)
        if tenant_id is None:
            return []
        with self._lock:
            if first_new and (tenant_id, items[0].schedule_id) in self._items:
                raise errors.AlreadyExists(f"schedule {items[0].schedule_id} exists")
            if charge is not None:
                entries = [model.held_entry(i) for i in items]
                created = model.batch_created(items)
                holders = self._counted().hold_jobs(tenant_id, charge, entries, created)
                placed = {e: h.number for h in holders for e in h.jobs}
                items = [replace(i, held_in=placed[e]) for i, e in zip(items, entries, strict=True)]
            for item in items:  # unconditionally, as a batch write does
                current = self._items.get((item.tenant_id, item.schedule_id))
                if current is not None:
                    self._unindex(current)
                self._store(item)
            return list(items)

    def release(self, tenant_id: str, schedule_id: str, refund: quota.Quota) -> bool:
        return bool(self.release_many(tenant_id, [schedule_id], refund))

    def release_held(self, job: model.Schedule) -> bool:
        if job.held_in is None:
            return False
        return self._counted().unhold(job.tenant_id, job.held_in, [model.held_entry(job)])

    def release_many(
        self, tenant_id: str, schedule_ids: Sequence[str], refund: quota.Quota
    ) -> builtins.list[str]:
        quotas = self._counted()
        released: builtins.list[str] = []
        with self._lock:
            for schedule_id in dict.fromkeys(schedule_ids):
                current = self._items.get((tenant_id, schedule_id))
                if current is None or not current.quota_held:
                    continue
                self._items[(tenant_id, schedule_id)] = replace(current, quota_held=False)
                released.append(schedule_id)
            if released:
                quotas.refund(tenant_id, refund, len(released))
        return released

    def get(
        self, tenant_id: str, schedule_id: str, *, consistent: bool = True
    ) -> model.Schedule | None:
        with self._lock:
            return self._items.get((tenant_id, schedule_id))

    def get_many(
        self, keys: Sequence[tuple[str, str]], *, consistent: bool = True
    ) -> builtins.list[model.Schedule]:
        with self._lock:
            return [self._items[key] for key in dict.fromkeys(keys) if key in self._items]

    def list(
        self, tenant_id: str, *, limit: int, cursor: str | None = None
    ) -> ports.Page[model.Schedule]:
        with self._lock:
            ids = sorted(sid for tid, sid in self._items if tid == tenant_id)
            start = bisect.bisect_right(ids, cursor) if cursor else 0
            chosen = ids[start : start + limit]
            more = start + limit < len(ids)
            return ports.Page(
                [self._items[(tenant_id, sid)] for sid in chosen],
                chosen[-1] if more and chosen else None,
            )

    def replace(self, item: model.Schedule, *, expected_version: int) -> None:
        key = (item.tenant_id, item.schedule_id)
        with self._lock:
            current = self._items.get(key)
            if current is None:
                raise errors.NotFound(f"schedule {item.schedule_id} does not exist")
            if current.version != expected_version:
                raise errors.ConflictError(
                    f"schedule {item.schedule_id} is at version {current.version}, "
                    f"not {expected_version}"
                )
            if current.quota_held != item.quota_held:
                raise errors.ConflictError(
                    f"schedule {item.schedule_id}'s quota unit changed since it was read"
                )
            self._unindex(current)
            self._store(item)

    def delete(
        self, tenant_id: str, schedule_id: str, *, refund: quota.Quota | None = None
    ) -> bool:
        quotas = self._counted() if refund is not None else None
        with self._lock:
            current = self._items.get((tenant_id, schedule_id))
            if current is None or (refund is not None and not current.quota_held):
                return False
            del self._items[(tenant_id, schedule_id)]
            self._unindex(current)
            if quotas is not None and refund is not None:
                quotas.refund(tenant_id, refund)
            return True

    def due(
        self, shard: int, *, until: datetime, limit: int, cursor: str | None = None
    ) -> ports.Page[ports.DueEntry]:
        with self._lock:
            self._propagation.catch_up()
            entries = self._index.get(shard, [])
            start = 0 if cursor is None else bisect.bisect_right(entries, _due_position(cursor))
            end = bisect.bisect_right(entries, (until, "\U0010ffff", "\U0010ffff"))
            chosen = entries[start : min(end, start + limit)]
            self.index_reads += len(chosen)
            more = start + len(chosen) < end and bool(chosen)
            return ports.Page(
                [ports.DueEntry(tid, sid, fire) for fire, tid, sid in chosen],
                json.dumps([chosen[-1][0].isoformat(), *chosen[-1][1:]]) if more else None,
            )

    def advance(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        expected_next_fire: datetime,
        expected_version: int,
        next_fire: datetime | None,
        now: datetime,
        skipped: policies.SkippedRange | None = None,
    ) -> bool:
        with self._lock:
            current = self._items.get((tenant_id, schedule_id))
            # Same condition as the DynamoDB adapter: only the value we read may be moved.
            if (
                current is None
                or current.next_fire != expected_next_fire
                or current.version != expected_version
            ):
                return False
            self._unindex(current)
            self._store(current.advanced(next_fire, now, skipped))
            return True

    def clear_skipped(
        self, tenant_id: str, schedule_id: str, skipped: policies.SkippedRange
    ) -> bool:
        with self._lock:
            current = self._items.get((tenant_id, schedule_id))
            # Same condition as the DynamoDB adapter: a later advance's range stays.
            if current is None or current.skipped != skipped:
                return False
            self._items[(tenant_id, schedule_id)] = replace(current, skipped=None)
            return True

    def _store(self, item: model.Schedule) -> None:
        key = (item.tenant_id, item.schedule_id)
        self._items[key] = item
        if item.next_fire is not None:
            entries = self._index[item.shard(self.shards)]
            entry = (item.next_fire, item.tenant_id, item.schedule_id)
            self._propagation.write(key, lambda: bisect.insort(entries, entry))

    def _unindex(self, item: model.Schedule) -> None:
        if item.next_fire is None:
            return
        entries = self._index[item.shard(self.shards)]
        entry = (item.next_fire, item.tenant_id, item.schedule_id)

        def remove() -> None:
            at = bisect.bisect_left(entries, entry)
            if at < len(entries) and entries[at] == entry:
                del entries[at]

        self._propagation.write((item.tenant_id, item.schedule_id), remove)


def _replaced(item: occurrence.Occurrence, **changes: Any) -> occurrence.Occurrence:
    """``dataclasses.replace`` for a stored row, without its walk over every field on
    each call (several times the cost: a claim and a completion per fire). A row is a
    frozen dataclass without ``__post_init__`` or init-only fields, so a copy of its
    attributes with ``changes`` over them is the same value; an unknown name is refused
    as replace refuses it."""
    fresh = object.__new__(type(item))
    attributes = fresh.__dict__
    attributes.update(item.__dict__)
    if not changes.keys() <= attributes.keys():
        raise TypeError(
            f"not fields of {type(item).__name__}: {changes.keys() - attributes.keys()}"
        )
    attributes.update(changes)
    return fresh


def _due_position(cursor: str) -> tuple[datetime, str, str]:
    fire, tenant_id, schedule_id = json.loads(cursor)
    return datetime.fromisoformat(fire), tenant_id, schedule_id


class MemoryOccurrenceStore:
    def __init__(self) -> None:
        self._items: dict[str, occurrence.Occurrence] = {}
        # Per schedule, sorted (fire_time, version, key): the history, oldest first.
        self._by_schedule: dict[tuple[str, str], list[tuple[datetime, int, str]]] = defaultdict(
            list
        )
        self._lock = threading.RLock()
        #: Puts refused because the key existed (duplicates the key caught).
        self.duplicates = 0
        # Rows written before their message was sent, by key: since when (DynamoDB's
        # sparse awaiting_send index). A transition's put drops the listing, as DynamoDB's
        # whole-item put does; a claim's and a settle's updates keep it.
        self._awaiting_send: dict[str, datetime] = {}

    def put_new(self, item: occurrence.Occurrence, *, awaiting_send: bool = False) -> bool:
        with self._lock:
            if item.key in self._items:
                self.duplicates += 1
                return False
            if awaiting_send:
                assert item.created_at is not None
                self._awaiting_send[item.key] = item.created_at
            self._items[item.key] = item
            bisect.insort(
                self._by_schedule[(item.tenant_id, item.schedule_id)],
                (item.fire_time, item.version, item.key),
            )
            return True

    def sent(self, key: str) -> None:
        with self._lock:
            self._awaiting_send.pop(key, None)

    def awaiting_send(self, *, before: datetime, limit: int) -> list[ports.AwaitingSend]:
        with self._lock:
            listed = sorted(
                (since, key) for key, since in self._awaiting_send.items() if since < before
            )
            return [ports.AwaitingSend(key=key, since=since) for since, key in listed[:limit]]

    def settle_unsent(self, key: str, *, since: datetime, now: datetime) -> bool:
        with self._lock:
            row = self._items.get(key)
            if (
                row is None
                or row.state is not occurrence.State.QUEUED
                or self._awaiting_send.get(key) != since
            ):
                return False
            self._items[key] = replace(
                row,
                state=occurrence.State.SKIPPED,
                exit_reason=occurrence.NOT_SENT,
                finished_at=now,
            )
            del self._awaiting_send[key]
            return True

    def get(self, key: str, *, consistent: bool = True) -> occurrence.Occurrence | None:
        with self._lock:
            return self._items.get(key)

    def get_many(
        self, keys: Sequence[str], *, consistent: bool = True
    ) -> dict[str, occurrence.Occurrence]:
        with self._lock:
            return {k: self._items[k] for k in keys if k in self._items}

    def history(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        limit: int,
        cursor: str | None = None,
        only: ports.OccurrenceFilter | None = None,
    ) -> ports.Page[occurrence.Occurrence]:
        with self._lock:
            newest_first = [
                entry
                for entry in reversed(self._by_schedule.get((tenant_id, schedule_id), []))
                if only is None or only.keeps(self._items[entry[2]])
            ]
            start = 0
            if cursor is not None:
                keys = [key for _, _, key in newest_first]
                start = keys.index(cursor) + 1 if cursor in keys else len(keys)
            chosen = newest_first[start : start + limit]
            more = start + limit < len(newest_first)
            return ports.Page(
                [self._items[key] for _, _, key in chosen],
                chosen[-1][2] if more and chosen else None,
            )

    def open_rows(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        since: datetime,
        limit: int,
        cursor: str | None = None,
    ) -> ports.Page[occurrence.Occurrence]:
        with self._lock:
            oldest_first = self._by_schedule.get((tenant_id, schedule_id), [])
            start = bisect.bisect_left(oldest_first, (since, 0, ""))
            if cursor is not None:
                keys = [key for _, _, key in oldest_first]
                start = max(start, keys.index(cursor) + 1 if cursor in keys else len(keys))
            chosen = oldest_first[start : start + limit]
            more = start + limit < len(oldest_first)
            return ports.Page(
                [
                    self._items[key]
                    for _, _, key in chosen
                    if self._items[key].state in occurrence.CLAIMABLE
                ],
                chosen[-1][2] if more and chosen else None,
            )

    def dead_letters(
        self, tenant_id: str, *, limit: int, cursor: str | None = None
    ) -> ports.Page[occurrence.Occurrence]:
        with self._lock:
            dead = sorted(
                (
                    o
                    for o in self._items.values()
                    if o.tenant_id == tenant_id and o.state is occurrence.State.DEAD
                ),
                key=lambda o: (o.fire_time, o.version, o.key),
                reverse=True,
            )
            keys = [o.key for o in dead]
            start = keys.index(cursor) + 1 if cursor in keys else 0 if cursor is None else len(keys)
            chosen = dead[start : start + limit]
            more = start + limit < len(dead)
            return ports.Page(chosen, chosen[-1].key if more and chosen else None)

    def claim(
        self,
        key: str,
        *,
        now: datetime,
        until: datetime,
        intent: occurrence.Occurrence | None = None,
    ) -> tuple[bool, occurrence.Occurrence | None]:
        with self._lock:
            current = self._items.get(key)
            if current is None and intent is not None and intent.key == key:
                # No row yet: the claim writes it, running, in one put (as DynamoDB's
                # conditional put on an absent key does), from the queued row it stands for.
                claimed = _replaced(
                    intent,
                    state=occurrence.State.RUNNING,
                    attempts=intent.attempts + 1,
                    created_at=intent.created_at or now,
                    started_at=now,
                    finished_at=None,
                    exit_reason=None,
                    in_progress_until=until,
                )
                self.put_new(claimed)
                return True, claimed
            if current is None:
                return False, None
            abandoned = (
                current.state is occurrence.State.RUNNING
                and current.in_progress_until is not None
                and current.in_progress_until < now
            )
            if current.state not in occurrence.CLAIMABLE and not abandoned:
                return False, current
            claimed = _replaced(
                current,
                state=occurrence.State.RUNNING,
                attempts=current.attempts + 1,
                started_at=now,
                finished_at=None,
                exit_reason=None,
                in_progress_until=until,
            )
            self._items[key] = claimed
            return True, claimed

    def annotate_running(
        self,
        key: str,
        *,
        execution: str | None = None,
        task_token: str | None = None,
        attempts: int | None = None,
        progress: dict[str, Any] | None = None,
        in_progress_until: datetime | None = None,
    ) -> bool:
        changes: dict[str, Any] = {
            "execution": execution,
            "task_token": task_token,
            "attempts": attempts,
            "progress": progress,
            "in_progress_until": in_progress_until,
        }
        with self._lock:
            current = self._items.get(key)
            if current is None or current.state is not occurrence.State.RUNNING:
                return False
            self._items[key] = replace(
                current, **{k: v for k, v in changes.items() if v is not None}
            )
            return True

    def settle(
        self,
        key: str,
        *,
        state: occurrence.State,
        now: datetime,
        exit_reason: str,
        result: dict[str, Any] | None = None,
        attempt: int | None = None,
    ) -> bool:
        with self._lock:
            current = self._items.get(key)
            if current is None or current.state is not occurrence.State.RUNNING:
                return False
            if attempt is not None and current.attempts != attempt:
                return False
            occurrence.check_transition(current.state, state)
            self._items[key] = _replaced(
                current,
                state=state,
                finished_at=now,
                exit_reason=exit_reason,
                result=result,
                in_progress_until=None,
            )
            return True

    def transition(self, item: occurrence.Occurrence, *, expected_state: occurrence.State) -> bool:
        with self._lock:
            current = self._items.get(item.key)
            if current is None:
                raise errors.NotFound(f"occurrence {item.key} does not exist")
            if current.state is not expected_state:
                return False
            occurrence.check_transition(current.state, item.state)
            self._items[item.key] = item
            self._awaiting_send.pop(item.key, None)
            return True


@dataclass
class _Message:
    message_id: str
    body: str
    visible_at: datetime
    receive_count: int = 0
    receipt: str | None = None
    seq: int = 0  # order of arrival; ties in visibility go first come, first served


@dataclass(frozen=True)
class QueueConfig:
    visibility_timeout: int = 30
    max_receive_count: int = 5  # the redrive policy: then the dead-letter queue


class _Queue:
    """One queue: messages by id, and a heap of (visible at, arrival, id) to find the
    visible ones without walking the whole queue (simulations hold hundreds of
    thousands of delayed messages). Heap entries whose message was deleted or whose
    visibility changed since are skipped when they come up."""

    def __init__(self) -> None:
        self.messages: dict[str, _Message] = {}
        self.heap: list[tuple[datetime, int, str]] = []
        self.dead: list[_Message] = []

    def push(self, message: _Message) -> None:
        heapq.heappush(self.heap, (message.visible_at, message.seq, message.message_id))


class MemoryWorkQueue:
    """SQS semantics that matter to us: delay, visibility timeout, receive count, redrive."""

    def __init__(self, clock: ports.Clock, configs: dict[str, QueueConfig] | None = None) -> None:
        self._clock = clock
        self._configs = configs or {
            name: QueueConfig()
            for name in (*model.JOB_CLASSES, *model.BURST_QUEUES.values(), workflow.CONTROL_QUEUE)
        }
        self._queues: dict[str, _Queue] = {name: _Queue() for name in self._configs}
        self._receipts: dict[str, tuple[str, str]] = {}  # receipt -> (queue, message id)
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        #: Requests made, by name, so cost per job can be counted on the memory path too.
        self.requests: dict[str, int] = defaultdict(int)

    def send_batch(self, job_class: str, messages: Sequence[ports.OutboundMessage]) -> list[str]:
        self._check_class(job_class)
        if not 1 <= len(messages) <= SQS_MAX_BATCH:
            raise errors.ValidationError(
                f"a batch holds 1 to {SQS_MAX_BATCH} messages", field="messages"
            )
        # Check every entry before enqueuing any: a refused batch must change nothing, or the
        # caller's resend would duplicate the entries that went in before the bad one.
        bodies = []
        for message in messages:
            body = json.dumps(message.body, separators=(",", ":"))
            if len(body.encode()) > SQS_MAX_BODY_BYTES:
                raise errors.ValidationError("exceeds 256 KiB", field="body")
            if not 0 <= message.delay_seconds <= SQS_MAX_DELAY_SECONDS:
                raise errors.ValidationError("must be 0 to 900", field="delay_seconds")
            bodies.append(body)
        now = self._clock.now()
        with self._lock:
            self.requests["SendMessageBatch"] += 1
            queue = self._queues[job_class]
            for message, body in zip(messages, bodies, strict=True):
                number = next(self._ids)
                stored = _Message(
                    message_id=f"m-{number}",
                    body=body,
                    visible_at=now + timedelta(seconds=message.delay_seconds),
                    seq=number,
                )
                queue.messages[stored.message_id] = stored
                queue.push(stored)
        return []

    def receive(
        self, job_class: str, *, max_messages: int = 10, visibility_timeout: int | None = None
    ) -> list[ports.ReceivedMessage]:
        self._check_class(job_class)
        config = self._configs[job_class]
        timeout = config.visibility_timeout if visibility_timeout is None else visibility_timeout
        now = self._clock.now()
        received: list[ports.ReceivedMessage] = []
        taken: list[_Message] = []
        with self._lock:
            self.requests["ReceiveMessage"] += 1
            queue = self._queues[job_class]
            while queue.heap and len(received) < max_messages and queue.heap[0][0] <= now:
                visible_at, _, message_id = heapq.heappop(queue.heap)
                message = queue.messages.get(message_id)
                if message is None or message.visible_at != visible_at:
                    continue  # deleted, or its visibility moved since this entry
                if message.receive_count >= config.max_receive_count:
                    # SQS moves a message past maxReceiveCount on the receive that would
                    # exceed it, not when the last attempt failed.
                    del queue.messages[message_id]
                    queue.dead.append(message)
                    continue
                message.receive_count += 1
                if message.receipt is not None:
                    self._receipts.pop(message.receipt, None)
                message.receipt = f"r-{next(self._ids)}"
                self._receipts[message.receipt] = (job_class, message_id)
                message.visible_at = now + timedelta(seconds=timeout)
                taken.append(message)
                received.append(self._received(message))
            for message in taken:  # back on the heap only now: never twice in one receive
                queue.push(message)
        return received

    def delete(self, job_class: str, receipt: str) -> None:
        with self._lock:
            self.requests["DeleteMessage"] += 1
            found = self._receipts.get(receipt)
            if found is None or found[0] != job_class:
                return
            del self._receipts[receipt]
            self._queues[job_class].messages.pop(found[1], None)

    def delete_batch(self, job_class: str, receipts: Sequence[str]) -> None:
        """What an event source mapping does with a batch's successes: one request."""
        with self._lock:
            for receipt in receipts:
                self.delete(job_class, receipt)
            self.requests["DeleteMessage"] -= len(receipts)
            self.requests["DeleteMessageBatch"] += 1

    def next_visible_at(self, job_class: str) -> datetime | None:
        """When the next message becomes visible (what long polling waits for)."""
        with self._lock:
            queue = self._queues[job_class]
            while queue.heap:
                visible_at, _, message_id = queue.heap[0]
                message = queue.messages.get(message_id)
                if message is not None and message.visible_at == visible_at:
                    return visible_at
                heapq.heappop(queue.heap)  # a stale entry
            return None

    def change_visibility(self, job_class: str, receipt: str, seconds: int) -> None:
        now = self._clock.now()
        with self._lock:
            self.requests["ChangeMessageVisibility"] += 1
            found = self._receipts.get(receipt)
            queue = self._queues[job_class]
            message = queue.messages.get(found[1]) if found and found[0] == job_class else None
            if message is not None:
                message.visible_at = now + timedelta(seconds=seconds)
                queue.push(message)
                return
        raise errors.NotFound("the receipt is stale: the message was received again or deleted")

    def dead_letters(
        self, job_class: str, *, max_messages: int = 10
    ) -> list[ports.ReceivedMessage]:
        with self._lock:
            return [self._received(m) for m in self._queues[job_class].dead[:max_messages]]

    def depth(self, job_class: str) -> int:
        with self._lock:
            return len(self._queues[job_class].messages)

    def load(self, job_class: str) -> ports.QueueLoad:
        self._check_class(job_class)
        now = self._clock.now()
        with self._lock:
            messages = self._queues[job_class].messages.values()
            waiting = [m for m in messages if m.visible_at > now]
            taken = sum(1 for m in waiting if m.receive_count > 0)
            return ports.QueueLoad(
                ready=len(messages) - len(waiting), delayed=len(waiting) - taken, in_flight=taken
            )

    def _check_class(self, job_class: str) -> None:
        if job_class not in self._configs:
            raise errors.ValidationError(f"no queue for class {job_class!r}", field="job_class")

    @staticmethod
    def _received(message: _Message) -> ports.ReceivedMessage:
        return ports.ReceivedMessage(
            message_id=message.message_id,
            receipt=message.receipt or "",
            body=json.loads(message.body),
            receive_count=message.receive_count,
        )


class MemoryLeaseStore:
    def __init__(self) -> None:
        self._leases: dict[str, lease.Lease] = {}
        self._lock = threading.Lock()

    def acquire(
        self, name: str, owner: str, now_ms: int, terms: lease.LeaseTerms
    ) -> lease.Lease | None:
        with self._lock:
            current = self._leases.get(name)
            if not lease.can_acquire(current, now_ms):
                return None
            taken = lease.acquired(current, name, owner, now_ms, terms)
            self._leases[name] = taken
            return taken

    def renew(self, held: lease.Lease, now_ms: int, terms: lease.LeaseTerms) -> lease.Lease:
        with self._lock:
            renewed = lease.renewed(
                self._leases.get(held.name), held.owner, held.token, now_ms, terms
            )
            self._leases[held.name] = renewed
            return renewed

    def release(self, held: lease.Lease) -> None:
        with self._lock:
            current = self._leases.get(held.name)
            if current is not None and current.owner == held.owner and current.token == held.token:
                # Keep the token so the next acquisition still increments past it.
                self._leases[held.name] = replace(current, expires_at_ms=0)

    def get(self, name: str) -> lease.Lease | None:
        with self._lock:
            return self._leases.get(name)


class RecordingMetrics:
    """Keeps every metric data point, for tests and the local status screen."""

    def __init__(self) -> None:
        self.points: list[tuple[str, str, float]] = []
        self._lock = threading.Lock()

    def add_metric(self, name: str, unit: str, value: float) -> None:
        with self._lock:
            self.points.append((name, str(unit), float(value)))

    def values(self, name: str) -> builtins.list[float]:
        with self._lock:
            return [v for n, _, v in self.points if n == name]

    def total(self, name: str) -> float:
        return sum(self.values(name))


class MemorySegments:
    """Keeps every trace segment emitted (the SegmentEmitter port), for tests."""

    def __init__(self) -> None:
        self.documents: builtins.list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def emit(self, document: dict[str, Any]) -> None:
        with self._lock:
            self.documents.append(document)

    def of_trace(self, trace_id: str) -> builtins.list[dict[str, Any]]:
        with self._lock:
            return [d for d in self.documents if d.get("trace_id") == trace_id]


class MemoryIdempotencyStore(BasePersistenceLayer):
    """Powertools idempotency records in a dict, with the DynamoDB layer's put condition:
    a record can be taken when absent, expired, or in progress past its in-progress expiry."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._records: dict[str, DataRecord] = {}
        self._lock = threading.Lock()

    def _get_record(self, idempotency_key: str) -> DataRecord:
        with self._lock:
            record = self._records.get(idempotency_key)
        if record is None:
            raise IdempotencyItemNotFoundError
        return record

    def _put_record(self, data_record: DataRecord) -> None:
        now = datetime.now(UTC)
        with self._lock:
            old = self._records.get(data_record.idempotency_key)
            if old is not None:
                expired = (
                    old.expiry_timestamp is not None and old.expiry_timestamp < now.timestamp()
                )
                stuck = (
                    old.status == STATUS_CONSTANTS["INPROGRESS"]
                    and old.in_progress_expiry_timestamp is not None
                    and old.in_progress_expiry_timestamp < now.timestamp() * 1000
                )
                if not (expired or stuck):
                    self._validate_payload(data_payload=data_record, stored_data_record=old)
                    raise IdempotencyItemAlreadyExistsError(old_data_record=old)
            self._records[data_record.idempotency_key] = data_record

    def _update_record(self, data_record: DataRecord) -> None:
        with self._lock:
            self._records[data_record.idempotency_key] = data_record

    def _delete_record(self, data_record: DataRecord) -> None:
        with self._lock:
            self._records.pop(data_record.idempotency_key, None)


# A pool's member gone this long is forgotten (as DynamoSlotStore removes it).
POOL_FORGET_MS = 3_600_000


class MemorySlotStore:
    def __init__(self) -> None:
        self._slots: dict[str, dict[int, quota.Slot]] = defaultdict(dict)
        self._limits: dict[str, int] = {}
        # The deployment's register of overrides, as DynamoSlotStore keeps it: absent
        # (None) until a change or a build, and complete only once built.
        self._register: dict[str, int] | None = None
        self._complete = False
        self._pools: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    def held(
        self, tenant_id: str, *, consistent: bool = True
    ) -> tuple[builtins.list[quota.Slot], int | None]:
        with self._lock:
            return list(self._slots[tenant_id].values()), self._limits.get(tenant_id)

    def take(
        self,
        tenant_id: str,
        number: int,
        holder: str,
        *,
        now_ms: int,
        expires_at_ms: int,
        replacing: str | None = None,
    ) -> bool:
        with self._lock:
            current = self._slots[tenant_id].get(number)
            held_on = current is not None and not current.free(now_ms)
            if held_on and (current is None or current.holder != replacing):
                return False
            self._slots[tenant_id][number] = quota.Slot(number, holder, expires_at_ms)
            return True

    def give_back(self, tenant_id: str, number: int, holder: str) -> None:
        with self._lock:
            current = self._slots[tenant_id].get(number)
            if current is not None and current.holder == holder:
                del self._slots[tenant_id][number]

    def join_pool(self, scope: str, member: str, *, now_ms: int, until_ms: int) -> int:
        with self._lock:
            members = self._pools.setdefault(scope, {})
            members[member] = until_ms
            for gone in [m for m, until in members.items() if until <= now_ms - POOL_FORGET_MS]:
                del members[gone]
            return sum(1 for until in members.values() if until > now_ms)

    def set_limit(self, tenant_id: str, limit: int | None) -> None:
        with self._lock:
            register = dict(self._register or {})
            if limit is None:
                register.pop(tenant_id, None)
            else:
                register[tenant_id] = quota.check_limit(limit)
            _check_register(register)  # before either write, as one transaction
            self._register = register
            if limit is None:
                self._limits.pop(tenant_id, None)
            else:
                self._limits[tenant_id] = limit

    def overrides(self) -> dict[str, int] | None:
        with self._lock:
            return dict(self._register or {}) if self._complete else None

    def build_overrides(self) -> int:
        with self._lock:
            if not self._complete:
                _check_register(self._limits)
                self._register, self._complete = dict(self._limits), True
            return len(self._register or {})

    def set_limit_unregistered(self, tenant_id: str, limit: int) -> None:
        """An override as a version before the register wrote it: its own item only."""
        with self._lock:
            self._limits[tenant_id] = quota.check_limit(limit)


def _check_register(register: Mapping[str, int]) -> None:
    """DynamoDB's 400 KB item limit on the register (see DynamoSlotStore)."""
    if sum(quota.override_bytes(t, n) for t, n in register.items()) > quota.OVERRIDES_MAX_BYTES:
        raise errors.OverridesFull()


class MemoryDocumentStore:
    CHUNK_BYTES = 64 * 1024

    def __init__(self) -> None:
        self._docs: dict[str, tuple[bytes, str]] = {}
        self._lock = threading.Lock()
        #: Body bytes handed out by ``get`` and ``chunks`` (a size check reads none).
        self.bytes_read = 0

    def put(self, key: str, body: bytes, *, content_type: str = "application/json") -> None:
        with self._lock:
            self._docs[key] = (bytes(body), content_type)

    def get(self, key: str) -> bytes | None:
        with self._lock:
            found = self._docs.get(key)
            if found is None:
                return None
            self.bytes_read += len(found[0])
            return found[0]

    def upload_form(
        self, key: str, *, expires_seconds: int, max_bytes: int, content_type: str
    ) -> ports.UploadForm:
        return ports.UploadForm(
            url=f"memory://{key}",
            fields={
                "key": key,
                "Content-Type": content_type,
                "expires": str(expires_seconds),
                "max_bytes": str(max_bytes),
            },
        )

    def describe(self, key: str) -> ports.DocumentInfo | None:
        with self._lock:
            found = self._docs.get(key)
        if found is None:
            return None
        body, content_type = found
        return ports.DocumentInfo(len(body), content_type, hashlib.md5(body).hexdigest())

    def chunks(self, key: str, *, etag: str) -> Iterator[bytes]:
        info = self.describe(key)
        if info is None:
            raise errors.NotFound(f"no document {key}")
        if info.etag != etag:
            raise errors.ConflictError(f"document {key} was replaced since it was described")
        with self._lock:
            body = self._docs[key][0]
        for start in range(0, len(body), self.CHUNK_BYTES):
            piece = body[start : start + self.CHUNK_BYTES]
            with self._lock:
                self.bytes_read += len(piece)
            yield piece

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(self._docs)


class MemoryWorkflowStore:
    """Definitions' index, runs and nodes with the DynamoDB adapter's conditions.

    ``writes`` counts item writes the way DynamoDB bills them (an item in a transaction
    counts once here; the AWS adapter's request log prices transactions), so writes per
    node can be measured on the memory path.
    """

    def __init__(
        self, *, lag: IndexLag | None = None, quotas: MemoryQuotaStore | None = None
    ) -> None:
        self._propagation = _Propagation(lag)
        self.quotas = quotas
        self._definitions: dict[tuple[str, str, int], workflow.DefinitionMeta] = {}
        self._runs: dict[str, workflow.Run] = {}
        self._nodes: dict[str, dict[str, workflow.RunNode]] = defaultdict(dict)
        # run -> state -> node ids in order: the state index (a GSI in DynamoDB)
        # (only the rare states, as the DynamoDB adapter's index holds)
        self._index: dict[str, dict[dag.NodeState, list[str]]] = defaultdict(
            lambda: {state: [] for state in workflow.INDEXED_STATES}
        )
        self._leaves: dict[tuple[str, int], int] = defaultdict(int)
        self._lock = threading.RLock()
        self.writes: dict[str, int] = defaultdict(int)

    def put_definition(
        self, meta: workflow.DefinitionMeta, *, charge: quota.Charge | None = None
    ) -> bool:
        key = (meta.tenant_id, meta.workflow_id, meta.version)
        with self._lock:
            if key in self._definitions:
                return False
            if charge is not None:
                if self.quotas is None:
                    raise errors.ValidationError("this deployment counts no quotas", field="quota")
                self.quotas.charge(meta.tenant_id, charge)
            self._definitions[key] = meta
            return True

    def latest_definition(self, tenant_id: str, workflow_id: str) -> workflow.DefinitionMeta | None:
        with self._lock:
            found = [
                m
                for (t, w, _), m in self._definitions.items()
                if t == tenant_id and w == workflow_id
            ]
        return max(found, key=lambda m: m.version) if found else None

    def get_definition(
        self, tenant_id: str, workflow_id: str, version: int
    ) -> workflow.DefinitionMeta | None:
        with self._lock:
            return self._definitions.get((tenant_id, workflow_id, version))

    def workflows(
        self, tenant_id: str, *, limit: int, cursor: str | None = None
    ) -> ports.Page[workflow.DefinitionMeta]:
        with self._lock:
            latest: dict[str, workflow.DefinitionMeta] = {}
            for (t, w, v), meta in self._definitions.items():
                if t == tenant_id and (w not in latest or latest[w].version < v):
                    latest[w] = meta
        ids = sorted(latest)
        start = bisect.bisect_right(ids, cursor) if cursor else 0
        listed = ids[start : start + limit]
        more = start + limit < len(ids)
        return ports.Page([latest[w] for w in listed], listed[-1] if more and listed else None)

    def runs_of(
        self, tenant_id: str, workflow_id: str, *, limit: int, cursor: str | None = None
    ) -> ports.Page[workflow.Run]:
        with self._lock:
            runs = sorted(
                (
                    r
                    for r in self._runs.values()
                    if (r.tenant_id, r.workflow_id) == (tenant_id, workflow_id)
                ),
                key=lambda r: (r.created_at or datetime.min.replace(tzinfo=UTC), r.run_id),
                reverse=True,
            )
        ids = [r.run_id for r in runs]
        start = ids.index(cursor) + 1 if cursor in ids else 0 if cursor is None else len(ids)
        listed = runs[start : start + limit]
        more = start + limit < len(runs)
        return ports.Page(listed, listed[-1].run_id if more and listed else None)

    def create_run(self, run: workflow.Run) -> bool:
        with self._lock:
            if run.run_id in self._runs:
                return False
            self._runs[run.run_id] = run
            self.writes["run"] += 1
            return True

    def get_run(self, run_id: str) -> workflow.Run | None:
        with self._lock:
            return self._runs.get(run_id)

    def update_run(
        self,
        run: workflow.Run,
        *,
        expected_state: workflow.RunState,
        expected_generation: int,
        expected_materialized: int | None = None,
    ) -> bool:
        with self._lock:
            stored = self._runs.get(run.run_id)
            if (
                stored is None
                or stored.state is not expected_state
                or stored.generation != expected_generation
                or (
                    expected_materialized is not None
                    and stored.materialized != expected_materialized
                )
            ):
                return False
            self._runs[run.run_id] = run
            self.writes["run"] += 1
            return True

    def active_runs(self, *, limit: int, cursor: str | None = None) -> ports.Page[str]:
        with self._lock:
            ids = sorted(
                r.run_id for r in self._runs.values() if r.state is workflow.RunState.RUNNING
            )
        start = bisect.bisect_right(ids, cursor) if cursor else 0
        page = ids[start : start + limit]
        more = start + limit < len(ids)
        return ports.Page(items=page, cursor=page[-1] if more and page else None)

    def _store(self, run_id: str, row: workflow.RunNode) -> None:
        old = self._nodes[run_id].get(row.node_id)
        self._nodes[run_id][row.node_id] = row
        if old is not None and old.state is row.state:
            return
        index = self._index[run_id]
        node_id, before, after = row.node_id, None if old is None else old.state, row.state
        if before not in index and after not in index:
            return

        def move() -> None:
            if before in index:
                ids = index[before]
                del ids[bisect.bisect_left(ids, node_id)]
            if after in index:
                bisect.insort(index[after], node_id)

        self._propagation.write((run_id, node_id), move)

    def put_nodes(self, run_id: str, nodes: Sequence[workflow.RunNode]) -> None:
        with self._lock:
            for node in nodes:
                self._store(run_id, node)
            self.writes["node"] += len(nodes)

    def get_nodes(self, run_id: str, node_ids: Sequence[str]) -> dict[str, workflow.RunNode]:
        with self._lock:
            rows = self._nodes.get(run_id, {})
            return {n: rows[n] for n in node_ids if n in rows}

    def all_nodes(self, run_id: str) -> builtins.list[workflow.RunNode]:
        with self._lock:
            return [self._nodes[run_id][n] for n in sorted(self._nodes.get(run_id, {}))]

    def nodes_in_state(
        self, run_id: str, state: dag.NodeState, *, limit: int, cursor: str | None = None
    ) -> ports.Page[workflow.RunNode]:
        with self._lock:
            self._propagation.catch_up()
            rows = self._nodes.get(run_id, {})
            if state not in workflow.INDEXED_STATES:
                # From the rows themselves, as the DynamoDB adapter reads its partition.
                ids = sorted(n for n, r in rows.items() if r.state is state)
            else:
                ids = self._index[run_id][state] if run_id in self._index else []
            start = bisect.bisect_right(ids, cursor) if cursor else 0
            listed = ids[start : start + limit]
            # As the DynamoDB adapter does: the rows read back, kept if still in the state
            # (a lagging index may list a node that has moved on).
            page = [rows[n] for n in listed if rows[n].state is state]
        more = start + limit < len(ids)
        return ports.Page(items=page, cursor=listed[-1] if more and listed else None)

    def nodes(
        self, run_id: str, *, limit: int, cursor: str | None = None
    ) -> ports.Page[workflow.RunNode]:
        with self._lock:
            rows = self._nodes.get(run_id, {})
            ids = sorted(rows)
            start = bisect.bisect_right(ids, cursor) if cursor else 0
            listed = ids[start : start + limit]
            more = start + limit < len(ids)
            return ports.Page([rows[n] for n in listed], listed[-1] if more and listed else None)

    def count_states(self, run_id: str) -> dict[dag.NodeState, int]:
        # From the rows, as the DynamoDB adapter counts them.
        counts = dict.fromkeys(dag.NodeState, 0)
        with self._lock:
            for row in self._nodes.get(run_id, {}).values():
                counts[row.state] += 1
        return counts

    def move_node(
        self,
        run_id: str,
        node_id: str,
        *,
        expected: dag.NodeState,
        to: dag.NodeState,
        ready_only: bool = False,
        generation: int | None = None,
        pending: int | None = None,
    ) -> bool:
        with self._lock:
            row = self._nodes.get(run_id, {}).get(node_id)
            if row is None or row.state is not expected or (ready_only and row.pending > 0):
                return False
            changes: dict[str, Any] = {"state": to}
            if generation is not None:
                changes["generation"] = generation
            if pending is not None:
                changes["pending"] = pending
                changes["fanout"] = 0
            self._store(run_id, replace(row, **changes))
            self.writes["node"] += 1
            return True

    def succeed_node(
        self, run_id: str, node_id: str, *, chunk: int, children: Sequence[str]
    ) -> bool:
        if len(children) > workflow.FANOUT_CHUNK:
            raise errors.ValidationError(
                f"at most {workflow.FANOUT_CHUNK} children per transaction", field="children"
            )
        with self._lock:
            rows = self._nodes.get(run_id, {})
            row = rows.get(node_id)
            if row is None:
                return False
            if chunk == 0 and row.state is not dag.NodeState.DISPATCHED:
                return False
            if chunk > 0 and (row.state is not dag.NodeState.SUCCEEDED or row.fanout != chunk):
                return False
            self._store(
                run_id,
                replace(row, state=dag.NodeState.SUCCEEDED, fanout=chunk + 1 if children else 0),
            )
            # As the DynamoDB adapter does: the move, then one write per child that exists.
            present = [c for c in children if c in rows]
            for child in present:
                rows[child] = replace(rows[child], pending=rows[child].pending - 1)
            self.writes["node"] += 1 + len(present)
            return True

    def add_finished_leaves(self, run_id: str, generation: int, count: int = 1) -> int:
        with self._lock:
            self._leaves[(run_id, generation)] += count
            self.writes["leaves"] += 1
            return self._leaves[(run_id, generation)]

    def finished_leaves(self, run_id: str, generation: int) -> int:
        with self._lock:
            return self._leaves.get((run_id, generation), 0)


class MemoryBackfillStore:
    """Backfill records with the DynamoDB adapter's conditions (absence, revision)."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], backfill.Backfill] = {}
        self._lock = threading.Lock()

    def create(self, item: backfill.Backfill) -> None:
        with self._lock:
            key = (item.schedule_id, item.backfill_id)
            if key in self._items:
                raise errors.AlreadyExists(f"backfill {item.backfill_id} exists")
            self._items[key] = item

    def get(self, tenant_id: str, schedule_id: str, backfill_id: str) -> backfill.Backfill | None:
        with self._lock:
            found = self._items.get((schedule_id, backfill_id))
        return found if found is not None and found.tenant_id == tenant_id else None

    def replace(self, item: backfill.Backfill, *, expected_revision: int) -> bool:
        with self._lock:
            key = (item.schedule_id, item.backfill_id)
            stored = self._items.get(key)
            if stored is None or stored.revision != expected_revision:
                return False
            self._items[key] = item
            return True

    def active(self, *, limit: int, cursor: str | None = None) -> ports.Page[tuple[str, str, str]]:
        with self._lock:
            keys = sorted((v.tenant_id, *k) for k, v in self._items.items() if v.active)
        start = int(cursor) if cursor else 0
        page = keys[start : start + limit]
        more = start + limit < len(keys)
        return ports.Page(page, str(start + limit) if more else None)
