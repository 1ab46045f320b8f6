"""Lambda event fixtures (events/<source>/<case>.json) and a Lambda context stand-in."""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EVENTS = Path(__file__).resolve().parents[2] / "events"


def load(source: str, case: str) -> dict[str, Any]:
    """A fresh copy of events/<source>/<case>.json (tests may change it freely)."""
    return copy.deepcopy(json.loads((EVENTS / source / f"{case}.json").read_text()))


@dataclass
class LambdaContext:
    """What the Lambda runtime passes: remaining time counts down from the timeout."""

    timeout_ms: int = 30_000
    function_name: str = "fireline-test"
    aws_request_id: str = "request-1"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:fireline-test"
    function_version: str = "$LATEST"
    log_group_name: str = "/aws/lambda/fireline-test"
    log_stream_name: str = "stream"
    _started: float = field(default_factory=time.monotonic)

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self.timeout_ms - int((time.monotonic() - self._started) * 1000))


@dataclass
class CountdownContext(LambdaContext):
    """A context whose remaining time falls by ``per_call_ms`` each time it is asked,
    not with the wall clock: how many ticks a ticker invocation makes then depends on the
    code alone, not on how loaded the machine running the test is."""

    per_call_ms: int = 400
    _calls: int = 0

    def get_remaining_time_in_millis(self) -> int:
        remaining = self.timeout_ms - self._calls * self.per_call_ms
        self._calls += 1
        return max(0, remaining)
