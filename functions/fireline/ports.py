"""The seams between use cases and the outside world.

Each port has a memory implementation in :mod:`fireline.adapters.memory` and an AWS one;
one contract suite (tests/contract) holds both to the same behaviour, so the fake cannot
drift from the real thing.

Every write that guards against a race says so here, because callers rely on it:
``create`` is conditional on absence, ``replace`` on the version read, ``advance`` on the
next fire read, ``put_new`` on the occurrence key's absence, ``transition`` on the state
read, and lease calls on owner and fencing token.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from fireline.domain import (
    api_keys,
    backfill,
    dag,
    lease,
    model,
    occurrence,
    policies,
    quota,
    signing,
    workflow,
)


class Clock(Protocol):
    def now(self) -> datetime:
        """Wall-clock time, timezone-aware UTC: used for the schedule itself."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never go back: used for intervals."""
        ...

    def sleep(self, seconds: float) -> None: ...


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    cursor: str | None  # pass back to get the next page; None at the end


@dataclass(frozen=True)
class DueEntry:
    """What the due index holds: enough to find the schedule and check nothing moved."""

    tenant_id: str
    schedule_id: str
    next_fire: datetime


class ScheduleStore(Protocol):
    def create(self, item: model.Schedule, *, charge: quota.Charge | None = None) -> None:
        """Store a new schedule; AlreadyExists when its id is taken (conditional put).

        With ``charge``, the same atomic write takes a unit of the tenant's quota: over
        the limit it raises QuotaExceeded and writes nothing (nor does AlreadyExists)."""
        ...

    def create_many(
        self,
        items: Sequence[model.Schedule],
        *,
        charge: quota.Charge | None = None,
        first_new: bool = False,
    ) -> builtins.list[model.Schedule]:
        """Store new schedules (a batch's jobs) of one tenant, whose ids no item has: a
        fresh id each, or ids the caller read as missing. Unlike ``create`` the writes are
        not conditional on the id (a batch write takes no condition): an item of that id
        would be overwritten. With ``first_new``, the first item is written alone before
        the others, conditional on its id being new: AlreadyExists if it is taken, with
        nothing written (and no unit kept).

        With ``charge``, a unit per item is taken first, held by holders written in the
        same transaction (see quota.Holder): if they would pass the limit it raises
        QuotaExceeded and writes nothing. Unavailable when some items stay unwritten; the
        units of the items known unwritten are given back, and those of the items whose
        write went unanswered are kept (a count too high, never too low, until the sweep
        finds them never written). The items as stored (with their holder's number)."""
        ...

    def get(
        self, tenant_id: str, schedule_id: str, *, consistent: bool = True
    ) -> model.Schedule | None:
        """``consistent=False``: an eventually consistent read (half the price) that may
        miss a write of the last second; only for a caller whose every decision on it is
        checked again (see the worker)."""
        ...

    def get_many(
        self, keys: Sequence[tuple[str, str]], *, consistent: bool = True
    ) -> builtins.list[model.Schedule]:
        """The schedules of (tenant_id, schedule_id) keys that exist, in no particular
        order, however many keys (read 100 to a request). ``consistent=False``: as
        ``get``'s, for a caller whose every decision on it is checked again."""
        ...

    def list(
        self, tenant_id: str, *, limit: int, cursor: str | None = None
    ) -> Page[model.Schedule]:
        """A tenant's schedules in id order."""
        ...

    def replace(self, item: model.Schedule, *, expected_version: int) -> None:
        """Overwrite a schedule; ConflictError unless the stored version is expected_version
        and the stored ``quota_held`` is the item's (a unit given back stays given back)."""
        ...

    def delete(
        self, tenant_id: str, schedule_id: str, *, refund: quota.Quota | None = None
    ) -> bool:
        """Remove a schedule; False when there was none. With ``refund``, only a schedule
        holding a unit of its quota is removed, and the unit is given back in the same
        atomic write: of two deletes (or a retried one), one gives it back."""
        ...

    def release(self, tenant_id: str, schedule_id: str, refund: quota.Quota) -> bool:
        """Give back the unit of quota the schedule (a job) holds and keep the item, in one
        atomic write; False when it holds none (given back already, or no such item)."""
        ...

    def release_many(
        self, tenant_id: str, schedule_ids: Sequence[str], refund: quota.Quota
    ) -> builtins.list[str]:
        """Give back the units jobs of one tenant hold: each job's mark removed on the
        condition that it is there (a repeat finds none), then one give-back for all the
        marks this call removed. The ids given back. A failure between the two leaves
        the count too high, never too low."""
        ...

    def release_held(self, job: model.Schedule) -> bool:
        """Give back the unit a batch's job holds in its holder (its cancel): the holder
        loses the job in one transaction with the count's decrement, once. False when
        the job holds none there (given back already, or not a batch's job)."""
        ...

    def due(
        self, shard: int, *, until: datetime, limit: int, cursor: str | None = None
    ) -> Page[DueEntry]:
        """Active schedules of ``shard`` with next fire <= until, earliest first, a page
        of at most ``limit`` at a time. Pass the cursor back (with the same ``until``) for
        the entries after the page; None means the page reached the end (a cursor may
        still lead to an empty page). Read from an index that lags the table: an entry
        may show a next fire the schedule has already left."""
        ...

    def advance(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        expected_next_fire: datetime,
        expected_version: int,
        next_fire: datetime | None,
        now: datetime,
        skipped: policies.SkippedRange | None = None,
    ) -> bool:
        """Move next fire forward (None: the schedule completed).

        Conditional on the stored next fire and version still being the ones read: a stale
        ticker cannot move a schedule backwards, and an update that kept the same next fire
        (new version) is not overwritten by a ticker that materialized the old version.
        False when the condition failed (someone else advanced, paused or changed it).

        ``skipped`` (the fires this advance moves past without sending) is stored on the
        item in the same write, in place of what it held: the caller writes the rows of a
        held range before an advance replaces it.
        """
        ...

    def clear_skipped(
        self, tenant_id: str, schedule_id: str, skipped: policies.SkippedRange
    ) -> bool:
        """Drop the held range once its rows are written; only while the item still holds
        that very range (a later advance's range stays). False when it holds another."""
        ...


