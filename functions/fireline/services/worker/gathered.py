"""Consistent schedule reads that records make after their claims, gathered into one
BatchGetItem a moment.

A fire the ticker sent without its row has its schedule read again after its claim (see
``StillWanted._unwanted_after_claim``): the read must come after that record's own claim,
so it cannot be the batch's read made at its start. But a burst's records claim within
milliseconds of each other, and a GetItem each cost each record a call's client CPU
(serializing, signing, parsing), the most of any step once the records are many. So the
first record to ask opens a round, waits a few milliseconds for the others of its moment
to join, and reads them all with one consistent BatchGetItem; a record that asks once
the round's request has gone opens the next one. Every read still comes after its own
record's claim (its request is made after the record joined), so a change that returned
before a record's claim is seen as a GetItem of its own would see it.

A key the batch read did not answer (no such schedule, or one it could not read) is read
on its own, and a batch read that failed is replaced by each record's own read: the
gathering saves calls, never changes an answer, and is never a new way for a record to fail.

The round stays open on the clock's sleep. A record that joined waits for the round's
answer on an event (a real wait: a fake clock's sleep would move time for everyone), for
at most ``waiting.WAIT_LIMIT_SECONDS``, then reads on its own; in the simulator, whose threads may
wait only on its clock, it looks for the answer on the clock's sleeps instead (``poll``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from fireline import ports
from fireline.domain import model
from fireline.services import waiting

# How long a round stays open for other records to join it: a few of a burst's claims.
GATHER_SECONDS = 0.003
# DynamoDB's most keys a BatchGetItem takes: a fuller round opens the next.
MOST_KEYS = 100

Key = tuple[str, str]


@dataclass
class _Round:
    keys: set[Key] = field(default_factory=set)
    found: dict[Key, model.Schedule] | None = None
    failed: bool = False
    done: threading.Event = field(default_factory=threading.Event)


class GatheredReads:
    """``get`` as ``schedules.get(tenant_id, schedule_id)`` (consistent), gathered. The
    store comes with each call (the worker's, which a test may swap)."""

    def __init__(
        self, clock: ports.Clock, *, gather_seconds: float = GATHER_SECONDS, poll: bool = False
    ) -> None:
        self._clock = clock
        self._gather_seconds = gather_seconds
        self._poll = poll
        self._lock = threading.Lock()
        self._open: _Round | None = None
        self.requests = 0  # batch reads made (for tests and figures)

    def get(
        self, schedules: ports.ScheduleStore, tenant_id: str, schedule_id: str
    ) -> model.Schedule | None:
        key = (tenant_id, schedule_id)
        with self._lock:
            current = self._open
            leads = current is None or len(current.keys) >= MOST_KEYS
            if leads:
                current = self._open = _Round()
            assert current is not None
            current.keys.add(key)
        if leads:
            self._lead(schedules, current)
        elif not self._await(current):
            return schedules.get(tenant_id, schedule_id)
        if current.failed or current.found is None or key not in current.found:
            return schedules.get(tenant_id, schedule_id)
        return current.found[key]

    def _lead(self, schedules: ports.ScheduleStore, current: _Round) -> None:
        self._clock.sleep(self._gather_seconds)
        with self._lock:
            if self._open is current:
                self._open = None  # later records open the next round
            keys = sorted(current.keys)
        try:
            self.requests += 1
            found = schedules.get_many(keys, consistent=True)
        except Exception:  # every record of the round reads on its own instead
            current.failed = True
        else:
            current.found = {(s.tenant_id, s.schedule_id): s for s in found}
        finally:
            current.done.set()

    def _await(self, current: _Round) -> bool:
        """Wait for the round's answer: True once it is there, False past the limit."""
        return waiting.wait_for(current.done, self._clock, poll=self._poll)
