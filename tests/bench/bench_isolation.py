"""What a process per Python job costs: fork, pipe, result and reaping for a job that does
nothing, against the thread per job it replaces. Prints microseconds per job; never fails
on them."""

from __future__ import annotations

import os
import resource
import statistics
import time
from typing import Any

from bench.report import record
from fireline.services import isolation, targets
from helpers.memory_system import job_context

RUNS = 300


def echo(ctx: targets.JobContext) -> dict[str, Any]:
    return {"payload": ctx.payload}


def timings(runner: targets.PythonRunner, with_progress: bool = False) -> list[float]:
    def job(ctx: targets.JobContext) -> dict[str, Any]:
        if with_progress:
            ctx.progress({"step": 1})
        return echo(ctx)

    ctx = job_context({"n": 1})
    runner(job, ctx, 30)  # warm
    spent = []
    for _ in range(RUNS):
        started = time.perf_counter()
        runner(job, ctx, 30)
        spent.append((time.perf_counter() - started) * 1e6)
    return spent


def bare_fork() -> list[float]:
    """The floor: a fork whose child exits at once, and its reaping."""
    spent = []
    for _ in range(RUNS):
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child leaves at once
            os._exit(0)
        os.waitpid(pid, 0)
        spent.append((time.perf_counter() - started) * 1e6)
    return spent


def summary(spent: list[float]) -> dict[str, float]:
    ordered = sorted(spent)
    return {
        "p50_us": round(statistics.median(ordered)),
        "p90_us": round(ordered[int(len(ordered) * 0.9)]),
        "p99_us": round(ordered[int(len(ordered) * 0.99)]),
        "mean_us": round(statistics.fmean(ordered)),
    }


def test_overhead_of_a_process_per_python_job() -> None:
    process = summary(timings(isolation.run_in_child_process))
    progress = summary(timings(isolation.run_in_child_process, with_progress=True))
    thread = summary(timings(targets.run_in_own_thread))
    floor = summary(bare_fork())
    record(
        "isolation.python_job_overhead",
        {
            "runs": RUNS,
            "child_process": process,
            "child_process_with_one_progress_update": progress,
            "own_thread": thread,
            "bare_fork_exit_wait": floor,
            "added_by_the_process_p50_us": process["p50_us"] - thread["p50_us"],
            # Forking copies the page tables: the cost grows with the worker's memory.
            "parent_max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        },
    )
    assert process["p50_us"] > 0 and thread["p50_us"] > 0
