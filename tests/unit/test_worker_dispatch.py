"""One worker invocation keeps many remote jobs in flight at once: the dispatcher's bounds
(remote jobs up to in_flight, Python jobs up to the function's vCPUs, each lane in
fire-time order), and what the worker does with a batch larger than them.

Targets here block on events or move the fake clock; nothing waits on wall time except
the joins that let a blocked thread reach its event (bounded, never asserted on)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from fireline import wiring
from fireline.domain import errors, occurrence
from fireline.services import targets
from fireline.services.worker import Result
from fireline.services.worker import dispatcher as worker_dispatch
from fireline.services.worker.dispatcher import Dispatcher, Job, Lane, Limits, NotStarted
from helpers.memory_system import MemorySystem
from helpers.remote_targets import PYTHON, FakeTargets, fires, handle, invocation

# Long enough for a thread to reach the event it blocks on; a test that waits this long
# has failed already (the wait is a guard, never the thing measured).
GUARD_SECONDS = 10.0


class Gauge:
    """Counts jobs under way, and the most there ever were at once."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.started: list[Any] = []
        self._lock = threading.Lock()

    def enter(self, name: Any) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.started.append(name)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


def plenty() -> int:
    return 60_000


# --- the dispatcher on its own ------------------------------------------------------------


def test_a_batch_larger_than_the_in_flight_bound_runs_every_job_never_more_at_once() -> None:
    # GIVEN 12 remote jobs that each wait until three are under way together (or until
    # the guard: the last ones never find three)
    gauge = Gauge()
    three = threading.Barrier(3)

    def job(n: int) -> int:
        gauge.enter(n)
        try:
            three.wait(timeout=GUARD_SECONDS)
        except threading.BrokenBarrierError:
            pass
        finally:
            gauge.leave()
        return n * n

    # WHEN a dispatcher bounded at three runs them
    results = Dispatcher(Limits(in_flight=3), plenty).run(
        [Job(lambda n=n: job(n), order=float(n)) for n in range(12)]
    )
    # THEN every job ran once, its result in its place, and never more than three at once
    assert results == [n * n for n in range(12)]
    assert sorted(gauge.started) == list(range(12))
    assert gauge.most == 3


def test_jobs_start_earliest_fire_first_whatever_their_place_in_the_batch() -> None:
    # GIVEN jobs whose fire times are out of order in the batch, one in flight at a time
    started: list[float] = []
    orders = [5.0, 1.0, 4.0, 2.0, 3.0, 0.0]
    jobs = [Job(lambda o=o: started.append(o), order=o) for o in orders]
    # WHEN they run
    Dispatcher(Limits(in_flight=1), plenty).run(jobs)
    # THEN they started in fire-time order
    assert started == sorted(orders)


def test_one_slow_target_never_holds_up_another_records_start() -> None:
    # GIVEN a slow target first in the batch, blocked until the test lets it go, and
    # five quick ones behind it, with room for two in flight
    release = threading.Event()
    quick_done = Counter[int]()

    def slow() -> str:
        assert release.wait(GUARD_SECONDS)
        return "slow"

    def quick(n: int) -> str:
        quick_done[n] += 1
        if n == 4:  # the last quick one lets the slow one end
            release.set()
        return f"quick {n}"

    jobs = [Job(slow, order=0.0)] + [Job(lambda n=n: quick(n), order=1.0 + n) for n in range(5)]
    # WHEN they run
    results = Dispatcher(Limits(in_flight=2), plenty).run(jobs)
    # THEN every quick one started and ended while the slow one still waited (the last
    # quick one is what released it), each once
    assert results == ["slow"] + [f"quick {n}" for n in range(5)]
    assert quick_done == Counter(range(5))


