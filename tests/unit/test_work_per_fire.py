"""The CPU a recurring fire costs the worker on the memory adapters, pinned by what it
does rather than how long it takes: the expensive steps cut from every fire stay cut
(tests/bench/bench_peer.py measures the time)."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from aws_lambda_powertools.utilities.idempotency import base as powertools_idempotency

from fireline.adapters import memory, threads
from fireline.domain import occurrence
from fireline.services import dispatch, schedules
from fireline.services.worker import Result
from fireline.services.worker import intake as worker_module
from helpers.memory_system import REMAINING_MS, MemorySystem

FIRES = 5


def counting(calls: Counter[str], name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return real(*args, **kwargs)

    return counted


def test_a_recurring_fire_copies_only_its_key_and_neither_formats_nor_rebuilds_rows_field_by_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN the fires of an every-minute schedule as the ticker sends them (no row yet)
    system = MemorySystem()
    item = system.service.create(
        "tenant-a",
        schedules.ScheduleDraft(
            spec="cron(* * * * *)", target={"type": "python", "handler": "noop"}
        ),
    )
    assert item.next_fire is not None
    first = item.next_fire
    bodies = [dispatch.fire_message(item, first + timedelta(minutes=n)) for n in range(FIRES)]
    worker = system.worker(runner=system.runner(python=lambda handler, context, timeout: None))
    # AND every call of the steps that cost most per fire counted
    copied: list[Any] = []
    calls: Counter[str] = Counter()

    def deepcopy(value: Any, memo: Any = None) -> Any:
        copied.append(value)
        return copy.deepcopy(value, memo)

    monkeypatch.setattr(powertools_idempotency, "deepcopy", deepcopy)
    monkeypatch.setattr(
        occurrence, "format_fire_time", counting(calls, "format", occurrence.format_fire_time)
    )
    monkeypatch.setattr(memory, "replace", counting(calls, "replace", dataclasses.replace))
    # WHEN the worker runs each at its fire time
    results = []
    for body in bodies:
        due = occurrence.parse_key(body["occurrence_key"]).fire_time
        system.clock.advance((due - system.clock.now()).total_seconds())
        results.append(worker.handle(body, remaining_ms=lambda: REMAINING_MS))
    # THEN every fire ran once
    assert results == [Result.SUCCEEDED] * FIRES
    assert all(system.row(b).state is occurrence.State.SUCCEEDED for b in bodies)
    # AND Powertools' idempotency deep-copied only each fire's key, not its whole message
    assert copied == [{"occurrence_key": b["occurrence_key"]} for b in bodies]
    # AND no fire time was written out again to check a key's spelling, and the store
    # rebuilt no row through dataclasses.replace (claim and completion copy the row once)
    assert calls == Counter()


def every_minute(system: MemorySystem, fires: int) -> list[dict[str, Any]]:
    """The messages of ``fires`` fires of one every-minute schedule, as the ticker sends
    them (no rows yet), the clock at the last one's fire time."""
    item = system.service.create(
        "tenant-a",
        schedules.ScheduleDraft(
            spec="cron(* * * * *)", target={"type": "python", "handler": "noop"}
        ),
    )
    assert item.next_fire is not None
    bodies = [
        dispatch.fire_message(item, item.next_fire + timedelta(minutes=n)) for n in range(fires)
    ]
    last = occurrence.parse_key(bodies[-1]["occurrence_key"]).fire_time
    system.clock.advance((last - system.clock.now()).total_seconds())
    return bodies


def test_powertools_idempotency_is_set_up_once_per_worker_and_the_outcome_is_not_parsed_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a worker, and every construction of Powertools' idempotency counted from now on
    system = MemorySystem()
    bodies = every_minute(system, FIRES)
    worker = system.worker(runner=system.runner(python=lambda handler, context, timeout: None))
    calls: Counter[str] = Counter()
    monkeypatch.setattr(
        worker_module,
        "IdempotencyConfig",
        counting(calls, "config", worker_module.IdempotencyConfig),
    )
    monkeypatch.setattr(
        worker_module,
        "idempotent_function",
        counting(calls, "decorate", worker_module.idempotent_function),
    )
    monkeypatch.setattr(
        worker_module,
        "OccurrenceIdempotency",
        counting(calls, "layer", worker_module.OccurrenceIdempotency),
    )
    # AND every parse of JSON text counted (Powertools hands the outcome over as JSON)
    monkeypatch.setattr(json, "loads", counting(calls, "json.loads", json.loads))
    # WHEN it runs a batch of fires side by side, a thread each (as the handler does)
    with threads.ThreadPool(FIRES, name="test-record") as pool:
        results = worker.handle_batch(bodies, remaining_ms=lambda: REMAINING_MS, parallel=pool)
    # THEN each ran once, claimed under Powertools and completed with its own outcome
    assert results == [Result.SUCCEEDED] * FIRES
    rows = [system.row(b) for b in bodies]
    assert [(r.state, r.attempts) for r in rows] == [(occurrence.State.SUCCEEDED, 1)] * FIRES
    assert [r.result["attempt"] if r.result else None for r in rows] == [1] * FIRES
    # AND no fire built a configuration, a persistence layer or a guarded function of its
    # own, nor parsed its outcome back from the JSON Powertools made of it
    assert calls == Counter()


def test_a_batch_reports_each_count_once_with_the_sums_of_its_fires() -> None:
    # GIVEN a batch of fires
    system = MemorySystem()
    bodies = every_minute(system, FIRES)
    worker = system.worker(runner=system.runner(python=lambda handler, context, timeout: None))
    # WHEN the worker runs it, the records side by side
    with threads.ThreadPool(FIRES, name="test-record") as pool:
        results = worker.handle_batch(bodies, remaining_ms=lambda: REMAINING_MS, parallel=pool)
    # THEN every fire succeeded, and the count of successes is one data point for the batch
    # (a Powertools add_metric per batch, not per fire) with the same sum
    assert results == [Result.SUCCEEDED] * FIRES
    assert system.metrics.values("Succeeded") == [FIRES]
    # AND the start lag, a distribution, keeps one value per fire (each first attempt's
    # start less its fire time: the fires were a minute apart, the clock at the last; the
    # fake clock also moves with each read round's few milliseconds open, its sleep)
    lags = sorted(system.metrics.values("StartLag"))
    assert len(lags) == FIRES
    assert all(0 <= lag - n * 60_000 < 100 for n, lag in enumerate(lags)), lags


def test_a_single_message_reports_its_counts_before_the_call_returns() -> None:
    # GIVEN one fire handled on its own (a redelivery, a tool)
    system = MemorySystem()
    [body] = every_minute(system, 1)
    worker = system.worker(runner=system.runner(python=lambda handler, context, timeout: None))
    # WHEN the worker handles it, and then its repeat
    first = worker.handle(body, remaining_ms=lambda: REMAINING_MS)
    repeat = worker.handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN each call's counts are out when it returns
    assert (first, repeat) == (Result.SUCCEEDED, Result.SETTLED)
    assert system.metrics.values("Succeeded") == [1]
    assert system.metrics.values("DuplicateDeliveries") == [1]
