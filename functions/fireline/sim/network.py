"""The simulated AWS side: every port call takes time, costs client CPU, may fail.

The memory adapters hold the state (they keep the DynamoDB and SQS conditions, held to
the real adapters by the contract suite); :class:`Latent` wraps one so that each call,
made from a simulated thread:

1. fails at once if its invocation was killed (nothing applied);
2. charges the client side of an AWS SDK call (serialization, signing, HTTP, parsing:
   CPU measured on this machine by ``calibrate``, scaled to the Lambda's share);
3. waits half a latency drawn from a seeded log-normal (median and p99 given), then
   applies the effect (so a racing call can land in between), then waits the other
   half: a call killed on the way back has taken effect without its caller knowing;
4. may be throttled by a per-partition write limit (1,000 write units a second per
   partition key, as DynamoDB enforces), before any effect, as a real
   ThrottlingException is. A throttled call goes again as the SDK's standard retry mode
   does (``attempts`` in all, each after a random wait of up to 1, 2, 4... seconds, each
   paying its client CPU again), and fails with ``errors.Unavailable`` once the last
   attempt is throttled too.

The same seed gives the same draws in the same order, and the kernel runs threads in
virtual-time order, so a run without measured CPU is deterministic.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fireline.domain import errors, model, quota
from fireline.sim import kernel as sim_kernel

T = TypeVar("T")
_Z99 = 2.3263478740408408  # the standard normal's 99th percentile
_Z995 = 2.5758293035489004  # its 99.5th: |z| exceeds it 1% of the time


@dataclass(frozen=True)
class LatencyModel:
    """Log-normal round-trip times: ``median_ms`` and ``p99_ms`` pin it down."""

    median_ms: float = 5.0
    p99_ms: float = 25.0
    cap_ms: float = 1_000.0

    def draw(self, rng: random.Random) -> float:
        """One round trip, in seconds."""
        sigma = math.log(self.p99_ms / self.median_ms) / _Z99 if self.p99_ms > self.median_ms else 0
        return min(self.cap_ms, self.median_ms * math.exp(sigma * rng.gauss(0.0, 1.0))) / 1000


@dataclass(frozen=True)
class TargetDuration:
    """How long a remote target takes to answer: a seeded mix of ``seconds`` (each
    chosen with its weight), each with a log-normal tail above it. A draw is the chosen
    duration times ``exp(sigma * |z|)``, with sigma set so that 1% of draws exceed the
    duration by ``tail_p99`` times (a target is never faster than its stated time: the
    tail is all lateness), capped at ``cap_seconds``."""

    seconds: tuple[float, ...] = (1.0,)
    weights: tuple[float, ...] = (1.0,)
    tail_p99: float = 1.5
    cap_seconds: float = 60.0

    def __post_init__(self) -> None:
        if not self.seconds or len(self.seconds) != len(self.weights):
            raise ValueError("seconds and weights: one weight per duration")
        if any(s <= 0 for s in self.seconds) or any(w < 0 for w in self.weights):
            raise ValueError("seconds: above 0; weights: 0 or more")
        if self.tail_p99 < 1:
            raise ValueError("tail_p99: at least 1 (a target is never faster)")

    def draw(self, rng: random.Random) -> float:
        base = rng.choices(self.seconds, weights=self.weights)[0]
        # |z| over 2.5758 happens 1% of the time: sigma puts tail_p99 there.
        sigma = math.log(self.tail_p99) / _Z995 if self.tail_p99 > 1 else 0.0
        return min(self.cap_seconds, base * math.exp(sigma * abs(rng.gauss(0.0, 1.0))))


ONE_SECOND_TARGET = TargetDuration((1.0,), (1.0,))
THREE_SECOND_TARGET = TargetDuration((3.0,), (1.0,))
#: The e2e mix: most targets answer in a second, some in three, all with a tail.
MIXED_TARGET = TargetDuration((1.0, 3.0), (0.8, 0.2))


@dataclass(frozen=True)
class SdkCost:
    """Client-side CPU of one AWS call on this machine, by operation (seconds).

    ``per_call`` is a call of one item; an operation in ``per_item`` (a batch read) costs
    that much more for each further item it carries: a BatchGetItem of three keys
    serializes and parses three items, not a hundred."""

    per_call: Mapping[str, float] = field(default_factory=dict)
    default: float = 0.0
    per_item: Mapping[str, float] = field(default_factory=dict)

    def of(self, op: str, items: int = 1) -> float:
        return self.per_call.get(op, self.default) + self.per_item.get(op, 0.0) * max(0, items - 1)

    def times(self, factor: float) -> SdkCost:
        """Every call's CPU ``factor`` times this one's (a slower or faster vCPU)."""
        return SdkCost(
            per_call={op: s * factor for op, s in self.per_call.items()},
            default=self.default * factor,
            per_item={op: s * factor for op, s in self.per_item.items()},
        )


@dataclass(frozen=True)
class Op:
    """How one port method shows up on the wire."""

    name: str  # service.Operation, as in a request log
    # The partitions the call writes, with the write units each: throttled over the limit.
    writes: Callable[[tuple[Any, ...], dict[str, Any]], Sequence[str]] | None = None
    # How many items the call carries (a batch's keys), for its client CPU; None: one.
    items: Callable[[tuple[Any, ...], dict[str, Any]], int] | None = None


class Network:
    def __init__(
        self,
        kernel: sim_kernel.Kernel,
        *,
        seed: int,
        latency: LatencyModel | None = None,
        sdk: SdkCost | None = None,
        partition_units_per_second: float | None = None,
        fault: Callable[[str, int], str | None] | None = None,
        attempts: int = 1,
    ) -> None:
        self.kernel = kernel
        self.latency = latency or LatencyModel()
        self.sdk = sdk or SdkCost()
        self.partition_units_per_second = partition_units_per_second
        # fault(op, n) -> None | "before" (fails, no effect) | "after" (applied, then
        # the answer is lost: a timeout the caller cannot tell from a failure) |
        # "kill_before" / "kill_after" (the calling invocation dies there)
        self.fault = fault
        # Attempts a throttled call makes in all (the deployed client's max_attempts:
        # see fireline.wiring.BOTO_CONFIG); 1: the first throttle fails the call.
        self.attempts = attempts
        self._rng = random.Random(seed)
        self._buckets: dict[str, tuple[float, float]] = {}  # partition -> (units, at)
        self.requests: Counter[str] = Counter()
        self.throttled: Counter[str] = Counter()  # attempts throttled
        self.throttled_out: Counter[str] = Counter()  # calls failed: every attempt throttled
        self.throttled_partitions: Counter[str] = Counter()  # attempts throttled, by partition
        self.faults: Counter[str] = Counter()

    def call(
        self, op: Op, effect: Callable[[], T], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> T:
        attempt = 1
        while True:
            try:
                return self._attempt(op, effect, args, kwargs)
            except _Throttled as exc:
                if attempt >= self.attempts:
                    self.throttled_out[op.name] += 1
                    raise errors.Unavailable(f"{op.name} throttled (simulated)") from exc
                # The SDK's standard mode: a random wait of up to 2 ** (attempt - 1) s.
                self.kernel.sleep(self._rng.random() * 2 ** (attempt - 1))
                attempt += 1

    def _attempt(
        self, op: Op, effect: Callable[[], T], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> T:
        k = self.kernel
        k.alive()
        k.charge(self.sdk.of(op.name, 1 if op.items is None else op.items(args, kwargs)))
        n = self.requests[op.name]
        self.requests[op.name] += 1
        half = self.latency.draw(self._rng) / 2
        k.sleep(half)  # the request on its way
        failure = self.fault(op.name, n) if self.fault is not None else None
        if failure == "kill_before":
            k.kill(k.current().process)
            raise sim_kernel.Killed
        if failure == "before":
            self.faults[op.name] += 1
            k.sleep(half)
            raise errors.Unavailable(f"{op.name} failed (simulated)")
        if op.writes is not None and self._throttled(op.writes(args, kwargs)):
            self.throttled[op.name] += 1
            k.sleep(half)
            raise _Throttled
        try:
            with k.unmeasured():  # the server's work, not the Lambda's
                result = effect()
        finally:
            if failure == "kill_after":
                k.kill(k.current().process)
            k.sleep(half)  # the answer on its way back; a kill here loses it
        if failure == "after":
            self.faults[op.name] += 1
            raise errors.Unavailable(f"{op.name} timed out after taking effect (simulated)")
        return result

    def _throttled(self, partitions: Sequence[str]) -> bool:
        rate = self.partition_units_per_second
        if rate is None or not partitions:
            return False
        now = self.kernel.now()
        needed = Counter(partitions)
        levels: dict[str, tuple[float, float]] = {}
        for partition, units in needed.items():
            left, at = self._buckets.get(partition, (rate, now))
            # A thread's clock runs ahead of the kernel's by the CPU its turn has used, so
            # calls reach a partition a little out of time order: one stamped before the
            # bucket's last refill adds nothing (it never drains it below empty).
            left = min(rate, left + max(0.0, now - at) * rate)
            if left < units:
                self.throttled_partitions[partition] += 1
                return True
            levels[partition] = (left - units, max(at, now))
        for partition, level in levels.items():
            self._buckets[partition] = level
        return False


class _Throttled(Exception):
    """One attempt throttled (Network.call retries it, or fails with Unavailable)."""


class Latent:
    """A port implementation whose listed methods go through the simulated network."""

    def __init__(self, inner: Any, network: Network, ops: Mapping[str, Op]) -> None:
        self._inner = inner
        self._network = network
        self._ops = ops

    @property
    def inner(self) -> Any:
        return self._inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        op = self._ops.get(name)
        if op is None or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._network.call(op, lambda: attr(*args, **kwargs), args, kwargs)

        return call


def _keys(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """The keys a batch read asks for (its first argument)."""
    keys = args[0] if args else kwargs.get("keys", ())
    return max(1, len(keys))


def _schedule_writes(
    shards: int, item_units: int
) -> Callable[[tuple[Any, ...], dict[str, Any]], list[str]]:
    def writes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
        tenant_id, schedule_id = args[0], args[1]
        shard = model.due_shard(schedule_id, shards)
        # The item's partition key (its tenant's key for it), a unit per KB of the item,
        # and its due-index entry moving (keys only, a unit each): a delete and a put in
        # the index partition of its shard.
        key = model.tenant_key(tenant_id, schedule_id)
        return [f"schedules/{key}"] * item_units + [f"due/{shard}", f"due/{shard}"]

    return writes


def schedule_ops(shards: int = model.DEFAULT_SHARDS, *, item_units: int = 1) -> dict[str, Op]:
    """The schedule store's methods on the wire; ``item_units``: write units of one
    schedule item (a unit per KB: 4 for a schedule of 4 KB)."""
    return {
        "due": Op("dynamodb.Query"),
        "get_many": Op("dynamodb.BatchGetItem", items=_keys),
        "get": Op("dynamodb.GetItem"),
        "list": Op("dynamodb.Query"),
        "create": Op("dynamodb.PutItem"),
        "replace": Op("dynamodb.PutItem"),
        "delete": Op("dynamodb.DeleteItem"),
        "advance": Op("dynamodb.UpdateItem", _schedule_writes(shards, item_units)),
        # The item alone: its next fire, so its index entry, stays as it was.
        "clear_skipped": Op("dynamodb.UpdateItem", _schedule_item_writes(item_units)),
    }


def _schedule_item_writes(
    item_units: int,
) -> Callable[[tuple[Any, ...], dict[str, Any]], list[str]]:
    def writes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
        return [f"schedules/{model.tenant_key(args[0], args[1])}"] * item_units

    return writes


def _occurrence_writes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    first = args[0] if args else next(iter(kwargs.values()))
    schedule_id = getattr(first, "schedule_id", None) or str(first).split("#", 1)[0]
    return [f"occurrences/{schedule_id}"]


OCCURRENCE_OPS = {
    "put_new": Op("dynamodb.PutItem", _occurrence_writes),
    "get": Op("dynamodb.GetItem"),
    "get_many": Op("dynamodb.BatchGetItem", items=_keys),
    "history": Op("dynamodb.Query"),
    "transition": Op("dynamodb.PutItem", _occurrence_writes),
    "dead_letters": Op("dynamodb.Query"),
    "claim": Op("dynamodb.UpdateItem", _occurrence_writes),
    "annotate_running": Op("dynamodb.UpdateItem", _occurrence_writes),
    "settle": Op("dynamodb.UpdateItem", _occurrence_writes),
}
QUEUE_OPS = {
    "send_batch": Op("sqs.SendMessageBatch"),
    "receive": Op("sqs.ReceiveMessage"),
    "delete": Op("sqs.DeleteMessage"),
    "delete_batch": Op("sqs.DeleteMessageBatch"),
    "change_visibility": Op("sqs.ChangeMessageVisibility"),
}
LEASE_OPS = {
    "acquire": Op("dynamodb.UpdateItem"),
    "renew": Op("dynamodb.UpdateItem"),
    "release": Op("dynamodb.UpdateItem"),
    "get": Op("dynamodb.GetItem"),
}


def _slot_writes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """A take's or give-back's partition key: its number's block of the tenant's keys."""
    return [f"slots/{quota.slot_key(args[0], args[1])}"]


def _override_writes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    return [f"slots/{args[0]}"]


SLOT_OPS = {
    "held": Op("dynamodb.Query"),
    "take": Op("dynamodb.PutItem", _slot_writes),
    "give_back": Op("dynamodb.DeleteItem", _slot_writes),
    "set_limit": Op("dynamodb.TransactWriteItems", _override_writes),
    "overrides": Op("dynamodb.GetItem"),
}


class SimPool:
    """ports.Parallel on simulated threads of the calling thread's invocation."""

    def __init__(self, kernel: sim_kernel.Kernel, size: int) -> None:
        self.kernel = kernel
        self.size = size

    def run(self, calls: Sequence[Callable[[], T]]) -> list[T | Exception]:
        results: list[T | Exception] = []
        if not calls:
            return results
        process = self.kernel.current().process
        pending = list(enumerate(calls))
        pending.reverse()
        slots: list[T | Exception | None] = [None] * len(calls)

        def worker() -> None:
            # Only one simulated thread runs at a time: taking from the list is safe.
            while pending:
                index, call = pending.pop()
                try:
                    slots[index] = call()
                except Exception as exc:  # handed back as the call's outcome
                    slots[index] = exc

        threads = [
            self.kernel.spawn(worker, process=process, name=f"{process.name}-io{n}")
            for n in range(min(self.size, len(calls)))
        ]
        self.kernel.join(threads)
        return [slot for slot in slots]  # type: ignore[misc]
