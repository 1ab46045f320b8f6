"""Misfire planning and overlap decisions."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fireline.domain import errors, policies, schedule
from fireline.domain.policies import MisfirePolicy, OverlapDecision, OverlapPolicy

T0 = datetime(2026, 1, 1, tzinfo=UTC)  # a whole hour since the epoch: on every rate's grid
MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)


def timing(spec: str) -> schedule.Timing:
    return schedule.Timing(spec=schedule.parse_spec(spec))


def minutes(*offsets: int) -> tuple[datetime, ...]:
    return tuple(T0 + n * MINUTE for n in offsets)


EVERY_MINUTE = timing("rate(1 minute)")
EVERY_SECOND = timing("* * * * * *")


# --- Misfire validation -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["grace_seconds", "catch_up_window_seconds", "catch_up_max"])
def test_given_a_negative_misfire_setting_then_the_error_names_it(name: str) -> None:
    with pytest.raises(errors.ValidationError) as caught:
        policies.Misfire(**{name: -1})  # type: ignore[arg-type]
    assert caught.value.field == f"misfire.{name}"


# --- grace --------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", list(MisfirePolicy))
@pytest.mark.parametrize("late", [timedelta(0), timedelta(seconds=30), timedelta(seconds=60)])
def test_given_a_fire_late_by_at_most_the_grace_then_nothing_is_missed(
    policy: MisfirePolicy, late: timedelta
) -> None:
    # GIVEN a minutely schedule due at T0, checked up to 60 s (the grace) later
    misfire = policies.Misfire(policy=policy, grace_seconds=60)
    # WHEN
    plan = policies.plan_misfires(EVERY_MINUTE, misfire, T0, T0 + late)
    # THEN the caller fires it normally: no plan, and the schedule is not moved
    assert plan == policies.MisfirePlan((), (), None, None)
    assert plan.missed == 0


def test_given_a_fire_one_second_past_the_grace_then_it_is_missed() -> None:
    # GIVEN the fire at T0 is 61 s late; the one at T0+60 s is 1 s late
    misfire = policies.Misfire(policy=MisfirePolicy.SKIP, grace_seconds=60)
    # WHEN
    plan = policies.plan_misfires(EVERY_MINUTE, misfire, T0, T0 + timedelta(seconds=61))
    # THEN only T0 is missed; the schedule resumes after it (T0+60 s fires normally)
    assert plan.skipped == (T0,)
    assert plan.resume_after == T0
    assert plan.missed == 1


# --- the three policies over a ten-minute outage ------------------------------------------
# A minutely schedule due at T0, looked at T0+10 min with 60 s of grace: T0 .. T0+8 min are
# missed (9 fires); T0+9 min is exactly 60 s late and still simply late.


def ten_minute_outage(misfire: policies.Misfire) -> policies.MisfirePlan:
    return policies.plan_misfires(EVERY_MINUTE, misfire, T0, T0 + 10 * MINUTE)


def test_given_fire_once_then_only_the_latest_missed_fire_runs() -> None:
    plan = ten_minute_outage(policies.Misfire(policy=MisfirePolicy.FIRE_ONCE))
    assert plan.fire == minutes(8)
    assert plan.skipped == minutes(*range(8))
    assert (plan.skipped_summary, plan.resume_after, plan.missed) == (None, T0 + 8 * MINUTE, 9)


def test_given_skip_then_every_missed_fire_is_recorded_as_skipped() -> None:
    plan = ten_minute_outage(policies.Misfire(policy=MisfirePolicy.SKIP))
    assert plan.fire == ()
    assert plan.skipped == minutes(*range(9))
    assert (plan.skipped_summary, plan.resume_after, plan.missed) == (None, T0 + 8 * MINUTE, 9)


def test_given_fire_all_then_every_missed_fire_inside_the_window_runs_oldest_first() -> None:
    # GIVEN a catch-up window of 5 minutes before now (T0+5 min, inclusive)
    misfire = policies.Misfire(policy=MisfirePolicy.FIRE_ALL, catch_up_window_seconds=300)
    # WHEN
    plan = ten_minute_outage(misfire)
    # THEN
    assert plan.fire == minutes(5, 6, 7, 8)
    assert plan.skipped == minutes(0, 1, 2, 3, 4)
    assert (plan.resume_after, plan.missed) == (T0 + 8 * MINUTE, 9)


def test_given_fire_all_with_a_cap_then_the_latest_missed_fires_run() -> None:
    misfire = policies.Misfire(policy=MisfirePolicy.FIRE_ALL, catch_up_max=3)
    plan = ten_minute_outage(misfire)
    assert plan.fire == minutes(6, 7, 8)
    assert plan.skipped == minutes(0, 1, 2, 3, 4, 5)


def test_given_fire_all_with_a_cap_of_zero_then_nothing_runs_and_all_is_skipped() -> None:
    misfire = policies.Misfire(policy=MisfirePolicy.FIRE_ALL, catch_up_max=0)
    plan = ten_minute_outage(misfire)
    assert plan.fire == ()
    assert plan.skipped == minutes(*range(9))


def test_given_fire_all_and_an_outage_older_than_the_window_then_nothing_runs() -> None:
    # GIVEN the window is 60 s; the newest missed fire (T0+8 min) is 120 s old
    misfire = policies.Misfire(policy=MisfirePolicy.FIRE_ALL, catch_up_window_seconds=60)
    plan = ten_minute_outage(misfire)
    assert plan.fire == ()
    assert plan.missed == 9


# --- a per-second schedule down for an hour -----------------------------------------------
# Fires T0 .. T0+3599 s passed; the last 60 s are inside the grace, so 3,540 are missed.


@pytest.mark.parametrize(
    ("misfire", "fired"),
    [
        (policies.Misfire(policy=MisfirePolicy.SKIP), 0),
        (policies.Misfire(policy=MisfirePolicy.FIRE_ONCE), 1),
        (policies.Misfire(policy=MisfirePolicy.FIRE_ALL), 10),
    ],
    ids=["skip", "fire_once", "fire_all"],
)
def test_given_a_per_second_cron_down_for_an_hour_then_every_missed_fire_is_counted(
    misfire: policies.Misfire, fired: int
) -> None:
    # WHEN
    plan = policies.plan_misfires(EVERY_SECOND, misfire, T0, T0 + timedelta(hours=1))
    # THEN the latest `fired` run, the 100 before them get a row each, the rest are one count
    last = 3539
    assert plan.missed == 3540
    assert plan.fire == tuple(T0 + n * SECOND for n in range(last - fired + 1, last + 1))
    listed_from = last - fired - 99
    assert plan.skipped == tuple(T0 + n * SECOND for n in range(listed_from, last - fired + 1))
    assert plan.skipped_summary == policies.SkippedSummary(
        count=listed_from, first=T0, last=T0 + (listed_from - 1) * SECOND
    )
    assert plan.resume_after == T0 + last * SECOND


# --- the accounting, for any outage -------------------------------------------------------


@given(
    period=st.sampled_from([1, 2, 5, 10, 30, 60]),
    fires_passed=st.integers(min_value=0, max_value=400),
    grace=st.integers(min_value=0, max_value=120),
    policy=st.sampled_from(MisfirePolicy),
    window=st.integers(min_value=0, max_value=3_600),
    catch_up_max=st.integers(min_value=0, max_value=30),
    record_cap=st.integers(min_value=0, max_value=40),
)
def test_given_any_outage_then_each_missed_fire_is_fired_listed_or_counted_exactly_once(
    period: int,
    fires_passed: int,
    grace: int,
    policy: MisfirePolicy,
    window: int,
    catch_up_max: int,
    record_cap: int,
) -> None:
    # GIVEN a rate schedule due at T0 and `now` some fires later
    every = timedelta(seconds=period)
    now = T0 + fires_passed * every
    misfire = policies.Misfire(
        policy=policy,
        grace_seconds=grace,
        catch_up_window_seconds=window,
        catch_up_max=catch_up_max,
    )
    cutoff = now - timedelta(seconds=grace)
    missed = [T0 + n * every for n in range(fires_passed + 1) if T0 + n * every < cutoff]
    if policy is MisfirePolicy.SKIP or not missed:
        expected_fire = []
    elif policy is MisfirePolicy.FIRE_ONCE:
        expected_fire = missed[-1:]
    else:
        in_window = [f for f in missed if f >= now - timedelta(seconds=window)]
        expected_fire = in_window[max(0, len(in_window) - catch_up_max) :]
    expected_skipped = [f for f in missed if f not in expected_fire]
    listed = expected_skipped[max(0, len(expected_skipped) - record_cap) :]
    counted = expected_skipped[: len(expected_skipped) - len(listed)]
    # WHEN
    plan = policies.plan_misfires(
        timing(f"rate({period} seconds)"), misfire, T0, now, record_cap=record_cap
    )
    # THEN
    assert plan.missed == len(missed)
    assert list(plan.fire) == expected_fire
    assert list(plan.skipped) == listed
    if counted:
        assert plan.skipped_summary == policies.SkippedSummary(
            count=len(counted), first=counted[0], last=counted[-1]
        )
    else:
        assert plan.skipped_summary is None
    assert plan.resume_after == (missed[-1] if missed else None)


def test_given_an_outage_longer_than_the_scan_limit_then_the_oldest_are_skipped_in_a_chunk() -> (
    None
):
    # GIVEN a per-second rate down for 1,000 s but a scan limit of 300 fires
    misfire = policies.Misfire(policy=MisfirePolicy.SKIP, grace_seconds=0)
    now = T0 + timedelta(seconds=1_000)
    # WHEN
    plan = policies.plan_misfires(
        timing("rate(1 second)"), misfire, T0, now, record_cap=10, scan_limit=300
    )
    # THEN the 300 oldest are counted exactly, nothing runs, and the schedule resumes right
    # after them (still due: the next plan takes the next chunk)
    assert plan.complete is False
    assert plan.fire == () and plan.skipped == ()
    assert plan.skipped_summary == policies.SkippedSummary(300, T0, T0 + 299 * SECOND)
    assert plan.resume_after == T0 + 299 * SECOND


def chunked_catch_up(
    spec: str, misfire: policies.Misfire, due: datetime, now: datetime, scan_limit: int
) -> tuple[list[policies.MisfirePlan], int]:
    """Plan chunk after chunk, as successive ticks do, until a plan is complete; also
    return the most fires any one plan looked at."""
    plans: list[policies.MisfirePlan] = []
    looked_at = 0
    original = schedule.next_fire
    calls = 0

    def counted(*args: object, **kwargs: object) -> datetime | None:
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)  # type: ignore[arg-type]

    schedule.next_fire = counted  # type: ignore[assignment]
    try:
        while True:
            calls = 0
            plan = policies.plan_misfires(timing(spec), misfire, due, now, scan_limit=scan_limit)
            looked_at = max(looked_at, calls)
            plans.append(plan)
            if plan.complete:
                return plans, looked_at
            assert plan.resume_after is not None
            found = schedule.next_fire(timing(spec), plan.resume_after)
            assert found is not None
            due = found
    finally:
        schedule.next_fire = original  # type: ignore[assignment]


@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_given_a_two_second_cron_paused_three_days_then_each_plan_is_bounded_and_exact(
    policy: MisfirePolicy,
) -> None:
    # GIVEN cron(*/2 * * * * *) last due three days ago: 129,600 fires passed, the last 30
    # inside the 60 s grace
    misfire = policies.Misfire(policy=policy, catch_up_max=10)
    now = T0 + timedelta(days=3)
    total = 3 * 86_400 // 2 - 30
    # WHEN successive ticks plan it until the plan is complete
    plans, looked_at = chunked_catch_up("*/2 * * * * *", misfire, T0, now, scan_limit=5_000)
    # THEN no plan looks at more than the scan limit (plus the one fire that says "more")
    assert looked_at <= 5_001
    # AND every missed fire is run, listed or counted exactly once, in order, with no gap
    covered: list[tuple[datetime, datetime, int]] = []
    for plan in plans:
        if plan.skipped_summary is not None:
            s = plan.skipped_summary
            covered.append((s.first, s.last, s.count))
        covered += [(f, f, 1) for f in (*plan.skipped, *plan.fire)]
    covered.sort()
    assert sum(count for _, _, count in covered) == total
    for (_, last, _), (first, _, _) in itertools.pairwise(covered):
        assert first == last + 2 * SECOND
    assert covered[0][0] == T0 and covered[-1][1] == T0 + (total - 1) * 2 * SECOND
    # AND the runs are the policy's choice among the latest fires
    final = plans[-1]
    latest = T0 + (total - 1) * 2 * SECOND
    expected = {
        MisfirePolicy.SKIP: (),
        MisfirePolicy.FIRE_ONCE: (latest,),
        MisfirePolicy.FIRE_ALL: tuple(latest - n * 2 * SECOND for n in reversed(range(10))),
    }[policy]
    assert final.fire == expected
    assert all(p.fire == () for p in plans[:-1])


# --- overlap ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "unfinished", "buffered", "decision"),
    [
        (OverlapPolicy.ALLOW, 0, 0, OverlapDecision.RUN),
        (OverlapPolicy.ALLOW, 1, 0, OverlapDecision.RUN),
        (OverlapPolicy.ALLOW, 5, 3, OverlapDecision.RUN),
        (OverlapPolicy.FORBID, 0, 0, OverlapDecision.RUN),
        (OverlapPolicy.FORBID, 1, 0, OverlapDecision.SKIP),
        (OverlapPolicy.FORBID, 3, 1, OverlapDecision.SKIP),
        (OverlapPolicy.BUFFER_ONE, 0, 0, OverlapDecision.RUN),
        (OverlapPolicy.BUFFER_ONE, 1, 0, OverlapDecision.BUFFER),
        (OverlapPolicy.BUFFER_ONE, 1, 1, OverlapDecision.SKIP),
        (OverlapPolicy.BUFFER_ONE, 2, 1, OverlapDecision.SKIP),
    ],
)
def test_given_unfinished_and_buffered_runs_then_the_policy_decides_the_new_fire(
    policy: OverlapPolicy, unfinished: int, buffered: int, decision: OverlapDecision
) -> None:
    assert policies.decide_overlap(policy, unfinished, buffered) is decision
