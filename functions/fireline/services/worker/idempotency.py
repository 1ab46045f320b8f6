"""Powertools idempotency whose records live on the occurrence row.

Why not Powertools' own DynamoDB table: a separate record would cost two more writes per
job (its put and its update) on top of the occurrence's own claim and completion. Here
the record *is* the row: Powertools' "put in progress" is the claim (queued or failed ->
running, attempts + 1) and its "save success" is the completion (running -> the outcome),
so exactly-once claim costs nothing beyond the writes the history needs anyway.

The four primitives map onto the OccurrenceStore port, so the same layer works on the
memory and DynamoDB adapters:

- key: the occurrence key itself (not a hash): it is already unique and deterministic.
- _put_record: ``claim`` (conditional); a refusal carries the row as the old record:
  running -> INPROGRESS (the other delivery waits or retries), settled -> COMPLETED (the
  stored result is replayed, the job is not run again).
- _update_record: ``settle`` with the outcome the function returned.
- _delete_record: the function raised (a worker bug, not a job failure, which is a
  result): the attempt is settled as failed so a redelivery can claim it again.
- in-progress expiry: the claim holds the row until the invocation's end (the Lambda
  context's remaining time), measured on the injected clock, so a timed-out invocation's
  claim expires instead of blocking forever.

One layer serves every record of a worker: what belongs to one record (its remaining
time, the row its message stands for, its claim, its outcome) is kept per thread, and a
record runs on one thread from its claim to its outcome, while the records of a batch
run side by side. Built once, the layer and its configuration cost nothing per record.

The worker's, not an adapter: it implements no port of Fireline's, only Powertools'
persistence interface, on the OccurrenceStore port that the adapters implement. So it
stands above that port, with the service that claims through it, and the worker reaches
DynamoDB only through the store wiring gives it.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
    IdempotencyKeyError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import (
    STATUS_CONSTANTS,
    DataRecord,
)

from fireline import ports
from fireline.domain import occurrence

# Without a Lambda context (tests, scripts) a claim is held this long.
DEFAULT_HOLD = timedelta(minutes=15)
_MILLISECOND = timedelta(milliseconds=1)


class _PerThread:
    """Attributes of the calling thread's own, as threading.local keeps them, held in a
    ContextVar: each thread runs in a context of its own, and so does each simulated
    thread of fireline.sim (a greenlet, which threading.local cannot tell apart)."""

    def __init__(self) -> None:
        object.__setattr__(self, "_var", contextvars.ContextVar("fireline-record"))

    def _mine(self) -> SimpleNamespace:
        mine: SimpleNamespace | None = self._var.get(None)
        if mine is None:
            mine = SimpleNamespace()
            self._var.set(mine)
        return mine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mine(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._mine(), name, value)


class OccurrenceIdempotency(BasePersistenceLayer):
    def __init__(self, occurrences: ports.OccurrenceStore, clock: ports.Clock) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._occurrences = occurrences
        self._clock = clock
        self._record = _PerThread()

    def bind(
        self, remaining_ms: Callable[[], int] | None, intent: occurrence.Occurrence | None = None
    ) -> None:
        """The current record's invocation's remaining time (a claim lasts as long as it
        does), and the row its message stands for, which the claim writes if it does not
        exist yet. For this thread, until the next bind."""
        self._record.remaining_ms = remaining_ms
        self._record.intent = intent
        self._record.claimed = None
        self._record.outcome = None

    @property
    def claimed(self) -> occurrence.Occurrence | None:
        """The row as this thread's last successful claim left it (its attempt number)."""
        return getattr(self._record, "claimed", None)

    def returned(self, outcome: dict[str, Any]) -> dict[str, Any]:
        """Note the outcome this thread's run returns, which Powertools then saves: the
        completion writes it as it is rather than parsed back from Powertools' JSON."""
        self._record.outcome = outcome
        return outcome

    def get_remaining_time_in_millis(self) -> int:
        """This thread's record's remaining time, as a Lambda context tells it: Powertools
        asks for it before each claim."""
        remaining = getattr(self._record, "remaining_ms", None)
        return remaining() if remaining is not None else int(DEFAULT_HOLD / _MILLISECOND)

    def _get_hashed_idempotency_key(self, data: dict[str, Any]) -> str | None:
        key = data.get("occurrence_key") if isinstance(data, dict) else None
        if isinstance(key, str) and key:
            return key
        if self.raise_on_no_idempotency_key:
            raise IdempotencyKeyError("the message carries no occurrence_key")
        return None

    def _get_record(self, idempotency_key: str) -> DataRecord:
        row = self._occurrences.get(idempotency_key)
        record = _record_of(row)
        if record is None:
            raise IdempotencyItemNotFoundError
        return record

    def _put_record(self, data_record: DataRecord) -> None:
        now = self._clock.now()
        remaining = getattr(self._record, "remaining_ms", None)
        hold = timedelta(milliseconds=remaining()) if remaining is not None else DEFAULT_HOLD
        claimed, row = self._occurrences.claim(
            data_record.idempotency_key,
            now=now,
            until=now + hold,
            intent=getattr(self._record, "intent", None),
        )
        if claimed:
            self._record.claimed = row
            return
        self._record.claimed = None
        raise IdempotencyItemAlreadyExistsError(old_data_record=_record_of(row))

    def _update_record(self, data_record: DataRecord) -> None:
        noted: dict[str, Any] | None = getattr(self._record, "outcome", None)
        self._record.outcome = None
        outcome = noted if noted is not None else json.loads(data_record.response_data or "{}")
        self._occurrences.settle(
            data_record.idempotency_key,
            state=occurrence.State(outcome["state"]),
            now=self._clock.now(),
            exit_reason=outcome["exit_reason"],
            result=outcome,
            attempt=outcome.get("attempt"),
        )

    def _delete_record(self, data_record: DataRecord) -> None:
        self._occurrences.settle(
            data_record.idempotency_key,
            state=occurrence.State.FAILED,
            now=self._clock.now(),
            exit_reason="error: the worker failed before recording an outcome",
        )


def _record_of(row: occurrence.Occurrence | None) -> DataRecord | None:
    """A row, seen as Powertools' idempotency record. Expiry timestamps stay unset: the
    row's own state (on the injected clock) already decided, and Powertools would judge
    them against the wall clock."""
    if row is None:
        return None
    if row.state is occurrence.State.RUNNING:
        return DataRecord(idempotency_key=row.key, status=STATUS_CONSTANTS["INPROGRESS"])
    if row.state in occurrence.SETTLED:
        stored = row.result or {"state": row.state.value, "exit_reason": row.exit_reason}
        return DataRecord(
            idempotency_key=row.key,
            status=STATUS_CONSTANTS["COMPLETED"],
            response_data=json.dumps(stored),
        )
    return None
