"""Turning fire times into queue messages (and skipped fires into history rows).

The message is the occurrence's hand-off: SQS keeps it durably until a worker deletes
it, and the worker's claim creates the occurrence row (a conditional write on the
occurrence key, so two deliveries of one fire make one row and one run). The ticker
writes no row per fire: a write per fire would double the ticker's requests and the
write units of every job, and the row it wrote only said "a message is on its way".

Order of writes: messages first, then (in the caller) the schedule advance. A crash in
between leaves the schedule un-advanced, so the next tick sends the same fires again: a
message sent twice is harmless (the second delivery finds the row claimed or settled); a
message never sent would be a lost fire. At-least-once, never zero.

Fires the misfire policy skips do get a row each (state ``skipped``, with the reason), so
the history accounts for every fire; "trigger now" writes its row before its message so
the API can answer with it at once.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from fireline import ports
from fireline.domain import errors, exclusions, model, occurrence, policies, schedule, tracing

MESSAGE_VERSION = 1
# How long after its clock reading a batch is taken to reach SQS: the delay counts from
# then. A send's own CPU and one request's latency (tens of milliseconds in a region);
# one slower than this makes its fires visible that much late, never lost. Every tenth of
# a second more is as much more wait for the worker that holds a fire sent ahead.
IN_FLIGHT = timedelta(milliseconds=100)
SEND_ATTEMPTS = 3
SQS_BATCH = 10


@dataclass
class DispatchReport:
    created: int = 0  # rows written (skipped fires, trigger-now)
    duplicates: int = 0  # rows that existed already (a race or a redo after a crash)
    sent: int = 0
    skipped: int = 0  # fires recorded as skipped (misfire)
    failed: int = 0  # messages that could not be sent (their schedule is not advanced)
    keys: list[str] = field(default_factory=list)  # occurrences that were sent

    def add(self, other: DispatchReport) -> None:
        self.created += other.created
        self.duplicates += other.duplicates
        self.sent += other.sent
        self.skipped += other.skipped
        self.failed += other.failed
        self.keys += other.keys


def job_message(item: occurrence.Occurrence) -> dict[str, Any]:
    """The queue message: small, so the worker re-reads the schedule (and its version)."""
    return _message(
        item.key, item.tenant_id, item.schedule_id, item.version, item.fire_time, item.job_class
    )


def fire_message(item: model.Schedule, fire_time: datetime) -> dict[str, Any]:
    """The message for one fire of ``item``: the same shape as :func:`job_message`."""
    key = occurrence.occurrence_key(item.schedule_id, item.version, fire_time)
    return _message(key, item.tenant_id, item.schedule_id, item.version, fire_time, item.job_class)


def _message(
    key: str, tenant_id: str, schedule_id: str, version: int, fire_time: datetime, job_class: str
) -> dict[str, Any]:
    return {
        "v": MESSAGE_VERSION,
        "occurrence_key": key,
        "tenant_id": tenant_id,
        "schedule_id": schedule_id,
        "version": version,
        "fire_time": occurrence.format_fire_time(fire_time),
        "job_class": job_class,
        # The fire's trace, derived from the fire as its key is: whoever sends it (the API,
        # the ticker, a retry, a redrive) sends the same one (see fireline.domain.tracing).
        tracing.MESSAGE_FIELD: tracing.header(tracing.for_fire(tenant_id, key, fire_time)),
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
    # When set, the delay is worked out again the moment the batch goes out: time spent
    # between planning and sending (a long round) must not make the fire late.
    deliver_at: datetime | None = None


def row_for(
    item: model.Schedule,
    fire_time: datetime,
    now: datetime,
    *,
    state: occurrence.State = occurrence.State.QUEUED,
    exit_reason: str | None = None,
    backfill_id: str | None = None,
) -> occurrence.Occurrence:
    """The new row of one fire of ``item``, written at ``now`` (by the backfill
    ``backfill_id``, when one wrote it)."""
    return occurrence.new(
        tenant_id=item.tenant_id,
        schedule_id=item.schedule_id,
        version=item.version,
        fire_time=fire_time,
        job_class=item.job_class,
        created_at=now,
        state=state,
        exit_reason=exit_reason,
        backfill_id=backfill_id,
    )


def outbound(
    item: model.Schedule,
    fire_time: datetime,
    now: datetime,
    *,
    row_written: bool = False,
    lead: timedelta = timedelta(0),
    queue: str | None = None,
) -> Outbound:
    """The message for one fire, sent at ``now``. ``row_written``: the sender wrote the
    fire's row before it (a trigger); else the message says so, and the worker need not
    read for a row on its first delivery (the claim writes it, conditional on the key).
    ``lead``: how long before its time the fire is to be visible (its batch gathered
    before then, or a burst's: see services.ticker); the worker that takes it holds it
    until its time. ``queue``: where it goes, if not its class's queue (a burst's)."""
    # When the fire was handed to the queue: the row the first delivery writes keeps it
    # as its creation time, so the ledger shows each fire's enqueue lag.
    body = {**fire_message(item, fire_time), "sent_at_ms": int(now.timestamp() * 1000)}
    if not row_written:
        body["no_row"] = True
    if item.held_in is not None:
        # A batch's job: its holder holds its unit, which the sweep gives back after its
        # end, so its worker gives nothing back (see fireline.domain.quota.Holder).
        body["in_holder"] = True
    deliver_at = deliver_time(item, fire_time) - lead
    message = ports.OutboundMessage(body=body, delay_seconds=delay_until(deliver_at, now))
    return Outbound(queue or item.job_class, body["occurrence_key"], message, deliver_at)


def dispatch(
    item: model.Schedule,
    fires: Sequence[datetime],
    *,
    now: datetime,
    occurrences: ports.OccurrenceStore,
    queue: ports.WorkQueue,
) -> DispatchReport:
    """Record ``fires`` as queued rows, then send them ("trigger now": the caller answers
    with the row at once). A row that exists and still waits gets its message again."""
    report = DispatchReport()
    pending: list[Outbound] = []
    for fire_time in fires:
        row = row_for(item, fire_time, now)
        if occurrences.put_new(row):
            report.created += 1
        else:
            report.duplicates += 1
            existing = occurrences.get(row.key)
            if existing is None or existing.state is not occurrence.State.QUEUED:
                continue  # already running or finished: its message did its work
        pending.append(outbound(item, fire_time, now, row_written=True))
    send(queue, pending, report)
    return report


def record_skips(
    item: model.Schedule,
    skips: Sequence[Skip],
    summary: policies.SkippedSummary | None,
    *,
    now: datetime,
    occurrences: ports.OccurrenceStore,
    report: DispatchReport,
) -> None:
    """Give every fire the misfire plan skips its row (the summary one row for many).

    Latest first, the plan's first skipped fire last (the summary's, when there is one):
    once that row is there, all of them are, which is what ``record_range`` relies on."""
    for skip in reversed(skips):
        _record_skip(item, skip.fire_time, skip.reason, now, occurrences, report)
    if summary is not None:
        _record_summary(item, summary, now, occurrences, report)


# A run of excluded fires this long or shorter gets a row per fire; a longer one (an
# excluded day of a frequent schedule), one summary row.
EXCLUDED_ROWS_PER_RUN = 10


def record_excluded(
    item: model.Schedule,
    runs: Sequence[policies.SkippedSummary],
    *,
    now: datetime,
    occurrences: ports.OccurrenceStore,
    report: DispatchReport,
) -> None:
    """Rows for the fires an advance moved past because the schedule's exclusions or
    skips take them away: latest first, so the range's first fire's row is written last
    (what ``record_range`` relies on after a crash)."""
    for run in reversed(runs):
        if run.count > EXCLUDED_ROWS_PER_RUN:
            _record_summary(item, run, now, occurrences, report, reason=exclusions.REASON)
            continue
        for fire_time in reversed(
            [
                run.first,
                *schedule.excluded_fires(
                    item.timing, run.first, until=run.last, limit=run.count - 1
                ),
            ]
        ):
            _record_skip(item, fire_time, exclusions.REASON, now, occurrences, report)


def record_range(
    item: model.Schedule,
    *,
    now: datetime,
    occurrences: ports.OccurrenceStore,
    report: DispatchReport,
) -> None:
    """The rows of a range an advance held on the schedule (see model.Schedule.skipped),
    whose rows may not have been written: a tick that died or lost its lease after the
    advance. Its first fire's row written means every row of the range was (record_skips
    writes it last); otherwise one summary row for the whole range."""
    skipped = item.skipped
    if skipped is None:
        return
    # Dated when they were skipped, not now: a later pickup's clock may even read earlier.
    now = skipped.at or now
    of_version = replace(item, version=skipped.version)
    if skipped.count == 1:
        _record_skip(of_version, skipped.first, skipped.reason, now, occurrences, report)
        return
    summary = policies.SkippedSummary(skipped.count, skipped.first, skipped.last)
    _record_summary(of_version, summary, now, occurrences, report, reason=skipped.reason)


def held_row(item: model.Schedule) -> occurrence.Occurrence | None:
    """The record of the range the schedule holds (see model.Schedule.skipped) as the row
    its rows will be, for a history read before they are written."""
    held = item.skipped
    if held is None:
        return None
    reason = held.reason
    if held.count > 1:
        reason += (
            f" ({held.count} fires from {occurrence.format_fire_time(held.first)} to "
            f"{occurrence.format_fire_time(held.last)})"
        )
    row = row_for(
        replace(item, version=held.version),
        held.first,
        held.at or item.updated_at or held.last,
        state=occurrence.State.SKIPPED,
        exit_reason=reason,
    )
    if held.count == 1:
        return row
    return replace(row, skipped_last=held.last, skipped_count=held.count)


def _record_summary(
    item: model.Schedule,
    summary: policies.SkippedSummary,
    now: datetime,
    occurrences: ports.OccurrenceStore,
    report: DispatchReport,
    *,
    reason: str = policies.MISFIRE_REASON,
) -> None:
    """The summary row is keyed by the first fire it counts. If that fire has a row of its
    own already (an interrupted tick sent it and a worker ran it), the fire is not
    skipped: the summary starts at the next fire in its range instead, so it never
    counts a fire that ran, nor is it lost."""
    first, count = summary.first, summary.count
    while count > 0:
        covers = policies.SkippedSummary(count, first, summary.last)
        if _record_skip(item, first, reason, now, occurrences, report, covers=covers):
            return
        following = schedule.next_fire(item.timing, first)
        if following is None or following > summary.last:
            return
        first, count = following, count - 1


def _record_skip(
    item: model.Schedule,
    fire_time: datetime,
    reason: str,
    now: datetime,
    occurrences: ports.OccurrenceStore,
    report: DispatchReport,
    *,
    covers: policies.SkippedSummary | None = None,
) -> bool:
    """True when the fire is now recorded as skipped for ``reason``; False when it has a
    row of another kind (it ran, runs, or was skipped for another reason, as overlap).
    ``covers``: the row is the summary of that range of fires."""
    row = row_for(item, fire_time, now, state=occurrence.State.SKIPPED, exit_reason=reason)
    if covers is not None and covers.count > 1:
        row = replace(
            row,
            exit_reason=(
                f"{reason} ({covers.count} fires from "
                f"{occurrence.format_fire_time(covers.first)} to "
                f"{occurrence.format_fire_time(covers.last)})"
            ),
            skipped_last=covers.last,
            skipped_count=covers.count,
        )
    if occurrences.put_new(row):
        report.created += 1
        report.skipped += 1
        return True
    report.duplicates += 1
    existing = occurrences.get(row.key)
    # A skipped row is this plan's, redone after a crash. Any other row is a fire some
    # delivery holds, and that delivery decides it: a queued row is a fire a worker
    # deferred (a tenant limit, overlap's buffer) or a redrive, whose message is on the
    # queue; a failed one ran and waits for its retry; a running one runs. A plan redone
    # after a failed advance lists such fires as missed, but they were sent in time, so
    # they keep their delivery, as a fire that ran keeps its row. (Settling a queued row
    # here skipped a deferred fire its message was about to run.) A row skipped for
    # another reason (a worker's "skipped: overlap") is that fire's own record, not this
    # plan's: a summary walking its range goes on past it, or the fires after it would
    # be left with no record at all.
    return (
        existing is not None
        and existing.state is occurrence.State.SKIPPED
        and (existing.exit_reason or "").startswith(reason)
    )


def send(queue: ports.WorkQueue, pending: Sequence[Outbound], report: DispatchReport) -> None:
    """Send every message (batches of ten per class); Unavailable if any could not be."""
    failed = send_batches(queue, pending, report)
    if failed:
        raise errors.Unavailable(f"{len(failed)} messages could not be sent")


class Sender(Protocol):
    """What sending needs of a queue (ports.WorkQueue, or a wrapper of one)."""

    def send_batch(
        self, job_class: str, messages: Sequence[ports.OutboundMessage]
    ) -> list[str]: ...


def send_batches(
    queue: Sender,
    pending: Sequence[Outbound],
    report: DispatchReport,
    parallel: ports.Parallel | None = None,
    clock: ports.Clock | None = None,
) -> set[str]:
    """Send in batches of ten per class (one SQS request per ten fires), the batches side
    by side when ``parallel`` is given, each delay taken from ``clock`` as its batch goes
    out. Returns the keys whose message could not be sent (throttling, an unavailable
    queue): their schedules must not advance."""
    by_class: dict[str, list[Outbound]] = {}
    for out in pending:
        by_class.setdefault(out.job_class, []).append(out)
    batches = [
        (job_class, outs[start : start + SQS_BATCH])
        for job_class, outs in by_class.items()
        for start in range(0, len(outs), SQS_BATCH)
    ]
    calls: list[Callable[[], None]] = [
        functools.partial(_send_now, queue, job_class, batch, clock) for job_class, batch in batches
    ]
    outcomes: list[Exception | None] = (
        [_attempt(call) for call in calls] if parallel is None else parallel.run(calls)
    )
    failed: set[str] = set()
    for (_, batch), outcome in zip(batches, outcomes, strict=True):
        if isinstance(outcome, errors.Unavailable):
            failed.update(out.key for out in batch)
            report.failed += len(batch)
        elif isinstance(outcome, Exception):
            raise outcome
        else:
            report.sent += len(batch)
            report.keys += [out.key for out in batch]
    return failed


def _send_now(
    queue: Sender, job_class: str, batch: Sequence[Outbound], clock: ports.Clock | None
) -> None:
    # The delay counts from when SQS takes the batch, a moment after this reading (the
    # batch's own CPU, the request's latency). Counting from a little later keeps the
    # rounded-down delay from landing after the fire time.
    now = clock.now() + IN_FLIGHT if clock is not None else None
    _send(
        queue,
        job_class,
        [
            ports.OutboundMessage(
                body=out.message.body, delay_seconds=delay_until(out.deliver_at, now), id=str(i)
            )
            if out.deliver_at is not None and now is not None
            else replace(out.message, id=str(i))
            for i, out in enumerate(batch)
        ],
    )


def _attempt(call: Callable[[], None]) -> Exception | None:
    try:
        call()
    except errors.Unavailable as exc:
        return exc
    return None


def deliver_time(item: model.Schedule, fire_time: datetime) -> datetime:
    """When the fire's message should become visible: its fire time, plus jitter."""
    if not item.jitter_seconds:
        return fire_time
    # Seeded by the occurrence key, so a redo after a crash picks the same delay.
    rng = random.Random(occurrence.occurrence_key(item.schedule_id, item.version, fire_time))
    return schedule.jittered(fire_time, item.jitter, rng)


