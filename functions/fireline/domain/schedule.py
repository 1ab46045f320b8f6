"""The schedule engine: specs, time zones, DST policy, next fire and preview.

Pure: every function takes the instant it reasons about (``after``) and, for jitter, the
random source. Fire times are timezone-aware UTC datetimes at whole seconds.

Three kinds of spec, written the way EventBridge users expect:

- ``cron(S M H DoM Mon DoW)`` or ``cron(M H DoM Mon DoW)`` (the bare fields work too):
  seconds come first when there are six fields, as in Quartz and Spring.
- ``rate(N unit)`` with unit seconds/minutes/hours/days: every N units of *elapsed* time,
  anchored to the schedule's start (or the Unix epoch, so ``rate(5 minutes)`` fires at
  :00, :05, ...). DST never moves a rate schedule.
- ``at(2026-12-01T10:00:00)``: one instant. Without an offset it is a wall-clock time in
  the schedule's zone; with ``Z`` or ``+hh:mm`` it is absolute.

DST rules for cron and local ``at`` specs:

- A cron schedule whose hour field is a wildcard or a step (``*``, ``*/2``, ``8-18/2``)
  follows elapsed time: it fires at every real instant whose local reading matches, so in
  a repeated hour it fires in both copies and in a skipped hour not at all. Hourly and
  every-N-minutes jobs keep their spacing across both transitions.
- Any other schedule names fixed wall-clock times and follows its :class:`DstPolicy`:
  ``gap`` says what a time that does not exist (spring forward) does, ``shift`` to the
  first valid instant after the gap or ``skip``; ``repeat`` says what a time that happens
  twice (fall back) does, fire on the ``first`` copy, the ``last`` or ``both``.
"""

from __future__ import annotations

import difflib
import enum
import functools
import re
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, time, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cron_descriptor import Options, get_description
from croniter import croniter
from croniter.croniter import CroniterError

from fireline.domain import cron, errors, exclusions

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SECOND = timedelta(seconds=1)
# How far ahead a spec is searched for its next fire: after this many years without a
# match, "0 0 30 2 *" is found to never fire.
MAX_YEARS_BETWEEN_FIRES = cron.MAX_YEARS_BETWEEN_FIRES


class GapPolicy(enum.StrEnum):
    """What a wall-clock time inside a spring-forward gap does."""

    SHIFT = "shift"  # fire at the first valid instant after the gap
    SKIP = "skip"  # do not fire that day


class RepeatPolicy(enum.StrEnum):
    """What a wall-clock time that happens twice (fall back) does."""

    FIRST = "first"
    LAST = "last"
    BOTH = "both"


@dataclass(frozen=True)
class DstPolicy:
    gap: GapPolicy = GapPolicy.SHIFT
    repeat: RepeatPolicy = RepeatPolicy.FIRST


# Elapsed-time schedules behave as if their policy were this one: every real instant whose
# local reading matches fires, so both copies of a repeated hour and none of a skipped one.
ELAPSED = DstPolicy(gap=GapPolicy.SKIP, repeat=RepeatPolicy.BOTH)


# --- specs -----------------------------------------------------------------------------

