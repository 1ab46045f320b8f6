"""LeaseStore contract: one holder at a time, fencing tokens that only go up."""

from __future__ import annotations

import threading

import pytest

from fireline import ports
from fireline.domain import errors, lease

TERMS = lease.LeaseTerms(ttl_ms=10_000, renew_every_ms=3_000, safety_margin_ms=2_000)
NOW = 1_772_366_400_000  # 2026-03-01T12:00:00Z in epoch milliseconds
NAME = "shards-0-15"


def test_given_a_free_lease_when_acquired_then_the_owner_holds_token_one(
    lease_store: ports.LeaseStore,
) -> None:
    # WHEN
    taken = lease_store.acquire(NAME, "ticker-a", NOW, TERMS)
    # THEN
    assert taken == lease.Lease(NAME, "ticker-a", 1, NOW + 10_000)
    assert lease_store.get(NAME) == taken


def test_given_no_lease_was_ever_taken_then_get_returns_none(
    lease_store: ports.LeaseStore,
) -> None:
    lease_store.acquire("other", "ticker-a", NOW, TERMS)
    assert lease_store.get(NAME) is None


@pytest.mark.parametrize("owner", ["ticker-b", "ticker-a"])
def test_given_a_held_lease_when_acquired_then_none_and_the_holder_keeps_it(
    lease_store: ports.LeaseStore, owner: str
) -> None:
    # GIVEN ticker-a holds it until NOW + 10 s
    held = lease_store.acquire(NAME, "ticker-a", NOW, TERMS)
    # WHEN anyone tries 1 ms before it expires
    taken = lease_store.acquire(NAME, owner, NOW + 9_999, TERMS)
    # THEN
    assert taken is None
    assert lease_store.get(NAME) == held


def test_given_an_expired_lease_when_acquired_then_the_new_owner_gets_the_next_token(
    lease_store: ports.LeaseStore,
) -> None:
    # GIVEN ticker-a's lease expired (it stopped renewing)
    lease_store.acquire(NAME, "ticker-a", NOW, TERMS)
    # WHEN ticker-b takes over a second after expiry
    taken = lease_store.acquire(NAME, "ticker-b", NOW + 11_000, TERMS)
    # THEN
    assert taken == lease.Lease(NAME, "ticker-b", 2, NOW + 21_000)
    assert lease_store.get(NAME) == taken


def test_given_names_then_each_lease_is_independent(lease_store: ports.LeaseStore) -> None:
    first = lease_store.acquire("shards-0-15", "ticker-a", NOW, TERMS)
    second = lease_store.acquire("shards-16-31", "ticker-b", NOW, TERMS)
    assert first is not None and second is not None
    assert (first.owner, first.token, second.owner, second.token) == ("ticker-a", 1, "ticker-b", 1)


# --- renew --------------------------------------------------------------------------------


def test_given_the_holder_when_it_renews_then_the_expiry_moves_and_the_token_stays(
    lease_store: ports.LeaseStore,
) -> None:
    # GIVEN
    held = lease_store.acquire(NAME, "ticker-a", NOW, TERMS)
    assert held is not None
    # WHEN it renews 3 s in
    renewed = lease_store.renew(held, NOW + 3_000, TERMS)
    # THEN
    assert renewed == lease.Lease(NAME, "ticker-a", 1, NOW + 13_000)
    assert lease_store.get(NAME) == renewed
    # AND so nobody can take it at the old expiry
    assert lease_store.acquire(NAME, "ticker-b", NOW + 10_000, TERMS) is None


def test_given_an_expired_lease_when_the_old_holder_renews_then_lease_lost(
    lease_store: ports.LeaseStore,
) -> None:
    # GIVEN ticker-a paused (GC, a slow call) past its expiry
    held = lease_store.acquire(NAME, "ticker-a", NOW, TERMS)
    assert held is not None
    # WHEN / THEN
    with pytest.raises(errors.LeaseLost):
        lease_store.renew(held, NOW + 10_000, TERMS)


def test_given_a_takeover_when_the_old_holder_renews_then_lease_lost_and_nothing_changes(
    lease_store: ports.LeaseStore,
) -> None:
    # GIVEN ticker-a's lease expired and ticker-b took it
    stale = lease_store.acquire(NAME, "ticker-a", NOW, TERMS)
    assert stale is not None
    current = lease_store.acquire(NAME, "ticker-b", NOW + 10_000, TERMS)
    # WHEN ticker-a wakes up and renews
    with pytest.raises(errors.LeaseLost):
        lease_store.renew(stale, NOW + 11_000, TERMS)
    # THEN ticker-b's lease is untouched
    assert lease_store.get(NAME) == current


