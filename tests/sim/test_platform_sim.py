"""The platform's rules in the latency model, one test each: the account's concurrency, the
event source mapping's scaling, batching window and payload limit, a new environment's
cold start, a Python attempt's fork, a remote target's duration, tenant limits as
deployed, and the settings read from the template. Deterministic (no measured CPU).
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fireline.domain import occurrence, quota
from fireline.services import dispatch
from fireline.sim import deployment, lambdas
from fireline.sim import entry as sim_entry
from fireline.sim import network as sim_network
from fireline.sim import platform as sim_platform
from fireline.sim import world as sim_world
from helpers import aws

START = datetime(2026, 5, 1, 11, 59, 0, tzinfo=UTC)
DUE = START + timedelta(seconds=10)


@pytest.fixture
def world() -> Iterator[sim_world.World]:
    made = sim_world.World(start=START, sdk=sim_network.SdkCost(default=0.001))
    yield made
    made.close()


def http_jobs(
    world: sim_world.World, count: int, due: datetime = DUE, **fields: Any
) -> tuple[list[str], sim_world.SimTargets]:
    """``count`` HTTP jobs due at ``due`` on the queue, and the runner that answers them
    (one second each, no tail)."""
    items = sim_world.one_off(count, due, **fields)
    world.add(items)
    keys = sim_world.enqueue(world, [(item, due) for item in items])
    runner = sim_world.SimTargets(
        world.kernel,
        durations=sim_network.TargetDuration((1.0,), (1.0,), tail_p99=1.0),
        **sim_world.runner_args(sim_world.Jobs(world.kernel)),
    )
    return keys, runner


def fleet(
    world: sim_world.World, runner: Any, *, tenant_limit: int = 0, **fields: Any
) -> lambdas.WorkerFleet:
    jobs = sim_world.Jobs(world.kernel)
    settings = {"measure_cpu": False, **fields}
    return lambdas.WorkerFleet(
        world.kernel,
        world.queue,
        sim_world.next_visible(world),
        lambda: sim_world.worker_for(world, jobs, runner=runner, tenant_limit=tenant_limit),
        **settings,
    )


# --- the account ---------------------------------------------------------------------------


def test_the_account_limit_is_shared_by_every_function_and_throttles_past_it() -> None:
    # GIVEN an account of 1,000 with 10 reserved for the ticker
    account = sim_platform.Account(reserved={"ticker": 10})
    # WHEN two worker functions ask for 600 invocations each, and the ticker for 12
    started = [account.try_start(f) for f in ("worker-default", "worker-short") for _ in range(600)]
    tickers = [account.try_start("ticker") for _ in range(12)]
    # THEN the workers share the 990 unreserved, the ticker its 10, the rest throttled
    assert sum(started) == 990 and account.throttled == {"worker-short": 210, "ticker": 2}
    assert sum(tickers) == 10
    # AND a finished invocation frees its room for any unreserved function
    account.finish("worker-default")
    assert account.try_start("worker-short") and not account.try_start("worker-default")


def test_reservations_must_leave_a_hundred_unreserved() -> None:
    with pytest.raises(ValueError, match="unreserved"):
        sim_platform.Account(limit=1_000, reserved={"ticker": 901})


def test_a_fleet_over_the_account_limit_runs_no_more_than_it(world: sim_world.World) -> None:
    # GIVEN an account of 120 (20 reserved elsewhere) and a mapping allowed 200 at once
    keys, runner = http_jobs(world, 400)
    account = sim_platform.Account(limit=120, reserved={"ticker": 20})
    workers = fleet(world, runner, max_concurrency=200, provisioned=True, batch_size=1)
    workers.account = account
    workers.start()
    # WHEN the 400 one-second jobs come due at once
    world.kernel.run(60)
    # THEN never more than the 100 unreserved ran at once, the rest were throttled and
    # came back, and every job ran once
    assert account.peak_unreserved == 100
    assert account.throttled["worker-default"] > 0
    assert sorted(runner.started) == sorted(keys)
    assert set(runner.runs.values()) == {1}


# --- the event source mapping's scaling -------------------------------------------------------


def test_standard_mode_starts_at_five_and_adds_300_a_minute_while_messages_wait() -> None:
    # GIVEN a standard mapping with MaximumConcurrency 1,000
    scaling = sim_platform.Scaling(1_000)
    assert scaling.allowed() == 5
    # WHEN messages wait every second for a minute with every allowed invoke busy
    for second in range(61):
        scaling.observe(float(second), busy=scaling.allowed(), waiting=True)
    # THEN it allows 300 more, and no more than its maximum however long it goes on
    assert scaling.allowed() == 305
    for second in range(61, 400):
        scaling.observe(float(second), busy=scaling.allowed(), waiting=True)
    assert scaling.allowed() == 1_000


def test_standard_mode_ramps_while_messages_wait_though_new_invokes_are_still_gathering() -> None:
    # GIVEN a standard mapping whose newest invokes are still gathering their batch (not
    # busy yet) each time the mapping looks, while messages wait on the queue
    scaling = sim_platform.Scaling(1_000)
    for second in range(31):
        scaling.observe(float(second), busy=max(0, scaling.allowed() - 5), waiting=True)
    # THEN it still adds 5 a second, as AWS's "while messages are still available" says
    assert scaling.allowed() == 155
    # AND with nothing waiting it does not rise, however few are busy
    scaling.observe(31.0, busy=0, waiting=False)
    assert scaling.allowed() == 155


def test_standard_mode_scales_in_after_a_quiet_minute_and_not_while_busy() -> None:
    scaling = sim_platform.Scaling(50)
    scaling.level = 50.0
    # GIVEN 50 allowed; WHEN 10 are busy and nothing waits for a minute
    for second in range(59):
        scaling.observe(float(second), busy=10, waiting=False)
    assert scaling.allowed() == 50
    scaling.observe(60.0, busy=10, waiting=False)
    # THEN it falls back to what is busy
    assert scaling.allowed() == 10


def test_provisioned_mode_keeps_its_minimum_ready_and_ramps_three_times_faster() -> None:
    # GIVEN provisioned mode with 20 minimum pollers, up to 5,000 invokes
    scaling = sim_platform.Scaling(5_000, provisioned=True, minimum_pollers=20)
    # THEN 200 invokes are ready before any message
    assert scaling.allowed() == 200
    # WHEN messages wait for a minute with every invoke busy: 1,000 more
    for second in range(61):
        scaling.observe(float(second), busy=scaling.allowed(), waiting=True)
    assert scaling.allowed() == 1_200


def test_a_burst_on_a_standard_mapping_starts_no_faster_than_its_ramp(
    world: sim_world.World,
) -> None:
    # GIVEN 300 one-second jobs due at once, a standard mapping of batches of one
    _, runner = http_jobs(world, 300)
    workers = fleet(world, runner, max_concurrency=200, batch_size=1)
    workers.start(at=world.seconds(DUE))
    world.kernel.run(world.seconds(DUE) + 120)
    # THEN within each second of the burst, the jobs started are at most what the ramp
    # allowed (5, then 5 more each second) and every job ran once
    assert set(runner.runs.values()) == {1} and len(runner.runs) == 300
    per_second: dict[int, int] = {}
    for at in runner.started.values():
        second = int(at - world.seconds(DUE))
        per_second[second] = per_second.get(second, 0) + 1
    for second, started in per_second.items():
        assert started <= 5 + 5 * (second + 1), (second, started)
    assert max(runner.started.values()) - world.seconds(DUE) > 5


# --- batching ----------------------------------------------------------------------------------


def test_a_batch_over_ten_needs_a_batching_window(world: sim_world.World) -> None:
    with pytest.raises(ValueError, match="batching_window"):
        fleet(world, None, batch_size=100, batching_window=0)
    with pytest.raises(ValueError, match="batch_size"):
        fleet(world, None, batch_size=10_001, batching_window=1)


def test_a_batching_window_gathers_what_comes_within_it(world: sim_world.World) -> None:
    # GIVEN 60 jobs due over three quarters of a second (20 at each of 0, 0.25, 0.5 s
    # past DUE, already on the queue), a batch size of 100 and a 1 s window
    items = sim_world.one_off(60, DUE)
    world.add(items)
    for n in range(3):
        world.kernel.run(world.seconds(DUE) - 1 + 0.25 * n)
        sim_world.enqueue(world, [(i, DUE) for i in items[20 * n : 20 * n + 20]])
    _, runner = http_jobs(world, 0)
    workers = fleet(world, runner, max_concurrency=1, batch_size=100, batching_window=1.0)
    workers.start(at=world.kernel.now())
    world.kernel.run(world.seconds(DUE) + 30)
    # THEN one invocation took all 60 (a batch without a window would take ten)
    assert workers.batch_sizes == [60]
    assert len(runner.runs) == 60


def test_a_batch_never_passes_the_payload_limit(
    world: sim_world.World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a payload limit that holds 7 records of these jobs (the real 6 MB, scaled
    # down to the jobs' size) and a batch size of 50 with a window
    keys, runner = http_jobs(world, 50)
    size = lambdas.record_bytes(dispatch.fire_message(sim_world.one_off(1, DUE)[0], DUE))
    monkeypatch.setattr(lambdas, "PAYLOAD_LIMIT_BYTES", 7 * size + size // 2)
    workers = fleet(world, runner, max_concurrency=1, batch_size=50, batching_window=1.0)
    workers.start(at=world.seconds(DUE) - 1)
    world.kernel.run(world.seconds(DUE) + 60)
    # THEN no invocation got more than 7, the records over the limit started the next
    # batch (not lost), and every job ran once
    assert max(workers.batch_sizes) == 7
    assert workers.spilled_over_payload > 0
    assert sorted(runner.started) == sorted(keys) and set(runner.runs.values()) == {1}


# --- the invocation --------------------------------------------------------------------------


def test_a_new_environment_pays_its_import_before_its_first_record(
    world: sim_world.World,
) -> None:
    # GIVEN two batches due a minute apart, on one invocation at a time whose new
    # environment imports for 0.1 s of this machine's CPU (0.35 s at 512 MB)
    first, runner = http_jobs(world, 10)
    later = sim_world.one_off(10, DUE + timedelta(seconds=60), prefix="later")
    world.add(later)
    second = sim_world.enqueue(world, [(i, DUE + timedelta(seconds=60)) for i in later])
    workers = fleet(world, runner, max_concurrency=1, provisioned=True, memory_mb=512)
    workers.containers = sim_platform.Containers(init_cpu_seconds=0.1)
    workers.start()
    world.kernel.run(world.seconds(DUE) + 90)
    # THEN one cold start: the first batch started after its import, the second, warm,
    # within the SDK's calls of its time
    assert workers.containers.cold_starts == 1 and workers.invocations == 2
    init = 0.1 / lambdas.cpu_share(512)
    first_lag = min(runner.started[k] for k in first) - world.seconds(DUE)
    second_lag = min(runner.started[k] for k in second) - world.seconds(DUE) - 60
    assert first_lag >= init > second_lag


def test_each_python_attempt_pays_its_fork_on_the_invocations_cpu(
    world: sim_world.World,
) -> None:
    # GIVEN ten no-op Python jobs in one batch, each attempt forking for 10 ms of this
    # machine's CPU on a full vCPU
    items = sim_world.one_off(10, DUE, target={"type": "python", "handler": "sim.work"})
    world.add(items)
    keys = sim_world.enqueue(world, [(i, DUE) for i in items])
    jobs = sim_world.Jobs(world.kernel, seconds=0.0)
    runner = sim_world.SimTargets(
        world.kernel,
        **sim_world.runner_args(jobs, lambdas.forking(0.010, world.kernel)),
    )
    workers = fleet(world, runner, max_concurrency=1, provisioned=True, memory_mb=1769)
    workers.start()
    world.kernel.run(world.seconds(DUE) + 30)
    # THEN the forks queue for the one vCPU: the last job starts at least nine forks
    # after the first
    starts = sorted(jobs.started[k] for k in keys)
    assert len(starts) == 10
    assert starts[-1] - starts[0] >= 9 * 0.010


def test_an_invocations_duration_includes_its_wait_on_targets(world: sim_world.World) -> None:
    # GIVEN a batch of ten one-second HTTP jobs
    _, runner = http_jobs(world, 10)
    workers = fleet(world, runner, max_concurrency=1, provisioned=True)
    workers.start()
    world.kernel.run(world.seconds(DUE) + 30)
    # THEN the invocation lasted the targets' second (side by side) and little more
    assert workers.invocations == 1
    assert 1.0 <= workers.durations[0] < 2.0


def test_the_in_flight_bound_holds_the_rest_of_a_batch_back(world: sim_world.World) -> None:
    # GIVEN a batch of 20 one-second jobs on an invocation with 5 in flight at once
    keys, runner = http_jobs(world, 20)
    workers = fleet(
        world,
        runner,
        max_concurrency=1,
        provisioned=True,
        batch_size=20,
        batching_window=1,
        in_flight=5,
    )
    workers.start()
    world.kernel.run(world.seconds(DUE) + 30)
    # THEN never more than 5 waited on their targets at once, and every record ran once
    assert runner.most_at_once() == 5
    assert sorted(runner.started) == sorted(keys) and set(runner.runs.values()) == {1}


def test_tenant_limits_hold_as_deployed(world: sim_world.World) -> None:
    # GIVEN one tenant's 60 one-second jobs due at once, the deployed tenant limit and
    # class concurrency (read from the template), and room for far more invocations
    settings = deployment.from_template(aws.load_template())
    default = settings.worker()
    keys, runner = http_jobs(world, 60, tenants=1)
    jobs = sim_world.Jobs(world.kernel)
    workers = lambdas.WorkerFleet(
        world.kernel,
        world.queue,
        sim_world.next_visible(world),
        lambda: sim_world.worker_for(
            world,
            jobs,
            runner=runner,
            tenant_limit=settings.tenant_limit,
            class_max_concurrency=default.class_max_concurrency,
        ),
        max_concurrency=20,
        provisioned=True,
        measure_cpu=False,
    )
    workers.start()
    world.kernel.run(world.seconds(DUE) + 120)
    # THEN the tenant never ran more than its limit at once (nearly all of it used: 60
    # records racing for the slots, a record that loses its few takes waits its turn even
    # where a slot is left), and the jobs over it were deferred and ran later, each once
    limit = min(settings.tenant_limit, quota.class_limit(default.class_max_concurrency))
    assert limit - 3 <= runner.most_at_once() <= limit
    assert sorted(runner.started) == sorted(keys) and set(runner.runs.values()) == {1}
    states = {world.memory_occurrences.get(k).state for k in keys}  # type: ignore[union-attr]
    assert states == {occurrence.State.SUCCEEDED}


# --- a remote target's duration ------------------------------------------------------------


def test_a_targets_duration_is_seeded_never_below_its_time_with_a_one_percent_tail() -> None:
    duration = sim_network.TargetDuration((1.0, 3.0), (0.8, 0.2), tail_p99=1.5)
    draws = [duration.draw(random.Random(7)) for _ in range(3)]
    assert len(set(draws)) == 1  # the same seed, the same draw
    rng = random.Random(11)
    many = [duration.draw(rng) for _ in range(20_000)]
    threes = [d for d in many if d >= 3.0]
    assert min(many) >= 1.0
    # About a fifth take three seconds or more; about 1% of each kind past 1.5x its time
    assert 0.18 < len(threes) / len(many) < 0.22
    tail = sum(1 for d in many if (d > 1.5 and d < 3.0) or d > 4.5)
    assert 0.007 < tail / len(many) < 0.013


def test_a_target_duration_refuses_a_tail_that_would_make_it_faster() -> None:
    with pytest.raises(ValueError, match="tail_p99"):
        sim_network.TargetDuration(tail_p99=0.5)


# --- the deployed settings ---------------------------------------------------------------------

TEMPLATE = {
    "Parameters": {
        "WorkerMemorySize": {"Type": "Number", "Default": 1024},
        "TenantConcurrencyLimit": {"Type": "Number", "Default": 40},
        "WorkerInFlight": {"Type": "Number", "Default": 256},
    },
    "Resources": {
        "Queue": {"Type": "AWS::SQS::Queue", "Properties": {"VisibilityTimeout": 600}},
        "Worker": {
            "Type": "AWS::Serverless::Function",
            "Properties": {
                "Handler": "fireline.handlers.worker.handler",
                "MemorySize": {"Ref": "WorkerMemorySize"},
                "Timeout": 100,
                "Environment": {
                    "Variables": {"JOB_CLASS": "default", "CLASS_MAX_CONCURRENCY": "80"}
                },
                "Events": {
                    "Jobs": {
                        "Type": "SQS",
                        "Properties": {
                            "Queue": {"Fn::GetAtt": ["Queue", "Arn"]},
                            "BatchSize": 1000,
                            "MaximumBatchingWindowInSeconds": 1,
                            "ScalingConfig": {"MaximumConcurrency": 80},
                        },
                    }
                },
            },
        },
    },
}


def test_the_settings_come_from_the_templates_defaults_through_refs() -> None:
    settings = deployment.from_template(TEMPLATE)
    worker = settings.worker()
    assert (worker.memory_mb, worker.batch_size, worker.batching_window_seconds) == (1024, 1000, 1)
    assert (worker.max_concurrency, worker.in_flight, worker.class_max_concurrency) == (80, 256, 80)
    assert (worker.timeout_seconds, worker.visibility_timeout) == (100, 600)
    assert settings.tenant_limit == 40


def test_a_setting_the_defaults_do_not_settle_is_an_error_naming_it() -> None:
    broken: dict[str, Any] = {
        **TEMPLATE,
        "Resources": {
            **TEMPLATE["Resources"],
            "Worker": {
                **TEMPLATE["Resources"]["Worker"],
                "Properties": {
                    **TEMPLATE["Resources"]["Worker"]["Properties"],
                    "Timeout": {"Fn::If": ["Big", 900, 100]},
                },
            },
        },
    }
    with pytest.raises(deployment.TemplateError, match=r"Worker\.Timeout"):
        deployment.from_template(broken)


def test_the_real_templates_default_worker_is_what_its_event_source_declares() -> None:
    template = aws.load_template()
    props = template["Resources"]["DefaultWorkerFunction"]["Properties"]
    event = props["Events"]["Jobs"]["Properties"]
    parameters = template["Parameters"]

    def declared(value: Any) -> Any:
        # A literal, or the default of the parameter it refers to
        return parameters[value["Ref"]]["Default"] if isinstance(value, dict) else value

    worker = deployment.from_template(template).worker("default")
    assert worker.batch_size == declared(event["BatchSize"])
    assert worker.batching_window_seconds == declared(event["MaximumBatchingWindowInSeconds"])
    assert worker.max_concurrency == declared(event["ScalingConfig"]["MaximumConcurrency"])
    assert worker.memory_mb == declared(props["MemorySize"])
    assert worker.in_flight == declared(props["Environment"]["Variables"]["WORKER_IN_FLIGHT"])
    assert (
        worker.visibility_timeout
        == (template["Resources"]["DefaultQueue"]["Properties"]["VisibilityTimeout"])
    )


# --- the deployed entry point -------------------------------------------------------------------


def test_the_deployed_handler_runs_a_batch_in_virtual_time(world: sim_world.World) -> None:
    # GIVEN ten one-second HTTP jobs and the deployed handler as the fleet's entry point,
    # the function's environment from the template
    keys, runner = http_jobs(world, 10)
    env = dict(deployment.from_template(aws.load_template()).worker().environment)
    entry = sim_entry.HandlerEntry(world.kernel, env)
    workers = fleet(world, runner, max_concurrency=1, provisioned=True, entry=entry)
    try:
        workers.start()
        world.kernel.run(world.seconds(DUE) + 30)
    finally:
        entry.remove()
    # THEN the handler ran them side by side in one invocation, each once, to success,
    # and the mapping deleted them all
    assert workers.invocations == 1 and workers.record_failures == 0
    assert sorted(runner.started) == sorted(keys) and set(runner.runs.values()) == {1}
    assert max(runner.started.values()) - min(runner.started.values()) < 0.5
    states = {world.memory_occurrences.get(k).state for k in keys}  # type: ignore[union-attr]
    assert states == {occurrence.State.SUCCEEDED}
    assert world.memory_queue.next_visible_at("default") is None


def test_the_deployed_handler_keeps_one_worker_per_warm_environment(
    world: sim_world.World,
) -> None:
    # GIVEN two batches due a minute apart, then two at once, through the deployed
    # handler, each environment's worker built by a counting factory
    _, runner = http_jobs(world, 10)
    for name, due, count in (("later", 60, 10), ("pair-a", 120, 10), ("pair-b", 120, 10)):
        keys = sim_world.one_off(count, DUE + timedelta(seconds=due), prefix=name)
        world.add(keys)
        sim_world.enqueue(world, [(i, DUE + timedelta(seconds=due)) for i in keys])
    env = dict(deployment.from_template(aws.load_template()).worker().environment)
    entry = sim_entry.HandlerEntry(world.kernel, env)
    jobs = sim_world.Jobs(world.kernel)
    built: list[Any] = []

    def make_worker() -> Any:
        built.append(sim_world.worker_for(world, jobs, runner=runner, tenant_limit=0))
        return built[-1]

    workers = lambdas.WorkerFleet(
        world.kernel,
        world.queue,
        sim_world.next_visible(world),
        make_worker,
        measure_cpu=False,
        max_concurrency=2,
        provisioned=True,
        batch_size=10,
        entry=entry,
    )
    try:
        workers.start()
        world.kernel.run(world.seconds(DUE) + 180)
    finally:
        entry.remove()
    # THEN every job ran once, and there were as many workers as environments: the
    # handler's wiring.worker() is one per container, as deployed, not one per invocation
    assert len(runner.started) == 40 and set(runner.runs.values()) == {1}
    assert workers.invocations >= 4
    assert len(built) == workers.containers.cold_starts == 2
    assert len({id(w) for w in built}) == 2


def test_the_handler_entry_is_removed_after_a_run(world: sim_world.World) -> None:
    from fireline import wiring
    from fireline.adapters import threads

    before = (wiring.worker, threads.ThreadPool)
    entry = sim_entry.HandlerEntry(world.kernel, {"SIM_ONLY_SETTING": "1"})
    entry.install(lambda: None)
    assert (wiring.worker, threads.ThreadPool) != before
    entry.remove()
    assert (wiring.worker, threads.ThreadPool) == before
    import os

    assert "SIM_ONLY_SETTING" not in os.environ


def entry_fleet(
    world: sim_world.World, runner: Any, in_flight: int, **fields: Any
) -> tuple[lambdas.WorkerFleet, sim_entry.HandlerEntry]:
    """One invocation at a time of the deployed handler, with the template's worker
    environment but ``in_flight`` remote jobs at once."""
    env = dict(deployment.from_template(aws.load_template()).worker().environment)
    env["WORKER_IN_FLIGHT"] = str(in_flight)
    memory = fields.pop("memory_mb", 512)
    entry = sim_entry.HandlerEntry(world.kernel, env, memory_mb=memory)
    settings = {"max_concurrency": 1, "provisioned": True, "memory_mb": memory, **fields}
    return fleet(world, runner, entry=entry, in_flight=in_flight, **settings), entry


def test_the_deployed_handler_keeps_its_in_flight_bound_over_a_larger_batch(
    world: sim_world.World,
) -> None:
    # GIVEN a batch of 20 one-second HTTP jobs and the deployed handler with 5 in flight
    keys, runner = http_jobs(world, 20)
    workers, entry = entry_fleet(world, runner, 5, batch_size=20, batching_window=1)
    try:
        workers.start()
        world.kernel.run(world.seconds(DUE) + 30)
    finally:
        entry.remove()
    # THEN one invocation ran them, never more than 5 at once, in four waves of a second,
    # each record once and none reported failed
    assert workers.invocations == 1 and workers.record_failures == 0
    assert runner.most_at_once() == 5
    assert workers.peaks == {"remote": 5}
    starts = sorted(runner.started.values())
    assert starts[-1] - starts[0] >= 3.0
    assert sorted(runner.started) == sorted(keys) and set(runner.runs.values()) == {1}


def test_records_whose_deadline_no_longer_fits_are_handed_back_and_run_later_once(
    world: sim_world.World,
) -> None:
    # GIVEN a batch of 20 HTTP jobs taking 5 s each, 5 in flight, in a 120 s invocation:
    # a default-class record needs its 100 s deadline and margins left to start, so only
    # the first 13 s of the invocation start records (waves at 0, 5 and 10 s)
    items = sim_world.one_off(20, DUE)
    world.add(items)
    keys = sim_world.enqueue(world, [(item, DUE) for item in items])
    runner = sim_world.SimTargets(
        world.kernel,
        durations=sim_network.TargetDuration((5.0,), (1.0,), tail_p99=1.0),
        **sim_world.runner_args(sim_world.Jobs(world.kernel)),
    )
    workers, entry = entry_fleet(world, runner, 5, batch_size=20, batching_window=1)
    try:
        workers.start()
        world.kernel.run(world.seconds(DUE) + 120)
    finally:
        entry.remove()
    # THEN the first invocation started 15 and handed the last 5 back as fresh messages
    # (acknowledged, not failed), the next invocation ran those: every record once
    assert workers.batch_sizes == [20, 5]
    assert workers.record_failures == 0
    resent = Counter(s.key for s in world.send_log.sent)
    assert sum(resent.values()) == 5 and set(resent.values()) == {1}
    assert sorted(runner.started) == sorted(keys) and set(runner.runs.values()) == {1}
    handed_back = set(resent)
    first = world.seconds(DUE)
    assert all(runner.started[k] - first >= 15.0 for k in handed_back)
    assert all(runner.started[k] - first < 13.0 for k in set(keys) - handed_back)
    states = {world.memory_occurrences.get(k).state for k in keys}  # type: ignore[union-attr]
    assert states == {occurrence.State.SUCCEEDED}


def test_python_jobs_wait_for_the_functions_vcpu_and_remote_ones_never_wait_for_them(
    world: sim_world.World,
) -> None:
    # GIVEN one batch of 3 Python jobs of 2 s each and 6 one-second HTTP jobs, on the
    # deployed handler at 512 MB (under one vCPU)
    python_items = sim_world.one_off(
        3, DUE, target={"type": "python", "handler": "sim.work"}, prefix="py"
    )
    http_items = sim_world.one_off(6, DUE, prefix="http")
    world.add([*python_items, *http_items])
    keys = sim_world.enqueue(world, [(i, DUE) for i in [*python_items, *http_items]])
    jobs = sim_world.Jobs(world.kernel, seconds=2.0)
    runner = sim_world.SimTargets(
        world.kernel,
        durations=sim_network.TargetDuration((1.0,), (1.0,), tail_p99=1.0),
        **sim_world.runner_args(jobs),
    )
    workers, entry = entry_fleet(world, runner, 256, batch_size=20, batching_window=1)
    try:
        workers.start()
        world.kernel.run(world.seconds(DUE) + 30)
    finally:
        entry.remove()
    # THEN the Python jobs ran one at a time, two seconds apart; the HTTP jobs all
    # started together at once, none behind a Python job
    assert workers.invocations == 1 and workers.record_failures == 0
    assert workers.peaks == {"remote": 6, "compute": 1}
    python_starts = sorted(jobs.started.values())
    assert len(python_starts) == 3
    assert all(b - a >= 2.0 for a, b in itertools.pairwise(python_starts))
    http_starts = sorted(runner.started.values())
    assert len(http_starts) == 6 and http_starts[-1] - http_starts[0] < 0.5
    assert http_starts[-1] < python_starts[1]
    assert set(jobs.started) | set(runner.started) == set(keys)
