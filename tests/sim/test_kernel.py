"""The simulation kernel and network: virtual time, CPU shares, kills, determinism."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fireline.adapters import memory
from fireline.domain import errors
from fireline.services.worker import idempotency
from fireline.sim import kernel as sim_kernel
from fireline.sim import network as sim_network

START = datetime(2026, 5, 1, 12, tzinfo=UTC)


@pytest.fixture
def kernel() -> sim_kernel.Kernel:
    k = sim_kernel.Kernel(START)
    yield k
    k.close()


def test_threads_run_in_virtual_time_order(kernel: sim_kernel.Kernel) -> None:
    # GIVEN two threads that sleep different amounts in turn
    seen: list[tuple[str, float]] = []

    def sleeper(name: str, step: float) -> None:
        for _ in range(3):
            kernel.sleep(step)
            seen.append((name, kernel.now()))

    kernel.spawn(lambda: sleeper("a", 2.0), name="a")
    kernel.spawn(lambda: sleeper("b", 3.0), name="b")
    # WHEN the kernel runs to the end
    kernel.run_all()
    # THEN each woke at its own virtual times, in time order (a tie in the order the
    # wake-ups were set), whatever real time took
    assert seen == [("a", 2.0), ("b", 3.0), ("a", 4.0), ("b", 6.0), ("a", 6.0), ("b", 9.0)]


def test_a_processs_threads_share_its_cpu(kernel: sim_kernel.Kernel) -> None:
    # GIVEN a process with half a vCPU whose two threads each do 1 s of (modelled) work
    process = sim_kernel.Process("lambda", share=0.5, measure=False)
    ended: dict[str, float] = {}

    def work(name: str) -> None:
        kernel.charge(1.0)
        ended[name] = kernel.now()

    kernel.spawn(lambda: work("first"), process=process)
    kernel.spawn(lambda: work("second"), process=process)
    # WHEN they run
    kernel.run_all()
    # THEN each second of work took two virtual seconds, one after the other
    assert ended == {"first": 2.0, "second": 4.0}
    assert process.cpu_used == 4.0


def test_thousands_of_threads_wait_at_once_and_each_keeps_its_own_record_state(
    kernel: sim_kernel.Kernel,
) -> None:
    # GIVEN 20,000 threads, each binding the worker's per-thread record state (what
    # Powertools' claim reads back) and then waiting, all at once, as a burst's records do
    layer = idempotency.OccurrenceIdempotency(
        memory.MemoryOccurrenceStore(), clock=memory.FakeClock(START)
    )
    seen: dict[int, object] = {}

    def record(n: int) -> None:
        layer.bind(lambda: n)
        kernel.sleep(1.0 + (n % 7) / 10)
        seen[n] = layer.get_remaining_time_in_millis()

    for n in range(20_000):
        kernel.spawn(lambda n=n: record(n), name=f"record-{n}")
    # WHEN they run
    kernel.run_all()
    # THEN every one ran, and read back what it bound itself, not what another thread
    # bound while it waited
    assert seen == {n: n for n in range(20_000)}
    assert kernel.idle()


def test_a_killed_invocation_stops_where_it_was(kernel: sim_kernel.Kernel) -> None:
    # GIVEN an invocation with a 10 s deadline whose thread works in 4 s steps
    process = sim_kernel.Process("lambda", share=1.0, measure=False)
    kernel.kill_at(process, 10.0)
    steps: list[float] = []
    finished: list[bool] = []

    def handler() -> None:
        try:
            while True:
                kernel.sleep(4.0)
                steps.append(kernel.now())
        finally:
            finished.append(True)  # unwinding runs, but can make no call (below)

    kernel.spawn(handler, process=process)
    # WHEN time passes the deadline
    kernel.run(30.0)
    # THEN it made the steps before the deadline and none after
    assert steps == [4.0, 8.0]
    assert finished == [True]
    assert process.killed


def test_a_call_killed_on_its_way_back_took_effect(kernel: sim_kernel.Kernel) -> None:
    # GIVEN a store behind a network of 10 ms round trips, and an invocation killed 6 ms
    # into its call: after the request landed (at 5 ms), before the answer came back
    network = sim_network.Network(
        kernel, seed=1, latency=sim_network.LatencyModel(median_ms=10, p99_ms=10)
    )
    store = memory.MemoryLeaseStore()
    leases = sim_network.Latent(store, network, sim_network.LEASE_OPS)
    process = sim_kernel.Process("lambda", share=1.0, measure=False)
    outcome: list[str] = []

    def handler() -> None:
        held = leases.acquire("ticker", "me", 0, _terms())
        outcome.append(f"acquired {held.token}")

    kernel.spawn(handler, process=process)
    kernel.kill_at(process, 0.006)
    # WHEN it runs
    kernel.run_all()
    # THEN the caller never learned of it, but the lease was taken
    assert outcome == []
    assert store.get("ticker") is not None
    # AND a call made after the kill fails before it takes any effect
    late = sim_kernel.Process("late", share=1.0, measure=False)
    kernel.kill(late)
    kernel.spawn(lambda: leases.acquire("other", "me", 0, _terms()), process=late)
    kernel.run_all()
    assert store.get("other") is None


def test_partition_writes_past_the_limit_are_throttled_before_any_effect(
    kernel: sim_kernel.Kernel,
) -> None:
    # GIVEN one partition limited to 5 write units a second
    network = sim_network.Network(kernel, seed=1, partition_units_per_second=5)
    op = sim_network.Op("dynamodb.PutItem", lambda args, kwargs: ["slots/tenant-a"])
    applied: list[int] = []
    results: list[str] = []

    def writer() -> None:
        for n in range(8):
            try:
                network.call(op, lambda n=n: applied.append(n), (), {})
                results.append("ok")
            except errors.Unavailable:
                results.append("throttled")

    kernel.spawn(writer)
    # WHEN eight writes go out back to back (a few milliseconds apart)
    kernel.run_all()
    # THEN five went through and the rest were throttled, having changed nothing
    assert results.count("ok") == 5 and results.count("throttled") == 3
    assert len(applied) == 5
    assert network.throttled["dynamodb.PutItem"] == 3


def test_a_throttled_write_goes_again_as_the_clients_retries_do(
    kernel: sim_kernel.Kernel,
) -> None:
    # GIVEN one partition limited to 1 write unit a second, and a client that makes up to
    # three attempts of a throttled call (the deployed client's standard retries)
    network = sim_network.Network(kernel, seed=7, partition_units_per_second=1, attempts=3)
    op = sim_network.Op("dynamodb.PutItem", lambda args, kwargs: ["slots/tenant-a"])
    applied_at: list[float] = []
    failed: list[str] = []

    def writer() -> None:
        for _ in range(2):
            try:
                network.call(op, lambda: applied_at.append(kernel.now()), (), {})
            except errors.Unavailable as exc:
                failed.append(str(exc))

    kernel.spawn(writer)
    # WHEN two writes go out back to back
    kernel.run_all()
    # THEN the first went through at once; the second was throttled and went again after
    # the client's waits: it landed once the partition had a unit again (a second on), or
    # failed after its three attempts, having changed nothing
    throttled = network.throttled["dynamodb.PutItem"]
    assert throttled >= 1
    if failed:
        assert len(applied_at) == 1 and throttled == 3
        assert network.throttled_out["dynamodb.PutItem"] == 1
    else:
        assert len(applied_at) == 2 and 1 <= throttled <= 2
        assert applied_at[1] - applied_at[0] >= 0.9
        assert network.throttled_out["dynamodb.PutItem"] == 0


def _latencies(seed: int) -> list[float]:
    k = sim_kernel.Kernel(START)
    network = sim_network.Network(k, seed=seed)
    store = memory.MemoryLeaseStore()
    leases = sim_network.Latent(store, network, sim_network.LEASE_OPS)
    ends: list[float] = []

    def calls() -> None:
        for n in range(20):
            leases.get(f"lease-{n}")
            ends.append(k.now())

    k.spawn(calls)
    k.run_all()
    k.close()
    return ends


def test_the_same_seed_gives_the_same_run() -> None:
    assert _latencies(7) == _latencies(7)
    assert _latencies(7) != _latencies(8)


def test_latencies_follow_the_stated_median_and_tail() -> None:
    import random

    model = sim_network.LatencyModel(median_ms=5.0, p99_ms=25.0)
    rng = random.Random(3)
    draws = sorted(model.draw(rng) * 1000 for _ in range(20_000))
    assert draws[10_000] == pytest.approx(5.0, rel=0.05)
    assert draws[19_800] == pytest.approx(25.0, rel=0.1)


def _terms() -> object:
    from fireline.domain import lease

    return lease.LeaseTerms()
