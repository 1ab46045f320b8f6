"""Listings: a page holds what exists, whatever else shares the table."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fireline.adapters import memory
from fireline.api import app as api_app
from fireline.domain import occurrence
from fireline.services import dispatch
from fireline.services import schedules as schedules_service
from helpers.flows import Flow
from helpers.memory_system import MemorySystem
from helpers.system import System, moto_flow, moto_system

PYTHON = {"type": "python", "handler": "noop"}

pytestmark = pytest.mark.filterwarnings(
    "ignore:Couldn't determine the remaining time left:UserWarning"
)


def test_a_first_page_of_schedules_is_not_empty_when_jobs_come_first(system: System) -> None:
    # GIVEN six one-off jobs (their ids sort before schedules' in the tenant's partition)
    # and two schedules
    for _ in range(6):
        assert system.call("POST", "/jobs", {"delay_seconds": 60, "target": PYTHON})[0] == 201
    made = set()
    for _ in range(2):
        status, body = system.call("POST", "/schedules", {"spec": "rate(1 hour)", "target": PYTHON})
        assert status == 201, body
        made.add(body["id"])
    # WHEN the first page of five is asked for
    status, page = system.call("GET", "/schedules", query={"limit": "5"})
    # THEN it holds both schedules, and says there is nothing more
    assert status == 200, page
    assert {item["id"] for item in page["items"]} == made
    assert page["next_cursor"] is None


def test_pages_of_schedules_are_full_until_the_last(system: System) -> None:
    # GIVEN jobs and schedules interleaved in the partition
    made = set()
    for n in range(9):
        if n % 3 == 0:
            assert system.call("POST", "/jobs", {"delay_seconds": 60, "target": PYTHON})[0] == 201
        status, body = system.call("POST", "/schedules", {"spec": "rate(1 hour)", "target": PYTHON})
        made.add(body["id"])
    # WHEN the list is walked two at a time
    seen: list[str] = []
    query = {"limit": "2"}
    sizes = []
    while True:
        status, page = system.call("GET", "/schedules", query=query)
        assert status == 200, page
        sizes.append(len(page["items"]))
        seen += [item["id"] for item in page["items"]]
        if page["next_cursor"] is None:
            break
        query = {"limit": "2", "cursor": page["next_cursor"]}
    # THEN every page but the last is full, and each schedule comes once
    assert sorted(seen) == sorted(made)
    assert all(size == 2 for size in sizes[:-1]), sizes


# --- the same listings on the memory adapters and on moto ----------------------------------


class MemoryApi(System):
    """The API on the memory adapters, called as on moto (``System.call``)."""

    def __init__(self) -> None:  # no AWS stack: only the API, on the memory stores
        memory = MemorySystem()
        self.clock = memory.clock
        self.schedules = memory.schedules  # type: ignore[assignment]
        self.occurrences = memory.occurrences  # type: ignore[assignment]
        self.service = memory.service
        self._api = api_app.build_app(memory.service)


@pytest.fixture(params=["moto", "memory"])
def api(request: pytest.FixtureRequest) -> Iterator[System]:
    if request.param == "memory":
        yield MemoryApi()
        return
    with moto_system() as built:
        yield built


def walk(api: System, path: str, query: dict[str, str], tenant: str = "tenant-a") -> list[Any]:
    """Every item of a listing, page by page; every page but the last is full."""
    items: list[Any] = []
    sizes: list[int] = []
    page_query = dict(query)
    while True:
        status, page = api.call("GET", path, query=page_query, tenant=tenant)
        assert status == 200, page
        items += page["items"]
        sizes.append(len(page["items"]))
        if page["next_cursor"] is None:
            break
        page_query = {**query, "cursor": page["next_cursor"]}
    limit = int(query.get("limit", "50"))
    assert all(size == limit for size in sizes[:-1]), sizes
    return items


def error_field(response: tuple[int, Any]) -> tuple[int, str | None]:
    status, body = response
    return status, body["error"]["field"] if status >= 400 else None


def make_job(api: System, tenant: str = "tenant-a") -> str:
    status, body = api.call("POST", "/jobs", {"delay_seconds": 60, "target": PYTHON}, tenant=tenant)
    assert status == 201, body
    return str(body["id"])


def test_jobs_are_listed_by_state_and_only_the_tenants(api: System) -> None:
    # GIVEN five jobs of tenant-a, two of them cancelled, a schedule, and tenant-b's job
    jobs = [make_job(api) for _ in range(5)]
    for job_id in jobs[:2]:
        assert api.call("POST", f"/jobs/{job_id}/cancel")[0] == 200
    assert api.call("POST", "/schedules", {"spec": "rate(1 hour)", "target": PYTHON})[0] == 201
    make_job(api, tenant="tenant-b")
    # WHEN every job is listed two at a time THEN each of tenant-a's comes once, no more
    listed = walk(api, "/jobs", {"limit": "2"})
    assert sorted(j["id"] for j in listed) == sorted(jobs)
    # AND a state filter keeps that state's jobs only
    cancelled = walk(api, "/jobs", {"limit": "1", "state": "cancelled"})
    assert sorted(j["id"] for j in cancelled) == sorted(jobs[:2])
    assert {j["state"] for j in cancelled} == {"cancelled"}
    waiting = walk(api, "/jobs", {"state": "scheduled"})
    assert sorted(j["id"] for j in waiting) == sorted(jobs[2:])
    assert walk(api, "/jobs", {"state": "dead"}) == []


def test_a_first_page_of_jobs_is_not_empty_when_the_state_comes_late(api: System) -> None:
    # GIVEN four scheduled jobs, then one cancelled (the last in id order)
    jobs = [make_job(api) for _ in range(5)]
    last = max(jobs)
    assert api.call("POST", f"/jobs/{last}/cancel")[0] == 200
    # WHEN the first page of cancelled jobs is asked for
    status, page = api.call("GET", "/jobs", query={"state": "cancelled", "limit": "1"})
    # THEN it holds it, and nothing is left
    assert status == 200, page
    assert [j["id"] for j in page["items"]] == [last]
    assert page["next_cursor"] is None


def test_a_job_listing_cursor_is_good_for_its_tenant_and_filter_only(api: System) -> None:
    for _ in range(3):
        make_job(api)
    make_job(api, tenant="tenant-b")
    cursor = api.call("GET", "/jobs", query={"limit": "1"})[1]["next_cursor"]
    assert cursor is not None
    # another tenant, another filter, another listing: refused, naming the cursor
    assert error_field(api.call("GET", "/jobs", query={"cursor": cursor}, tenant="tenant-b")) == (
        400,
        "cursor",
    )
    other_filter = {"cursor": cursor, "state": "scheduled"}
    assert error_field(api.call("GET", "/jobs", query=other_filter)) == (400, "cursor")
    assert error_field(api.call("GET", "/schedules", query={"cursor": cursor})) == (400, "cursor")
    # and the same filter goes on
    assert api.call("GET", "/jobs", query={"limit": "1", "cursor": cursor})[0] == 200


@pytest.mark.parametrize("state", ["exploded", "Queued", ""])
def test_a_job_listing_with_an_unknown_state_is_400_naming_it(api: System, state: str) -> None:
    status, body = api.call("GET", "/jobs", query={"state": state})
    assert (status, body["error"]["field"]) == (400, "state")
    assert "'scheduled'" in body["error"]["message"]


# --- GET /schedules: by state and text ----------------------------------------------------


def make_schedule(api: System, spec: str, tenant: str = "tenant-a") -> dict[str, Any]:
    status, body = api.call("POST", "/schedules", {"spec": spec, "target": PYTHON}, tenant=tenant)
    assert status == 201, body
    return dict(body)


def test_schedules_are_listed_by_state_and_text_and_only_the_tenants(api: System) -> None:
    # GIVEN schedules of tenant-a (two paused), jobs beside them, and tenant-b's schedule
    hourly = make_schedule(api, "rate(1 hour)")
    nightly = make_schedule(api, "cron(30 2 * * *)")
    weekly = make_schedule(api, "every monday at 09:00")
    daily = make_schedule(api, "every day at 09:00")
    make_job(api)
    for paused in (nightly, daily):
        assert api.call("POST", f"/schedules/{paused['id']}/pause")[0] == 200
    make_schedule(api, "every day at 09:00", tenant="tenant-b")
    # WHEN they are listed by state THEN each state's come, page by page
    assert {s["id"] for s in walk(api, "/schedules", {"state": "paused", "limit": "1"})} == {
        nightly["id"],
        daily["id"],
    }
    active = walk(api, "/schedules", {"state": "active"})
    assert {s["id"] for s in active} == {hourly["id"], weekly["id"]}
    assert walk(api, "/schedules", {"state": "completed"}) == []
    # AND q matches the spec, the description or the id, whatever the case
    assert {s["id"] for s in walk(api, "/schedules", {"q": "CRON(30", "limit": "1"})} == {
        nightly["id"]
    }
    by_description = walk(api, "/schedules", {"q": daily["description"].upper()})
    assert [s["id"] for s in by_description] == [daily["id"]]
    assert [s["id"] for s in walk(api, "/schedules", {"q": weekly["id"]})] == [weekly["id"]]
    # AND both filters hold together
    both = walk(api, "/schedules", {"q": "09:00", "state": "active", "limit": "1"})
    assert [s["id"] for s in both] == [weekly["id"]]


def test_a_first_filtered_page_is_not_empty_when_the_match_comes_last(api: System) -> None:
    # GIVEN jobs and active schedules, and one paused schedule, the last in id order
    for _ in range(3):
        make_job(api)
    made = [make_schedule(api, "rate(1 hour)")["id"] for _ in range(6)]
    last = max(made)
    assert api.call("POST", f"/schedules/{last}/pause")[0] == 200
    # WHEN the first page of one paused schedule is asked for
    status, page = api.call("GET", "/schedules", query={"state": "paused", "limit": "1"})
    # THEN it holds it, and nothing is left
    assert status == 200, page
    assert [s["id"] for s in page["items"]] == [last]
    assert page["next_cursor"] is None


def test_a_filtered_listing_stops_after_its_reads_with_a_cursor_to_go_on(
    api: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a page may make two reads, and the one match sits past four schedules (the
    # last in id order is made the match)
    monkeypatch.setattr(schedules_service, "MAX_LIST_READS", 2)
    last = max(make_schedule(api, "rate(1 hour)")["id"] for _ in range(5))
    status, match = api.call(
        "PUT", f"/schedules/{last}", {"spec": "rate(7 minutes)", "target": PYTHON}
    )
    assert status == 200, match
    # WHEN the first page of two matching is asked for
    query = {"q": "7 minutes", "limit": "2"}
    status, page = api.call("GET", "/schedules", query=query)
    # THEN it stops after its reads, short, with a cursor that reads on to the match
    assert status == 200, page
    assert page["items"] == [] and page["next_cursor"] is not None
    found: list[str] = []
    while page["next_cursor"] is not None:
        page = api.call("GET", "/schedules", query={**query, "cursor": page["next_cursor"]})[1]
        found += [s["id"] for s in page["items"]]
    assert found == [match["id"]]


def test_a_schedule_listing_cursor_is_good_for_its_tenant_and_filters_only(api: System) -> None:
    for _ in range(3):
        make_schedule(api, "rate(1 hour)")
    make_schedule(api, "rate(1 hour)", tenant="tenant-b")
    query = {"limit": "1", "state": "active", "q": "hour"}
    cursor = api.call("GET", "/schedules", query=query)[1]["next_cursor"]
    assert cursor is not None
    for other in (
        {"state": "active"},
        {"q": "hour"},
        {"state": "paused", "q": "hour"},
        {"state": "active", "q": "HOUR"},
    ):
        assert error_field(api.call("GET", "/schedules", query={**other, "cursor": cursor})) == (
            400,
            "cursor",
        )
    elsewhere = api.call("GET", "/schedules", query={**query, "cursor": cursor}, tenant="tenant-b")
    assert error_field(elsewhere) == (400, "cursor")
    assert api.call("GET", "/schedules", query={**query, "cursor": cursor})[0] == 200


@pytest.mark.parametrize("state", ["ended", "Active", "cancelled", ""])
def test_a_schedule_listing_with_an_unknown_state_is_400_naming_it(api: System, state: str) -> None:
    status, body = api.call("GET", "/schedules", query={"state": state})
    assert (status, body["error"]["field"]) == (400, "state")
    assert "'paused'" in body["error"]["message"]


@pytest.mark.parametrize("q", ["", "x" * 257])
def test_a_schedule_listing_with_a_bad_text_is_422_naming_it(api: System, q: str) -> None:
    assert error_field(api.call("GET", "/schedules", query={"q": q})) == (422, "q")


# --- GET /schedules/{id}/occurrences: by state and time range ------------------------------


def triggered(api: System, count: int) -> tuple[str, list[dict[str, Any]]]:
    """A schedule and ``count`` occurrences triggered a second apart, oldest first."""
    status, created = api.call("POST", "/schedules", {"spec": "rate(1 hour)", "target": PYTHON})
    assert status == 201, created
    fired = []
    for _ in range(count):
        status, row = api.call("POST", f"/schedules/{created['id']}/trigger")
        assert status == 202, row
        fired.append(row)
        api.clock.advance(1)
    return str(created["id"]), fired


def cancel_row(api: System, key: str) -> None:
    row = api.occurrences.get(key)
    assert row is not None
    cancelled = row.moved(occurrence.State.CANCELLED, finished_at=api.clock.now())
    assert api.occurrences.transition(cancelled, expected_state=occurrence.State.QUEUED)


def test_occurrences_are_listed_by_state_and_time_range(api: System) -> None:
    # GIVEN six occurrences, the 2nd and 5th cancelled
    schedule_id, fired = triggered(api, 6)
    for n in (1, 4):
        cancel_row(api, fired[n]["key"])
    path = f"/schedules/{schedule_id}/occurrences"
    keys = [row["key"] for row in fired]
    # WHEN they are listed by state THEN each state's rows come, newest first, page by page
    cancelled = walk(api, path, {"state": "cancelled", "limit": "1"})
    assert [o["key"] for o in cancelled] == [keys[4], keys[1]]
    queued = walk(api, path, {"state": "queued", "limit": "2"})
    assert [o["key"] for o in queued] == [keys[5], keys[3], keys[2], keys[0]]
    # AND a range keeps the fire times at or after "from" and before "to"
    window = {"from": fired[1]["fire_time"], "to": fired[4]["fire_time"], "limit": "2"}
    assert [o["key"] for o in walk(api, path, window)] == [keys[3], keys[2], keys[1]]
    both = {**window, "state": "queued"}
    assert [o["key"] for o in walk(api, path, both)] == [keys[3], keys[2]]
    # AND a first page is not empty while the state exists further on
    _, page = api.call("GET", path, query={"state": "cancelled", "limit": "1"})
    assert [o["key"] for o in page["items"]] == [keys[4]]


def test_occurrences_of_another_tenant_are_not_found(api: System) -> None:
    schedule_id, _ = triggered(api, 1)
    status, body = api.call(
        "GET", f"/schedules/{schedule_id}/occurrences", query={"state": "queued"}, tenant="b"
    )
    assert status == 404, body


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"state": "done"}, "state"),
        ({"from": "yesterday"}, "from"),
        ({"to": "2026-05-01T12:00:00"}, "to"),  # no UTC offset
        ({"from": "2026-05-02T00:00:00Z", "to": "2026-05-01T00:00:00Z"}, "from"),
    ],
    ids=["unknown-state", "not-a-time", "no-offset", "empty-range"],
)
def test_a_bad_occurrence_filter_is_400_naming_it(
    api: System, query: dict[str, str], field: str
) -> None:
    schedule_id, _ = triggered(api, 1)
    response = api.call("GET", f"/schedules/{schedule_id}/occurrences", query=query)
    assert error_field(response) == (400, field)


def test_an_occurrence_cursor_is_good_for_its_filter_only(api: System) -> None:
    schedule_id, _ = triggered(api, 3)
    path = f"/schedules/{schedule_id}/occurrences"
    cursor = api.call("GET", path, query={"limit": "1", "state": "queued"})[1]["next_cursor"]
    assert cursor is not None
    for query in ({"state": "cancelled"}, {}, {"state": "queued", "from": "2026-01-01T00:00:00Z"}):
        assert error_field(api.call("GET", path, query={**query, "cursor": cursor})) == (
            400,
            "cursor",
        )
    other_schedule, _ = triggered(api, 1)
    other = api.call(
        "GET",
        f"/schedules/{other_schedule}/occurrences",
        query={"state": "queued", "cursor": cursor},
    )
    assert error_field(other) == (400, "cursor")


# --- GET /workflows and GET /workflows/{id}/runs -------------------------------------------

ONE_NODE = {"nodes": [{"id": "a", "target": PYTHON}], "edges": []}


def with_workflows(system: System, flow: Flow) -> System:
    system._api = api_app.build_app(system.service, workflows=flow.service)
    return system


@pytest.fixture(params=["moto", "memory"])
def wf_api(request: pytest.FixtureRequest) -> Iterator[System]:
    if request.param == "memory":
        api = MemoryApi()
        flow = Flow(
            store=memory.MemoryWorkflowStore(),
            documents=memory.MemoryDocumentStore(),
            occurrences=api.occurrences,
            queue=memory.MemoryWorkQueue(api.clock),
            slots=memory.MemorySlotStore(),
            schedules=api.schedules,
            clock=api.clock,
        )
        yield with_workflows(api, flow)
        return
    with moto_flow() as (system, flow):
        yield with_workflows(system, flow)


def register(api: System, workflow_id: str, tenant: str = "tenant-a") -> None:
    status, body = api.call("PUT", f"/workflows/{workflow_id}", ONE_NODE, tenant=tenant)
    assert status == 201, body


def test_workflows_are_listed_by_id_at_their_latest_version(wf_api: System) -> None:
    # GIVEN three workflows, one registered twice, and another tenant's
    for workflow_id in ("w-c", "w-a", "w-b", "w-a"):
        register(wf_api, workflow_id)
    register(wf_api, "w-other", tenant="tenant-b")
    # WHEN they are listed two at a time
    listed = walk(wf_api, "/workflows", {"limit": "2"})
    # THEN each comes once, by id, at its latest version, and no other tenant's
    assert [(w["workflow_id"], w["version"]) for w in listed] == [
        ("w-a", 2),
        ("w-b", 1),
        ("w-c", 1),
    ]
    assert [w["workflow_id"] for w in walk(wf_api, "/workflows", {}, tenant="tenant-b")] == [
        "w-other"
    ]
    cursor = wf_api.call("GET", "/workflows", query={"limit": "1"})[1]["next_cursor"]
    refused = wf_api.call("GET", "/workflows", query={"cursor": cursor}, tenant="tenant-b")
    assert error_field(refused) == (400, "cursor")


def test_a_workflows_runs_are_listed_newest_first_by_state(wf_api: System) -> None:
    # GIVEN four runs of a workflow a second apart, the 2nd and 3rd cancelled, and a run
    # of another workflow
    register(wf_api, "wf")
    register(wf_api, "other")
    runs = []
    for _ in range(4):
        status, run = wf_api.call("POST", "/workflows/wf/runs")
        assert status == 202, run
        runs.append(run["run_id"])
        wf_api.clock.advance(1)
    assert wf_api.call("POST", "/workflows/other/runs")[0] == 202
    for run_id in runs[1:3]:
        assert wf_api.call("POST", f"/runs/{run_id}/cancel")[0] == 200
    # WHEN they are listed THEN newest first, each once, this workflow's only
    path = "/workflows/wf/runs"
    assert [r["run_id"] for r in walk(wf_api, path, {"limit": "3"})] == runs[::-1]
    # AND by state
    cancelled = walk(wf_api, path, {"state": "cancelled", "limit": "1"})
    assert [r["run_id"] for r in cancelled] == [runs[2], runs[1]]
    running = walk(wf_api, path, {"state": "running", "limit": "1"})
    assert [r["run_id"] for r in running] == [runs[3], runs[0]]
    # AND a first page is not empty while a state's runs come further on
    status, page = wf_api.call("GET", path, query={"state": "cancelled", "limit": "1"})
    assert [r["run_id"] for r in page["items"]] == [runs[2]]
    # AND a cursor is good for its own filter only, a bad state is a 400 naming it, and
    # another tenant finds no such workflow
    cursor = wf_api.call("GET", path, query={"limit": "1"})[1]["next_cursor"]
    other = {"state": "running", "cursor": cursor}
    assert error_field(wf_api.call("GET", path, query=other)) == (400, "cursor")
    assert error_field(wf_api.call("GET", path, query={"state": "done"})) == (400, "state")
    assert wf_api.call("GET", path, tenant="tenant-b")[0] == 404


# --- GET /schedules/{id}/preview: after, and the fires already queued -----------------------


def test_preview_starts_after_any_instant_and_marks_the_queued_fires(api: System) -> None:
    # GIVEN an every-minute schedule whose next two fires were materialized ahead (queued)
    status, created = api.call("POST", "/schedules", {"spec": "rate(1 minute)", "target": PYTHON})
    assert status == 201, created
    item = api.schedules.get("tenant-a", created["id"])
    assert item is not None and item.next_fire is not None
    first = item.next_fire
    for n in range(2):
        row = dispatch.row_for(item, first + timedelta(minutes=n), api.clock.now())
        assert api.occurrences.put_new(row)
    moved = replace(item, next_fire=first + timedelta(minutes=2))
    api.schedules.replace(moved, expected_version=item.version)
    path = f"/schedules/{created['id']}/preview"
    # WHEN the next four fires are previewed
    status, preview = api.call("GET", path, query={"count": "4"})
    assert status == 200, preview
    # THEN the queued ones come first, marked, then the computed ones
    assert [(f["fire_time"], f["queued"]) for f in preview["fires"]] == [
        (iso(first + timedelta(minutes=n)), n < 2) for n in range(4)
    ]
    assert preview["fire_times"] == [f["fire_time"] for f in preview["fires"]]
    # AND after an instant, the fires after it only, whatever the next fire
    later = first + timedelta(minutes=10, seconds=30)
    status, preview = api.call("GET", path, query={"count": "2", "after": iso(later)})
    assert [(f["fire_time"], f["queued"]) for f in preview["fires"]] == [
        (iso(first + timedelta(minutes=11)), False),
        (iso(first + timedelta(minutes=12)), False),
    ]
    status, preview = api.call("GET", path, query={"count": "2", "after": iso(first)})
    assert [(f["fire_time"], f["queued"]) for f in preview["fires"]] == [
        (iso(first + timedelta(minutes=1)), True),
        (iso(first + timedelta(minutes=2)), False),
    ]


@pytest.mark.parametrize("after", ["soon", "2026-05-01T12:00:00", "2026-13-01T00:00:00Z"])
def test_preview_with_a_bad_after_is_400_naming_it(api: System, after: str) -> None:
    _, created = api.call("POST", "/schedules", {"spec": "rate(1 hour)", "target": PYTHON})
    response = api.call("GET", f"/schedules/{created['id']}/preview", query={"after": after})
    assert error_field(response) == (400, "after")


def test_a_paused_schedule_previews_what_it_would_fire_once_resumed(api: System) -> None:
    # GIVEN a paused hourly schedule (it has left the due index: no next fire)
    _, created = api.call("POST", "/schedules", {"spec": "rate(1 hour)", "target": PYTHON})
    status, _ = api.call("POST", f"/schedules/{created['id']}/pause")
    assert status == 200
    # WHEN its next three fires are previewed
    status, preview = api.call("GET", f"/schedules/{created['id']}/preview", query={"count": "3"})
    # THEN they are computed from now, none queued
    assert status == 200, preview
    assert len(preview["fire_times"]) == 3
    assert not any(f["queued"] for f in preview["fires"])


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
