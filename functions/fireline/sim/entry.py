"""The deployed worker handler as a simulated invocation's entry point.

fireline.handlers.worker.handler is called as Lambda calls it: an SQS event of the batch's
records and a context, its partial batch response read back. While installed, its worker
is the simulation's and its thread pools are simulated threads, so whatever the handler
does with a batch runs in virtual time: its intake, and its dispatch by the real
services.worker.dispatcher.Dispatcher (lanes, in-flight bound, the check that a record's
deadline still fits the invocation, the hand-back of records left unstarted), with the
bounds the function's environment sets (:func:`limits_for`).
"""

from __future__ import annotations

import collections
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fireline import ports
from fireline.domain import errors
from fireline.services.worker import dispatcher as worker_dispatch
from fireline.sim import kernel as sim_kernel
from fireline.sim import network as sim_network
from fireline.sim import platform as sim_platform

# Lambda's vCPUs: one per 1,769 MB, six at most (10,240 MB).
MAX_VCPUS = 6


def vcpus(memory_mb: int) -> int:
    """The vCPUs a function of ``memory_mb`` sees (os.cpu_count() in its environment)."""
    return max(1, min(MAX_VCPUS, math.ceil(memory_mb / worker_dispatch.ONE_VCPU_MB)))


def limits_for(environment: Mapping[str, str], memory_mb: int) -> worker_dispatch.Limits:
    """The dispatcher's bounds as the deployed function computes them (wiring's
    dispatch_limits): WORKER_IN_FLIGHT from its environment (absent: the dispatcher's
    default), Python jobs as many at once as its memory buys vCPUs."""
    raw = environment.get("WORKER_IN_FLIGHT", "")
    try:
        in_flight = int(raw) if raw != "" else worker_dispatch.DEFAULT_IN_FLIGHT
    except ValueError as exc:
        raise errors.ValidationError(f"{raw!r} is not a number", field="WORKER_IN_FLIGHT") from exc
    return worker_dispatch.Limits(
        in_flight=in_flight,
        compute=worker_dispatch.compute_slots(memory_mb, vcpus(memory_mb)),
    )


class _SimFuture:
    """concurrent.futures.Future as the dispatcher uses it: ``result()``, on simulated
    threads."""

    def __init__(self, executor: _SimExecutor) -> None:
        self._executor = executor
        self.done = False
        self._value: Any = None
        self._error: Exception | None = None

    def settle(self, value: Any = None, error: Exception | None = None) -> None:
        self._value, self._error, self.done = value, error, True

    def result(self) -> Any:
        while not self.done:
            live = self._executor.live()
            if not live:
                raise RuntimeError("the job was never run")
            # The lane's threads run its jobs in the order given and end when none is
            # left: joining one of them waits for at least the job ahead of this one.
            self._executor.kernel.join(live[:1])
        if self._error is not None:
            raise self._error
        return self._value


class _SimExecutor:
    """concurrent.futures.ThreadPoolExecutor as the dispatcher uses it: ``submit``, with
    up to ``max_workers`` simulated threads of the submitting invocation, taking the
    jobs first in, first out (as the real executor's queue does)."""

    def __init__(
        self,
        kernel: sim_kernel.Kernel,
        max_workers: int,
        name: str,
        peaks: dict[str, int] | None = None,
    ) -> None:
        self.kernel = kernel
        self.max_workers = max_workers
        self.name = name
        # Threads alive at once, at most, by lane name: shared by a run's executors.
        self.peaks = peaks if peaks is not None else {}
        self._pending: collections.deque[tuple[_SimFuture, Callable[[], Any]]] = collections.deque()
        self._threads: list[sim_kernel.SimThread] = []

    def live(self) -> list[sim_kernel.SimThread]:
        self._threads = [t for t in self._threads if not t.done]
        return self._threads

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> _SimFuture:
        future = _SimFuture(self)
        self._pending.append((future, lambda: fn(*args)))
        if len(self.live()) < self.max_workers:
            process = self.kernel.current().process
            n = len(self._threads)
            self._threads.append(
                self.kernel.spawn(
                    self._work, process=process, name=f"{process.name}-{self.name}{n}"
                )
            )
            self.peaks[self.name] = max(self.peaks.get(self.name, 0), len(self._threads))
        return future

    def _work(self) -> None:
        # Only one simulated thread runs at a time: taking from the deque is safe.
        while self._pending:
            future, call = self._pending.popleft()
            try:
                future.settle(call())
            except Exception as exc:  # the job's outcome, as a real future keeps it
                future.settle(error=exc)

    def shutdown(self, wait: bool = True) -> None:
        return None


class SimPools(worker_dispatch.Pools):
    """worker_dispatch.Pools on simulated threads: each lane an executor of its bound,
    its threads those of the invocation that submits (its CPU share, its deadline). Made
    per invocation: a simulated thread belongs to one invocation's process."""

    def __init__(
        self,
        kernel: sim_kernel.Kernel,
        limits: worker_dispatch.Limits,
        peaks: dict[str, int] | None = None,
    ) -> None:
        # Not the real pools' threads: the parent's __init__ would start OS threads.
        self.limits = limits
        self.executors = {
            lane: _SimExecutor(
                kernel,
                limits.compute if lane is worker_dispatch.Lane.COMPUTE else limits.in_flight,
                lane.value,
                peaks,
            )
            for lane in worker_dispatch.Lane
        }

    def pool(self, lane: worker_dispatch.Lane) -> Any:
        return self.executors[lane]

    def close(self) -> None:
        return None


