"""The leased ticker's ticks start at a set phase of the wall clock's second, and a round
that picked up fires ahead of their time sends them at a later set phase, so they turn
visible a short, known time before their fire time (SQS counts delays in whole seconds):
the worker invocation that holds them waits that long, billed. A fire due sooner is
never held back for it."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

import pytest

from fireline.adapters import memory
from fireline.domain import errors, occurrence
from fireline.services import dispatch, schedules, ticker
from helpers.memory_system import MemorySystem


def ticker_of(
    system: MemorySystem, config: ticker.TickerConfig, *, use_lease: bool = True
) -> ticker.Ticker:
    return ticker.Ticker(
        schedules=system.schedules,
        occurrences=system.occurrences,
        queue=system.queue,
        leases=memory.MemoryLeaseStore(),
        clock=system.clock,
        owner="invocation",
        config=config,
        metrics=system.metrics,
        use_lease=use_lease,
    )


def ticks_of(system: MemorySystem, config: ticker.TickerConfig, seconds: float) -> list[datetime]:
    """When each tick of a leased ticker invocation of ``seconds`` started (wall clock)."""
    leased = ticker_of(system, config)
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


def one_off_at(system: MemorySystem, fire: datetime) -> None:
    system.service.create(
        "tenant-a",
        schedules.ScheduleDraft(
            spec=f"at({occurrence.format_fire_time(fire)})",
            target={"type": "python", "handler": "noop"},
        ),
    )


def test_a_fire_sent_by_a_tick_at_the_phase_is_visible_that_much_before_its_time() -> None:
    # GIVEN a one-off fire on a whole second that a leased ticker first picks up a few
    # seconds into its invocation, which started 0.137 s into a second
    system = MemorySystem()
    system.clock.advance(0.137)
    config = ticker.TickerConfig()
    start = system.clock.now().replace(microsecond=0)
    fire = start + timedelta(seconds=config.lookahead_seconds + 3)
    one_off_at(system, fire)
    # WHEN the ticker runs for ten seconds
    ticks_of(system, config, 10)
    # THEN the tick that picked it up (0.6 into a second) sent it at the send phase, 0.85
    # into the second: its message turns visible the event source mapping's batching
    # window before its fire time (its batch is gathered by then), and what was left of
    # that second, 0.15 s, more (sends at any phase: anything up to 1.1 s more)
    visible = system.queue.next_visible_at("default")
    assert visible is not None
    assert config.send_phase == 0.85
    assert config.batching_window_seconds == dispatch.BATCHING_WINDOW_SECONDS
    assert (fire - visible).total_seconds() == pytest.approx(
        1 - config.send_phase + config.batching_window_seconds
    )
    # AND the message says it was sent then (a claim's row keeps it as its queued time)
    system.clock.advance((visible - system.clock.now()).total_seconds())
    [message] = system.queue.receive("default")
    assert message.body["sent_at_ms"] % 1000 == 850


@pytest.mark.parametrize(
    ("into", "due_in", "visible_in"),
    [
        # a round at the tick's phase with a fire due 0.6 s ago: visible at once
        (0.6, -0.6, 0.0),
        # a round whose reads ran past the send phase: sent at once, so a fire on the
        # whole second two and a batching window on is visible a second on, the
        # batching window and 1.05 s before its time (its delay, counted from 0.1 s on,
        # crosses into the next second)
        (0.95, 2.05 + dispatch.BATCHING_WINDOW_SECONDS, 1.0),
    ],
)
def test_a_round_sends_at_once_when_holding_would_make_a_fire_later_or_its_phase_has_passed(
    into: float, due_in: float, visible_in: float
) -> None:
    # GIVEN a fire on a whole second, and a tick that starts ``into`` a second
    system = MemorySystem()
    fire = system.clock.now().replace(microsecond=0) + timedelta(seconds=5)
    one_off_at(system, fire)
    system.clock.advance((fire - system.clock.now()).total_seconds() - due_in)
    started = system.clock.now()
    assert round(started.microsecond / 1_000_000, 3) == into
    # WHEN it ticks
    report = ticker_of(system, ticker.TickerConfig(), use_lease=False).tick()
    # THEN it sent the fire without waiting for the send phase
    assert report.dispatched.sent == 1
    assert system.clock.now() == started
    visible = system.queue.next_visible_at("default")
    assert visible is not None
    assert (visible - started).total_seconds() == pytest.approx(visible_in)
    assert report.enqueue_lags_ms == [max(0.0, -due_in * 1000)]


@pytest.mark.parametrize(("phase", "value"), [("tick_phase", 1.0), ("send_phase", 0.9)])
def test_a_phase_outside_the_second_is_refused(phase: str, value: float) -> None:
    # send_phase 0.9: a delay counted from 0.1 s past it would cross into the next second
    with pytest.raises(errors.ValidationError) as refused:
        ticker.TickerConfig(**{phase: value})
    assert refused.value.field == phase


def minutely_in_every_shard(system: MemorySystem, count: int) -> None:
    for _ in range(count):
        system.service.create(
            "tenant-a",
            schedules.ScheduleDraft(
                spec="cron(* * * * *)", target={"type": "python", "handler": "noop"}
            ),
        )


def test_a_ticker_that_kept_up_reads_every_shard_in_its_passs_first_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN 200 every-minute schedules over the 16 shards, and a ticker whose every read
    # of a shard's page is noted with the round it was made in
    system = MemorySystem()
    minutely_in_every_shard(system, 200)
    tk = ticker_of(system, ticker.TickerConfig(), use_lease=False)
    reads: list[tuple[int, int]] = []
    rounds = [0]
    due, one_round = system.schedules.due, tk._round

    def noted_due(shard: int, **kwargs: Any) -> Any:
        reads.append((rounds[0], shard))
        return due(shard, **kwargs)

    def counted_round(*args: Any) -> None:
        rounds[0] += 1
        one_round(*args)

    monkeypatch.setattr(system.schedules, "due", noted_due)
    monkeypatch.setattr(tk, "_round", counted_round)
    # WHEN a cold ticker's first pass runs (its rounds sized by pace: a shard or two each)
    cold = tk.tick()
    assert cold.drained and cold.advanced == 200
    cold_first = {shard for n, shard in reads if n == 1}
    # AND a pass comes after it, which kept up, with fires to pick up again (the first
    # pass sent fires up to the horizon; the next comes within the lookahead)
    reads.clear()
    rounds[0] = 0
    system.clock.advance(960 - ticker.TickerConfig().lookahead_seconds)
    warm = tk.tick()
    # THEN the cold pass's first round read two shards, the warm one's every shard
    assert warm.advanced == 200
    assert len(cold_first) == 2
    assert {shard for n, shard in reads if n == 1} == set(range(16))


class SlowSends:
    """A queue whose every send takes ``seconds`` of the clock (a second's worth of
    batches, their client CPU), noting when each message turns visible."""

    def __init__(self, system: MemorySystem, seconds: float) -> None:
        self.system = system
        self.seconds = seconds
        self.visible: dict[str, datetime] = {}

    def send_batch(self, job_class: str, messages: Any) -> list[str]:
        now = self.system.clock.now()
        for message in messages:
            self.visible[message.body["occurrence_key"]] = now + timedelta(
                seconds=message.delay_seconds
            )
        failed = self.system.queue.send_batch(job_class, messages)
        self.system.clock.advance(self.seconds)
        return list(failed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.system.queue, name)


def test_a_round_holds_its_sends_to_end_by_the_send_phase_as_long_as_the_last_ones_took() -> None:
    # GIVEN a ticker whose last round's sends took 0.2 s
    system = MemorySystem()
    config = ticker.TickerConfig()
    start = system.clock.now().replace(microsecond=0)
    one_off_at(system, start + timedelta(seconds=config.lookahead_seconds + 1))
    queue = SlowSends(system, 0.2)
    tk = ticker.Ticker(
        schedules=system.schedules,
        occurrences=system.occurrences,
        queue=queue,  # type: ignore[arg-type]
        leases=memory.MemoryLeaseStore(),
        clock=system.clock,
        owner="invocation",
        config=config,
        use_lease=False,
    )
    system.clock.advance((start + timedelta(seconds=2.6) - system.clock.now()).total_seconds())
    assert tk.tick().dispatched.sent == 1
    # WHEN a later tick at the tick phase picks up a fire due on a whole second
    second = start + timedelta(seconds=config.lookahead_seconds + 3)
    one_off_at(system, second)
    system.clock.advance((start + timedelta(seconds=3.6) - system.clock.now()).total_seconds())
    report = tk.tick()
    # THEN it sent at the send phase less those 0.2 s, 0.65 into the second: the fire is
    # visible 0.35 s before the batching window (a send at 0.85 that took as long would
    # leave what came after it past the phase, visible over a second more early)
    assert report.dispatched.sent == 1
    [key] = report.dispatched.keys
    window = config.batching_window_seconds
    assert (second - queue.visible[key]).total_seconds() == pytest.approx(0.35 + window)
