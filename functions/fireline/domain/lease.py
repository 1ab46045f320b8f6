"""Lease and fencing-token rules, given ``now``.

One lease item per ticker shard group. Acquiring a free or expired lease increments its
fencing token; renewing requires the same owner *and* token and an unexpired lease. The
lease keeps two tickers from doing the same work; it is not the correctness boundary (the
conditional put on each occurrence key is), so a stale holder can only waste work.

A holder also stops trusting its lease before the store would let someone else take it:
``safe_until`` leaves a margin for clock skew and the time a write takes in flight.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fireline.domain import errors

DEFAULT_TTL_MS = 10_000
DEFAULT_RENEW_EVERY_MS = 3_000
DEFAULT_SAFETY_MARGIN_MS = 2_000


@dataclass(frozen=True)
class LeaseTerms:
    ttl_ms: int = DEFAULT_TTL_MS
    renew_every_ms: int = DEFAULT_RENEW_EVERY_MS
    safety_margin_ms: int = DEFAULT_SAFETY_MARGIN_MS

    def __post_init__(self) -> None:
        if self.ttl_ms <= 0:
            raise errors.ValidationError("must be positive", field="ttl_ms")
        if self.safety_margin_ms < 0:
            # A negative margin would have the holder trust its lease after it expired.
            raise errors.ValidationError("must not be negative", field="safety_margin_ms")
        if not 0 < self.renew_every_ms < self.ttl_ms - self.safety_margin_ms:
            # A renewal must land while the lease is still safely ours, or every tick
            # would risk running on an expired lease.
            raise errors.ValidationError(
                "must be positive and leave the safety margin before the ttl",
                field="renew_every_ms",
            )


@dataclass(frozen=True)
class Lease:
    name: str
    owner: str
    token: int  # fencing token: +1 on every acquisition, never reused
    expires_at_ms: int

    def expired(self, now_ms: int) -> bool:
        return now_ms >= self.expires_at_ms

    def held_by(self, owner: str, token: int, now_ms: int) -> bool:
        return self.owner == owner and self.token == token and not self.expired(now_ms)

    def safe_until_ms(self, terms: LeaseTerms) -> int:
        return self.expires_at_ms - terms.safety_margin_ms


def can_acquire(current: Lease | None, now_ms: int) -> bool:
    return current is None or current.expired(now_ms)


def acquired(current: Lease | None, name: str, owner: str, now_ms: int, terms: LeaseTerms) -> Lease:
    """The lease after ``owner`` takes it; raises LeaseLost when someone else holds it."""
    if not can_acquire(current, now_ms):
        raise errors.LeaseLost(f"lease {name} is held by another ticker")
    token = (current.token if current else 0) + 1
    return Lease(name=name, owner=owner, token=token, expires_at_ms=now_ms + terms.ttl_ms)


def renewed(current: Lease | None, owner: str, token: int, now_ms: int, terms: LeaseTerms) -> Lease:
    """The lease after a renewal; raises LeaseLost unless ``owner`` still holds ``token``."""
    if current is None or not current.held_by(owner, token, now_ms):
        raise errors.LeaseLost("the lease expired or was taken over")
    return replace(current, expires_at_ms=now_ms + terms.ttl_ms)


def renewal_due(lease: Lease, last_renewed_ms: int, now_ms: int, terms: LeaseTerms) -> bool:
    return now_ms - last_renewed_ms >= terms.renew_every_ms or now_ms >= lease.safe_until_ms(terms)


def ticker_lease_name(group: int, groups: int) -> str:
    """The lease of ticker group ``group`` of ``groups``. The group count is in the name:
    after a change of K, old and new groups cover different shards and must not share a
    lease (their writes converge anyway)."""
    return "ticker" if groups == 1 else f"ticker-{group}-of-{groups}"
