"""Per-tenant concurrency limits, as numbered slots with an expiry.

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

from dataclasses import dataclass

from fireline.domain import errors

DEFAULT_LIMIT = 50
UNLIMITED = 0  # an override of 0 lifts the limit for that tenant


@dataclass(frozen=True)
class Slot:
    number: int
    holder: str  # the occurrence key
    expires_at_ms: int

    def free(self, now_ms: int) -> bool:
        return self.expires_at_ms <= now_ms


def check_limit(limit: int) -> int:
    if limit < 0 or limit > 10_000:
        raise errors.ValidationError("must be 0 (unlimited) to 10000", field="concurrency_limit")
    return limit


def free_slots(held: list[Slot], limit: int, now_ms: int) -> list[int]:
    """Slot numbers a new job may take: never held, or held past their expiry."""
    return free_in_band(held, list(range(limit)), now_ms)


def holding(held: list[Slot], holder: str, now_ms: int) -> Slot | None:
    """The slot ``holder`` already has (a redelivered message keeps its slot)."""
    return next((s for s in held if s.holder == holder and not s.free(now_ms)), None)


# What one tenant may run at once in a job class, as a share of the class's maximum
# concurrency (its workers' invocations): the rest is always left to other tenants. A
# running job keeps its worker's invocation busy until it ends (an invocation returns when
# its whole batch has), so a tenant holding every invocation of a class would make every
# other tenant's jobs wait in the queue, however short they are.
CLASS_SHARE_PERCENT = 50
# A job of a shared-out class holds two of its tenant's slots: one of 0 .. limit-1 (the
# tenant's limit) and one of its class's band, CLASS_BAND * (class index + 1) + 0 ..
# share-1. Numbered slots make both bounds exact under races (a conditional put per
# number), with the one read of the tenant's slots the limit needs anyway.
CLASS_BAND = 1_000_000


def class_limit(max_concurrency: int, share_percent: int = CLASS_SHARE_PERCENT) -> int:
    """The most jobs one tenant may run at once in a class of ``max_concurrency``
    invocations: its share, at least one, and always fewer than the class has (unless the
    class has a single invocation). 0: the class is not shared out (no class limit)."""
    if max_concurrency <= 0:
        return 0
    share = max_concurrency * share_percent // 100
    return max(1, min(share, max_concurrency - 1))


def class_band(class_index: int, share: int) -> list[int]:
    """The slot numbers of a class's share (see CLASS_BAND)."""
    base = CLASS_BAND * (class_index + 1)
    return list(range(base, base + share))


def free_in_band(held: list[Slot], band: list[int], now_ms: int) -> list[int]:
    """The numbers of ``band`` that no live slot holds."""
    taken = {slot.number for slot in held if not slot.free(now_ms)}
    return [n for n in band if n not in taken]


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
