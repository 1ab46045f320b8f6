"""Natural-language schedules for the common forms, translated to a spec shown back.

Only a small, predictable grammar is understood; anything else is rejected with a
suggestion instead of guessed at. The translation is what gets stored: the user sees the
``cron(...)``, ``rate(...)`` or ``at(...)`` it became and its description.

Understood (case-insensitive; times as ``09:30``, ``9:30pm``, ``9am``, ``noon``,
``midnight``, ``quarter past 9``, ``half past 9pm``, ``quarter to 10``):

- ``every 5 minutes``, ``every 30 seconds``, ``every hour``, ``every 2 days`` (elapsed time)
- ``every hour at minute 15``, ``every hour at :15``, ``hourly at quarter past``,
  ``every 2 hours at :15`` (on the hours 0, 2, 4, ... of the day), ``every other hour``
- ``every day at 09:30``, ``daily at 9am``, ``at noon``, ``every night at midnight``,
  ``twice a day at 9am and 9pm`` (times of one day share their minute: one cron)
- ``every other day at 10:00`` (days 1, 3, 5, ... of the month, as cron's ``*/2``)
- ``every weekday at 08:00``, ``weekends at 10:00``, ``every monday at 08:00``,
  ``every mon and thu at 18:15``, ``tuesday through thursday at 07:00``
- ``on the 1st of every month``, ``every month on the 1st``, ``on the 15th of every month
  at 10:00``
- ``weekly`` (Sundays at midnight, as cron's ``@weekly``), ``weekly on monday at 9am``,
  ``monthly`` (the 1st at midnight), ``monthly at 9am``
- ``every 15 minutes between 9am and 5pm`` (from the first hour up to the second: the
  last fire at 16:45), ``every minute between 22:00 and midnight on weekdays``
- ``in 3 days``, ``in 90 minutes`` (relative to ``now``, which the caller passes)
- ``tomorrow at 9am``, ``today at 17:00`` (the day read in the schedule's zone at ``now``)
- ``on 2026-12-01 at 10:00``, ``at 2026-12-01 10:00`` (a wall-clock time in the zone)
- ``at 2027-01-01T00:00:00Z``, ``at 2027-01-01T09:00:00+01:00`` (ISO 8601 instants;
  without an offset, a wall-clock time in the zone)

Any of them may end with ``in <IANA zone>`` (``every weekday at 17:30 in Europe/London``):
the schedule's zone. As everywhere in the grammar, letter case does not matter there
(``in europe/london``); a zone abbreviation (``in PST``) is refused with the place to
name instead.

:data:`GRAMMAR` holds an example of each form with what it is stored and described as;
the documentation's table is made from it (:func:`grammar_markdown`).

Every description :func:`fireline.domain.schedule.describe` gives a translation is itself
understood and means the same fire times (``At 09:00, Monday through Friday (UTC)``,
``Once at 2026-12-03 15:00:12 UTC``): a description can be pasted back as a spec. The zone
in parentheses is read past: the schedule's ``timezone`` decides.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from fireline.domain import errors, schedule

_DAY_NAMES = {
    "sunday": 0, "sun": 0, "monday": 1, "mon": 1, "tuesday": 2, "tue": 2, "tues": 2,
    "wednesday": 3, "wed": 3, "thursday": 4, "thu": 4, "thurs": 4, "friday": 5, "fri": 5,
    "saturday": 6, "sat": 6,
}  # fmt: skip
# The names a bare cron expression may use (its day and month fields).
_CRON_NAMES = "mon|tue|wed|thu|fri|sat|sun|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec"
_CRON_FIELD = re.compile(rf"(?:[0-9*?/,\-#lw]|{_CRON_NAMES})+")
_UNIT = r"(?P<unit>seconds?|secs?|minutes?|mins?|hours?|hrs?|days?)"
_HOUR12 = r"\d{1,2}(?: ?(?:am|pm))?"
_CLOCK = (
    rf"(?:\d{{1,2}}(?::\d{{2}})?(?: ?(?:am|pm))?|noon|midnight"
    rf"|(?:quarter|half) past {_HOUR12}|quarter to {_HOUR12})"
)
_TIMES = re.compile(rf"(?:at )?(?P<first>{_CLOCK})(?P<more>(?: (?:and |& )?{_CLOCK})*)")
_DAY = r"(?:" + "|".join(sorted(_DAY_NAMES, key=len, reverse=True)) + r")s?"
_DAY_LIST = rf"{_DAY}(?: (?:and |& )?{_DAY})*"
_ORDINAL = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
# A minute past the hour: ":15", "minute 15", "quarter past", "half past".
_PAST_HOUR = r"(?::?(?P<minute>\d{1,2})|minute (?P<minute2>\d{1,2})|(?P<part>quarter|half) past)"
_ZONE_SUFFIX = re.compile(r" ?\([a-z0-9_+\-/ ]+\)$")
EXAMPLES = (
    "every 5 minutes",
    "every day at 09:30",
    "every monday at 08:00",
    "on the 1st of every month",
    "in 3 days",
)


@dataclass(frozen=True)
class Example:
    """A phrase of the grammar, and what it becomes (read at :data:`GRAMMAR_NOW`)."""

    phrase: str
    spec: str  # what is stored
    description: str  # what is shown back, itself understood as the same schedule
    timezone: str = "UTC"  # the schedule's zone (a trailing "in <zone>" sets it)


# The instant the grammar's table is read at ("in 3 days", "tomorrow"): a Monday.
GRAMMAR_NOW = datetime(2026, 11, 30, 15, 0, 12, tzinfo=UTC)
GRAMMAR = (
    Example("every 5 minutes", "rate(5 minutes)", "Every 5 minutes"),
    Example("every 10 seconds", "rate(10 seconds)", "Every 10 seconds"),
    Example("hourly", "cron(0 * * * *)", "Every hour, on the hour (UTC)"),
    Example("every hour at :15", "cron(15 * * * *)", "At 15 minutes past the hour (UTC)"),
    Example("every other hour", "cron(0 */2 * * *)", "On the hour, every 2 hours (UTC)"),
    Example(
        "every 2 hours at :15",
        "cron(15 */2 * * *)",
        "At 15 minutes past the hour, every 2 hours (UTC)",
    ),
    Example("daily", "cron(0 0 * * *)", "Every day at 00:00 (UTC)"),
    Example("every day at 09:30", "cron(30 9 * * *)", "Every day at 09:30 (UTC)"),
    Example("daily at quarter past 9pm", "cron(15 21 * * *)", "Every day at 21:15 (UTC)"),
    Example(
        "twice a day at 9am and 9pm", "cron(0 9,21 * * *)", "Every day at 09:00 and 21:00 (UTC)"
    ),
    Example(
        "every weekday at 17:30 in Europe/London",
        "cron(30 17 * * 1-5)",
        "At 17:30, Monday through Friday (Europe/London)",
        "Europe/London",
    ),
    Example(
        "weekends at noon", "cron(0 12 * * 0,6)", "At 12:00, only on Sunday and Saturday (UTC)"
    ),
    Example(
        "every mon and thu at 18:15",
        "cron(15 18 * * 1,4)",
        "At 18:15, only on Monday and Thursday (UTC)",
    ),
    Example(
        "tuesday through thursday at 07:00",
        "cron(0 7 * * 2-4)",
        "At 07:00, Tuesday through Thursday (UTC)",
    ),
    Example("weekly", "cron(0 0 * * 0)", "At 00:00, only on Sunday (UTC)"),
    Example("weekly on monday at 9am", "cron(0 9 * * 1)", "At 09:00, only on Monday (UTC)"),
    Example("monthly", "cron(0 0 1 * *)", "At 00:00, on day 1 of the month (UTC)"),
    Example(
        "on the 15th of every month at 10:00",
        "cron(0 10 15 * *)",
        "At 10:00, on day 15 of the month (UTC)",
    ),
    Example("every other day at 10:00", "cron(0 10 */2 * *)", "At 10:00, every 2 days (UTC)"),
    Example(
        "every 15 minutes between 9am and 5pm",
        "cron(*/15 9-16 * * *)",
        "Every 15 minutes, between 09:00 and 16:59 (UTC)",
    ),
    Example(
        "every 30 minutes between 08:00 and 18:00 on weekdays in America/New_York",
        "cron(*/30 8-17 * * 1-5)",
        "Every 30 minutes, between 08:00 and 17:59, Monday through Friday (America/New_York)",
        "America/New_York",
    ),
    Example("in 3 days", "at(2026-12-03T15:00:12Z)", "Once at 2026-12-03 15:00:12 UTC"),
    Example("in 90 minutes", "at(2026-11-30T16:30:12Z)", "Once at 2026-11-30 16:30:12 UTC"),
    Example("tomorrow at 9am", "at(2026-12-01T09:00:00)", "Once at 2026-12-01 09:00:00 (UTC)"),
    # 15:00 UTC is already midnight in Tokyo: its tomorrow is the 2nd.
    Example(
        "tomorrow at 9am in Asia/Tokyo",
        "at(2026-12-02T09:00:00)",
        "Once at 2026-12-02 09:00:00 (Asia/Tokyo)",
        "Asia/Tokyo",
    ),
    Example(
        "on 2026-12-24 at 18:00", "at(2026-12-24T18:00:00)", "Once at 2026-12-24 18:00:00 (UTC)"
    ),
    Example(
        "at 2027-01-01T00:00:00Z", "at(2027-01-01T00:00:00Z)", "Once at 2027-01-01 00:00:00 UTC"
    ),
    Example(
        "at 2027-01-01T09:00:00+01:00",
        "at(2027-01-01T08:00:00Z)",
        "Once at 2027-01-01 08:00:00 UTC",
    ),
    Example(
        "at 2027-01-01T09:00 in Europe/Paris",
        "at(2027-01-01T09:00:00)",
        "Once at 2027-01-01 09:00:00 (Europe/Paris)",
        "Europe/Paris",
    ),
)


def grammar_markdown() -> str:
    """The table of :data:`GRAMMAR`, as the documentation's schedules page shows it."""
    lines = [
        "| you write | stored as | zone | described as |",
        "| --- | --- | --- | --- |",
        *(f"| `{e.phrase}` | `{e.spec}` | {e.timezone} | {e.description} |" for e in GRAMMAR),
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Translation:
    text: str  # what the user wrote
    spec: schedule.Spec
    timezone: str | None = None  # the zone a trailing "in <IANA zone>" named

    @property
    def spec_text(self) -> str:
        return str(self.spec)


def looks_natural(text: str) -> bool:
    """True when ``text`` is not one of the spec forms: ``cron()``, ``rate()``, ``at()``
    or bare cron fields (five or six of them, each made of cron's characters and names;
    "on the 1st of every month" has six words but is no cron)."""
    stripped = text.strip().lower()
    if re.fullmatch(r"(cron|rate|at)\s*\(.*\)", stripped):
        return False
    fields = stripped.split()
    if len(fields) in (5, 6) and all(_CRON_FIELD.fullmatch(f) for f in fields):
        return False
    return not re.fullmatch(r"[0-9*?/,\-#lw ]+", stripped)


def translate(text: str, now: datetime, timezone: str = "UTC") -> Translation:
    """Translate one of the common English forms into a spec. ``now`` anchors ``in N``
    and ``tomorrow``; ``timezone`` is the schedule's zone, unless the text names one."""
    body, named = _split_zone(text.strip())
    phrase = _normal(body)
    phrase = _ZONE_SUFFIX.sub("", phrase)
    zone_name = named or timezone
    spec = _translate(phrase, now, zone_name)
    if spec is None:
        raise errors.ScheduleSyntaxError(
            f"cannot understand {text!r}",
            part="natural language",
            suggestion=_suggest(phrase, now, zone_name),
        )
    return Translation(text=text, spec=spec, timezone=named)


def _normal(text: str) -> str:
    """Lower case, commas and full stops read as spaces (a decimal point stays)."""
    text = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", text.lower().replace(",", " "))
    return " ".join(text.split())


def _split_zone(text: str) -> tuple[str, str | None]:
    """``text`` without a trailing ``in <zone>``, and the zone's canonical name."""
    m = re.fullmatch(r"(?P<body>.+?)\s+in\s+(?P<zone>\S+)", text, flags=re.IGNORECASE | re.DOTALL)
    if m is None:
        return text, None
    name = m["zone"]
    known = schedule.zone_by_case(name)
    if known is not None:
        return m["body"], known
    # Only what is written as a zone is read as one: "in 3 days" stays a phrase.
    if (
        "/" in name
        or name.upper() in schedule.ZONE_ABBREVIATIONS
        or (name.isalpha() and name.isupper() and len(name) <= 5)
    ):
        raise errors.UnknownTimeZone(
            f"{name!r} is not an IANA time zone; {schedule.zone_hint(name)}", field="spec"
        )
    return text, None


def _translate(phrase: str, now: datetime, timezone: str) -> schedule.Spec | None:
    if m := re.fullmatch(rf"every (?P<n>\d+) {_UNIT}", phrase):
        return schedule.parse_rate(f"{m['n']} {m['unit']}")
    if m := re.fullmatch(r"every (?P<unit>second|minute|hour|day)", phrase):
        return schedule.RateSpec(amount=1, unit=m["unit"])
    if m := re.fullmatch(rf"in (?P<n>\d+) {_UNIT}", phrase):
        rate = schedule.parse_rate(f"{m['n']} {m['unit']}")
        return schedule.AtSpec(when=(now.astimezone(UTC) + rate.period).replace(microsecond=0))
    return (
        _between(phrase)
        or _hourly(phrase)
        or _instant(phrase)
        or _relative_day(phrase, now, timezone)
        or _once(phrase)
        or _calendar(phrase)
    )


def _between(phrase: str) -> schedule.CronSpec | None:
    """Every N minutes in a window of the day: from the first time's hour up to the
    second time (``between 9am and 5pm`` fires 09:00 to 16:45; ``and 16:59`` the same)."""
    m = re.fullmatch(
        rf"every (?:(?P<n>\d+) (?:minutes?|mins?)|minute) between (?P<a>{_CLOCK}) and "
        rf"(?P<b>{_CLOCK})(?P<rest>(?: .*)?)",
        phrase,
    )
    if m is None:
        return None
    days = _day_clause(m["rest"].strip())
    if days is None:
        return None
    n = int(m["n"] or 1)
    if n < 1 or 60 % n:
        raise errors.ScheduleSyntaxError(
            f"every {n} minutes does not divide the hour: each hour would start over at :00",
            part="minute",
            suggestion=f"every {_divisor_near(n)} minutes between {m['a']} and {m['b']}",
        )
    (first, start_minute), (end, end_minute) = _clock(m["a"]), _clock(m["b"])
    if start_minute != 0:
        raise errors.ScheduleSyntaxError(
            f"a window starts on the hour, not at {m['a']}", part="time"
        )
    if end_minute not in (0, 59):
        raise errors.ScheduleSyntaxError(
            f"a window ends on the hour (or at :59 of it), not at {m['b']}", part="time"
        )
    last = 23 if (end, end_minute) == (0, 0) else end - 1 if end_minute == 0 else end
    if last < first:
        raise errors.ScheduleSyntaxError(
            f"the window from {m['a']} to {m['b']} is empty or crosses midnight "
            "(make it two schedules)",
            part="time",
        )
    minutes = "*" if n == 1 else f"*/{n}"
    hours = str(first) if last == first else f"{first}-{last}"
    return _cron(f"{minutes} {hours} {days[0]} * {days[1]}")


def _divisor_near(n: int) -> int:
    return min(
        (d for d in (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30) if d <= max(n, 1)),
        key=lambda d: abs(d - n),
    )


def _instant(phrase: str) -> schedule.AtSpec | None:
    """An ISO 8601 instant: absolute with ``Z`` or an offset, else wall-clock in the zone."""
    m = re.fullmatch(
        r"(?:once )?(?:on |at )?(?P<iso>\d{4}-\d{2}-\d{2}t\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
        r"(?:z|[+-]\d{2}:?\d{2})?)",
        phrase,
    )
    return schedule.parse_at(m["iso"].upper()) if m is not None else None


def _relative_day(phrase: str, now: datetime, timezone: str) -> schedule.AtSpec | None:
    """``tomorrow at 9am``: a wall-clock time on the day after ``now``'s, in the zone."""
    m = re.fullmatch(rf"(?P<day>today|tomorrow) (?:at )?(?P<time>{_CLOCK})", phrase)
    if m is None:
        return None
    day = now.astimezone(schedule.zone(timezone)).date()
    if m["day"] == "tomorrow":
        day += timedelta(days=1)
    hour, minute = _clock(m["time"])
    # Naive on purpose: a wall-clock time in the schedule's zone, as at(...) without offset.
    wall = datetime(day.year, day.month, day.day, hour, minute)  # noqa: DTZ001
    return schedule.AtSpec(when=wall)


def _hourly(phrase: str) -> schedule.CronSpec | None:
    """Once an hour (or every N hours) at a minute past it."""
    if phrase in ("hourly", "every hour on the hour", "on the hour"):
        return _cron("0 * * * *")
    if m := re.fullmatch(r"on the hour every (?P<n>\d+) hours", phrase):
        phrase = f"every {m['n']} hours at :00"
    if phrase == "every other hour":
        return _cron("0 */2 * * *")
    every = r"(?:every hour|hourly|every (?P<n>\d+) hours|every other hour)"
    m = re.fullmatch(rf"{every} at {_PAST_HOUR}", phrase) or re.fullmatch(
        r"at (?:(?P<minute>\d{1,2}) minutes?|(?P<part>quarter|half)) past the hour"
        r"(?: every (?P<n>\d+) hours)?",
        phrase,
    )
    if m is None:
        return None
    groups = m.groupdict()
    minute = groups.get("minute") or groups.get("minute2")
    value = int(minute) if minute is not None else (15 if groups["part"] == "quarter" else 30)
    if value > 59:
        raise errors.ScheduleSyntaxError(f"minute {value} does not exist", part="minute")
    hours = "*"
    if groups.get("n") is not None:
        n = int(groups["n"])
        if not 1 <= n <= 23:
            raise errors.ScheduleSyntaxError(
                f"every {n} hours cannot be said in hours of the day (1 to 23)", part="hour"
            )
        hours = "*" if n == 1 else f"*/{n}"
    elif "other" in phrase:
        hours = "*/2"
    return _cron(f"{value} {hours} * * *")


def _once(phrase: str) -> schedule.AtSpec | None:
    """A date and a time: a wall-clock time in the schedule's zone, or a UTC instant."""
    m = re.fullmatch(
        rf"(?:once )?(?:on |at )?(?P<date>\d{{4}}-\d{{2}}-\d{{2}})(?: at| )? ?"
        rf"(?:(?P<time>{_CLOCK})|(?P<hms>\d{{1,2}}:\d{{2}}:\d{{2}}))?(?P<utc> ?(?:utc|z))?",
        phrase,
    )
    if m is None:
        return None
    try:
        day = datetime.fromisoformat(m["date"])
    except ValueError as exc:
        raise errors.ScheduleSyntaxError(f"{m['date']} is not a date", part="date") from exc
    if m["hms"]:
        hour, minute, second = (int(p) for p in m["hms"].split(":"))
        if hour > 23 or minute > 59 or second > 59:
            raise errors.ScheduleSyntaxError(f"{m['hms']!r} is not a time of day", part="time")
    else:
        (hour, minute), second = _clock(m["time"]), 0
    when = day.replace(hour=hour, minute=minute, second=second)
    return schedule.AtSpec(when=when.replace(tzinfo=UTC) if m["utc"] else when)


# Day clauses: the days a time-of-day schedule fires on, as (day of month, day of week).
_EVERY_DAY = r"(?:every day|daily|each day|every night|nightly|twice a day|twice daily)"
_DAY_CLAUSES = (
    _EVERY_DAY,
    r"(?:(?P<other>every other day)|every (?P<days>\d+) days)",
    r"(?:every |on )?(?P<weekday>weekday|weekend)(?: day)?s?",
    rf"(?P<first>{_DAY}) through (?P<last>{_DAY})",
    rf"(?:(?:every|each|on|only on|weekly on|every week on) )?(?P<list>{_DAY_LIST})",
    rf"(?:on the {_ORDINAL}(?: day)?(?: of (?:every|each|the) month)?"
    r"|(?:every month|monthly) on the (?P<day1>\d{1,2})(?:st|nd|rd|th)?"
    r"|on day (?P<day2>\d{1,2}) of the month)",
    # cron's @weekly and @monthly: Sundays, and the 1st of the month.
    r"(?P<weekly>weekly|every week)",
    r"(?P<monthly>monthly|every month)",
)


def _calendar(phrase: str) -> schedule.CronSpec | None:
    """Times of day (``at 09:00 and 21:00``) on days (every day, weekdays, Mondays, the
    1st of the month...), the days before or after the times."""
    for clause in _DAY_CLAUSES:
        before = re.fullmatch(rf"{clause}(?P<rest>(?: .*)?)", phrase)
        after = re.fullmatch(rf"(?P<rest>(?:.*? )?){clause}", phrase)
        for m in (before, after):
            if m is None:
                continue
            times = _times(m["rest"].strip())
            if times is None:
                continue
            days = _days(m.groupdict())
            if days is None:
                continue
            if phrase.startswith("twice") or " twice " in f" {phrase} ":
                times = times if m["rest"].strip() else [(0, 0), (12, 0)]
                if len(times) != 2:
                    raise errors.ScheduleSyntaxError(
                        "twice a day needs two times (twice a day at 9am and 9pm)", part="time"
                    )
            return _cron_at(times, *days)
    # A time alone ("at noon", "at 9am and 9pm") is every day.
    times = _times(phrase) if phrase.startswith("at ") else None
    return _cron_at(times, "*", "*") if times is not None else None


def _day_clause(text: str) -> tuple[str, str] | None:
    """(day of month, day of week) of a day clause alone (every day when ``text`` is
    empty), or None when ``text`` is none."""
    if not text:
        return "*", "*"
    for clause in _DAY_CLAUSES:
        if m := re.fullmatch(clause, text):
            return _days(m.groupdict())
    return None


def _days(groups: dict[str, str | None]) -> tuple[str, str] | None:
    """(day of month, day of week) of a day clause's match."""
    if groups.get("weekly") is not None:
        return "*", "0"
    if groups.get("monthly") is not None:
        return "1", "*"
    if groups.get("other") is not None:
        return "*/2", "*"
    if groups.get("days") is not None:
        n = int(groups["days"] or 0)
        return (f"*/{n}", "*") if 2 <= n <= 31 else None
    if groups.get("weekday") is not None:
        return "*", "1-5" if groups["weekday"] == "weekday" else "0,6"
    if groups.get("first") is not None and groups.get("last") is not None:
        return "*", f"{_day_number(groups['first'])}-{_day_number(groups['last'])}"
    if groups.get("list") is not None:
        names = [w for w in (groups["list"] or "").split() if w not in ("and", "&")]
        numbers = sorted({_day_number(d) for d in names})
        return "*", ",".join(map(str, numbers))
    day_text = groups.get("day") or groups.get("day1") or groups.get("day2")
    if day_text is not None:
        day = int(day_text)
        if not 1 <= day <= 31:
            raise errors.ScheduleSyntaxError(
                f"day {day} of the month does not exist", part="day_of_month"
            )
        return str(day), "*"
    return "*", "*"


def _day_number(name: str | None) -> int:
    name = name or ""
    return _DAY_NAMES.get(name, _DAY_NAMES.get(name.removesuffix("s"), 0))


def _times(text: str) -> list[tuple[int, int]] | None:
    """The times of day of ``at 9am and 9pm`` (midnight when ``text`` is empty)."""
    if not text:
        return [(0, 0)]
    m = _TIMES.fullmatch(text)
    if m is None:
        return None
    found = [m["first"], *re.findall(_CLOCK, m["more"] or "")]
    return sorted({_clock(t) for t in found})


def _cron(expression: str) -> schedule.CronSpec:
    return schedule.parse_cron(expression)


def _cron_at(
    times: list[tuple[int, int]], day_of_month: str, day_of_week: str
) -> schedule.CronSpec:
    minutes = {minute for _, minute in times}
    if len(minutes) > 1:
        raise errors.ScheduleSyntaxError(
            "times of one day must share their minute (09:15 and 21:15), or be two schedules",
            part="time",
        )
    hours = ",".join(str(hour) for hour in sorted({hour for hour, _ in times}))
    return _cron(f"{minutes.pop()} {hours} {day_of_month} * {day_of_week}")


def _clock(time: str | None) -> tuple[int, int]:
    if time is None or time == "midnight":
        return 0, 0
    if time == "noon":
        return 12, 0
    if m := re.fullmatch(rf"(?P<part>quarter|half) (?P<way>past|to) (?P<hour>{_HOUR12})", time):
        hour, _ = _clock(m["hour"])
        if m["way"] == "to":
            return (hour - 1) % 24, 45
        return hour, 15 if m["part"] == "quarter" else 30
    m = re.fullmatch(r"(\d{1,2})(?::(\d{2}))?\s*(am|pm)?", time)
    if m is None:  # pragma: no cover - the grammar only lets clock-shaped text through
        raise errors.ScheduleSyntaxError(f"cannot read time {time!r}", part="time")
    hour, minute, half = int(m[1]), int(m[2] or 0), m[3]
    if half:
        if not 1 <= hour <= 12:
            raise errors.ScheduleSyntaxError(f"{time!r} is not a 12-hour time", part="time")
        hour = hour % 12 + (12 if half == "pm" else 0)
    if hour > 23 or minute > 59:
        raise errors.ScheduleSyntaxError(f"{time!r} is not a time of day", part="time")
    return hour, minute


def _suggest(phrase: str, now: datetime, timezone: str) -> str:
    """A form near ``phrase``: the phrase with its misspelt words put right when that is
    understood (``every tuesdy at 8`` -> ``every tuesday at 8``), else the nearest of the
    grammar's examples, else an example of the kind of schedule it seems to mean."""
    words = phrase.split()
    fixed = [_word_near(word) for word in words]
    if fixed != words:
        candidate = " ".join(fixed)
        with contextlib.suppress(errors.ValidationError):
            if _translate(candidate, now, timezone) is not None:
                return candidate
    if "between" in words or "from" in words:
        return "every 15 minutes between 9am and 5pm"
    near = difflib.get_close_matches(phrase, [e.phrase.lower() for e in GRAMMAR], n=1, cutoff=0.6)
    if near:
        return near[0]
    if re.search(r"\b(in)\b \d", phrase):
        return "in 3 days"
    if any(day in words for day in _DAY_NAMES) or "week" in phrase:
        return "every monday at 08:00"
    if "month" in phrase:
        return "on the 1st of every month at 00:00"
    if "day" in phrase or "daily" in phrase or re.search(r"\d(am|pm|:\d\d)", phrase):
        return "every day at 09:30"
    if re.search(r"\b(second|minute|hour)s?\b", phrase):
        return "every 5 minutes"
    return " | ".join(EXAMPLES)


def _word_near(word: str) -> str:
    if word in _VOCABULARY or not word.isalpha():
        return word
    close = difflib.get_close_matches(word, _VOCABULARY, n=1, cutoff=0.75)
    return close[0] if close else word


# The words of the grammar, for putting a misspelt one right.
_WORDS = (
    "every", "each", "day", "days", "daily", "night", "nightly", "hour", "hours", "hourly",
    "minute", "minutes", "second", "seconds", "week", "weekly", "weekday", "weekdays",
    "weekend", "weekends", "month", "monthly", "other", "twice", "tomorrow", "today",
    "between", "and", "through", "at", "on", "in", "of", "the", "noon", "midnight", "quarter",
    "half", "past", "to", "once",
)  # fmt: skip
_VOCABULARY = sorted({*(name for name in _DAY_NAMES if len(name) > 3), *_WORDS})
