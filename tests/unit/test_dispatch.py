"""Recording the fires a misfire plan skips: every one accounted for, none left waiting."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from fireline.adapters import memory
from fireline.domain import model, occurrence, policies, schedule
from fireline.services import claims, dispatch

T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
NOW = T0 + 30 * MINUTE


def every_minute() -> model.Schedule:
    timing = schedule.Timing(spec=schedule.parse_spec("rate(1 minute)"))
    return model.Schedule(
        tenant_id="tenant-a",
        schedule_id="minutely",
        timing=timing,
        spec_text="rate(1 minute)",
        next_fire=T0,
    )


def test_a_fire_a_worker_deferred_keeps_its_delivery_when_a_redone_plan_lists_it() -> None:
    # GIVEN a fire that was sent on time and deferred by a worker (its tenant at its limit):
    # a queued row, and its message back on the queue; a misfire plan redone after a failed
    # advance now lists it as missed
    item = every_minute()
    store = memory.MemoryOccurrenceStore()
    deferred = dispatch.row_for(item, T0 + MINUTE, T0 + MINUTE)
    assert store.put_new(deferred)
    report = dispatch.DispatchReport()
    # WHEN the plan's skips are recorded
    dispatch.record_skips(
        item,
        [dispatch.Skip(T0 + MINUTE, "skipped: misfire")],
        None,
        now=NOW,
        occurrences=store,
        report=report,
    )
    # THEN the row still waits for its message, which runs it: the fire was not missed
    row = store.get(deferred.key)
    assert row is not None and row.state is occurrence.State.QUEUED
    assert report.skipped == 0


def test_a_fire_that_ran_and_waits_for_its_retry_is_not_skipped_as_missed() -> None:
    # GIVEN a fire that was sent on time, ran, failed its first attempt and waits for its
    # retry (its message requeued with the backoff), which a misfire plan redone after a
    # failed advance now lists as missed
    item = every_minute()
    store = memory.MemoryOccurrenceStore()
    sent = dispatch.row_for(item, T0 + MINUTE, T0 + MINUTE)
    assert store.put_new(sent)
    won, claimed = store.claim(sent.key, now=T0 + MINUTE, until=T0 + 2 * MINUTE)
    assert won and claimed is not None
    failed = claimed.moved(occurrence.State.FAILED, exit_reason="error: down")
    assert store.transition(failed, expected_state=occurrence.State.RUNNING)
    report = dispatch.DispatchReport()
    # WHEN the plan's skips are recorded
    dispatch.record_skips(
        item,
        [dispatch.Skip(T0 + MINUTE, "skipped: misfire")],
        None,
        now=NOW,
        occurrences=store,
        report=report,
    )
    # THEN its retry still runs: the fire was not missed, and nothing is counted skipped
    row = store.get(sent.key)
    assert row is not None and row.state is occurrence.State.FAILED
    assert row.exit_reason == "error: down"
    assert report.skipped == 0


def test_a_summary_whose_first_fire_ran_starts_at_the_next_and_counts_one_less() -> None:
    # GIVEN a summary of 20 missed fires whose first one ran after all (an interrupted tick
    # had sent it, and a worker claimed it before the plan was recorded)
    item = every_minute()
    store = memory.MemoryOccurrenceStore()
    ran = dispatch.row_for(item, T0, T0)
    store.put_new(ran)
    claimed, _ = store.claim(ran.key, now=T0, until=T0 + MINUTE)
    assert claimed
    summary = policies.SkippedSummary(count=20, first=T0, last=T0 + 19 * MINUTE)
    report = dispatch.DispatchReport()
    # WHEN the summary is recorded
    dispatch.record_skips(item, [], summary, now=NOW, occurrences=store, report=report)
    # THEN the fire that ran keeps its own row, and the summary is keyed at the next fire,
    # counting the 19 that did not run: none counted twice, none lost
    assert store.get(ran.key).state is occurrence.State.RUNNING  # type: ignore[union-attr]
    second = store.get(occurrence.occurrence_key("minutely", 1, T0 + MINUTE))
    assert second is not None and second.state is occurrence.State.SKIPPED
    assert second.exit_reason == (
        "skipped: misfire (19 fires from 2026-05-01T12:01:00Z to 2026-05-01T12:19:00Z)"
    )


def test_a_summary_walks_past_a_fire_skipped_for_overlap_and_records_the_rest() -> None:
    # GIVEN a range of 20 missed fires held on the schedule, whose first two were sent by
    # an interrupted tick: the first ran, the second was skipped by a worker as overlap
    item = every_minute()
    store = memory.MemoryOccurrenceStore()
    ran = dispatch.row_for(item, T0, T0)
    assert store.put_new(ran)
    overlapped = dispatch.row_for(
        item,
        T0 + MINUTE,
        T0 + MINUTE,
        state=occurrence.State.SKIPPED,
        exit_reason="skipped: overlap",
    )
    assert store.put_new(overlapped)
    held = policies.SkippedRange(1, T0, T0 + 19 * MINUTE, 20, at=NOW)
    report = dispatch.DispatchReport()
    # WHEN the next pickup records the held range
    dispatch.record_range(
        dataclasses.replace(item, skipped=held), now=NOW, occurrences=store, report=report
    )
    # THEN the overlap row stays that fire's record, and the 18 fires after it get their
    # summary row, keyed at the third fire: no fire is left without a record
    assert store.get(overlapped.key).exit_reason == "skipped: overlap"  # type: ignore[union-attr]
    third = store.get(occurrence.occurrence_key("minutely", 1, T0 + 2 * MINUTE))
    assert third is not None and third.state is occurrence.State.SKIPPED
    assert third.exit_reason == (
        "skipped: misfire (18 fires from 2026-05-01T12:02:00Z to 2026-05-01T12:19:00Z)"
    )
    assert report.skipped == 1
    print(
        f"\na range of {held.count}: 1 ran, 1 skipped as overlap, the summary counts "
        f"{third.skipped_count} from the third fire"
    )


def test_a_fires_message_carries_its_send_time_and_its_row_is_created_then() -> None:
    # GIVEN a fire sent two seconds after its time
    item = every_minute()
    fire_time = item.next_fire
    assert fire_time is not None
    sent = fire_time + timedelta(seconds=2)

    # WHEN its message is built and read back by the first delivery
    out = dispatch.outbound(item, fire_time, sent)
    intent = claims.intent_of(out.message.body, out.key)

    # THEN the row it stands for is created at the send time: 2 s of enqueue lag
    assert intent.created_at == sent
    # AND a message without a usable send time is created at its claim
    for junk in (None, "soon", True, -1, 10**20):
        body = {**out.message.body, "sent_at_ms": junk}
        assert claims.intent_of(body, out.key).created_at is None
