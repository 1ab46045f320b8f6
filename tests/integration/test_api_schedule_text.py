"""What a tenant reads back from the API about a schedule's text: every phrase of the
Schedules page (docs/schedules.md) is accepted, and a refusal carries the domain's whole
message, hint included."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from helpers.system import System

SCHEDULES_PAGE = Path(__file__).resolve().parents[2] / "docs" / "schedules.md"
PYTHON = {"type": "python", "handler": "noop"}

pytestmark = pytest.mark.filterwarnings(
    "ignore:Couldn't determine the remaining time left:UserWarning"
)


def documented_phrases() -> list[tuple[str, str]]:
    """(you write, stored as) of the Schedules page's natural-language table."""
    text = SCHEDULES_PAGE.read_text()
    table = text.split("| you write | stored as | described as |", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|", table, flags=re.MULTILINE)
    assert len(rows) >= 6, "the Schedules page's natural-language table was not found"
    return rows


def create(system: System, spec: str) -> tuple[int, Any]:
    return system.call("POST", "/schedules", {"spec": spec, "target": PYTHON})


@pytest.mark.parametrize(("phrase", "stored_as"), documented_phrases())
def test_every_phrase_of_the_schedules_page_is_stored_as_it_says(
    system: System, phrase: str, stored_as: str
) -> None:
    # GIVEN a phrase from the Schedules page's table WHEN a tenant creates a schedule with it
    status, body = create(system, phrase)
    # THEN it is stored as the table says (a relative time: an at() of an instant)
    assert status == 201, body
    if "<now" in stored_as:
        assert re.fullmatch(r"at\(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)", body["spec"])
    else:
        assert body["spec"] == stored_as


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("every 2 hours at :15", "cron(15 */2 * * *)"),
        ("every month on the 1st", "cron(0 0 1 * *)"),
        ("every other day at 10:00", "cron(0 10 */2 * *)"),
        ("twice a day at 9am and 9pm", "cron(0 9,21 * * *)"),
        ("weekends at quarter past 10", "cron(15 10 * * 0,6)"),
        ("At 09:00, Monday through Friday (UTC)", "cron(0 9 * * 1-5)"),
        ("0 9 * * MON-FRI", "cron(0 9 * * MON-FRI)"),
    ],
)
def test_common_forms_and_descriptions_are_accepted(
    system: System, spec: str, expected: str
) -> None:
    status, body = create(system, spec)
    assert status == 201, body
    assert body["spec"] == expected


@pytest.mark.parametrize(
    ("spec", "hint"),
    [
        ("every tuesdy at 8", "try 'every tuesday at 08:00'"),
        ("61 * * * *", "(minute, field 1)"),
        ("cron(0 9 * * MNO)", "(day_of_week, field 5)"),
        ("on the 32nd of every month", "(day_of_month)"),
    ],
)
def test_a_refusal_carries_the_domains_hint(system: System, spec: str, hint: str) -> None:
    # WHEN a tenant sends a spec the domain refuses with a hint
    status, body = create(system, spec)
    # THEN the answer names the field and keeps the hint, and nothing was stored
    assert status == 400, body
    assert body["error"]["field"] == "spec"
    assert hint in body["error"]["message"], body
    assert not body["error"]["message"].startswith("spec:")
    _, page = system.call("GET", "/schedules")
    assert page["items"] == []
