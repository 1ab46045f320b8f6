"""A slot is never left blocking a run that is not running (moto, faults on the client).

A forbid schedule's run slot and a tenant's slots are taken before the run and given back
after it. One throttled call on the way (the read of the tenant's slots, a give-back) must
not leave the schedule's next fire skipped as "overlap", nor the tenant's next run
deferred, while nothing runs. Faults come from helpers.faults on the DynamoDB client:
the call is refused by the service, as a throttled call is after the client's retries.
"""

from __future__ import annotations

from typing import Any

import pytest

from fireline.domain import errors, occurrence, policies, quota, retry
from fireline.services import targets
from fireline.services.schedules import JobDraft, ScheduleDraft
from fireline.services.worker import Result, Worker
from helpers.faults import FaultPlan
from helpers.system import System

REMAINING = 60_000
EVERY = 10  # seconds between the schedule's fires


def remaining() -> int:
    return REMAINING


def forbid_schedule(system: System, handler: str = "noop") -> str:
    item = system.service.create(
        "tenant-a",
        ScheduleDraft(
            spec=f"rate({EVERY} seconds)",
            target={"type": "python", "handler": handler},
            overlap=policies.OverlapPolicy.FORBID,
        ),
    )
    return item.schedule_id


def next_fire(system: System, tk: Any, seen: set[str]) -> dict[str, Any]:
    """The schedule's next fire's message, ticking one second at a time until it comes."""
    for _ in range(3 * EVERY):
        tk.tick()
        fresh = [m.body for m in system.receive() if m.body["occurrence_key"] not in seen]
        if fresh:
            (body,) = fresh
            seen.add(body["occurrence_key"])
            return body
        system.clock.advance(1)
    raise AssertionError("no fire")


def run_slot_holder(system: System, schedule_id: str) -> str | None:
    now_ms = int(system.clock.now().timestamp() * 1000)
    held, _ = system.slots.held(quota.overlap_scope("tenant-a", schedule_id))
    return quota.holder_of(held, quota.RUN_SLOT, now_ms)


def faulted(system: System, operation: str, at: int) -> FaultPlan:
    """A plan that throttles the ``at``-th call of ``operation`` on the DynamoDB client."""
    plan = FaultPlan(at={at: "throttle"}, only={operation})
    plan.attach(system.ddb)
    return plan


def test_a_throttled_read_of_the_tenants_slots_leaves_no_run_slot_behind(
    system: System,
) -> None:
    # GIVEN a forbid schedule every 10 s, and a worker for a limited tenant
    schedule_id = forbid_schedule(system)
    tk, worker, seen = system.ticker(use_lease=False), system.worker(), set[str]()
    first = next_fire(system, tk, seen)
    # WHEN its first fire's delivery meets a throttled read of the tenant's slots (the
    # second Query on the slots table: the first reads the schedule's overlap slots)
    plan = faulted(system, "Query", at=1)
    with pytest.raises(errors.Unavailable):
        worker.handle(first, remaining_ms=remaining)
    assert plan.fired["throttle"] == 1
    # THEN the run slot it took is given back: nothing holds it
    assert run_slot_holder(system, schedule_id) is None
    # AND the next fire, 10 s later, runs: nothing was running
    system.clock.advance(1)
    second = next_fire(system, tk, seen)
    assert worker.handle(second, remaining_ms=remaining) is Result.SUCCEEDED
    # AND the first fire, delivered again by SQS, runs too (never skipped as overlap)
    assert worker.handle(first, remaining_ms=remaining) is Result.SUCCEEDED
    states = {
        k: system.occurrences.get(k).state
        for k in (first["occurrence_key"], second["occurrence_key"])
    }
    assert set(states.values()) == {occurrence.State.SUCCEEDED}
    print(
        f"\none throttled read of the tenant's slots: {plan.fired['throttle']} fault, "
        "the next fire 10 s later succeeded, 0 fires skipped as overlap"
    )


def test_a_throttled_give_back_of_the_run_slot_does_not_skip_the_next_fire(
    system: System,
) -> None:
    # GIVEN a forbid schedule every 10 s whose job succeeds
    schedule_id = forbid_schedule(system)
    tk, worker, seen = system.ticker(use_lease=False), system.worker(), set[str]()
    first = next_fire(system, tk, seen)
    # WHEN the give-back of its run slot (the run's one DeleteItem: a finished run leaves
    # its tenant slot to be handed on) is throttled
    plan = faulted(system, "DeleteItem", at=0)
    result = worker.handle(first, remaining_ms=remaining)
    assert plan.fired["throttle"] == 1
    # THEN the run's outcome stands (the message is done, not failed for a give-back)
    assert result is Result.SUCCEEDED
    assert run_slot_holder(system, schedule_id) == first["occurrence_key"]
    # AND the next fire, 10 s later, runs: the slot's holder has ended for good
    system.clock.advance(1)
    second = next_fire(system, tk, seen)
    assert worker.handle(second, remaining_ms=remaining) is Result.SUCCEEDED
    row = system.occurrences.get(second["occurrence_key"])
    assert row.state is occurrence.State.SUCCEEDED
    assert run_slot_holder(system, schedule_id) is None
    print(
        f"\none throttled give-back of the run slot: {plan.fired['throttle']} fault, the run "
        "succeeded and the next fire 10 s later succeeded, 0 fires skipped as overlap"
    )