CRON_FIELDS = ("second", "minute", "hour", "day_of_month", "month", "day_of_week")
_BOUNDS = {
    "second": (0, 59),
    "minute": (0, 59),
    "hour": (0, 23),
    "day_of_month": (1, 31),
    "month": (1, 12),
    "day_of_week": (0, 7),
}
_MONTHS = {
    m: i
    for i, m in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"], 1
    )
}
_DAYS = {d: i for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
_RANGE_ITEM = re.compile(r"^(?P<base>\*|\?|[0-9A-Z]+(?:-[0-9A-Z]+)?)(?:/(?P<step>[0-9]+))?$")


@dataclass(frozen=True)
class CronSpec:
    """A cron expression, kept with six fields (seconds first) for evaluation."""

    fields: tuple[str, str, str, str, str, str]
    with_seconds: bool

    @property
    def expression(self) -> str:
        return " ".join(self.fields if self.with_seconds else self.fields[1:])

    @property
    def follows_elapsed_time(self) -> bool:
        hour = self.fields[2]
        return "*" in hour or "/" in hour

    def __str__(self) -> str:
        return f"cron({self.expression})"


RATE_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
# The longest period a rate (and an "in N units" offset) may have: a century, which every
# fire time it gives still fits in a datetime (and in epoch milliseconds).
MAX_RATE_DAYS = 36_500


@dataclass(frozen=True)
class RateSpec:
    """Every ``amount`` ``unit``s of elapsed time."""

    amount: int
    unit: str  # singular: second, minute, hour, day

    @property
    def period(self) -> timedelta:
        return timedelta(seconds=self.amount * RATE_UNITS[self.unit])

    def __str__(self) -> str:
        return f"rate({self.amount} {self.unit}{'' if self.amount == 1 else 's'})"


@dataclass(frozen=True)
class AtSpec:
    """One instant: aware (absolute) or naive (a wall-clock time in the schedule's zone)."""

    when: datetime

    def __str__(self) -> str:
        if self.when.tzinfo is None:
            return f"at({self.when.strftime('%Y-%m-%dT%H:%M:%S')})"
        return f"at({self.when.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')})"


Spec = CronSpec | RateSpec | AtSpec


def parse_spec(text: str) -> Spec:
    """Parse ``cron(...)``, ``rate(...)``, ``at(...)`` or bare cron fields.

    Raises :class:`errors.ScheduleSyntaxError` naming the part at fault.
    """
    if not isinstance(text, str) or not text.strip():
        raise errors.ScheduleSyntaxError("is empty", suggestion="rate(5 minutes)")
    return _parse_spec(text)


@functools.lru_cache(maxsize=16384)
def _parse_spec(text: str) -> Spec:
    """Specs are immutable and every stored schedule is parsed again on each read (the
    ticker reads thousands a second): the same text is parsed once per container."""
    stripped = text.strip()
    match = re.fullmatch(r"(?i)(cron|rate|at)\s*\((.*)\)", stripped)
    if match is None:
        if stripped.lower().startswith(("cron", "rate", "at(", "at ")):
            raise errors.ScheduleSyntaxError(
                "is missing its parentheses", suggestion="cron(0 9 * * *), rate(5 minutes)"
            )
        return parse_cron(stripped)
    kind, body = match.group(1).lower(), match.group(2).strip()
    if kind == "cron":
        return parse_cron(body)
    if kind == "rate":
        return parse_rate(body)
    return parse_at(body)


def parse_cron(expression: str) -> CronSpec:
    parts = expression.upper().split()
    if len(parts) not in (5, 6):
        raise errors.ScheduleSyntaxError(
            f"a cron expression has 5 fields (6 with seconds first), got {len(parts)}",
            suggestion="0 9 * * MON-FRI",
        )
    with_seconds = len(parts) == 6
    six = tuple(parts if with_seconds else ["0", *parts])
    for index, (name, value) in enumerate(zip(CRON_FIELDS, six, strict=True)):
        if not with_seconds and name == "second":
            continue
        position = index + 1 if with_seconds else index
        _check_cron_field(name, value, position)
    if six[3] == "?" and six[5] == "?":
        raise errors.ScheduleSyntaxError(
            "'?' may stand in day_of_month or day_of_week, not both", part="day_of_week"
        )
    spec = CronSpec(fields=six, with_seconds=with_seconds)  # type: ignore[arg-type]
    try:
        # Naive on purpose: cron fields are read on the wall clock (see _next_cron).
        wall = datetime(2000, 1, 1)  # noqa: DTZ001
        croniter(_croniter_expression(spec), wall, second_at_beginning=True)
    except CroniterError as exc:  # anything our field check let through
        raise errors.ScheduleSyntaxError(f"is not a valid cron expression: {exc}") from exc
    return spec


def _check_cron_field(name: str, value: str, position: int) -> None:
    low, high = _BOUNDS[name]
    names = _MONTHS if name == "month" else _DAYS if name == "day_of_week" else {}

    def fail(why: str) -> errors.ScheduleSyntaxError:
        return errors.ScheduleSyntaxError(
            f"{why} in {value!r} (allowed {low}-{high})", part=name, position=position
        )

    def number(token: str) -> int:
        if token in names:
            return names[token]
        if not token.isdigit():
            raise fail(f"{token!r} is not a number" + (" or name" if names else ""))
        n = int(token)
        if not low <= n <= high:
            raise fail(f"{n} is out of range")
        return n

    for item in value.split(","):
        if not item:
            raise fail("empty list item")
        if name == "day_of_month" and item in ("L", "LW"):
            continue
        if name == "day_of_week":
            nth = re.fullmatch(r"([0-9A-Z]+)(#[1-5]|L)", item)
            if nth:
                number(nth.group(1))
                continue
        m = _RANGE_ITEM.match(item)
        if m is None:
            raise fail(f"cannot read {item!r}")
        base, step = m.group("base"), m.group("step")
        if base == "?" and name not in ("day_of_month", "day_of_week"):
            raise fail("'?' is only for day_of_month or day_of_week")
        if step is not None and int(step) == 0:
            raise fail("a step of 0")
        if base in ("*", "?"):
            continue
        first, _, last = base.partition("-")
        if last and number(first) > number(last):
            raise fail(f"range {base} runs backwards")
        number(first)


def _croniter_expression(spec: CronSpec) -> str:
    return " ".join(spec.fields)


_RATE = re.compile(r"^(?P<n>[0-9]+)\s*(?P<unit>[a-z]+)$")
_UNIT_ALIASES = {
    "s": "second", "sec": "second", "secs": "second", "second": "second", "seconds": "second",
    "m": "minute", "min": "minute", "mins": "minute", "minute": "minute", "minutes": "minute",
    "h": "hour", "hr": "hour", "hrs": "hour", "hour": "hour", "hours": "hour",
    "d": "day", "day": "day", "days": "day",
}  # fmt: skip


def parse_rate(body: str) -> RateSpec:
    m = _RATE.match(body.strip().lower())
    if m is None:
        raise errors.ScheduleSyntaxError(
            f"cannot read rate {body!r}", part="rate", suggestion="rate(5 minutes)"
        )
    unit = _UNIT_ALIASES.get(m.group("unit"))
    if unit is None:
        raise errors.ScheduleSyntaxError(
            f"unknown unit {m.group('unit')!r} (seconds, minutes, hours, days)",
            part="rate unit",
            suggestion=f"rate({m.group('n')} minutes)",
        )
    digits = m.group("n").lstrip("0") or "0"
    # 12 digits are past the bound in seconds already (and int() of 4,300 would raise).
    amount = int(digits) if len(digits) <= 12 else MAX_RATE_DAYS * RATE_UNITS["day"] + 1
    if amount < 1:
        raise errors.ScheduleSyntaxError("the amount must be at least 1", part="rate amount")
    if amount * RATE_UNITS[unit] > MAX_RATE_DAYS * RATE_UNITS["day"]:
        raise errors.ScheduleSyntaxError(
            f"the period is at most {MAX_RATE_DAYS:,} days", part="rate amount"
        )
    return RateSpec(amount=amount, unit=unit)


def parse_at(body: str) -> AtSpec:
    text = body.strip()
    try:
        when = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError as exc:
        raise errors.ScheduleSyntaxError(
            f"cannot read instant {text!r}", part="at", suggestion="at(2026-12-01T09:00:00)"
        ) from exc
    try:
        utc = when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)
    except (OverflowError, ValueError) as exc:
        raise errors.ScheduleSyntaxError(f"{text!r} is out of range", part="at") from exc
    if not EPOCH <= utc <= datetime(9998, 12, 31, tzinfo=UTC):
        raise errors.ScheduleSyntaxError(f"{text!r} is out of range (1970 to 9998)", part="at")
    return AtSpec(when=when.replace(microsecond=0))