@dataclass(frozen=True)
class OccurrenceFilter:
    """Which occurrences a history listing keeps: fire time in [since, until), and the
    state one of ``states`` (each bound only when given)."""

    since: datetime | None = None
    until: datetime | None = None
    states: tuple[occurrence.State, ...] = ()

    def keeps(self, row: occurrence.Occurrence) -> bool:
        return (
            (self.since is None or row.fire_time >= self.since)
            and (self.until is None or row.fire_time < self.until)
            and (not self.states or row.state in self.states)
        )


@dataclass(frozen=True)
class AwaitingSend:
    """A row written before its message was sent (a trigger's), still listed as awaiting
    it since ``since``: its send failed, its process died first, or the listing's clear
    did not land."""

    key: str
    since: datetime


class OccurrenceStore(Protocol):
    def put_new(self, item: occurrence.Occurrence, *, awaiting_send: bool = False) -> bool:
        """Store an occurrence unless its key exists; False for a duplicate.

        This conditional put is the correctness boundary of the ticker: racing tickers
        converge on one row per key. ``awaiting_send``: the row is written before its
        message is sent (a trigger); it is listed by :meth:`awaiting_send`, from its
        ``created_at``, until :meth:`sent` clears it, so a row whose request failed or
        died before confirming its send is found and settled by the sweep.
        """
        ...

    def sent(self, key: str) -> None:
        """Take the row off the awaiting-send listing (its message went, or it no longer
        waits for one). Nothing where it is not listed."""
        ...

    def awaiting_send(self, *, before: datetime, limit: int) -> list[AwaitingSend]:
        """Up to ``limit`` rows listed as awaiting their message since before ``before``.
        Eventually consistent: a row cleared a moment ago may still be listed."""
        ...

    def settle_unsent(self, key: str, *, since: datetime, now: datetime) -> bool:
        """Settle a listed row ``skipped`` ("skipped: not sent") and take it off the
        listing, only while it is queued and listed from ``since`` (as read): a trigger
        whose request failed or died before confirming its send runs nothing, as the
        request's own settle would have made it (a message that went after all finds it
        settled). False when the row moved on or another sweep settled it first."""
        ...

    def get(self, key: str, *, consistent: bool = True) -> occurrence.Occurrence | None:
        """``consistent=False``: an eventually consistent read (half the price) that may
        show an older state of the row; only where a conditional write follows."""
        ...

    def get_many(
        self, keys: Sequence[str], *, consistent: bool = True
    ) -> dict[str, occurrence.Occurrence]:
        """The rows of ``keys`` that exist, by key, however many keys (read 100 to a
        request). ``consistent=False``: as ``get``'s, only where a conditional write
        follows."""
        ...

    def history(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        limit: int,
        cursor: str | None = None,
        only: OccurrenceFilter | None = None,
    ) -> Page[occurrence.Occurrence]:
        """A schedule's occurrences, newest fire first, those ``only`` keeps. The rows
        read are bounded by its time range; its states are a filter after the read, so a
        page may hold fewer than ``limit`` rows (even none) and still have a cursor."""
        ...

    def open_rows(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        since: datetime,
        limit: int,
        cursor: str | None = None,
    ) -> Page[occurrence.Occurrence]:
        """A schedule's open occurrences (queued, or failed with a retry to come) whose fire
        time is ``since`` or later, earliest first, read consistently. A page holds at
        most ``limit`` rows (it may hold fewer, even none, and still have a cursor): the
        rows read are bounded by the time range, not by how many are open."""
        ...

    def transition(self, item: occurrence.Occurrence, *, expected_state: occurrence.State) -> bool:
        """Store ``item`` (its new state and fields) if the stored state is expected_state.

        False when the stored state moved on (another worker claimed or finished it).
        """
        ...

    def dead_letters(
        self, tenant_id: str, *, limit: int, cursor: str | None = None
    ) -> Page[occurrence.Occurrence]:
        """A tenant's dead occurrences (attempts exhausted), newest fire first."""
        ...

    def claim(
        self,
        key: str,
        *,
        now: datetime,
        until: datetime,
        intent: occurrence.Occurrence | None = None,
    ) -> tuple[bool, occurrence.Occurrence | None]:
        """Take an occurrence to run it: queued or failed (or running past its
        ``in_progress_until``, its holder gone) -> running, attempts + 1, held until
        ``until``. With ``intent`` (the row a fire's message stands for), a row that does
        not exist yet is created running: the ticker sends fires without writing their
        rows, and the first delivery's claim writes it (created at the intent's
        ``created_at``, the send time, when it has one; else ``now``). One conditional write: of two
        deliveries, one claims it.

        Returns (True, the claimed row) or (False, the row as it stands, None if absent).
        """
        ...

    def annotate_running(
        self,
        key: str,
        *,
        execution: str | None = None,
        task_token: str | None = None,
        attempts: int | None = None,
        progress: dict[str, Any] | None = None,
        in_progress_until: datetime | None = None,
    ) -> bool:
        """Record facts about the running attempt (a long job's execution, its task, its
        progress); conditional on the row still running. False when it is not."""
        ...

    def settle(
        self,
        key: str,
        *,
        state: occurrence.State,
        now: datetime,
        exit_reason: str,
        result: dict[str, Any] | None = None,
        attempt: int | None = None,
    ) -> bool:
        """Record the outcome of the running attempt (succeeded, failed, dead).

        Conditional on the row still being running, and on ``attempt`` when given: False
        when it is not (a cancel, or a holder that outlived its claim and was replaced by
        a newer attempt, whose outcome this one must not overwrite).
        """
        ...


