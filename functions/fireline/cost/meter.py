"""A request meter for boto3 clients: what AWS would bill for the calls they make.

Attached to a client through botocore's events (``before-parameter-build`` and
``after-call``), it counts requests by service and operation and DynamoDB's capacity by
DynamoDB's rules:

- a write costs 1 write unit per started KB of the larger of the item before and after
  it, at least 1, and a refused conditional write still costs the units of the item it
  checked; a transaction's items cost twice that (ConditionCheck included), and a
  cancelled transaction is still charged;
- each secondary index item written or deleted costs 1 write unit per started KB of
  the index item (its key and the table's key, or the whole item for an index that
  projects ALL): an update that changes an indexed key is a delete and a put there, an
  item that gains the key a put, one that loses it a delete, and an unchanged key
  writes nothing unless the index projects every attribute and the item changed;
- a read costs 1 read unit per started 4 KB, strongly consistent; half that eventually
  consistent; twice that in a transaction. A Query or Scan is charged on the total size
  of the items it read (before any filter), a GetItem or BatchGetItem per item, and
  every read at least its minimum even when nothing is found.

SQS bills every 64 KB chunk of a request's payload as one request; so do SNS (a Publish's
message and attributes) and EventBridge (each PutEvents entry: its time, source,
detail-type, detail and resources).

Item sizes before and after a write are read through ``reader`` (a strongly consistent
GetItem on an unmetered client), which an emulator affords and production does not:
without it the meter charges what the request itself shows (the item put, or 1 unit).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple

WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4096
SQS_CHUNK_BYTES = 64 * 1024
TRANSACTION_FACTOR = 2.0
EVENTUALLY_CONSISTENT_FACTOR = 0.5

#: Reads one item, strongly consistent, without being metered: (table, key) -> item.
Reader = Callable[[str, dict[str, Any]], "dict[str, Any] | None"]
#: A table's key attribute names (hash first).
KeySchema = Callable[[str], list[str]]

_WRITES = ("PutItem", "UpdateItem", "DeleteItem")
UNMETERED = "-"  # the function name ``unmetered`` meters under: nothing counted


class Index(NamedTuple):
    name: str
    key: list[str]  # the index's key attributes
    projection: str = "KEYS_ONLY"  # KEYS_ONLY, INCLUDE or ALL


# --- DynamoDB's sizes ----------------------------------------------------------------------


def attribute_size(value: Mapping[str, Any]) -> int:
    """DynamoDB's size of one attribute value (wire format), in bytes."""
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(inner.encode())
    if kind == "N":
        digits = len(str(Decimal(inner)).lstrip("-").replace(".", "").lstrip("0")) or 1
        return math.ceil(digits / 2) + 1
    if kind == "B":
        return len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(attribute_size(v) + 1 for v in inner)
    if kind in ("SS", "NS", "BS"):
        return sum(attribute_size({kind[0]: v}) for v in inner)
    raise ValueError(kind)


def item_size(item: Mapping[str, Any] | None) -> int:
    """DynamoDB's size of an item: its attribute names and values, in bytes."""
    if not item:
        return 0
    return sum(len(name.encode()) + attribute_size(value) for name, value in item.items())


def write_units(size_bytes: int, *, transactional: bool = False) -> float:
    """Write units of one item write: per started KB, at least 1; twice in a transaction."""
    units = max(1, math.ceil(size_bytes / WRITE_UNIT_BYTES))
    return units * (TRANSACTION_FACTOR if transactional else 1.0)


def read_units(size_bytes: int, *, consistent: bool = True, transactional: bool = False) -> float:
    """Read units of one read of ``size_bytes``: per started 4 KB, at least 1; half
    eventually consistent, twice in a transaction."""
    units = max(1, math.ceil(size_bytes / READ_UNIT_BYTES))
    if transactional:
        return units * TRANSACTION_FACTOR
    return units * (1.0 if consistent else EVENTUALLY_CONSISTENT_FACTOR)


def sqs_requests(payload_bytes: int) -> int:
    """Billed SQS requests of one call: a request per started 64 KB of payload."""
    return max(1, math.ceil(payload_bytes / SQS_CHUNK_BYTES))


# What EventBridge counts of an entry's Time, whatever it holds.
EVENT_TIME_BYTES = 14


