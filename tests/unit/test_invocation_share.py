"""A tenant's share of a class's invocations as really running (fireline.services.pool),
on the memory adapters: two workers stand for two containers of a class configured for
50, the local cloud's two processes. Counted outcomes only."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from fireline.domain import occurrence, quota
from fireline.services import pool, targets
from fireline.services.worker import Result, Worker
from helpers.memory_system import REMAINING_MS, MemorySystem

CONFIGURED = 50  # the default class's CLASS_MAX_CONCURRENCY


def remaining() -> int:
    return REMAINING_MS


class Gate:
    """A handler that holds every job it runs until the test opens the gate."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.entered = threading.Semaphore(0)

    def __call__(self, context: targets.JobContext) -> None:
        self.entered.release()
        assert self.opened.wait(60)


def containers(system: MemorySystem, count: int) -> list[Worker]:
    """``count`` workers of the default class, each its own container, all alive."""
    workers = [
        system.worker(
            tenant_limit=quota.DEFAULT_LIMIT,
            class_max_concurrency=CONFIGURED,
            pool_member=f"container-{n}",
        )
        for n in range(count)
    ]
    for worker in workers:  # each says it is alive as an invocation starts
        worker.handle_batch([], remaining_ms=remaining, parallel=_InTurn())
    return workers


class _InTurn:
    def run(self, calls: list[Any]) -> list[Any]:
        return [call() for call in calls]


def pools_alive(system: MemorySystem, count: int, slots: Any = None) -> list[pool.Pool]:
    """``count`` containers' pools of the default class, each having said it is alive and
    then learnt how many are (two refresh periods)."""
    alive = [
        pool.Pool(
            slots=slots or system.slots,
            clock=system.clock,
            job_class="default",
            member=f"container-{n}",
            configured=CONFIGURED,
        )
        for n in range(count)
    ]
    for _ in range(2):
        for container in alive:
            container.observe(REMAINING_MS)
        system.clock.advance(pool.REFRESH_SECONDS)
    return alive


def held_jobs(
    system: MemorySystem, worker: Worker, tenant_id: str, count: int, gate: Gate
) -> tuple[list[dict[str, Any]], threading.Thread]:
    """``count`` jobs of ``tenant_id`` running side by side in one batch of ``worker``."""
    bodies = [
        system.due_job(tenant_id, target={"type": "python", "handler": "gate"})
        for _ in range(count)
    ]

    class Threads:
        def run(self, calls: list[Any]) -> list[Any]:
            results: list[Any] = [None] * len(calls)

            def one(index: int) -> None:
                results[index] = calls[index]()

            threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            return results

    thread = threading.Thread(
        target=worker.handle_batch,
        args=(bodies,),
        kwargs={"remaining_ms": remaining, "parallel": Threads()},
    )
    thread.start()
    for _ in bodies:
        assert gate.entered.acquire(timeout=60)
    return bodies, thread


def test_a_tenant_holding_one_of_two_invocations_waits_while_another_tenant_runs() -> None:
    # GIVEN a class configured for 50 whose pool really is two containers, and tenant A's
    # three jobs running side by side in the first one (its share of jobs is 25)
    system = MemorySystem()
    gate = Gate()
    system.registry.register("gate")(gate)
    first, second = containers(system, 2)
    running, batch = held_jobs(system, first, "A", 3, gate)
    try:
        # WHEN A's fourth job and B's first reach the second container
        fourth = system.due_job("A")
        other = system.due_job("B")
        # THEN A's waits (deferred, no attempt spent), and B's runs
        assert second.handle(fourth, remaining_ms=remaining) is Result.DEFERRED
        assert system.row(fourth).state is occurrence.State.QUEUED
        assert system.row(fourth).attempts == 0
        assert second.handle(other, remaining_ms=remaining) is Result.SUCCEEDED
        # AND A's three jobs occupy one invocation slot between them, the first container's
        held, _ = system.slots.held("A")
        band = set(quota.invocation_band(0, quota.class_limit(CONFIGURED)))
        assert [s.holder for s in held if s.number in band] == ["container-0"]
        print(
            f"\nA's {len(running)} jobs held {len([s for s in held if s.number in band])} of 2 "
            f"containers of a class configured for {CONFIGURED}: A's fourth job deferred, "
            "B's job succeeded"
        )
    finally:
        gate.opened.set()
        batch.join(60)
    assert all(system.row(b).state is occurrence.State.SUCCEEDED for b in running)
    # AND once they ended, the slot is given back, and A's fourth runs anywhere
    held, _ = system.slots.held("A")
    assert not [s for s in held if s.number in band]
    assert second.handle(fourth, remaining_ms=remaining) is Result.SUCCEEDED