@dataclass(frozen=True)
class QueueLoad:
    """A class queue's messages as SQS counts them (approximately): ready to be taken,
    delayed (fires sent ahead of their time), and taken but not yet deleted (in flight)."""

    ready: int
    delayed: int
    in_flight: int


@dataclass(frozen=True)
class OutboundMessage:
    body: dict[str, Any]
    delay_seconds: int = 0
    id: str = ""  # batch entry id; defaults to the position in the batch


@dataclass(frozen=True)
class ReceivedMessage:
    message_id: str
    receipt: str
    body: dict[str, Any]
    receive_count: int
    attributes: dict[str, Any] = field(default_factory=dict)


class WorkQueue(Protocol):
    def send_batch(self, job_class: str, messages: Sequence[OutboundMessage]) -> list[str]:
        """Send up to 10 messages; returns the ids of entries that failed (to resend)."""
        ...

    def receive(
        self, job_class: str, *, max_messages: int = 10, visibility_timeout: int | None = None
    ) -> list[ReceivedMessage]: ...

    def delete(self, job_class: str, receipt: str) -> None: ...

    def change_visibility(self, job_class: str, receipt: str, seconds: int) -> None: ...

    def dead_letters(self, job_class: str, *, max_messages: int = 10) -> list[ReceivedMessage]:
        """Messages the queue's redrive moved to its dead-letter queue."""
        ...

    def load(self, job_class: str) -> QueueLoad:
        """The class queue's messages, every tenant's: one request, approximate counts."""
        ...


