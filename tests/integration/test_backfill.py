"""Backfill on moto: the template's tables and queues, the real ticker, worker and API.

Each fire of the range gets the occurrence key the ticker would give it, so a fire that
has a row is never run again, a backfill racing the ticker leaves one row per fire, and
the backfill's runs are paced by a record in DynamoDB (a fresh process picks it up).
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from fireline.adapters import backfills_dynamodb, threads
from fireline.domain import backfill, model, occurrence, policies
from fireline.services import backfills, schedules
from fireline.services.schedules import ScheduleDraft
from helpers.system import START, System, moto_system

HOUR = timedelta(hours=1)
RUN_BUDGET_MS = 60_000


class Endpoint:
    """The tenant's job: counts its runs per occurrence key."""

    def __init__(self, system: System) -> None:
        self.runs: Counter[str] = Counter()
        self._lock = threading.Lock()
        system.registry.register("endpoint")(self)

    def __call__(self, context: Any) -> None:
        with self._lock:
            self.runs[context.occurrence_key] += 1


def hourly(system: System, **fields: Any) -> model.Schedule:
    target = {"type": "python", "handler": "endpoint"}
    return system.service.create(
        "tenant-a", ScheduleDraft(spec=fields.pop("spec", "rate(1 hour)"), target=target, **fields)
    )


def tick(system: System) -> None:
    system.ticker(use_lease=False).tick()


def later(system: System, delta: timedelta) -> None:
    system.clock.advance(delta.total_seconds())


def at(system: System, moment: datetime) -> None:
    later(system, moment - system.clock.now())


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def start_backfill(
    system: System, schedule_id: str, start: datetime, end: datetime, **extra: Any
) -> tuple[int, Any]:
    body = {"from": iso(start), "to": iso(end), **extra}
    return system.call("POST", f"/schedules/{schedule_id}/backfill", body)


def drain(system: System, limit: int | None = None) -> list[str]:
    """Hand the default queue's visible messages to a worker, ``limit`` at most (all,
    and what they send on, when None); the occurrence keys it handled, in order."""
    handled: list[str] = []
    worker = system.worker()
    while limit is None or len(handled) < limit:
        batch = system.queue.receive("default", max_messages=1)
        if not batch:
            return handled
        system.queue.delete("default", batch[0].receipt)
        worker.handle(batch[0].body, remaining_ms=lambda: RUN_BUDGET_MS)
        handled.append(batch[0].body["occurrence_key"])
    return handled


def rows(system: System, item: model.Schedule) -> list[occurrence.Occurrence]:
    page = system.occurrences.history(item.tenant_id, item.schedule_id, limit=100)
    assert page.cursor is None
    return sorted(page.items, key=lambda r: r.fire_time)


def visible(system: System) -> int:
    """Messages waiting on the default queue (counted, not received: none is hidden)."""
    return system.queue.load("default").ready


# --- the outage ---------------------------------------------------------------------------


def test_three_hours_after_an_outage_are_three_occurrences_each_run_once(system: System) -> None:
    # GIVEN an hourly schedule whose ticker was down from 12:15 to 16:10: its 13:00,
    # 14:00 and 15:00 fires were never sent
    endpoint = Endpoint(system)
    item = hourly(system)
    tick(system)
    later(system, timedelta(hours=4, minutes=10))
    # WHEN the tenant backfills 13:00 to 16:00 and the workers run what it releases
    status, answer = start_backfill(system, item.schedule_id, START + HOUR, START + 4 * HOUR)
    drain(system)
    # THEN three occurrences were created under the ticker's keys, each run once
    assert status == 202, answer
    assert (answer["fires"], answer["created"], answer["existed"]) == (3, 3, 0)
    fires = [START + HOUR, START + 2 * HOUR, START + 3 * HOUR]
    keys = [occurrence.occurrence_key(item.schedule_id, item.version, f) for f in fires]
    assert endpoint.runs == Counter(dict.fromkeys(keys, 1))
    # ... their history says where they came from
    status, history = system.call("GET", f"/schedules/{item.schedule_id}/occurrences")
    by_key = {o["key"]: o for o in history["items"]}
    assert [(by_key[k]["state"], by_key[k]["origin"]) for k in keys] == [
        ("succeeded", "backfill")
    ] * 3
    # ... and the backfill's progress shows them run, none left
    status, progress = system.call("GET", f"/schedules/{item.schedule_id}/backfill/{answer['id']}")
    assert (progress["state"], progress["run"], progress["left"]) == ("done", 3, 0)
    # WHEN the ticker comes back (its misfire plan covers the same fires) and the workers
    # run what it sent
    tick(system)
    drain(system)
    # THEN no fire of the range ran again: one row each, and 16:00 ran as the ticker's
    assert endpoint.runs == Counter(
        {
            **dict.fromkeys(keys, 1),
            occurrence.occurrence_key(item.schedule_id, 1, START + 4 * HOUR): 1,
        }
    )
    assert [r.fire_time for r in rows(system, item)] == [*fires, START + 4 * HOUR]


