"""The worker's settings (WorkerConfig, as wiring builds it from the function's
environment) and the tunables its steps share: one place to read what a worker waits,
holds and keeps back."""

from __future__ import annotations

from dataclasses import dataclass

from fireline.domain import model, quota
from fireline.services import dispatch, pool

DEFER_SECONDS = 10
# The ticker's delays put a fire on the queue at most a second early; a little more
# covers the clocks of the ticker's and the worker's hosts.
EARLY_HOLD_SECONDS = 2.0
# A slot outlives the job's deadline by this much, then frees itself (a crashed holder).
SLOT_MARGIN_SECONDS = 60
# buffer_one's waiting fire keeps the buffer this many of its deferrals long.
BUFFER_HOLD_DEFERRALS = 3
# Stop a job this long before the invocation would be killed, to record its outcome.
STOP_MARGIN_SECONDS = 5.0
# A fire this invocation cannot give its deadline goes back to the queue (see
# Worker._short_of_time) when a fresh invocation would give it more than this much more:
# the time a record may spend before its run (an early fire's hold, the batch's reads).
TIME_SLACK_SECONDS = 3.0
REQUEUE_FOR_TIME_DELAY_SECONDS = 0
# ...at most this many times for one fire, then it runs with what it is given.
MOST_REQUEUES_FOR_TIME = 3
# A run at its tenant's limit waits this long in its invocation for a slot to free (see
# SlotKeeping._in_turn) before it is deferred: a busy tenant's second-long jobs
# free slots every moment, where a deferral puts its run 10 to 20 s back.
SLOT_WAIT_SECONDS = 3.0
# How long a worker keeps the register of tenant limit overrides before reading it again
# (see Worker._take_slot): a limit set on a tenant that runs unlimited applies, at the
# latest, to the runs that start this long after the change.
OVERRIDES_CACHE_SECONDS = 10.0


@dataclass(frozen=True)
class WorkerConfig:
    job_class: str = "default"
    tenant_limit: int = quota.DEFAULT_LIMIT
    defer_seconds: int = DEFER_SECONDS
    slot_wait_seconds: float = SLOT_WAIT_SECONDS
    # A message visible before its fire time is held until then, up to this long: the
    # clocks' margin, for a class whose fires the ticker makes visible early (the
    # default class's, as here) the batching window, and for a class the ticker spreads
    # bursts of, the burst lead (see :func:`early_hold_for`).
    early_hold_seconds: float = EARLY_HOLD_SECONDS + dispatch.BATCHING_WINDOW_SECONDS
    # The class's maximum concurrency (its workers' invocations; the long class: its
    # runners'). A tenant runs at most quota.class_limit of the class's jobs at once (this
    # times in_flight), so the rest is left to other tenants; its share of the
    # invocations themselves is services.pool's. 0: not shared out (the tenant limit
    # alone applies).
    class_max_concurrency: int = 0
    # Remote jobs one invocation keeps in flight (WORKER_IN_FLIGHT; 1 for the long class,
    # whose runners run a job each): the class runs class_max_concurrency times this many
    # jobs at once, and a tenant's share of them is counted from that.
    in_flight: int = 1
    # One-off jobs hold a unit of their tenant's active jobs quota, given back at their end.
    jobs_counted: bool = False
    overrides_cache_seconds: float = OVERRIDES_CACHE_SECONDS
    # This worker's container, in its class's register of live containers: a tenant
    # occupies at most its share of the class's invocations as really running (see
    # services.pool). None: not shared out by invocations (the configured size alone).
    pool_member: str | None = None
    pool_refresh_seconds: float = pool.REFRESH_SECONDS

    @property
    def class_limit(self) -> int:
        return quota.class_limit(self.class_max_concurrency * self.in_flight)


def early_hold_for(job_class: str, burst_lead_seconds: float) -> float:
    """How long a worker of ``job_class`` holds a fire that came early: the clocks'
    margin; for the classes whose fires the ticker makes visible early
    (dispatch.HELD_CLASSES), the event source mapping's batching window too; and for a
    class with a burst queue (model.BURST_QUEUES), the burst lead."""
    hold = EARLY_HOLD_SECONDS
    if job_class in dispatch.HELD_CLASSES:
        hold += dispatch.BATCHING_WINDOW_SECONDS
    if job_class in model.BURST_QUEUES:
        hold += burst_lead_seconds
    return hold