class LeaseStore(Protocol):
    def acquire(
        self, name: str, owner: str, now_ms: int, terms: lease.LeaseTerms
    ) -> lease.Lease | None:
        """Take the lease if free or expired (token + 1); None while someone holds it."""
        ...

    def renew(self, held: lease.Lease, now_ms: int, terms: lease.LeaseTerms) -> lease.Lease:
        """Extend a held lease; LeaseLost unless owner and token still match, unexpired."""
        ...

    def release(self, held: lease.Lease) -> None:
        """Give the lease up early (expire it) if still held with this token."""
        ...

    def get(self, name: str) -> lease.Lease | None: ...


R = TypeVar("R")


class Parallel(Protocol):
    """Bounded concurrency for independent I/O (boto3 clients are thread-safe).

    Threads in Lambda (a pool per invocation), simulated threads in the latency model.
    """

    def run(self, calls: Sequence[Callable[[], R]]) -> builtins.list[R | Exception]:
        """Run every call, at most a fixed number at once; each one's result or the
        Exception it raised, in the order given. Returns when all have finished."""
        ...


class Metrics(Protocol):
    """What services emit; Powertools ``Metrics`` (EMF) satisfies it in Lambda."""

    def add_metric(self, name: str, unit: str, value: float) -> None: ...


class SegmentEmitter(Protocol):
    """Where a sampled fire's trace segments go: X-Ray's daemon in Lambda, the log on the
    local cloud, a list in tests. Best effort: a segment lost is a gap in a trace, never a
    job's failure."""

    def emit(self, document: dict[str, Any]) -> None: ...


class LongJobRunner(Protocol):
    """The supervisor of long jobs (Step Functions): heartbeats, deadline, retries."""

    def start(self, name: str, job_input: dict[str, Any]) -> str:
        """Start an execution; its id. A repeat with the same name and input converges."""
        ...

    def stop(self, execution: str, cause: str) -> None: ...

    def heartbeat(self, task_token: str) -> bool:
        """Keep the task alive; False when it is gone (timed out, stopped)."""
        ...

    def succeed(self, task_token: str, output: dict[str, Any]) -> bool: ...

    def fail(self, task_token: str, error: str, cause: str) -> bool: ...


