"""The schedule engine: specs, DST policies, windows, jitter, descriptions."""

from __future__ import annotations

import itertools
import json
import random
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from fireline.domain import errors, schedule
from fireline.domain.schedule import DstPolicy, GapPolicy, RepeatPolicy

DATA = Path(__file__).parent.parent / "data"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def fmt(moments: list[datetime]) -> list[str]:
    return [m.strftime("%Y-%m-%dT%H:%M:%SZ") for m in moments]


def timing(spec: str, tz: str = "UTC", gap: str = "shift", repeat: str = "first", **kw: object):
    return schedule.Timing(
        spec=schedule.parse_spec(spec),
        timezone=tz,
        dst=DstPolicy(gap=GapPolicy(gap), repeat=RepeatPolicy(repeat)),
        **kw,  # type: ignore[arg-type]
    )


# --- the shared conformance cases, kept as data ------------------------------------------

CONFORMANCE = json.loads((DATA / "dst-new-york.json").read_text())["cases"]


@pytest.mark.parametrize(
    "case", CONFORMANCE, ids=lambda c: f"{c['cron']}-{c.get('gap', '')}{c.get('repeat', '')}"
)
def test_conformance_dst_new_york(case: dict) -> None:
    # GIVEN a cron schedule in New York with the case's policies
    t = timing(case["cron"], case["tz"], case.get("gap", "shift"), case.get("repeat", "first"))
    # WHEN previewing past the transition
    got = schedule.preview(t, utc(case["after"]), len(case["expect"]))
    # THEN the fire times are the expected UTC instants
    assert fmt(got) == case["expect"]


# --- cron with seconds -------------------------------------------------------------------


def test_six_fields_put_seconds_first() -> None:
    t = timing("cron(*/15 * * * * *)")
    got = schedule.preview(t, utc("2026-05-01T10:00:00Z"), 4)
    assert fmt(got) == [
        "2026-05-01T10:00:15Z",
        "2026-05-01T10:00:30Z",
        "2026-05-01T10:00:45Z",
        "2026-05-01T10:01:00Z",
    ]


def test_six_field_cron_fires_at_the_named_second() -> None:
    t = timing("30 0 9 * * MON-FRI", "Europe/Paris")
    # 2026-05-01 is a Friday; Paris is UTC+2 in May, so 09:00:30 local is 07:00:30Z.
    got = schedule.preview(t, utc("2026-05-01T00:00:00Z"), 2)
    assert fmt(got) == ["2026-05-01T07:00:30Z", "2026-05-04T07:00:30Z"]


def test_five_field_cron_fires_on_second_zero() -> None:
    t = timing("cron(*/20 * * * *)")
    got = schedule.next_fire(t, utc("2026-05-01T10:00:00.500000Z"))
    assert got == utc("2026-05-01T10:20:00Z")


def test_cron_expression_is_shown_back_as_written() -> None:
    assert str(schedule.parse_spec("0 9 * * mon-fri")) == "cron(0 9 * * MON-FRI)"
    assert str(schedule.parse_spec("cron(5 0 9 * * *)")) == "cron(5 0 9 * * *)"


# --- DST, southern hemisphere (Sydney) and another northern rule (London) ---------------
# Sydney 2026: DST ends Sun 5 Apr 03:00 AEDT -> 02:00 AEST (02:00-02:59 happens twice);
# starts Sun 4 Oct 02:00 AEST -> 03:00 AEDT (02:00-02:59 does not exist).
# London 2026: starts Sun 29 Mar 01:00 GMT -> 02:00 BST (01:xx missing);
# ends Sun 25 Oct 02:00 BST -> 01:00 GMT (01:xx twice).

