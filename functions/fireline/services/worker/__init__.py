"""The worker: one queue message in, one occurrence run (or knowingly not run) out.

Per message, in order:
1. The occurrence key (no key: a loud failure, never a run without idempotency).
2. Still wanted? Cancel, pause, delete and update are checks of the row and the schedule
   version, here at the last moment; an unwanted fire is recorded as skipped.
3. Time: an invocation that cannot give the job its deadline, where a fresh one would,
   sends the fire back to the queue (no attempt spent).
4. Overlap at run time: a ``forbid``/``buffer_one`` fire is skipped (or held) while
   another run of its schedule holds the schedule's run slot.
5. A tenant's share of the class's invocations as really running (services.pool), and
   a tenant slot (per-tenant concurrency): none free -> deferred, never run over the
   limit, never dropped.
6. The run, under Powertools idempotency on the occurrence row (claim, then outcome), with
   the job's deadline. Every slot taken for it is given back on every path that does
   not leave it to be handed on, whichever call fails (see SlotKeeping._give_back_slots).
7. A failed attempt is retried by sending the message again with the backoff as its delay
   (a fresh message: SQS's receive count, which drives the dead-letter redrive, counts
   deliveries that crashed, not attempts that failed); past the attempt cap it is dead.

Deferrals and retries re-send and acknowledge the original, so they never count towards
the queue's redrive to its dead-letter queue; that one is left for messages that crash
the worker itself, a poison the occurrence row cannot even record.

Where each part lives, in the order a batch meets them:

- ``intake``: the Worker itself; a batch (or one message) in, the batch's reads made
  together (``prefetch``), its records started, the unstarted ones handed back, the
  one-off jobs' units of quota given back per tenant.
- ``prefetch``: the batch's rows and schedules, read once at its start.
- ``dispatcher``: the batch's records started within the invocation's bounds (remote
  jobs in flight, Python jobs per vCPU), earliest fire first, none started too late.
- ``steps``: one record's steps in their order, each from the module named for it:
  ``wanted`` (still wanted?), ``deadlines`` (does the deadline fit this invocation?),
  ``slots`` (overlap's run slot, the invocation share, the tenant slots and their
  give-backs), ``run`` (the claim and the run, or a long job's start), the claim made
  through ``idempotency`` (Powertools' records kept on the occurrence row).
- ``outcomes``: each Result and what it writes and sends.
- ``config``: WorkerConfig and the tunables the parts share; ``state``: what every
  part reads (stores, clock, metrics), set once by the Worker.

A package rather than sibling ``worker_*`` modules: the worker's parts are one room, found
from the folder, and outside it ``fireline.services.worker`` still names the worker.
"""

from __future__ import annotations

from fireline.services.worker.config import (
    BUFFER_HOLD_DEFERRALS,
    DEFER_SECONDS,
    EARLY_HOLD_SECONDS,
    MOST_REQUEUES_FOR_TIME,
    OVERRIDES_CACHE_SECONDS,
    REQUEUE_FOR_TIME_DELAY_SECONDS,
    SLOT_MARGIN_SECONDS,
    STOP_MARGIN_SECONDS,
    TIME_SLACK_SECONDS,
    WorkerConfig,
    early_hold_for,
)
from fireline.services.worker.intake import Worker
from fireline.services.worker.outcomes import Busy, Result
from fireline.services.worker.prefetch import Prefetch

__all__ = [
    "BUFFER_HOLD_DEFERRALS",
    "DEFER_SECONDS",
    "EARLY_HOLD_SECONDS",
    "MOST_REQUEUES_FOR_TIME",
    "OVERRIDES_CACHE_SECONDS",
    "REQUEUE_FOR_TIME_DELAY_SECONDS",
    "SLOT_MARGIN_SECONDS",
    "STOP_MARGIN_SECONDS",
    "TIME_SLACK_SECONDS",
    "Busy",
    "Prefetch",
    "Result",
    "Worker",
    "WorkerConfig",
    "early_hold_for",
]