def test_python_jobs_neither_take_the_remote_places_nor_are_starved_by_them() -> None:
    # GIVEN a batch of three Python jobs first and three remote jobs, room for one
    # Python job and two remote ones; every remote job waits until both remote places
    # are taken (proof that no Python job holds one), the Python jobs until that remote
    # pair has met
    python = Gauge()
    remote = Gauge()
    pair = threading.Barrier(2)
    met = threading.Event()

    def compute(n: int) -> str:
        python.enter(n)
        try:
            assert met.wait(GUARD_SECONDS)
        finally:
            python.leave()
        return f"python {n}"

    def io(n: int) -> str:
        remote.enter(n)
        try:
            if n < 2:  # the first two meet; the third comes after them
                pair.wait(timeout=GUARD_SECONDS)
                met.set()
        finally:
            remote.leave()
        return f"remote {n}"

    jobs = [Job(lambda n=n: compute(n), Lane.COMPUTE, float(n)) for n in range(3)] + [
        Job(lambda n=n: io(n), Lane.REMOTE, 10.0 + n) for n in range(3)
    ]
    # WHEN they run
    results = Dispatcher(Limits(in_flight=2, compute=1), plenty).run(jobs)
    # THEN all ran; one Python job at a time, two remote ones together beside it
    assert results == [f"python {n}" for n in range(3)] + [f"remote {n}" for n in range(3)]
    assert python.most == 1
    assert remote.most == 2


def test_a_job_whose_turn_comes_near_the_invocations_end_is_not_started() -> None:
    # GIVEN an invocation with 40 s left, each job using 15 s of it, one at a time, and
    # a reserve of 12 s
    left = [40_000]
    ran: list[int] = []

    def job(n: int) -> int:
        ran.append(n)
        left[0] -= 15_000
        return n

    # WHEN four jobs run
    results = Dispatcher(Limits(in_flight=1, reserve_seconds=12), lambda: left[0]).run(
        [Job(lambda n=n: job(n), order=float(n)) for n in range(4)]
    )
    # THEN the two whose turn came with at least 12 s left ran; the others were never
    # started, and say so
    assert ran == [0, 1]
    assert results[:2] == [0, 1]
    assert all(isinstance(r, NotStarted) for r in results[2:])


def test_a_python_job_that_waited_past_its_bound_for_a_vcpu_goes_back_unstarted() -> None:
    # GIVEN one vCPU, a 60 s Python job first (a runaway held to its deadline), then two
    # short Python jobs of another tenant, and a remote job, with a wait bound of 5 s
    left = [900_000]
    ran: list[str] = []

    def job(name: str, seconds: float) -> str:
        ran.append(name)
        left[0] -= int(seconds * 1000)
        return name

    limits = Limits(in_flight=4, compute=1, compute_wait_seconds=5)
    # WHEN the batch runs
    results = Dispatcher(limits, lambda: left[0]).run(
        [
            Job(lambda: job("runaway", 60), lane=Lane.COMPUTE, order=0.0),
            Job(lambda: job("short-1", 1), lane=Lane.COMPUTE, order=1.0),
            Job(lambda: job("short-2", 1), lane=Lane.COMPUTE, order=2.0),
            Job(lambda: "remote", order=3.0),
        ]
    )
    # THEN the Python jobs behind the runaway are handed back for another invocation's
    # vCPU instead of waiting out its deadline; the remote job ran regardless
    assert results[0] == "runaway" and results[3] == "remote"
    assert all(isinstance(r, NotStarted) for r in results[1:3])
    assert "short-1" not in ran and "short-2" not in ran


