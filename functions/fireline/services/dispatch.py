"""Turning fire times into durable occurrences and queue messages.

One path for every fire: the ticker's scheduled fires, catch-up fires and "trigger now"
all come through :func:`dispatch`, so they share the key, the conditional put and the
message shape.

Order of writes: occurrence rows first, then messages, then (in the caller) the schedule
advance. A crash anywhere leaves the schedule un-advanced, so the next tick redoes the
same fires: the puts find their keys taken, and a row still ``queued`` gets its message
sent again because we cannot know whether the first send happened. A message sent twice
is harmless (the worker's claim is conditional); a message never sent would be a lost
fire. At-least-once, never zero.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from fireline import ports
from fireline.domain import errors, model, occurrence, policies, schedule

MESSAGE_VERSION = 1
SEND_ATTEMPTS = 3


@dataclass
class DispatchReport:
    created: int = 0
    duplicates: int = 0  # keys that existed already (a race or a redo after a crash)
    resent: int = 0  # duplicates still queued, whose message went out again
    sent: int = 0
    skipped: int = 0  # rows recorded as skipped (misfire, overlap)
    keys: list[str] = field(default_factory=list)  # occurrences that were sent

    def add(self, other: DispatchReport) -> None:
        self.created += other.created
        self.duplicates += other.duplicates
        self.resent += other.resent
        self.sent += other.sent
        self.skipped += other.skipped
        self.keys += other.keys


def job_message(item: occurrence.Occurrence) -> dict[str, Any]:
    """The queue message: small, so the worker re-reads the schedule (and its version)."""
    return {
        "v": MESSAGE_VERSION,
        "occurrence_key": item.key,
        "tenant_id": item.tenant_id,
        "schedule_id": item.schedule_id,
        "version": item.version,
        "fire_time": occurrence.format_fire_time(item.fire_time),
        "job_class": item.job_class,
    }


@dataclass(frozen=True)
class Skip:
    fire_time: datetime
    reason: str


@dataclass(frozen=True)
class Outbound:
    """A message ready to send: the occurrence it carries and its delivery delay."""

    job_class: str
    key: str
    message: ports.OutboundMessage


def dispatch(
    item: model.Schedule,
    fires: Sequence[datetime],
    *,
    now: datetime,
    occurrences: ports.OccurrenceStore,
    queue: ports.WorkQueue,
    skips: Sequence[Skip] = (),
    summary: policies.SkippedSummary | None = None,
) -> DispatchReport:
    """Record ``fires`` as queued occurrences and send them; record ``skips`` as skipped."""
    report = DispatchReport()
    outbound = record(
        item, fires, now=now, occurrences=occurrences, skips=skips, summary=summary, report=report
    )
    send(queue, outbound, report)
    return report


def record(
    item: model.Schedule,
    fires: Sequence[datetime],
    *,
    now: datetime,
    occurrences: ports.OccurrenceStore,
    report: DispatchReport,
    skips: Sequence[Skip] = (),
    summary: policies.SkippedSummary | None = None,
) -> list[Outbound]:
    """Put the occurrence rows; return the messages that must go out for them.

    The caller sends them (batching across schedules) before it advances any schedule.
    """
    for skip in skips:
        _record_skip(item, skip.fire_time, skip.reason, now, occurrences, report)
    if summary is not None:
        reason = (
            f"skipped: misfire ({summary.count}{'' if summary.exact else '+'} fires from "
            f"{occurrence.format_fire_time(summary.first)} to "
            f"{occurrence.format_fire_time(summary.last)})"
        )
        _record_skip(item, summary.first, reason, now, occurrences, report)

    outbound: list[Outbound] = []
    for fire_time in fires:
        row = occurrence.new(
            tenant_id=item.tenant_id,
            schedule_id=item.schedule_id,
            version=item.version,
            fire_time=fire_time,
            job_class=item.job_class,
            created_at=now,
        )
        if occurrences.put_new(row):
            report.created += 1
        else:
            report.duplicates += 1
            existing = occurrences.get(row.key)
            if existing is None or existing.state is not occurrence.State.QUEUED:
                continue  # already running or finished: its message did its work
            report.resent += 1
        message = ports.OutboundMessage(
            body=job_message(row), delay_seconds=_delay_seconds(item, fire_time, now)
        )
        outbound.append(Outbound(item.job_class, row.key, message))
    return outbound


def send(queue: ports.WorkQueue, outbound: Sequence[Outbound], report: DispatchReport) -> None:
    """Send in batches of ten per class (one SQS request per ten fires)."""
    by_class: dict[str, list[Outbound]] = {}
    for out in outbound:
        by_class.setdefault(out.job_class, []).append(out)
    for job_class, pending in by_class.items():
        for start in range(0, len(pending), 10):
            batch = pending[start : start + 10]
            _send(queue, job_class, [out.message for out in batch])
            report.sent += len(batch)
            report.keys += [out.key for out in batch]


def _record_skip(
    item: model.Schedule,
    fire_time: datetime,
    reason: str,
    now: datetime,
    occurrences: ports.OccurrenceStore,
    report: DispatchReport,
) -> None:
    row = occurrence.new(
        tenant_id=item.tenant_id,
        schedule_id=item.schedule_id,
        version=item.version,
        fire_time=fire_time,
        job_class=item.job_class,
        created_at=now,
        state=occurrence.State.SKIPPED,
        exit_reason=reason,
    )
    if occurrences.put_new(row):
        report.skipped += 1
    else:
        report.duplicates += 1


def _delay_seconds(item: model.Schedule, fire_time: datetime, now: datetime) -> int:
    """SQS delay for an early pickup (lookahead), plus jitter: 0..900 seconds."""
    deliver_at = fire_time
    if item.jitter_seconds:
        # Seeded by the occurrence key, so a redo after a crash picks the same delay.
        rng = random.Random(occurrence.occurrence_key(item.schedule_id, item.version, fire_time))
        deliver_at = schedule.jittered(fire_time, item.jitter, rng)
    seconds = (deliver_at - now).total_seconds()
    return max(0, min(900, math.ceil(seconds)))


def _send(queue: ports.WorkQueue, job_class: str, batch: list[ports.OutboundMessage]) -> None:
    messages = {str(i): replace(m, id=str(i)) for i, m in enumerate(batch)}
    pending = list(messages.values())
    for _ in range(SEND_ATTEMPTS):
        failed = queue.send_batch(job_class, pending)
        if not failed:
            return
        pending = [messages[i] for i in failed]
    raise errors.Unavailable(f"{len(pending)} messages could not be sent to {job_class}")
