"""The compiled cron matcher agrees with croniter, the reference, on every expression.

croniter is the authority on what an expression means; the compiled form takes its time
fields from croniter's expansion and asks croniter which days of a month match, so the
two can only disagree through a mistake in carrying from one field to the next, which
is what these tests hunt for, in UTC and across DST transitions.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fireline.domain import cron, schedule
from helpers import reference_schedule

seconds = st.sampled_from(["0", "*", "*/2", "15,45", "59", "0-10/5", "30"])
minutes = st.sampled_from(["0", "*", "*/15", "5,35", "59", "10-20", "*/7"])
hours = st.sampled_from(["*", "0", "2", "23", "*/3", "9-17", "1,2,3", "22-23"])
doms = st.sampled_from(["*", "?", "1", "15", "31", "L", "1,15", "29", "15W", "1-7"])
months = st.sampled_from(["*", "2", "JAN,JUL", "*/3", "11-12", "FEB"])
dows = st.sampled_from(["*", "?", "MON-FRI", "0", "7", "SAT,SUN", "5#3", "1#1", "L5", "2"])
zones = st.sampled_from(["UTC", "America/New_York", "Europe/London", "Australia/Sydney"])
moments = st.datetimes(
    min_value=datetime(2024, 1, 1), max_value=datetime(2031, 12, 31), timezones=st.just(UTC)
)


def timing(expression: str, zone: str) -> schedule.Timing:
    return schedule.Timing(spec=schedule.parse_cron(expression), timezone=zone)


@settings(max_examples=400, deadline=None)
@given(seconds, minutes, hours, doms, months, dows, zones, moments)
def test_compiled_next_fire_equals_croniters(
    second: str, minute: str, hour: str, dom: str, month: str, dow: str, zone: str, after: datetime
) -> None:
    expression = f"{second} {minute} {hour} {dom} {month} {dow}"
    try:
        when = timing(expression, zone)
    except Exception:  # an expression croniter refuses is refused by parse_cron too
        return
    spec = when.spec
    assert isinstance(spec, schedule.CronSpec)
    # WHEN both compute the next three fires from the same instant
    ours, theirs = [], []
    a = b = after
    for _ in range(3):
        found_ours = schedule.next_fire(when, a)
        found_theirs = reference_schedule.next_cron(spec, when, b)
        ours.append(found_ours)
        theirs.append(found_theirs)
        if found_ours is None or found_theirs is None:
            break
        a, b = found_ours, found_theirs
    # THEN they agree
    assert ours == theirs


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        # carries through every field at once: the last second of a leap year
        (
            "59 59 23 31 12 *",
            datetime(2027, 12, 31, 23, 59, 59),
            datetime(2028, 12, 31, 23, 59, 59),
        ),
        ("0 0 0 29 2 *", datetime(2025, 3, 1), datetime(2028, 2, 29)),
        ("0 0 0 L * *", datetime(2026, 2, 27), datetime(2026, 2, 28)),
        ("0 30 9 ? * 5#3", datetime(2026, 5, 1), datetime(2026, 5, 15, 9, 30)),
        ("*/20 * * * * *", datetime(2026, 5, 1, 12, 0, 59), datetime(2026, 5, 1, 12, 1)),
    ],
)
def test_named_edge_cases(expression: str, after: datetime, expected: datetime) -> None:
    compiled = cron.compile_cron(" ".join(schedule.parse_cron(expression).fields))
    assert compiled.next_after(after) == expected


def test_an_expression_that_never_fires_is_found_finished() -> None:
    # 30 February: no match within the search limit, rather than a search forever
    compiled = cron.compile_cron(" ".join(schedule.parse_cron("0 0 30 2 *").fields))
    assert compiled.next_after(datetime(2026, 1, 1)) is None


def test_utc_fast_path_steps_whole_seconds_across_a_year_end() -> None:
    every_second = timing("* * * * * *", "UTC")
    start = datetime(2026, 12, 31, 23, 59, 58, 500_000, tzinfo=UTC)
    fires = list(schedule.fires(every_second, start, limit=4))
    assert fires == [
        datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC) + timedelta(seconds=n) for n in range(4)
    ]