def test_a_container_whose_pool_read_failed_still_holds_a_tenant_to_its_share(
    monkeypatch: Any,
) -> None:
    # GIVEN a pool of three containers, the third of which could not read the register as
    # its invocation started (so it does not know how many are alive), and tenant A's job
    # running in the first one
    system = MemorySystem()
    gate = Gate()
    system.registry.register("gate")(gate)
    first, _second = containers(system, 2)
    third = system.worker(
        tenant_limit=quota.DEFAULT_LIMIT,
        class_max_concurrency=CONFIGURED,
        pool_member="container-2",
    )

    def unreadable(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("the register is unreadable")

    with monkeypatch.context() as patched:
        patched.setattr(system.slots, "join_pool", unreadable)
        third.handle_batch([], remaining_ms=remaining, parallel=_InTurn())
    running, batch = held_jobs(system, first, "A", 1, gate)
    try:
        # WHEN A's next job reaches the third container, and B's job too
        next_one = system.due_job("A")
        other = system.due_job("B")
        # THEN A's waits (it occupies an invocation already), and B's runs
        assert third.handle(next_one, remaining_ms=remaining) is Result.DEFERRED
        assert third.handle(other, remaining_ms=remaining) is Result.SUCCEEDED
    finally:
        gate.opened.set()
        batch.join(60)
    # AND the next invocation reads the register again: three containers are alive
    third.handle_batch([], remaining_ms=remaining, parallel=_InTurn())
    assert third.handle(next_one, remaining_ms=remaining) is Result.SUCCEEDED
    assert all(system.row(b).state is occurrence.State.SUCCEEDED for b in running)


def test_containers_left_holding_a_tenants_slots_run_no_more_of_it_than_its_share() -> None:
    # GIVEN a pool of three containers (tenant A's share: one), two of which still hold a
    # slot of A from invocations whose give-backs failed (taken while the pool was larger,
    # so two of them), until those slots expire
    system = MemorySystem()
    gate = Gate()
    system.registry.register("gate")(gate)
    first, second, third = containers(system, 3)
    now_ms = int(system.clock.now().timestamp() * 1000)
    band = quota.invocation_band(0, quota.class_limit(CONFIGURED))
    for number, holder in zip(band, ["container-1", "container-2"], strict=False):
        assert system.slots.take("A", number, holder, now_ms=now_ms, expires_at_ms=now_ms + 600_000)
    # WHEN A's jobs reach the second container (it runs one) and then the third
    running, batch = held_jobs(system, second, "A", 1, gate)
    try:
        next_one = system.due_job("A")
        other = system.due_job("B")
        # THEN the third, though it holds a slot of A's too, does not run a second job of
        # A's beside the second container's: A waits (deferred, no attempt spent), and B's
        # job runs in the first
        assert third.handle(next_one, remaining_ms=remaining) is Result.DEFERRED
        assert system.row(next_one).attempts == 0
        assert first.handle(other, remaining_ms=remaining) is Result.SUCCEEDED
        print(
            "\nA held slots in 2 of 3 containers (its share: 1) and ran 1 job: "
            "its next job deferred, B's job succeeded"
        )
    finally:
        gate.opened.set()
        batch.join(60)
    assert all(system.row(b).state is occurrence.State.SUCCEEDED for b in running)


def test_without_the_pool_the_configured_share_lets_one_tenant_take_both_containers() -> None:
    # GIVEN the same two containers counting only the configured size (no pool member)
    system = MemorySystem()
    gate = Gate()
    system.registry.register("gate")(gate)
    first, second = (
        system.worker(tenant_limit=quota.DEFAULT_LIMIT, class_max_concurrency=CONFIGURED)
        for _ in range(2)
    )
    _, batch = held_jobs(system, first, "A", 3, gate)
    try:
        # WHEN A's next job reaches the second container THEN it runs there too: both
        # containers would be A's, and B's next message would wait for one of A's jobs
        fourth = system.due_job("A", target={"type": "python", "handler": "noop"})
        assert second.handle(fourth, remaining_ms=remaining) is Result.SUCCEEDED
    finally:
        gate.opened.set()
        batch.join(60)


def test_a_tenant_alone_in_one_container_runs_every_job_of_its_batch() -> None:
    # GIVEN one container alive (a share of one invocation)
    system = MemorySystem()
    gate = Gate()
    system.registry.register("gate")(gate)
    (only,) = containers(system, 1)
    # WHEN A's batch of ten jobs runs in it THEN all ten run side by side
    bodies, batch = held_jobs(system, only, "A", 10, gate)
    gate.opened.set()
    batch.join(60)
    assert all(system.row(b).state is occurrence.State.SUCCEEDED for b in bodies)


def test_the_pool_counts_only_containers_alive() -> None:
    # GIVEN three containers that joined (the last to join sees all three)
    system = MemorySystem()
    workers = containers(system, 3)
    last = workers[2]._pool
    assert last is not None and last.size == 3
    # WHEN two of them start invocations again once the third's time is over
    system.clock.advance(REMAINING_MS / 1000 + workers[2].config.pool_refresh_seconds + 1)
    for worker in workers[:2]:
        worker.handle_batch([], remaining_ms=remaining, parallel=_InTurn())
    # THEN the pool is the two alive
    pool = workers[1]._pool
    assert pool is not None and pool.size == 2 and pool.share == 1


def test_a_record_held_until_its_fire_time_decides_its_share_on_the_pool_as_it_is_then() -> None:
    # GIVEN a container whose invocation started when it was the class's only one alive
    # (a burst's first, its records held until their fire time, a lead early), and a
    # tenant already running in another container
    system = MemorySystem()
    first = pool.Pool(
        slots=system.slots,
        clock=system.clock,
        job_class="default",
        member="first",
        configured=CONFIGURED,
    )
    first.observe(REMAINING_MS)
    assert first.share == quota.class_limit(1)
    others = [
        pool.Pool(
            slots=system.slots,
            clock=system.clock,
            job_class="default",
            member=f"c{n}",
            configured=CONFIGURED,
        )
        for n in range(9)
    ]
    for other in others:  # the event source scaled out meanwhile: 10 containers alive
        other.observe(REMAINING_MS)
    assert others[0].enter("tenant-a", REMAINING_MS)
    # WHEN its held record of the tenant comes due, past the register's refresh period
    system.clock.advance(pool.REFRESH_SECONDS + 1)
    # THEN its share is decided on the 10 containers alive now (5 each), not on the one
    # alive as its invocation started (1, which the other container's slot fills): it runs
    assert first.enter("tenant-a", REMAINING_MS)
    assert first.size == 10
    assert first.share == quota.class_limit(10)
    print(
        f"\nshare read as its invocation started: {quota.class_limit(1)}; at its fire time, "
        f"with {first.size} containers alive: {first.share}; its job ran"
    )


class _ReadBeforeTheRace:
    """The slot store as containers starting at one instant see it: every eventually
    consistent read answers what was there before any of them took a slot."""

    def __init__(self, inner: Any, tenant_id: str) -> None:
        self._inner = inner
        self._before = inner.held(tenant_id, consistent=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def held(self, tenant_id: str, *, consistent: bool = False) -> Any:
        return self._inner.held(tenant_id, consistent=True) if consistent else self._before


def test_containers_starting_one_tenants_jobs_at_one_instant_all_run_within_its_share() -> None:
    # GIVEN 20 containers of the class alive (a tenant's share: 10 of them), and 8 of
    # them starting a job of one tenant at the same instant (a burst's second), each
    # reading the tenant's slots before any of the others has taken one
    system = MemorySystem()
    racing = _ReadBeforeTheRace(system.slots, "tenant-a")
    containers_alive = pools_alive(system, 20, slots=racing)
    assert containers_alive[0].share == 10
    # WHEN each of the 8 enters the tenant
    entered = [c.enter("tenant-a", REMAINING_MS) for c in containers_alive[:8]]
    # THEN all 8 run it (the share has room for 10): none is deferred for a race it lost
    assert entered == [True] * 8
    held, _ = system.slots.held("tenant-a", consistent=True)
    assert len({s.holder for s in held}) == 8
    # AND the share still holds: of 4 more at the same instant, 2 run and 2 are deferred
    more = [c.enter("tenant-a", REMAINING_MS) for c in containers_alive[8:12]]
    assert sorted(more) == [False, False, True, True]
    print(
        f"\n{entered.count(True)} of 8 containers starting the tenant at one instant ran it "
        f"(its share: 10 of 20 alive); of 4 more, {more.count(True)} ran and "
        f"{more.count(False)} were deferred"
    )


def test_a_tenant_with_an_override_above_the_default_runs_in_its_weighted_share_never_all() -> None:
    # GIVEN 20 containers of the class alive (a tenant's share at the default limit: 10)
    system = MemorySystem()
    alive = pools_alive(system, 20)
    # WHEN every container starts a job of a tenant whose override is 32 times the default
    # limit, and of a tenant at the default limit
    big = [c.enter("tenant-big", REMAINING_MS, weight=32.0) for c in alive]
    usual = [c.enter("tenant-a", REMAINING_MS) for c in alive]
    # THEN the big tenant runs in all but one, the other in half, as before
    assert (big.count(True), usual.count(True)) == (19, 10)
    # AND an override of 1.5 times the default gives one and a half shares
    assert alive[0].share_of(1.5) == 15
    print(
        f"\n20 containers alive: a tenant with 32 times the default limit ran in "
        f"{big.count(True)}, one at the default in {usual.count(True)}"
    )


class _Counted:
    """The slot store, counting the reads and takes made on it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def held(self, tenant_id: str, *, consistent: bool = False) -> Any:
        self.calls["held"] += 1
        return self._inner.held(tenant_id, consistent=consistent)

    def take(self, *args: Any, **kwargs: Any) -> bool:
        self.calls["take"] += 1
        return bool(self._inner.take(*args, **kwargs))


def test_a_containers_jobs_of_a_tenant_past_its_share_ask_the_store_once_between_them() -> None:
    # GIVEN 4 containers alive (a tenant's share: 2 of them), two of which run tenant A
    system = MemorySystem()
    counted = _Counted(system.slots)
    alive = pools_alive(system, 4, slots=counted)
    assert alive[0].share == 2
    assert alive[0].enter("tenant-a", REMAINING_MS) and alive[1].enter("tenant-a", REMAINING_MS)
    counted.calls.clear()
    # WHEN the third container starts 50 of A's jobs (a burst's, in one invocation)
    entered = [alive[2].enter("tenant-a", REMAINING_MS) for _ in range(50)]
    # THEN each is refused, on the first one's read alone: no read or take per job
    assert entered == [False] * 50
    assert counted.calls == Counter({"held": 1})
    # AND a moment on, or in its next invocation, the container asks again
    system.clock.advance(pool.REFUSED_SECONDS)
    assert not alive[2].enter("tenant-a", REMAINING_MS)
    alive[2].end_invocation()
    assert not alive[2].enter("tenant-a", REMAINING_MS)
    assert counted.calls == Counter({"held": 3})