class SlotStore(Protocol):
    """Per-tenant concurrency slots (see fireline.domain.quota)."""

    def held(
        self, tenant_id: str, *, consistent: bool = True
    ) -> tuple[builtins.list[quota.Slot], int | None]:
        """The tenant's slots (expired ones included) and its limit override, if any.
        ``consistent=False``: half the price, and may miss the last second's takes and
        give-backs (a take is conditional, so a stale list costs a refused take at most)."""
        ...

    def take(
        self,
        tenant_id: str,
        number: int,
        holder: str,
        *,
        now_ms: int,
        expires_at_ms: int,
        replacing: str | None = None,
    ) -> bool:
        """Hold slot ``number`` if it is free or expired (conditional put); False if not.
        ``replacing``: also if that holder still has it (its run is known to be over:
        the slot is handed on without having been given back)."""
        ...

    def give_back(self, tenant_id: str, number: int, holder: str) -> None:
        """Free the slot if ``holder`` still has it (conditional delete)."""
        ...

    def join_pool(self, scope: str, member: str, *, now_ms: int, until_ms: int) -> int:
        """Say ``member`` (a worker's container) is alive in the register ``scope`` (a
        class's: quota.pool_scope) until ``until_ms``; how many members are alive at
        ``now_ms``, this one included. One write."""
        ...

    def set_limit(self, tenant_id: str, limit: int | None) -> None:
        """Override the default limit for one tenant (0: unlimited; None: the default).
        The tenant's override and the deployment's register of overrides (see
        :meth:`overrides`) change together or not at all; OverridesFull when the register
        has no room for it (nothing written)."""
        ...

    def overrides(self) -> Mapping[str, int] | None:
        """Every tenant's limit override, from the deployment's register: one eventually
        consistent read (a change may show a second late). None while there is no
        complete register (a deployment whose overrides were set before it existed, until
        :meth:`build_overrides`): then the overrides are unknown, and only ``held``
        tells a tenant's."""
        ...

    def build_overrides(self) -> int:
        """Make the register complete: every tenant's override as its own item says
        (a scan of the store), unless it is complete already. Idempotent, and safe beside
        ``set_limit`` (a change made while it runs makes it start again). The number of
        overrides the register holds; OverridesFull when they do not fit."""
        ...


class QuotaStore(Protocol):
    """A tenant's quota use and the operator's overrides (see fireline.domain.quota).

    Creates take and deletes give back units in the same atomic write as the item itself
    (``ScheduleStore.create``, ``WorkflowStore.put_definition``); this port reads the
    counts, sets overrides and counts what has no item of its own (uploads)."""

    def usage(self, tenant_id: str) -> quota.Usage:
        """Counts and overrides, read consistently."""
        ...

    def set_limit(self, tenant_id: str, name: quota.Quota, limit: int | None) -> None:
        """Override one quota's default for one tenant (0: no limit; None: the default)."""
        ...

    def count_upload(self, tenant_id: str, day: str, charge: quota.Charge) -> int:
        """Count one upload in ``day`` if the tenant is under its daily limit (one
        conditional write; a new day starts from zero); QuotaExceeded when not. The
        count of the day, this one included."""
        ...


class ApiKeyStore(Protocol):
    """API keys (kept only as SHA-256 hashes) and the tenant each one authenticates."""

    def get(self, api_key: str) -> api_keys.ApiKey | None:
        """The record of ``api_key`` (looked up by its hash), ended or not."""
        ...

    def add(self, record: api_keys.ApiKey) -> None:
        """Store a new key's record (conditional on its hash being new)."""
        ...

    def find(self, key_id: str) -> api_keys.ApiKey | None: ...

    def list(self, tenant_id: str | None = None) -> builtins.list[api_keys.ApiKey]:
        """Every key (of one tenant), oldest first."""
        ...

    def end(self, key_id: str, *, at_ms: int) -> api_keys.ApiKey:
        """Refuse the key from ``at_ms`` on (an earlier end stays); NotFound if no such key."""
        ...