def test_backfilling_a_range_twice_creates_nothing_the_second_time(system: System) -> None:
    # GIVEN a range backfilled and run
    endpoint = Endpoint(system)
    item = hourly(system)
    later(system, 4 * HOUR)
    start_backfill(system, item.schedule_id, START, START + 3 * HOUR)
    drain(system)
    # WHEN the same range is backfilled again
    status, again = start_backfill(system, item.schedule_id, START, START + 3 * HOUR)
    drain(system)
    # THEN it created nothing, found every fire existing, and ran nothing more
    assert status == 202
    assert (again["created"], again["existed"], again["state"]) == (0, 3, "done")
    assert sum(endpoint.runs.values()) == 3 and set(endpoint.runs.values()) == {1}


def test_a_range_already_partly_run_runs_only_the_fires_without_a_row(system: System) -> None:
    # GIVEN an hourly schedule whose 13:00 and 14:00 fires ran, then a ticker outage
    endpoint = Endpoint(system)
    item = hourly(system)
    for hour in (1, 2):
        at(system, START + hour * HOUR - timedelta(seconds=10))
        tick(system)
        at(system, START + hour * HOUR + timedelta(seconds=1))
        drain(system)
    ran_before = dict(endpoint.runs)
    at(system, START + 5 * HOUR + timedelta(minutes=5))
    # WHEN 13:00 to 17:00 is backfilled
    status, answer = start_backfill(system, item.schedule_id, START + HOUR, START + 5 * HOUR)
    drain(system)
    # THEN the two fires that ran exist, the other two were created and ran once each
    assert status == 202
    assert (answer["created"], answer["existed"]) == (2, 2)
    assert len(ran_before) == 2
    assert endpoint.runs == Counter(
        {
            **ran_before,
            occurrence.occurrence_key(item.schedule_id, 1, START + 3 * HOUR): 1,
            occurrence.occurrence_key(item.schedule_id, 1, START + 4 * HOUR): 1,
        }
    )


# --- racing the ticker --------------------------------------------------------------------


def test_a_backfill_racing_the_ticker_on_the_same_fires_leaves_one_row_and_run_each(
    system: System,
) -> None:
    # GIVEN a schedule that catches up every missed fire, its ticker back after an outage
    endpoint = Endpoint(system)
    item = hourly(
        system,
        misfire=policies.Misfire(
            policy=policies.MisfirePolicy.FIRE_ALL, catch_up_window_seconds=6 * 3600
        ),
    )
    later(system, timedelta(hours=3, minutes=30))
    # WHEN the ticker and a backfill of the same fires run at once, then every message
    ready = threading.Barrier(2)
    answers: list[tuple[int, Any]] = []

    def ticker_pass() -> None:
        ready.wait()
        tick(system)

    def fill() -> None:
        ready.wait()
        answers.append(start_backfill(system, item.schedule_id, START + HOUR, system.clock.now()))

    racers = [threading.Thread(target=ticker_pass), threading.Thread(target=fill)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=120)
    drain(system)
    # THEN each fire has one row and ran once, whoever sent it
    assert answers and answers[0][0] == 202
    fires = [START + HOUR, START + 2 * HOUR, START + 3 * HOUR]
    assert [r.fire_time for r in rows(system, item)] == fires
    assert endpoint.runs == Counter(
        {occurrence.occurrence_key(item.schedule_id, 1, f): 1 for f in fires}
    )


# --- pacing ---------------------------------------------------------------------------------


def test_an_allow_backfill_keeps_at_most_its_window_in_flight(system: System) -> None:
    # GIVEN a backfill of 25 fires that may overlap
    Endpoint(system)
    item = hourly(system, spec="rate(1 minute)")
    later(system, HOUR)
    status, answer = start_backfill(
        system, item.schedule_id, START, START + timedelta(minutes=25), overlap="allow"
    )
    # THEN only its window was released
    assert status == 202 and answer["window"] == backfill.WINDOW
    assert (answer["released"], answer["in_flight"], answer["left"]) == (10, 10, 15)
    # WHEN the worker runs one fire at a time, each settling releasing the next
    most = 0
    while drain(system, limit=1):
        most = max(most, visible(system))
    # THEN no more than the window was ever waiting, and all 25 ran
    assert most <= backfill.WINDOW
    status, progress = system.call("GET", f"/schedules/{item.schedule_id}/backfill/{answer['id']}")
    assert (progress["state"], progress["run"], progress["released"]) == ("done", 25, 25)


