"""SlotStore contract: one holder per slot until it gives it back or the slot expires."""

from __future__ import annotations

import threading

import pytest

from fireline import ports
from fireline.adapters import dynamodb, memory, slots_dynamodb
from fireline.domain import errors, quota

from .support import OTHER_TENANT, TENANT

NOW = 1_772_366_400_000  # 2026-03-01T12:00:00Z in epoch milliseconds
TTL = 60_000
JOB_A = "nightly#1#2026-03-01T12:00:00Z"
JOB_B = "weekly#1#2026-03-01T12:00:00Z"


def set_before_the_register(store: ports.SlotStore, tenant_id: str, limit: int) -> None:
    """An override as versions before the register wrote it: the tenant's own item only."""
    if isinstance(store, memory.MemorySlotStore):
        store.set_limit_unregistered(tenant_id, limit)
        return
    assert isinstance(store, slots_dynamodb.DynamoSlotStore)
    store._client.put_item(
        TableName=store._table,
        Item=dynamodb._encode(
            {"tenant_id": tenant_id, "slot": slots_dynamodb.LIMIT_SLOT, "limit": limit}
        ),
    )


def slots(store: ports.SlotStore, tenant_id: str = TENANT) -> set[quota.Slot]:
    """The tenant's slots; the port promises no order."""
    held, _ = store.held(tenant_id)
    return set(held)


def test_given_a_new_tenant_then_it_holds_no_slots_and_has_no_override(
    slot_store: ports.SlotStore,
) -> None:
    assert slot_store.held(TENANT) == ([], None)


def test_given_a_free_slot_when_taken_then_the_holder_has_it_until_its_expiry(
    slot_store: ports.SlotStore,
) -> None:
    # WHEN
    taken = slot_store.take(TENANT, 0, JOB_A, now_ms=NOW, expires_at_ms=NOW + TTL)
    # THEN
    assert taken is True
    assert slot_store.held(TENANT) == ([quota.Slot(0, JOB_A, NOW + TTL)], None)


@pytest.mark.parametrize("holder", [JOB_B, JOB_A])
def test_given_a_held_slot_when_taken_before_it_expires_then_refused_and_kept(
    slot_store: ports.SlotStore, holder: str
) -> None:
    # GIVEN JOB_A holds slot 0
    assert slot_store.take(TENANT, 0, JOB_A, now_ms=NOW, expires_at_ms=NOW + TTL)
    # WHEN anyone asks for it 1 ms before it expires
    taken = slot_store.take(TENANT, 0, holder, now_ms=NOW + TTL - 1, expires_at_ms=NOW + 2 * TTL)
    # THEN
    assert taken is False
    assert slots(slot_store) == {quota.Slot(0, JOB_A, NOW + TTL)}


