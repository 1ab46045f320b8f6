"""A burst's fires go to their class's burst queue, visible a lead before their second, and
the worker that takes one early holds it until its time: an event source mapping adds
invocations only while messages wait (300 a minute), so a burst visible in its second would
wait minutes for invocations to start it (the end-to-end figures are bench_e2e's)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest

from fireline import ports
from fireline.adapters import memory
from fireline.domain import model, occurrence, policies, schedule
from fireline.services import schedules, ticker
from fireline.services.worker import Result
from fireline.services.worker import config as worker_config
from helpers.memory_system import REMAINING_MS, MemorySystem


class RecordingQueue:
    """The memory queue, each message's send time and delay recorded."""

    def __init__(self, inner: memory.MemoryWorkQueue, clock: ports.Clock) -> None:
        self.inner = inner
        self.clock = clock
        self.sent: list[tuple[str, str, datetime]] = []  # (class, key, visible at)

    def send_batch(self, job_class: str, messages: Sequence[ports.OutboundMessage]) -> list[str]:
        now = self.clock.now()
        for message in messages:
            visible = now + timedelta(seconds=message.delay_seconds)
            self.sent.append((job_class, message.body["occurrence_key"], visible))
        return self.inner.send_batch(job_class, messages)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def hourly(system: MemorySystem, count: int, due: datetime, job_class: str = "default") -> None:
    """``count`` schedules whose next fire is ``due`` (the top of an hour)."""
    timing = schedule.Timing(spec=schedule.parse_spec("cron(0 0 * * * *)"))
    for n in range(count):
        system.schedules.create(
            model.Schedule(
                tenant_id=f"tenant-{n % 50}",
                schedule_id=f"hour{n:05d}",
                timing=timing,
                spec_text="cron(0 0 * * * *)",
                target={"type": "http", "url": "https://example.com/hook"},
                misfire=policies.Misfire(),
                job_class=job_class,
                next_fire=due,
            )
        )


def tick_until_sent(
    system: MemorySystem, config: ticker.TickerConfig, count: int
) -> RecordingQueue:
    queue = RecordingQueue(system.queue, system.clock)
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
    for _ in range(100):
        tk.tick()
        if len(queue.sent) >= count:
            break
        system.clock.advance(1.0)
    assert len(queue.sent) == count
    return queue


def due_in_two_minutes(system: MemorySystem) -> datetime:
    """The next top of the hour, the clock moved to two minutes before it."""
    due = system.clock.now().replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    system.clock.advance((due - system.clock.now()).total_seconds() - 120)
    return due


BURSTING = {"default": model.BURST_QUEUES["default"]}


def test_a_bursts_fires_past_the_threshold_go_to_the_burst_queue_a_lead_early() -> None:
    # GIVEN 3,000 fires due in one second, two minutes ahead, and a ticker that sends a
    # second's fires past its first 1,000 to the class's burst queue, 60 s early
    system = MemorySystem()
    due = due_in_two_minutes(system)
    hourly(system, 3_000, due)
    config = ticker.TickerConfig(
        burst_lead_seconds=60, dense_second_fires=1_000, burst_queues=BURSTING
    )
    # WHEN it sends them
    queue = tick_until_sent(system, config, 3_000)
    # THEN the first 1,000 it sent went to the class's queue, visible within the second
    # before their batching window, as any fire of the class does; the other 2,000 to the
    # burst queue, visible the lead before that, all together (their batches full)
    window = config.batching_window_seconds
    by_queue = Counter(name for name, _, _ in queue.sent)
    assert by_queue == {"default": 1_000, "default-burst": 2_000}
    for name, _, visible in queue.sent:
        lead = 60.0 if name == "default-burst" else 0.0
        assert 0 <= (due - visible).total_seconds() - window - lead <= 1.1
    # AND each is one fire of the burst, sent once
    assert len({key for _, key, _ in queue.sent}) == 3_000


def test_groups_count_their_own_share_of_the_threshold() -> None:
    config = ticker.TickerConfig(groups=2, dense_second_fires=1_000)
    assert config.dense_per_group == 500


@pytest.mark.parametrize(
    ("job_class", "lead", "bursting"),
    [
        # a class without a burst queue (a long job's runner starts its execution and is
        # done: its fires are not held for)
        ("long", 60, BURSTING),
        # the lead turned off
        ("default", 0, BURSTING),
        # a deployment without a burst queue
        ("default", 60, {}),
    ],
)
def test_no_burst_queue_for_a_class_without_one_or_a_lead_of_zero(
    job_class: str, lead: int, bursting: dict[str, str]
) -> None:
    # GIVEN 1,500 fires of one second past a threshold of 1,000
    system = MemorySystem()
    due = due_in_two_minutes(system)
    hourly(system, 1_500, due, job_class=job_class)
    config = ticker.TickerConfig(
        burst_lead_seconds=lead, dense_second_fires=1_000, burst_queues=bursting
    )
    # WHEN the ticker sends them
    queue = tick_until_sent(system, config, 1_500)
    # THEN every one goes to its class's queue, visible within the second before its time
    # (and its class's batching window, if its worker holds it)
    assert {name for name, _, _ in queue.sent} == {job_class}
    window = config.batching_window_seconds if job_class in config.held_classes else 0.0
    early = [(due - visible).total_seconds() - window for _, _, visible in queue.sent]
    assert all(0 <= e <= 1.1 for e in early)


def test_a_lead_longer_than_a_worker_holds_is_refused_naming_it() -> None:
    with pytest.raises(ticker.errors.ValidationError) as raised:
        ticker.TickerConfig(burst_lead_seconds=ticker.MAX_BURST_LEAD_SECONDS + 1)
    assert raised.value.field == "burst_lead_seconds"


@pytest.mark.parametrize(
    ("early_seconds", "result"),
    [
        # within the lead (and the batching window and the clocks' margin): held until
        # its time, then run
        (50.0, Result.SUCCEEDED),
        (62.5, Result.SUCCEEDED),
        # further ahead than any burst's fire comes: back to the queue until its time
        (70.0, Result.DEFERRED),
    ],
)
def test_a_worker_holds_a_bursts_fire_until_its_time(early_seconds: float, result: Result) -> None:
    # GIVEN a worker of a deployment whose burst lead is 60 s, and a fire of the default
    # class delivered ``early_seconds`` before its time
    system = MemorySystem()
    view = system.service.create_job(
        "tenant-a",
        schedules.JobDraft(
            delay_seconds=early_seconds, target={"type": "python", "handler": "noop"}
        ),
    )
    fire = view.fire_time
    body = system.materialize(view.job.schedule_id, fire_time=fire)
    worker = system.worker(early_hold_seconds=worker_config.early_hold_for("default", 60))
    # WHEN it handles the fire
    outcome = worker.handle(body, remaining_ms=lambda: REMAINING_MS * 3)
    # THEN it ran at its time (the clock waited for it), or went back to the queue
    assert outcome is result
    if result is Result.SUCCEEDED:
        assert system.clock.now() >= fire
        assert system.row(body).state is occurrence.State.SUCCEEDED
    else:
        assert system.clock.now() < fire
