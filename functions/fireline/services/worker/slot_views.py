"""One container's view of a busy tenant's slots, shared by its records.

A tenant running many jobs at once takes its slots on a read of them (see
``SlotKeeping._take_read``): the read shows which numbers are free, and which are held
by runs that have finished (handed on: see ``_take_one``). Read by each record, a burst
of one tenant's records in one invocation made as many reads (a Query per
``quota.SLOT_KEY_BLOCK`` numbers, and the client CPU of parsing every slot), and the
records all took from the same free numbers: of each number's takers all but one were
refused, a write unit each, on keys that take 1,000 a second.

So a container keeps one view per tenant. The first record that needs one reads it; the
records that need one while it is read wait for it, and those that come within
``FRESH_SECONDS`` of the read use it as it is. Each number the view shows free, or held
by a run that may have finished, is handed to one record of this container only, and
only the container's share of them (see :meth:`SlotViews.candidates`); a number one of
its own runs ended holding goes to its next record of the tenant with no read at all.
Other containers race for the same numbers as before: a conditional put decides each,
so the limit is never passed.

A record waiting for the view's read waits as services.waiting says (at most
``waiting.WAIT_LIMIT_SECONDS``), then reads on its own.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from fireline import ports
from fireline.domain import quota
from fireline.services import waiting

# How long a view is used before the next record that needs one reads it again: about
# the time a record waiting for a free slot waits between looks (see SlotKeeping).
FRESH_SECONDS = 0.25
# A container's least allowance of contended takes a read (see SlotViews.candidates): a
# record's few tries.
LEAST_ALLOWANCE = 3
# Views a container keeps: past this many tenants, the stale ones go.
MOST_VIEWS = 1_000

Read = Callable[[], tuple[list[quota.Slot], int | None]]


@dataclass
class Candidates:
    """A range's numbers other containers may take too, as one read showed them, in the
    order this container's records try them: free ones, then ones held by runs taken
    long enough ago to have most likely finished, then the rest (each group shuffled:
    every container reads the same slots, and taken strictly in one order they would
    all try the same few). ``holders``: the holder of each held one, whose row is read
    before it is handed on. ``allowance``: how many more of them this container's
    records may try until the next read (see SlotViews.candidates)."""

    numbers: list[int]
    holders: dict[int, str]
    allowance: int
    next: int = 0  # the first number no record of this container was handed


@dataclass
class View:
    """A tenant's slots and limit override as read at ``read_at`` (the clock's monotonic
    seconds), and what this container did with them since."""

    held: list[quota.Slot] = field(default_factory=list)
    override: int | None = None
    read_at: float = float("-inf")
    # Numbers handed to a record of this container since the read: no other record of
    # it tries them.
    handed: set[int] = field(default_factory=set)
    # Numbers whose run in this container has ended, not handed out again, and their
    # holders: a finished run's, left held to be handed on (see SlotKeeping._take_one),
    # taken over with no read of its row; None: given back, free.
    ended: dict[int, str | None] = field(default_factory=dict)
    # Each range's candidates (by its first number: the limit's, a class share's band),
    # worked out once per read.
    candidates: dict[int, Candidates] = field(default_factory=dict)
    failure: Exception | None = None
    done: threading.Event = field(default_factory=threading.Event)


class SlotViews:
    """The container's views, one per tenant (see the module's docstring)."""

    def __init__(
        self,
        clock: ports.Clock,
        *,
        poll: bool = False,
        fresh_seconds: float = FRESH_SECONDS,
    ) -> None:
        self._clock = clock
        self._poll = poll
        self._fresh_seconds = fresh_seconds
        self._lock = threading.Lock()
        self._views: dict[str, View] = {}

    @property
    def polls(self) -> bool:
        """Do this container's waits look on the clock's sleeps (the simulator)?"""
        return self._poll

    def view(self, tenant_id: str, read: Read) -> View:
        """The tenant's view: this container's last one if it is fresh (or being read:
        then once the read is in), else a new read (``read``) made by this record. A
        read that failed raises its error in each record that waited for it."""
        now = self._clock.monotonic()
        with self._lock:
            current = self._views.get(tenant_id)
            reads = current is None or (
                current.done.is_set()
                and (current.failure is not None or now - current.read_at >= self._fresh_seconds)
            )
            if reads:
                if len(self._views) >= MOST_VIEWS and tenant_id not in self._views:
                    self._forget_stale(now)
                # What this container's own runs left stays known past the read: the read
                # shows a finished run's slot held, as any other.
                ended = dict(current.ended) if current is not None else {}
                current = self._views[tenant_id] = View(read_at=now, ended=ended)
            assert current is not None
        if reads:
            self._read(current, read)
        elif not self._await(current):
            own = View(read_at=now)
            self._read(own, read)
            current = own
        if current.failure is not None:
            raise current.failure
        return current

    def take_ended(
        self, view: View, numbers: range, most: int = 3
    ) -> Iterator[tuple[int, str | None]]:
        """Up to ``most`` numbers of ``numbers`` whose run in this container has ended
        (see View.ended), with their holders, each handed to this record as it is asked
        for and no longer counted as ended."""
        for _ in range(most):
            with self._lock:
                number = next((n for n in view.ended if n in numbers), None)
                if number is None:
                    return
                holder = view.ended.pop(number)
                view.handed.add(number)
            yield number, holder

    def candidates(
        self,
        view: View,
        numbers: range,
        *,
        now_ms: int,
        older_than_ms: int,
        rng: random.Random,
        containers: int,
    ) -> Candidates:
        """The contended numbers of ``numbers`` in ``view`` (see Candidates), worked out
        on the first call after the read. This container's allowance of them is its
        share, one ``containers``-th (at least LEAST_ALLOWANCE): every live container
        may be starting the tenant's jobs off the same read, and all of them trying
        every candidate would spend a write unit for each container past the first on
        each, on keys that take 1,000 a second; a tenant at its limit then has its own
        takes throttled. ``older_than_ms``: a held slot expiring before it was taken
        long enough ago that its run has most likely finished."""
        with self._lock:
            found = view.candidates.get(numbers.start)
            if found is not None:
                return found
            held = {s.number: s for s in view.held if not s.free(now_ms) and s.number in numbers}
            free = [n for n in numbers if n not in held]
            likely_over = [n for n, s in held.items() if s.expires_at_ms < older_than_ms]
            rest = [n for n, s in held.items() if s.expires_at_ms >= older_than_ms]
            for group in (free, likely_over, rest):
                rng.shuffle(group)
            ordered = free + likely_over + rest
            found = view.candidates[numbers.start] = Candidates(
                numbers=ordered,
                holders={n: s.holder for n, s in held.items()},
                allowance=max(LEAST_ALLOWANCE, -(-len(ordered) // max(1, containers))),
            )
            return found

    def hand_out(self, view: View, found: Candidates) -> Iterator[int]:
        """Up to three of ``found``'s numbers, in order, while this container's allowance
        of them lasts, each handed to this record as it is asked for (one the caller
        stops before stays for the next record), skipping those handed out already."""
        for _ in range(3):
            with self._lock:
                if found.allowance <= 0:
                    return
                while found.next < len(found.numbers) and (
                    found.numbers[found.next] in view.handed
                ):
                    found.next += 1
                if found.next >= len(found.numbers):
                    return
                number = found.numbers[found.next]
                found.next += 1
                found.allowance -= 1
                view.handed.add(number)
            yield number

    def given_back(self, tenant_id: str, number: int) -> None:
        """A run of this container gave ``number`` back: free in the tenant's view."""
        self._ended(tenant_id, number, None)

    def finished(self, tenant_id: str, number: int, holder: str) -> None:
        """A run of this container holding ``number`` finished and left it held, to be
        handed on: the tenant's view knows its holder is over."""
        self._ended(tenant_id, number, holder)

    def _ended(self, tenant_id: str, number: int, holder: str | None) -> None:
        with self._lock:
            current = self._views.get(tenant_id)
            if current is not None:
                current.ended[number] = holder
                current.handed.discard(number)

    def _read(self, view: View, read: Read) -> None:
        try:
            view.held, view.override = read()
        except Exception as exc:  # each record that waited for it raises it too
            view.failure = exc
        finally:
            view.done.set()

    def _await(self, view: View) -> bool:
        """Wait for the view's read: True once it is in, False past the limit."""
        return waiting.wait_for(view.done, self._clock, poll=self._poll)

    def _forget_stale(self, now: float) -> None:
        """Drop the views no record would use any more (called under the lock)."""
        for tenant_id in [
            t
            for t, v in self._views.items()
            if v.done.is_set() and now - v.read_at >= self._fresh_seconds
        ]:
            del self._views[tenant_id]
