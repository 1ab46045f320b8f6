"""Retry backoff: exponential with a cap and full jitter, and a hard attempt cap.

Full jitter (a uniform delay in [0, min(cap, base * factor**(n-1)))) spreads a burst of
failures that happened together instead of retrying them in lockstep. The random source
is injected so tests are deterministic. Nothing retries forever: ``max_attempts`` counts
the first attempt too.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from fireline.domain import errors
from fireline.domain.schedule import RandomSource

# SQS cannot delay a message more than 15 minutes; longer backoffs are capped there.
MAX_DELAY_SECONDS = 900


class Jitter(enum.StrEnum):
    FULL = "full"
    NONE = "none"


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    base_seconds: float = 2.0
    factor: float = 2.0
    cap_seconds: float = 300.0
    jitter: Jitter = Jitter.FULL

    def __post_init__(self) -> None:
        # Stored records come back as plain strings; compare by identity only with enums.
        try:
            object.__setattr__(self, "jitter", Jitter(self.jitter))
        except ValueError as exc:
            raise errors.ValidationError(
                f"{self.jitter!r} is not a jitter", field="retry.jitter"
            ) from exc
        checks = {
            "max_attempts": 1 <= self.max_attempts <= 100,
            "base_seconds": 0 <= self.base_seconds <= MAX_DELAY_SECONDS,
            "factor": 1 <= self.factor <= 10,
            "cap_seconds": self.base_seconds <= self.cap_seconds <= MAX_DELAY_SECONDS,
        }
        for name, ok in checks.items():
            if not ok:
                raise errors.ValidationError(
                    f"{getattr(self, name)} is out of range", field=f"retry.{name}"
                )

    def ceiling(self, attempt: int) -> float:
        """The largest delay before retry number ``attempt`` (1 = after the first failure)."""
        if attempt < 1:
            raise errors.ValidationError("attempts count from 1", field="attempt")
        # Compute in log space's cheap cousin: stop growing once past the cap, so a large
        # attempt number cannot overflow a float.
        delay = self.base_seconds
        for _ in range(attempt - 1):
            delay *= self.factor
            if delay >= self.cap_seconds:
                return self.cap_seconds
        return min(delay, self.cap_seconds)

    def delay(self, attempt: int, rng: RandomSource) -> float:
        ceiling = self.ceiling(attempt)
        if self.jitter is Jitter.NONE:
            return ceiling
        # random() is below 1, but the product can round up to the ceiling itself (a
        # ceiling of a few subnormal seconds): full jitter stays below it.
        return min(rng.random() * ceiling, math.nextafter(ceiling, 0.0))

    def should_retry(self, attempts_made: int) -> bool:
        return attempts_made < self.max_attempts