def test_a_python_jobs_hold_until_its_fire_time_is_not_time_waited_for_a_vcpu() -> None:
    # GIVEN one vCPU and three Python jobs of a burst that came 60 s early (each holds
    # until its time, the first in the lane's one slot), a second each, a bound of 5 s
    left = [900_000]
    ran: list[str] = []

    def job(name: str, hold: float) -> str:
        ran.append(name)
        left[0] -= int((hold + 1) * 1000)  # its hold (the first's alone), then a second
        return name

    limits = Limits(in_flight=4, compute=1, compute_wait_seconds=5)
    # WHEN the batch runs
    results = Dispatcher(limits, lambda: left[0]).run(
        [
            Job(lambda: job("first", 60), lane=Lane.COMPUTE, order=0.0, hold_seconds=60),
            Job(lambda: job("second", 0), lane=Lane.COMPUTE, order=0.0, hold_seconds=60),
            Job(lambda: job("third", 0), lane=Lane.COMPUTE, order=0.0, hold_seconds=60),
        ]
    )
    # THEN each started in its turn once their time came: the minute they held is not a
    # wait for the vCPU (counted from their time, the third waited 2 s)
    assert results == ["first", "second", "third"]
    assert ran == ["first", "second", "third"]


def test_a_jobs_exception_is_its_own_outcome() -> None:
    def boom() -> None:
        raise RuntimeError("target broke")

    results = Dispatcher(Limits(in_flight=2), plenty).run([Job(boom), Job(lambda: "fine")])
    assert isinstance(results[0], RuntimeError) and results[1] == "fine"


@pytest.mark.parametrize(
    ("limits", "field"),
    [({"in_flight": 0}, "WORKER_IN_FLIGHT"), ({"in_flight": 10_001}, "WORKER_IN_FLIGHT"),
     ({"compute": 0}, "compute")],
)  # fmt: skip
def test_limits_out_of_range_are_refused_naming_the_setting(
    limits: dict[str, int], field: str
) -> None:
    with pytest.raises(errors.ValidationError) as refused:
        Limits(**limits)
    assert refused.value.field == field


@pytest.mark.parametrize(
    ("memory_mb", "cpus", "slots"),
    [(512, 2, 1), (1769, 2, 1), (3538, 2, 2), (10240, 6, 5), (10240, 2, 2), (128, None, 1)],
)
def test_python_jobs_at_once_follow_the_functions_vcpus(
    memory_mb: int, cpus: int | None, slots: int
) -> None:
    assert worker_dispatch.compute_slots(memory_mb, cpus) == slots


def test_the_gated_runner_keeps_python_runs_within_its_slots_from_any_thread() -> None:
    # GIVEN a Python runner gated to one run at a time, called from three threads
    gauge = Gauge()
    entered = threading.Event()

    def run(name: str) -> str:
        gauge.enter(name)
        entered.set()
        gauge.leave()
        return name

    gated = worker_dispatch.gated(run, 1)
    # WHEN the three call it at once
    results = Dispatcher(Limits(in_flight=3), plenty).run(
        [Job(lambda n=n: gated(f"job {n}")) for n in range(3)]
    )
    # THEN each ran, one at a time
    assert results == [f"job {n}" for n in range(3)]
    assert gauge.most == 1


# --- the worker with a dispatcher ---------------------------------------------------------


def test_a_batch_larger_than_the_bound_has_every_record_run_once_and_succeed() -> None:
    # GIVEN 8 HTTP fires and room for 4 in flight; each target answers only once four
    # are waiting together
    system = MemorySystem()
    bodies = fires(system, 8)
    gauge = Gauge()
    four = threading.Barrier(4)

    def act(key: str) -> None:
        gauge.enter(key)
        try:
            four.wait(timeout=GUARD_SECONDS)
        finally:
            gauge.leave()

    runner = FakeTargets(system, act)
    # WHEN one invocation handles them
    results = handle(system, runner, bodies, Limits(in_flight=4), invocation(system, 120))
    # THEN each ran once and succeeded (two waves of four met), its row says so, and
    # never more than four were in flight
    assert results == [Result.SUCCEEDED] * 8
    assert Counter(key for key, _ in runner.runs) == Counter(b["occurrence_key"] for b in bodies)
    assert all(system.row(b).state is occurrence.State.SUCCEEDED for b in bodies)
    assert gauge.most == 4


