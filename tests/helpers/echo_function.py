"""A Lambda handler for the local runtime's own tests: answers with its process id."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def handler(event: Any, context: Any) -> dict[str, Any]:
    if event == "raise":
        raise ValueError("asked to fail")
    if event == "refuse":
        raise Exception("Unauthorized")
    if isinstance(event, dict) and "started" in event:
        # Say which process runs it, then run long enough to be killed meanwhile.
        Path(event["started"]).write_text(str(os.getpid()))
        time.sleep(60)
    return {"pid": os.getpid(), "event": event}