class SigningKeyStore(Protocol):
    """Each tenant's webhook signing keys (Secrets Manager in AWS, one secret per tenant)."""

    def get(self, tenant_id: str) -> signing.KeyRing | None: ...

    def create(self, ring: signing.KeyRing) -> bool:
        """Store the tenant's first ring; False (nothing written) if it has one already."""
        ...

    def replace(self, ring: signing.KeyRing) -> None:
        """Store a new version of the tenant's ring (a rotation)."""
        ...


class UsagePlans(Protocol):
    """API Gateway's per-tenant usage identity: the throttle and quota of a usage plan."""

    def usage_key(self, tenant_id: str, *, plan_id: str | None = None) -> str:
        """The tenant's usage identifier, registered in ``plan_id`` (else the deployment's
        plan) if it is not yet: what the authorizer returns as ``usageIdentifierKey``."""
        ...


@dataclass(frozen=True)
class UploadForm:
    """Where a client POSTs a document (a multipart form: these fields, then the file)."""

    url: str
    fields: dict[str, str]


@dataclass(frozen=True)
class DocumentInfo:
    """What a document's metadata says, read without its body."""

    size: int
    content_type: str
    etag: str


class DocumentStore(Protocol):
    """Large immutable documents (workflow definitions): S3 in AWS."""

    def put(self, key: str, body: bytes) -> None: ...

    def get(self, key: str) -> bytes | None: ...

    def upload_form(
        self, key: str, *, expires_seconds: int, max_bytes: int, content_type: str
    ) -> UploadForm:
        """A presigned POST a client uploads a document with, without passing through
        the API; its policy allows only ``key``, ``content_type`` and 1 to ``max_bytes``
        bytes (enforced by the store, where the store enforces policies)."""
        ...

    def describe(self, key: str) -> DocumentInfo | None:
        """The document's size and type, from its metadata (no body read); None if absent."""
        ...

    def chunks(self, key: str, *, etag: str) -> Iterator[bytes]:
        """The document's body in pieces, if it is still the one ``etag`` names;
        ConflictError when it was replaced since, NotFound when it is gone."""
        ...


class BackfillStore(Protocol):
    """Backfill records (DynamoDB in AWS: the workflows table's generic keys).

    ``create`` is conditional on absence and ``replace`` on the revision read, so two
    passes over one backfill (a worker's nudge, the periodic pass) converge: one moves it.
    """

    def create(self, item: backfill.Backfill) -> None:
        """Store a new record; AlreadyExists when its id is taken."""
        ...

    def get(self, tenant_id: str, schedule_id: str, backfill_id: str) -> backfill.Backfill | None:
        """The record, read consistently; None when absent or another tenant's."""
        ...

    def replace(self, item: backfill.Backfill, *, expected_revision: int) -> bool:
        """Store ``item`` if the stored record is at ``expected_revision``; False if not."""
        ...

    def active(self, *, limit: int, cursor: str | None = None) -> Page[tuple[str, str, str]]:
        """(tenant_id, schedule_id, backfill_id) of records still needing a pass (running or
        cancelling), from a sparse index that lags: read each record before acting."""
        ...


