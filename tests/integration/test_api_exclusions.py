"""The API's exclude field and its skip endpoints: exact, validated, answered with the
field at fault, and nothing changed by a refusal."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from fireline.adapters import memory
from fireline.api import app as api_app
from helpers.memory_system import MemorySystem, missing_workflows
from helpers.system import api_event

WEEKDAYS = {
    "spec": "cron(0 9 * * MON-FRI)",
    "timezone": "America/New_York",
    "target": {"type": "python", "handler": "noop"},
}
CHRISTMAS_AT_NINE = "2026-12-25T14:00:00Z"  # 09:00 in New York
THURSDAY_AT_NINE = "2026-12-17T14:00:00Z"


def call(app: Any, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
    response = api_app.handle(app, api_event(method, path, body, **kw), None)
    text = response.get("body") or ""
    return response["statusCode"], json.loads(text) if text else None


@pytest.fixture
def app() -> Any:
    system = MemorySystem(clock=memory.FakeClock(datetime(2026, 12, 14, 15, tzinfo=UTC)))
    return api_app.build_app(system.service, memory.MemoryIdempotencyStore(), missing_workflows())


@pytest.mark.parametrize(
    ("exclude", "field"),
    [
        (["2026-02-30"], "exclude[0]"),
        (["2026-12-25", {"from": "2026-12-31", "to": "2026-12-20"}], "exclude[1].to"),
        (["0 9 * * *"], "exclude[0]"),
        (["* * 1 13 *"], "exclude[0]"),
        (["2026-01-01"] * 65, "exclude"),
        (["* * * * *"], "exclude"),  # every day: it would never fire
    ],
)
def test_a_bad_exclude_list_is_refused_naming_its_entry(
    app: Any, exclude: list[Any], field: str
) -> None:
    # WHEN a schedule is created with a bad exclude entry
    status, body = call(app, "POST", "/schedules", {**WEEKDAYS, "exclude": exclude})
    # THEN it is a 400 naming the entry, and no schedule was created
    assert status in (400, 422) and body["error"]["field"] == field
    assert call(app, "GET", "/schedules")[1]["items"] == []


def test_skip_and_unskip_through_the_api(app: Any) -> None:
    # GIVEN weekdays at 09:00 New York except Christmas
    status, created = call(app, "POST", "/schedules", {**WEEKDAYS, "exclude": ["2026-12-25"]})
    assert status == 201 and created["exclude"] == ["2026-12-25"]
    path = f"/schedules/{created['id']}/skip"
    # WHEN Thursday's fire is skipped (twice: the repeat is idempotent)
    status, skipped = call(app, "POST", path, {"fire_time": THURSDAY_AT_NINE})
    again = call(app, "POST", path, {"fire_time": THURSDAY_AT_NINE})[1]
    # THEN it is a new version holding the skip, and the repeat changed nothing
    assert status == 200 and skipped["version"] == created["version"] + 1
    assert skipped["skipped_fires"] == ["2026-12-17T14:00:00Z"] and again == skipped
    # AND the preview marks it among the fires, and leaves it out of fire_times
    preview = call(app, "GET", f"/schedules/{created['id']}/preview", query={"count": "4"})[1]
    marked = {f["fire_time"]: f["excluded"] for f in preview["fires"]}
    assert marked["2026-12-17T14:00:00Z"] == "skipped"
    assert "2026-12-17T14:00:00Z" not in preview["fire_times"]
    # WHEN the skip is taken back (the fire time in the query)
    status, back = call(app, "DELETE", path, query={"fire_time": THURSDAY_AT_NINE})
    # THEN it is gone, in a new version
    assert status == 200 and back["skipped_fires"] == []
    assert back["version"] == skipped["version"] + 1


@pytest.mark.parametrize(
    "fire_time",
    [
        "2026-12-14T14:00:00Z",  # passed an hour ago
        "2026-12-17T14:00:01Z",  # not a fire
        CHRISTMAS_AT_NINE,  # excluded already
        "not a time",
    ],
)
def test_a_skip_of_no_upcoming_fire_is_a_400_naming_fire_time(app: Any, fire_time: str) -> None:
    # GIVEN the schedule
    created = call(app, "POST", "/schedules", {**WEEKDAYS, "exclude": ["2026-12-25"]})[1]
    path = f"/schedules/{created['id']}/skip"
    # WHEN a time that is none of its upcoming fires is skipped, or its skip taken back
    posted = call(app, "POST", path, {"fire_time": fire_time})
    deleted = call(app, "DELETE", path, query={"fire_time": fire_time})
    # THEN both are refused naming fire_time, and the schedule did not change
    for status, body in (posted, deleted):
        assert status in (400, 422) and body["error"]["field"] == "fire_time"
    assert call(app, "GET", f"/schedules/{created['id']}")[1] == created


def test_a_skip_of_a_paused_schedule_is_a_400(app: Any) -> None:
    # GIVEN a paused schedule
    created = call(app, "POST", "/schedules", WEEKDAYS)[1]
    paused = call(app, "POST", f"/schedules/{created['id']}/pause")[1]
    # WHEN one of its fires is skipped
    status, body = call(
        app, "POST", f"/schedules/{created['id']}/skip", {"fire_time": THURSDAY_AT_NINE}
    )
    # THEN it is refused naming fire_time, and nothing changed
    assert status == 400 and body["error"]["field"] == "fire_time"
    assert call(app, "GET", f"/schedules/{created['id']}")[1] == paused
