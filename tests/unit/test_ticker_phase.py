"""The leased ticker's ticks start at a set phase of the wall clock's second, so the fires
it sends turn visible a short, known time before their fire time (SQS counts delays in
whole seconds): the worker invocation that holds them waits that long, billed."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

import pytest

from fireline.adapters import memory
from fireline.domain import errors, occurrence
from fireline.services import schedules, ticker
from helpers.memory_system import MemorySystem


def ticks_of(system: MemorySystem, config: ticker.TickerConfig, seconds: float) -> list[datetime]:
    """When each tick of a leased ticker invocation of ``seconds`` started (wall clock)."""
    leased = ticker.Ticker(
        schedules=system.schedules,
        occurrences=system.occurrences,
        queue=system.queue,
        leases=memory.MemoryLeaseStore(),
        clock=system.clock,
        owner="invocation",
        config=config,
        metrics=system.metrics,
    )
    starts: list[datetime] = []
    tick = leased.tick

    def noted(*args: Any, **kwargs: Any) -> ticker.TickReport:
        starts.append(system.clock.now())
        return tick(*args, **kwargs)

    leased.tick = noted  # type: ignore[method-assign]
    end = system.clock.monotonic() + seconds + config.stop_before_end_ms / 1000
    leased.run(lambda: int((end - system.clock.monotonic()) * 1000))
    return starts


def test_ticks_start_at_the_phase_of_the_second_after_the_first() -> None:
    # GIVEN a leased ticker whose invocation starts 0.137 s into a second, with work to do
    system = MemorySystem()
    system.clock.advance(0.137)
    for _ in range(3):
        system.service.create(
            "tenant-a",
            schedules.ScheduleDraft(
                spec="cron(* * * * *)", target={"type": "python", "handler": "noop"}
            ),
        )
    config = ticker.TickerConfig()
    # WHEN it ticks for ten seconds
    starts = ticks_of(system, config, 10)
    # THEN its first tick starts at once, and every later one 0.6 into a second,
    # a second apart
    assert starts[0].microsecond == 137_000
    phases = {round(moment.timestamp() % 1, 3) for moment in starts[1:]}
    assert phases == {config.tick_phase}
    gaps = {round((b - a).total_seconds(), 3) for a, b in itertools.pairwise(starts[1:])}
    assert gaps == {1.0}
    assert len(starts) == 10


def test_a_fire_sent_by_a_tick_at_the_phase_is_visible_that_much_before_its_time() -> None:
    # GIVEN a one-off fire on a whole second that a leased ticker first picks up a few
    # seconds into its invocation, which started 0.137 s into a second
    system = MemorySystem()
    system.clock.advance(0.137)
    config = ticker.TickerConfig()
    start = system.clock.now().replace(microsecond=0)
    fire = start + timedelta(seconds=config.lookahead_seconds + 3)
    system.service.create(
        "tenant-a",
        schedules.ScheduleDraft(
            spec=f"at({occurrence.format_fire_time(fire)})",
            target={"type": "python", "handler": "noop"},
        ),
    )
    # WHEN the ticker runs for ten seconds
    ticks_of(system, config, 10)
    # THEN its message turns visible what was left of the second the tick sent it in,
    # 0.4 s before its fire time (ticks at any phase: anything up to 1.25 s)
    visible = system.queue.next_visible_at("default")
    assert visible is not None
    assert (fire - visible).total_seconds() == pytest.approx(1 - config.tick_phase)


def test_a_phase_outside_the_second_is_refused() -> None:
    with pytest.raises(errors.ValidationError) as refused:
        ticker.TickerConfig(tick_phase=1.0)
    assert refused.value.field == "tick_phase"
