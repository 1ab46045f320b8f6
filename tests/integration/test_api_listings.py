"""Listings: a page holds what exists, whatever else shares the table."""

from __future__ import annotations

import pytest

from helpers.system import System

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