def test_in_a_batch_one_slow_target_never_holds_up_another_records_start() -> None:
    # GIVEN five HTTP fires, two in flight at once, the earliest fire's target blocked
    # until every other record has run
    system = MemorySystem()
    bodies = fires(system, 5)
    keys = [b["occurrence_key"] for b in bodies]
    others_done = threading.Semaphore(0)

    def act(key: str) -> None:
        if key == keys[0]:
            for _ in keys[1:]:
                assert others_done.acquire(timeout=GUARD_SECONDS)
        else:
            others_done.release()

    runner = FakeTargets(system, act)
    # WHEN one invocation handles them
    results = handle(system, runner, bodies, Limits(in_flight=2), invocation(system, 120))
    # THEN all succeeded, each run once: the slow one could only end after the four
    # others had started and ended on the one other place
    assert results == [Result.SUCCEEDED] * 5
    assert Counter(key for key, _ in runner.runs) == Counter(keys)


@pytest.mark.parametrize("slow_place", [0, 3, 5])
def test_a_records_deadline_and_outcome_do_not_depend_on_its_place_in_the_batch(
    slow_place: int,
) -> None:
    # GIVEN six HTTP fires with a 30 s deadline, two in flight, each run taking 10 s of
    # the invocation's 120 s, and one of them (at slow_place) a target that outlives
    # its deadline
    system = MemorySystem()
    bodies = fires(system, 6, deadline=30)
    slow_key = bodies[slow_place]["occurrence_key"]

    def act(key: str) -> None:
        system.clock.advance(10)
        if key == slow_key:
            raise targets.DeadlineExceeded("ran past 30 s")

    runner = FakeTargets(system, act)
    # WHEN one invocation handles the batch
    results = handle(system, runner, bodies, Limits(in_flight=2), invocation(system, 120))
    # THEN every run was given its full deadline, counted from its own start, wherever
    # it stood in the batch; the slow one is retried, the others succeeded
    assert [timeout for _, timeout in runner.runs] == [30.0] * 6
    expected = [Result.RETRYING if i == slow_place else Result.SUCCEEDED for i in range(6)]
    assert results == expected
    assert system.row(bodies[slow_place]).state is occurrence.State.FAILED


def test_records_left_unstarted_near_the_invocations_end_are_returned_not_failed() -> None:
    # GIVEN five HTTP fires with a 30 s deadline, one in flight at a time, each run
    # taking 15 s of an invocation with 60 s left: a record starts only with its whole
    # deadline, the worker's 5 s margin and its 2 s hold left (37 s)
    system = MemorySystem()
    bodies = fires(system, 5, deadline=30)
    runner = FakeTargets(system, lambda key: system.clock.advance(15))
    # WHEN the invocation handles them
    results = handle(system, runner, bodies, Limits(in_flight=1), invocation(system, 60))
    # THEN the first two ran (60 s and 45 s left at their turns), each with its whole
    # deadline, and succeeded...
    assert results[:2] == [Result.SUCCEEDED] * 2
    assert runner.runs == [(b["occurrence_key"], 30.0) for b in bodies[:2]]
    # ... and the other three were returned: acknowledged, sent again at once as fresh
    # messages (no receive counted), never claimed, no attempt spent, none failed
    assert results[2:] == [Result.RETURNED] * 3
    for body in bodies[2:]:
        assert system.occurrences.get(body["occurrence_key"]) is None
    again = system.queue.receive("default", max_messages=10)
    assert sorted(m.body["occurrence_key"] for m in again) == sorted(
        b["occurrence_key"] for b in bodies[2:]
    )
    assert all(m.receive_count == 1 for m in again)
    assert system.metrics.total("Failed") == 0
    assert system.metrics.total("Returned") == 3
    # AND the returned ones run once in the next invocation
    results = handle(
        system, runner, [m.body for m in again], Limits(in_flight=1), invocation(system, 120)
    )
    assert results == [Result.SUCCEEDED] * 3
    assert Counter(key for key, _ in runner.runs) == Counter(b["occurrence_key"] for b in bodies)


