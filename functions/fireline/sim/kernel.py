"""A discrete-event kernel that runs real code in virtual time.

The ticker and the workers are ordinary threaded Python. Here each of their threads is a
greenlet, and only one runs at a time: the kernel switches to the thread whose virtual
wake-up time is earliest, and takes control back when that thread waits (for a simulated
AWS call, a sleep, or other threads). So the code under test is the production code, its
interleavings are decided by virtual time alone (deterministic for a seed), and a minute
of simulated Lambda runs in however long its CPU work takes here.

Greenlets, not OS threads: a full-size run has tens of thousands of threads waiting at
once (a record's dispatch thread waits on its target), and hands control over millions
of times. Between OS threads each hand-over is two context switches and a GIL hand-off,
and it slowed as the waiting threads grew (30 us with a few hundred, 500 us with twenty
thousand); a greenlet switch is a microsecond or two. What the code under test sees is
the same: it may not block on a real lock another simulated thread holds either way (one
runs at a time), and state it keeps per thread lives in a ContextVar, which each greenlet
has its own of.

Virtual time advances in two ways:

- waits: a simulated call's latency, a sleep;
- CPU: the code's own work between waits, measured with ``time.thread_time`` and scaled by
  its process's CPU share (a 512 MB Lambda has about 0.29 of a vCPU, so a millisecond here
  is ~3.5 ms there), and serialized per process, since one invocation's threads share its
  CPU. Deterministic runs scale measured CPU by 0 and charge fixed costs instead.

A :class:`Process` is one Lambda invocation: it has a CPU share and a deadline. At the
deadline it is killed: each of its threads raises :class:`Killed` the next time it would
run, and any simulated call it makes from then on fails before taking effect, so a killed
invocation stops mid-write exactly where it was.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import greenlet


class Killed(BaseException):
    """The invocation this code runs in reached its deadline (a Lambda timeout).

    A BaseException, so the code under test cannot catch it with ``except Exception``: a
    killed Lambda does not get to clean up either.
    """


@dataclass(eq=False)
class Process:
    """One Lambda invocation (or the platform itself): a CPU share and a deadline."""

    name: str
    # The share of a vCPU this process has (a 512 MB Lambda: about 0.29). 0: its CPU is
    # not modelled (the platform's own bookkeeping).
    share: float = 0.0
    # Measure the code's CPU (scaled by 1 / share); False for deterministic runs, which
    # count only the fixed charges (an SDK call's client side).
    measure: bool = True
    deadline: float | None = None  # virtual seconds; killed there
    killed: bool = False
    cpu_free_at: float = 0.0  # when this process's CPU finishes the work given to it
    cpu_used: float = 0.0  # virtual CPU seconds used (measured and charged)
    threads: list[SimThread] = field(default_factory=list)
    sweep_at: int = 4096  # forget its finished threads when it has this many

    @property
    def slowdown(self) -> float:
        """Virtual CPU seconds per second of this machine's CPU."""
        return 1.0 / self.share if self.share > 0 else 0.0

    @property
    def cpu_scale(self) -> float:
        return self.slowdown if self.measure else 0.0


class SimThread:
    def __init__(self, kernel: Kernel, fn: Callable[[], object], process: Process, name: str):
        self.kernel = kernel
        self.fn = fn
        self.process = process
        self.name = name
        self.done = False
        self.error: BaseException | None = None
        self.result: object = None
        # Ends by returning to the driver (the kernel's run), whoever spawned it.
        self._glet = greenlet.greenlet(self._main, parent=kernel._driver)
        self._token = 0  # the wake-up that counts; older heap entries are ignored
        self._run_from = 0.0  # virtual time this turn's CPU started
        self._cpu_mark = 0.0  # thread_time() at the start of the measured stretch
        self._measuring = False
        self._charged = 0.0  # fixed virtual CPU charged during this turn
        self._joiners: list[SimThread] = []

    def _main(self) -> None:
        self._begin_turn()
        try:
            if self.process.killed:
                raise Killed
            self.result = self.fn()
        except Killed:
            pass
        except BaseException as exc:  # reported by the kernel to its caller
            self.error = exc
        finally:
            end = self._end_turn()
            self.done = True
            for joiner in self._joiners:
                self.kernel._schedule(joiner, end)
            self._joiners.clear()

    # --- CPU accounting of one turn (the stretch between two waits) ----------------------

    def _begin_turn(self) -> None:
        process = self.process
        self._run_from = max(self.kernel._now, process.cpu_free_at)
        self._charged = 0.0
        self._cpu_mark = time.thread_time()
        self._measuring = True

    def _measured(self) -> float:
        if not self._measuring:
            return 0.0
        return (time.thread_time() - self._cpu_mark) * self.process.cpu_scale

    def _pause(self) -> None:
        """Stop measuring: work done now is not this process's (a store's server side)."""
        self._charged += self._measured()
        self._measuring = False

    def _resume(self) -> None:
        self._cpu_mark = time.thread_time()
        self._measuring = True

    def _end_turn(self) -> float:
        used = self._charged + self._measured()
        self._measuring = False
        end = self._run_from + used
        self.process.cpu_free_at = max(self.process.cpu_free_at, end)
        self.process.cpu_used += used
        return end

    def now(self) -> float:
        return self._run_from + self._charged + self._measured()


