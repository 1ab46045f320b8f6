"""What the browser tests share: Debian's Chromium, driven by Playwright's Python package
through its executable path (Playwright's own browser download cannot be used), the
folder their screenshots go to, and how long a wait may take on a loaded machine."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest

CHROMIUM = Path(os.environ.get("FIRELINE_CHROMIUM", "/usr/bin/chromium"))
SHOTS = Path(__file__).resolve().parents[2] / ".test-output" / "console"
# Generous for a loaded machine; every wait ends as soon as its condition holds.
WAIT_MS = 30_000


def playwright() -> ModuleType:
    """Playwright's sync API, its waits bounded by WAIT_MS, once Chromium is known to be
    there. Called at a browser test module's import: without Chromium the module is
    skipped (make test installs it, as root); in CI a missing browser is a failure."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            raise RuntimeError(f"{CHROMIUM} is missing: apt-get install chromium")
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium", allow_module_level=True)
    sync_api = pytest.importorskip("playwright.sync_api")
    sync_api.expect.set_options(timeout=WAIT_MS)
    return sync_api
