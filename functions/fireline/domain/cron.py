"""Compiled cron expressions: the next matching wall-clock time in a few bisects.

The ticker computes a next fire for every fire it materializes, tens of thousands of
times in the seconds before the top of an hour, on a Lambda's fraction of a CPU. Asking
croniter each time cost about 20 us of copying and date arithmetic per fire; here an
expression is compiled once (and cached) into sorted tuples of seconds, minutes, hours and
months, and the next match is found by carrying through those fields on plain integers.

croniter stays the authority on what an expression means: the tuples come from its own
expansion, and the days of a month that match (day-of-month and day-of-week, their OR,
``L``, ``W``, ``#``) are asked of croniter once per month and day rule and cached. So
the compiled form cannot disagree with croniter about a day, and the time fields are
plain sets.

Wall times are naive: the caller (``schedule``) maps them to instants in a zone.
"""

from __future__ import annotations

import bisect
import calendar
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from croniter import croniter
from croniter.croniter import CroniterBadDateError

# How far ahead the next match is searched before the expression is declared finished
# (croniter's own limit, which is how "0 0 30 2 *" is found to never fire).
MAX_YEARS_BETWEEN_FIRES = 30


@dataclass(frozen=True)
class CompiledCron:
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: tuple[int, ...]
    # "dom * dow" when the day fields restrict days; None when every day matches.
    day_rule: str | None

    def next_after(self, wall: datetime) -> datetime | None:
        """The first matching wall time strictly after ``wall`` (whole seconds), or None
        when there is none within MAX_YEARS_BETWEEN_FIRES years."""
        secs, mins, hrs, months = self.seconds, self.minutes, self.hours, self.months
        y, mo, d = wall.year, wall.month, wall.day
        h, mi, s = wall.hour, wall.minute, wall.second + 1
        last_year = y + MAX_YEARS_BETWEEN_FIRES
        while True:
            if mo > 12:
                y, mo, d, h, mi, s = y + 1, 1, 1, 0, 0, 0
            if y > last_year:
                return None
            m_at = bisect.bisect_left(months, mo)
            if m_at == len(months):
                mo = 13
                continue
            if months[m_at] != mo:
                mo, d, h, mi, s = months[m_at], 1, 0, 0, 0
            days = self._days(y, mo)
            d_at = bisect.bisect_left(days, d)
            if d_at == len(days):
                mo, d, h, mi, s = mo + 1, 1, 0, 0, 0
                continue
            if days[d_at] != d:
                d, h, mi, s = days[d_at], 0, 0, 0
            h_at = bisect.bisect_left(hrs, h)
            if h_at == len(hrs):
                d, h, mi, s = d + 1, 0, 0, 0
                continue
            if hrs[h_at] != h:
                h, mi, s = hrs[h_at], 0, 0
            mi_at = bisect.bisect_left(mins, mi)
            if mi_at == len(mins):
                h, mi, s = h + 1, 0, 0
                continue
            if mins[mi_at] != mi:
                mi, s = mins[mi_at], 0
            s_at = bisect.bisect_left(secs, s)
            if s_at == len(secs):
                mi, s = mi + 1, 0
                continue
            return datetime(y, mo, d, h, mi, secs[s_at])  # noqa: DTZ001 - a wall time

    def days_of(self, year: int, month: int) -> tuple[int, ...]:
        """The days of one month the day fields match."""
        return self._days(year, month)

    def _days(self, year: int, month: int) -> tuple[int, ...]:
        if self.day_rule is None:
            return _all_days(year, month)
        return _matching_days(self.day_rule, year, month)


@functools.lru_cache(maxsize=4096)
def compile_cron(expression: str) -> CompiledCron:
    """Compile six cron fields (seconds first), already validated by the caller."""
    fields = expression.split()
    # croniter.expand moves the seconds field last: minute, hour, dom, month, dow, second.
    expanded, nth = croniter.expand(expression, second_at_beginning=True)
    minutes, hours, doms, months, dows, seconds = expanded

    def numbers(values: Sequence[object], low: int, high: int) -> tuple[int, ...]:
        if "*" in values:
            return tuple(range(low, high + 1))
        return tuple(sorted({int(str(v)) for v in values}))

    every_day = doms == ["*"] and dows == ["*"] and not nth and "W" not in fields[3]
    return CompiledCron(
        seconds=numbers(seconds, 0, 59),
        minutes=numbers(minutes, 0, 59),
        hours=numbers(hours, 0, 23),
        months=numbers(months, 1, 12),
        day_rule=None if every_day else f"{fields[3]} * {fields[5]}",
    )


@functools.lru_cache(maxsize=4096)
def _all_days(year: int, month: int) -> tuple[int, ...]:
    return tuple(range(1, calendar.monthrange(year, month)[1] + 1))


@functools.lru_cache(maxsize=65536)
def _matching_days(day_rule: str, year: int, month: int) -> tuple[int, ...]:
    """The days of one month a day rule ("dom * dow") matches, as croniter reads it."""
    start = datetime(year, month, 1) - timedelta(seconds=1)  # noqa: DTZ001 - a wall time
    walls = croniter(
        f"0 0 0 {day_rule}",
        start,
        ret_type=datetime,
        second_at_beginning=True,
        max_years_between_matches=1,
    )
    days: list[int] = []
    while True:
        try:
            found = walls.get_next(datetime)
        except CroniterBadDateError:
            break
        if (found.year, found.month) != (year, month):
            break
        days.append(found.day)
    return tuple(days)