SOUTH_AND_NORTH = [
    # zone, cron, after, gap, repeat, expected
    ("Australia/Sydney", "30 2 * * *", "2026-10-02T00:00:00Z", "shift", "first",
     ["2026-10-02T16:30:00Z", "2026-10-03T16:00:00Z", "2026-10-04T15:30:00Z"]),
    ("Australia/Sydney", "30 2 * * *", "2026-10-02T00:00:00Z", "skip", "first",
     ["2026-10-02T16:30:00Z", "2026-10-04T15:30:00Z", "2026-10-05T15:30:00Z"]),
    ("Australia/Sydney", "30 2 * * *", "2026-04-03T00:00:00Z", "shift", "first",
     ["2026-04-03T15:30:00Z", "2026-04-04T15:30:00Z", "2026-04-05T16:30:00Z"]),
    ("Australia/Sydney", "30 2 * * *", "2026-04-03T00:00:00Z", "shift", "last",
     ["2026-04-03T15:30:00Z", "2026-04-04T16:30:00Z", "2026-04-05T16:30:00Z"]),
    ("Australia/Sydney", "30 2 * * *", "2026-04-03T00:00:00Z", "shift", "both",
     ["2026-04-03T15:30:00Z", "2026-04-04T15:30:00Z", "2026-04-04T16:30:00Z",
      "2026-04-05T16:30:00Z"]),
    ("Europe/London", "15 1 * * *", "2026-03-28T00:00:00Z", "shift", "first",
     ["2026-03-28T01:15:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:15:00Z"]),
    ("Europe/London", "15 1 * * *", "2026-03-28T00:00:00Z", "skip", "first",
     ["2026-03-28T01:15:00Z", "2026-03-30T00:15:00Z", "2026-03-31T00:15:00Z"]),
    ("Europe/London", "15 1 * * *", "2026-10-24T00:00:00Z", "shift", "first",
     ["2026-10-24T00:15:00Z", "2026-10-25T00:15:00Z", "2026-10-26T01:15:00Z"]),
    ("Europe/London", "15 1 * * *", "2026-10-24T00:00:00Z", "shift", "last",
     ["2026-10-24T00:15:00Z", "2026-10-25T01:15:00Z", "2026-10-26T01:15:00Z"]),
    ("Europe/London", "15 1 * * *", "2026-10-24T00:00:00Z", "shift", "both",
     ["2026-10-24T00:15:00Z", "2026-10-25T00:15:00Z", "2026-10-25T01:15:00Z",
      "2026-10-26T01:15:00Z"]),
]  # fmt: skip


@pytest.mark.parametrize("tz,cron,after,gap,repeat,expected", SOUTH_AND_NORTH)
def test_dst_policies_in_both_hemispheres(
    tz: str, cron: str, after: str, gap: str, repeat: str, expected: list[str]
) -> None:
    t = timing(cron, tz, gap, repeat)
    assert fmt(schedule.preview(t, utc(after), len(expected))) == expected


def test_many_minutes_inside_a_gap_shift_to_one_fire() -> None:
    # GIVEN every 15 minutes during the 02:00 hour, which New York skips on 8 March
    t = timing("*/15 2 * * *", "America/New_York", gap="shift")
    # WHEN the gap comes
    got = schedule.preview(t, utc("2026-03-08T00:00:00Z"), 2)
    # THEN the four nonexistent times collapse onto the first valid instant (03:00 EDT),
    # and the next fire is the next day's 02:00 EST
    assert fmt(got) == ["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"]


def test_both_policy_interleaves_minutes_of_a_repeated_hour_in_time_order() -> None:
    t = timing("0,30 1 * * *", "America/New_York", repeat="both")
    got = schedule.preview(t, utc("2026-11-01T00:00:00Z"), 4)
    # 01:00 EDT, 01:30 EDT, 01:00 EST, 01:30 EST
    assert fmt(got) == [
        "2026-11-01T05:00:00Z",
        "2026-11-01T05:30:00Z",
        "2026-11-01T06:00:00Z",
        "2026-11-01T06:30:00Z",
    ]


@pytest.mark.parametrize(
    "tz,after",
    [
        ("America/New_York", "2026-03-07T12:00:00Z"),
        ("America/New_York", "2026-10-31T12:00:00Z"),
        ("Australia/Sydney", "2026-04-04T00:00:00Z"),
        ("Australia/Sydney", "2026-10-03T00:00:00Z"),
    ],
)
def test_hourly_cron_keeps_elapsed_spacing_across_transitions(tz: str, after: str) -> None:
    # The hour field is a wildcard: the schedule follows elapsed time, whatever the policy.
    t = timing("0 * * * *", tz, gap="shift", repeat="first")
    got = schedule.preview(t, utc(after), 48)
    assert {b - a for a, b in itertools.pairwise(got)} == {timedelta(hours=1)}