def test_a_record_that_cannot_be_sent_again_is_left_failed_for_sqs_never_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN two fires, the second left unstarted, and a queue that refuses every send
    system = MemorySystem()
    bodies = fires(system, 2)
    runner = FakeTargets(system, lambda key: system.clock.advance(40))

    def refuse(job_class: str, messages: Any) -> list[str]:
        raise errors.Unavailable("queue unavailable")

    monkeypatch.setattr(system.queue, "send_batch", refuse)
    # WHEN the invocation ends with it unstarted
    results = handle(system, runner, bodies, Limits(in_flight=1), invocation(system, 45))
    # THEN it is reported as a failure (SQS delivers it again), not acknowledged
    assert results[0] is Result.SUCCEEDED
    assert isinstance(results[1], NotStarted)


class Killed(BaseException):
    """The invocation's process is gone: nothing it does after this happens."""


class KillSwitch:
    """A store as one invocation sees it: once ``kill`` is set, every call raises Killed
    (a killed invocation writes nothing more)."""

    def __init__(self, inner: Any, kill: threading.Event) -> None:
        self._inner = inner
        self._kill = kill

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._kill.is_set():
                raise Killed
            return value(*args, **kwargs)

        return call


def test_an_invocation_killed_mid_batch_loses_no_record_and_restarts_none_that_ended() -> None:
    # GIVEN five HTTP fires, two in flight at once: the first two end, the next two are
    # under way when the invocation is killed, the fifth has not started
    system = MemorySystem()
    bodies = fires(system, 5, deadline=30)
    keys = [b["occurrence_key"] for b in bodies]
    kill = threading.Event()
    in_flight = threading.Semaphore(0)

    def doomed(key: str) -> None:
        if key in keys[2:4]:
            in_flight.release()
            kill.wait(GUARD_SECONDS)
            raise Killed  # the process is gone: the run never answers

    first = FakeTargets(system, doomed)
    killed_worker = system.worker(runner=first)
    for name in ("occurrences", "schedules", "queue", "slots"):
        setattr(killed_worker, name, KillSwitch(getattr(system, name), kill))
    killed_worker._idempotency._occurrences = killed_worker.occurrences  # type: ignore[attr-defined]
    outcome: list[Any] = []

    def run_killed() -> None:
        try:
            handle(system, first, bodies, Limits(in_flight=2), invocation(system, 120),
                   worker=killed_worker)  # fmt: skip
        except BaseException as exc:  # the kill, seen from outside
            outcome.append(exc)

    invocation_thread = threading.Thread(target=run_killed)
    invocation_thread.start()
    for _ in range(2):
        assert in_flight.acquire(timeout=GUARD_SECONDS)
    # WHEN the invocation is killed there (SQS then delivers the whole batch again)
    kill.set()
    invocation_thread.join(GUARD_SECONDS)
    assert not invocation_thread.is_alive() and outcome  # it ended without an answer
    second = FakeTargets(system)
    results = handle(system, second, bodies, Limits(in_flight=2), invocation(system, 120))
    # THEN the two that ended are not run again; the two under way are still held by
    # their claims (left to SQS, not started a second time beside the first); the one
    # never started runs now, once
    assert results[:2] == [Result.SETTLED] * 2
    assert all(isinstance(r, Exception) for r in results[2:4])
    assert results[4] is Result.SUCCEEDED
    assert [key for key, _ in second.runs] == [keys[4]]
    # AND once their claims have lapsed, a later delivery runs the two killed attempts
    # again (at least once: their first attempt never answered), and every fire has
    # one success, none lost
    system.clock.advance(121)  # past the claims' hold: the invocation's 120 s
    results = handle(system, second, bodies[2:4], Limits(in_flight=2), invocation(system, 120))
    assert results == [Result.SUCCEEDED] * 2
    rows = [system.row(b) for b in bodies]
    assert [r.state for r in rows] == [occurrence.State.SUCCEEDED] * 5
    assert [r.attempts for r in rows] == [1, 1, 2, 2, 1]
    assert Counter(key for key, _ in first.runs + second.runs) == Counter(
        {keys[0]: 1, keys[1]: 1, keys[2]: 2, keys[3]: 2, keys[4]: 1}
    )


