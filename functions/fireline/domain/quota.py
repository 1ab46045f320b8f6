"""Per-tenant limits: concurrency slots, and count quotas.

Concurrency limits are numbered slots with an expiry.

A running job holds one of its tenant's slots (0 .. limit-1) until it finishes or its
slot expires (its deadline plus a margin), so a worker that dies mid-job frees the slot
by itself instead of leaking it. A job that finds no free slot is deferred, never run
over the limit and never dropped.

A schedule whose overlap policy is ``forbid`` or ``buffer_one`` has slots of its own
(its overlap scope): ``RUN_SLOT``, held by the fire that runs, and ``BUFFER_SLOT``, held
by the one fire ``buffer_one`` keeps waiting. A fire asks for one item, however many
fires are materialized ahead of it, and a run whose worker died stops counting when
its slot expires.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from fireline.domain import errors

# Half of the default class's invocations (its share, below): a tenant within its share
# pays one slot write per job, not two (see Worker._take_slot).
DEFAULT_LIMIT = 25
UNLIMITED = 0  # an override of 0 lifts the limit for that tenant


@dataclass(frozen=True)
class Slot:
    number: int
    holder: str  # the occurrence key
    expires_at_ms: int

    def free(self, now_ms: int) -> bool:
        return self.expires_at_ms <= now_ms


MAX_LIMIT = 10_000


def check_limit(limit: int) -> int:
    if limit < 0 or limit > MAX_LIMIT:
        raise errors.ValidationError(
            f"must be 0 (unlimited) to {MAX_LIMIT}", field="concurrency_limit"
        )
    return limit


# The register of every tenant's limit override is one DynamoDB item: at most 400 KB, each
# override its tenant id and a number (about 20,000 of 10-character ids, 5,500 of the
# longest, 64 characters).
OVERRIDES_MAX_BYTES = 400_000
OVERRIDE_PREFIX = "limit:"  # an override's attribute in the register: the prefix, the tenant


def override_bytes(tenant_id: str, limit: int) -> int:
    """What one override adds to the register, as DynamoDB sizes an item: its attribute
    name in UTF-8 and its number (a byte per two digits, and one)."""
    return len((OVERRIDE_PREFIX + tenant_id).encode()) + len(str(limit)) // 2 + 2


def holding(held: list[Slot], holder: str, now_ms: int) -> Slot | None:
    """The slot ``holder`` already has (a redelivered message keeps its slot)."""
    return next((s for s in held if s.holder == holder and not s.free(now_ms)), None)


# What one tenant may run at once in a job class, as a share of what the class runs at
# once (its invocations times the jobs each keeps in flight; the long class: its runners):
# the rest is always left to other tenants. A running job keeps a place in its worker's
# invocation until it ends (an invocation returns when its whole batch has), so a tenant
# holding every place of a class would make every other tenant's jobs wait in the queue,
# however short they are. Its share of the invocations themselves is services.pool's.
CLASS_SHARE_PERCENT = 50
# A job of a shared-out class holds two of its tenant's slots: one of 0 .. limit-1 (the
# tenant's limit) and one of its class's band, CLASS_BAND * (class index + 1) + 0 ..
# share-1. Numbered slots make both bounds exact under races (a conditional put per
# number), with the one read of the tenant's slots the limit needs anyway.
CLASS_BAND = 1_000_000


def class_limit(max_concurrency: int, share_percent: int = CLASS_SHARE_PERCENT) -> int:
    """The most one tenant may hold at once of a class running ``max_concurrency`` (jobs,
    or for services.pool invocations): its share, at least one, and always fewer than the
    class has (unless it has a single one). 0: the class is not shared out (no limit)."""
    if max_concurrency <= 0:
        return 0
    share = max_concurrency * share_percent // 100
    return max(1, min(share, max_concurrency - 1))


def class_band(class_index: int, share: int) -> list[int]:
    """The slot numbers of a class's share (see CLASS_BAND)."""
    base = CLASS_BAND * (class_index + 1)
    return list(range(base, base + share))


# A tenant's share of the class's invocations as really running (see
# fireline.services.pool): a container running jobs of the tenant holds one of its
# tenant's slots INVOCATION_OFFSET + 0 .. share-1 of its class's band, apart from the
# jobs' own numbers (a class's share of jobs is at most half of 10,000).
INVOCATION_OFFSET = CLASS_BAND // 2
_POOL_SCOPE = "#pool#"


def invocation_band(class_index: int, share: int) -> list[int]:
    """The slot numbers of a tenant's share of a class's invocations."""
    base = CLASS_BAND * (class_index + 1) + INVOCATION_OFFSET
    return list(range(base, base + share))


