"""The slots a run holds, and their give-backs: the tenant's slots (its limit and its
share of the class), its share of the class's invocations as really running
(services.pool), the schedule's run and buffer slots (the overlap policy), and the
register of limit overrides that lets an unlimited tenant take none. None free: the
run is deferred, never run over a limit, never dropped."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from aws_lambda_powertools import Logger

from fireline.domain import errors, model, occurrence, policies, quota
from fireline.services.worker import slot_views, state
from fireline.services.worker.config import BUFFER_HOLD_DEFERRALS

logger = Logger(service="fireline", child=True)
T = TypeVar("T")


# Why a run waits for a tenant slot (the reason its deferral logs).
AT_LIMIT = "tenant limit"
# A run slot is taken a moment before its fire's claim (a few calls apart; throttled
# calls and their retries, seconds). A holder older than this and still not running is
# not about to be: it died before its claim, or its claim lapsed.
RUN_CLAIM_WINDOW_SECONDS = 5
AT_CLASS_SHARE = "tenant share of the class"
AT_INVOCATION_SHARE = "tenant share of the class's running invocations"
THROTTLED = "tenant slots throttled"
# How often a run waiting for a tenant slot looks again (jittered by half either way):
# the life of a container's view of the tenant's slots, so a look finds a fresh one.
SLOT_LOOK_SECONDS = slot_views.FRESH_SECONDS

# A run holding a tenant slot taken this long ago has most likely finished (most jobs
# take seconds): such holders' rows are read first when a slot is to be handed on.
LIKELY_OVER_SECONDS = 2
# Tenants a worker remembers taking slots of (see SlotKeeping._note_slots_taken).
SLOTS_REMEMBERED = 10_000

# Outcomes whose row no run ever leaves: the run's tenant slots are handed on, not given back.
HANDED_ON = frozenset(s.value for s in occurrence.TERMINAL)


class Reused(tuple[int, ...]):
    """Tenant slots the occurrence held before this delivery (see Worker._held_already).
    A delivery whose claim is refused does not give them back: the delivery that holds
    the claim may be running on them."""


class SlotKeeping(state.WorkerState):
    """Taking and giving back the slots a run holds (see the module's docstring)."""

    def _enter_pool(self, tenant_id: str, remaining_ms: int) -> bool:
        """The tenant's turn in the class's invocations (services.pool), its share
        weighted by its limit as the register says (an override above the default)."""
        assert self._pool is not None
        limit = self._registered_limit(tenant_id)
        default = self.config.tenant_limit
        weight = limit / default if limit and default else 1.0
        return self._pool.enter(tenant_id, remaining_ms, weight=weight)

    def _leave_pool(self, tenant_id: str) -> None:
        assert self._pool is not None
        self._pool.leave(tenant_id)

    def _overlap(
        self, item: model.Schedule, row: occurrence.Occurrence, held_for: timedelta, now: datetime
    ) -> tuple[str | None, bool]:
        """The overlap policy, decided now that the fire is due, on the schedule's own
        slots (see quota): "skip", "defer" or None (run), and whether this delivery took
        the run slot (then it gives it back when its run ends).

        forbid skips a fire while another run of the schedule holds the run slot;
        buffer_one keeps one such fire waiting (the buffer slot) and skips the others. A
        retry of an earlier fire waits its turn: it is that fire's run, not a new one."""
        if item.overlap is policies.OverlapPolicy.ALLOW:
            return None, False
        scope = quota.overlap_scope(item.tenant_id, item.schedule_id)
        now_ms = int(now.timestamp() * 1000)
        held, _ = self.slots.held(scope)
        running = quota.holder_of(held, quota.RUN_SLOT, now_ms)
        if running == row.key:
            return None, False  # a delivery of this fire holds it: the claim decides
        until_ms = now_ms + int(held_for.total_seconds() * 1000)
        # A holder whose row is terminal ran and ended (its give-back failed, or a
        # redelivery ran it without taking the slot): it blocks nobody. So does a holder
        # that took the slot longer ago than a take and its claim can be apart and is not
        # running (its invocation died before the claim, or its attempt was recorded
        # failed when its claim lapsed; its redelivery or retry waits its turn). Its slot
        # is taken over conditional on that holder, so of two fires that saw it, one
        # runs. A holder taken moments ago may be about to run (the slot is taken before
        # the claim): it counts as running until it ends or its slot expires.
        slot = next((s for s in held if s.number == quota.RUN_SLOT), None)
        replacing = (
            running
            if running is not None
            and slot is not None
            and self._run_holder_gone(running, slot.expires_at_ms, held_for, now_ms)
            else None
        )
        # Two fires racing for a free run slot: the conditional take lets one run.
        if (running is None or replacing is not None) and self.slots.take(
            scope,
            quota.RUN_SLOT,
            row.key,
            now_ms=now_ms,
            expires_at_ms=until_ms,
            replacing=replacing,
        ):
            if quota.holder_of(held, quota.BUFFER_SLOT, now_ms) == row.key:
                try:
                    self.slots.give_back(scope, quota.BUFFER_SLOT, row.key)
                except Exception:
                    # Not running after all: the run slot is not kept (the buffer it held
                    # expires by itself, and this fire's redelivery takes it again).
                    self._give_back_slots(item, row.key, (), True)
                    raise
            return None, True
        if row.attempts > 0:
            return "defer", False
        if item.overlap is policies.OverlapPolicy.FORBID:
            return "skip", False
        buffered = quota.holder_of(held, quota.BUFFER_SLOT, now_ms)
        if buffered == row.key:
            return "defer", False
        # The buffer lasts until the running fire's slot ends, and a few deferrals more
        # (the buffered fire looks again every one or two): then this fire takes the run
        # slot, or, if it went missing, another fire may take the buffer.
        run_until = max([s.expires_at_ms for s in held if s.number == quota.RUN_SLOT] + [until_ms])
        buffer_until = run_until + BUFFER_HOLD_DEFERRALS * 2 * self.config.defer_seconds * 1000
        if buffered is None and self.slots.take(
            scope, quota.BUFFER_SLOT, row.key, now_ms=now_ms, expires_at_ms=buffer_until
        ):
            return "defer", False
        return "skip", False

    def _take_slot(
        self, tenant_id: str, key: str, held_for: timedelta, now: datetime, *, first: bool = False
    ) -> tuple[int, ...] | str:
        """The tenant slots this run holds (none for an unlimited tenant), or why it must
        wait: the tenant runs its limit, or its share of this class, already. Both are
        counted on one read of the tenant's slots (see quota.CLASS_BAND).

        A tenant the register of overrides shows unlimited (its override, else the
        deployment's default, is 0) takes no slot and reads nothing: the register is read
        once per ``overrides_cache_seconds`` per worker, not per run. So a limit set on a
        tenant that ran unlimited (an override of N, or its override of 0 cleared under a
        limited default) applies, at the latest, to the runs that start that long (and the
        register's eventually consistent second) after the change; runs started before it
        hold no slot, as ever when a limit is set. Every other
        tenant (limited, or the register unknown: not built yet, or its read failed) reads
        its slots and its own override, as before: a limit lifted or changed applies
        from that read on.

        The read is eventually consistent: every slot is taken by a conditional put, so a
        stale list can cost a refused take, or a deferral a current one would have spared
        (a slot freed in the last second), never a run over the limit. A limit override
        changed in the last second applies from the next read, as if made a second later.

        A ``first`` attempt (its row shows no attempt: no delivery before it claimed) of a
        tenant whose limit the register shows first tries one slot number at random,
        unread (see :meth:`_take_unread`): most tenants run far below their limit, and the
        read of their slots was a call's client CPU on the way to every start. (A delivery
        before it that took a slot and died before its claim left that slot to expire: it
        is counted against the tenant a while longer, never run past the limit.)"""
        registered = self._registered_limit(tenant_id)
        if registered == quota.UNLIMITED:
            return ()
        if first and registered is not None:
            number = self._take_unread(tenant_id, key, registered, now, held_for)
            if number is not None:
                return (number,)
        taken = self._take_read(tenant_id, key, held_for, now)
        if not isinstance(taken, str) and taken:
            self._note_slots_taken(tenant_id, now, held_for)
        return taken

    def _in_turn(self, attempt: Callable[[], T | str], until: float) -> T | str:
        """``attempt()`` now (a tenant slot's take, the tenant's entry in the pool), and
        while it says why the run must wait (a str: at the tenant's limit, its share of the
        class or of the class's invocations) or is throttled, again every
        SLOT_LOOK_SECONDS or so until ``until`` (the clock's monotonic time), as long as
        another record of the invocation is at work (see state.RecordsUnderWay: the wait
        never holds an invocation that would have returned). A tenant at its limit frees
        slots as its runs end, a second apart for second-long jobs, where a deferral
        waits 10 to 20 s on the queue. A look costs nothing until this container's view
        of the tenant's slots is stale (services.worker.slot_views), or its pool's
        refusal (services.pool.REFUSED_SECONDS): the container's waiting records of one
        tenant make one read a look between them, not one each. Past the wait: why the
        run must wait longer (deferred), or the throttle's error."""
        while True:
            failure: errors.Unavailable | None = None
            try:
                answer = attempt()
            except errors.Unavailable as exc:
                failure, answer = exc, THROTTLED
            if not isinstance(answer, str):
                return answer
            pause = SLOT_LOOK_SECONDS * (0.5 + self.rng.random())
            if self.clock.monotonic() + pause > until or not self._under_way.others_at_work():
                if failure is not None:
                    raise failure
                return answer
            self.metrics.add_metric("SlotWaited", "Count", 1)
            with self._under_way.waiting():
                self.clock.sleep(pause)

    def _take_read(
        self, tenant_id: str, key: str, held_for: timedelta, now: datetime
    ) -> tuple[int, ...] | str:
        """_take_slot's take on a read of the tenant's slots: this container's view of
        them (services.worker.slot_views), read once for the records that need it at
        about the same time, each handed numbers none of the others is."""
        view = self._slot_views.view(
            tenant_id, lambda: self.slots.held(tenant_id, consistent=False)
        )
        held, override = view.held, view.override
        limit = self.config.tenant_limit if override is None else override
        if limit == quota.UNLIMITED:
            return ()
        now_ms = int(now.timestamp() * 1000)
        share = self.config.class_limit
        expires = now_ms + int(held_for.total_seconds() * 1000)
        if quota.holding(held, key, now_ms) is not None:
            return self._held_already(tenant_id, key, held, limit, share, now_ms, expires)
        in_class: int | None = None
        # A limit within the class's share bounds the share too (a tenant running at most
        # `limit` jobs runs at most that many in one class): then the tenant slot is the
        # run's only write, one unit per job. The deployed default limit is such a limit.
        if share and share < limit:
            # The class's share first: it is the tighter bound, so a run past it is told
            # so before it writes the tenant slot it would have to give back.
            band = quota.class_band(self._class_index, share)
            in_class = self._take_one(
                tenant_id, key, view, range(band[0], band[-1] + 1), now_ms, expires
            )
            if in_class is None:
                return AT_CLASS_SHARE
        # The class share's slot is this run's only if the limit's is too: refused or
        # failed, it goes back (else it would count a run that never started against the
        # tenant's share until it expired).
        try:
            number = self._take_one(tenant_id, key, view, range(limit), now_ms, expires)
        except Exception:
            if in_class is not None:
                self._give_back_quietly(tenant_id, in_class, key)
            raise
        if number is None:
            if in_class is not None:
                self._give_back_quietly(tenant_id, in_class, key)
            return AT_LIMIT
        return (number,) if in_class is None else (number, in_class)

    def _take_unread(
        self, tenant_id: str, key: str, limit: int, now: datetime, held_for: timedelta
    ) -> int | None:
        """One slot number of the tenant's ``limit`` (as the register shows it), taken
        without reading the tenant's slots; None when that number was held (or the take
        failed): the caller reads them and takes as ever.

        The conditional take is what keeps the limit (a number held by a live run is
        refused, as any take of it is), so no read is needed to stay within it. Only a
        limit within the class's share takes this way (a larger one takes the share's
        slot too, which needs the read), and only where the register knows the limit: it
        is the override as last read (at most ``overrides_cache_seconds`` old, and
        eventually consistent), so a limit lowered a moment ago applies to these takes
        from the next read of the register, where the read of the slots applied it at
        once. A number held by a finished run is not handed on here (that needs its
        holder's row): the read path does it."""
        share = self.config.class_limit
        if share and share < limit:
            return None
        now_ms = int(now.timestamp() * 1000)
        # A tenant this worker took slots of lately holds them still, or its finished
        # runs do (handed on, not given back): a number at random would mostly be
        # refused, a write unit spent for a read that follows anyway.
        if self._slots_taken_until.get(tenant_id, 0) > now_ms:
            return None
        number = self.rng.randrange(limit)
        expires = now_ms + int(held_for.total_seconds() * 1000)
        # Noted before the take: this container's other records of the tenant starting
        # at this moment (a burst's) take on its view of the slots, not a number each at
        # random, most of which a tenant that busy holds.
        self._note_slots_taken(tenant_id, now, held_for)
        try:
            taken = self.slots.take(tenant_id, number, key, now_ms=now_ms, expires_at_ms=expires)
        except Exception as exc:  # the read and its takes decide instead (and may fail)
            logger.info(
                "unread slot take failed",
                extra={"action": "worker.slot", "error": f"{type(exc).__name__}: {exc}"},
            )
            return None
        self.metrics.add_metric("SlotTakenUnread" if taken else "SlotTakeUnreadRefused", "Count", 1)
        return number if taken else None

    def _note_slots_taken(self, tenant_id: str, now: datetime, held_for: timedelta) -> None:
        """Remember that ``tenant_id``'s slots are held (or were refused: held by others)
        for ``held_for`` from ``now``. Bounded: past SLOTS_REMEMBERED tenants, the lapsed
        ones go, and if none has, all do (a forgotten tenant only costs one refused take)."""
        now_ms = int(now.timestamp() * 1000)
        until_ms = now_ms + int(held_for.total_seconds() * 1000)
        remembered = self._slots_taken_until
        if len(remembered) >= SLOTS_REMEMBERED and tenant_id not in remembered:
            for tenant in [t for t, ms in remembered.items() if ms <= now_ms]:
                del remembered[tenant]
            if len(remembered) >= SLOTS_REMEMBERED:
                remembered.clear()
        remembered[tenant_id] = max(until_ms, remembered.get(tenant_id, 0))

    def _held_already(
        self,
        tenant_id: str,
        key: str,
        held: list[quota.Slot],
        limit: int,
        share: int,
        now_ms: int,
        expires: int,
    ) -> Reused | str:
        """The occurrence holds tenant slots already: an earlier delivery's, left by a
        give-back that failed (its attempt failed, to be retried) or by a delivery that
        died, or those of a delivery running it now. This one's row showed no live run
        (see _handle), so it goes ahead on them, as their holder (a run beside a live one
        is refused by the claim, and a refused claim leaves them to it: see Reused),
        their expiry moved to this run's. Only a set that is whole (the limit's slot, and
        the class share's where the run takes one) is taken over; any other waits for its
        expiry, as every held slot did."""
        if self.long_jobs is not None:
            return AT_LIMIT  # a long job's start, refused, gives its slots back: left alone
        mine = [s for s in held if s.holder == key and not s.free(now_ms)]
        band = set(quota.class_band(self._class_index, share)) if share and share < limit else set()
        whole = len(mine) == (2 if band else 1) and any(s.number < limit for s in mine)
        if not whole or (band and not any(s.number in band for s in mine)):
            return AT_LIMIT
        for slot in mine:
            # Conditional on this holder: a slot that expired and went to another run
            # meanwhile is not taken back.
            if not self.slots.take(
                tenant_id, slot.number, key, now_ms=now_ms, expires_at_ms=expires, replacing=key
            ):
                return AT_LIMIT
        return Reused(s.number for s in mine)

    def _take_one(
        self,
        tenant_id: str,
        key: str,
        view: slot_views.View,
        numbers: range,
        now_ms: int,
        expires: int,
    ) -> int | None:
        """A slot number of ``numbers``, each one no other record of this container was
        handed (see ``view``): one a run of this container finished holding, handed on;
        else one free in the view (none held, or expired); else one held whose holder's
        row reads over, handed on. A run that finishes does not give its slot back (that
        would be a write per job): the slot stays with the finished holder, and the
        next run that needs it takes it over, conditional on that holder, in the same
        one write a take of a free slot costs. The limit stays exact: a slot is handed
        on only when its holder's row is terminal (succeeded, skipped or cancelled),
        which no run ever leaves; a run that ends any other way (a failure to retry,
        dead, a crash) gives its slot back, or lets it expire."""
        # Ended in this container since the read: taken over with no read (or, given
        # back, taken as free).
        for number, holder in self._slot_views.take_ended(view, numbers):
            if self.slots.take(
                tenant_id, number, key, now_ms=now_ms, expires_at_ms=expires, replacing=holder
            ):
                return number
        # A holder whose slot was taken longer ago than LIKELY_OVER_SECONDS has most
        # likely finished (its slot expires its deadline and a margin after its take).
        found = self._slot_views.candidates(
            view,
            numbers,
            now_ms=now_ms,
            older_than_ms=expires - LIKELY_OVER_SECONDS * 1000,
            rng=self.rng,
            containers=self._pool.size if self._pool is not None and self._pool.size else 1,
        )
        # A few tries, within this container's share of them; none left, or losing every
        # race, means the tenant is busy: the caller waits, or defers.
        for number in self._slot_views.hand_out(view, found):
            holder = found.holders.get(number)
            if (holder is None or self._finished(holder)) and self.slots.take(
                tenant_id,
                number,
                key,
                now_ms=now_ms,
                expires_at_ms=expires,
                replacing=holder,
            ):
                return number
        return None

    def _run_holder_gone(
        self, holder: str, expires_at_ms: int, held_for: timedelta, now_ms: int
    ) -> bool:
        """Is the fire holding a schedule's run slot not running, for good or for now?
        Terminal (read as :meth:`_finished`), or, once the slot is older than
        RUN_CLAIM_WINDOW_SECONDS (its take less the time a run holds it: a fire of the same
        schedule holds it as long), a row that is not running: read consistently, since
        a claim made a moment ago must be seen."""
        if self._finished(holder):
            return True
        taken_ms = expires_at_ms - int(held_for.total_seconds() * 1000)
        if now_ms - taken_ms < RUN_CLAIM_WINDOW_SECONDS * 1000:
            return False
        try:
            row = self.occurrences.get(holder)
        except errors.ValidationError:
            return False  # not an occurrence key: left to its expiry
        now = datetime.fromtimestamp(now_ms / 1000, UTC)
        claimed = row is not None and row.state is occurrence.State.RUNNING
        return not claimed or (
            row is not None and row.in_progress_until is not None and row.in_progress_until < now
        )

    def _finished(self, holder: str) -> bool:
        """Is the run holding a slot over for good? Read eventually consistently: a stale
        row shows an older state, never a terminal one that has not happened (terminal
        states are never left), so a stale answer only keeps a slot held a while."""
        try:
            row = self.occurrences.get(holder, consistent=False)
        except errors.ValidationError:
            return False  # not an occurrence key: left to its expiry
        return row is not None and row.state in occurrence.TERMINAL

    @property
    def _class_index(self) -> int:
        return model.JOB_CLASSES.index(self.config.job_class)

    def _registered_limit(self, tenant_id: str) -> int | None:
        """The tenant's limit as the register says (its override, else the default);
        None when the register is unknown."""
        with self._overrides_lock:
            overrides = self._overrides
        if overrides is None:
            return None
        return overrides.get(tenant_id, self.config.tenant_limit)

    def _refresh_overrides(self) -> None:
        """Read the register again once its cache period is over. Called as a batch (or a
        single message) starts, before its records run side by side: they all see the same
        register and none waits on another's read (a lock held over the read would stall
        every other record, and deadlock a simulator that runs threads one at a time)."""
        now = self.clock.monotonic()
        with self._overrides_lock:
            if now < self._overrides_until:
                return
            self._overrides_until = now + self.config.overrides_cache_seconds
        overrides = self._read_overrides()
        with self._overrides_lock:
            self._overrides = overrides

    def _read_overrides(self) -> Mapping[str, int] | None:
        """The register; None (every tenant reads its own slots and override, as
        without a register) when there is none yet or the read failed: a failed read
        never stops a run, nor runs a limited tenant unlimited."""
        try:
            overrides = self.slots.overrides()
        except Exception as exc:  # whatever failed, the per-run read still decides
            logger.warning(
                "limit overrides unread",
                extra={"action": "worker.overrides", "error": f"{type(exc).__name__}: {exc}"},
            )
            self.metrics.add_metric("OverridesReadFailed", "Count", 1)
            return None
        if overrides is None and not self._told_unbuilt:
            self._told_unbuilt = True  # once per container: the sweep builds it soon
            logger.info(
                "no register of limit overrides yet: every run reads its tenant's slots",
                extra={"action": "worker.overrides"},
            )
        return overrides

    def _give_back_slots(
        self, item: model.Schedule, key: str, slot: tuple[int, ...], took_run: bool
    ) -> None:
        """Give back the tenant slots ``slot`` and, if this delivery took it, the
        schedule's run slot: each one tried whatever became of the others, and a failure
        (a throttled delete) logged, never raised. Raised, it would hide the run's outcome
        from what follows (a retry's send) and fail a message whose work is done. A slot
        left held is not left blocking: the next run that needs it reads its holder's row
        and takes it over once that row is terminal (see _take_one and _overlap), and any
        holder's slot expires with its deadline."""
        scope = quota.overlap_scope(item.tenant_id, item.schedule_id)
        backs = [(item.tenant_id, number) for number in slot]
        if took_run:
            backs.append((scope, quota.RUN_SLOT))
        for owner, number in backs:
            self._give_back_quietly(owner, number, key)

    def _give_back_quietly(self, owner: str, number: int, key: str) -> None:
        try:
            self.slots.give_back(owner, number, key)
            self._slot_views.given_back(owner, number)
        except Exception as exc:  # whatever failed, the slot's holder check or expiry frees it
            logger.warning(
                "slot not given back",
                extra={
                    "action": "worker.give_back",
                    "key": key,
                    "slot": number,
                    "error": f"{type(exc).__name__}: {exc}",
                },
            )
            self.metrics.add_metric("SlotGiveBackFailed", "Count", 1)
