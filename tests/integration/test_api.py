"""The HTTP API on moto: every route through the real resolver, tenant isolation,
Idempotency-Key, refused input, and the OpenAPI document."""

from __future__ import annotations

import base64
import itertools
import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from openapi_spec_validator import validate

from fireline.api import app as api_app
from fireline.domain import model, occurrence, schedule
from fireline.services import claims
from fireline.services.worker import Result
from helpers.system import START, System, api_event

A, B = "tenant-a", "tenant-b"
PYTHON = {"type": "python", "handler": "noop"}
VALID = {"spec": "rate(1 minute)", "target": PYTHON}
MINUTE = timedelta(minutes=1)

# system.call passes no Lambda context, so Powertools cannot tie the idempotency record's
# in-progress expiry to the invocation and says so; nothing to act on in a test.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Couldn't determine the remaining time left:UserWarning"
)


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def create(system: System, tenant: str = A, **fields: Any) -> dict[str, Any]:
    status, body = system.call("POST", "/schedules", {**VALID, **fields}, tenant=tenant)
    assert status == 201, body
    return body  # type: ignore[no-any-return]


def create_job(system: System, tenant: str = A, **fields: Any) -> dict[str, Any]:
    status, body = system.call("POST", "/jobs", {"target": PYTHON, **fields}, tenant=tenant)
    assert status == 201, body
    return body  # type: ignore[no-any-return]


def listing(system: System, tenant: str = A, limit: int = 100) -> list[dict[str, Any]]:
    """The tenant's schedules through the API, every page."""
    items: list[dict[str, Any]] = []
    query = {"limit": str(limit)}
    while True:
        status, page = system.call("GET", "/schedules", tenant=tenant, query=query)
        assert status == 200, page
        items += page["items"]
        if page["next_cursor"] is None:
            return items
        query = {"limit": str(limit), "cursor": page["next_cursor"]}


def stored(system: System, tenant: str = A) -> list[model.Schedule]:
    """Everything in the tenant's partition, jobs included, straight from the table."""
    found: list[model.Schedule] = []
    cursor = None
    while True:
        page = system.schedules.list(tenant, limit=100, cursor=cursor)
        found += page.items
        if (cursor := page.cursor) is None:
            return sorted(found, key=lambda s: s.schedule_id)


def error_of(response: tuple[int, Any]) -> tuple[int, str | None]:
    status, body = response
    return status, body["error"]["field"]


