"""Natural-language schedules: the common forms become a spec that is shown back."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fireline.domain import errors, natural, schedule

NOW = datetime(2026, 11, 30, 15, 0, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    "text,spec",
    [
        ("every 5 minutes", "rate(5 minutes)"),
        ("Every 30 seconds", "rate(30 seconds)"),
        ("every 2 hours", "rate(2 hours)"),
        ("every hour", "rate(1 hour)"),
        ("hourly", "cron(0 * * * *)"),
        ("every hour at minute 15", "cron(15 * * * *)"),
        ("every day at 09:30", "cron(30 9 * * *)"),
        ("daily at 9pm", "cron(0 21 * * *)"),
        ("daily", "cron(0 0 * * *)"),
        ("every day at noon", "cron(0 12 * * *)"),
        ("every day at 12am", "cron(0 0 * * *)"),
        ("every weekday at 8:15am", "cron(15 8 * * 1-5)"),
        ("every weekend at 10:00", "cron(0 10 * * 0,6)"),
        ("every monday at 08:00", "cron(0 8 * * 1)"),
        ("every mon and thu at 18:15", "cron(15 18 * * 1,4)"),
        ("every sunday", "cron(0 0 * * 0)"),
        ("on the 1st of every month", "cron(0 0 1 * *)"),
        ("on the 15th of every month at 10:00", "cron(0 10 15 * *)"),
        ("every month on the 2nd at 6am", "cron(0 6 2 * *)"),
        ("in 3 days", "at(2026-12-03T15:00:12Z)"),
        ("in 90 minutes", "at(2026-11-30T16:30:12Z)"),
        ("on 2026-12-24 at 18:00", "at(2026-12-24T18:00:00)"),
        ("every 2 hours at :15", "cron(15 */2 * * *)"),
        ("every 6 hours at minute 0", "cron(0 */6 * * *)"),
        ("every other hour", "cron(0 */2 * * *)"),
        ("hourly at quarter past", "cron(15 * * * *)"),
        ("every month on the 1st", "cron(0 0 1 * *)"),
        ("every other day", "cron(0 0 */2 * *)"),
        ("every 3 days at 9am", "cron(0 9 */3 * *)"),
        ("weekends", "cron(0 0 * * 0,6)"),
        ("on weekends at 10", "cron(0 10 * * 0,6)"),
        ("at noon", "cron(0 12 * * *)"),
        ("every night at midnight", "cron(0 0 * * *)"),
        ("twice a day at 9am and 9pm", "cron(0 9,21 * * *)"),
        ("twice a day", "cron(0 0,12 * * *)"),
        ("every day at half past 9", "cron(30 9 * * *)"),
        ("every day at quarter to 10", "cron(45 9 * * *)"),
        ("mondays at quarter past 9pm", "cron(15 21 * * 1)"),
        ("tuesday through thursday at 07:00", "cron(0 7 * * 2-4)"),
        # descriptions read back as what they describe
        ("At 09:00, Monday through Friday (Europe/Paris)", "cron(0 9 * * 1-5)"),
        ("At 15 minutes past the hour, every 2 hours (UTC)", "cron(15 */2 * * *)"),
        ("Once at 2026-12-03 15:00:12 UTC", "at(2026-12-03T15:00:12Z)"),
    ],
)
def test_common_forms_translate_to_a_spec(text: str, spec: str) -> None:
    translation = natural.translate(text, NOW)
    assert translation.spec_text == spec
    # and what was shown back parses to the same spec
    assert schedule.parse_spec(translation.spec_text) == translation.spec


@pytest.mark.parametrize(
    "text,suggestion",
    [
        ("every blue moon", natural.EXAMPLES[0]),
        ("every tuesdy at 8", "every tuesday at 8"),
        ("in 3 fortnights", "in 3 days"),
        ("twice a month", "on the 1st of every month at 00:00"),
        ("each day around lunch", "every day at 09:30"),
    ],
)
def test_anything_else_is_rejected_with_a_suggestion(text: str, suggestion: str) -> None:
    with pytest.raises(errors.ScheduleSyntaxError) as caught:
        natural.translate(text, NOW)
    assert caught.value.field == "spec"
    assert caught.value.suggestion is not None
    assert suggestion in caught.value.suggestion


@pytest.mark.parametrize(
    "text,part",
    [
        ("every day at 25:00", "time"),
        ("on the 32nd of every month", "day_of_month"),
        ("every day at 9:15 and 21:30", "time"),
        ("twice a day at 9am", "time"),
        ("every 24 hours at :15", "hour"),
    ],
)
def test_impossible_values_name_the_part(text: str, part: str) -> None:
    with pytest.raises(errors.ScheduleSyntaxError) as caught:
        natural.translate(text, NOW)
    assert caught.value.part == part


@pytest.mark.parametrize(
    "text,expected",
    [
        ("0 9 * * *", False),
        ("*/5 * * * * *", False),
        ("cron(0 9 * * *)", False),
        ("rate(5 minutes)", False),
        ("at(2026-12-01T09:00:00)", False),
        ("every day at 09:30", True),
        ("in 3 days", True),
        ("0 9 * * MON-FRI", False),
        ("0 0 1 JAN,JUL *", False),
        ("61 * * * *", False),
        ("on the 1st of every month", True),
        ("every month on the 1st", True),
        ("every 2 hours at :15", True),
    ],
)
def test_spec_forms_are_told_apart_from_natural_language(text: str, expected: bool) -> None:
    assert natural.looks_natural(text) is expected


def test_translation_has_a_human_description() -> None:
    translation = natural.translate("every weekday at 9am", NOW)
    assert schedule.describe(translation.spec, "Europe/Paris") == (
        "At 09:00, Monday through Friday (Europe/Paris)"
    )
