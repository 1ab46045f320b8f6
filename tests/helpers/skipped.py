"""What a schedule's history records as skipped, fire by fire: for checks that every fire
due has a row, a message or a recorded skip (the ticker's tests, the fault campaign).

A skipped fire is recorded by its own row, by a summary row that counts it (from its
fire time to ``skipped_last``), or, until those rows are written, by the range the
schedule item itself holds (``model.Schedule.skipped``, written with the advance that
moved past the fires)."""

from __future__ import annotations

from datetime import datetime, timedelta

from fireline import ports
from fireline.domain import model, occurrence, schedule

_JUST_BEFORE = timedelta(microseconds=1)


def fires_counted(timing: schedule.Timing, row: occurrence.Occurrence) -> list[datetime]:
    """The fires a skipped row stands for: its own, or every one its summary counts."""
    if row.skipped_last is None:
        return [row.fire_time]
    return list(schedule.fires(timing, row.fire_time - _JUST_BEFORE, until=row.skipped_last))


def recorded_skips(
    schedules: ports.ScheduleStore,
    occurrences: ports.OccurrenceStore,
    item: model.Schedule,
    *,
    version: int | None = None,
) -> set[datetime]:
    """Every fire of ``item`` (of ``version`` only, when given) recorded as skipped, in
    its rows or in the range its stored item holds. Fires are enumerated on ``item``'s
    timing: pass the schedule as it was when those fires were planned."""
    counted: set[datetime] = set()
    cursor = None
    while True:
        page = occurrences.history(item.tenant_id, item.schedule_id, limit=100, cursor=cursor)
        for row in page.items:
            if row.state is occurrence.State.SKIPPED and version in (None, row.version):
                counted.update(fires_counted(item.timing, row))
        cursor = page.cursor
        if cursor is None:
            break
    stored = schedules.get(item.tenant_id, item.schedule_id)
    held = stored.skipped if stored is not None else None
    if held is not None and version in (None, held.version):
        counted.update(schedule.fires(item.timing, held.first - _JUST_BEFORE, until=held.last))
    return counted
