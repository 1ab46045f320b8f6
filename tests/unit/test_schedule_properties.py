"""Properties of the schedule engine, checked against a brute-force oracle.

The oracle walks every real minute around a DST transition, reads the local wall clock
the way a person would, and applies the documented rules; it shares no code with the
engine (no croniter, no wall-to-instant mapping).
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from fireline.domain import schedule
from fireline.domain.schedule import DstPolicy, GapPolicy, RepeatPolicy

# (zone, a transition instant) in both hemispheres, and zones with 30- and 45-minute quirks.
TRANSITIONS = [
    ("America/New_York", datetime(2026, 3, 8, 7, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 11, 1, 6, tzinfo=UTC)),
    ("Europe/London", datetime(2026, 3, 29, 1, tzinfo=UTC)),
    ("Europe/London", datetime(2026, 10, 25, 1, tzinfo=UTC)),
    ("Australia/Sydney", datetime(2026, 4, 4, 16, tzinfo=UTC)),
    ("Australia/Sydney", datetime(2026, 10, 3, 16, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2026, 4, 4, 15, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2026, 10, 3, 15, 30, tzinfo=UTC)),
    ("Pacific/Chatham", datetime(2026, 4, 4, 14, tzinfo=UTC)),
    ("Asia/Kolkata", datetime(2026, 3, 8, 7, tzinfo=UTC)),
]
WINDOW = timedelta(hours=36)

minutes = st.sampled_from(["0", "30", "*/15", "5,35", "*/7", "59", "*"])
hours = st.sampled_from(["*", "*/2", "*/3", "1", "2", "3", "0-3", "1,2", "2-4/2", "22-23"])
days = st.sampled_from([("*", "*"), ("*", "0"), ("*", "1-5"), ("1,4,5", "*")])
policies = st.builds(
    DstPolicy, st.sampled_from(list(GapPolicy)), st.sampled_from(list(RepeatPolicy))
)


def expand(field: str, low: int, high: int) -> set[int]:
    values: set[int] = set()
    for item in field.split(","):
        base, _, step = item.partition("/")
        if base == "*":
            first, last = low, high
        elif "-" in base:
            first, last = (int(x) for x in base.split("-"))
        else:
            first = last = int(base)
        if step and base != "*" and "-" not in base:
            last = high
        values.update(range(first, last + 1, int(step or 1)))
    return values


def matcher(minute: str, hour: str, dom: str, dow: str):
    mins, hrs = expand(minute, 0, 59), expand(hour, 0, 23)
    doms, dows = expand(dom, 1, 31), {d % 7 for d in expand(dow, 0, 7)}

    def matches(wall: datetime) -> bool:
        cron_dow = (wall.weekday() + 1) % 7
        return wall.minute in mins and wall.hour in hrs and wall.day in doms and cron_dow in dows

    return matches


def oracle(fields: tuple[str, str, str, str], tz: ZoneInfo, policy: DstPolicy, after: datetime):
    minute, hour, dom, dow = fields
    matches = matcher(minute, hour, dom, dow)
    elapsed = "*" in hour or "/" in hour
    found: set[datetime] = set()
    first = (int(after.timestamp()) // 60 + 1) * 60
    last = int((after + WINDOW).timestamp())
    for t in range(first, last + 1, 60):
        local = datetime.fromtimestamp(t, tz)
        if not elapsed and policy.gap is GapPolicy.SHIFT:
            # Wall minutes the clock jumped over since the previous minute fire here.
            wall = datetime.fromtimestamp(t - 60, tz).replace(tzinfo=None) + timedelta(minutes=1)
            while wall < local.replace(tzinfo=None):
                if matches(wall):
                    found.add(datetime.fromtimestamp(t, UTC))
                wall += timedelta(minutes=1)
        if not matches(local):
            continue
        repeated = local.replace(fold=0).utcoffset() != local.replace(fold=1).utcoffset()
        if repeated and not elapsed:
            if policy.repeat is RepeatPolicy.FIRST and local.fold == 1:
                continue
            if policy.repeat is RepeatPolicy.LAST and local.fold == 0:
                continue
        found.add(datetime.fromtimestamp(t, UTC))
    return sorted(found)


@settings(max_examples=150, deadline=None)
@given(
    transition=st.sampled_from(TRANSITIONS),
    shift_minutes=st.integers(min_value=-30 * 60, max_value=6 * 60),
    minute=minutes,
    hour=hours,
    day=days,
    policy=policies,
)
def test_cron_matches_the_brute_force_oracle_around_transitions(
    transition: tuple[str, datetime],
    shift_minutes: int,
    minute: str,
    hour: str,
    day: tuple[str, str],
    policy: DstPolicy,
) -> None:
    tz_name, moment = transition
    after = moment + timedelta(minutes=shift_minutes, seconds=17)
    dom, dow = day
    t = schedule.Timing(
        spec=schedule.parse_cron(f"{minute} {hour} {dom} * {dow}"), timezone=tz_name, dst=policy
    )
    got = list(schedule.fires(t, after, until=after + WINDOW))
    assert got == oracle((minute, hour, dom, dow), ZoneInfo(tz_name), policy, after)


specs = st.one_of(
    st.builds(
        lambda s, m, h: f"cron({s} {m} {h} * * *)",
        st.sampled_from(["0", "*/10", "15,45"]),
        st.sampled_from(["*", "*/5", "0"]),
        st.sampled_from(["*", "*/4", "9", "1-3"]),
    ),
    st.builds(
        lambda n, unit: f"rate({n} {unit})",
        st.integers(min_value=1, max_value=500),
        st.sampled_from(["seconds", "minutes", "hours", "days"]),
    ),
    st.builds(
        lambda d: f"at({d.strftime('%Y-%m-%dT%H:%M:%S')})",
        st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 12, 31)),
    ),
)
zones = st.sampled_from([z for z, _ in TRANSITIONS] + ["UTC", "Asia/Tokyo", "America/Santiago"])


@settings(max_examples=200, deadline=None)
@given(
    spec=specs,
    tz=zones,
    policy=policies,
    after=st.datetimes(
        min_value=datetime(2026, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)
    ),
)
def test_next_fire_is_strictly_after_and_increasing(
    spec: str, tz: str, policy: DstPolicy, after: datetime
) -> None:
    t = schedule.Timing(spec=schedule.parse_spec(spec), timezone=tz, dst=policy)
    got = schedule.preview(t, after, 12)
    assert all(fire > after for fire in got)
    assert all(a < b for a, b in itertools.pairwise(got))
    assert all(fire.microsecond == 0 and fire.tzinfo is UTC for fire in got)
    if spec.startswith("at("):
        assert len(got) <= 1
    # next_fire from any fire gives the fire after it: no fire is skipped by restarting.
    for a, b in itertools.pairwise(got):
        assert schedule.next_fire(t, a) == b
