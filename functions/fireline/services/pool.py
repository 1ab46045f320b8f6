"""A job class's invocations as really running, and each tenant's share of them.

A running job keeps its worker's invocation busy until it ends (an invocation returns when
its whole batch has), and a message waits for an invocation that is free. So a tenant
holding every invocation of a class makes every other tenant's jobs wait, however short
they are, and how many invocations there are is not what the class is configured with
(its event source's maximum concurrency) but what really runs: the account's concurrency,
the pollers' ramp, the local cloud's two processes. A share of the configured size (half
of 50) is no bound at all when two invocations run.

So each worker's container (one invocation at a time) says it is alive in the class's
register every few seconds (``SlotStore.join_pool``: one write per container per period,
whatever the number of jobs), and the answer is how many containers of the class are
alive. A tenant occupies at most ``quota.class_limit`` of that many at once: a container
running any job of the tenant holds one of the tenant's invocation slots
(``quota.invocation_band``), taken when the invocation's first job of the tenant starts
and given back when the invocation returns. Its other jobs of that tenant, side by side
in the same invocation or after, share it: they occupy nothing more. A tenant past its share
is deferred (sent again for later, no attempt spent), so at least one container of every
two stays free of it for the others.

Costs: the register's write per container per ``refresh_seconds`` (whatever the number of
jobs), and, only while fewer containers are alive than the class is configured for (at
that size the share of the class's jobs, half of it, already leaves room), per
invocation and tenant (not per job: its jobs side by side share it) a read of the
tenant's slots, the take and the give-back. A container that dies holding a slot frees
it by expiry: the end of its invocation, and a margin.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from aws_lambda_powertools import Logger

from fireline import ports
from fireline.domain import model, quota

logger = Logger(service="fireline", child=True)

# How often a container says it is alive (and reads how many are).
REFRESH_SECONDS = 10.0
# An invocation slot outlives its container's invocation by this much (a dead container).
SLOT_MARGIN_SECONDS = 60


@dataclass
class _Entry:
    """One tenant's occupation of this container: its running jobs here, and the slot."""

    count: int = 0
    number: int | None = None  # the invocation slot held, once taken
    ready: threading.Event = field(default_factory=threading.Event)  # the take answered
    taken: bool = False  # what the take answered
    leaving: threading.Event | None = None  # set once the give-back is done


