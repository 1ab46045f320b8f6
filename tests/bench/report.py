"""The benchmark report: figures under stable dotted keys in .bench/report.json.

Each benchmark records its figures as it goes; the file keeps the keys of earlier
benchmarks (and earlier runs) it did not measure this time, so a partial run updates
what it measured and leaves the rest.
"""

from __future__ import annotations

import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPORT = Path(__file__).resolve().parents[2] / ".bench" / "report.json"


def record(key: str, figures: Any) -> None:
    """Store ``figures`` under ``key`` (e.g. "scale.steady_580") and print them."""
    REPORT.parent.mkdir(exist_ok=True)
    report: dict[str, Any] = json.loads(REPORT.read_text()) if REPORT.exists() else {}
    report[key] = figures
    report["machine"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "written_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    REPORT.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(f"\n{key}: {json.dumps(figures, indent=2, sort_keys=True)}")