def test_buffer_all_runs_one_fire_at_a_time_oldest_first(system: System) -> None:
    # GIVEN a schedule that forbids overlap, backfilled over four fires (by default
    # one at a time)
    endpoint = Endpoint(system)
    item = hourly(system, overlap=policies.OverlapPolicy.FORBID)
    later(system, 5 * HOUR)
    status, answer = start_backfill(system, item.schedule_id, START, START + 4 * HOUR)
    assert status == 202 and (answer["overlap"], answer["window"]) == ("buffer_all", 1)
    order: list[str] = []
    waiting: list[int] = []
    # WHEN the worker runs what is waiting, one message at a time
    while visible(system):
        waiting.append(visible(system))
        order += drain(system, limit=1)
    # THEN one fire waited at a time
    assert waiting == [1, 1, 1, 1]
    # ... oldest first, each once
    assert order == [
        occurrence.occurrence_key(item.schedule_id, 1, START + h * HOUR) for h in range(4)
    ]
    assert set(endpoint.runs.values()) == {1} and len(endpoint.runs) == 4


def test_pacing_survives_a_crash_a_fresh_process_releases_the_rest(system: System) -> None:
    # GIVEN a backfill whose first window ran on a worker that died before its pass
    # (a worker without backfills never nudges)
    Endpoint(system)
    item = hourly(system, spec="rate(1 minute)")
    later(system, HOUR)
    _, answer = start_backfill(
        system, item.schedule_id, START, START + timedelta(minutes=15), overlap="allow"
    )
    worker = system.worker()
    worker.backfills = None
    for message in system.receive("default"):
        system.queue.delete("default", message.receipt)
        worker.handle(message.body, remaining_ms=lambda: RUN_BUDGET_MS)
    assert visible(system) == 0
    # WHEN a fresh process (nothing shared but the tables) makes the periodic pass
    fresh = backfills.Backfills(
        store=backfills_dynamodb.DynamoBackfillStore(
            system.ddb, system.stack.tables["WorkflowsTable"]
        ),
        schedules=system.schedules,
        occurrences=system.occurrences,
        queue=system.queue,
        clock=system.clock,
        ids=schedules.new_id,
        parallel=threads.ThreadPool(2),
    )
    paced = fresh.pace_active()
    # THEN it released the remaining five from the record's state
    assert paced == 1 and visible(system) == 5
    progress = fresh.get("tenant-a", item.schedule_id, answer["id"])
    assert (progress.run, progress.released, progress.left) == (10, 15, 0)


# --- cancel ---------------------------------------------------------------------------------


def test_a_cancel_halfway_stops_the_fires_not_started(system: System) -> None:
    # GIVEN a one-at-a-time backfill of six fires, three of them run
    endpoint = Endpoint(system)
    item = hourly(system)
    later(system, 7 * HOUR)
    _, answer = start_backfill(
        system, item.schedule_id, START, START + 6 * HOUR, overlap="buffer_all"
    )
    drain(system, limit=3)
    # WHEN the tenant cancels it, and the message already released is delivered
    path = f"/schedules/{item.schedule_id}/backfill/{answer['id']}"
    status, cancelled = system.call("DELETE", path)
    drain(system)
    # THEN the three not started were cancelled and never ran; the three run stay run
    assert status == 200, cancelled
    assert (cancelled["state"], cancelled["cancelled"], cancelled["left"]) == ("cancelled", 3, 0)
    assert len(endpoint.runs) == 3
    assert [r.state for r in rows(system, item)] == [occurrence.State.SUCCEEDED] * 3 + [
        occurrence.State.CANCELLED
    ] * 3
    _, progress = system.call("GET", path)
    assert (progress["state"], progress["run"], progress["cancelled"]) == ("cancelled", 3, 3)


# --- bounds and bad input -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"from": "2026-05-01T10:00:00Z", "to": "2026-05-01T09:00:00Z"}, "to"),
        ({"from": "2026-05-01T10:00:00Z", "to": "2026-05-01T10:00:00Z"}, "to"),
        ({"from": "yesterday", "to": "2026-05-01T10:00:00Z"}, "from"),
        ({"from": "2026-05-01T09:00:00", "to": "2026-05-01T10:00:00Z"}, "from"),
        ({"from": "2026-05-01T09:00:00Z", "to": "2026-05-01T13:00:00Z"}, "to"),
        ({"from": "2026-05-01T09:00:00Z", "to": "2026-05-01T10:00:00Z", "overlap": "x"}, "overlap"),
        ({"from": "2026-04-01T00:00:00Z", "to": "2026-05-01T00:00:00Z"}, "to"),
    ],
    ids=["to-before-from", "empty", "not-a-time", "no-offset", "future", "overlap", "too-many"],
)
def test_bad_input_is_a_400_naming_its_field_and_writes_nothing(
    system: System, body: dict[str, str], field: str
) -> None:
    # GIVEN a per-minute schedule (a month of it is more than 10,000 fires)
    item = hourly(system, spec="rate(1 minute)")
    # WHEN a backfill is asked with a bad range, time or policy
    status, answer = system.call("POST", f"/schedules/{item.schedule_id}/backfill", body)
    # THEN it is a 400 naming the field, and no occurrence or message was written
    assert status == 400, answer
    assert answer["error"]["field"] == field
    assert rows(system, item) == [] and visible(system) == 0


