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
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
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


class OccurrenceIdempotency(BasePersistenceLayer):
    def __init__(self, occurrences: ports.OccurrenceStore, clock: ports.Clock) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._occurrences = occurrences
        self._clock = clock
        self._remaining_ms: Callable[[], int] | None = None
        self._intent: occurrence.Occurrence | None = None
        #: The row as the last successful claim left it (its attempt number).
        self.claimed: occurrence.Occurrence | None = None

    def bind(
        self, remaining_ms: Callable[[], int] | None, intent: occurrence.Occurrence | None = None
    ) -> None:
        """The current invocation's remaining time (a claim lasts as long as it does), and
        the row the message stands for, which the claim writes if it does not exist yet."""
        self._remaining_ms = remaining_ms
        self._intent = intent

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
        hold = (
            timedelta(milliseconds=self._remaining_ms())
            if self._remaining_ms is not None
            else DEFAULT_HOLD
        )
        claimed, row = self._occurrences.claim(
            data_record.idempotency_key, now=now, until=now + hold, intent=self._intent
        )
        if claimed:
            self.claimed = row
            return
        self.claimed = None
        raise IdempotencyItemAlreadyExistsError(old_data_record=_record_of(row))

    def _update_record(self, data_record: DataRecord) -> None:
        outcome = json.loads(data_record.response_data or "{}")
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
