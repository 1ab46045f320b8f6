"""Python jobs in a child process per attempt: what comes back (results, exceptions,
progress), and that a job past its deadline is stopped, the processes it started too.

Deadlines here are short real durations; the assertions are outcomes (what was raised,
which processes remain), never how long anything took."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fireline.services import isolation, long_jobs, targets
from helpers.flows import signing_key
from helpers.memory_system import MemorySystem, job_context
from helpers.processes import alive, all_gone
from helpers.supervisors import RecordingSupervisor


def context(progress: list[dict[str, Any]] | None = None, **payload: Any) -> targets.JobContext:
    return job_context(payload, progress)


class ClockFromFirstProgress:
    """Stands in for the supervisor's clock: still until the job's first progress update
    has arrived in ``seen``, then running. A short deadline then counts from the moment
    the job is in place (sleeping, spinning), however long a busy machine took to get it
    there, and the job's report of its process id is always read."""

    def __init__(self, seen: list[dict[str, Any]]) -> None:
        self.seen = seen
        self.started: float | None = None

    def monotonic(self) -> float:
        now = time.monotonic()
        if not self.seen:
            return 0.0
        if self.started is None:
            self.started = now
        return now - self.started

    sleep = staticmethod(time.sleep)


def test_the_result_comes_back_from_the_child() -> None:
    # GIVEN a handler that answers from its payload and its own process id
    def echo(ctx: targets.JobContext) -> dict[str, Any]:
        return {"payload": ctx.payload, "pid": os.getpid()}

    # WHEN it runs isolated
    result = isolation.run_in_child_process(echo, context(n=3), 30)

    # THEN its answer arrives, computed in another process that is gone now
    assert result["payload"] == {"n": 3}
    assert result["pid"] != os.getpid()
    assert not alive(result["pid"])


def test_a_large_result_arrives_whole() -> None:
    # Bigger than a pipe's buffer: the parent reads while the child writes.
    value = "x" * (3 * 1024 * 1024)
    assert isolation.run_in_child_process(lambda ctx: value, context(), 30) == value


def test_progress_updates_arrive_in_order_before_the_result() -> None:
    # GIVEN a handler that reports three steps
    def steps(ctx: targets.JobContext) -> str:
        for step in range(1, 4):
            ctx.progress({"step": step})
        return "done"

    seen: list[dict[str, Any]] = []

    # WHEN it runs isolated, THEN the parent's progress callback saw each step in order
    assert isolation.run_in_child_process(steps, context(seen), 30) == "done"
    assert seen == [{"step": 1}, {"step": 2}, {"step": 3}]


def test_a_target_failure_keeps_its_type_and_message() -> None:
    def fail(ctx: targets.JobContext) -> None:
        raise targets.TargetFailed("the report is not ready")

    with pytest.raises(targets.TargetFailed, match="the report is not ready"):
        isolation.run_in_child_process(fail, context(), 30)


def test_an_ordinary_exception_is_raised_as_itself() -> None:
    def broken(ctx: targets.JobContext) -> None:
        raise KeyError("customer_id")

    with pytest.raises(KeyError, match="customer_id"):
        isolation.run_in_child_process(broken, context(), 30)


class NeedsTwoArguments(Exception):
    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{code}: {text}")


def test_an_exception_that_cannot_cross_becomes_a_failure_naming_it() -> None:
    # Unpickling calls __init__ with one argument: it cannot be rebuilt in the parent.
    def broken(ctx: targets.JobContext) -> None:
        raise NeedsTwoArguments(7, "quota")

    with pytest.raises(targets.TargetFailed, match="NeedsTwoArguments: 7: quota"):
        isolation.run_in_child_process(broken, context(), 30)


def test_a_job_that_exits_the_interpreter_does_not_exit_the_worker() -> None:
    def leave(ctx: targets.JobContext) -> None:
        sys.exit(2)

    with pytest.raises(targets.TargetFailed, match="SystemExit: 2"):
        isolation.run_in_child_process(leave, context(), 30)


def test_a_result_that_cannot_cross_is_described() -> None:
    answer = isolation.run_in_child_process(lambda ctx: threading.Lock(), context(), 30)
    assert isinstance(answer, str) and "lock" in answer