def test_a_failed_run_whose_tenant_slot_give_back_is_throttled_still_gives_its_run_slot_and_retries(
    system: System,
) -> None:
    def fails(context: targets.JobContext) -> None:
        raise targets.TargetFailed("no")

    system.registry.register("fails")(fails)
    # GIVEN a forbid schedule every 10 s whose job fails (a retry follows)
    schedule_id = forbid_schedule(system, "fails")
    tk, worker, seen = system.ticker(use_lease=False), system.worker(), set[str]()
    first = next_fire(system, tk, seen)
    # WHEN the give-back of its tenant slot (the first DeleteItem) is throttled
    plan = faulted(system, "DeleteItem", at=0)
    result = worker.handle(first, remaining_ms=remaining)
    assert plan.fired["throttle"] == 1
    # THEN the attempt's outcome stands and its retry is sent
    assert result is Result.RETRYING
    assert system.occurrences.get(first["occurrence_key"]).state is occurrence.State.FAILED
    assert system.log.sent[first["occurrence_key"]] == 2  # the ticker's, and the retry
    # AND the run slot was given back all the same
    assert run_slot_holder(system, schedule_id) is None
    print(
        f"\none throttled give-back of the tenant slot after a failed run: "
        f"{plan.fired['throttle']} fault, the run slot given back, "
        f"{system.log.sent[first['occurrence_key']] - 1} retry sent"
    )


def held_by_a_queued_fire(
    system: System, taken_seconds_ago: float
) -> tuple[Worker, dict[str, Any], str, str]:
    """A forbid schedule whose run slot its first fire took ``taken_seconds_ago`` before
    its second fire's time, the first fire's row queued (taken before its claim, as every
    run takes it): the worker, the second fire's message, the first's key, the schedule."""
    schedule_id = forbid_schedule(system)
    tk, worker, seen = system.ticker(use_lease=False), system.worker(), set[str]()
    first = next_fire(system, tk, seen)
    system.occurrences.put_new(
        occurrence.new(
            tenant_id="tenant-a",
            schedule_id=schedule_id,
            version=1,
            fire_time=occurrence.parse_key(first["occurrence_key"]).fire_time,
            job_class="default",
            created_at=system.clock.now(),
        )
    )
    second = next_fire(system, tk, seen)
    due = occurrence.parse_key(second["occurrence_key"]).fire_time
    system.clock.advance(max(0.0, (due - system.clock.now()).total_seconds()))
    taken_ms = int(system.clock.now().timestamp() * 1000) - int(taken_seconds_ago * 1000)
    assert system.slots.take(
        quota.overlap_scope("tenant-a", schedule_id),
        quota.RUN_SLOT,
        first["occurrence_key"],
        now_ms=taken_ms,
        expires_at_ms=taken_ms + 160_000,  # the default class's deadline and margin
    )
    return worker, second, first["occurrence_key"], schedule_id


def test_a_run_slot_held_by_a_fire_about_to_run_still_skips_the_next(system: System) -> None:
    # GIVEN a forbid schedule whose run slot a fire with a queued row took a second ago
    worker, second, first_key, schedule_id = held_by_a_queued_fire(system, 1)
    # WHEN the next fire is handled
    # THEN it is skipped: a holder that took the slot that recently may be about to run
    assert worker.handle(second, remaining_ms=remaining) is Result.SKIPPED
    assert run_slot_holder(system, schedule_id) == first_key


def test_a_run_slot_held_past_the_claim_window_by_a_fire_not_running_is_taken_over(
    system: System,
) -> None:
    # GIVEN a forbid schedule whose run slot a fire with a queued row took 10 s ago: its
    # invocation died between the take and the claim
    worker, second, _, schedule_id = held_by_a_queued_fire(system, 10)
    # WHEN the next fire is handled
    # THEN it runs, having taken the slot over: nothing of its schedule was running
    assert worker.handle(second, remaining_ms=remaining) is Result.SUCCEEDED
    assert run_slot_holder(system, schedule_id) in (second["occurrence_key"], None)


def test_a_retry_whose_failed_attempt_kept_its_tenant_slot_runs_at_its_backoff(
    system: System,
) -> None:
    calls: list[int] = []

    def fails_once(context: targets.JobContext) -> None:
        calls.append(context.attempt)
        if context.attempt == 1:
            raise targets.TargetFailed("first attempt fails")

    system.registry.register("fails-once")(fails_once)
    # GIVEN a job whose first attempt fails, and whose tenant slot's give-back is
    # throttled (the slot stays with the occurrence, for the deadline and a minute)
    view = system.service.create_job(
        "tenant-a",
        JobDraft(
            delay_seconds=0,
            target={"type": "python", "handler": "fails-once"},
            retry=retry.RetryPolicy(max_attempts=3, base_seconds=1, cap_seconds=1),
        ),
    )
    worker = system.worker()
    (first,) = system.receive()
    plan = faulted(system, "DeleteItem", at=0)
    assert worker.handle(first.body, remaining_ms=remaining) is Result.RETRYING
    assert plan.fired["throttle"] == 1
    key = first.body["occurrence_key"]
    held, _ = system.slots.held("tenant-a")
    assert [s.holder for s in held] == [key]
    # WHEN its retry arrives after its backoff
    system.clock.advance(2)
    (again,) = [m for m in system.receive() if m.body["occurrence_key"] == key]
    result = worker.handle(again.body, remaining_ms=remaining)
    # THEN it runs now, on the slot it held (not deferred until that slot expires)
    assert result is Result.SUCCEEDED
    assert calls == [1, 2]
    assert system.occurrences.get(key).state is occurrence.State.SUCCEEDED
    assert view.job.schedule_id in key
