"""Story: two tickers run at once with no lease between them.

Both read the same due schedules, both send every fire, both deliveries of a fire race to
its claim. What keeps each fire to one run is the conditions on each item: the schedule's
advance on the next fire read, the occurrence's claim on the row's state. The control
removes those conditions and runs the same race: duplicates appear. (The same race on
moto: tests/integration/test_ticker.py::test_two_tickers_without_lease_converge_on_one_row_per_key.)
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from fireline.adapters import memory
from fireline.domain import occurrence
from fireline.services import claims, schedules, ticker
from helpers.memory_system import NOW, MemorySystem
from helpers.stale import FrozenReads

SCHEDULES = 30
FIRES_EACH = 3  # a minutely schedule, three fires inside the ticker's reach


class AdvanceWithoutCondition(memory.MemoryScheduleStore):
    """The control's schedule table: an advance overwrites whatever the other wrote."""

    def advance(self, tenant_id: str, schedule_id: str, **kwargs: Any) -> bool:
        current = self.get(tenant_id, schedule_id)
        if current is None:
            return False
        kwargs.update(expected_next_fire=current.next_fire, expected_version=current.version)
        return super().advance(tenant_id, schedule_id, **kwargs)


class ClaimWithoutCondition(memory.MemoryOccurrenceStore):
    """The control's occurrence table: a claim takes the row whatever its state."""

    def claim(self, key: str, **kwargs: Any) -> tuple[bool, occurrence.Occurrence | None]:
        with self._lock:
            current = self._items.get(key)
            if current is not None:
                self._items[key] = replace(current, state=occurrence.State.QUEUED)
            return super().claim(key, **kwargs)


class Together:
    """A store whose ``method`` makes each thread's first call wait for the other's: the
    two read the same state before either writes."""

    def __init__(self, inner: Any, method: str, barrier: threading.Barrier) -> None:
        self._inner = inner
        self._method = method
        self._barrier = barrier
        self._waited = threading.local()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name != self._method:
            return attr

        def together(*args: Any, **kwargs: Any) -> Any:
            found = attr(*args, **kwargs)
            if not getattr(self._waited, "done", False):
                self._waited.done = True
                self._barrier.wait(timeout=30)
            return found

        return together


def side_by_side(work: Callable[[Any], Any], stores: list[Any]) -> list[Any]:
    """Run ``work(store)`` on two threads at once; their results in order."""
    results: list[Any] = [None, None]
    failures: list[BaseException] = []

    def one(index: int) -> None:
        try:
            results[index] = work(stores[index])
        except BaseException as exc:  # the assertion below reports it
            failures.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    return results


@pytest.mark.parametrize("conditions", [True, False], ids=["conditions", "control"])
def test_two_tickers_without_a_lease_run_each_fire_once_only_thanks_to_the_conditions(
    conditions: bool,
) -> None:
    # GIVEN 30 minutely schedules, and two tickers with no lease between them
    system = MemorySystem(
        schedules=memory.MemoryScheduleStore() if conditions else AdvanceWithoutCondition(),
        occurrences=(memory.MemoryOccurrenceStore() if conditions else ClaimWithoutCondition()),
    )
    target = {"type": "python", "handler": "noop"}
    for _ in range(SCHEDULES):
        system.service.create("tenant-a", schedules.ScheduleDraft("rate(1 minute)", target=target))
    system.clock.advance(55)

    def tick(store: Any) -> ticker.TickReport:
        tk = ticker.Ticker(
            schedules=store,
            occurrences=system.occurrences,
            queue=system.queue,
            leases=memory.MemoryLeaseStore(),
            clock=system.clock,
            owner="either",
            config=ticker.TickerConfig(lookahead_seconds=10, horizon_seconds=180),
            use_lease=False,
        )
        return tk.tick()

    # WHEN both tick at once, each having read the due schedules before the other wrote
    read_together = FrozenReads(system.schedules, system.clock.now() + timedelta(seconds=10))
    reports = [tick(system.schedules), tick(read_together)]
    # AND each fire's two deliveries race to its claim, both reading it before either
    # claims (as two worker invocations would)
    system.clock.advance(200)
    bodies: dict[str, list[dict[str, Any]]] = {}
    while batch := system.queue.receive("default", max_messages=10):
        for message in batch:
            bodies.setdefault(message.body["occurrence_key"], []).append(message.body)
            system.queue.delete("default", message.receipt)
    claimed: Counter[str] = Counter()
    for key, pair in bodies.items():
        assert len(pair) == 2  # both tickers sent it: the race repeats messages
        store = Together(system.occurrences, "get", threading.Barrier(2))
        outcomes = side_by_side(
            lambda body, store=store: claims.claim(
                body, schedules=system.schedules, occurrences=store, now=system.clock.now()
            ),
            pair,
        )
        claimed[key] = sum(o.outcome is claims.Outcome.CLAIMED for o in outcomes)
    advanced = sum(r.advanced for r in reports)
    fires = SCHEDULES * FIRES_EACH
    print(
        f"\n{'with' if conditions else 'without'} the conditions: {fires} fires, "
        f"{sum(claimed.values())} runs claimed, {advanced} schedule advances"
    )
    assert len(claimed) == fires
    if conditions:
        # THEN each fire was claimed once, each schedule advanced once (the other refused)
        assert set(claimed.values()) == {1}
        assert advanced == SCHEDULES and sum(r.conflicts for r in reports) == SCHEDULES
    else:
        # THEN, the conditions removed, every fire runs twice and both advances land
        assert set(claimed.values()) == {2}
        assert advanced == 2 * SCHEDULES
    # AND either way every schedule stands past its three fires, nothing moved backwards
    for item in system.schedules.list("tenant-a", limit=100).items:
        assert item.next_fire == NOW + timedelta(minutes=FIRES_EACH + 1)