@pytest.mark.parametrize("spec", ["rate(1 hour)", "rate(1 day)", "rate(90 minutes)"])
@pytest.mark.parametrize("tz", ["America/New_York", "Australia/Sydney"])
def test_rate_keeps_elapsed_spacing_across_dst(spec: str, tz: str) -> None:
    t = timing(spec, tz, start=utc("2026-01-01T00:00:00Z"))
    for after in ("2026-03-07T00:00:00Z", "2026-04-03T00:00:00Z", "2026-10-30T00:00:00Z"):
        got = schedule.preview(t, utc(after), 40)
        period = schedule.parse_rate(spec[5:-1]).period
        assert {b - a for a, b in itertools.pairwise(got)} == {period}


def test_rate_is_anchored_to_its_start() -> None:
    t = timing("rate(10 minutes)", start=utc("2026-05-01T10:03:07Z"))
    assert fmt(schedule.preview(t, utc("2026-05-01T00:00:00Z"), 3)) == [
        "2026-05-01T10:03:07Z",
        "2026-05-01T10:13:07Z",
        "2026-05-01T10:23:07Z",
    ]
    assert schedule.next_fire(t, utc("2026-05-01T10:13:07Z")) == utc("2026-05-01T10:23:07Z")


def test_rate_without_start_is_anchored_to_the_epoch() -> None:
    t = timing("rate(5 minutes)")
    assert schedule.next_fire(t, utc("2026-05-01T10:01:00Z")) == utc("2026-05-01T10:05:00Z")


# --- one-off at --------------------------------------------------------------------------


def test_at_fires_once() -> None:
    t = timing("at(2026-12-01T09:00:00)", "Europe/Paris")
    first = schedule.next_fire(t, utc("2026-11-30T00:00:00Z"))
    assert first == utc("2026-12-01T08:00:00Z")
    assert schedule.next_fire(t, first) is None
    assert schedule.preview(t, utc("2026-11-30T00:00:00Z"), 5) == [first]


def test_at_with_offset_is_absolute() -> None:
    t = timing("at(2026-12-01T09:00:00Z)", "Asia/Tokyo")
    assert schedule.preview(t, utc("2026-11-01T00:00:00Z"), 3) == [utc("2026-12-01T09:00:00Z")]


@pytest.mark.parametrize(
    "gap,repeat,when,expected",
    [
        ("shift", "first", "2026-03-08T02:30:00", ["2026-03-08T07:00:00Z"]),
        ("skip", "first", "2026-03-08T02:30:00", []),
        ("shift", "first", "2026-11-01T01:30:00", ["2026-11-01T05:30:00Z"]),
        ("shift", "last", "2026-11-01T01:30:00", ["2026-11-01T06:30:00Z"]),
        # a one-off fires once: "both" takes the first copy
        ("shift", "both", "2026-11-01T01:30:00", ["2026-11-01T05:30:00Z"]),
    ],
)
def test_local_at_follows_the_dst_policy(
    gap: str, repeat: str, when: str, expected: list[str]
) -> None:
    t = timing(f"at({when})", "America/New_York", gap, repeat)
    assert fmt(schedule.preview(t, utc("2026-01-01T00:00:00Z"), 3)) == expected


# --- windows and jitter ------------------------------------------------------------------


def test_window_bounds_fires() -> None:
    t = timing("0 12 * * *", start=utc("2026-05-03T00:00:00Z"), end=utc("2026-05-05T12:00:00Z"))
    assert fmt(schedule.preview(t, utc("2026-05-01T00:00:00Z"), 10)) == [
        "2026-05-03T12:00:00Z",
        "2026-05-04T12:00:00Z",
        "2026-05-05T12:00:00Z",
    ]
    assert schedule.next_fire(t, utc("2026-05-05T12:00:00Z")) is None


def test_end_before_start_is_rejected() -> None:
    with pytest.raises(errors.ValidationError) as caught:
        timing("0 12 * * *", start=utc("2026-05-03T00:00:00Z"), end=utc("2026-05-01T00:00:00Z"))
    assert caught.value.field == "end"


def test_naive_window_is_rejected() -> None:
    with pytest.raises(errors.ValidationError) as caught:
        timing("0 12 * * *", start=datetime(2026, 5, 3))
    assert caught.value.field == "start"


