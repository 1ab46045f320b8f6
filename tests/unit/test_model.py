"""The stored schedule record and its due shard."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fireline.domain import errors, model, policies, retry, schedule

T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
LATER = T0 + timedelta(minutes=5)
IDS = ["billing-sync", "daily-digest", "sched-42", "ü-unicode", "tenant-a/sched-1"]


def make(**changes: Any) -> model.Schedule:
    fields: dict[str, Any] = {
        "tenant_id": "tenant-a",
        "schedule_id": "nightly",
        "timing": schedule.Timing(spec=schedule.parse_spec("rate(1 minute)")),
        "spec_text": "rate(1 minute)",
        "next_fire": T0,
        "created_at": T0 - timedelta(days=1),
        "updated_at": T0 - timedelta(days=1),
    }
    fields.update(changes)
    return model.Schedule(**fields)


# --- due_shard ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule_id", "shards", "shard"),
    [
        ("billing-sync", 16, 2),
        ("daily-digest", 16, 12),
        ("sched-42", 16, 8),
        ("ü-unicode", 16, 4),
        ("tenant-a/sched-1", 32, 29),
        ("sched-42", 7, 4),
    ],
)
def test_given_known_ids_then_their_shards_never_change(
    schedule_id: str, shards: int, shard: int
) -> None:
    # Stored items carry their shard: a different hash would strand them in the wrong
    # partition of the due index, so these values are pinned.
    assert model.due_shard(schedule_id, shards) == shard


def test_given_other_processes_with_other_hash_seeds_then_they_agree_on_every_shard() -> None:
    # GIVEN the shards this process computes
    here = [model.due_shard(i) for i in IDS]
    code = (
        "import json, sys; from fireline.domain import model; "
        "print(json.dumps([model.due_shard(i) for i in json.loads(sys.argv[1])]))"
    )
    # WHEN two processes with differently salted hash() compute them
    there = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps(IDS)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        there.append(json.loads(out.stdout))
    # THEN
    assert there == [here, here]


@given(schedule_id=st.text(max_size=60), shards=st.integers(min_value=1, max_value=256))
def test_given_any_id_and_shard_count_then_the_shard_is_in_range_and_repeatable(
    schedule_id: str, shards: int
) -> None:
    shard = model.due_shard(schedule_id, shards)
    assert 0 <= shard < shards
    assert model.due_shard(schedule_id, shards) == shard


def test_given_many_ids_then_they_spread_over_every_shard() -> None:
    # GIVEN 16,000 ids (1,000 per shard on average)
    counts = collections.Counter(model.due_shard(f"sched-{n}") for n in range(16_000))
    # THEN every shard takes a fair share, so no index partition runs hot
    assert set(counts) == set(range(model.DEFAULT_SHARDS))
    fewest, most = min(counts.values()), max(counts.values())
    assert 900 <= fewest <= most <= 1_100


@pytest.mark.parametrize("shards", [0, -1])
def test_given_fewer_than_one_shard_then_it_is_refused(shards: int) -> None:
    with pytest.raises(errors.ValidationError) as caught:
        model.due_shard("nightly", shards)
    assert caught.value.field == "shards"


def test_a_schedule_is_in_the_shard_of_its_id() -> None:
    item = make(schedule_id="sched-42")
    assert (item.shard(), item.shard(7)) == (8, 4)


# --- validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"job_class": "gpu"}, "job_class"),
        ({"job_class": ""}, "job_class"),
        ({"jitter_seconds": -1}, "jitter_seconds"),
        ({"deadline_seconds": 0}, "deadline_seconds"),
        ({"deadline_seconds": -5}, "deadline_seconds"),
        ({"next_fire": None}, "next_fire"),
        ({"state": model.ScheduleState.PAUSED}, "next_fire"),
        ({"state": model.ScheduleState.COMPLETED}, "next_fire"),
        ({"state": model.ScheduleState.CANCELLED}, "next_fire"),
    ],
)
def test_given_an_invalid_field_then_the_schedule_is_refused_naming_it(
    changes: dict[str, Any], field: str
) -> None:
    with pytest.raises(errors.ValidationError) as caught:
        make(**changes)
    assert caught.value.field == field


@pytest.mark.parametrize("job_class", model.JOB_CLASSES)
def test_given_valid_fields_then_the_schedule_keeps_them(job_class: str) -> None:
    item = make(job_class=job_class, jitter_seconds=0, deadline_seconds=1)
    assert (item.job_class, item.jitter, item.deadline_seconds) == (job_class, timedelta(0), 1)
    paused = make(state=model.ScheduleState.PAUSED, next_fire=None, jitter_seconds=30)
    assert (paused.state, paused.next_fire, paused.jitter) == (
        model.ScheduleState.PAUSED,
        None,
        timedelta(seconds=30),
    )


def test_given_no_policies_then_the_defaults_apply() -> None:
    item = make()
    assert item.kind is model.Kind.SCHEDULE
    assert item.state is model.ScheduleState.ACTIVE
    assert item.version == 1
    assert item.retry == retry.RetryPolicy()
    assert item.misfire == policies.Misfire(policy=policies.MisfirePolicy.FIRE_ONCE)
    assert item.overlap is policies.OverlapPolicy.ALLOW


# --- advanced / paused --------------------------------------------------------------------


def test_given_a_next_fire_when_advanced_then_only_next_fire_and_what_was_sent_change() -> None:
    # GIVEN
    item = make(version=4, payload={"n": 1})
    # WHEN
    moved = item.advanced(T0 + timedelta(minutes=1), LATER)
    # THEN the fires from the one it moved past were sent at LATER
    assert moved == dataclasses.replace(
        item, next_fire=T0 + timedelta(minutes=1), updated_at=LATER, sent_from=T0, sent_at=LATER
    )
    assert moved.state is model.ScheduleState.ACTIVE
    assert item.next_fire == T0  # the original record is untouched


def every_10_seconds_sent_ahead(sent_at: datetime) -> model.Schedule:
    """An every-10-second schedule whose fires from T0 to T0 + 10 min were sent at sent_at."""
    timing = schedule.Timing(spec=schedule.parse_spec("rate(10 seconds)"))
    item = make(timing=timing, spec_text="rate(10 seconds)", next_fire=T0)
    return item.advanced(T0 + timedelta(minutes=10), sent_at)


def test_the_upcoming_fire_of_a_schedule_sent_ahead_is_the_next_one_after_now() -> None:
    # GIVEN an every-10-second schedule the ticker sent ten minutes ahead
    item = every_10_seconds_sent_ahead(T0 - timedelta(seconds=30))
    # WHEN its upcoming fire is read 3 s past a fire
    # THEN it is the next fire after then, not the next one to send
    assert item.upcoming(T0 + timedelta(seconds=23)) == T0 + timedelta(seconds=30)
    # AND past what was sent, it is the next one to send
    assert item.upcoming(T0 + timedelta(minutes=9, seconds=55)) == T0 + timedelta(minutes=10)


def test_the_upcoming_fire_of_a_schedule_behind_is_its_overdue_next_fire() -> None:
    # GIVEN a schedule whose next fire passed without the ticker sending it
    item = make(next_fire=T0)
    # WHEN its upcoming fire is read two minutes later THEN it is that overdue fire
    assert item.upcoming(T0 + timedelta(minutes=2)) == T0
    # AND a paused one has none
    assert item.paused(LATER).upcoming(LATER) is None


def test_the_send_time_is_known_for_what_the_last_advance_sent_and_void_once_paused() -> None:
    # GIVEN an every-10-second schedule whose fires from T0 were sent 30 s before T0
    sent_at = T0 - timedelta(seconds=30)
    item = every_10_seconds_sent_ahead(sent_at)
    # THEN the fires it sent have that send time, and the one left to send has none
    assert item.sent_time(T0) == sent_at
    assert item.sent_time(T0 + timedelta(minutes=9, seconds=50)) == sent_at
    assert item.sent_time(T0 + timedelta(minutes=10)) is None
    assert item.sent_time(T0 - timedelta(seconds=10)) is None  # an earlier advance's
    # AND a new version (paused) forgets what the older one sent
    paused = item.paused(LATER)
    assert (paused.sent_from, paused.sent_at) == (None, None)


def test_given_no_next_fire_when_advanced_then_the_schedule_is_completed() -> None:
    # GIVEN a one-off job that has fired
    item = make(kind=model.Kind.JOB, version=2)
    # WHEN
    done = item.advanced(None, LATER)
    # THEN it leaves the due index (no next fire) and keeps its identity
    assert (done.state, done.next_fire, done.updated_at) == (
        model.ScheduleState.COMPLETED,
        None,
        LATER,
    )
    assert (done.schedule_id, done.version, done.kind) == ("nightly", 2, model.Kind.JOB)


def test_given_an_active_schedule_when_paused_then_it_leaves_due_under_a_new_version() -> None:
    # GIVEN
    item = make(version=3)
    assert item.next_fire is not None
    # WHEN it is paused before its next fire
    before = item.next_fire - timedelta(minutes=1)
    paused = item.paused(before)
    # THEN no next fire (out of the due index), and a new version so that occurrences
    # already materialized for version 3 are stale to the worker's version check
    assert paused == dataclasses.replace(
        item,
        state=model.ScheduleState.PAUSED,
        next_fire=None,
        version=4,
        paused_at=before,
        updated_at=before,
    )


def test_given_a_next_fire_that_passed_unsent_when_paused_then_resume_counts_from_it() -> None:
    # GIVEN a schedule whose next fire passed five minutes ago, not handed on (the ticker
    # is behind)
    item = make(version=3)
    assert item.next_fire is not None
    # WHEN it is paused
    paused = item.paused(LATER)
    # THEN a resume counts missed fires from that next fire, not from the pause: the
    # pause moves it past no fire
    assert paused.paused_at == item.next_fire - timedelta(milliseconds=1)
    assert (paused.updated_at, paused.version, paused.next_fire) == (LATER, 4, None)


def test_given_a_paused_schedule_when_advanced_to_a_time_then_it_is_refused() -> None:
    # A paused schedule is out of the due index; giving it a next fire would put it back
    # without resuming it.
    paused = make().paused(LATER)
    with pytest.raises(errors.ValidationError) as caught:
        paused.advanced(T0 + timedelta(minutes=1), LATER)
    assert caught.value.field == "next_fire"
