"""The schedule engine's next cron fire as it was computed before expressions were
compiled: croniter iterating wall times, copied from a cached parse at every call.

Kept as an oracle (the compiled matcher must agree with it on every expression) and as
the "before" of the ticker CPU benchmark.
"""

from __future__ import annotations

import copy
import functools
from datetime import UTC, datetime, timedelta

from croniter import croniter
from croniter.croniter import CroniterBadDateError

from fireline.domain import schedule


@functools.lru_cache(maxsize=4096)
def _expanded(expression: str) -> croniter[datetime]:
    return croniter(
        expression,
        datetime(2000, 1, 1),
        ret_type=datetime,
        second_at_beginning=True,
        max_years_between_matches=schedule.MAX_YEARS_BETWEEN_FIRES,
    )


def next_cron(spec: schedule.CronSpec, timing: schedule.Timing, after: datetime) -> datetime | None:
    tz = timing.tz
    policy = schedule.ELAPSED if spec.follows_elapsed_time else timing.dst
    offsets = [(after + timedelta(days=d)).astimezone(tz).utcoffset() for d in (-1, 0, 1)]
    low = min(o for o in offsets if o is not None)
    high = max(o for o in offsets if o is not None)
    start_wall = (after + low).replace(tzinfo=None, microsecond=0)
    walls = copy.copy(_expanded(" ".join(spec.fields)))
    walls.set_current(start_wall, force=True)
    best: datetime | None = None
    while True:
        try:
            wall = walls.get_next(datetime)
        except CroniterBadDateError:
            return best
        if best is not None and wall.replace(tzinfo=UTC) - high >= best:
            return best
        if timing.end is not None and wall.replace(tzinfo=UTC) - high > timing.end:
            return best
        for instant in schedule.wall_to_instants(wall, tz, policy):
            if instant > after and (best is None or instant < best):
                best = instant