class WorkflowStore(Protocol):
    """Workflow definitions' index, runs and run-nodes (DynamoDB in AWS).

    Every node move is conditional on the state read, so two controllers (a redelivered
    event, a reconcile racing a completion) converge: of two, one moves the node.
    """

    def put_definition(
        self, meta: workflow.DefinitionMeta, *, charge: quota.Charge | None = None
    ) -> bool:
        """Index a new version; False when that version exists (a racing registration).
        With ``charge`` (a new workflow's first version) the same atomic write takes a
        unit of the tenant's quota, or raises QuotaExceeded and writes nothing."""
        ...

    def latest_definition(
        self, tenant_id: str, workflow_id: str
    ) -> workflow.DefinitionMeta | None: ...

    def get_definition(
        self, tenant_id: str, workflow_id: str, version: int
    ) -> workflow.DefinitionMeta | None: ...

    def workflows(
        self, tenant_id: str, *, limit: int, cursor: str | None = None
    ) -> Page[workflow.DefinitionMeta]:
        """A tenant's workflows, each as its latest version, by workflow id."""
        ...

    def runs_of(
        self, tenant_id: str, workflow_id: str, *, limit: int, cursor: str | None = None
    ) -> Page[workflow.Run]:
        """A workflow's runs, newest first, each in its current state."""
        ...

    def create_run(self, run: workflow.Run) -> bool:
        """Store a new run; False when its id exists (a repeated start converges)."""
        ...

    def get_run(self, run_id: str) -> workflow.Run | None: ...

    def update_run(
        self,
        run: workflow.Run,
        *,
        expected_state: workflow.RunState,
        expected_generation: int,
        expected_materialized: int | None = None,
    ) -> bool:
        """Overwrite the run if its state and generation (and materialized count, when
        given) are the ones read: a completion is recorded once, a stale writer loses."""
        ...

    def active_runs(self, *, limit: int, cursor: str | None = None) -> Page[str]:
        """Ids of running runs (for the periodic reconcile)."""
        ...

    def put_nodes(self, run_id: str, nodes: Sequence[workflow.RunNode]) -> None:
        """Write node rows as given (a run's start, before anything is dispatched)."""
        ...

    def get_nodes(self, run_id: str, node_ids: Sequence[str]) -> dict[str, workflow.RunNode]:
        """The rows that exist, read consistently."""
        ...

    def all_nodes(self, run_id: str) -> builtins.list[workflow.RunNode]:
        """Every node row of a run (the reconcile's input)."""
        ...

    def nodes_in_state(
        self, run_id: str, state: dag.NodeState, *, limit: int, cursor: str | None = None
    ) -> Page[workflow.RunNode]:
        """A run's nodes in one state, by node id. The rows returned are read consistently
        and are in that state. Waiting, dispatched and succeeded nodes are read from the
        run's own rows; the rare states from the state index, where a node that has just
        moved into one may be missing for a moment (the index lags), and a page may hold
        fewer than ``limit`` rows."""
        ...

    def nodes(
        self, run_id: str, *, limit: int, cursor: str | None = None
    ) -> Page[workflow.RunNode]:
        """A run's nodes in every state, by node id (one Query on the run's partition)."""
        ...

    def count_states(self, run_id: str) -> dict[dag.NodeState, int]: ...

    def move_node(
        self,
        run_id: str,
        node_id: str,
        *,
        expected: dag.NodeState,
        to: dag.NodeState,
        ready_only: bool = False,
        generation: int | None = None,
        pending: int | None = None,
    ) -> bool:
        """Move one node from ``expected`` to ``to`` (setting generation, pending and a
        fan-out of 0 when given). ``ready_only``: also require no unfinished parent
        (pending <= 0). False when the condition failed."""
        ...

    def succeed_node(
        self, run_id: str, node_id: str, *, chunk: int, children: Sequence[str]
    ) -> bool:
        """Apply step ``chunk`` of the node's success: chunk 0 moves the node dispatched
        -> succeeded, chunk k > 0 needs the node's fan-out cursor at k; either sets the
        cursor to chunk + 1, and then (only if that move applied) decrements each child's
        unfinished-parent counter once. False when the move's condition failed (this chunk
        was applied already), and then nothing changed: a repeated completion decrements
        nothing. Not atomic: a crash after the move leaves some counters too high (never
        too low), which the reconcile repairs from the parents' states."""
        ...

    def add_finished_leaves(self, run_id: str, generation: int, count: int = 1) -> int:
        """Count ``count`` more of the run's leaves (nodes without children) finished in
        ``generation``; the count after. Callers add a leaf once, after the move that
        finished it, so the count may fall short (a crash in between), never over."""
        ...

    def finished_leaves(self, run_id: str, generation: int) -> int:
        """The count ``add_finished_leaves`` keeps (read consistently; 0 if none)."""
        ...