class _SimThreadPool:
    """adapters.threads.ThreadPool as the deployed handler uses it, on simulated
    threads of the calling invocation."""

    def __init__(self, kernel: sim_kernel.Kernel, max_workers: int = 32, name: str = "") -> None:
        self._pool = sim_network.SimPool(kernel, max_workers)

    def run(self, calls: Any) -> list[Any]:
        return self._pool.run(calls)

    def close(self) -> None:
        return None

    def __enter__(self) -> _SimThreadPool:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@dataclass
class Context:
    """The Lambda context the deployed handler reads (Powertools' keys, the time left)."""

    function_name: str
    memory_limit_in_mb: int
    aws_request_id: str
    remaining: Callable[[], int]
    function_version: str = "$LATEST"
    log_group_name: str = "/aws/lambda/sim"
    log_stream_name: str = "sim"

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining()


class HandlerEntry:
    """The deployed entry point, fireline.handlers.worker.handler, run as Lambda runs
    it: an SQS event of the batch's records and a context, its partial batch response
    read back. While installed, the handler's worker is the simulation's (wiring.worker,
    one for each execution environment, built on its first invocation as the deployed
    module-level cache builds it; ``make_worker`` builds it),
    its thread pools are simulated threads (adapters.threads.ThreadPool), and its
    dispatcher's bounds and pools (wiring.dispatch_limits, wiring.dispatch_pools) are
    the deployed function's (:func:`limits_for` its ``environment`` and ``memory_mb``)
    on simulated threads of each invocation (:class:`SimPools`). The function's
    environment is the template's, so whatever else the handler reads from it is the
    deployed default. Installed for a run and removed after it (``remove``):
    process-wide, as one simulation runs at a time."""

    def __init__(
        self,
        kernel: sim_kernel.Kernel,
        environment: Mapping[str, str],
        *,
        memory_mb: int = worker_dispatch.ONE_VCPU_MB,
    ) -> None:
        self.kernel = kernel
        self.environment = dict(environment)
        # Lambda tells the function its memory; the dispatcher's compute lane reads it.
        self.environment.setdefault("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", str(memory_mb))
        self.limits = limits_for(self.environment, memory_mb)
        # Most records of one invocation under way at once, by lane.
        self.peaks: dict[str, int] = {}
        self._saved: list[tuple[Any, str, Any]] = []
        self._saved_env: dict[str, str | None] = {}
        # Each running invocation's environment, by the invocation's process.
        self._environments: dict[sim_kernel.Process, sim_platform.Environment] = {}
        self._make_worker: Callable[[], Any] | None = None

    def _worker(self) -> Any:
        """wiring.worker() as the calling invocation's environment caches it."""
        environment = self._environments[self.kernel.current().process]
        if environment.worker is None:
            assert self._make_worker is not None
            environment.worker = self._make_worker()
        return environment.worker

    def dispatch_pools(self) -> SimPools:
        """One invocation's pools: its threads are the calling invocation's."""
        return SimPools(self.kernel, self.limits, self.peaks)

    @property
    def installed(self) -> bool:
        return bool(self._saved)

    def install(self, make_worker: Callable[[], Any]) -> None:
        import os

        from fireline import wiring
        from fireline.adapters import threads

        kernel = self.kernel

        def pool(max_workers: int = 32, name: str = "") -> _SimThreadPool:
            return _SimThreadPool(kernel, max_workers, name)

        limits = self.limits
        self._make_worker = make_worker
        replacements: list[tuple[Any, str, Any]] = [
            (wiring, "worker", self._worker),
            (threads, "ThreadPool", pool),
            (wiring, "dispatch_limits", lambda: limits),
            (wiring, "dispatch_pools", self.dispatch_pools),
        ]
        for owner, attribute, replacement in replacements:
            self._saved.append((owner, attribute, getattr(owner, attribute)))
            setattr(owner, attribute, replacement)
        for key, setting in self.environment.items():
            self._saved_env[key] = os.environ.get(key)
            os.environ[key] = setting

    def remove(self) -> None:
        import os

        for owner, attribute, original in reversed(self._saved):
            setattr(owner, attribute, original)
        self._saved.clear()
        for key, before in self._saved_env.items():
            if before is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = before
        self._saved_env.clear()

    def call(
        self,
        received: list[ports.ReceivedMessage],
        context: Context,
        environment: sim_platform.Environment,
    ) -> list[bool]:
        """Each record's outcome: True if the handler reported it failed. Called on the
        invocation's own thread, in ``environment``."""
        process = self.kernel.current().process
        self._environments[process] = environment
        try:
            return self._call(received, context)
        finally:
            del self._environments[process]

    def _call(self, received: list[ports.ReceivedMessage], context: Context) -> list[bool]:
        from fireline.handlers import worker as worker_handler

        event = {
            "Records": [
                {
                    "messageId": f"{n}",
                    "receiptHandle": m.receipt,
                    "body": json.dumps(m.body),
                    "attributes": {"ApproximateReceiveCount": str(m.receive_count)},
                    "eventSource": "aws:sqs",
                }
                for n, m in enumerate(received)
            ]
        }
        answer = worker_handler.handler(event, context)
        failed = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
        return [str(n) in failed for n in range(len(received))]