def _event_bytes(entry: Mapping[str, Any]) -> int:
    size = EVENT_TIME_BYTES if entry.get("Time") is not None else 0
    for name in ("Source", "DetailType", "Detail"):
        size += len(str(entry.get(name) or "").encode())
    return size + sum(len(str(r).encode()) for r in entry.get("Resources") or [])


def _publish_bytes(params: Mapping[str, Any]) -> int:
    return _message_bytes({**params, "MessageBody": params.get("Message")})


def index_key(item: Mapping[str, Any] | None, attrs: Sequence[str]) -> tuple[str, ...] | None:
    """The item's key in an index (None: the item is not in it, the index is sparse)."""
    if not item or not all(a in item for a in attrs):
        return None
    return tuple(json.dumps(item[a], sort_keys=True) for a in attrs)


def _message_bytes(entry: Mapping[str, Any]) -> int:
    size = len(str(entry.get("MessageBody") or entry.get("Body") or "").encode())
    for name, value in (entry.get("MessageAttributes") or {}).items():
        size += len(name.encode()) + len(str(value.get("DataType", "")).encode())
        size += len(str(value.get("StringValue", "")).encode())
        size += len(value.get("BinaryValue", b"") or b"")
    return size


# --- the meter -----------------------------------------------------------------------------


@dataclass
class _Write:
    """One item write awaiting its answer: its table, key and item before."""

    table: str
    key: dict[str, Any]
    before: dict[str, Any] | None
    put: dict[str, Any] | None = None  # the item a Put writes (sized without a reader)
    transactional: bool = False
    check_only: bool = False  # a transaction's ConditionCheck: charged, writes nothing


@dataclass
class _Read:
    """A read awaiting its answer: its consistency (per table for a batch), and the size
    it reads when the answer does not show it."""

    consistent: bool
    size: int | None = None
    tables: dict[str, bool] = field(default_factory=dict)
    keys: dict[str, int] = field(default_factory=dict)  # keys asked per table (batches)