def cursor_of(key: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode()


# --- POST /schedules and GET /schedules/{id} ----------------------------------------------


LAMBDA_ARN = "arn:aws:lambda:eu-west-1:111122223333:function:x"
SQS_URL = "https://sqs.eu-west-1.amazonaws.com/111122223333/jobs"
TENANT_ROLE = "arn:aws:iam::111122223333:role/fireline-target/fireline-jobs"


@pytest.mark.parametrize(
    ("spec", "shown", "description", "next_fire"),
    [
        (
            "cron(0 9 * * MON-FRI)",
            "cron(0 9 * * MON-FRI)",
            "At 09:00, Monday through Friday (UTC)",
            "2026-05-04T09:00:00Z",  # START is a Friday noon
        ),
        ("rate(5 minutes)", "rate(5 minutes)", "Every 5 minutes", "2026-05-01T12:05:00Z"),
        (
            "at(2026-06-01T10:00:00Z)",
            "at(2026-06-01T10:00:00Z)",
            "Once at 2026-06-01 10:00:00 UTC",
            "2026-06-01T10:00:00Z",
        ),
        (
            "every day at 09:30",
            "cron(30 9 * * *)",
            "Every day at 09:30 (UTC)",
            "2026-05-02T09:30:00Z",
        ),
    ],
    ids=["cron", "rate", "at", "natural"],
)
def test_create_shows_the_spec_back_with_its_description_and_first_fire(
    system: System, spec: str, shown: str, description: str, next_fire: str
) -> None:
    # WHEN a schedule is created with one of the spec forms
    status, created = system.call("POST", "/schedules", {"spec": spec, "target": PYTHON})
    # THEN it is 201 with the stored spec, its description and the first fire
    assert status == 201
    assert created["id"].startswith("sch_")
    assert created["spec"] == shown
    assert created["description"] == description
    assert created["next_fire"] == next_fire
    assert (created["state"], created["version"]) == ("active", 1)
    assert created["created_at"] == created["updated_at"] == iso(START)
    # AND reading it back from the table gives the same representation
    assert system.call("GET", f"/schedules/{created['id']}") == (200, created)


def test_timezone_reads_the_spec_on_that_zones_wall_clock(system: System) -> None:
    # WHEN 'every day at 09:30' is created in Paris (UTC+2 in May)
    created = create(system, spec="every day at 09:30", timezone="Europe/Paris")
    # THEN it fires at 07:30 UTC, and says which zone it reads 09:30 in
    assert created["timezone"] == "Europe/Paris"
    assert created["spec"] == "cron(30 9 * * *)"
    assert created["description"] == "Every day at 09:30 (Europe/Paris)"
    assert created["next_fire"] == "2026-05-02T07:30:00Z"


@pytest.mark.parametrize(
    ("dst", "start", "fires"),
    [
        (
            {"repeat": "first"},
            "2026-10-24T00:00:00Z",
            ["2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
        ),
        (
            {"repeat": "both"},
            "2026-10-24T00:00:00Z",
            ["2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"],
        ),
        (
            {"gap": "shift"},
            "2027-03-27T00:00:00Z",
            ["2027-03-27T01:30:00Z", "2027-03-28T01:00:00Z", "2027-03-29T00:30:00Z"],
        ),
        (
            {"gap": "skip"},
            "2027-03-27T00:00:00Z",
            ["2027-03-27T01:30:00Z", "2027-03-29T00:30:00Z", "2027-03-30T00:30:00Z"],
        ),
    ],
    ids=["fall-back-first", "fall-back-both", "spring-forward-shift", "spring-forward-skip"],
)
def test_dst_policy_is_stored_and_decides_the_fires_around_a_transition(
    system: System, dst: dict[str, str], start: str, fires: list[str]
) -> None:
    # GIVEN 02:30 every night in Paris, starting just before a DST transition
    created = create(system, spec="cron(30 2 * * *)", timezone="Europe/Paris", start=start, dst=dst)
    # THEN the policy is shown back with its defaults filled in
    assert created["dst"] == {"gap": "shift", "repeat": "first", **dst}
    # AND the fires around the transition follow it
    status, preview = system.call(
        "GET", f"/schedules/{created['id']}/preview", query={"count": "3"}
    )
    assert status == 200
    assert preview["fire_times"] == fires


def test_policies_are_stored_as_given(system: System) -> None:
    # WHEN a schedule is created with every policy set away from its default
    policies: dict[str, Any] = {
        "misfire": {
            "policy": "skip",
            "grace_seconds": 30,
            "catch_up_window_seconds": 600,
            "catch_up_max": 5,
        },
        "overlap": "forbid",
        "retry": {
            "max_attempts": 5,
            "base_seconds": 1.0,
            "factor": 3.0,
            "cap_seconds": 60.0,
            "jitter": "none",
        },
        "deadline_seconds": 600,
        "jitter_seconds": 30,
        "job_class": "long",
        "payload": {"report": "daily", "rows": [1, 2, 3]},
        "start": "2026-05-02T00:00:00Z",
        "end": "2026-06-01T00:00:00Z",
    }
    created = create(system, **policies)
    # THEN each is shown back as given, and the first fire is the window's start (a rate
    # is anchored there)
    assert {k: created[k] for k in policies} == policies
    assert created["next_fire"] == "2026-05-02T00:00:00Z"
    # AND reading it back from the table gives the same
    assert system.call("GET", f"/schedules/{created['id']}") == (200, created)


@pytest.mark.parametrize(
    ("target", "shown"),
    [
        (PYTHON, PYTHON),
        (
            {"type": "http", "url": "https://hooks.example.com/fire"},
            {
                "type": "http",
                "url": "https://hooks.example.com/fire",
                "timeout_seconds": 30,
                "headers": {},
            },
        ),
        (
            {"type": "lambda", "function_arn": LAMBDA_ARN, "role_arn": TENANT_ROLE},
            {"type": "lambda", "function_arn": LAMBDA_ARN, "role_arn": TENANT_ROLE},
        ),
        (
            {"type": "sqs", "queue_url": SQS_URL, "role_arn": TENANT_ROLE},
            {"type": "sqs", "queue_url": SQS_URL, "role_arn": TENANT_ROLE},
        ),
    ],
    ids=["python", "http", "lambda", "sqs"],
)
def test_each_target_type_is_stored(
    system: System, target: dict[str, Any], shown: dict[str, Any]
) -> None:
    # WHEN a schedule is created with the target
    created = create(system, target=target)
    # THEN the target is stored with its defaults filled in
    assert created["target"] == shown
    status, read = system.call("GET", f"/schedules/{created['id']}")
    assert status == 200 and read["target"] == shown


def test_get_of_an_unknown_schedule_is_404(system: System) -> None:
    status, body = system.call("GET", "/schedules/sch_doesnotexist")
    assert status == 404
    assert body["error"]["type"] == "not_found"


# --- GET /schedules ----------------------------------------------------------------------


def test_list_walks_every_schedule_once_following_the_cursor(system: System) -> None:
    # GIVEN seven schedules, and a one-off job (which is not a schedule)
    made = {create(system)["id"] for _ in range(7)}
    job = create_job(system, delay_seconds=60)
    # WHEN the list is walked three at a time
    seen: list[str] = []
    pages = 0
    query = {"limit": "3"}
    while True:
        status, page = system.call("GET", "/schedules", query=query)
        assert status == 200
        assert len(page["items"]) <= 3
        seen += [item["id"] for item in page["items"]]
        pages += 1
        assert pages <= 4, "the cursor does not make progress"
        if page["next_cursor"] is None:
            break
        query = {"limit": "3", "cursor": page["next_cursor"]}
    # THEN every schedule came exactly once, and the job not at all
    assert sorted(seen) == sorted(made)
    assert job["id"] not in seen
    assert pages >= 3


# --- PUT /schedules/{id} -----------------------------------------------------------------


def test_update_bumps_the_version_and_recomputes_the_next_fire(system: System) -> None:
    # GIVEN an hourly schedule created at START
    created = create(system, spec="rate(1 hour)")
    assert created["next_fire"] == iso(START + timedelta(hours=1))
    system.clock.advance(120)
    # WHEN it is replaced by one every five minutes
    status, updated = system.call(
        "PUT",
        f"/schedules/{created['id']}",
        {"spec": "rate(5 minutes)", "target": PYTHON, "payload": {"n": 2}},
    )
    # THEN it is a new version, due at the next five-minute mark after now
    assert status == 200
    assert updated["id"] == created["id"]
    assert updated["version"] == 2
    assert updated["spec"] == "rate(5 minutes)"
    assert updated["payload"] == {"n": 2}
    assert updated["next_fire"] == iso(START + 5 * MINUTE)
    assert updated["created_at"] == created["created_at"]
    assert updated["updated_at"] == iso(START + 2 * MINUTE)
    # AND it is what the table holds
    assert system.call("GET", f"/schedules/{created['id']}") == (200, updated)


def test_update_of_a_paused_schedule_keeps_it_paused(system: System) -> None:
    created = create(system)
    system.call("POST", f"/schedules/{created['id']}/pause")
    status, updated = system.call(
        "PUT", f"/schedules/{created['id']}", {"spec": "rate(2 minutes)", "target": PYTHON}
    )
    assert status == 200
    assert (updated["state"], updated["next_fire"], updated["version"]) == ("paused", None, 3)


def test_update_of_an_unknown_schedule_is_404(system: System) -> None:
    assert system.call("PUT", "/schedules/sch_doesnotexist", VALID)[0] == 404
    assert listing(system) == []


# --- DELETE /schedules/{id} --------------------------------------------------------------


def test_delete_is_204_then_the_schedule_is_gone(system: System) -> None:
    # GIVEN two schedules
    gone, kept = create(system), create(system)
    # WHEN one is deleted
    status, body = system.call("DELETE", f"/schedules/{gone['id']}")
    # THEN it is 204 with no body, and the schedule is no longer there
    assert (status, body) == (204, None)
    assert system.call("GET", f"/schedules/{gone['id']}")[0] == 404
    assert system.call("DELETE", f"/schedules/{gone['id']}")[0] == 404
    assert [s["id"] for s in listing(system)] == [kept["id"]]


# --- pause and resume --------------------------------------------------------------------


def test_pause_leaves_no_next_fire_and_resume_restores_it(system: System) -> None:
    # GIVEN a schedule every minute
    created = create(system)
    # WHEN it is paused
    status, paused = system.call("POST", f"/schedules/{created['id']}/pause")
    # THEN it is paused with no next fire, as a new version
    assert status == 200
    assert (paused["state"], paused["next_fire"], paused["version"]) == ("paused", None, 2)
    assert system.call("GET", f"/schedules/{created['id']}") == (200, paused)
    # AND pausing again changes nothing
    assert system.call("POST", f"/schedules/{created['id']}/pause") == (200, paused)
    # WHEN it is resumed ten minutes later
    system.clock.advance(600)
    status, resumed = system.call("POST", f"/schedules/{created['id']}/resume")
    # THEN it is active again from the first fire after the pause (the ticker's misfire
    # policy decides what happens to the ten missed ones)
    assert status == 200
    assert (resumed["state"], resumed["version"]) == ("active", 3)
    assert resumed["next_fire"] == iso(START + MINUTE)
    assert system.call("GET", f"/schedules/{created['id']}") == (200, resumed)
    # AND resuming again changes nothing
    assert system.call("POST", f"/schedules/{created['id']}/resume") == (200, resumed)


@pytest.mark.parametrize(
    ("method", "suffix", "body", "reason"),
    [
        ("POST", "/pause", None, "skipped: schedule paused"),
        (
            "PUT",
            "",
            {"spec": "rate(2 minutes)", "target": PYTHON},
            "skipped: stale version 1 (now 2)",
        ),
        ("DELETE", "", None, "skipped: schedule deleted"),
    ],
    ids=["pause", "update", "delete"],
)
def test_no_fire_materialized_ahead_runs_once_a_change_has_returned(
    system: System, method: str, suffix: str, body: Any, reason: str
) -> None:
    # GIVEN a schedule every minute whose next quarter hour of fires the ticker sent ahead
    # (messages on the queue, no rows yet)
    created = create(system)
    system.clock.advance(55)
    system.ticker(use_lease=False).tick()
    ahead = list(system.log.sent)
    assert len(ahead) == 15
    # WHEN the schedule is changed
    system.log.reset()
    status, _ = system.call(method, f"/schedules/{created['id']}{suffix}", body)
    assert status in (200, 204)
    # THEN the change cost one Query (no row of its fires to settle) and its own write
    assert system.log.count("Query") == 1
    assert system.log.count("PutItem", "DeleteItem") == 1
    # AND when those fires' messages arrive, each is recorded skipped with the reason and
    # none runs
    ran: list[str] = []
    system.registry.register("noop")(lambda context: ran.append(context.occurrence_key))
    system.clock.advance(900)
    outcomes = [
        system.worker().handle(m.body, remaining_ms=lambda: 60_000) for m in system.receive()
    ]
    assert len(outcomes) == 15 and set(outcomes) == {Result.SKIPPED}
    assert ran == []
    settled = [system.occurrences.get(key) for key in ahead]
    assert {(o.state.value, o.exit_reason) for o in settled if o} == {("skipped", reason)}


# --- POST /schedules/{id}/trigger --------------------------------------------------------


def test_trigger_queues_an_occurrence_now_on_the_class_queue(system: System) -> None:
    # GIVEN a schedule of the "short" class whose next fire is an hour away
    created = create(system, spec="rate(1 hour)", job_class="short")
    system.clock.advance(7.4)
    # WHEN it is triggered
    status, fired = system.call("POST", f"/schedules/{created['id']}/trigger")
    # THEN it is 202 with an occurrence queued for now (to the millisecond)
    assert status == 202
    assert fired["fire_time"] == "2026-05-01T12:00:07.400000Z"
    assert (fired["state"], fired["schedule_id"], fired["version"]) == ("queued", created["id"], 1)
    assert fired["job_class"] == "short"
    # AND one message for it is on the short queue, none on the default one
    messages = system.receive_all("short")
    assert [m["occurrence_key"] for m in messages] == [fired["key"]]
    assert system.receive_all("default") == []
    # AND it is in the history; the schedule's own next fire did not move
    status, history = system.call("GET", f"/schedules/{created['id']}/occurrences")
    assert [o["key"] for o in history["items"]] == [fired["key"]]
    assert system.call("GET", f"/schedules/{created['id']}")[1]["next_fire"] == iso(
        START + timedelta(hours=1)
    )


def test_each_trigger_is_its_own_run_even_within_one_second(system: System) -> None:
    # GIVEN a schedule every minute whose fire at 12:01:00 was materialized and ran
    created = create(system, spec="rate(1 minute)")
    trigger = f"/schedules/{created['id']}/trigger"
    system.clock.advance(60)
    system.ticker(use_lease=False).tick()
    (scheduled,) = system.receive_all()
    worker = system.worker()
    worker.handle(scheduled, remaining_ms=lambda: 60_000)
    # WHEN it is triggered in that same second, and again half a second later
    system.clock.advance(0.3)
    first = system.call("POST", trigger)
    system.clock.advance(0.5)
    second = system.call("POST", trigger)
    # THEN each trigger is a new occurrence with its own message: none is taken for the
    # fire that ran, nor for the other trigger
    assert first[0] == second[0] == 202
    keys = [scheduled["occurrence_key"], first[1]["key"], second[1]["key"]]
    assert len(set(keys)) == 3
    assert (first[1]["state"], second[1]["state"]) == ("queued", "queued")
    sent = system.receive_all()
    assert [m["occurrence_key"] for m in sent] == keys[1:]
    # AND each runs
    assert [worker.handle(m, remaining_ms=lambda: 60_000).value for m in sent] == [
        "succeeded",
        "succeeded",
    ]
    # AND the history lists all three in time order, newest first (with the fires the
    # ticker materialized ahead)
    history = system.call("GET", f"/schedules/{created['id']}/occurrences")[1]["items"]
    assert [o["key"] for o in history if o["key"] in keys] == keys[::-1]


def test_trigger_of_a_paused_schedule_is_409_and_sends_nothing(system: System) -> None:
    created = create(system)
    system.call("POST", f"/schedules/{created['id']}/pause")
    status, body = system.call("POST", f"/schedules/{created['id']}/trigger")
    assert status == 409
    assert body["error"]["type"] == "conflict"
    assert system.receive_all() == []
    assert system.call("GET", f"/schedules/{created['id']}/occurrences")[1]["items"] == []


# --- GET /schedules/{id}/preview ---------------------------------------------------------


def test_preview_gives_the_engines_next_fires(system: System) -> None:
    # GIVEN weekday mornings in New York
    created = create(system, spec="cron(0 9 * * MON-FRI)", timezone="America/New_York")
    # WHEN five fires are previewed
    status, preview = system.call(
        "GET", f"/schedules/{created['id']}/preview", query={"count": "5"}
    )
    # THEN they are five, strictly increasing, and exactly what the engine computes
    assert status == 200
    assert (preview["schedule_id"], preview["timezone"]) == (created["id"], "America/New_York")
    assert preview["description"] == created["description"]
    times = [datetime.fromisoformat(t) for t in preview["fire_times"]]
    assert len(times) == 5
    assert all(a < b for a, b in itertools.pairwise(times))
    timing = schedule.Timing(
        spec=schedule.parse_spec("cron(0 9 * * MON-FRI)"), timezone="America/New_York"
    )
    assert times == schedule.preview(timing, START, 5)
    # START is 08:00 on a Friday in New York: the first fire is the same morning
    assert preview["fire_times"][0] == created["next_fire"] == "2026-05-01T13:00:00Z"


def test_preview_defaults_to_ten_fires(system: System) -> None:
    created = create(system)
    status, preview = system.call("GET", f"/schedules/{created['id']}/preview")
    assert status == 200
    assert preview["fire_times"] == [iso(START + n * MINUTE) for n in range(1, 11)]


# --- GET /schedules/{id}/occurrences -----------------------------------------------------


def test_history_is_newest_first_and_paginated(system: System) -> None:
    # GIVEN five triggered occurrences, a second apart
    created = create(system, spec="rate(1 hour)")
    keys = []
    for _ in range(5):
        keys.append(system.call("POST", f"/schedules/{created['id']}/trigger")[1]["key"])
        system.clock.advance(1)
    # WHEN the history is walked two at a time
    seen: list[dict[str, Any]] = []
    query = {"limit": "2"}
    while True:
        status, page = system.call("GET", f"/schedules/{created['id']}/occurrences", query=query)
        assert status == 200
        assert len(page["items"]) <= 2
        seen += page["items"]
        if page["next_cursor"] is None:
            break
        query = {"limit": "2", "cursor": page["next_cursor"]}
    # THEN every occurrence came once, newest fire first
    assert [o["key"] for o in seen] == list(reversed(keys))
    fire_times = [o["fire_time"] for o in seen]
    assert fire_times == sorted(fire_times, reverse=True) and len(set(fire_times)) == 5


def test_history_from_a_fire_counted_in_a_summary_answers_with_that_summary(
    system: System,
) -> None:
    # GIVEN a per-second schedule that skips missed fires, resumed after 3 minutes paused
    # and picked up: 174 fires skipped, the 74 oldest counted in one summary occurrence
    created = create(
        system,
        spec="cron(* * * * * *)",
        misfire={"policy": "skip", "grace_seconds": 5},
    )
    system.call("POST", f"/schedules/{created['id']}/pause")
    system.clock.advance(180)
    system.call("POST", f"/schedules/{created['id']}/resume")
    system.ticker(use_lease=False).tick()
    # WHEN the history is asked about the fire at 12:00:30, which has no row of its own
    at = START + timedelta(seconds=30)
    status, page = system.call(
        "GET",
        f"/schedules/{created['id']}/occurrences",
        query={"from": iso(at), "to": iso(at + timedelta(seconds=1))},
    )
    # THEN the answer is the summary that counts it, its range in plain fields
    assert status == 200
    (summary,) = page["items"]
    assert summary["state"] == "skipped"
    assert (summary["fire_time"], summary["skipped_last"], summary["skipped_count"]) == (
        iso(START + timedelta(seconds=1)),
        iso(START + timedelta(seconds=74)),
        74,
    )


# --- one-off jobs ------------------------------------------------------------------------


def test_job_with_run_at_is_scheduled_at_that_instant_in_utc(system: System) -> None:
    # WHEN a job is created for 14:10 at UTC+2
    status, job = system.call(
        "POST", "/jobs", {"run_at": "2026-05-01T14:10:00+02:00", "target": PYTHON}
    )
    # THEN it is scheduled for 12:10 UTC, with nothing materialized yet
    assert status == 201
    assert job["id"].startswith("job_")
    assert (job["state"], job["run_at"], job["occurrence"]) == (
        "scheduled",
        "2026-05-01T12:10:00Z",
        None,
    )
    assert job["created_at"] == iso(START)
    assert system.call("GET", f"/jobs/{job['id']}") == (200, job)


def test_job_with_delay_seconds_runs_that_long_after_now(system: System) -> None:
    system.clock.advance(3)
    job = create_job(system, delay_seconds=90, job_class="short", payload={"to": "x@y.z"})
    assert job["run_at"] == iso(START + timedelta(seconds=93))
    assert (job["state"], job["job_class"], job["payload"]) == (
        "scheduled",
        "short",
        {"to": "x@y.z"},
    )


def test_job_is_scheduled_until_the_ticker_queues_it(system: System) -> None:
    # GIVEN a job due in twenty minutes
    job = create_job(system, delay_seconds=20 * 60)
    tk = system.ticker(use_lease=False)
    # WHEN the ticker runs while it is still further away than the ticker's lookahead
    lookahead = tk.config.lookahead_seconds
    system.clock.advance(20 * 60 - lookahead - 5)
    tk.tick()
    # THEN it is still scheduled
    status, read = system.call("GET", f"/jobs/{job['id']}")
    assert (status, read["state"], read["occurrence"]) == (200, "scheduled", None)
    # WHEN the ticker runs within the lookahead of run_at
    system.clock.advance(10)
    tk.tick()
    # THEN its message is on its way, due at run_at: it is scheduled until then, and
    # queued from then until a worker claims it (the claim writes its row)
    status, read = system.call("GET", f"/jobs/{job['id']}")
    assert (status, read["state"], read["occurrence"]) == (200, "scheduled", None)
    system.clock.advance(lookahead)
    status, read = system.call("GET", f"/jobs/{job['id']}")
    assert (status, read["state"], read["occurrence"]) == (200, "queued", None)
    key = next(iter(system.log.sent))
    assert occurrence.parse_key(key).schedule_id == job["id"]
    assert occurrence.format_fire_time(occurrence.parse_key(key).fire_time) == job["run_at"]


def test_cancelled_job_never_fires(system: System) -> None:
    # GIVEN a job due in a minute
    job = create_job(system, delay_seconds=60)
    # WHEN it is cancelled
    status, cancelled = system.call("POST", f"/jobs/{job['id']}/cancel")
    # THEN it is cancelled, and cancelling again says the same
    assert (status, cancelled["state"]) == (200, "cancelled")
    assert system.call("GET", f"/jobs/{job['id']}")[1]["state"] == "cancelled"
    assert system.call("POST", f"/jobs/{job['id']}/cancel")[1]["state"] == "cancelled"
    # AND once its time has passed, the ticker sent nothing more for it, and the message
    # its create sent runs nothing
    system.clock.advance(120)
    system.ticker(use_lease=False).tick()
    bodies = system.receive_all()
    assert [b["schedule_id"] for b in bodies] == [job["id"]]
    ran: list[object] = []
    system.registry.register("noop")(ran.append)
    assert system.worker().handle(bodies[0], remaining_ms=lambda: 60_000).value == "settled"
    assert ran == []
    assert system.call("GET", f"/jobs/{job['id']}")[1]["state"] == "cancelled"


def test_cancelling_a_queued_job_cancels_its_occurrence(system: System) -> None:
    job = create_job(system, delay_seconds=30)
    system.clock.advance(25)
    system.ticker(use_lease=False).tick()
    status, cancelled = system.call("POST", f"/jobs/{job['id']}/cancel")
    assert status == 200
    assert cancelled["state"] == "cancelled"
    assert cancelled["occurrence"]["exit_reason"] == "cancelled"


def test_cancelling_a_running_job_is_409(system: System) -> None:
    # GIVEN a job that a worker has claimed
    job = create_job(system, delay_seconds=30)
    system.clock.advance(25)
    system.ticker(use_lease=False).tick()
    system.clock.advance(10)
    (message,) = system.receive_all()
    assert system.claim(message).outcome is claims.Outcome.CLAIMED
    # WHEN it is cancelled
    status, body = system.call("POST", f"/jobs/{job['id']}/cancel")
    # THEN it is too late: 409, and it is still running
    assert status == 409
    assert body["error"]["type"] == "conflict"
    status, read = system.call("GET", f"/jobs/{job['id']}")
    assert read["state"] == "running"
    assert read["occurrence"]["attempts"] == 1


def test_jobs_and_schedules_are_not_reachable_through_each_others_routes(
    system: System,
) -> None:
    job, sched = create_job(system, delay_seconds=60), create(system)
    assert system.call("GET", f"/schedules/{job['id']}")[0] == 404
    assert system.call("DELETE", f"/schedules/{job['id']}")[0] == 404
    assert system.call("GET", f"/jobs/{sched['id']}")[0] == 404
    assert system.call("POST", f"/jobs/{sched['id']}/cancel")[0] == 404
    assert system.call("GET", f"/jobs/{job['id']}")[1]["state"] == "scheduled"
    assert system.call("GET", f"/schedules/{sched['id']}")[1]["state"] == "active"


# --- tenant isolation --------------------------------------------------------------------

SCHEDULE_ROUTES = [
    ("GET", "/schedules/{id}", None),
    ("PUT", "/schedules/{id}", {"spec": "rate(2 minutes)", "target": PYTHON}),
    ("DELETE", "/schedules/{id}", None),
    ("POST", "/schedules/{id}/pause", None),
    ("POST", "/schedules/{id}/resume", None),
    ("POST", "/schedules/{id}/trigger", None),
    ("GET", "/schedules/{id}/preview", None),
    ("GET", "/schedules/{id}/occurrences", None),
]


@pytest.mark.parametrize(
    ("method", "path", "body"), SCHEDULE_ROUTES, ids=[f"{m} {p}" for m, p, _ in SCHEDULE_ROUTES]
)
def test_another_tenants_schedule_is_not_found(
    system: System, method: str, path: str, body: Any
) -> None:
    # GIVEN tenant-a's schedule
    mine = create(system)
    if path.endswith("/resume"):
        system.call("POST", f"/schedules/{mine['id']}/pause")
    before = system.call("GET", f"/schedules/{mine['id']}")
    # WHEN tenant-b addresses it
    status, answer = system.call(method, path.format(id=mine["id"]), body, tenant=B)
    # THEN it is 404 (not 403: the id's existence does not leak)
    assert status == 404
    assert answer["error"]["type"] == "not_found"
    # AND tenant-a's schedule is untouched, and nothing was fired
    assert system.call("GET", f"/schedules/{mine['id']}") == before
    assert system.call("GET", f"/schedules/{mine['id']}/occurrences")[1]["items"] == []
    assert system.receive_all() == []


@pytest.mark.parametrize(("method", "suffix"), [("GET", ""), ("POST", "/cancel")])
def test_another_tenants_job_is_not_found(system: System, method: str, suffix: str) -> None:
    job = create_job(system, delay_seconds=60)
    status, answer = system.call(method, f"/jobs/{job['id']}{suffix}", tenant=B)
    assert status == 404
    assert answer["error"]["type"] == "not_found"
    assert system.call("GET", f"/jobs/{job['id']}") == (200, job)


def test_another_tenants_list_does_not_contain_the_schedule(system: System) -> None:
    # GIVEN a schedule of each tenant
    mine, theirs = create(system), create(system, tenant=B)
    # THEN each lists only its own
    assert [s["id"] for s in listing(system, A)] == [mine["id"]]
    assert [s["id"] for s in listing(system, B)] == [theirs["id"]]


def test_a_cursor_from_another_tenants_listing_is_refused(system: System) -> None:
    # GIVEN a cursor into tenant-a's listing
    create(system)
    create(system)
    status, page = system.call("GET", "/schedules", query={"limit": "1"})
    assert status == 200 and page["next_cursor"] is not None
    # WHEN tenant-b presents it
    response = system.call("GET", "/schedules", tenant=B, query={"cursor": page["next_cursor"]})
    # THEN it is refused naming the cursor
    assert error_of(response) == (400, "cursor")


def test_a_tenant_id_in_the_body_is_an_unknown_field(system: System) -> None:
    response = system.call("POST", "/schedules", {**VALID, "tenant_id": B})
    assert error_of(response) == (422, "tenant_id")
    assert stored(system, A) == [] and stored(system, B) == []


def test_a_tenant_header_is_ignored(system: System) -> None:
    # WHEN tenant-a's request carries a header naming tenant-b
    status, created = system.call("POST", "/schedules", VALID, headers={"X-Tenant-Id": B})
    # THEN the schedule is tenant-a's, as the authorizer said
    assert status == 201
    assert system.call("GET", f"/schedules/{created['id']}")[0] == 200
    assert system.call("GET", f"/schedules/{created['id']}", tenant=B)[0] == 404
    assert [s.schedule_id for s in stored(system, A)] == [created["id"]]
    assert stored(system, B) == []
    # AND the header does not let tenant-a read tenant-b's schedules either
    theirs = create(system, tenant=B)
    assert system.call("GET", f"/schedules/{theirs['id']}", headers={"X-Tenant-Id": B})[0] == 404


ALL_ROUTES = [
    ("POST", "/schedules", VALID),
    ("GET", "/schedules", None),
    *SCHEDULE_ROUTES,
    ("POST", "/jobs", {"delay_seconds": 60, "target": PYTHON}),
    ("GET", "/jobs/{job}", None),
    ("POST", "/jobs/{job}/cancel", None),
    ("POST", "/jobs/{job}/heartbeat", {"progress": {"step": 1}}),
    ("GET", "/dead-letters", None),
    ("POST", "/dead-letters/{job}/redrive", None),
]


@pytest.mark.parametrize(
    ("method", "path", "body"), ALL_ROUTES, ids=[f"{m} {p}" for m, p, _ in ALL_ROUTES]
)
def test_a_request_without_authorizer_context_is_401(
    system: System, method: str, path: str, body: Any
) -> None:
    # GIVEN tenant-a's schedule and job
    mine, job = create(system), create_job(system, delay_seconds=60)
    before = stored(system)
    # WHEN a request arrives with no tenant in the authorizer context
    status, answer = system.call(
        method, path.format(id=mine["id"], job=job["id"]), body, tenant=None
    )
    # THEN it is 401 and nothing changed
    assert status == 401
    assert answer["error"]["type"] == "unauthorized"
    assert stored(system) == before
    assert system.receive_all() == []


# --- Idempotency-Key ---------------------------------------------------------------------

CREATES = [
    ("/schedules", VALID, {**VALID, "spec": "rate(2 minutes)"}),
    ("/jobs", {"delay_seconds": 60, "target": PYTHON}, {"delay_seconds": 61, "target": PYTHON}),
]


@pytest.mark.parametrize(("path", "body", "other"), CREATES, ids=["schedule", "job"])
def test_a_retried_create_with_the_same_key_creates_once(
    system: System, path: str, body: dict[str, Any], other: dict[str, Any]
) -> None:
    key = {"Idempotency-Key": "create-7f3a"}
    # WHEN the same request is sent twice with the same key (a client retry, a bit later)
    first = system.call("POST", path, body, headers=key)
    system.clock.advance(5)
    second = system.call("POST", path, body, headers=key)
    # THEN both are 201 with the same resource, and only one exists
    assert first[0] == second[0] == 201
    assert second[1] == first[1]
    assert [s.schedule_id for s in stored(system)] == [first[1]["id"]]


@pytest.mark.parametrize(("path", "body", "other"), CREATES, ids=["schedule", "job"])
def test_the_same_key_with_another_body_is_422(
    system: System, path: str, body: dict[str, Any], other: dict[str, Any]
) -> None:
    key = {"Idempotency-Key": "create-7f3a"}
    first = system.call("POST", path, body, headers=key)
    before = stored(system)
    # WHEN the key is reused for a different request
    response = system.call("POST", path, other, headers=key)
    # THEN it is refused naming the header, and nothing was created
    assert error_of(response) == (422, "Idempotency-Key")
    assert stored(system) == before
    assert [s.schedule_id for s in before] == [first[1]["id"]]


@pytest.mark.parametrize(("path", "body", "other"), CREATES, ids=["schedule", "job"])
def test_idempotency_keys_are_per_tenant(
    system: System, path: str, body: dict[str, Any], other: dict[str, Any]
) -> None:
    key = {"Idempotency-Key": "create-7f3a"}
    # WHEN two tenants happen to use the same key for the same body
    status_a, of_a = system.call("POST", path, body, headers=key, tenant=A)
    status_b, of_b = system.call("POST", path, body, headers=key, tenant=B)
    # THEN each gets its own resource
    assert status_a == status_b == 201
    assert of_a["id"] != of_b["id"]
    assert [s.schedule_id for s in stored(system, A)] == [of_a["id"]]
    assert [s.schedule_id for s in stored(system, B)] == [of_b["id"]]


def test_a_request_that_failed_does_not_use_up_its_key(system: System) -> None:
    key = {"Idempotency-Key": "create-7f3a"}
    bad = system.call("POST", "/schedules", {**VALID, "timezone": "Mars/Olympus"}, headers=key)
    assert error_of(bad) == (400, "timezone")
    status, created = system.call("POST", "/schedules", VALID, headers=key)
    assert status == 201
    assert [s["id"] for s in listing(system)] == [created["id"]]


def test_a_malformed_idempotency_key_is_400(system: System) -> None:
    response = system.call("POST", "/schedules", VALID, headers={"Idempotency-Key": "has space"})
    assert error_of(response) == (400, "Idempotency-Key")
    assert listing(system) == []


def test_a_retried_trigger_with_the_same_key_fires_once(system: System) -> None:
    # GIVEN a schedule triggered with a key
    created = create(system, spec="rate(1 hour)")
    trigger = f"/schedules/{created['id']}/trigger"
    first = system.call("POST", trigger, headers={"Idempotency-Key": "fire-1"})
    # WHEN the trigger is retried with the same key three seconds later
    system.clock.advance(3)
    second = system.call("POST", trigger, headers={"Idempotency-Key": "fire-1"})
    # THEN it answers with the same occurrence, and only one message went out
    assert first[0] == second[0] == 202
    assert second[1]["key"] == first[1]["key"]
    assert [m["occurrence_key"] for m in system.receive_all()] == [first[1]["key"]]
    # AND a new key is a new fire
    third = system.call("POST", trigger, headers={"Idempotency-Key": "fire-2"})
    assert third[0] == 202
    # (a trigger never takes a whole second, the key of the schedule's own fire there)
    assert third[1]["fire_time"] == "2026-05-01T12:00:02.999000Z"
    assert [m["occurrence_key"] for m in system.receive_all()] == [third[1]["key"]]
    history = system.call("GET", f"/schedules/{created['id']}/occurrences")[1]["items"]
    assert {o["key"] for o in history} == {first[1]["key"], third[1]["key"]}


# --- refused input -----------------------------------------------------------------------

BIG = "x" * (70 * 1024)


def bad(
    name: str,
    status: int,
    field: str,
    body: Any = None,
    *,
    method: str = "POST",
    path: str = "/schedules",
    query: dict[str, str] | None = None,
) -> Any:
    """One refused request: what is sent, then the status and the field it must name."""
    return pytest.param(method, path, body, query, status, field, id=name)


def body_with(**fields: Any) -> dict[str, Any]:
    return {**VALID, **fields}


PREVIEW, HISTORY = "/schedules/{id}/preview", "/schedules/{id}/occurrences"
BAD_INPUT = [
    bad("bad cron field", 400, "spec", body_with(spec="cron(61 * * * *)")),
    bad("unknown timezone", 400, "timezone", body_with(timezone="Mars/Olympus")),
    bad("unknown field", 422, "retyr", body_with(retyr={"max_attempts": 2})),
    bad("bad job_class", 422, "job_class", body_with(job_class="huge")),
    bad("zero attempts", 422, "retry.max_attempts", body_with(retry={"max_attempts": 0})),
    bad("jitter 901", 422, "jitter_seconds", body_with(jitter_seconds=901)),
    bad("payload over 64 KiB", 422, "payload", body_with(payload={"blob": BIG})),
    bad("http non-URL", 422, "target.url", body_with(target={"type": "http", "url": "not a url"})),
    bad(
        "lambda bad ARN",
        422,
        "target.function_arn",
        body_with(target={"type": "lambda", "function_arn": "arn:aws:s3:::bucket"}),
    ),
    bad("unknown target type", 422, "target", body_with(target={"type": "ftp"})),
    bad(
        "http target over plain http",
        400,
        "target.url",
        body_with(target={"type": "http", "url": "http://hooks.example.com/x"}),
    ),
    bad(
        "http target at the metadata address",
        400,
        "target.url",
        body_with(target={"type": "http", "url": "https://169.254.169.254/latest/meta-data"}),
    ),
    bad(
        "http target at the IPv6 metadata address",
        400,
        "target.url",
        body_with(target={"type": "http", "url": "https://[fd00:ec2::254]/"}),
    ),
    bad(
        "http target at a decimal loopback",
        400,
        "target.url",
        {"delay_seconds": 5, "target": {"type": "http", "url": "https://2130706433/"}},
        path="/jobs",
    ),
    bad(
        "http target at a private address",
        400,
        "target.url",
        body_with(target={"type": "http", "url": "https://10.0.0.1/"}),
        method="PUT",
        path="/schedules/{id}",
    ),
    bad(
        "http header value with CR/LF",
        422,
        "target.headers",
        body_with(
            target={"type": "http", "url": "https://x.example", "headers": {"A": "1\r\nB: 2"}}
        ),
    ),
    bad(
        "http header without a name",
        422,
        "target.headers",
        body_with(target={"type": "http", "url": "https://x.example", "headers": {"": "v"}}),
    ),
    bad(
        "http header name with a space",
        422,
        "target.headers",
        body_with(target={"type": "http", "url": "https://x.example", "headers": {"X Y": "v"}}),
    ),
    bad(
        "http header Fireline sets",
        422,
        "target.headers",
        body_with(
            target={"type": "http", "url": "https://x.example", "headers": {"idempotency-key": "k"}}
        ),
    ),
    bad(
        "job http header value with CR/LF",
        422,
        "target.headers",
        {
            "delay_seconds": 5,
            "target": {"type": "http", "url": "https://x.example", "headers": {"A": "\n"}},
        },
        path="/jobs",
    ),
    bad(
        "end before start",
        400,
        "end",
        body_with(start="2026-06-01T00:00Z", end="2026-05-15T00:00Z"),
    ),
    bad("never fires", 400, "spec", body_with(spec="0 0 30 2 *")),
    bad("unknown natural language", 400, "spec", body_with(spec="every blue moon")),
    bad("not JSON", 422, "body", "{not json"),
    bad("not an object", 422, "body", "[]"),
    bad(
        "update bad cron",
        400,
        "spec",
        body_with(spec="cron(1 2 3)"),
        method="PUT",
        path="/schedules/{id}",
    ),
    bad(
        "update unknown field",
        422,
        "retyr",
        body_with(retyr={}),
        method="PUT",
        path="/schedules/{id}",
    ),
    bad("bad schedule id", 422, "schedule_id", method="GET", path="/schedules/not an id"),
    bad(
        "job run_at and delay",
        422,
        "delay_seconds",
        {"run_at": "2026-05-01T13:00:00Z", "delay_seconds": 60, "target": PYTHON},
        path="/jobs",
    ),
    bad("job neither", 422, "delay_seconds", {"target": PYTHON}, path="/jobs"),
    bad(
        "job run_at without offset",
        422,
        "run_at",
        {"run_at": "2026-05-01T13:00:00", "target": PYTHON},
        path="/jobs",
    ),
    bad(
        "job bad job_class",
        422,
        "job_class",
        {"delay_seconds": 5, "job_class": "huge", "target": PYTHON},
        path="/jobs",
    ),
    bad("preview count 0", 422, "count", method="GET", path=PREVIEW, query={"count": "0"}),
    bad("preview count 101", 422, "count", method="GET", path=PREVIEW, query={"count": "101"}),
    bad("list limit 0", 422, "limit", method="GET", query={"limit": "0"}),
    bad("list tampered cursor", 400, "cursor", method="GET", query={"cursor": "bm90LWEtY3Vyc29y!"}),
    bad(
        "list cursor not an object",
        400,
        "cursor",
        method="GET",
        query={"cursor": cursor_of(["tenant-a"])},
    ),
    bad("history limit 101", 422, "limit", method="GET", path=HISTORY, query={"limit": "101"}),
    bad(
        "history tampered cursor",
        400,
        "cursor",
        method="GET",
        path=HISTORY,
        query={"cursor": "%%%"},
    ),
    bad(
        "history cursor of another schedule",
        400,
        "cursor",
        method="GET",
        path=HISTORY,
        query={"cursor": cursor_of({"schedule_id": "sch_other", "occurrence_sk": "x"})},
    ),
    bad("body over 128 KiB", 413, "body", body_with(payload={"blob": "x" * (130 * 1024)})),
    bad(
        "long deadline past the runner's limit",
        400,
        "deadline_seconds",
        body_with(job_class="long", deadline_seconds=3600),
    ),
    bad(
        "deadline past the worker's limit", 400, "deadline_seconds", body_with(deadline_seconds=600)
    ),
    bad(
        "update with a deadline past the limit",
        400,
        "deadline_seconds",
        body_with(job_class="short", deadline_seconds=21),
        method="PUT",
        path="/schedules/{id}",
    ),
    bad(
        "job deadline past the runner's limit",
        400,
        "deadline_seconds",
        {"delay_seconds": 5, "job_class": "long", "deadline_seconds": 841, "target": PYTHON},
        path="/jobs",
    ),
]


@pytest.mark.parametrize(("method", "path", "body", "query", "status", "field"), BAD_INPUT)
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(
    system: System,
    method: str,
    path: str,
    body: Any,
    query: dict[str, str] | None,
    status: int,
    field: str,
) -> None:
    # GIVEN tenant-a has a schedule and a job
    mine = create(system)
    create_job(system, delay_seconds=60)
    listed, kept = listing(system), stored(system)
    # WHEN a bad request arrives
    response = system.call(method, path.format(id=mine["id"]), body, query=query)
    # THEN it is refused with the status and the field at fault
    assert error_of(response) == (status, field)
    # AND the tenant's schedules and jobs are as they were
    assert listing(system) == listed
    assert stored(system) == kept
    print(f"\n{method} {path}: {status} naming {field!r}, nothing changed")


@pytest.mark.parametrize(
    "key",
    [{"tenant_id": A}, {"tenant_id": A, "schedule_id": 5}],
    ids=["missing-attribute", "wrong-type"],
)
def test_a_cursor_of_the_right_tenant_with_a_bad_key_is_400(
    system: System, key: dict[str, Any]
) -> None:
    create(system)
    response = system.call("GET", "/schedules", query={"cursor": cursor_of(key)})
    assert error_of(response) == (400, "cursor")


# --- OpenAPI -----------------------------------------------------------------------------


def test_openapi_document_is_valid_and_lists_every_route(system: System) -> None:
    # WHEN the document is fetched without any tenant
    status, document = system.call("GET", "/openapi.json", tenant=None)
    # THEN it is a valid OpenAPI document
    assert status == 200
    validate(document)
    assert document["info"]["title"] == "Fireline"
    # AND it lists every route with its method
    routes = {(path, method) for path, ops in document["paths"].items() for method in ops}
    assert routes == {
        ("/schedules", "post"),
        ("/schedules", "get"),
        ("/schedules/{schedule_id}", "get"),
        ("/schedules/{schedule_id}", "put"),
        ("/schedules/{schedule_id}", "delete"),
        ("/schedules/{schedule_id}/pause", "post"),
        ("/schedules/{schedule_id}/resume", "post"),
        ("/schedules/{schedule_id}/trigger", "post"),
        ("/schedules/{schedule_id}/skip", "post"),
        ("/schedules/{schedule_id}/skip", "delete"),
        ("/schedules/{schedule_id}/backfill", "post"),
        ("/schedules/{schedule_id}/backfill/{backfill_id}", "get"),
        ("/schedules/{schedule_id}/backfill/{backfill_id}", "delete"),
        ("/schedules/{schedule_id}/preview", "get"),
        ("/schedules/{schedule_id}/occurrences", "get"),
        ("/jobs", "post"),
        ("/jobs/batch", "post"),
        ("/jobs", "get"),
        ("/jobs/{job_id}", "get"),
        ("/jobs/{job_id}/cancel", "post"),
        ("/jobs/{job_id}/heartbeat", "post"),
        ("/dead-letters", "get"),
        ("/dead-letters/{dead_letter_id}/redrive", "post"),
        # what the console reads: the key's tenant and role, and an operator's tenants
        ("/whoami", "get"),
        ("/tenants", "get"),
    }
    # AND the non-200 successes are documented with their status
    paths = document["paths"]
    assert "201" in paths["/schedules"]["post"]["responses"]
    assert "201" in paths["/jobs"]["post"]["responses"]
    assert "202" in paths["/schedules/{schedule_id}/trigger"]["post"]["responses"]
    assert "204" in paths["/schedules/{schedule_id}"]["delete"]["responses"]
    assert "202" in paths["/dead-letters/{dead_letter_id}/redrive"]["post"]["responses"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/schedules", {**VALID, "end": "9999-12-31T23:59:59-01:00"}, "end"),
        ("/schedules", {**VALID, "start": "0001-01-01T00:00:00+01:00"}, "start"),
        ("/jobs", {"run_at": "9999-12-31T23:59:59-01:00", "target": PYTHON}, "run_at"),
        ("/schedules", {**VALID, "spec": "at(9999-12-31T23:59:59-01:00)"}, "spec"),
    ],
    ids=["end", "start", "run_at", "at-spec"],
)
def test_times_outside_what_can_be_stored_are_refused(
    system: System, path: str, body: dict[str, Any], field: str
) -> None:
    # GIVEN a time that cannot be converted to UTC epoch milliseconds and back
    before = stored(system)
    status, answer = system.call("POST", path, body)
    # THEN it is a 4xx naming the field, and nothing was stored
    assert status in (400, 422)
    assert answer["error"]["field"] == field
    assert stored(system) == before


def test_the_root_answers_an_index_of_links_without_a_key(system: System) -> None:
    # WHEN a client without a key asks for the API's root
    status, index = system.call("GET", "/", tenant=None)
    # THEN it is told where the console, the docs and the API description are
    assert status == 200, index
    assert index["links"] == {"console": "console", "docs": "docs", "openapi": "openapi.json"}
    # AND each link is a route the API serves without a key
    for link in index["links"].values():
        assert raw(system, "GET", f"/{link}")["statusCode"] == 200, link


def test_a_browser_at_the_root_gets_a_page_of_those_links(system: System) -> None:
    # WHEN a browser (it accepts HTML) asks for the root
    response = raw(system, "GET", "/", {"accept": "text/html,*/*"})
    # THEN it gets a page linking to each, relative to the root (a stage's path holds)
    assert response["statusCode"] == 200
    assert response["multiValueHeaders"]["Content-Type"] == ["text/html"]
    for href in ("console", "docs", "openapi.json"):
        assert f'href="{href}"' in response["body"]


def raw(
    system: System, method: str, path: str, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """The API's whole answer to a request without a key."""
    event = api_event(method, path, None, tenant=None, headers=headers)
    return api_app.handle(system._api, event, None)
