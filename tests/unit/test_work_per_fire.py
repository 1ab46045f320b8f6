"""The CPU a recurring fire costs the worker on the memory adapters, pinned by what it
does rather than how long it takes: the expensive steps cut from every fire stay cut
(tests/bench/bench_peer.py measures the time)."""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from aws_lambda_powertools.utilities.idempotency import base as powertools_idempotency

from fireline.adapters import memory
from fireline.domain import occurrence
from fireline.services import dispatch, schedules
from fireline.services.worker import Result
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
