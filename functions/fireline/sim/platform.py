"""Lambda's limits as the simulation plays them: the account's concurrent executions, a
function's execution environments (cold starts) and an SQS event source mapping's scaling.

Pure bookkeeping on virtual time: the fleets (fireline.sim.lambdas) ask these whether an
invocation may start, whether it starts cold, and how many invokes a mapping allows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# --- the account ------------------------------------------------------------------------------

# Every function of the account draws on one pool of concurrent executions: 1,000 unless
# AWS raised it on request. A function's reserved concurrency is carved out of that pool
# (and AWS keeps at least 100 of it unreserved).
ACCOUNT_CONCURRENCY = 1_000
UNRESERVED_MINIMUM = 100


@dataclass
class Account:
    """The account's concurrent executions, shared by every simulated function. A function
    with reserved concurrency runs within its reservation; every other one draws on what
    is left unreserved. An invocation that finds no room is throttled (not started)."""

    limit: int = ACCOUNT_CONCURRENCY
    reserved: dict[str, int] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)  # by function
    throttled: dict[str, int] = field(default_factory=dict)
    peak_unreserved: int = 0

    def __post_init__(self) -> None:
        if self.limit - sum(self.reserved.values()) < UNRESERVED_MINIMUM:
            raise ValueError(
                f"reserved concurrency leaves fewer than {UNRESERVED_MINIMUM} unreserved"
            )

    def unreserved_running(self) -> int:
        return sum(n for f, n in self.running.items() if f not in self.reserved)

    def try_start(self, function: str) -> bool:
        if function in self.reserved:
            room = self.reserved[function] - self.running.get(function, 0)
        else:
            room = self.limit - sum(self.reserved.values()) - self.unreserved_running()
        if room <= 0:
            self.throttled[function] = self.throttled.get(function, 0) + 1
            return False
        self.running[function] = self.running.get(function, 0) + 1
        self.peak_unreserved = max(self.peak_unreserved, self.unreserved_running())
        return True

    def finish(self, function: str) -> None:
        self.running[function] -= 1


@dataclass
class Environment:
    """One execution environment of a function: what its module-level caches hold for
    every invocation it serves, as the deployed handler's ``wiring.worker()`` (one
    worker a container, built on its first invocation)."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.worker: Any = None
        self.invocations = 0

    @property
    def cold(self) -> bool:
        """True while its first invocation runs: it pays the module's import."""
        return self.invocations == 1


@dataclass
class Containers:
    """A function's execution environments. An invocation takes a warm one if one is
    idle (the one idle longest: Lambda reuses environments, and which one is not
    specified), else Lambda starts a new one, which first imports the handler's module:
    its init CPU (measured on this machine, ``calibrate.import_cpu_seconds``) is charged
    to the invocation at the function's CPU share. Environments stay warm for the run (a
    simulated hour is well inside the time Lambda keeps an idle one)."""

    init_cpu_seconds: float = 0.0
    idle: list[Environment] = field(default_factory=list)
    cold_starts: int = 0

    def take(self) -> Environment:
        """An environment for one invocation: a warm one, or a new one (a cold start)."""
        if self.idle:
            environment = self.idle.pop(0)
        else:
            self.cold_starts += 1
            environment = Environment(self.cold_starts)
        environment.invocations += 1
        return environment

    def give_back(self, environment: Environment) -> None:
        self.idle.append(environment)


# --- the event source mapping's scaling ---------------------------------------------------------

# Standard mode (AWS Lambda developer guide, "Configuring scaling behavior for SQS event
# source mappings"): five concurrent invokes when messages appear; while messages are still
# available, up to 300 more a minute; at most 1,000 batches at once (MaximumConcurrency,
# where set, caps it lower); back to five when traffic is low. The ramp's condition is
# only that messages are still available: invokes that are still gathering their batch or
# starting count as reading batches, so the level does not wait for them to turn busy.
ESM_START = 5
ESM_RAMP_PER_SECOND = 300 / 60
ESM_MAX_INVOKES = 1_000
# How long the mapping sees idle pollers before it scales in to what is busy: AWS says
# only "when traffic is low"; a minute is this model's choice.
ESM_SCALE_IN_AFTER_SECONDS = 60.0
# Provisioned mode (AWS News Blog, "AWS Lambda enhances event processing with provisioned
# mode for SQS event-source mapping"): up to 1,000 more concurrent executions a minute and
# up to 20,000 at once; with MaximumPollers at most 2,000, that is 10 concurrent invokes a
# poller (this model's reading of those two figures). MinimumPollers are always ready.
PROVISIONED_RAMP_PER_SECOND = 1_000 / 60
PROVISIONED_INVOKES_PER_POLLER = 10
PROVISIONED_MAX_INVOKES = 20_000


@dataclass
class Scaling:
    """How many concurrent invokes an event source mapping allows at a moment.

    ``minimum_pollers`` None and ``provisioned`` False: standard mode. Provisioned mode
    starts at ``minimum_pollers`` worth of invokes (None: all of ``maximum`` at once, the
    idealized mapping of older runs) and ramps at the provisioned rate. The level rises
    while messages wait (visible and not taken by any poller), and falls back to what is
    busy (never below the start) after a quiet spell."""

    maximum: int
    provisioned: bool = False
    minimum_pollers: int | None = None
    level: float = 0.0
    _quiet_since: float | None = None
    _last: float | None = None

    def __post_init__(self) -> None:
        self.level = float(self.floor)

    @property
    def floor(self) -> int:
        if not self.provisioned:
            return min(self.maximum, ESM_START)
        if self.minimum_pollers is None:
            return self.maximum
        return min(self.maximum, self.minimum_pollers * PROVISIONED_INVOKES_PER_POLLER)

    @property
    def rate(self) -> float:
        return PROVISIONED_RAMP_PER_SECOND if self.provisioned else ESM_RAMP_PER_SECOND

    def allowed(self) -> int:
        return int(self.level + 1e-9)  # a ramp summed second by second lands on whole numbers

    def observe(self, now: float, *, busy: int, waiting: bool) -> None:
        """What the mapping sees at ``now``: ``busy`` invokes running, messages
        ``waiting`` (visible, not taken)."""
        elapsed = 0.0 if self._last is None else max(0.0, now - self._last)
        self._last = now
        if waiting:
            self.level = min(float(self.maximum), self.level + self.rate * elapsed)
            self._quiet_since = None
            return
        if busy < self.allowed() and not waiting:
            if self._quiet_since is None:
                self._quiet_since = now
            elif now - self._quiet_since >= ESM_SCALE_IN_AFTER_SECONDS:
                self.level = float(max(self.floor, busy))
                self._quiet_since = None
        else:
            self._quiet_since = None
