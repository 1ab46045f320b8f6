"""Lease and fencing-token rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fireline.domain import errors, lease

TERMS = lease.LeaseTerms(ttl_ms=10_000, renew_every_ms=3_000, safety_margin_ms=2_000)
NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z in epoch milliseconds


def held(owner: str = "ticker-a", token: int = 7, expires_at_ms: int = NOW + 10_000) -> lease.Lease:
    return lease.Lease(name="shards-0-15", owner=owner, token=token, expires_at_ms=expires_at_ms)


# --- acquire ------------------------------------------------------------------------------


def test_given_no_lease_when_acquired_then_the_owner_holds_token_one_for_the_ttl() -> None:
    # WHEN
    taken = lease.acquired(None, "shards-0-15", "ticker-a", NOW, TERMS)
    # THEN
    assert taken == lease.Lease("shards-0-15", "ticker-a", 1, NOW + 10_000)
    assert taken.held_by("ticker-a", 1, NOW)


def test_given_an_expired_lease_when_another_ticker_acquires_then_the_token_moves_on() -> None:
    # GIVEN ticker-a's lease (token 7) expired at NOW exactly
    current = held(expires_at_ms=NOW)
    # WHEN
    taken = lease.acquired(current, "shards-0-15", "ticker-b", NOW, TERMS)
    # THEN
    assert (taken.owner, taken.token, taken.expires_at_ms) == ("ticker-b", 8, NOW + 10_000)
    assert not taken.held_by("ticker-a", 7, NOW)


@pytest.mark.parametrize("owner", ["ticker-b", "ticker-a"])
def test_given_a_lease_held_until_later_when_acquired_then_it_is_refused(owner: str) -> None:
    # GIVEN ticker-a holds the lease for one more millisecond
    current = held(expires_at_ms=NOW + 1)
    # WHEN / THEN: even the holder cannot take a second token while its first is live
    assert not lease.can_acquire(current, NOW)
    with pytest.raises(errors.LeaseLost):
        lease.acquired(current, "shards-0-15", owner, NOW, TERMS)


def test_given_no_lease_or_an_expired_one_then_it_can_be_acquired() -> None:
    assert lease.can_acquire(None, NOW)
    assert lease.can_acquire(held(expires_at_ms=NOW), NOW)
    assert lease.can_acquire(held(expires_at_ms=NOW - 1), NOW)


@given(
    owners=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=30),
    waits=st.lists(st.integers(min_value=0, max_value=60_000), min_size=30, max_size=30),
)
def test_given_any_run_of_acquisitions_then_tokens_count_up_by_one_and_never_repeat(
    owners: list[str], waits: list[int]
) -> None:
    # GIVEN successive acquisitions, each some time after the previous lease expired
    current: lease.Lease | None = None
    now = NOW
    tokens = []
    for owner, wait in zip(owners, waits, strict=False):
        # WHEN
        current = lease.acquired(current, "shards-0-15", owner, now, TERMS)
        tokens.append(current.token)
        now = current.expires_at_ms + wait
    # THEN
    assert tokens == list(range(1, len(owners) + 1))


# --- renew --------------------------------------------------------------------------------


def test_given_the_holder_with_its_token_when_renewed_then_the_expiry_moves_from_now() -> None:
    # GIVEN
    current = held(expires_at_ms=NOW + 4_000)
    # WHEN
    renewed = lease.renewed(current, "ticker-a", 7, NOW, TERMS)
    # THEN same holder, same token, a full ttl from now
    assert renewed == lease.Lease("shards-0-15", "ticker-a", 7, NOW + 10_000)


@pytest.mark.parametrize(
    ("current", "owner", "token"),
    [
        pytest.param(None, "ticker-a", 7, id="no-lease"),
        pytest.param(held(), "ticker-b", 7, id="other-owner"),
        pytest.param(held(), "ticker-a", 6, id="stale-token"),
        pytest.param(held(token=8), "ticker-a", 7, id="taken-over-by-same-name"),
        pytest.param(held(expires_at_ms=NOW), "ticker-a", 7, id="expired-just-now"),
        pytest.param(held(expires_at_ms=NOW - 5_000), "ticker-a", 7, id="expired-long-ago"),
    ],
)
def test_given_anything_but_a_live_lease_with_owner_and_token_when_renewed_then_lease_lost(
    current: lease.Lease | None, owner: str, token: int
) -> None:
    with pytest.raises(errors.LeaseLost):
        lease.renewed(current, owner, token, NOW, TERMS)


def test_given_a_lease_then_it_is_safe_until_the_margin_before_expiry() -> None:
    assert held(expires_at_ms=NOW + 10_000).safe_until_ms(TERMS) == NOW + 8_000


@pytest.mark.parametrize(
    ("last_renewed", "now", "due"),
    [
        pytest.param(NOW, NOW, False, id="just-renewed"),
        pytest.param(NOW, NOW + 2_999, False, id="before-the-interval"),
        pytest.param(NOW, NOW + 3_000, True, id="at-the-interval"),
        pytest.param(NOW, NOW + 5_000, True, id="past-the-interval"),
        # Renewed recently by the holder's reckoning, but the lease itself is near its end.
        pytest.param(NOW + 7_000, NOW + 7_999, False, id="before-safe-limit"),
        pytest.param(NOW + 7_000, NOW + 8_000, True, id="at-safe-limit"),
    ],
)
def test_renewal_is_due_after_the_interval_or_at_the_safe_limit(
    last_renewed: int, now: int, due: bool
) -> None:
    # GIVEN a lease that expires at NOW + 10 s (safe until NOW + 8 s)
    current = held(expires_at_ms=NOW + 10_000)
    # THEN
    assert lease.renewal_due(current, last_renewed, now, TERMS) is due


# --- terms --------------------------------------------------------------------------------


def test_the_default_terms_are_the_design_figures() -> None:
    terms = lease.LeaseTerms()
    assert (terms.ttl_ms, terms.renew_every_ms, terms.safety_margin_ms) == (10_000, 3_000, 2_000)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"ttl_ms": 0}, "ttl_ms"),
        ({"ttl_ms": -10_000}, "ttl_ms"),
        ({"renew_every_ms": 0}, "renew_every_ms"),
        ({"renew_every_ms": -1}, "renew_every_ms"),
        # Renewing no earlier than the safety margin allows would trust an unsafe lease.
        ({"renew_every_ms": 8_000}, "renew_every_ms"),
        ({"renew_every_ms": 12_000}, "renew_every_ms"),
        ({"safety_margin_ms": 10_000}, "renew_every_ms"),
        # A negative margin would trust the lease after the store let someone else take it.
        ({"safety_margin_ms": -1}, "safety_margin_ms"),
    ],
)
def test_given_bad_terms_then_the_field_at_fault_is_named(
    kwargs: dict[str, int], field: str
) -> None:
    with pytest.raises(errors.ValidationError) as caught:
        lease.LeaseTerms(**kwargs)
    assert caught.value.field == field


def test_given_the_tightest_valid_terms_then_they_are_accepted() -> None:
    terms = lease.LeaseTerms(ttl_ms=10_000, renew_every_ms=7_999, safety_margin_ms=2_000)
    no_margin = lease.LeaseTerms(ttl_ms=2, renew_every_ms=1, safety_margin_ms=0)
    assert (terms.renew_every_ms, no_margin.safety_margin_ms) == (7_999, 0)
