"""Every phrase the natural-language grammar accepts round-trips through its description.

Round trip, precisely: a phrase P is translated to a spec S1 (with a time zone Z, the
schedule's or said in P as "in Z"); the description D of S1 in Z (what the API shows
back) is translated again to S2. S1 and S2 in Z fire at the same instants for a year:
from each of 13 starting instants a month apart
(the first one `NOW`), their next 100 fire times are equal (every fire of the year for a
schedule firing at most 100 times a month, a sample of each month for more frequent ones).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from fireline.domain import natural, schedule

NOW = datetime(2026, 11, 30, 15, 0, 12, tzinfo=UTC)
STARTS = [NOW + timedelta(days=30 * month) for month in range(13)]
FIRES_PER_START = 100

ZONES = st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata"])
DAY_NAMES = ["monday", "tue", "wednesday", "thu", "friday", "sat", "sunday", "mondays"]


@st.composite
def clocks(draw: st.DrawFn, minute: int | None = None) -> str:
    """A time of day in one of the forms people type (``minute`` fixes its minute)."""
    hour = draw(st.integers(0, 23))
    if minute is None:
        minute = draw(st.sampled_from([0, 5, 15, 30, 45, 59]))
    forms = [f"{hour:02d}:{minute:02d}", f"{hour}:{minute:02d}"]
    half = "am" if hour < 12 else "pm"
    twelve = hour % 12 or 12
    forms.append(f"{twelve}:{minute:02d}{half}")
    if minute == 0:
        forms += [f"{twelve}{half}", f"{twelve} {half}"]
        forms += ["noon"] if hour == 12 else ["midnight"] if hour == 0 else []
    if minute in (15, 30):
        forms.append(f"{'quarter' if minute == 15 else 'half'} past {twelve}{half}")
    if minute == 45:
        forms.append(f"quarter to {(hour + 1) % 12 or 12}{'am' if hour + 1 < 12 else 'pm'}")
    return draw(st.sampled_from(forms))


@st.composite
def days(draw: st.DrawFn) -> str:
    listed = draw(st.lists(st.sampled_from(DAY_NAMES), min_size=1, max_size=3, unique=True))
    n = draw(st.integers(1, 31))
    suffix = {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd", 31: "st"}.get(n, "th")
    return draw(
        st.sampled_from(
            [
                "every day",
                "daily",
                "every night",
                "every other day",
                f"every {draw(st.integers(2, 10))} days",
                "every weekday",
                "weekdays",
                "every weekend",
                "on weekends",
                "every " + " and ".join(listed),
                "on " + ", ".join(listed),
                "monday through friday",
                "tuesday through thursday",
                f"on the {n}{suffix} of every month",
                f"every month on the {n}{suffix}",
            ]
        )
    )


@st.composite
def calendar_phrases(draw: st.DrawFn) -> str:
    day = draw(days())
    first = draw(clocks())
    times = f"at {first}"
    if draw(st.booleans()):
        minute = natural._clock(first)[1]
        times += f" and {draw(clocks(minute=minute))}"
    return draw(st.sampled_from([f"{day} {times}", f"{times} {day}", day]))


@st.composite
def hourly_phrases(draw: st.DrawFn) -> str:
    minute = draw(st.integers(0, 59))
    past = draw(st.sampled_from([f":{minute:02d}", f"minute {minute}", "quarter past"]))
    every = draw(
        st.sampled_from(
            ["every hour", "hourly", "every other hour", f"every {draw(st.integers(2, 23))} hours"]
        )
    )
    return draw(st.sampled_from([f"{every} at {past}", "hourly", "every other hour"]))


@st.composite
def window_phrases(draw: st.DrawFn) -> str:
    """Every N minutes between two hours of a day, on some days."""
    n = draw(st.sampled_from([1, 2, 5, 10, 15, 20, 30]))
    first = draw(st.integers(0, 22))
    end = draw(st.integers(first + 1, 24))
    start_text = draw(clocks(minute=0).filter(lambda c: natural._clock(c)[0] == first))
    end_text = "midnight" if end == 24 else f"{end:02d}:00"
    every = "every minute" if n == 1 else f"every {n} minutes"
    days = draw(st.sampled_from(["", " on weekdays", " every monday and friday", " on weekends"]))
    return f"{every} between {start_text} and {end_text}{days}"


@st.composite
def instant_phrases(draw: st.DrawFn) -> str:
    """ISO 8601 instants after "at", and "tomorrow at", with or without an offset."""
    moment = draw(st.datetimes(datetime(2027, 1, 1), datetime(2030, 12, 31)))
    offset = draw(st.sampled_from(["", "Z", "+01:00", "-05:30"]))
    iso = f"at {moment:%Y-%m-%dT%H:%M:%S}{offset}"
    return draw(st.sampled_from([iso, f"tomorrow at {draw(clocks())}"]))


PHRASES = st.one_of(
    window_phrases(),
    instant_phrases(),
    st.builds("weekly on {} at {}".format, st.sampled_from(DAY_NAMES), clocks()),
    st.sampled_from(["weekly", "monthly", "hourly", "daily", "every week", "on the hour"]),
    calendar_phrases(),
    hourly_phrases(),
    st.builds(
        "every {} {}".format,
        st.integers(1, 90),
        st.sampled_from(["seconds", "minutes", "hours", "days"]),
    ),
    st.sampled_from(["every minute", "every hour", "every day", "at noon", "at midnight"]),
    st.builds("in {} {}".format, st.integers(1, 500), st.sampled_from(["minutes", "days"])),
    st.builds(
        lambda day, time: f"on {day:%Y-%m-%d} at {time}",
        st.dates(datetime(2027, 1, 1).date(), datetime(2027, 12, 31).date()),
        clocks(),
    ),
    st.just("twice a day"),
)


def year_of_fires(spec: schedule.Spec, zone: str) -> list[list[datetime]]:
    timing = schedule.Timing(spec=spec, timezone=zone)
    return [list(schedule.fires(timing, start, limit=FIRES_PER_START)) for start in STARTS]


@settings(max_examples=300, deadline=None)
@given(phrase=PHRASES, zone=ZONES, named=st.booleans())
def test_every_accepted_phrase_round_trips_through_its_description(
    phrase: str, zone: str, named: bool
) -> None:
    # GIVEN an accepted phrase (its zone said in it, or the schedule's) and the
    # description shown back for it
    if named:
        phrase = f"{phrase} in {zone}"
    translation = natural.translate(phrase, NOW, "UTC" if named else zone)
    first = translation.spec
    assert translation.timezone == (zone if named else None)
    description = schedule.describe(first, zone)
    # WHEN the description is translated again
    second = natural.translate(description, NOW, zone).spec
    # THEN both fire at the same instants for a year
    assert year_of_fires(second, zone) == year_of_fires(first, zone), (phrase, description)
    assert natural.looks_natural(phrase) and natural.looks_natural(description)
