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
UNLIMITED_SLOT = -1  # what a job of an unlimited tenant holds: no slot at all


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
    taken = {slot.number for slot in held if not slot.free(now_ms)}
    return [n for n in range(limit) if n not in taken]


def holding(held: list[Slot], holder: str, now_ms: int) -> Slot | None:
    """The slot ``holder`` already has (a redelivered message keeps its slot)."""
    return next((s for s in held if s.holder == holder and not s.free(now_ms)), None)


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