def test_a_deleted_or_unknown_schedule_is_a_404(system: System) -> None:
    # GIVEN a schedule that was deleted, and a one-off job
    item = hourly(system)
    system.call("DELETE", f"/schedules/{item.schedule_id}")
    body = {"from": "2026-05-01T09:00:00Z", "to": "2026-05-01T10:00:00Z"}
    # WHEN it, one that never was or the job is backfilled, or an unknown backfill read
    deleted, _ = system.call("POST", f"/schedules/{item.schedule_id}/backfill", body)
    unknown, _ = system.call("POST", "/schedules/nope/backfill", body)
    status, job = system.call(
        "POST", "/jobs", {"delay_seconds": 0, "target": {"type": "python", "handler": "noop"}}
    )
    assert status == 201, job
    of_a_job, _ = system.call("POST", f"/schedules/{job['id']}/backfill", body)
    missing, _ = system.call("GET", f"/schedules/{item.schedule_id}/backfill/bf_nope")
    # THEN each is a 404 (a one-off job is no schedule) and nothing was written for them
    assert (deleted, unknown, of_a_job, missing) == (404, 404, 404, 404)
    assert rows(system, item) == []


def test_another_tenants_backfill_is_not_found(system: System) -> None:
    # GIVEN tenant-a's backfill
    item = hourly(system)
    later(system, 2 * HOUR)
    _, answer = start_backfill(system, item.schedule_id, START, START + HOUR)
    path = f"/schedules/{item.schedule_id}/backfill/{answer['id']}"
    # WHEN tenant-b reads or cancels it
    read, _ = system.call("GET", path, tenant="tenant-b")
    cancel, _ = system.call("DELETE", path, tenant="tenant-b")
    # THEN both are 404s and the backfill is untouched
    assert (read, cancel) == (404, 404)
    assert system.call("GET", path)[1]["state"] == "running"


# --- time zones ----------------------------------------------------------------------------


def test_a_range_across_fall_back_in_new_york_has_both_one_oclocks() -> None:
    # GIVEN an hourly schedule in America/New_York, a day after the clocks fell back
    with moto_system(datetime.fromisoformat("2025-11-03T12:00:00+00:00")) as system:
        endpoint = Endpoint(system)
        item = hourly(system, spec="cron(0 0 * * * *)", timezone="America/New_York")
        # WHEN 00:00 EDT to 03:00 EST of that night is backfilled and run
        status, answer = start_backfill(
            system,
            item.schedule_id,
            datetime.fromisoformat("2025-11-02T04:00:00+00:00"),
            datetime.fromisoformat("2025-11-02T08:00:00+00:00"),
        )
        drain(system)
        # THEN every real hour fired once: 01:00 EDT and 01:00 EST are two fires
        assert status == 202 and answer["created"] == 4
        assert sorted(r.fire_time.isoformat() for r in rows(system, item)) == [
            "2025-11-02T04:00:00+00:00",
            "2025-11-02T05:00:00+00:00",
            "2025-11-02T06:00:00+00:00",
            "2025-11-02T07:00:00+00:00",
        ]
        assert set(endpoint.runs.values()) == {1} and len(endpoint.runs) == 4


def test_a_daily_fire_inside_the_spring_forward_gap_is_shifted_not_lost(system: System) -> None:
    # GIVEN a daily 02:30 schedule in America/New_York (02:30 did not exist on 8 March)
    item = hourly(system, spec="cron(0 30 2 * * *)", timezone="America/New_York")
    # WHEN 7 to 10 March 2026 is backfilled
    status, answer = start_backfill(
        system,
        item.schedule_id,
        datetime.fromisoformat("2026-03-07T00:00:00+00:00"),
        datetime.fromisoformat("2026-03-10T00:00:00+00:00"),
    )
    # THEN three fires: 02:30 EST, 03:00 EDT (the gap's shift), 02:30 EDT
    assert status == 202 and answer["created"] == 3
    assert [r.fire_time.isoformat() for r in rows(system, item)] == [
        "2026-03-07T07:30:00+00:00",
        "2026-03-08T07:00:00+00:00",
        "2026-03-09T06:30:00+00:00",
    ]