def test_python_jobs_in_a_batch_go_to_the_compute_lane_and_remote_ones_do_not_wait() -> None:
    # GIVEN a batch of three Python fires first and three HTTP fires after, one Python
    # job at a time; each Python job waits until every HTTP one has run
    system = MemorySystem()
    python_bodies = fires(system, 3, target=PYTHON)
    http_bodies = fires(system, 3)
    remote_done = threading.Semaphore(0)
    python_ran: list[str] = []

    def python(handler: Any, context: targets.JobContext, timeout: float) -> None:
        for _ in range(3 if not python_ran else 0):
            assert remote_done.acquire(timeout=GUARD_SECONDS)
        python_ran.append(context.occurrence_key)

    runner = FakeTargets(system, lambda key: remote_done.release())
    runner._python_runner = worker_dispatch.gated(python, 1)  # type: ignore[attr-defined]
    runner.run = _python_or_fake(runner)  # type: ignore[method-assign]
    # WHEN one invocation handles the mixed batch
    results = handle(
        system, runner, python_bodies + http_bodies, Limits(in_flight=2, compute=1),
        invocation(system, 120),
    )  # fmt: skip
    # THEN all six succeeded: the HTTP ones ran while the first Python job waited for
    # them, and the Python ones one after another, earliest first
    assert results == [Result.SUCCEEDED] * 6
    assert python_ran == [b["occurrence_key"] for b in python_bodies]
    assert sorted(key for key, _ in runner.runs) == sorted(b["occurrence_key"] for b in http_bodies)


def _python_or_fake(runner: FakeTargets) -> Callable[..., Any]:
    fake = runner.run

    def run(target: dict[str, Any], context: targets.JobContext, *, timeout: float) -> Any:
        if target.get("type") == "python":
            return targets.TargetRunner.run(runner, target, context, timeout=timeout)
        return fake(target, context, timeout=timeout)

    return run


# --- the settings -------------------------------------------------------------------------


def _settings_env(**extra: str) -> dict[str, str]:
    names = ["SCHEDULES_TABLE", "OCCURRENCES_TABLE", "LEASES_TABLE", "IDEMPOTENCY_TABLE"]
    queues = {f"QUEUE_URL_{c.upper()}": f"https://queue/{c}" for c in ("default", "short", "long")}
    return {**{name: name.lower() for name in names}, **queues, **extra}


def test_the_bounds_come_from_the_in_flight_setting_and_the_functions_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a worker configured for 64 in flight, with 3,538 MB (two vCPUs) on four CPUs
    for name, value in _settings_env(
        WORKER_IN_FLIGHT="64", AWS_LAMBDA_FUNCTION_MEMORY_SIZE="3538"
    ).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(wiring.os, "cpu_count", lambda: 4)
    wiring.reset()
    try:
        # THEN its dispatcher keeps 64 remote jobs and two Python jobs in flight
        assert wiring.dispatch_limits() == Limits(in_flight=64, compute=2)
    finally:
        wiring.reset()


def test_without_settings_the_bounds_are_the_stated_defaults() -> None:
    settings = wiring.Settings.from_env(_settings_env())
    assert settings.worker_in_flight == worker_dispatch.DEFAULT_IN_FLIGHT == 256
    assert settings.memory_mb == 0  # unknown: one vCPU's worth of Python jobs


@pytest.mark.parametrize("value", ["lots", "0", "20000"])
def test_a_bad_in_flight_setting_is_refused_naming_it(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, setting in _settings_env(WORKER_IN_FLIGHT=value).items():
        monkeypatch.setenv(name, setting)
    wiring.reset()
    try:
        with pytest.raises(errors.ValidationError) as refused:
            wiring.dispatch_limits()
        assert refused.value.field == "WORKER_IN_FLIGHT"
    finally:
        wiring.reset()
