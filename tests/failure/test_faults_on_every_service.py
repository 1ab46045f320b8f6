"""Story: one call in ten fails, on every service: DynamoDB, SQS and S3.

Through the fault layer on the boto3 clients (helpers.faults): a call refused before it
is sent (a connection error), a call throttled, or a call that took effect and whose answer
was lost (a read timeout). The ticker, the workers and the workflow controller run for a
minute of schedules and a workflow run under it, each failed invocation or record left to
what AWS does (the next tick, SQS's redelivery, the reconcile every minute). Then the
faults stop and the system settles. Nothing may be lost, run twice in effect, or left open.
"""

from __future__ import annotations

import contextlib
import itertools
from datetime import datetime, timedelta

from fireline.domain import errors, occurrence, policies, schedule, workflow
from fireline.services.schedules import ScheduleDraft
from helpers.faults import FaultPlan
from helpers.flows import DIAMOND, node
from helpers.system import moto_flow

RATES = {"before": 0.04, "throttle": 0.03, "after": 0.03}
SECONDS = 60
# Idle steps of a minute each before the system counts as settled: past the longest
# visibility timeout (the WorkflowQueue's 30 minutes), so every failed record came back.
SETTLED_AFTER = 32


def test_one_call_in_ten_failing_on_every_service_loses_nothing_and_doubles_nothing() -> None:
    with moto_flow() as (system, flow):
        # GIVEN five schedules every 10 s that run every missed fire, the diamond workflow,
        # and a fault plan on every client (off while they are registered)
        plan = FaultPlan(seed=10, rates=RATES)
        # SQS carries few calls in this minute (about a send per tick), too few for the
        # rates alone to reach it: its own plan puts each kind of fault on its first three
        # calls, then faults it at the same rates.
        sqs_plan = FaultPlan(seed=10, rates=RATES, at={0: "after", 1: "before", 2: "throttle"})
        numbers = itertools.count(1)
        system.service.ids = lambda prefix: f"{prefix}_{next(numbers):04d}"  # the same each run
        plan.enabled = sqs_plan.enabled = False
        for client in (system.ddb, flow.documents._client):  # type: ignore[attr-defined]
            plan.attach(client)
        sqs_plan.attach(system.sqs_client)
        names, edges = DIAMOND
        flow.register([node(n) for n in names], edges)
        every_fire = policies.Misfire(
            policy=policies.MisfirePolicy.FIRE_ALL,
            catch_up_max=policies.MAX_CATCH_UP,
            catch_up_window_seconds=3600,
        )
        made = [
            system.service.create(
                "tenant-a",
                ScheduleDraft(
                    "rate(10 seconds)",
                    target={"type": "python", "handler": "ledger"},
                    payload={"node": f"schedule-{n}"},
                    misfire=every_fire,
                ),
            )
            for n in range(5)
        ]
        # A tick every 5 s with 10 s of lookahead: every fire is sent before its time, at a
        # fifth of the calls of a tick a second (moto's calls are the cost of this test).
        ticker = system.ticker(
            tick_seconds=5, lookahead_seconds=10, horizon_seconds=30, stop_before_end_ms=0
        )

        def deliver() -> None:
            """One delivery pass over every queue, after each tick. A failed record (the
            handler reports it, whatever it raised) comes back after its visibility timeout."""
            with contextlib.suppress(Exception):
                flow.step()

        ticker.after_tick = deliver

        def invocations(until: datetime) -> None:
            """Ticker invocations of 20 s each until ``until``; one that failed or could not
            get the lease is followed by the next, a second later."""
            while system.clock.now() < until:
                end = system.clock.monotonic() + 20
                with contextlib.suppress(errors.FirelineError):
                    ticker.run(lambda end=end: int((end - system.clock.monotonic()) * 1000))
                deliver()
                system.clock.advance(1)

        # WHEN the workflow is started (the client retrying until it is answered), and a
        # minute passes, with the faults on
        plan.enabled = sqs_plan.enabled = True
        run_id = None
        while run_id is None:
            with contextlib.suppress(errors.Unavailable):
                run_id = flow.service.start("tenant-a", "wf", run_id="r-faults").run_id
            system.clock.advance(1)
        end = system.clock.now() + timedelta(seconds=SECONDS)
        invocations(end)
        # AND the faults stop, and the system settles (reconciling every minute)
        plan.enabled = sqs_plan.enabled = False
        invocations(system.clock.now() + timedelta(seconds=6))
        idle = 0
        while idle < SETTLED_AFTER:
            if flow.step():
                idle = 0
                continue
            idle += 1
            flow.controller.reconcile_active()
            system.clock.advance(60)
        # THEN faults of every kind fired, on DynamoDB's and SQS's calls alike
        assert all(plan.fired[kind] > 0 and sqs_plan.fired[kind] > 0 for kind in RATES)
        faulted = {op.split(":")[0] for op in [*plan.by_operation, *sqs_plan.by_operation]}
        assert {"Query", "UpdateItem", "SendMessageBatch"} <= faulted, faulted
        # AND every fire of every schedule up to the end of the faults ran, once in effect
        checked = 0
        for item in made:
            rows = {
                r.key: r
                for r in system.occurrences.history("tenant-a", item.schedule_id, limit=100).items
            }
            assert all(r.state in occurrence.SETTLED for r in rows.values())
            for fire in schedule.fires(
                item.timing, item.next_fire - timedelta(seconds=1), until=end
            ):
                key = occurrence.occurrence_key(item.schedule_id, item.version, fire)
                assert rows[key].state is occurrence.State.SUCCEEDED, key
                assert key in flow.ledger.seen_keys
                checked += 1
            assert flow.ledger.effects[f"schedule-{made.index(item)}"] == len(rows)
        # AND the workflow run succeeded with each node's effect once
        assert run_id is not None
        ended = flow.store.get_run(run_id)
        assert ended is not None and ended.state is workflow.RunState.SUCCEEDED
        assert [flow.ledger.effects[n] for n in names] == [1, 1, 1, 1]
        kinds = ", ".join(f"{k} {plan.fired[k] + sqs_plan.fired[k]}" for k in RATES)
        print(
            f"\n{plan.calls + sqs_plan.calls} calls under faults, faults fired: {kinds}; "
            f"{checked} fires ran once each; workflow run {ended.state.value}"
        )
