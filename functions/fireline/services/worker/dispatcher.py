"""A worker invocation's records, started side by side within two bounds.

A remote target (``http``, ``lambda`` invoked and waited for, ``sqs``, ``workflow``) is
I/O: the worker does nothing while a tenant's endpoint takes its seconds. So one
invocation takes a large batch and keeps up to ``in_flight`` of those jobs waiting at
once, each on a thread of its own. A Python handler job is compute: it runs in a child
process of ours (services.isolation) and spends the function's CPU, so at most
``compute`` of them run at once, as many as the function has vCPUs. The two lanes are
separate pools: Python jobs never take a remote job's place, and a batch of remote jobs
never leaves a Python job without one.

Each lane starts its records in fire-time order (the batch's earliest fires first); a
record's deadline counts from its own start (the worker's per-record logic), so its place
in the batch decides only when it starts, never its outcome. A slow target holds its own
place in the lane and nothing else.

An invocation near its end starts nothing more: a record whose turn comes when less of
the invocation is left than it needs (its own ``needs_seconds``: its whole deadline, the
worker's margin to record the outcome and the hold until its fire time; at least
``reserve_seconds``) comes back as :class:`NotStarted`, which the worker hands back to the
queue unrun (see ``Worker.handle_batch``). So a record that starts late in a long batch
still gets its whole deadline: its place decides when it starts, never how long it may run.

Threads, not asyncio. tests/bench/bench_dispatch.py measures the two side by side, 512
fires with 256 in flight against targets that answer after 1 s and 3 s: on a shared
two-core machine, over three runs, 0.25 to 0.39 ms of CPU a fire on warm threads against
0.24 to 0.72 ms with aiohttp, and the first 256 starts' p99 lateness 0.04 to 0.25 s
against 0.03 to 0.07 s. asyncio wins a tenth or two of a second of lateness and no CPU;
it would take an asynchronous rewrite of every call a record makes (the worker's AWS
calls, Powertools' idempotency, the SSRF-guarded webhook client), where a thread that
waits on a socket costs the GIL nothing. Threads made for a batch (a cold container)
add about 0.2 s to the first wave's p99, which is why the worker keeps its Pools.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from fireline.domain import errors

R = TypeVar("R")

# Remote jobs one invocation keeps in flight at once (WORKER_IN_FLIGHT). Each waits on a
# thread of its own: a few hundred threads' stacks are virtual memory, and their CPU is
# the requests' own, so the bound is there to keep one invocation's sockets and memory
# within a 512 MB function, not to save CPU.
DEFAULT_IN_FLIGHT = 256
MAX_IN_FLIGHT = 10_000  # SQS's largest batch for a standard queue
# Lambda gives a function one full vCPU at 1,769 MB, in proportion below and above.
ONE_VCPU_MB = 1769


class Lane(enum.StrEnum):
    REMOTE = "remote"  # waits on someone else's service: bounded by in_flight
    COMPUTE = "compute"  # a Python handler in a child process of ours: bounded by vCPUs


class NotStarted(Exception):
    """Left unstarted: too little of the invocation was left when its turn came."""


@dataclasses.dataclass(frozen=True)
class Limits:
    in_flight: int = DEFAULT_IN_FLIGHT
    compute: int = 1
    # Stop starting records when less than this much of the invocation is left.
    reserve_seconds: float = 12.0
    # The longest a Python job waits in its batch for a vCPU. Past it, it goes back to the
    # queue for another invocation: with one vCPU, a job behind a long one (a runaway
    # another tenant wrote, held to its deadline) would otherwise wait all that time, and
    # one tenant's long jobs would decide when every other's start.
    compute_wait_seconds: float = 5.0

    def __post_init__(self) -> None:
        if not 1 <= self.in_flight <= MAX_IN_FLIGHT:
            raise errors.ValidationError(
                f"must be between 1 and {MAX_IN_FLIGHT}, not {self.in_flight}",
                field="WORKER_IN_FLIGHT",
            )
        if self.compute < 1:
            raise errors.ValidationError(f"must be at least 1, not {self.compute}", field="compute")
        if self.reserve_seconds < 0:
            raise errors.ValidationError("must not be negative", field="reserve_seconds")
        if self.compute_wait_seconds < 0:
            raise errors.ValidationError("must not be negative", field="compute_wait_seconds")


def compute_slots(memory_mb: int, cpus: int | None) -> int:
    """Python jobs one invocation runs at once: the vCPUs the function's memory buys
    (1,769 MB each), no more than the CPUs it sees, and at least one."""
    vcpus = math.floor(memory_mb / ONE_VCPU_MB) if memory_mb > 0 else 1
    return max(1, min(vcpus, cpus or 1))


@dataclasses.dataclass(frozen=True)
class Job(Generic[R]):
    call: Callable[[], R]
    lane: Lane = Lane.REMOTE
    order: float = 0.0  # the record's fire time (epoch seconds): lower starts first
    # How much of the invocation must be left for it to start (0: the limits' reserve).
    needs_seconds: float = 0.0
    # How long from the batch's start it holds until its fire time (a fire that came
    # early): time in its lane's queue before then is not time waited for a vCPU.
    hold_seconds: float = 0.0


class Pools:
    """A lane's threads, kept for the container's life (one invocation at a time uses
    them): a warm invocation finds its threads made. Starting a few hundred threads is
    most of a large batch's start lateness otherwise, as each start waits for the new
    thread to run (tests/bench/bench_dispatch.py measures both)."""

    def __init__(self, limits: Limits, *, name: str = "worker-record") -> None:
        self.limits = limits
        self._pools = {
            lane: concurrent.futures.ThreadPoolExecutor(
                max_workers=limits.compute if lane is Lane.COMPUTE else limits.in_flight,
                thread_name_prefix=f"{name}-{lane.value}",
            )
            for lane in Lane
        }

    def pool(self, lane: Lane) -> concurrent.futures.ThreadPoolExecutor:
        return self._pools[lane]

    def close(self) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=True)


class Dispatcher:
    """Runs a batch's jobs within ``limits`` (see the module's docstring), on ``pools``
    when given (kept by the caller), else on pools of its own for the batch."""

    def __init__(
        self,
        limits: Limits,
        remaining_ms: Callable[[], int],
        *,
        pools: Pools | None = None,
        name: str = "worker-record",
    ) -> None:
        if pools is not None and pools.limits != limits:
            raise ValueError("the pools were sized for other limits")
        self.limits = limits
        self._remaining_ms = remaining_ms
        self._kept = pools
        self._name = name
        self._started_ms = 0  # the invocation's remaining time when run() began

    def run(self, jobs: Sequence[Job[R]]) -> list[R | Exception]:
        """Each job's result, or the exception it raised (NotStarted: never started), in
        the order given."""
        results: list[Any] = [None] * len(jobs)
        self._started_ms = self._remaining_ms()
        by_lane: dict[Lane, list[int]] = {}
        for index in sorted(range(len(jobs)), key=lambda i: (jobs[i].order, i)):
            by_lane.setdefault(jobs[index].lane, []).append(index)
        pools = (
            {lane: self._kept.pool(lane) for lane in by_lane}
            if self._kept is not None
            else {
                lane: concurrent.futures.ThreadPoolExecutor(
                    max_workers=min(len(indexes), self._bound(lane)),
                    thread_name_prefix=f"{self._name}-{lane.value}",
                )
                for lane, indexes in by_lane.items()
            }
        )
        try:
            # A pool starts what it is given in the order it was given (its queue is
            # FIFO), so each lane's records start earliest fire first.
            futures = {
                index: pools[lane].submit(self._start, jobs[index])
                for lane, indexes in by_lane.items()
                for index in indexes
            }
            for index, future in futures.items():
                try:
                    results[index] = future.result()
                except Exception as exc:  # handed back as the record's outcome
                    results[index] = exc
        finally:
            if self._kept is None:
                for pool in pools.values():
                    pool.shutdown(wait=True)
        return results

    def _bound(self, lane: Lane) -> int:
        return self.limits.compute if lane is Lane.COMPUTE else self.limits.in_flight

    def _start(self, job: Job[R]) -> R:
        # Decided when the record's turn comes, not when the batch arrives: a record that
        # waited behind slow ones sees how much of the invocation is really left.
        needs = max(self.limits.reserve_seconds, job.needs_seconds)
        remaining = self._remaining_ms()
        if remaining < needs * 1000:
            raise NotStarted(f"less than the {needs:.0f} s it needs was left of the invocation")
        waited = (self._started_ms - remaining) / 1000 - job.hold_seconds
        if job.lane is Lane.COMPUTE and waited > self.limits.compute_wait_seconds:
            raise NotStarted(f"waited {waited:.0f} s for a vCPU: another invocation may have one")
        return job.call()


def gated(run: Callable[..., R], slots: int) -> Callable[..., R]:
    """``run`` with at most ``slots`` calls under way at once, whichever thread calls it:
    the Python runner, so that a Python job the batch could not tell from a remote one
    (a workflow node, whose target is read in its run) still waits for a vCPU."""
    gate = threading.BoundedSemaphore(slots)

    def call(*args: Any, **kwargs: Any) -> R:
        with gate:
            return run(*args, **kwargs)

    return call