def test_given_the_same_owner_reacquired_when_renewing_with_the_old_token_then_lease_lost(
    lease_store: ports.LeaseStore,
) -> None:
    # GIVEN ticker-a lost its lease and took it again (token 2): a lingering task still
    # holds token 1
    old = lease_store.acquire(NAME, "ticker-a", NOW, TERMS)
    assert old is not None
    new = lease_store.acquire(NAME, "ticker-a", NOW + 10_000, TERMS)
    # WHEN / THEN the owner name alone is not enough
    with pytest.raises(errors.LeaseLost):
        lease_store.renew(old, NOW + 11_000, TERMS)
    assert lease_store.get(NAME) == new


# --- release ------------------------------------------------------------------------------


def test_given_a_released_lease_then_another_ticker_takes_it_at_once_with_a_new_token(
    lease_store: ports.LeaseStore,
) -> None:
    # GIVEN ticker-a finishes early and releases
    held = lease_store.acquire(NAME, "ticker-a", NOW, TERMS)
    assert held is not None
    lease_store.release(held)
    # WHEN ticker-b asks straight away
    taken = lease_store.acquire(NAME, "ticker-b", NOW + 1, TERMS)
    # THEN it gets the lease, and token 1 is never handed out again
    assert taken is not None
    assert (taken.owner, taken.token) == ("ticker-b", 2)
    # AND the released holder cannot renew
    with pytest.raises(errors.LeaseLost):
        lease_store.renew(held, NOW + 2, TERMS)


def test_given_a_takeover_when_the_old_holder_releases_then_the_new_holder_keeps_it(
    lease_store: ports.LeaseStore,
) -> None:
    # GIVEN
    stale = lease_store.acquire(NAME, "ticker-a", NOW, TERMS)
    assert stale is not None
    current = lease_store.acquire(NAME, "ticker-b", NOW + 10_000, TERMS)
    # WHEN ticker-a releases what it believes it holds
    lease_store.release(stale)
    # THEN
    assert lease_store.get(NAME) == current
    assert lease_store.acquire(NAME, "ticker-c", NOW + 10_001, TERMS) is None


def test_given_any_mix_of_expiry_and_release_then_tokens_go_up_by_one_and_never_repeat(
    lease_store: ports.LeaseStore,
) -> None:
    # GIVEN / WHEN tickers take turns, some releasing, some letting the lease expire
    now = NOW
    tokens = []
    for turn in range(12):
        taken = lease_store.acquire(NAME, f"ticker-{turn % 3}", now, TERMS)
        assert taken is not None
        tokens.append(taken.token)
        if turn % 2:
            lease_store.release(taken)
            now += 1
        else:
            now = taken.expires_at_ms
    # THEN
    assert tokens == list(range(1, 13))


# --- races --------------------------------------------------------------------------------


def test_given_tickers_racing_for_a_free_lease_then_exactly_one_wins(
    lease_store: ports.LeaseStore,
) -> None:
    # GIVEN eight tickers starting together
    start = threading.Barrier(8)
    results: dict[str, lease.Lease | None] = {}

    def ticker(owner: str) -> None:
        start.wait()
        results[owner] = lease_store.acquire(NAME, owner, NOW, TERMS)

    # WHEN they all acquire at once
    threads = [threading.Thread(target=ticker, args=(f"ticker-{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN one holds token 1, and it is the lease stored
    winners = {owner: taken for owner, taken in results.items() if taken is not None}
    assert len(results) == 8 and len(winners) == 1
    ((owner, taken),) = winners.items()
    assert (taken.owner, taken.token) == (owner, 1)
    assert lease_store.get(NAME) == taken


def test_given_tickers_racing_for_an_expired_lease_then_exactly_one_takes_it_over(
    lease_store: ports.LeaseStore,
) -> None:
    # GIVEN a lease that expired
    lease_store.acquire(NAME, "ticker-old", NOW, TERMS)
    start = threading.Barrier(8)
    results: dict[str, lease.Lease | None] = {}

    def ticker(owner: str) -> None:
        start.wait()
        results[owner] = lease_store.acquire(NAME, owner, NOW + 10_000, TERMS)

    # WHEN
    threads = [threading.Thread(target=ticker, args=(f"ticker-{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN
    winners = [taken for taken in results.values() if taken is not None]
    assert len(results) == 8 and len(winners) == 1
    assert winners[0].token == 2
    assert lease_store.get(NAME) == winners[0]