# A tenant's job slots lie on partition keys of the slots table by block of numbers, so a
# tenant running hundreds of jobs a second (a take a job) is not capped by one key's
# 1,000 write units a second: numbers 0..SLOT_KEY_BLOCK-1 (of its limit, or of its class
# band) on the tenant id, as ever, and block n on ``{tenant_id}#{n}``. A tenant at the
# default limit has every slot on its id; one whose override is 800 spreads over 4 keys.
# The limit override, the quota use and the invocation band (a take a container, not a
# job) stay on the tenant id.
SLOT_KEY_BLOCK = 250


def slot_key(tenant_id: str, number: int) -> str:
    """The slots table's partition key value of one of ``tenant_id``'s slot numbers (or
    of a scope's: an overlap scope's numbers are all in block 0)."""
    if number < 0:
        return tenant_id
    offset = number % CLASS_BAND
    if offset >= INVOCATION_OFFSET:
        return tenant_id
    block = offset // SLOT_KEY_BLOCK
    return tenant_id if block == 0 else f"{tenant_id}#{block}"


def slot_keys(tenant_id: str, numbers_below: int) -> list[str]:
    """Every partition key value of ``tenant_id``'s job slots numbered below
    ``numbers_below`` (its limit), the tenant id first."""
    blocks = max(1, -(-numbers_below // SLOT_KEY_BLOCK))
    return [tenant_id] + [f"{tenant_id}#{block}" for block in range(1, blocks)]


def pool_scope(job_class: str) -> str:
    """Where a class's register of live containers lives in the slot store: no tenant
    id has a '#', so it is nobody's."""
    return f"{_POOL_SCOPE}{job_class}"


RUN_SLOT = 0
BUFFER_SLOT = 1
_OVERLAP_SCOPE = "overlap#"


def overlap_scope(tenant_id: str, schedule_id: str) -> str:
    """Where a schedule's overlap slots live in the slot store: beside, never among, its
    tenant's concurrency slots."""
    return f"{_OVERLAP_SCOPE}{tenant_id}#{schedule_id}"


def holder_of(held: list[Slot], number: int, now_ms: int) -> str | None:
    """Who holds slot ``number`` now (None: nobody, or a holder whose time ran out)."""
    slot = next((s for s in held if s.number == number), None)
    return slot.holder if slot is not None and not slot.free(now_ms) else None


# --- count quotas --------------------------------------------------------------------------
#
# A tenant may hold so many schedules, one-off jobs not yet finished and workflows, register
# so many versions of one workflow, and ask for so many uploads a day. The limits are the
# deployment's defaults unless the operator set an override for the tenant; 0 (default or
# override) means no limit, as for the concurrency limit.


class Quota(enum.StrEnum):
    SCHEDULES = "schedules"
    ACTIVE_JOBS = "active_jobs"  # one-off jobs not yet finished
    WORKFLOWS = "workflows"
    WORKFLOW_VERSIONS = "workflow_versions"  # versions of one workflow
    UPLOADS_PER_DAY = "uploads_per_day"  # workflow uploads asked for in one UTC day


#: Quotas whose use is a running count the stores keep (the others are counted otherwise:
#: a workflow's versions by its version number, uploads per day by day).
COUNTED = (Quota.SCHEDULES, Quota.ACTIVE_JOBS, Quota.WORKFLOWS)
MAX_QUOTA = 10_000_000

DEFAULT_QUOTAS: Mapping[Quota, int] = {
    Quota.SCHEDULES: 10_000,
    Quota.ACTIVE_JOBS: 100_000,
    Quota.WORKFLOWS: 1_000,
    Quota.WORKFLOW_VERSIONS: 1_000,
    Quota.UPLOADS_PER_DAY: 1_000,
}


def check_quota(quota: Quota, limit: int) -> int:
    if not 0 <= limit <= MAX_QUOTA:
        raise errors.ValidationError(f"must be 0 (no limit) to {MAX_QUOTA}", field=quota.value)
    return limit


@dataclass(frozen=True)
class Charge:
    """One unit of ``quota`` taken with a write, if the tenant is under its limit.

    ``default`` is the deployment's limit; the store applies the tenant's override, if
    any, in the same conditional write, so an override needs no read of its own."""

    quota: Quota
    default: int

    def __post_init__(self) -> None:
        check_quota(self.quota, self.default)


@dataclass(frozen=True)
class Usage:
    """What a tenant has used of its counted quotas, and the operator's overrides."""

    used: Mapping[Quota, int] = field(default_factory=dict)
    overrides: Mapping[Quota, int] = field(default_factory=dict)
    uploads_day: str | None = None  # the UTC day ``used[UPLOADS_PER_DAY]`` counts
    uploads: int = 0

    def limit(self, quota: Quota, defaults: Mapping[Quota, int]) -> int:
        return self.overrides.get(quota, defaults.get(quota, 0))

    def count(self, quota: Quota, day: str | None = None) -> int:
        if quota is Quota.UPLOADS_PER_DAY:
            return self.uploads if day is not None and day == self.uploads_day else 0
        return max(0, self.used.get(quota, 0))


def under(limit: int, used: int) -> bool:
    return limit == UNLIMITED or used < limit


def exceeded(quota: Quota, limit: int, used: int, *, asked: int = 1) -> errors.QuotaExceeded:
    """``asked``: the units the refused request wanted (a batch's jobs)."""
    return errors.QuotaExceeded(
        quota.value,
        limit=limit,
        used=used,
        retry_later=quota is Quota.UPLOADS_PER_DAY,
        asked=asked,
    )


def day_of(moment: datetime) -> str:
    """The UTC day a daily quota counts in."""
    return moment.astimezone(UTC).date().isoformat()


# --- a batch's holders ------------------------------------------------------------------
#
# A batch of one-off jobs (POST /jobs/batch) holds its units of the active jobs quota in
# holders, not in a mark on each job: one holder per fire minute of the batch, which lists
# its jobs. A holder is written in one transaction with the count's increment, and loses
# jobs (deleted with its last) in one transaction with the count's decrement, so the count
# of a tenant's batch jobs is always exactly what its holders list: no crash between two
# writes can leave a unit held by nothing, and none is given back twice. A job's end
# writes nothing of its own: the sweep visits a holder once its minute is over and gives
# back, together, the units of the jobs that ended (their rows settled). What that buys:
# a job of a batch costs its bookkeeping a hundredth of two transactions instead of a mark
# and its removal (a write each, and an index entry in and out), and what it costs the
# tenant is that its unit comes back at the sweep's next visit after its end, not at its
# end.

# Holders sort below every slot (0..), the limit override (-1) and the usage item (-2):
# their number is this base plus their visit time in seconds, times a million, plus a
# random part, so one Query reads a tenant's holders due by a time.
HOLDER_BASE = -(10**18)
HOLDER_SPREAD = 1_000_000
# Above every holder's number (a visit before the year 10000), below -2.
HOLDER_TOP = HOLDER_BASE + 253_402_300_800 * HOLDER_SPREAD
# A holder is visited this long after the end of its jobs' fire minute: its jobs have
# had time to run.
VISIT_AFTER = timedelta(seconds=30)
# A batch's holders at most: with its count, one DynamoDB transaction (100 writes).
MOST_HOLDERS = 99


@dataclass(frozen=True)
class Holder:
    """The units of the active jobs quota that a batch's jobs of one fire minute hold."""

    tenant_id: str
    number: int  # its place among the tenant's items in the slots table
    jobs: frozenset[str]  # entries: see held_entry
    created_at: datetime
    version: int = 1  # every change moves it on: a visit's change is conditional on it

    @property
    def visit_at(self) -> datetime:
        return datetime.fromtimestamp((self.number - HOLDER_BASE) // HOLDER_SPREAD, UTC)


def holder_number(visit_at: datetime, spread: int) -> int:
    """A holder's number for its visit time; ``spread`` (0 .. HOLDER_SPREAD - 1) keeps two
    holders of one second apart."""
    return HOLDER_BASE + int(visit_at.timestamp()) * HOLDER_SPREAD + spread


def holders_due_by(moment: datetime | None) -> tuple[int, int]:
    """The range of holder numbers whose visit time is ``moment`` or before (None: all)."""
    if moment is None:
        return HOLDER_BASE, HOLDER_TOP
    return HOLDER_BASE, holder_number(moment, HOLDER_SPREAD - 1)


def visit_time(fire_time: datetime) -> datetime:
    """When the holder of the jobs firing in ``fire_time``'s minute is visited."""
    minute = fire_time.astimezone(UTC).replace(second=0, microsecond=0)
    return minute + timedelta(minutes=1) + VISIT_AFTER


def held_entry(job_id: str, fire_time: datetime) -> str:
    """A job as its holder lists it: its fire time (whole seconds) and its id."""
    return f"{int(fire_time.timestamp())}/{job_id}"


def parse_held_entry(entry: str) -> tuple[str, datetime]:
    """(job id, fire time) of a holder's entry."""
    seconds, _, job_id = entry.partition("/")
    return job_id, datetime.fromtimestamp(int(seconds), UTC)


def by_visit(entries: Sequence[str], most: int) -> dict[datetime, list[str]]:
    """A batch's entries grouped by their holder's visit time (one holder each), in at
    most ``most`` holders: past that, neighbouring minutes share a holder, visited after
    the last of them (a job's unit then comes back at a later visit, never an earlier)."""
    groups: dict[datetime, list[str]] = {}
    for entry in dict.fromkeys(entries):
        groups.setdefault(visit_time(parse_held_entry(entry)[1]), []).append(entry)
    visits = sorted(groups)
    if len(visits) <= most:
        return groups
    merged: dict[datetime, list[str]] = {}
    size = -(-len(visits) // most)  # minutes per holder, rounded up
    for start in range(0, len(visits), size):
        chunk = visits[start : start + size]
        merged[chunk[-1]] = [e for visit in chunk for e in groups[visit]]
    return merged