def test_a_child_that_dies_without_answering_is_a_failure() -> None:
    def crash(ctx: targets.JobContext) -> None:
        os._exit(3)

    with pytest.raises(targets.TargetFailed, match=r"exited \(status 3\)"):
        isolation.run_in_child_process(crash, context(), 30)


def test_a_child_that_dies_while_another_process_holds_its_pipe_is_a_failure() -> None:
    # GIVEN a job that starts a process (which inherits the job's end of the pipe and
    # keeps it open) and then dies without answering
    seen: list[dict[str, Any]] = []

    def crash_leaving_a_holder(ctx: targets.JobContext) -> None:
        holder = subprocess.Popen(["sleep", "3600"], pass_fds=_open_fds())
        ctx.progress({"pid": holder.pid})
        os._exit(3)

    # WHEN it runs with a long deadline, THEN its end is seen (not waited out until the
    # deadline), and the process it left behind is stopped with it
    with pytest.raises(targets.TargetFailed, match=r"exited \(status 3\)"):
        isolation.run_in_child_process(crash_leaving_a_holder, context(seen), 600)
    assert seen and all_gone([seen[0]["pid"]])


def _open_fds() -> tuple[int, ...]:
    return tuple(int(name) for name in os.listdir("/proc/self/fd") if int(name) > 2)


def test_a_child_killed_by_a_signal_is_a_failure_naming_it() -> None:
    def killed(ctx: targets.JobContext) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    with pytest.raises(targets.TargetFailed, match="killed \\(SIGKILL\\)"):
        isolation.run_in_child_process(killed, context(), 30)


def test_a_sleeping_job_past_its_deadline_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a job that tells its process id, then sleeps far past its deadline
    seen: list[dict[str, Any]] = []

    def sleeper(ctx: targets.JobContext) -> None:
        ctx.progress({"pid": os.getpid()})
        time.sleep(3600)

    monkeypatch.setattr(isolation, "time", ClockFromFirstProgress(seen))

    # WHEN it runs with a deadline of half a second
    with pytest.raises(targets.DeadlineExceeded, match="stopped"):
        isolation.run_in_child_process(sleeper, context(seen), 0.5)

    # THEN its process is gone, not left running
    assert seen and not alive(seen[0]["pid"])


def test_a_spinning_job_that_ignores_termination_is_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[dict[str, Any]] = []

    def spinner(ctx: targets.JobContext) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        ctx.progress({"pid": os.getpid()})
        while True:
            pass

    monkeypatch.setattr(isolation, "time", ClockFromFirstProgress(seen))
    with pytest.raises(targets.DeadlineExceeded):
        isolation.run_in_child_process(spinner, context(seen), 0.5)
    assert seen and not alive(seen[0]["pid"])


def test_processes_a_job_started_are_stopped_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a job that starts a long-lived process of its own and then hangs
    seen: list[dict[str, Any]] = []

    def starter(ctx: targets.JobContext) -> None:
        grandchild = subprocess.Popen(["sleep", "3600"])
        ctx.progress({"pid": grandchild.pid})
        time.sleep(3600)

    monkeypatch.setattr(isolation, "time", ClockFromFirstProgress(seen))

    # WHEN its deadline passes
    with pytest.raises(targets.DeadlineExceeded):
        isolation.run_in_child_process(starter, context(seen), 1.0)

    # THEN the process it started is gone too (it was in the job's process group)
    assert seen and all_gone([seen[0]["pid"]])


def _frame(kind: str, value: Any) -> bytes:
    body = pickle.dumps((kind, value))
    return isolation._HEADER.pack(len(body)) + body


@pytest.mark.parametrize("answered", [False, True])
def test_what_the_job_wrote_by_its_deadline_is_read_before_it_is_stopped(answered: bool) -> None:
    # GIVEN a job whose process still runs and which has written progress (and, in one
    # case, its answer) that its supervisor has not read yet: the supervisor was busy
    job = subprocess.Popen(["sleep", "3600"])
    read_fd, write_fd = os.pipe()
    os.write(write_fd, _frame("progress", {"step": 1}))
    if answered:
        os.write(write_fd, _frame("value", "done"))
    seen: list[dict[str, Any]] = []
    try:
        # WHEN the supervisor looks only once the deadline has passed
        if answered:
            # THEN the answer written in time is the outcome
            assert isolation._supervise(job.pid, read_fd, context(seen), 0) == "done"
        else:
            # THEN the job is past its deadline, and its progress was delivered first
            with pytest.raises(targets.DeadlineExceeded):
                isolation._supervise(job.pid, read_fd, context(seen), 0)
        assert seen == [{"step": 1}]
    finally:
        job.kill()
        job.wait()
        os.close(read_fd)
        os.close(write_fd)