# --- time zones --------------------------------------------------------------------------


def zone(name: str, field: str = "timezone") -> ZoneInfo:
    """The IANA zone called ``name``; raises :class:`errors.UnknownTimeZone` naming
    ``field``, with the zone meant when one is near (``europe/london``, ``PST``)."""
    if isinstance(name, str) and name in _KNOWN_ZONES:
        return _KNOWN_ZONES[name]
    if not isinstance(name, str) or not name or name != name.strip() or ".." in name:
        raise errors.UnknownTimeZone(f"{name!r} is not an IANA time zone", field=field)
    try:
        found = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise errors.UnknownTimeZone(
            f"{name!r} is not an IANA time zone; {zone_hint(name)}", field=field
        ) from exc
    _KNOWN_ZONES[name] = found
    return found


# Zones already checked: every Timing asks for its zone on each next fire.
_KNOWN_ZONES: dict[str, ZoneInfo] = {}

# Abbreviations people write for a zone. Each names an offset (often two regions' offset,
# and no DST rule), so none is a zone: the hint names the place most people mean by it.
# EST, MST, HST, CET, EET, WET and MET are left out: tzdata has zones by those names.
ZONE_ABBREVIATIONS = {
    "PST": "America/Los_Angeles", "PDT": "America/Los_Angeles", "PT": "America/Los_Angeles",
    "MDT": "America/Denver", "MT": "America/Denver",
    "CST": "America/Chicago", "CDT": "America/Chicago", "CT": "America/Chicago",
    "EDT": "America/New_York", "ET": "America/New_York",
    "AKST": "America/Anchorage", "AKDT": "America/Anchorage",
    "BST": "Europe/London", "IST": "Asia/Kolkata (or Europe/Dublin)",
    "CEST": "Europe/Paris", "EEST": "Europe/Athens", "WEST": "Europe/Lisbon",
    "MSK": "Europe/Moscow", "JST": "Asia/Tokyo", "KST": "Asia/Seoul",
    "SGT": "Asia/Singapore", "HKT": "Asia/Hong_Kong", "AEST": "Australia/Sydney",
    "AEDT": "Australia/Sydney", "ACST": "Australia/Adelaide", "AWST": "Australia/Perth",
    "NZST": "Pacific/Auckland", "NZDT": "Pacific/Auckland", "BRT": "America/Sao_Paulo",
}  # fmt: skip