# --- the sweep -----------------------------------------------------------------------------


@dataclass(frozen=True)
class HeldJob:
    """What the held index holds: a one-off job that held its unit of the active jobs
    quota when the index saw it last (an index lags: read the job before acting)."""

    tenant_id: str
    schedule_id: str
    fire_time: datetime


@dataclass(frozen=True)
class SweepNote:
    """What the sweep noted on a tenant's count while it looked more than the tenant's
    live jobs: the count's change token then, when, and (once listed at least a
    settling time later) how many jobs the held index listed, and when."""

    token: str
    since: datetime
    listed: int | None = None
    listed_at: datetime | None = None


@dataclass(frozen=True)
class HeldCount:
    """A tenant's count of a quota, read consistently: the units, the token its last
    change wrote (every take and give-back writes a new one), and the sweep's note."""

    used: int
    token: str | None
    note: SweepNote | None = None


@dataclass(frozen=True)
class TenantPage:
    tenants: list[str]
    scanned: int  # items read to find them (a filtered scan reads more than it returns)
    cursor: str | None


class SweepStore(Protocol):
    """What the sweep reads beyond the schedule and occurrence stores, and its two
    conditional writes on a tenant's count."""

    def tenants_holding(
        self, name: quota.Quota, *, limit: int, cursor: str | None = None
    ) -> TenantPage:
        """Tenants whose count of ``name`` is above zero, a page of ``limit`` items read."""
        ...

    def count(self, tenant_id: str, name: quota.Quota) -> HeldCount: ...

    def held_jobs(self, tenant_id: str, *, limit: int, cursor: str | None = None) -> Page[HeldJob]:
        """The tenant's jobs in the held index, earliest fire first (eventually
        consistent: a job written a moment ago may be missing, one released may show)."""
        ...

    def marked_jobs(self, tenant_id: str, *, max_reads: int) -> tuple[int | None, int]:
        """How many of the tenant's jobs hold their mark, read consistently from the table
        (every job of the tenant is read: only for a count about to be reduced), and the
        items read; None when that took more than ``max_reads`` reads."""
        ...

    def note(self, tenant_id: str, note: SweepNote) -> bool:
        """Store ``note`` on the tenant's count if the count's token is still
        ``note.token`` (nothing taken or given back since); False when it is not."""
        ...

    def forgive(self, tenant_id: str, name: quota.Quota, units: int, note: SweepNote) -> bool:
        """Take ``units`` off the count, once, if its token and note are still ``note``
        (nothing taken or given back since it was listed) and it holds that many; a new
        token, and the note removed. False when the condition failed."""
        ...

    def holders(self, tenant_id: str, *, due_by: datetime | None = None) -> list[quota.Holder]:
        """The tenant's holders of batch jobs' units (those to visit by ``due_by``, if
        given), read consistently."""
        ...

    def unhold(
        self, tenant_id: str, number: int, entries: Sequence[str], *, version: int | None = None
    ) -> bool:
        """Give back the units of a holder's ``entries``, once (see
        fireline.adapters.quotas_dynamodb.DynamoQuotaStore.unhold)."""
        ...

    def drop_holder(self, holder: quota.Holder) -> bool:
        """Delete ``holder`` with its jobs' units given back, if it is the version read."""
        ...

    def mark_resent(
        self, tenant_id: str, schedule_id: str, now: datetime, *, not_since: datetime
    ) -> bool:
        """Record that the sweep sends a still-marked job's message now, unless it did
        after ``not_since``: of two sweeps (or one and its retry), one sends."""
        ...