@dataclass
class Meter:
    """Counts requests, billed requests and DynamoDB capacity of the clients attached."""

    indexes: dict[str, list[Any]] = field(default_factory=dict)  # table -> [Index]
    reader: Reader | None = None
    key_schema: KeySchema | None = None
    #: Cumulative CPU seconds that are not the product's (an in-process emulator's), left
    #: out of the CPU measured by ``within``.
    outside_cpu: Callable[[], float] = field(default=lambda: 0.0)

    requests: Counter[str] = field(default_factory=Counter)  # API calls by operation
    calls: Counter[str] = field(default_factory=Counter)  # by "service.Operation"
    billed: Counter[str] = field(default_factory=Counter)  # billed requests, same keys
    write_units: float = 0.0  # base tables
    index_write_units: float = 0.0
    read_units: float = 0.0
    write_units_by: defaultdict[str, float] = field(
        default_factory=lambda: defaultdict(float)
    )  # by "Operation table"
    read_units_by: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    scanned: int = 0  # items read by Query/Scan (ScannedCount)
    writes: Counter[str] = field(default_factory=Counter)  # single-item writes per table
    # Every item written per table: single-item writes, BatchWriteItem's processed items
    # and each Put/Update/Delete of a TransactWriteItems that went through.
    item_writes: Counter[str] = field(default_factory=Counter)
    conditional_failures: int = 0
    #: What ``within`` measured per function: invocations, AWS calls, CPU seconds, and
    #: the bytes the product logged.
    invocations: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    function_calls: Counter[str] = field(default_factory=Counter)
    cpu_seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    log_bytes: Counter[str] = field(default_factory=Counter)
    #: Per function, the seconds its invocations hold messages until their fire time
    #: (``hold``): billed as Lambda's duration, but no CPU the meter could measure.
    wait_seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    #: Per function, the seconds its invocations wait on remote targets (``on_targets``):
    #: part of the invocation's wall time, which is what Lambda bills.
    target_seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    #: Per function, the seconds its invocations wait on the network (its AWS calls and
    #: its targets) as their calls overlap, where the caller worked that out
    #: (``waited``): billed in place of 5 ms per call one after another.
    network_seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    function: str = ""  # the function being metered now ("" outside ``within``)

    _overhead: float = 0.0  # CPU spent in the meter's own hooks (and its reader)
    _charged: float = 0.0  # CPU charged to functions so far
    _lock: Any = field(default_factory=threading.RLock)

    def __post_init__(self) -> None:
        self.indexes = {
            table: [Index(*entry) for entry in entries] for table, entries in self.indexes.items()
        }

    # --- wiring ------------------------------------------------------------------------

    def attach(self, client: Any) -> None:
        service = client.meta.service_model.service_name
        client.meta.events.register(f"before-parameter-build.{service}", self._before_call)
        client.meta.events.register(f"after-call.{service}", self._after_call)

    def reset(self) -> None:
        """Forget every count (the index definitions and reader stay)."""
        for counter in (
            self.requests, self.calls, self.billed, self.write_units_by, self.read_units_by,
            self.writes, self.item_writes, self.invocations, self.function_calls,
            self.cpu_seconds, self.log_bytes, self.wait_seconds, self.target_seconds,
            self.network_seconds,
        ):  # fmt: skip
            counter.clear()
        self.write_units = self.index_write_units = self.read_units = 0.0
        self.scanned = self.conditional_failures = 0

    def count(self, *operations: str) -> int:
        return sum(self.requests[o] for o in operations)

    @contextlib.contextmanager
    def within(self, function: str, invocations: float = 1.0) -> Iterator[None]:
        """Meter the work of ``function`` (e.g. one worker invocation): its AWS calls,
        its CPU seconds (the process's, less the meter's own, ``outside_cpu`` and what
        a ``within`` nested inside charged to its own function) and what it logs through
        ``log_handler``."""
        previous, self.function = self.function, function
        cpu, outside, overhead = time.process_time(), self.outside_cpu(), self._overhead
        charged = self._charged
        try:
            yield
        finally:
            spent = time.process_time() - cpu
            spent -= self.outside_cpu() - outside
            spent -= self._overhead - overhead
            spent = max(0.0, spent - (self._charged - charged))
            with self._lock:
                if function != UNMETERED:
                    self.cpu_seconds[function] += spent
                    self.invocations[function] += invocations
                self._charged += spent
            self.function = previous

    @contextlib.contextmanager
    def unmetered(self) -> Iterator[None]:
        """Leave out the calls, CPU and logs of what runs inside (a harness's polling, a
        warm-up): counted neither as requests nor against any function."""
        with self.within(UNMETERED, invocations=0):
            yield

    def charge(self, operation: str, billed: int = 1) -> None:
        """Count one request of ``operation`` ("service.Operation") made on the product's
        behalf outside its clients (an event source mapping's receive)."""
        with self._lock:
            self.requests[operation.split(".", 1)[1]] += 1
            self.calls[operation] += 1
            self.billed[operation] += billed

    def hold(self, function: str, seconds: float) -> None:
        """Count ``seconds`` an invocation of ``function`` waits without CPU: a worker
        holding a message that became visible before its fire time (an expectation:
        fireline.cost.model's ``expected_wait``), the API holding a batch's sends for
        their phase."""
        with self._lock:
            self.wait_seconds[function] += seconds

    def on_targets(self, function: str, seconds: float) -> None:
        """Count ``seconds`` an invocation of ``function`` spends waiting on its remote
        targets (HTTP, Lambda invoked RequestResponse) beyond its own work: a span of
        the batch's target calls side by side, as the caller works it out."""
        with self._lock:
            self.target_seconds[function] += seconds

    def waited(self, function: str, seconds: float) -> None:
        """Count ``seconds`` an invocation of ``function`` waits on the network, its
        calls side by side as it makes them (see ``network_seconds``)."""
        with self._lock:
            self.network_seconds[function] += seconds

    def log_handler(self, formatter: logging.Formatter | None = None) -> logging.Handler:
        """A logging handler counting the bytes each function logs, as formatted by
        ``formatter`` (the deployed JSON lines, newline included)."""
        return _LogBytes(self, formatter)

    # --- botocore hooks ------------------------------------------------------------------

    @contextlib.contextmanager
    def _own_cpu(self) -> Iterator[None]:
        cpu, outside = time.process_time(), self.outside_cpu()
        try:
            yield
        finally:
            spent = (time.process_time() - cpu) - (self.outside_cpu() - outside)
            with self._lock:
                self._overhead += max(0.0, spent)

    def _before_call(
        self, model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> None:
        if self.function == UNMETERED:
            return
        with self._own_cpu():
            service = model.service_model.service_name
            name = model.name
            with self._lock:
                self.requests[name] += 1
                self.calls[f"{service}.{name}"] += 1
                self.function_calls[self.function] += 1
            context["meter"] = (self.function, self._pending(service, name, params))

    def _after_call(
        self, model: Any, parsed: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> None:
        if "meter" not in context:
            return
        with self._own_cpu():
            function, pending = context.pop("meter")
            service = model.service_model.service_name
            self._settle(service, model.name, function, pending, parsed)

    # --- what a request will cost: noted before it goes --------------------------------

    def _pending(self, service: str, name: str, params: dict[str, Any]) -> Any:
        if service == "sqs":
            if name == "SendMessage":
                return _message_bytes(params)
            if name == "SendMessageBatch":
                return sum(_message_bytes(entry) for entry in params.get("Entries", []))
            return 0
        if service == "sns" and name == "Publish":
            return [_publish_bytes(params)]
        if service == "events" and name == "PutEvents":
            return [_event_bytes(entry) for entry in params.get("Entries", [])]
        if service != "dynamodb":
            return None
        if name in _WRITES:
            table = params["TableName"]
            key = params.get("Key") or self._key(table, params["Item"])
            return [_Write(table, key, self._read(table, key), put=params.get("Item"))]
        if name == "BatchWriteItem":
            pending = []
            for table, requests in params["RequestItems"].items():
                for request in requests:
                    if "PutRequest" in request:
                        item = request["PutRequest"]["Item"]
                        key = self._key(table, item)
                        pending.append(_Write(table, key, self._read(table, key), put=item))
                    else:
                        key = request["DeleteRequest"]["Key"]
                        pending.append(_Write(table, key, self._read(table, key)))
            return pending
        if name == "TransactWriteItems":
            pending = []
            for entry in params["TransactItems"]:
                ((kind, action),) = entry.items()
                table = action["TableName"]
                key = action.get("Key") or self._key(table, action["Item"])
                pending.append(
                    _Write(
                        table,
                        key,
                        self._read(table, key),
                        put=action.get("Item"),
                        transactional=True,
                        check_only=kind == "ConditionCheck",
                    )
                )
            return pending
        if name == "GetItem":
            size = None
            if "ProjectionExpression" in params:
                # A projection returns less than it reads: the charge is the whole item's.
                size = item_size(self._read(params["TableName"], params["Key"]))
            return _Read(bool(params.get("ConsistentRead")), size)
        if name in ("Query", "Scan"):
            return _Read(bool(params.get("ConsistentRead")))
        if name == "BatchGetItem":
            requested = params["RequestItems"]
            return _Read(
                False,
                tables={t: bool(r.get("ConsistentRead")) for t, r in requested.items()},
                keys={t: len(r.get("Keys", [])) for t, r in requested.items()},
            )
        return None

    # --- what it cost: settled on the answer --------------------------------------------

    def _settle(
        self, service: str, name: str, function: str, pending: Any, parsed: dict[str, Any]
    ) -> None:
        operation = f"{service}.{name}"
        failed = "Error" in parsed
        if service == "sqs":
            payload = pending or 0
            if name == "ReceiveMessage":
                payload = sum(_message_bytes(m) for m in parsed.get("Messages", []))
            with self._lock:
                self.billed[operation] += sqs_requests(payload)
            return
        if (service, name) in (("sns", "Publish"), ("events", "PutEvents")):
            with self._lock:
                self.billed[operation] += sum(sqs_requests(size) for size in pending)
            return
        with self._lock:
            self.billed[operation] += 1
        if service != "dynamodb":
            return
        if isinstance(pending, _Read):
            if name == "GetItem":
                size = item_size(parsed.get("Item")) if pending.size is None else pending.size
                self._charge_read(name, read_units(size, consistent=pending.consistent))
            elif name == "BatchGetItem":
                self._settle_batch_get(pending, parsed)
            else:
                self._settle_query(name, pending, parsed)
        elif name == "TransactGetItems":
            for response in parsed.get("Responses", []):
                size = item_size(response.get("Item"))
                self._charge_read(name, read_units(size, transactional=True))
        elif isinstance(pending, list):
            self._settle_writes(name, pending, parsed, failed)

    def _settle_writes(
        self, name: str, pending: list[_Write], parsed: dict[str, Any], failed: bool
    ) -> None:
        unprocessed = {
            (table, json.dumps(self._request_key(table, request), sort_keys=True))
            for table, requests in parsed.get("UnprocessedItems", {}).items()
            for request in requests
        }
        if failed and name in _WRITES and _condition_failed(parsed):
            with self._lock:
                self.conditional_failures += 1
        for write in pending:
            if (write.table, json.dumps(write.key, sort_keys=True)) in unprocessed:
                continue  # not written, not charged: the caller sends it again
            if failed and name == "BatchWriteItem":
                continue  # a refused batch writes nothing
            went_through = not failed and not write.check_only
            after = write.before
            if went_through:
                after = self._read(write.table, write.key) if self.reader else write.put
            size = max(item_size(write.before), item_size(after))
            if self.reader is None and write.put is not None:
                size = item_size(write.put)
            units = write_units(size, transactional=write.transactional)
            index_units = self._index_units(write.table, write.before, after) if went_through else 0
            with self._lock:
                self.write_units += units
                self.write_units_by[f"{name} {write.table}"] += units
                self.index_write_units += index_units
                if went_through:
                    self.item_writes[write.table] += 1
                    if name in _WRITES:
                        self.writes[write.table] += 1

    def _index_units(
        self, table: str, before: dict[str, Any] | None, after: dict[str, Any] | None
    ) -> float:
        units = 0.0
        for index in self.indexes.get(table, []):
            old, new = index_key(before, index.key), index_key(after, index.key)
            if old == new and (index.projection != "ALL" or old is None or before == after):
                continue
            if old is not None:
                units += write_units(self._index_item_size(table, index, before))
            if new is not None:
                units += write_units(self._index_item_size(table, index, after))
            if old == new:
                units -= write_units(self._index_item_size(table, index, before))  # one put
        return units

    def _index_item_size(self, table: str, index: Index, item: dict[str, Any] | None) -> int:
        if item is None:
            return 0
        if index.projection == "ALL":
            return item_size(item)
        names = set(index.key) | set(self._schema(table))
        return item_size({n: v for n, v in item.items() if n in names})

    def _settle_query(self, name: str, pending: _Read, parsed: dict[str, Any]) -> None:
        items = parsed.get("Items", [])
        scanned = int(parsed.get("ScannedCount", len(items)))
        size = sum(item_size(i) for i in items)
        if items and scanned > len(items):  # filtered out: read all the same, sized alike
            size = math.ceil(size * scanned / len(items))
        with self._lock:
            self.scanned += scanned
        self._charge_read(name, read_units(size, consistent=pending.consistent))

    def _settle_batch_get(self, pending: _Read, parsed: dict[str, Any]) -> None:
        # A key asked for and not found is charged the minimum all the same; keys left
        # unprocessed are asked again (and charged then).
        responses = parsed.get("Responses", {})
        unprocessed = parsed.get("UnprocessedKeys", {})
        for table, asked in pending.keys.items():
            consistent = pending.tables.get(table, False)
            found = responses.get(table, [])
            for item in found:
                self._charge_read(
                    "BatchGetItem", read_units(item_size(item), consistent=consistent)
                )
            missing = asked - len(found) - len(unprocessed.get(table, {}).get("Keys", []))
            for _ in range(max(0, missing)):
                self._charge_read("BatchGetItem", read_units(0, consistent=consistent))

    def _charge_read(self, name: str, units: float) -> None:
        with self._lock:
            self.read_units += units
            self.read_units_by[name] += units

    # --- reading items and keys ----------------------------------------------------------

    def _read(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        return self.reader(table, key) if self.reader else None

    def _schema(self, table: str) -> list[str]:
        return self.key_schema(table) if self.key_schema else []

    def _key(self, table: str, item: dict[str, Any]) -> dict[str, Any]:
        names = self._schema(table)
        if not names:
            return dict(item)
        return {name: item[name] for name in names}

    def _request_key(self, table: str, request: dict[str, Any]) -> dict[str, Any]:
        if "PutRequest" in request:
            return self._key(table, request["PutRequest"]["Item"])
        return dict(request["DeleteRequest"]["Key"])


def _condition_failed(parsed: dict[str, Any]) -> bool:
    return bool(parsed.get("Error", {}).get("Code") == "ConditionalCheckFailedException")


class _LogBytes(logging.Handler):
    def __init__(self, meter: Meter, formatter: logging.Formatter | None) -> None:
        super().__init__(level=logging.NOTSET)
        self.meter = meter
        if formatter is not None:
            self.setFormatter(formatter)

    def emit(self, record: logging.LogRecord) -> None:
        if self.meter.function == UNMETERED:
            return
        line = self.format(record) + "\n"
        with self.meter._lock:
            self.meter.log_bytes[self.meter.function] += len(line.encode())
