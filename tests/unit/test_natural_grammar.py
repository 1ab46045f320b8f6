"""The grammar's table (natural.GRAMMAR), each phrase round-tripped, and the forms people
paste and say: ISO instants, a trailing zone, tomorrow, minutes between two times,
hourly/daily/weekly/monthly, a suggestion near what was typed and hints for zone names."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from fireline.domain import errors, natural, schedule

NOW = natural.GRAMMAR_NOW
DOCS_TABLE = Path(__file__).resolve().parents[2] / "docs" / "schedules-natural-language.md"


@pytest.mark.parametrize("example", natural.GRAMMAR, ids=lambda e: e.phrase)
def test_every_phrase_of_the_table_round_trips(example: natural.Example) -> None:
    # GIVEN a phrase of the grammar's table
    # WHEN it is translated, described, and its description translated again
    first = natural.translate(example.phrase, NOW)
    zone = first.timezone or "UTC"
    description = schedule.describe(first.spec, zone)
    second = natural.translate(description, NOW, zone)
    # THEN it is stored, zoned and described as the table says
    assert (str(first.spec), zone, description) == (
        example.spec,
        example.timezone,
        example.description,
    )
    # AND its description means the same schedule: the same spec, the same next fires
    assert second.spec == first.spec
    timing = schedule.Timing(spec=first.spec, timezone=zone)
    again = schedule.Timing(spec=second.spec, timezone=zone)
    assert list(schedule.fires(timing, NOW, limit=20)) == list(schedule.fires(again, NOW, limit=20))
    # AND both are told apart from the spec forms as natural language
    assert natural.looks_natural(example.phrase) and natural.looks_natural(description)


def test_the_documentation_table_is_the_grammars() -> None:
    # GIVEN the table the schedules page includes WHEN it is compared with the grammar's
    # THEN it is the table made from it, row for row
    expected = natural.grammar_markdown()
    assert DOCS_TABLE.read_text() == expected, (
        f"regenerate {DOCS_TABLE.name}: python -c 'from fireline.domain import natural; "
        f'print(natural.grammar_markdown(), end="")\' > docs/{DOCS_TABLE.name}'
    )
    assert expected.count("\n") == len(natural.GRAMMAR) + 2


@pytest.mark.parametrize(
    ("text", "spec", "zone"),
    [
        # what a newcomer pasted and was refused
        ("at 2027-01-01T00:00:00Z", "at(2027-01-01T00:00:00Z)", None),
        ("every weekday at 17:30 in Europe/London", "cron(30 17 * * 1-5)", "Europe/London"),
        ("tomorrow at 9am", "at(2026-12-01T09:00:00)", None),
        ("every 15 minutes between 9am and 5pm", "cron(*/15 9-16 * * *)", None),
        # and their neighbours
        ("at 2027-01-01T09:00:00.250+02:00", "at(2027-01-01T07:00:00Z)", None),
        ("at 2027-01-01t09:00", "at(2027-01-01T09:00:00)", None),
        ("Every day at 9am in europe/paris", "cron(0 9 * * *)", "Europe/Paris"),
        ("every hour in UTC", "rate(1 hour)", "UTC"),
        ("in 3 days in Asia/Kolkata", "at(2026-12-03T15:00:12Z)", "Asia/Kolkata"),
        ("today at 17:00", "at(2026-11-30T17:00:00)", None),
        ("tomorrow 07:45", "at(2026-12-01T07:45:00)", None),
        ("every minute between 22:00 and midnight", "cron(* 22-23 * * *)", None),
        ("every 20 minutes between 9:00 and 9:59", "cron(*/20 9 * * *)", None),
        ("every 10 minutes between 9am and 5pm every monday", "cron(*/10 9-16 * * 1)", None),
        ("every week", "cron(0 0 * * 0)", None),
        ("monthly at 6am", "cron(0 6 1 * *)", None),
        ("every week on friday at 17:00", "cron(0 17 * * 5)", None),
        ("on the hour every 3 hours", "cron(0 */3 * * *)", None),
    ],
)
def test_what_people_paste_and_say_is_understood(text: str, spec: str, zone: str | None) -> None:
    # WHEN the phrase is translated THEN it is the spec (and zone) it says
    translation = natural.translate(text, NOW)
    assert (str(translation.spec), translation.timezone) == (spec, zone)


def test_tomorrow_is_the_day_after_now_in_the_schedules_zone() -> None:
    # GIVEN 23:30 UTC on 30 November, already 1 December in Tokyo
    late = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)
    # WHEN "tomorrow at 9am" is read in UTC, in Tokyo, and with Tokyo named in the phrase
    in_utc = natural.translate("tomorrow at 9am", late, "UTC").spec
    in_tokyo = natural.translate("tomorrow at 9am", late, "Asia/Tokyo").spec
    named = natural.translate("tomorrow at 9am in Asia/Tokyo", late, "UTC").spec
    # THEN tomorrow is the 1st in UTC and the 2nd in Tokyo, where the zone is said
    assert str(in_utc) == "at(2026-12-01T09:00:00)"
    assert str(in_tokyo) == str(named) == "at(2026-12-02T09:00:00)"


def test_hourly_and_daily_are_described_as_people_say_them() -> None:
    # WHEN the one-word forms are described THEN none reads "At 0 minutes past the hour"
    described = {
        word: schedule.describe(natural.translate(word, NOW).spec)
        for word in ("hourly", "daily", "weekly", "monthly")
    }
    assert described == {
        "hourly": "Every hour, on the hour (UTC)",
        "daily": "Every day at 00:00 (UTC)",
        "weekly": "At 00:00, only on Sunday (UTC)",
        "monthly": "At 00:00, on day 1 of the month (UTC)",
    }


@pytest.mark.parametrize(
    ("text", "part", "words"),
    [
        ("every 7 minutes between 9am and 5pm", "minute", "does not divide the hour"),
        ("every 15 minutes between 9:30 and 17:00", "time", "starts on the hour"),
        ("every 15 minutes between 9am and 5:30pm", "time", "ends on the hour"),
        ("every 15 minutes between 10pm and 6am", "time", "crosses midnight"),
        ("at 2027-02-30T09:00:00Z", "at", "cannot read instant"),
        ("tomorrow at 25:00", "time", "not a time of day"),
    ],
)
def test_impossible_windows_and_instants_name_their_part(text: str, part: str, words: str) -> None:
    # WHEN the phrase asks for what cannot be THEN the refusal names the spec and its part
    with pytest.raises(errors.ScheduleSyntaxError) as caught:
        natural.translate(text, NOW)
    assert (caught.value.field, caught.value.part) == ("spec", part)
    assert words in str(caught.value)


@pytest.mark.parametrize(
    ("text", "near"),
    [
        ("every tuesdy at 8", "every tuesday at 8"),
        ("evry weekday at 17:30", "every weekday at 17:30"),
        ("tomorow at 9am", "tomorrow at 9am"),
        ("every 15 minuets between 9am and 5pm", "every 15 minutes between 9am and 5pm"),
        ("every 15 minutes from 9 to 5", "every 15 minutes between 9am and 5pm"),
        ("hourley", "hourly"),
        ("every mondy", "every monday"),
    ],
)
def test_a_phrase_not_understood_gets_a_suggestion_near_it(text: str, near: str) -> None:
    # WHEN a phrase is misspelt THEN the suggestion is that phrase put right, understood
    with pytest.raises(errors.ScheduleSyntaxError) as caught:
        natural.translate(text, NOW)
    assert caught.value.suggestion == near
    natural.translate(near, NOW)


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("every day at 9am in PST", "PST is an abbreviation, not a zone"),
        ("every day at 9am in PST", "America/Los_Angeles"),
        ("every day at 9am in BST", "Europe/London"),
        ("every day at 9am in Europe/Londn", "did you mean 'Europe/London'?"),
        ("every day at 9am in Mars/Olympus", "Region/City"),
    ],
)
def test_a_zone_in_the_phrase_that_is_no_zone_is_refused_with_a_hint(text: str, hint: str) -> None:
    # WHEN the phrase ends with a zone tzdata does not know
    # THEN it is refused naming the spec, with the zone meant
    with pytest.raises(errors.UnknownTimeZone) as caught:
        natural.translate(text, NOW)
    assert caught.value.field == "spec"
    assert hint in str(caught.value)


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("europe/london", "did you mean 'Europe/London'? (zone names are case-sensitive)"),
        ("AMERICA/NEW_YORK", "did you mean 'America/New_York'?"),
        ("utc", "did you mean 'UTC'?"),
        ("PST", "name the place, for example America/Los_Angeles"),
        ("pdt", "America/Los_Angeles"),
        ("Europe/Pariss", "did you mean 'Europe/Paris'?"),
    ],
)
def test_the_timezone_field_says_which_zone_was_meant(name: str, hint: str) -> None:
    # WHEN a schedule's timezone is a zone's name in the wrong case, or an abbreviation
    # THEN it is refused naming timezone, with the zone meant
    with pytest.raises(errors.UnknownTimeZone) as caught:
        schedule.Timing(spec=schedule.parse_spec("rate(1 hour)"), timezone=name)
    assert caught.value.field == "timezone"
    assert hint in str(caught.value)


def test_zones_tzdata_has_under_an_abbreviations_name_still_work() -> None:
    # GIVEN EST and CET, which tzdata has as zones WHEN a schedule names them THEN they work
    for name in ("EST", "CET", "UTC", "GMT"):
        assert schedule.zone(name).key == name
