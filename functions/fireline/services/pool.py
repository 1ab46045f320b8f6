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

A tenant the operator gave a limit above the default (an override: fireline admin limits)
has a share in proportion: an override of four times the default limit, four times the
share, but never every live container (one is always left for the others). So a tenant
sized for 500 jobs a second runs in nearly all of a small pool, as its override says,
and a tenant at the default limit still in half of it.

What it gives up: like the share of the class's jobs, it holds whether or not another
tenant waits (a waiting message is not seen by any worker until an invocation takes it),
so a tenant alone at the default limit runs in half of the live containers while fewer
are alive than configured; its other jobs come back after their deferral. A container
counts as alive from its invocation's start until that invocation may end and a period
more, so the size follows a shrinking pool by up to the function's timeout late; and
while it shrinks, the slots taken in a larger share count until their invocations end.
"""

from __future__ import annotations

import math
import threading
import zlib
from dataclasses import dataclass, field

from aws_lambda_powertools import Logger

from fireline import ports
from fireline.domain import model, quota
from fireline.services import waiting

logger = Logger(service="fireline", child=True)

# How often a container says it is alive (and reads how many are).
REFRESH_SECONDS = 10.0
# An invocation slot outlives its container's invocation by this much (a dead container).
SLOT_MARGIN_SECONDS = 60
# A take's rounds (a read, then conditional puts on up to TAKES_PER_ROUND free numbers)
# before a job the share had room for is deferred: containers racing for a tenant's last
# free numbers lose some.
TAKE_ROUNDS = 3
TAKES_PER_ROUND = 3
# A tenant this container was refused its share for is refused again, with no call, this
# long (or until its invocation ends): a burst's records of a tenant past its share,
# hundreds in one invocation, made a read and a take each on the tenant's key otherwise
# (its slots' key too: see quota.slot_key).
REFUSED_SECONDS = 1.0
MOST_REFUSALS_KEPT = 10_000


@dataclass
class _Taking:
    """A take of a tenant's invocation slot under way: the container's other jobs of the
    tenant wait for its answer rather than make their own."""

    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Entry:
    """One tenant's occupation of this container: its jobs running here, and the slots
    (one, but two records that raced for it may each have taken one)."""

    count: int = 0
    numbers: set[int] = field(default_factory=set)


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
        poll: bool = False,
    ) -> None:
        self.slots = slots
        self.clock = clock
        self.job_class = job_class
        self.member = member
        self.configured = configured
        self.refresh_seconds = refresh_seconds
        #: Containers of the class seen alive at the last refresh (None: not known yet, or
        #: every read so far failed).
        self.size: int | None = None
        self._scope = quota.pool_scope(job_class)
        self._next_refresh = float("-inf")
        self._entries: dict[str, _Entry] = {}
        # Takes under way, and tenants refused lately (until the clock's monotonic time).
        self._taking: dict[str, _Taking] = {}
        self._refused_until: dict[str, float] = {}
        self._poll = poll  # waits look on the clock's sleeps (services.waiting)
        self._lock = threading.Lock()
        self._refreshing = threading.Lock()  # one register call at a time (see observe)

    @property
    def share(self) -> int:
        """The invocations one tenant may occupy now; 0: no bound here, when the pool is
        as large as configured (a tenant at its share of the class's jobs,
        quota.class_limit of the configured size, then occupies at most that many of its
        invocations, and leaves the rest). A pool not known (its register's read failed)
        counts this container alone: the tenant's jobs still run here, in at most one
        invocation of the class, until a read says how many are alive. Taking no bound
        then would let one tenant fill a small pool for as long as the read kept failing."""
        if self.size is None:
            return quota.class_limit(1)
        if self.size >= self.configured:
            return 0
        return quota.class_limit(max(1, self.size))

    def share_of(self, weight: float) -> int:
        """The share of a tenant whose limit is ``weight`` times the default (1 or less:
        the share itself): in proportion, never every live container but one."""
        share = self.share
        if share == 0 or weight <= 1:
            return share
        most = max(share, (self.size or 1) - 1)
        return min(most, math.ceil(share * weight))

    def observe(self, remaining_ms: int) -> None:
        """Say this container is alive (until its invocation may end, and a refresh
        period), once per period, and learn how many are: as an invocation starts, and
        again before a share is decided on a reading older than the period (a record
        held until its fire time, a burst's up to its lead early, is decided then, when
        the pool may be ten times the size it was as its invocation started). One call
        refreshes; the others that find the reading old wait for its answer rather than
        decide on the old one."""
        if self.clock.monotonic() < self._next_refresh:
            return
        with self._refreshing:
            now = self.clock.monotonic()
            with self._lock:
                if now < self._next_refresh:
                    return  # another call refreshed it while this one waited
                self._next_refresh = now + self.refresh_seconds
            self._refresh(remaining_ms)

    def _refresh(self, remaining_ms: int) -> None:
        now_ms = self._now_ms()
        until = now_ms + remaining_ms + int(self.refresh_seconds * 1000)
        try:
            size = self.slots.join_pool(self._scope, self.member, now_ms=now_ms, until_ms=until)
        except Exception as exc:  # the last size known stands; a run is never stopped by it
            logger.warning(
                "pool not refreshed",
                extra={"action": "worker.pool", "error": f"{type(exc).__name__}: {exc}"},
            )
            if self.size is None:
                with self._lock:  # not known at all: read again as the next invocation starts
                    self._next_refresh = float("-inf")
            return
        self.size = size

    def enter(self, tenant_id: str, remaining_ms: int, *, weight: float = 1.0) -> bool:
        """May this container run one more job of ``tenant_id``? True: it counts in the
        tenant's occupation until :meth:`leave`. False: the tenant occupies its share of
        the class's invocations already (nothing is held for this job). ``weight``: the
        tenant's limit over the default limit (see :meth:`share_of`).

        One take at a time per tenant: the container's other jobs of the tenant starting
        meanwhile wait for its answer, and share the slot it took (or are refused with it,
        and for REFUSED_SECONDS after, with no call)."""
        if self.size is not None:  # (one not known is read again as an invocation starts)
            self.observe(remaining_ms)
        if self.share == 0:
            return True
        while True:
            with self._lock:
                entry = self._entries.get(tenant_id)
                if entry is not None and entry.numbers:
                    entry.count += 1
                    return True  # held: this job shares it
                if self._refused_until.get(tenant_id, -math.inf) > self.clock.monotonic():
                    return False
                taking = self._taking.get(tenant_id)
                leads = taking is None
                if taking is None:
                    taking = self._taking[tenant_id] = _Taking()
            if leads:
                break
            if not waiting.wait_for(taking.done, self.clock, poll=self._poll):
                break  # that take is stuck: this job makes its own
        try:
            number = self._take(tenant_id, remaining_ms, self.share_of(weight))
        finally:
            with self._lock:
                if self._taking.get(tenant_id) is taking:
                    del self._taking[tenant_id]
            taking.done.set()
        with self._lock:
            if number is None:
                if len(self._refused_until) >= MOST_REFUSALS_KEPT:
                    self._refused_until.clear()
                self._refused_until[tenant_id] = self.clock.monotonic() + REFUSED_SECONDS
                return False
            entry = self._entries.setdefault(tenant_id, _Entry())
            entry.numbers.add(number)
            entry.count += 1
        return True

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
        (each give-back tried; a failure logged, the slot left to expire). A container
        runs one invocation at a time, so no job of the next one takes a slot while this
        gives it back."""
        with self._lock:
            idle = [(t, e) for t, e in self._entries.items() if e.count == 0]
            for tenant_id, _ in idle:
                del self._entries[tenant_id]
            # A refusal stands for the invocation it was made in: the next one asks again.
            self._refused_until.clear()
        for tenant_id, entry in idle:
            for number in sorted(entry.numbers):
                try:
                    self.slots.give_back(tenant_id, number, self.member)
                except Exception as exc:  # the slot expires with the invocation: never raised
                    logger.warning(
                        "invocation slot not given back",
                        extra={"action": "worker.pool", "error": f"{type(exc).__name__}: {exc}"},
                    )

    def _take(self, tenant_id: str, remaining_ms: int, share: int) -> int | None:
        """One of the tenant's invocation slots for this container, or None when the
        tenant occupies its share. Read eventually consistently first: every take is a
        conditional put on its number, so a stale read costs a refused take at most.

        Containers that start the tenant's jobs at one instant (a burst's, each container
        holding its records until the same second) race for its free numbers. Each tries
        them in an order of its own (a permutation its name picks), so racing containers
        mostly try different numbers; one whose every try lost reads again, consistently,
        and tries what is still free (TAKE_ROUNDS in all) before it defers a job the share
        has room for. Two jobs of one container share its order, so they meet on one
        number."""
        for attempt in range(TAKE_ROUNDS):
            number, lost = self._take_once(tenant_id, remaining_ms, share, consistent=attempt > 0)
            if not lost:
                return number
        return None

    def _take_once(
        self, tenant_id: str, remaining_ms: int, share: int, *, consistent: bool
    ) -> tuple[int | None, bool]:
        """(the number taken, False); (None, False): the tenant is at its share; (None,
        True): every try lost a race while the share had room."""
        now_ms = self._now_ms()
        expires = now_ms + remaining_ms + SLOT_MARGIN_SECONDS * 1000
        index = model.JOB_CLASSES.index(self.job_class)
        # Every number any share may have used: a weighted one reaches up to the pool.
        widest = set(quota.invocation_band(index, self.configured))
        held, _ = self.slots.held(tenant_id, consistent=consistent)
        live = [s for s in held if s.number in widest and not s.free(now_ms)]
        # This container's own (another of its jobs just took it, or a give-back that
        # failed left it), else free ones in this container's order. Every take is "free,
        # or held by this container".
        mine = [s.number for s in live if s.holder == self.member]
        others = {s.number for s in live if s.holder != self.member}
        # Slots above the share (taken while the pool was larger) count until they end.
        if not mine and len(live) >= share:
            return None, False
        # A slot of its own (left by an earlier invocation whose give-back failed) lets
        # this container in only while fewer than the share of the others' come before
        # it: containers left holding more slots than the share would each run the tenant
        # by their own slot otherwise. (Ordered by number, one of them always may.)
        if mine and sum(1 for n in others if n < min(mine)) >= share:
            return None, False
        free = [n for n in quota.invocation_band(index, share) if n not in others]
        free.sort(key=lambda n: zlib.crc32(f"{self.member}#{n}".encode()))
        tries = sorted(mine)[:1] + [n for n in free if n not in mine][:TAKES_PER_ROUND]
        for number in tries:
            if self.slots.take(
                tenant_id,
                number,
                self.member,
                now_ms=now_ms,
                expires_at_ms=expires,
                replacing=self.member,
            ):
                return number, False
        return None, bool(tries)

    def _now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)
