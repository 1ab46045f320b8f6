"""Benchmarks of the ticker on the memory adapters (our code, not the emulator's speed).

Prints figures; never fails on time. Run with `make bench`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from fireline.adapters import memory
from fireline.domain import model, schedule
from fireline.services import ticker

START = datetime(2026, 5, 1, 11, 59, 50, tzinfo=UTC)


def build(count: int, spec: str) -> tuple[ticker.Ticker, memory.FakeClock, memory.MemoryWorkQueue]:
    clock = memory.FakeClock(START)
    schedules = memory.MemoryScheduleStore()
    timing = schedule.Timing(spec=schedule.parse_spec(spec))
    first = schedule.next_fire(timing, START)
    for n in range(count):
        schedules.create(
            model.Schedule(
                tenant_id=f"tenant-{n % 100}",
                schedule_id=f"sch_{n:07d}",
                timing=timing,
                spec_text=spec,
                next_fire=first,
            )
        )
    queue = memory.MemoryWorkQueue(clock)
    tk = ticker.Ticker(
        schedules=schedules,
        occurrences=memory.MemoryOccurrenceStore(),
        queue=queue,
        leases=memory.MemoryLeaseStore(),
        clock=clock,
        owner="bench",
        use_lease=False,
        # Picked up 10 s ahead: the lookahead within the horizon, as TickerConfig requires.
        config=ticker.TickerConfig(horizon_seconds=10, lookahead_seconds=10),
    )
    return tk, clock, queue


def test_top_of_the_hour_burst() -> None:
    for count in (5_000, 50_000):
        # GIVEN `count` hourly schedules all due at 12:00:00, picked up 10 s early
        tk, _, queue = build(count, "cron(0 * * * *)")
        started = time.perf_counter()
        report = tk.tick()
        elapsed = time.perf_counter() - started
        sent = report.dispatched.sent
        print(
            f"\nburst of {count:,} due in one second: {sent:,} materialized in {elapsed:.2f} s "
            f"({sent / elapsed:,.0f} fires/s on one core, memory adapters); "
            f"{queue.requests['SendMessageBatch']:,} SendMessageBatch requests"
        )
        assert sent == count


def test_steady_minutely_load() -> None:
    # GIVEN 30,000 schedules every minute (500 fires/s), ticked for two minutes
    tk, clock, _ = build(30_000, "rate(1 minute)")
    fires = 0
    started = time.perf_counter()
    for _ in range(120):
        fires += tk.tick().dispatched.sent
        clock.advance(1)
    elapsed = time.perf_counter() - started
    print(
        f"\n30,000 minutely schedules, 120 ticks: {fires:,} fires in {elapsed:.2f} s of CPU "
        f"({elapsed / 120 * 1000:.1f} ms per tick on average, against a 1,000 ms budget)"
    )
    assert fires >= 30_000
    assert clock.now() - START == timedelta(seconds=120)