def zone_hint(name: str) -> str:
    """What to write instead of ``name``, which is no zone: the zone it differs from only
    in case, the place an abbreviation stands for, or a zone spelled nearly the same."""
    by_case = zone_by_case(name)
    if by_case is not None:
        return f"did you mean {by_case!r}? (zone names are case-sensitive)"
    meant = ZONE_ABBREVIATIONS.get(name.upper())
    if meant is not None:
        return (
            f"{name} is an abbreviation, not a zone: name the place, for example {meant}, "
            "whose rules say when daylight saving time starts and ends"
        )
    names = _zone_names()
    close = difflib.get_close_matches(name.lower(), sorted(names), n=1, cutoff=0.8)
    if close:
        return f"did you mean {names[close[0]]!r}?"
    return "name a Region/City, for example Europe/Paris or America/New_York"


def zone_by_case(name: str) -> str | None:
    """The zone named ``name`` but for letter case (``europe/london``), if any."""
    return _zone_names().get(name.lower())


@functools.cache
def _zone_names() -> dict[str, str]:
    """Every zone tzdata knows, by its lower-case name (read once per container)."""
    return {known.lower(): known for known in zoneinfo.available_timezones()}


def wall_to_instants(wall: datetime, tz: ZoneInfo, policy: DstPolicy) -> list[datetime]:
    """The UTC instants a naive wall-clock time in ``tz`` fires at under ``policy``.

    Usually one; none for a skipped gap time; two for a repeated time under ``both``.
    """
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    if first == second:
        return [first]
    if first.astimezone(tz).replace(tzinfo=None) == wall:  # both readings exist: repeated
        early, late = sorted((first, second))
        return {
            RepeatPolicy.FIRST: [early],
            RepeatPolicy.LAST: [late],
            RepeatPolicy.BOTH: [early, late],
        }[policy.repeat]
    if policy.gap is GapPolicy.SKIP:
        return []
    return [_end_of_gap(wall, tz, *sorted((first, second)))]