def test_the_target_runner_names_the_handler_that_ran_past_its_deadline() -> None:
    registry = targets.Registry()
    registry.register("hang")(lambda ctx: time.sleep(3600))
    runner = targets.TargetRunner(
        registry=registry,
        signing_key=signing_key,
        lambda_client=lambda timeout, credentials: None,
        sqs_client=lambda credentials: None,
        python=isolation.run_in_child_process,
    )
    with pytest.raises(targets.DeadlineExceeded, match="hang ran past"):
        runner.run({"type": "python", "handler": "hang"}, context(), timeout=0.5)


class CountingSupervisor(RecordingSupervisor):
    """Counts heartbeats; with ``marks``, also leaves a file per heartbeat there, which a
    job's process can see."""

    def __init__(self, marks: Path | None = None) -> None:
        super().__init__()
        self.heartbeats = 0
        self.marks = marks

    def heartbeat(self, task_token: str) -> bool:
        self.heartbeats += 1
        if self.marks is not None:
            (self.marks / str(self.heartbeats)).touch()
        return True


def long_jobs_on(system: MemorySystem, supervisor: CountingSupervisor) -> long_jobs.LongJobs:
    return long_jobs.LongJobs(
        schedules=system.schedules,
        occurrences=system.occurrences,
        supervisor=supervisor,
        clock=system.clock,
        runner=system.runner(python=isolation.run_in_child_process),
        config=long_jobs.LongJobConfig(heartbeat_seconds=1),
        slots=system.slots,
    )


def test_a_long_job_is_heartbeaten_while_its_process_works(tmp_path: Path) -> None:
    # GIVEN a long job that reports nothing and ends only once it sees two heartbeats
    # sent for it (by the worker, while the job's process works)
    system = MemorySystem()

    def quiet(ctx: targets.JobContext) -> str:
        waited_until = time.monotonic() + 60
        while len(list(tmp_path.iterdir())) < 2:
            assert time.monotonic() < waited_until, "no heartbeat came"
            time.sleep(0.05)
        return "done"

    system.registry.register("quiet")(quiet)
    supervisor = CountingSupervisor(tmp_path)
    jobs = long_jobs_on(system, supervisor)
    body = system.due_job(job_class="long", target={"type": "python", "handler": "quiet"})
    system.worker(job_class="long", long=jobs).handle(body, remaining_ms=lambda: 60_000)

    # WHEN the runner runs its attempt, THEN it succeeds: the heartbeats came meanwhile
    assert jobs.run_task(
        {**body, "task_token": "t-1", "attempt": 1, "heartbeat_seconds": 1},
        remaining_ms=lambda: 600_000,
    )
    assert supervisor.heartbeats >= 2
    assert supervisor.succeeded == [{"result": "done"}]


def test_a_long_jobs_progress_and_heartbeats_come_back_from_its_process() -> None:
    # GIVEN a long job whose Python handler reports two steps from its child process
    system = MemorySystem()

    def stepper(ctx: targets.JobContext) -> dict[str, Any]:
        ctx.progress({"step": 1, "of": 2})
        ctx.progress({"step": 2, "of": 2})
        return {"steps": 2, "pid": os.getpid()}

    system.registry.register("stepper")(stepper)
    supervisor = CountingSupervisor()
    jobs = long_jobs_on(system, supervisor)
    body = system.due_job(job_class="long", target={"type": "python", "handler": "stepper"})
    system.worker(job_class="long", long=jobs).handle(body, remaining_ms=lambda: 60_000)

    # WHEN the runner runs its attempt
    assert jobs.run_task({**body, "task_token": "t-1", "attempt": 1}, remaining_ms=lambda: 600_000)

    # THEN the last progress is on the row, each update was a heartbeat, and the result
    # was handed to the state machine
    assert system.row(body).progress == {"step": 2, "of": 2}
    assert supervisor.heartbeats >= 2
    ((output),) = supervisor.succeeded
    assert output["result"]["steps"] == 2 and output["result"]["pid"] != os.getpid()
