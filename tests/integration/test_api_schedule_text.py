"""What a tenant reads back from the API about a schedule's text: every phrase of the
Schedules page's table (docs/schedules-natural-language.md) is accepted, and a refusal
carries the domain's whole message, hint included."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fireline.domain import natural
from helpers.system import System, moto_system

NATURAL_TABLE = Path(__file__).resolve().parents[2] / "docs" / "schedules-natural-language.md"
PYTHON = {"type": "python", "handler": "noop"}

pytestmark = pytest.mark.filterwarnings(
    "ignore:Couldn't determine the remaining time left:UserWarning"
)


def documented_phrases() -> list[tuple[str, str]]:
    """(you write, stored as) of the Schedules page's natural-language table."""
    text = NATURAL_TABLE.read_text()
    table = text.split("| you write | stored as | zone | described as |", 1)[1]
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|", table, flags=re.MULTILINE)
    assert len(rows) >= 6, "the Schedules page's natural-language table was not found"
    return rows


def stored_as_at(phrase: str, stored_as: str, now: datetime) -> str:
    """The spec the table's row means when read at ``now``: its own for a phrase whose
    meaning does not move with the time it is read, else the phrase read at ``now``."""
    later = natural.GRAMMAR_NOW + timedelta(days=1, minutes=1)
    if str(natural.translate(phrase, later).spec) == stored_as:
        return stored_as
    return str(natural.translate(phrase, now).spec)


def create(system: System, spec: str) -> tuple[int, Any]:
    return system.call("POST", "/schedules", {"spec": spec, "target": PYTHON})


@pytest.mark.parametrize(("phrase", "stored_as"), documented_phrases())
def test_every_phrase_of_the_schedules_page_is_stored_as_it_says(
    system: System, phrase: str, stored_as: str
) -> None:
    # GIVEN a phrase from the Schedules page's table WHEN a tenant creates a schedule with it
    status, body = create(system, phrase)
    # THEN it is stored as the table says; a relative phrase ("in 3 days", "tomorrow"),
    # whose row was read at the grammar's own moment, as read at the request's
    assert status == 201, body
    assert body["spec"] == stored_as_at(phrase, stored_as, system.clock.now())


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
        ("every tuesdy at 8", "try 'every tuesday at 8'"),
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


@pytest.fixture
def at_grammar_now() -> Iterator[System]:
    """The system with its clock at the instant the grammar's table is read at."""
    with moto_system(natural.GRAMMAR_NOW) as built:
        yield built


@pytest.mark.parametrize("example", natural.GRAMMAR, ids=lambda e: e.phrase)
def test_every_phrase_of_the_grammar_table_is_stored_zoned_and_described_as_it_says(
    at_grammar_now: System, example: natural.Example
) -> None:
    # GIVEN the clock at the table's instant WHEN a tenant creates a schedule with a phrase
    status, body = create(at_grammar_now, example.phrase)
    # THEN the API answers with the spec, zone and description of the table
    assert status == 201, body
    assert (body["spec"], body["timezone"], body["description"]) == (
        example.spec,
        example.timezone,
        example.description,
    )


def test_a_phrases_zone_and_the_timezone_field_must_agree(system: System) -> None:
    phrase = "every weekday at 17:30 in Europe/London"
    # WHEN the phrase's zone is given again as timezone THEN it is taken
    status, body = system.call(
        "POST", "/schedules", {"spec": phrase, "timezone": "Europe/London", "target": PYTHON}
    )
    assert (status, body.get("timezone")) == (201, "Europe/London"), body
    # WHEN timezone names another zone THEN the request is refused naming timezone
    status, body = system.call(
        "POST", "/schedules", {"spec": phrase, "timezone": "Asia/Tokyo", "target": PYTHON}
    )
    assert status == 400, body
    assert body["error"]["field"] == "timezone"
    assert "in Europe/London" in body["error"]["message"]
    # AND only the first schedule was stored
    _, page = system.call("GET", "/schedules")
    assert [s["timezone"] for s in page["items"]] == ["Europe/London"]


@pytest.mark.parametrize(
    ("request_body", "field", "hint"),
    [
        ({"spec": "every day at 9am in PST"}, "spec", "for example America/Los_Angeles"),
        ({"spec": "every day at 9am", "timezone": "PST"}, "timezone", "America/Los_Angeles"),
        (
            {"spec": "rate(5 minutes)", "timezone": "europe/london"},
            "timezone",
            "did you mean 'Europe/London'?",
        ),
        ({"spec": "tomorrow at 9am", "timezone": "europe/london"}, "timezone", "Europe/London"),
        ({"spec": "every 7 minutes between 9am and 5pm"}, "spec", "does not divide the hour"),
    ],
)
def test_a_zone_that_is_no_zone_is_refused_with_the_one_meant(
    system: System, request_body: dict[str, str], field: str, hint: str
) -> None:
    # WHEN a tenant names a zone by an abbreviation or in the wrong case
    status, body = system.call("POST", "/schedules", {**request_body, "target": PYTHON})
    # THEN the answer is a 400 naming the field, with the zone meant, and nothing is stored
    assert status == 400, body
    assert body["error"]["field"] == field
    assert hint in body["error"]["message"], body
    _, page = system.call("GET", "/schedules")
    assert page["items"] == []
