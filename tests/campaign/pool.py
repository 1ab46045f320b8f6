"""The campaign's small pool of workers (the noisy neighbour): each worker's invocation on
a thread of its own, parked inside a flooding tenant's job until the pool ends it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from campaign.faults import Violation
from fireline.services import targets


class _Ledger(Protocol):
    def run(self, context: targets.JobContext) -> dict[str, Any]: ...


class Lane:
    """One worker of the small pool (the noisy neighbour): its invocation runs on a thread
    of its own, parked inside a hold job's run until the pool lets it end. Only one
    thread moves at a time (the machine waits while a lane runs), so runs stay seeded."""

    local = threading.local()

    def __init__(self) -> None:
        self.parked = threading.Event()
        self.release = threading.Event()
        self.thread: threading.Thread | None = None
        self.tenant: str | None = None
        self.ends_at = 0.0  # monotonic
        self.receipt = ""
        self.handled = False
        # Set by the lane's thread as its run ends, before it says so: whether a lane
        # runs is never read from the thread's own liveness, which lags its run's end
        # by however long the thread takes to exit (and would make runs unrepeatable).
        self.finished = False

    def start(self, run: Callable[[], bool]) -> None:
        def body() -> None:
            Lane.local.lane = self
            try:
                self.handled = run()
            except BaseException:  # a killed invocation: its message is not acknowledged
                self.handled = False
            finally:
                self.finished = True
                self.parked.set()

        self.thread = threading.Thread(target=body, name="campaign-lane", daemon=True)
        self.thread.start()
        if not self.parked.wait(60):
            raise Violation("a pool worker neither parked nor ended")

    @property
    def running(self) -> bool:
        return self.thread is not None and not self.finished

    def end(self) -> bool:
        """Let the parked run finish; whether its record succeeded."""
        assert self.thread is not None
        self.release.set()
        self.thread.join(60)
        if self.thread.is_alive():
            raise Violation("a pool worker did not end")
        return self.handled


def hold(ledger: _Ledger, context: targets.JobContext) -> dict[str, Any]:
    """A flooding tenant's job: on a pool worker, it runs until the pool ends it."""
    result = ledger.run(context)
    lane: Lane | None = getattr(Lane.local, "lane", None)
    if lane is not None:
        lane.tenant = context.tenant_id
        lane.parked.set()
        lane.release.wait(60)
    return result