def test_jitter_comes_from_the_injected_source_and_stays_in_bounds() -> None:
    fire = utc("2026-05-01T10:00:00Z")
    delays = [
        schedule.jittered(fire, timedelta(seconds=30), random.Random(seed)) - fire
        for seed in range(200)
    ]
    assert all(timedelta(0) <= d < timedelta(seconds=30) for d in delays)
    assert len(set(delays)) > 150  # spread, not a constant
    again = schedule.jittered(fire, timedelta(seconds=30), random.Random(7))
    assert again - fire == delays[7]  # same source, same delay
    assert schedule.jittered(fire, timedelta(0), random.Random(1)) == fire


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,part,position",
    [
        ("61 * * * *", "minute", 1),
        ("0 24 * * *", "hour", 2),
        ("0 0 0 * *", "day_of_month", 3),
        ("0 0 1 13 *", "month", 4),
        ("0 0 * * 8", "day_of_week", 5),
        ("0 0 * * MON-FOO", "day_of_week", 5),
        ("0 0 * JANUARY *", "month", 4),
        ("*/0 * * * *", "minute", 1),
        ("0 17-9 * * *", "hour", 2),
        ("60 0 0 * * *", "second", 1),
        ("0 60 0 * * *", "minute", 2),
        ("0 ? * * *", "hour", 2),
        ("0 0 1,,2 * *", "day_of_month", 3),
    ],
)
def test_bad_cron_fields_are_named(text: str, part: str, position: int) -> None:
    with pytest.raises(errors.ScheduleSyntaxError) as caught:
        schedule.parse_spec(text)
    assert caught.value.field == "spec"
    assert caught.value.part == part
    assert caught.value.position == position
    assert part in str(caught.value)


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("", "empty"),
        ("* * * *", "5 fields"),
        ("* * * * * * *", "5 fields"),
        ("rate(5 parsecs)", "unknown unit"),
        ("rate(0 minutes)", "at least 1"),
        ("rate(five minutes)", "cannot read rate"),
        ("at(tomorrow)", "cannot read instant"),
        ("cron 0 9 * * *", "parentheses"),
    ],
)
def test_bad_specs_are_rejected_with_a_reason(text: str, fragment: str) -> None:
    with pytest.raises(errors.ScheduleSyntaxError) as caught:
        schedule.parse_spec(text)
    assert fragment in str(caught.value)


@pytest.mark.parametrize("name", ["Mars/Olympus_Mons", "", "UTC+2", "../etc/passwd", " UTC"])
def test_unknown_time_zones_are_rejected(name: str) -> None:
    with pytest.raises(errors.UnknownTimeZone) as caught:
        timing("0 9 * * *", name)
    assert caught.value.field == "timezone"


def test_a_cron_that_never_fires_is_rejected_by_first_fire() -> None:
    t = timing("0 0 30 2 *")
    assert schedule.next_fire(t, utc("2026-01-01T00:00:00Z")) is None
    with pytest.raises(errors.ScheduleNeverFires):
        schedule.first_fire(t, utc("2026-01-01T00:00:00Z"))


def test_leap_day_cron_waits_for_a_leap_year() -> None:
    t = timing("0 0 29 2 *")
    assert schedule.next_fire(t, utc("2026-01-01T00:00:00Z")) == utc("2028-02-29T00:00:00Z")


def test_after_must_be_aware() -> None:
    with pytest.raises(errors.ValidationError):
        schedule.next_fire(timing("0 9 * * *"), datetime(2026, 1, 1))


# --- descriptions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec,tz,expected",
    [
        ("30 9 * * MON-FRI", "Europe/Paris", "At 09:30, Monday through Friday (Europe/Paris)"),
        ("*/15 * * * * *", "UTC", "Every 15 seconds (UTC)"),
        ("rate(5 minutes)", "UTC", "Every 5 minutes"),
        ("rate(1 hour)", "UTC", "Every hour"),
        ("at(2026-12-01T09:00:00)", "Asia/Tokyo", "Once at 2026-12-01 09:00:00 (Asia/Tokyo)"),
        ("at(2026-12-01T09:00:00Z)", "Asia/Tokyo", "Once at 2026-12-01 09:00:00 UTC"),
    ],
)
def test_every_spec_has_a_description(spec: str, tz: str, expected: str) -> None:
    assert schedule.describe(schedule.parse_spec(spec), tz) == expected