class Kernel:
    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("start needs a UTC offset")
        self.start = start
        self._now = 0.0
        self._heap: list[tuple[float, int, int, SimThread]] = []
        self._seq = itertools.count()
        # The greenlet that drives the run (this one): every simulated thread returns to it.
        self._driver = greenlet.getcurrent()
        self._current: SimThread | None = None
        self.platform = Process("platform")
        self.switches = 0
        self._threads: list[SimThread] = []
        self._sweep_at = 16384

    # --- time ------------------------------------------------------------------------------

    def now(self) -> float:
        """Virtual seconds since start, as the running thread sees them (its CPU included)."""
        current = self._current
        if current is not None and greenlet.getcurrent() is current._glet:
            return current.now()
        return self._now

    def wall(self) -> datetime:
        return self.start + timedelta(seconds=self.now())

    # --- threads ---------------------------------------------------------------------------

    def spawn(
        self,
        fn: Callable[[], object],
        *,
        process: Process | None = None,
        at: float | None = None,
        name: str = "",
    ) -> SimThread:
        owner = process or self.platform
        thread = SimThread(self, fn, owner, name or getattr(fn, "__name__", "thread"))
        # Forget finished threads now and then: a long run spawns hundreds of thousands.
        # Each list is swept when it has doubled since its last sweep, so that tens of
        # thousands waiting at once do not make every spawn a sweep.
        if len(owner.threads) > owner.sweep_at:
            owner.threads = [t for t in owner.threads if not t.done]
            owner.sweep_at = max(4096, 2 * len(owner.threads))
        if len(self._threads) > self._sweep_at:
            self._threads = [t for t in self._threads if not t.done]
            self._sweep_at = max(16384, 2 * len(self._threads))
        owner.threads.append(thread)
        self._threads.append(thread)
        self._schedule(thread, self.now() if at is None else at)
        return thread

    def current(self) -> SimThread:
        current = self._current
        if current is None or greenlet.getcurrent() is not current._glet:
            raise RuntimeError("not inside a simulated thread")
        return current

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of virtual time (from the running thread's own clock)."""
        thread = self.current()
        end = thread._end_turn()
        self._schedule(thread, end + max(0.0, seconds))
        self._yield(thread)

    def charge(self, cpu_seconds: float) -> None:
        """Add modelled CPU (seconds of this machine's CPU, e.g. an SDK call's client
        side) to the running thread, scaled to its process's share like measured CPU."""
        thread = self.current()
        thread._charged += cpu_seconds * thread.process.slowdown

    def unmeasured(self) -> _Unmeasured:
        """A context in which the running thread's CPU is not counted (a store's server
        side, simulated in this process)."""
        return _Unmeasured(self.current())

    def alive(self) -> None:
        """Raise Killed if the running thread's invocation has been killed."""
        if self.current().process.killed:
            raise Killed

    def join(self, threads: list[SimThread]) -> None:
        """Wait until every thread in ``threads`` has finished."""
        me = self.current()
        for other in threads:
            while not other.done:
                other._joiners.append(me)
                me._end_turn()
                self._yield(me, scheduled=False)

    def kill_at(self, process: Process, deadline: float) -> None:
        process.deadline = deadline
        self.spawn(lambda: self._kill(process), at=deadline, name=f"kill-{process.name}")

    def kill(self, process: Process) -> None:
        """Kill ``process`` now (its threads raise Killed when next they would run)."""
        self._kill(process)

    def _kill(self, process: Process) -> None:
        process.killed = True
        for thread in process.threads:
            if not thread.done and thread is not self._current:
                self._schedule(thread, self._now)

    def _schedule(self, thread: SimThread, at: float) -> None:
        thread._token += 1
        heapq.heappush(self._heap, (at, next(self._seq), thread._token, thread))

    def _yield(self, thread: SimThread, *, scheduled: bool = True) -> None:
        del scheduled  # the caller has (or has not) put the thread back on the heap
        self._current = None
        self._driver.switch()
        thread._begin_turn()
        if thread.process.killed:
            raise Killed

    # --- driving -----------------------------------------------------------------------------

    def run(self, until: float) -> None:
        """Run every thread whose turn comes at or before ``until`` virtual seconds."""
        while self._heap and self._heap[0][0] <= until:
            at, _, token, thread = heapq.heappop(self._heap)
            if token != thread._token or thread.done:
                continue
            self._now = max(self._now, at)
            self._current = thread
            self.switches += 1
            thread._glet.switch()
            self._current = None
            if thread.error is not None:
                error, thread.error = thread.error, None
                raise error
        self._now = max(self._now, until)

    def run_all(self) -> None:
        self.run(float("inf"))

    def close(self) -> None:
        """Stop every thread still waiting (as if every process were killed), so none is
        left blocked when the simulation is dropped."""
        for thread in self._threads:
            if not thread.done:
                thread.process.killed = True
                self._schedule(thread, self._now)
        while self._heap:
            _, _, token, thread = heapq.heappop(self._heap)
            if token != thread._token or thread.done:
                continue
            self._current = thread
            thread._glet.switch()
            self._current = None
            thread.error = None  # a thread that fails on its way out changes nothing

    def idle(self) -> bool:
        return not any(token == t._token and not t.done for _, _, token, t in self._heap)


class _Unmeasured:
    def __init__(self, thread: SimThread) -> None:
        self._thread = thread

    def __enter__(self) -> None:
        self._thread._pause()

    def __exit__(self, *exc: object) -> None:
        self._thread._resume()


class SimClock:
    """ports.Clock on the kernel: wall time from the simulated start, monotonic = virtual."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def now(self) -> datetime:
        return self.kernel.wall()

    def monotonic(self) -> float:
        return self.kernel.now()

    def sleep(self, seconds: float) -> None:
        self.kernel.sleep(seconds)
