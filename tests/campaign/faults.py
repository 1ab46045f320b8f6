"""The campaign's faults on the ports: which call fails, and how (seeded), including the
kinds aimed at one kind of call (TARGETED)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fireline.adapters import memory
from fireline.domain import errors


class Crash(BaseException):
    """The invocation dies where it stands (a Lambda timeout or a crash): nothing after
    it runs, nothing is acknowledged. A BaseException, as a real kill escapes ``except
    Exception``."""


class Violation(AssertionError):
    pass


# --- faults on the ports -----------------------------------------------------------------


@dataclass
class Faults:
    """Decides, call by call, whether a port call fails and how (seeded)."""

    rng: random.Random
    rates: dict[str, float] = field(default_factory=dict)
    fired: Counter[str] = field(default_factory=Counter)

    def decide(self, name: str = "") -> str | None:
        """The fault for a call of port method ``name``, if any: a targeted kind only
        ever hits the calls it names (TARGETED)."""
        draw = self.rng.random()
        for kind, rate in self.rates.items():
            if kind in TARGETED and name not in TARGETED[kind]:
                continue
            if draw < rate:
                self.fired[kind] += 1
                return kind
            draw -= rate
        return None

    def note(self, kind: str) -> None:
        """A fault the machine itself made happen (a race, a short invocation, a flood)."""
        self.fired[kind] += 1

    def total(self) -> int:
        return sum(self.fired.values())


# Faults that hit one kind of call: the slot store's reads and give-backs, and the
# schedule advance (a tick killed right after it, or stalled past its lease by it).
TARGETED: dict[str, frozenset[str]] = {
    "throttle_slot_read": frozenset({"held"}),
    "throttle_slot_give_back": frozenset({"give_back"}),
    "kill_after_advance": frozenset({"advance"}),
    "stall_after_advance": frozenset({"advance"}),
}
# How long a stall after an advance lasts: past the ticker's lease trust (the TTL less the
# safety margin), as a long pause of the process or a slow answer would be.
STALL_SECONDS = 12
PORT_FAULTS = ("before", "after", "throttle", "kill_before", "kill_after", *TARGETED)


class Faulty:
    """A port whose calls may fail: ``before`` (no effect), ``throttle`` (no effect),
    ``after`` (applied, the answer lost), ``kill_before``/``kill_after`` (the calling
    invocation dies there), and the targeted kinds (TARGETED): ``throttle_slot_read`` and
    ``throttle_slot_give_back`` (no effect), ``kill_after_advance`` (applied, then the
    invocation dies), ``stall_after_advance`` (applied, then ``clock`` moves past the
    lease's trust before the caller goes on)."""

    def __init__(self, inner: Any, faults: Faults, clock: memory.FakeClock) -> None:
        self._inner = inner
        self._faults = faults
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr):
            return attr
        faults = self._faults

        clock = self._clock

        def call(*args: Any, **kwargs: Any) -> Any:
            kind = faults.decide(name)
            if kind in ("before", "throttle", "throttle_slot_read", "throttle_slot_give_back"):
                raise errors.Unavailable(f"{name}: {kind} (injected)")
            if kind == "kill_before":
                raise Crash(name)
            result = attr(*args, **kwargs)
            if kind == "after":
                raise errors.Unavailable(f"{name}: answer lost (injected)")
            if kind in ("kill_after", "kill_after_advance"):
                raise Crash(name)
            if kind == "stall_after_advance":
                clock.advance(STALL_SECONDS)
            return result

        return call
