"""A batch's reads, made once at its start and handed to each record's steps."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from fireline.domain import model, occurrence


class Prefetch:
    """A batch's occurrence rows and schedules, read together at its start: a
    BatchGetItem per table for the batch in place of a GetItem per record for each.
    Eventually consistent, as the single reads they stand for (see ``Worker._read_row``
    and ``Worker._job_for``): however old, every decision taken on them is checked
    again as the single reads' are.

    A row's answer serves one delivery: a second delivery of the same key in the batch
    reads the row itself, after the first may have written it. A schedule's answer
    serves every fire of it in the batch. A key not asked reads on its own."""

    def __init__(
        self,
        rows: Mapping[str, occurrence.Occurrence | None] | None = None,
        schedules: Mapping[tuple[str, str], model.Schedule | None] | None = None,
    ) -> None:
        self._rows = dict(rows or {})
        self._schedules = dict(schedules or {})
        self._lock = threading.Lock()

    def row(
        self, key: str, read: Callable[[], occurrence.Occurrence | None]
    ) -> occurrence.Occurrence | None:
        """The row's prefetched answer (used up), else ``read()``."""
        with self._lock:
            if key in self._rows:
                return self._rows.pop(key)
        return read()

    def schedule(
        self, tenant_id: str, schedule_id: str, read: Callable[[], model.Schedule | None]
    ) -> model.Schedule | None:
        """The schedule's prefetched answer, else ``read()``."""
        if (tenant_id, schedule_id) in self._schedules:  # never changed after the batch read
            return self._schedules[(tenant_id, schedule_id)]
        return read()

    def known_schedule(self, tenant_id: str, schedule_id: str) -> model.Schedule | None:
        """The schedule's prefetched answer, or None where none was read (nothing read)."""
        return self._schedules.get((tenant_id, schedule_id))


# Outside a batch (a redelivery handled alone, a tool): every read is the record's own.
NOTHING_PREFETCHED = Prefetch()