# The classes whose fires the ticker makes visible early, for their workers to hold until
# their time: their event source mappings gather a batch for up to
# BATCHING_WINDOW_SECONDS (MaximumBatchingWindowInSeconds, which a batch over ten
# records needs), so a fire visible only at its time would wait that long before its
# invocation starts. (A burst's fires come earlier still, on their class's burst queue:
# see services.ticker.) A long job's runner starts its execution and is done; its fires
# are not held for.
HELD_CLASSES = frozenset({"default", "short"})
# Three seconds, not the one a batch over ten records needs: an invocation waiting on
# remote targets is billed for its wall time, its batch's slowest target and its holds,
# whatever the number of records it carries, so at a steady load a window three times
# as long gathers batches about three times as large, and a remote job's billed share
# of an invocation falls by about half (docs/costs.md, cost.http_3s). A fire made
# visible only at its time (a one-off job due at once) may wait up to the window.
BATCHING_WINDOW_SECONDS = 3.0


def delay_until(deliver_at: datetime, now: datetime) -> int:
    """SQS delay (0..900 s) for a message to become visible at ``deliver_at``.

    Rounded down, so the message is visible at that time or up to a second before it
    (never after): the worker waits out the difference. SQS counts delays in whole
    seconds; rounding up would make every early fire up to a second late.
    """
    seconds = (deliver_at - now) / timedelta(seconds=1)
    return max(0, min(900, math.floor(seconds)))


def _send(queue: Sender, job_class: str, batch: list[ports.OutboundMessage]) -> None:
    """Send one batch whose entries have ids (retrying the entries SQS refused)."""
    messages = {m.id: m for m in batch}
    pending = list(messages.values())
    for _ in range(SEND_ATTEMPTS):
        failed = queue.send_batch(job_class, pending)
        if not failed:
            return
        pending = [messages[i] for i in failed]
    raise errors.Unavailable(f"{len(pending)} messages could not be sent to {job_class}")