class Pool:
    def __init__(
        self,
        *,
        slots: ports.SlotStore,
        clock: ports.Clock,
        job_class: str,
        member: str,
        configured: int,
        refresh_seconds: float = REFRESH_SECONDS,
    ) -> None:
        self.slots = slots
        self.clock = clock
        self.job_class = job_class
        self.member = member
        self.configured = configured
        self.refresh_seconds = refresh_seconds
        #: Containers of the class seen alive at the last refresh (None: not known yet).
        self.size: int | None = None
        self._scope = quota.pool_scope(job_class)
        self._next_refresh = float("-inf")
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    @property
    def share(self) -> int:
        """The invocations one tenant may occupy now; 0: no bound here, when the pool is
        not known or is as large as configured (a tenant at its share of the class's
        jobs, quota.class_limit of the configured size, then occupies at most that many
        of its invocations, and leaves the rest)."""
        if self.size is None or self.size >= self.configured:
            return 0
        return quota.class_limit(max(1, self.size))

    def observe(self, remaining_ms: int) -> None:
        """At an invocation's start: say this container is alive (until its invocation
        may end, and a refresh period), once per period, and learn how many are."""
        now = self.clock.monotonic()
        with self._lock:
            if now < self._next_refresh:
                return
            self._next_refresh = now + self.refresh_seconds
        now_ms = self._now_ms()
        until = now_ms + remaining_ms + int(self.refresh_seconds * 1000)
        try:
            size = self.slots.join_pool(self._scope, self.member, now_ms=now_ms, until_ms=until)
        except Exception as exc:  # the last size known stands; a run is never stopped by it
            logger.warning(
                "pool not refreshed",
                extra={"action": "worker.pool", "error": f"{type(exc).__name__}: {exc}"},
            )
            return
        self.size = size

    def enter(self, tenant_id: str, remaining_ms: int) -> bool:
        """May this container run one more job of ``tenant_id``? True: it counts in the
        tenant's occupation until :meth:`leave`. False: the tenant occupies its share of
        the class's invocations already (nothing is held)."""
        if self.share == 0:
            return True
        while True:
            with self._lock:
                entry = self._entries.get(tenant_id)
                if entry is None:
                    entry = self._entries[tenant_id] = _Entry(count=1)
                    break  # this job takes the slot
                if entry.leaving is not None:
                    leaving = entry.leaving
                else:
                    entry.count += 1
                    if entry.ready.is_set():
                        return True  # held: this job shares it (or reuses it, idle)
                    leaving = None
            if leaving is not None:
                leaving.wait()  # the last job's give-back: then take it anew
                continue
            entry.ready.wait()  # another job of the tenant is taking it
            return entry.taken
        taken = False
        try:
            entry.number = self._take(tenant_id, remaining_ms)
            taken = entry.number is not None
        finally:
            with self._lock:
                entry.taken = taken
                if not taken:
                    # Refused (or failed): every job that waited on this take is refused
                    # with it, and none of them will leave.
                    del self._entries[tenant_id]
            entry.ready.set()
        return taken

    def leave(self, tenant_id: str) -> None:
        """A job that :meth:`enter` let in has ended. The slot stays with this container
        until its invocation ends (:meth:`end_invocation`): the invocation is busy until
        its whole batch is done, and the tenant's next job in it needs no take."""
        with self._lock:
            entry = self._entries.get(tenant_id)
            if entry is not None and entry.count > 0:
                entry.count -= 1

    def end_invocation(self) -> None:
        """The invocation has returned: give back the slots no job of it still runs in
        (each give-back tried; a failure logged, the slot left to expire)."""
        with self._lock:
            idle = [
                (tenant_id, entry)
                for tenant_id, entry in self._entries.items()
                if entry.count == 0 and entry.ready.is_set() and entry.leaving is None
            ]
            for _, entry in idle:
                entry.leaving = threading.Event()
        for tenant_id, entry in idle:
            try:
                if entry.number is not None:
                    self.slots.give_back(tenant_id, entry.number, self.member)
            except Exception as exc:  # the slot expires with the invocation: never raised
                logger.warning(
                    "invocation slot not given back",
                    extra={"action": "worker.pool", "error": f"{type(exc).__name__}: {exc}"},
                )
            finally:
                with self._lock:
                    del self._entries[tenant_id]
                assert entry.leaving is not None
                entry.leaving.set()

    def _take(self, tenant_id: str, remaining_ms: int) -> int | None:
        """One of the tenant's invocation slots for this container, or None when the
        tenant occupies its share. Read eventually consistently: every take is a
        conditional put on its number, so a stale read costs a refused take at most."""
        share = self.share
        now_ms = self._now_ms()
        expires = now_ms + remaining_ms + SLOT_MARGIN_SECONDS * 1000
        index = model.JOB_CLASSES.index(self.job_class)
        widest = set(quota.invocation_band(index, quota.class_limit(self.configured)))
        held, _ = self.slots.held(tenant_id, consistent=False)
        live = [s for s in held if s.number in widest and not s.free(now_ms)]
        mine = [s for s in live if s.holder == self.member]
        if mine:
            # Left by a give-back that failed: this container's own, taken again.
            number = mine[0].number
            if self.slots.take(
                tenant_id,
                number,
                self.member,
                now_ms=now_ms,
                expires_at_ms=expires,
                replacing=self.member,
            ):
                return number
        # Slots above the share (taken while the pool was larger) count until they end.
        if len(live) >= share:
            return None
        taken = {s.number for s in live}
        # In order, not shuffled: two jobs of one container racing converge on a number.
        free = [n for n in quota.invocation_band(index, share) if n not in taken]
        for number in free[:3]:  # a few tries; losing every race means the share is used
            if self.slots.take(
                tenant_id, number, self.member, now_ms=now_ms, expires_at_ms=expires
            ):
                return number
        return None

    def _now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)