def _end_of_gap(wall: datetime, tz: ZoneInfo, low: datetime, high: datetime) -> datetime:
    """First instant in (low, high] whose local reading is past ``wall`` (the transition)."""
    lo, hi = int(low.timestamp()), int(high.timestamp())
    while lo < hi:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).replace(tzinfo=None) > wall:
            hi = mid
        else:
            lo = mid + 1
    return datetime.fromtimestamp(lo, UTC)


# --- timing: a spec in a zone, with a window --------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Everything that decides *when* a schedule fires."""

    spec: Spec
    timezone: str = "UTC"
    dst: DstPolicy = field(default_factory=DstPolicy)
    start: datetime | None = None  # first instant a fire may happen (and a rate's anchor)
    end: datetime | None = None  # last instant a fire may happen
    # Days of the zone's calendar it does not fire on (see fireline.domain.exclusions), and
    # single fires skipped one by one (UTC instants): neither is a fire of the schedule.
    exclude: exclusions.Exclusions = exclusions.NONE
    skips: frozenset[datetime] = frozenset()

    def __post_init__(self) -> None:
        zone(self.timezone)
        if any(s.tzinfo is None for s in self.skips):
            raise errors.ValidationError("needs a UTC offset", field="fire_time")
        for name in ("start", "end"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise errors.ValidationError("needs a UTC offset", field=name)
        if self.start and self.end and self.end < self.start:
            raise errors.ValidationError("is before start", field="end")

    @property
    def tz(self) -> ZoneInfo:
        return zone(self.timezone)

    @property
    def excludes_any(self) -> bool:
        return bool(self.exclude) or bool(self.skips)

    @property
    def unexcluded(self) -> Timing:
        """The same spec without its exclusions and skips: the fires they take away are
        this timing's fires that are not the schedule's."""
        if not self.excludes_any:
            return self
        return replace(self, exclude=exclusions.NONE, skips=frozenset())

    def excluded(self, fire_time: datetime) -> bool:
        """Is this fire of the spec taken away, by a skip or an excluded day?"""
        if fire_time in self.skips:
            return True
        return bool(self.exclude) and self.exclude.covers(fire_time.astimezone(self.tz).date())


def next_fire(timing: Timing, after: datetime) -> datetime | None:
    """The first fire time strictly after ``after``, or None when there is no more."""
    found = _next_of_spec(timing, after)
    if not timing.excludes_any:
        return found
    while found is not None and timing.excluded(found):
        after = found
        day = found.astimezone(timing.tz).date()
        if timing.exclude.covers(day):
            # A whole day excluded: go on from the start of the next open day, not fire by
            # fire (a per-second schedule has 86,400 fires in a day).
            open_day = timing.exclude.next_open_day(day)
            if open_day is None:
                return None
            start = datetime.combine(open_day, time(0), tzinfo=timing.tz).astimezone(UTC)
            after = max(found, start - timedelta(microseconds=1))
        found = _next_of_spec(timing, after)
    return found


def excluded_fires(
    timing: Timing, after: datetime, *, until: datetime, limit: int
) -> list[datetime]:
    """The spec's fires in (after, until] that the exclusions and skips take away, in
    order, at most ``limit`` of them."""
    if not timing.excludes_any:
        return []
    found: list[datetime] = []
    for fire_time in fires(timing.unexcluded, after, until=until):
        if len(found) == limit:
            break
        if timing.excluded(fire_time):
            found.append(fire_time)
    return found


def _next_of_spec(timing: Timing, after: datetime) -> datetime | None:
    """The spec's first fire strictly after ``after`` in the window, exclusions aside."""
    _require_aware(after)
    after = after.astimezone(UTC)
    if timing.start is not None and after < timing.start:
        after = timing.start - timedelta(microseconds=1)
    spec = timing.spec
    found: datetime | None
    if isinstance(spec, RateSpec):
        found = _next_rate(spec, timing.start or EPOCH, after)
    elif isinstance(spec, AtSpec):
        found = _next_at(spec, timing, after)
    else:
        found = _next_cron(spec, timing, after)
    if found is None or (timing.end is not None and found > timing.end):
        return None
    return found


def preview(timing: Timing, after: datetime, count: int) -> list[datetime]:
    """The next ``count`` fire times after ``after`` (fewer if the schedule ends)."""
    return list(fires(timing, after, limit=count))


def fires(
    timing: Timing, after: datetime, *, until: datetime | None = None, limit: int | None = None
) -> Iterator[datetime]:
    """Fire times after ``after`` in order, up to ``until`` (inclusive) and ``limit`` of them."""
    produced = 0
    while limit is None or produced < limit:
        nxt = next_fire(timing, after)
        if nxt is None or (until is not None and nxt > until):
            return
        yield nxt
        produced += 1
        after = nxt


def fires_and_next(
    timing: Timing, after: datetime, *, until: datetime, limit: int
) -> tuple[list[datetime], datetime | None]:
    """Fire times after ``after`` up to ``until`` (at most ``limit``), and the fire that
    follows the last of them (or ``after``): one next_fire call per fire, none wasted."""
    found: list[datetime] = []
    nxt = next_fire(timing, after)
    while nxt is not None and nxt <= until and len(found) < limit:
        found.append(nxt)
        nxt = next_fire(timing, nxt)
    return found, nxt


def first_fire(timing: Timing, after: datetime) -> datetime:
    """Like :func:`next_fire`, but a schedule that never fires is a validation error."""
    found = next_fire(timing, after)
    if found is None:
        raise errors.ScheduleNeverFires(
            f"{timing.spec} never fires after {after.isoformat()}", field="spec"
        )
    return found


def _require_aware(moment: datetime) -> None:
    if moment.tzinfo is None:
        raise errors.ValidationError("needs a UTC offset", field="after")


def _next_rate(spec: RateSpec, anchor: datetime, after: datetime) -> datetime:
    period = int(spec.period.total_seconds())
    anchor = anchor.replace(microsecond=0)
    if after < anchor:
        return anchor
    elapsed = int((after - anchor).total_seconds() // 1)  # whole seconds, floor
    steps = elapsed // period + 1
    return anchor + timedelta(seconds=steps * period)


def _next_at(spec: AtSpec, timing: Timing, after: datetime) -> datetime | None:
    if spec.when.tzinfo is not None:
        instants = [spec.when.astimezone(UTC)]
    else:
        # A one-off fires once: under "both" it takes the first copy of a repeated time.
        policy = timing.dst
        if policy.repeat is RepeatPolicy.BOTH:
            policy = DstPolicy(gap=policy.gap, repeat=RepeatPolicy.FIRST)
        instants = wall_to_instants(spec.when, timing.tz, policy)
    return next((i for i in instants if i > after), None)


def _next_cron(spec: CronSpec, timing: Timing, after: datetime) -> datetime | None:
    compiled = cron.compile_cron(_croniter_expression(spec))
    tz = timing.tz
    if tz.key in _UTC_ZONES:
        # No offset and no transitions: the wall clock is the instant.
        wall = compiled.next_after(after.replace(tzinfo=None, microsecond=0))
        return None if wall is None else wall.replace(tzinfo=UTC)
    policy = ELAPSED if spec.follows_elapsed_time else timing.dst
    # The offsets in force around `after` bound which wall times can map past it: a wall
    # time W maps to W - offset, so only W > after + (smallest offset) can fire after it.
    offsets = [(after + timedelta(days=d)).astimezone(tz).utcoffset() for d in (-1, 0, 1)]
    low = min(o for o in offsets if o is not None)
    high = max(o for o in offsets if o is not None)
    wall = (after + low).replace(tzinfo=None, microsecond=0)
    best: datetime | None = None
    while True:
        found = compiled.next_after(wall)
        if found is None:
            return best
        wall = found
        # Every instant of `wall` is at least wall - high: once that passes the best found,
        # no later wall time can beat it. (Under "both" instants of successive wall times
        # interleave inside a repeated hour, which is why we cannot stop at the first.)
        if best is not None and wall.replace(tzinfo=UTC) - high >= best:
            return best
        if timing.end is not None and wall.replace(tzinfo=UTC) - high > timing.end:
            return best
        for instant in wall_to_instants(wall, tz, policy):
            if instant > after and (best is None or instant < best):
                best = instant


_UTC_ZONES = frozenset(
    {
        "UTC",
        "Etc/UTC",
        "Etc/UCT",
        "Etc/Universal",
        "Etc/Zulu",
        "UCT",
        "Zulu",
        "Universal",
        "Etc/GMT",
        "GMT",
        "Etc/GMT0",
        "Etc/GMT+0",
        "Etc/GMT-0",
        "Etc/Greenwich",
        "Greenwich",
        "GMT0",
        "GMT+0",
        "GMT-0",
    }
)


# --- jitter and description --------------------------------------------------------------


class RandomSource(Protocol):
    def random(self) -> float: ...


def jittered(fire_time: datetime, max_jitter: timedelta, rng: RandomSource) -> datetime:
    """``fire_time`` delayed by a uniform amount in [0, max_jitter), to the millisecond.

    The occurrence keeps its nominal fire time (its key); only delivery moves.
    """
    if max_jitter <= timedelta(0):
        return fire_time
    millis = int(rng.random() * max_jitter.total_seconds() * 1000)
    return fire_time + timedelta(milliseconds=millis)


def describe(spec: Spec, timezone: str = "UTC") -> str:
    """A sentence a person reads to check the schedule means what they meant."""
    if isinstance(spec, RateSpec):
        unit = spec.unit if spec.amount == 1 else f"{spec.unit}s"
        return f"Every {spec.unit}" if spec.amount == 1 else f"Every {spec.amount} {unit}"
    if isinstance(spec, AtSpec):
        if spec.when.tzinfo is not None:
            return f"Once at {spec.when.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S')} UTC"
        return f"Once at {spec.when.strftime('%Y-%m-%d %H:%M:%S')} ({timezone})"
    options = Options()
    options.use_24hour_time_format = True
    options.verbose = False
    text = get_description(spec.expression, options)
    minute, hour, day_of_month, month, day_of_week = spec.expression.split()[-5:]
    if text.startswith("Every") and minute.isdigit() and hour.startswith("*"):
        # "Every 2 hours" would read as a rate (elapsed time); this cron fires on the
        # zone's wall clock, at a minute of the hours the step names.
        steps = hour.removeprefix("*").removeprefix("/")
        every = f", every {steps} hours" if steps and steps != "1" else ""
        if int(minute) == 0:
            text = f"On the hour{every}" if every else "Every hour, on the hour"
        else:
            text = f"At {int(minute)} minutes past the hour{every}"
    elif (day_of_month, month, day_of_week) == ("*", "*", "*") and re.fullmatch(
        r"At \d\d:\d\d(?:(?:, | and )\d\d:\d\d)*", text
    ):
        # "At 09:30" alone reads as once; the cron fires on every day.
        text = f"Every day at {text.removeprefix('At ')}"
    return f"{text} ({timezone})"
