"""Natural-language schedules for the common forms, translated to a spec shown back.

Only a small, predictable grammar is understood; anything else is rejected with a
suggestion instead of guessed at. The translation is what gets stored: the user sees the
``cron(...)``, ``rate(...)`` or ``at(...)`` it became and its description.

Understood (case-insensitive, ``at`` times as ``09:30``, ``9:30pm``, ``9am``, ``noon``,
``midnight``):

- ``every 5 minutes``, ``every 30 seconds``, ``every hour``, ``every 2 days``
- ``every day at 09:30``, ``daily at 9am``, ``every weekday at 08:00``,
  ``every weekend at 10:00``
- ``every monday at 08:00``, ``every mon and thu at 18:15``
- ``every hour at minute 15``
- ``on the 1st of every month``, ``on the 15th of every month at 10:00``
- ``in 3 days``, ``in 90 minutes`` (relative to ``now``, which the caller passes)
- ``on 2026-12-01 at 10:00``, ``at 2026-12-01 10:00`` (a wall-clock time in the zone)
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
_UNIT = r"(?P<unit>seconds?|secs?|minutes?|mins?|hours?|hrs?|days?)"
_TIME = r"(?P<time>\d{1,2}(?::\d{2})?\s*(?:am|pm)?|noon|midnight)"
_MONTHLY = (
    r"(?:on the |every month on the )(?P<day>\d{1,2})(?:st|nd|rd|th)?(?: of every month)?"
    rf"(?: at {_TIME})?"
)
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
    """True when ``text`` is not one of the spec forms (cron fields, cron(), rate(), at())."""
    stripped = text.strip().lower()
    if re.fullmatch(r"(cron|rate|at)\s*\(.*\)", stripped):
        return False
    return not re.fullmatch(r"[0-9*?/,\-#lw ]+|([^\s]+\s+){4,5}[^\s]+", stripped)


def translate(text: str, now: datetime) -> Translation:
    """Translate one of the common English forms into a spec; ``now`` anchors ``in N``."""
    phrase = " ".join(text.strip().lower().replace(",", " ").split())
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
    if phrase in ("hourly", "every hour on the hour"):
        return schedule.parse_cron("0 * * * *")
    if m := re.fullmatch(r"every hour at (?:minute )?:?(?P<minute>\d{1,2})", phrase):
        return _cron(f"{int(m['minute'])} * * * *")
    if m := re.fullmatch(rf"(?:every day|daily)(?: at {_TIME})?", phrase):
        return _cron_at(m["time"], "*", "*")
    if m := re.fullmatch(rf"every (?P<which>weekday|weekend)(?: day)?s?(?: at {_TIME})?", phrase):
        return _cron_at(m["time"], "*", "1-5" if m["which"] == "weekday" else "0,6")
    if m := re.fullmatch(
        rf"every (?P<days>[a-z]+(?: (?:and|&) [a-z]+| [a-z]+)*)(?: at {_TIME})?", phrase
    ):
        days = [d for d in re.split(r" (?:and|&) | ", m["days"]) if d]
        if days and all(d.rstrip("s") in _DAY_NAMES or d in _DAY_NAMES for d in days):
            numbers = sorted({_DAY_NAMES.get(d, _DAY_NAMES.get(d.rstrip("s"), 0)) for d in days})
            return _cron_at(m["time"], "*", ",".join(map(str, numbers)))
    if m := re.fullmatch(_MONTHLY, phrase):
        day = int(m["day"])
        if not 1 <= day <= 31:
            raise errors.ScheduleSyntaxError(
                f"day {day} of the month does not exist", part="day_of_month"
            )
        return _cron_at(m["time"], str(day), "*")
    if m := re.fullmatch(rf"in (?P<n>\d+) {_UNIT}", phrase):
        rate = schedule.parse_rate(f"{m['n']} {m['unit']}")
        return schedule.AtSpec(when=(now.astimezone(UTC) + rate.period).replace(microsecond=0))
    if m := re.fullmatch(
        rf"(?:on |at )?(?P<date>\d{{4}}-\d{{2}}-\d{{2}})(?: at| )? ?{_TIME}?", phrase
    ):
        hour, minute = _clock(m["time"])
        try:
            when = datetime.fromisoformat(m["date"]).replace(hour=hour, minute=minute)
        except ValueError as exc:
            raise errors.ScheduleSyntaxError(f"{m['date']} is not a date", part="date") from exc
        return schedule.AtSpec(when=when)
    return None


def _cron(expression: str) -> schedule.CronSpec:
    return schedule.parse_cron(expression)


def _cron_at(time: str | None, day_of_month: str, day_of_week: str) -> schedule.CronSpec:
    hour, minute = _clock(time)
    return _cron(f"{minute} {hour} {day_of_month} * {day_of_week}")


def _clock(time: str | None) -> tuple[int, int]:
    if time is None or time == "midnight":
        return 0, 0
    if time == "noon":
        return 12, 0
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