def test_given_held_slots_then_each_number_is_taken_on_its_own(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN slot 0 is held
    assert slot_store.take(TENANT, 0, JOB_A, now_ms=NOW, expires_at_ms=NOW + TTL)
    # WHEN another job takes slot 2
    taken = slot_store.take(TENANT, 2, JOB_B, now_ms=NOW, expires_at_ms=NOW + TTL)
    # THEN
    assert taken is True
    assert slots(slot_store) == {
        quota.Slot(0, JOB_A, NOW + TTL),
        quota.Slot(2, JOB_B, NOW + TTL),
    }


def test_given_a_held_slot_then_it_is_handed_on_from_the_holder_named_and_no_other(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN JOB_A holds slot 0 (its run has ended, and it was never given back)
    assert slot_store.take(TENANT, 0, JOB_A, now_ms=NOW, expires_at_ms=NOW + TTL)
    # WHEN it is asked for as replacing another holder, then as replacing JOB_A, twice
    wrong = slot_store.take(
        TENANT,
        0,
        "x#1#2026-03-01T12:00:00Z",
        now_ms=NOW + 1,
        expires_at_ms=NOW + TTL,
        replacing=JOB_B,
    )
    handed = slot_store.take(
        TENANT, 0, JOB_B, now_ms=NOW + 1, expires_at_ms=NOW + 2 * TTL, replacing=JOB_A
    )
    again = slot_store.take(
        TENANT,
        0,
        "y#1#2026-03-01T12:00:00Z",
        now_ms=NOW + 2,
        expires_at_ms=NOW + 2 * TTL,
        replacing=JOB_A,
    )
    # THEN only the take that named the current holder went through, once
    assert (wrong, handed, again) == (False, True, False)
    assert slots(slot_store) == {quota.Slot(0, JOB_B, NOW + 2 * TTL)}


def test_given_an_expired_slot_then_it_is_listed_and_another_holder_can_take_it(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN JOB_A's worker died: its slot reached its expiry
    assert slot_store.take(TENANT, 0, JOB_A, now_ms=NOW, expires_at_ms=NOW + TTL)
    assert slots(slot_store) == {quota.Slot(0, JOB_A, NOW + TTL)}
    # WHEN JOB_B asks for it at the expiry
    taken = slot_store.take(TENANT, 0, JOB_B, now_ms=NOW + TTL, expires_at_ms=NOW + 2 * TTL)
    # THEN
    assert taken is True
    assert slots(slot_store) == {quota.Slot(0, JOB_B, NOW + 2 * TTL)}


# --- give_back ----------------------------------------------------------------------------


def test_given_a_held_slot_when_the_holder_gives_it_back_then_it_is_free_at_once(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN
    assert slot_store.take(TENANT, 0, JOB_A, now_ms=NOW, expires_at_ms=NOW + TTL)
    # WHEN
    slot_store.give_back(TENANT, 0, JOB_A)
    # THEN
    assert slot_store.held(TENANT) == ([], None)
    assert slot_store.take(TENANT, 0, JOB_B, now_ms=NOW + 1, expires_at_ms=NOW + TTL)


def test_given_a_slot_taken_over_when_the_old_holder_gives_it_back_then_the_new_one_keeps_it(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN JOB_A's slot expired and JOB_B took it
    assert slot_store.take(TENANT, 0, JOB_A, now_ms=NOW, expires_at_ms=NOW + TTL)
    assert slot_store.take(TENANT, 0, JOB_B, now_ms=NOW + TTL, expires_at_ms=NOW + 2 * TTL)
    # WHEN JOB_A's worker finishes late and gives back what it believes it holds
    slot_store.give_back(TENANT, 0, JOB_A)
    # THEN
    assert slots(slot_store) == {quota.Slot(0, JOB_B, NOW + 2 * TTL)}


def test_given_a_free_slot_when_given_back_then_nothing_changes(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN slot 0 is held, slot 1 never was
    assert slot_store.take(TENANT, 0, JOB_A, now_ms=NOW, expires_at_ms=NOW + TTL)
    # WHEN
    slot_store.give_back(TENANT, 1, JOB_A)
    # THEN
    assert slots(slot_store) == {quota.Slot(0, JOB_A, NOW + TTL)}


# --- set_limit ----------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [3, quota.UNLIMITED])
def test_given_a_limit_override_then_held_shows_it_beside_the_slots(
    slot_store: ports.SlotStore, limit: int
) -> None:
    # GIVEN
    assert slot_store.take(TENANT, 0, JOB_A, now_ms=NOW, expires_at_ms=NOW + TTL)
    # WHEN
    slot_store.set_limit(TENANT, limit)
    # THEN the override is not a slot
    assert slot_store.held(TENANT) == ([quota.Slot(0, JOB_A, NOW + TTL)], limit)


def test_given_a_limit_override_when_set_again_then_the_last_one_holds(
    slot_store: ports.SlotStore,
) -> None:
    slot_store.set_limit(TENANT, 3)
    slot_store.set_limit(TENANT, 7)
    assert slot_store.held(TENANT) == ([], 7)


def test_given_a_limit_override_when_set_to_none_then_the_tenant_has_the_default_again(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN
    slot_store.set_limit(TENANT, 3)
    # WHEN
    slot_store.set_limit(TENANT, None)
    # THEN
    assert slot_store.held(TENANT) == ([], None)


@pytest.mark.parametrize("limit", [-1, 10_001])
def test_given_an_out_of_range_limit_when_set_then_refused_and_the_override_stays(
    slot_store: ports.SlotStore, limit: int
) -> None:
    # GIVEN
    slot_store.set_limit(TENANT, 3)
    # WHEN / THEN
    with pytest.raises(errors.ValidationError):
        slot_store.set_limit(TENANT, limit)
    assert slot_store.held(TENANT) == ([], 3)


# --- the register of overrides ---------------------------------------------------------


def test_given_a_new_store_then_the_register_is_unknown_until_built_and_then_empty(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN a deployment's first start: no register
    assert slot_store.overrides() is None
    # WHEN it is built
    built = slot_store.build_overrides()
    # THEN it holds no override, and says so
    assert (built, slot_store.overrides()) == (0, {})


def test_given_a_built_register_then_each_change_of_an_override_shows_in_it(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN
    slot_store.build_overrides()
    # WHEN two tenants get overrides, one is changed and then the other cleared
    slot_store.set_limit(TENANT, 3)
    slot_store.set_limit(OTHER_TENANT, quota.UNLIMITED)
    assert slot_store.overrides() == {TENANT: 3, OTHER_TENANT: quota.UNLIMITED}
    slot_store.set_limit(TENANT, 7)
    slot_store.set_limit(OTHER_TENANT, None)
    # THEN the register and each tenant's own override agree
    assert slot_store.overrides() == {TENANT: 7}
    assert slot_store.held(TENANT) == ([], 7)
    assert slot_store.held(OTHER_TENANT) == ([], None)


def test_given_overrides_set_before_the_register_then_it_is_unknown_until_built(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN an override from before the register, and one set since (which writes an
    # entry in a register that does not hold the first)
    set_before_the_register(slot_store, TENANT, quota.UNLIMITED)
    slot_store.set_limit(OTHER_TENANT, 4)
    # THEN the register is not trusted: it does not know every override
    assert slot_store.overrides() is None
    assert slot_store.held(TENANT) == ([], quota.UNLIMITED)
    # WHEN it is built, twice (the migration is idempotent)
    first = slot_store.build_overrides()
    again = slot_store.build_overrides()
    # THEN it holds both, and a later change lands in it
    assert (first, again) == (2, 2)
    assert slot_store.overrides() == {TENANT: quota.UNLIMITED, OTHER_TENANT: 4}
    slot_store.set_limit(TENANT, None)
    assert slot_store.overrides() == {OTHER_TENANT: 4}


def test_given_an_out_of_range_limit_then_the_register_is_unchanged(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN
    slot_store.build_overrides()
    slot_store.set_limit(TENANT, 3)
    # WHEN / THEN
    with pytest.raises(errors.ValidationError):
        slot_store.set_limit(OTHER_TENANT, -1)
    assert slot_store.overrides() == {TENANT: 3}


def test_given_a_full_register_when_another_override_is_set_then_refused_and_nothing_written(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN a register near DynamoDB's 400 KB item limit (ids far longer than a tenant's,
    # so that 198 overrides fill it), built from overrides set before it
    def tenant(n: int) -> str:
        return f"{n:04d}" + "t" * 2_000

    for n in range(198):
        set_before_the_register(slot_store, tenant(n), 5)
    assert slot_store.build_overrides() == 198
    # WHEN more overrides are set until one is refused
    added = 0
    with pytest.raises(errors.OverridesFull, match="400 KB"):
        for n in range(198, 210):
            slot_store.set_limit(tenant(n), 5)
            added += 1
    refused = tenant(198 + added)
    # THEN the refused one is written nowhere, and the register keeps what it held
    assert added < 12
    assert slot_store.held(refused) == ([], None)
    registered = slot_store.overrides()
    assert registered is not None and len(registered) == 198 + added
    assert refused not in registered
    # and clearing one makes room again
    slot_store.set_limit(tenant(0), None)
    slot_store.set_limit(refused, 5)
    assert slot_store.held(refused) == ([], 5)


def test_given_overrides_too_many_for_the_register_when_built_then_refused_and_still_unknown(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN overrides from before the register past its 400 KB (far longer ids than a
    # tenant's)
    for n in range(205):
        set_before_the_register(slot_store, f"{n:04d}" + "t" * 2_000, 5)
    # WHEN / THEN the build is refused, and the register stays unknown (never partial)
    with pytest.raises(errors.OverridesFull):
        slot_store.build_overrides()
    assert slot_store.overrides() is None


# --- tenants and races --------------------------------------------------------------------


def test_given_two_tenants_then_their_slots_and_limits_are_independent(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN both tenants take slot 0; one has an override
    assert slot_store.take(TENANT, 0, JOB_A, now_ms=NOW, expires_at_ms=NOW + TTL)
    assert slot_store.take(OTHER_TENANT, 0, JOB_B, now_ms=NOW, expires_at_ms=NOW + 2 * TTL)
    slot_store.set_limit(TENANT, 3)
    # WHEN one tenant gives its slot back
    slot_store.give_back(TENANT, 0, JOB_A)
    # THEN the other's slot and limit are untouched
    assert slot_store.held(TENANT) == ([], 3)
    assert slot_store.held(OTHER_TENANT) == ([quota.Slot(0, JOB_B, NOW + 2 * TTL)], None)


def test_given_an_override_past_a_keys_block_then_every_number_below_it_is_held_and_given_back(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN a tenant whose override (800) reaches past the first block of numbers, so its
    # slots lie on several keys, and slots taken in each block and in its class band (the
    # override written as a plain put, so the test runs where transactions do not)
    set_before_the_register(slot_store, TENANT, 800)
    numbers = [0, quota.SLOT_KEY_BLOCK - 1, quota.SLOT_KEY_BLOCK, 520, 799]
    band = quota.class_band(1, 800)
    numbers += [band[0], band[quota.SLOT_KEY_BLOCK + 3], quota.invocation_band(1, 10)[9]]
    for n, number in enumerate(numbers):
        assert slot_store.take(TENANT, number, f"job-{n}", now_ms=NOW, expires_at_ms=NOW + TTL)
    if isinstance(slot_store, slots_dynamodb.DynamoSlotStore):
        # (on DynamoDB, over four partition keys of the tenant's)
        items = slot_store._client.scan(TableName=slot_store._table)["Items"]
        keys = {i["tenant_id"]["S"] for i in items if int(i["slot"]["N"]) >= 0}
        assert keys == {TENANT, f"{TENANT}#1", f"{TENANT}#2", f"{TENANT}#3"}
    # THEN one read lists every one of them, the override beside them
    held, limit = slot_store.held(TENANT)
    assert limit == 800
    assert sorted(s.number for s in held) == sorted(numbers)
    # AND a number held elsewhere is refused, and each gives back where it lies
    assert not slot_store.take(TENANT, 520, "another", now_ms=NOW, expires_at_ms=NOW + TTL)
    for n, number in enumerate(numbers):
        slot_store.give_back(TENANT, number, f"job-{n}")
    assert slot_store.held(TENANT) == ([], 800)
    # AND those keys are nobody else's: the tenant without the override holds nothing
    assert slot_store.held(OTHER_TENANT) == ([], None)


def test_given_workers_racing_for_one_slot_then_exactly_one_holds_it(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN eight jobs starting together
    start = threading.Barrier(8)
    results: dict[str, bool] = {}

    def worker(holder: str) -> None:
        start.wait()
        results[holder] = slot_store.take(TENANT, 0, holder, now_ms=NOW, expires_at_ms=NOW + TTL)

    # WHEN they all take slot 0 at once
    threads = [threading.Thread(target=worker, args=(f"job-{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN one takes it, and it is the holder stored
    winners = [holder for holder, taken in results.items() if taken]
    assert len(results) == 8 and len(winners) == 1
    assert slot_store.held(TENANT) == ([quota.Slot(0, winners[0], NOW + TTL)], None)


# --- a class's register of live containers ---------------------------------------------

POOL = quota.pool_scope("default")


def test_given_members_joining_a_pool_then_each_join_counts_the_ones_alive(
    slot_store: ports.SlotStore,
) -> None:
    # WHEN two containers join, each alive for a minute
    assert slot_store.join_pool(POOL, "c1", now_ms=NOW, until_ms=NOW + TTL) == 1
    assert slot_store.join_pool(POOL, "c2", now_ms=NOW + 1, until_ms=NOW + TTL) == 2
    # THEN a join again counts each once
    assert slot_store.join_pool(POOL, "c1", now_ms=NOW + 2, until_ms=NOW + TTL) == 2
    # AND once c2's time is over, only c1 (joining again) counts
    later = NOW + TTL
    assert slot_store.join_pool(POOL, "c1", now_ms=later, until_ms=later + TTL) == 1
    # AND another class's register and the tenants' slots are apart from it
    assert (
        slot_store.join_pool(quota.pool_scope("short"), "c9", now_ms=NOW, until_ms=NOW + TTL) == 1
    )
    assert slot_store.held(TENANT) == ([], None)


def test_given_a_member_gone_for_long_then_the_pool_forgets_it(
    slot_store: ports.SlotStore,
) -> None:
    # GIVEN a container that joined once, and another that joins two hours later
    slot_store.join_pool(POOL, "old", now_ms=NOW, until_ms=NOW + TTL)
    later = NOW + 2 * 3_600_000
    assert slot_store.join_pool(POOL, "new", now_ms=later, until_ms=later + TTL) == 1
    # WHEN the old one comes back THEN it counts again (forgetting never loses a live one)
    assert slot_store.join_pool(POOL, "new", now_ms=later + 1, until_ms=later + TTL) == 1
    assert slot_store.join_pool(POOL, "old", now_ms=later + 2, until_ms=later + TTL) == 2
