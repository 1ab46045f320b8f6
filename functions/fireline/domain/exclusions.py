"""Days a schedule does not fire on: dates, date ranges and day patterns, in its zone.

A schedule's ``exclude`` list names whole days of its own time zone's calendar (a public
holiday, a freeze week, the last day of the year). A fire whose local date one of them
covers is not a fire of the schedule: it is never sent, the schedule's next fire moves
past it, and the ticker records it as ``skipped: excluded``. Three forms of entry:

- a date, ``2026-12-25``;
- a range of dates, ``{"from": "2026-12-21", "to": "2026-12-31"}``, both ends included,
  at most :data:`MAX_RANGE_DAYS` days long;
- a day pattern, five cron fields ``minute hour day-of-month month day-of-week`` whose
  minute and hour are ``*`` (an entry excludes whole days): ``* * 1 1 *`` is every
  1 January, ``* * * * SAT,SUN`` every weekend, ``* * 24-31 12 *`` the end of December.
  The day fields read as in a schedule's cron spec (their OR when both are restricted,
  ``L``, ``W``, ``#``).

The list is bounded (:data:`MAX_ENTRIES`): it lives on the schedule's item, which the
ticker reads on every pickup and rewrites on every advance, and DynamoDB charges a write
unit per KB of item. Pure: no clock, no I/O.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from croniter import croniter
from croniter.croniter import CroniterError

from fireline.domain import cron, errors

# 64 entries of the longest form stay under 4 KB of the item (a range is 40 bytes as
# stored, a date 13, a pattern at most MAX_PATTERN_CHARS + 3): the item's read stays one
# consistent read unit and the advance a few write units more at worst, not tens.
MAX_ENTRIES = 64
MAX_PATTERN_CHARS = 48
# A freeze is weeks, a sabbatical a year: a longer range is almost surely a typo.
MAX_RANGE_DAYS = 366
# A fire is searched past at most this many excluded days in a row (four years): entries
# that exclude every day (``* * * * *``) make a schedule that never fires, refused when
# it is created, and a schedule whose exclusions run longer ends at them.
MAX_EXCLUDED_RUN_DAYS = 4 * 366

REASON = "skipped: excluded"

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class DateRange:
    first: date
    last: date

    def covers(self, day: date) -> bool:
        return self.first <= day <= self.last

    def as_json(self) -> dict[str, str]:
        return {"from": self.first.isoformat(), "to": self.last.isoformat()}


@dataclass(frozen=True)
class DayPattern:
    """Five cron fields whose minute and hour are ``*``: the days they match."""

    text: str

    def covers(self, day: date) -> bool:
        compiled = _compiled(self.text)
        return day.month in compiled.months and day.day in compiled.days_of(day.year, day.month)

    def as_json(self) -> str:
        return self.text


@dataclass(frozen=True)
class OneDay:
    day: date

    def covers(self, day: date) -> bool:
        return day == self.day

    def as_json(self) -> str:
        return self.day.isoformat()


Entry = OneDay | DateRange | DayPattern


@dataclass(frozen=True)
class Exclusions:
    """A schedule's exclude list, in the order it was given."""

    entries: tuple[Entry, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.entries)

    def covers(self, day: date) -> bool:
        return any(entry.covers(day) for entry in self.entries)

    def next_open_day(self, day: date) -> date | None:
        """The first day after ``day`` that no entry covers (None: none within
        :data:`MAX_EXCLUDED_RUN_DAYS`)."""
        for offset in range(1, MAX_EXCLUDED_RUN_DAYS + 1):
            following = day + timedelta(days=offset)
            if not self.covers(following):
                return following
        return None

    def as_json(self) -> list[str | dict[str, str]]:
        return [entry.as_json() for entry in self.entries]


NONE = Exclusions()


def parse(values: Any, field: str = "exclude") -> Exclusions:
    """An exclude list from its JSON form; a bad entry raises :class:`errors.ValidationError`
    naming it (``exclude[2]``, ``exclude[0].to``)."""
    if values is None:
        return NONE
    if not isinstance(values, list):
        raise errors.ValidationError("must be a list of dates, ranges and patterns", field=field)
    if len(values) > MAX_ENTRIES:
        raise errors.ValidationError(
            f"holds at most {MAX_ENTRIES} entries (it is stored on the schedule's item, "
            "read and written on every pickup): merge dates into ranges or patterns",
            field=field,
        )
    return Exclusions(tuple(_entry(value, f"{field}[{i}]") for i, value in enumerate(values)))


def _entry(value: Any, field: str) -> Entry:
    if isinstance(value, dict):
        return _range(value, field)
    if not isinstance(value, str):
        raise errors.ValidationError(
            "is a date (2026-12-25), a range ({from, to}) or a pattern (* * 1 1 *)", field=field
        )
    text = " ".join(value.split())
    if " " in text:
        return _pattern(text, field)
    return OneDay(_date(text, field))


def _date(text: Any, field: str) -> date:
    if not isinstance(text, str) or not _DATE.match(text):
        raise errors.ValidationError(f"{text!r} is not a date (YYYY-MM-DD)", field=field)
    try:
        return date.fromisoformat(text)
    except ValueError as exc:
        raise errors.ValidationError(
            f"{text!r} is not a date of the calendar", field=field
        ) from exc


def _range(value: dict[str, Any], field: str) -> DateRange:
    unknown = sorted(set(value) - {"from", "to"})
    if unknown:
        raise errors.ValidationError(f"{unknown[0]!r} is not a field of a range", field=field)
    for end in ("from", "to"):
        if end not in value:
            raise errors.ValidationError("a range needs from and to", field=f"{field}.{end}")
    first = _date(value["from"], f"{field}.from")
    last = _date(value["to"], f"{field}.to")
    if last < first:
        raise errors.ValidationError("is before from", field=f"{field}.to")
    if (last - first).days + 1 > MAX_RANGE_DAYS:
        raise errors.ValidationError(
            f"a range is at most {MAX_RANGE_DAYS} days (give two ranges for longer)",
            field=f"{field}.to",
        )
    return DateRange(first, last)


def _pattern(text: str, field: str) -> DayPattern:
    if len(text) > MAX_PATTERN_CHARS:
        raise errors.ValidationError(
            f"a pattern is at most {MAX_PATTERN_CHARS} characters", field=field
        )
    parts = text.upper().split()
    if len(parts) != 5:
        raise errors.ValidationError(
            f"a pattern has 5 cron fields (minute hour day-of-month month day-of-week), got "
            f"{len(parts)}",
            field=field,
        )
    if parts[:2] != ["*", "*"]:
        raise errors.ValidationError(
            "an exclusion is whole days: its minute and hour fields are * (* * 25 12 *)",
            field=field,
        )
    normal = " ".join(parts)
    try:
        _compiled(normal)
    except (CroniterError, ValueError, KeyError, IndexError) as exc:
        raise errors.ValidationError(
            f"{text!r} is not a valid pattern: {exc}", field=field
        ) from exc
    return DayPattern(normal)


@functools.lru_cache(maxsize=1024)
def _compiled(text: str) -> cron.CompiledCron:
    _, _, dom, month, dow = text.split()
    expression = f"0 0 0 {dom} {month} {dow}"
    if not croniter.is_valid(expression, second_at_beginning=True):
        raise ValueError("croniter cannot read it")
    return cron.compile_cron(expression)
