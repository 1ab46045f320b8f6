"""The backfill's pure rules: which fires a range holds, its bounds, its overlap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fireline.domain import backfill, errors, policies, schedule

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
EVERY_SECOND = schedule.Timing(spec=schedule.parse_spec("rate(1 second)"))


def test_a_range_holds_its_start_and_not_its_end() -> None:
    # GIVEN an hourly schedule WHEN 09:00 to 12:00 is asked
    hourly = schedule.Timing(spec=schedule.parse_spec("rate(1 hour)"))
    found = backfill.fire_times(hourly, NOW - timedelta(hours=3), NOW, NOW)
    # THEN 09:00, 10:00 and 11:00: the end is excluded
    assert found == [NOW - timedelta(hours=h) for h in (3, 2, 1)]


def test_exactly_the_cap_is_accepted_and_one_more_is_refused_naming_to() -> None:
    # GIVEN a per-second schedule
    start = NOW - timedelta(seconds=backfill.MAX_FIRES + 10)
    # WHEN a range of exactly MAX_FIRES fires is asked THEN all are given
    at_cap = start + timedelta(seconds=backfill.MAX_FIRES)
    assert len(backfill.fire_times(EVERY_SECOND, start, at_cap, NOW)) == backfill.MAX_FIRES
    # WHEN one more THEN a typed 400 on "to"
    with pytest.raises(backfill.TooManyFires) as refused:
        backfill.fire_times(EVERY_SECOND, start, at_cap + timedelta(seconds=1), NOW)
    assert refused.value.field == "to"
    assert not isinstance(refused.value, errors.TooLarge)  # a 400, not a 413


@pytest.mark.parametrize(
    ("start", "end", "field"),
    [
        (NOW, NOW, "to"),
        (NOW, NOW - timedelta(hours=1), "to"),
        (NOW - timedelta(hours=1), NOW + timedelta(seconds=1), "to"),
        (datetime(2026, 5, 1, 9), NOW, "from"),
    ],
    ids=["empty", "backwards", "past-now", "no-offset"],
)
def test_a_bad_range_names_its_field(start: datetime, end: datetime, field: str) -> None:
    # GIVEN any schedule WHEN a bad range is asked THEN the field at fault is named
    with pytest.raises(errors.ValidationError) as refused:
        backfill.fire_times(EVERY_SECOND, start, end, NOW)
    assert refused.value.field == field


@pytest.mark.parametrize(
    ("given", "schedules", "chosen", "window"),
    [
        (None, policies.OverlapPolicy.ALLOW, backfill.Overlap.ALLOW, backfill.WINDOW),
        (None, policies.OverlapPolicy.FORBID, backfill.Overlap.BUFFER_ALL, 1),
        (None, policies.OverlapPolicy.BUFFER_ONE, backfill.Overlap.BUFFER_ALL, 1),
        ("allow", policies.OverlapPolicy.FORBID, backfill.Overlap.ALLOW, backfill.WINDOW),
    ],
)
def test_the_overlap_defaults_to_the_schedules_own(
    given: str | None,
    schedules: policies.OverlapPolicy,
    chosen: backfill.Overlap,
    window: int,
) -> None:
    # GIVEN a schedule's overlap WHEN a backfill names one or none THEN its pace follows
    found = backfill.parse_overlap(given, schedules)
    assert (found, backfill.window_of(found)) == (chosen, window)


def test_an_unknown_overlap_is_refused_naming_overlap() -> None:
    with pytest.raises(errors.ValidationError) as refused:
        backfill.parse_overlap("forbid", policies.OverlapPolicy.ALLOW)
    assert refused.value.field == "overlap"
