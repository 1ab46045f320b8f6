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
- ``in 3 days``, ``in 90 minutes`` (relative to ``now``, which the caller passes)
- ``on 2026-12-01 at 10:00``, ``at 2026-12-01 10:00`` (a wall-clock time in the zone)

Every description :func:`fireline.domain.schedule.describe` gives a translation is itself
understood and means the same fire times (``At 09:00, Monday through Friday (UTC)``,
``Once at 2026-12-03 15:00:12 UTC``): a description can be pasted back as a spec. The zone
in parentheses is read past: the schedule's ``timezone`` decides.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from datetime import UTC, datetime

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
class Translation:
    text: str  # what the user wrote
    spec: schedule.Spec

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


def translate(text: str, now: datetime) -> Translation:
    """Translate one of the common English forms into a spec; ``now`` anchors ``in N``."""
    phrase = " ".join(text.strip().lower().replace(",", " ").replace(".", " ").split())
    phrase = _ZONE_SUFFIX.sub("", phrase)
    spec = _translate(phrase, now)
    if spec is None:
        raise errors.ScheduleSyntaxError(
            f"cannot understand {text!r}", part="natural language", suggestion=_suggest(phrase)
        )
    return Translation(text=text, spec=spec)


def _translate(phrase: str, now: datetime) -> schedule.Spec | None:
    if m := re.fullmatch(rf"every (?P<n>\d+) {_UNIT}", phrase):
        return schedule.parse_rate(f"{m['n']} {m['unit']}")
    if m := re.fullmatch(r"every (?P<unit>second|minute|hour|day)", phrase):
        return schedule.RateSpec(amount=1, unit=m["unit"])
    if m := re.fullmatch(rf"in (?P<n>\d+) {_UNIT}", phrase):
        rate = schedule.parse_rate(f"{m['n']} {m['unit']}")
        return schedule.AtSpec(when=(now.astimezone(UTC) + rate.period).replace(microsecond=0))
    return _hourly(phrase) or _once(phrase) or _calendar(phrase)


def _hourly(phrase: str) -> schedule.CronSpec | None:
    """Once an hour (or every N hours) at a minute past it."""
    if phrase in ("hourly", "every hour on the hour"):
        return _cron("0 * * * *")
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
    rf"(?:(?:every|each|on|only on) )?(?P<list>{_DAY_LIST})",
    rf"(?:on the {_ORDINAL}(?: day)?(?: of (?:every|each|the) month)?"
    r"|(?:every month|monthly) on the (?P<day1>\d{1,2})(?:st|nd|rd|th)?"
    r"|on day (?P<day2>\d{1,2}) of the month)",
)


def _calendar(phrase: str) -> schedule.CronSpec | None:
    """Times of day (``at 09:00 and 21:00``) on days (every day, weekdays, Mondays, the
    1st of the month...), the days before or after the times."""
    if phrase == "monthly":
        return _cron("0 0 1 * *")
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


def _days(groups: dict[str, str | None]) -> tuple[str, str] | None:
    """(day of month, day of week) of a day clause's match."""
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


def _suggest(phrase: str) -> str:
    for word in phrase.split():
        close = difflib.get_close_matches(
            word, [d for d in _DAY_NAMES if len(d) > 4], n=1, cutoff=0.8
        )
        if close and close[0] != word:
            return f"every {close[0]} at 08:00"
    if re.search(r"\b(in)\b \d", phrase):
        return "in 3 days"
    if any(day in phrase.split() for day in _DAY_NAMES) or "week" in phrase:
        return "every monday at 08:00"
    if "month" in phrase:
        return "on the 1st of every month at 00:00"
    if "day" in phrase or "daily" in phrase or re.search(r"\d(am|pm|:\d\d)", phrase):
        return "every day at 09:30"
    if re.search(r"\b(second|minute|hour)s?\b", phrase):
        return "every 5 minutes"
    return " | ".join(EXAMPLES)
