"""Rows written before the API refused deep JSON (payloads nested ~300 levels) must not
break what shows them: every listing and GET answers 200, the deep value shown as an
account of it (marked truncated, with its reason and the start of its text)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from fireline.domain import model, occurrence
from fireline.services import targets
from integration.test_api_input import Api, api

__all__ = ["api"]  # the fixture, shared with the other hostile-input tests

DEPTH = 300


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": True}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def assert_marked(shown: Any) -> None:
    assert shown["truncated"] is True
    assert shown["reason"] == f"nests deeper than {model.MAX_JSON_DEPTH} levels"
    assert shown["preview"].startswith('{"a": {"a":')


def written_deep(api: Api) -> tuple[str, str]:
    """A schedule and a job whose stored payloads nest DEPTH levels, and a dead occurrence
    of each whose progress does, all written straight into the tables as an older
    version could have; the schedule's and the job's ids."""
    system = api.system
    for schedule_id in (api.schedule_id, api.job_id):
        item = system.schedules.get("tenant-a", schedule_id)
        assert item is not None
        system.schedules.replace(
            replace(item, payload=nested(DEPTH)), expected_version=item.version
        )
    for schedule_id in (api.schedule_id, api.job_id):
        item = system.schedules.get("tenant-a", schedule_id)
        assert item is not None
        now = system.clock.now()
        row = occurrence.new(
            tenant_id="tenant-a",
            schedule_id=schedule_id,
            version=item.version,
            fire_time=now,
            job_class=item.job_class,
            created_at=now,
        )
        dead = replace(
            row,
            state=occurrence.State.DEAD,
            attempts=3,
            finished_at=now,
            exit_reason="error: x",
            progress=nested(DEPTH),
        )
        assert system.occurrences.put_new(dead)
    return api.schedule_id, api.job_id


def test_every_answer_that_shows_a_deep_stored_value_is_200_and_marks_it(api: Api) -> None:
    schedule_id, job_id = written_deep(api)

    status, page = api.call("GET", "/schedules")
    assert status == 200
    by_id = {item["id"]: item for item in page["items"]}
    assert_marked(by_id[schedule_id]["payload"])

    status, one = api.call("GET", f"/schedules/{schedule_id}")
    assert status == 200
    assert_marked(one["payload"])

    status, job = api.call("GET", f"/jobs/{job_id}")
    assert status == 200
    assert_marked(job["payload"])
    assert_marked(job["occurrence"]["progress"])

    status, history = api.call("GET", f"/schedules/{schedule_id}/occurrences")
    assert status == 200
    (row,) = history["items"]
    assert_marked(row["progress"])

    status, dead = api.call("GET", "/dead-letters")
    assert status == 200
    letters = [d for d in dead["items"] if d["schedule_id"] in (schedule_id, job_id)]
    assert len(letters) == 2
    for letter in letters:
        assert_marked(letter["progress"])


def test_an_ordinary_stored_value_is_shown_as_itself(api: Api) -> None:
    within = nested(model.MAX_JSON_DEPTH)
    item = api.system.schedules.get("tenant-a", api.schedule_id)
    assert item is not None
    api.system.schedules.replace(replace(item, payload=within), expected_version=item.version)
    status, one = api.call("GET", f"/schedules/{api.schedule_id}")
    assert status == 200 and one["payload"] == within


@pytest.mark.parametrize("depth", [model.MAX_JSON_DEPTH + 1, DEPTH, 900])
def test_what_a_job_reports_too_deep_is_stored_as_an_account(depth: int) -> None:
    # A job's output and progress are stored through jsonable: never deeper than an
    # answer can show.
    kept = targets.jsonable(nested(depth))
    assert_marked(kept)
    assert model.json_depth(kept) <= model.MAX_JSON_DEPTH


def test_depth_is_measured_without_recursion() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    assert model.json_depth(deep) == model.MAX_JSON_DEPTH + 1
    assert model.json_depth(deep, limit=200_000) == 100_001
    assert model.json_depth({"a": [1, {"b": 2}]}) == 3
    assert model.json_depth("text") == 0
