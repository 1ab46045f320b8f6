"""Whether a process is still running, as tests of stopped jobs ask it."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

# How long a killed process may take to disappear on a busy machine (polled, not slept).
GONE_WITHIN_SECONDS = 20.0


def alive(pid: int) -> bool:
    """Is ``pid`` a running process? A zombie (killed, not yet reaped by its parent or
    by init) counts as gone: it runs nothing and holds no memory."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in {"Z", "X"}


def all_gone(pids: Iterable[int]) -> bool:
    """Wait (polling) until none of ``pids`` runs; False if one still does at the bound."""
    waiting = list(pids)
    waited_until = time.monotonic() + GONE_WITHIN_SECONDS
    while any(alive(pid) for pid in waiting):
        if time.monotonic() > waited_until:
            return False
        time.sleep(0.05)
    return True
