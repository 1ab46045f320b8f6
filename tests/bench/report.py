"""The benchmark report: figures under stable dotted keys in .bench/report.json, and
the same as readable tables in .bench/report.md.

Each benchmark records its figures as it goes; the file keeps the keys of earlier
benchmarks (and earlier runs) it did not measure this time, so a partial run updates
what it measured and leaves the rest. report.md is written again from the whole of
report.json on every record: a summary of the cost per job of every path first, then
every key's figures flattened to dotted names.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPORT = Path(__file__).resolve().parents[2] / ".bench" / "report.json"
SUMMARY = REPORT.with_suffix(".md")
# The cost summary's columns: (heading, figure under each cost.<path> key).
COST_COLUMNS = (
    ("$ per million at the design load", "usd_per_million"),
    ("$ per million, marginal", "marginal_usd_per_million"),
    ("$ per million, the path alone", "usd_per_million_alone"),
    ("write units", "write_units_per_fire"),
    ("index write units", "index_write_units_per_fire"),
    ("read units", "read_units_per_fire"),
    ("log bytes", "log_bytes_per_fire"),
)


def record(key: str, figures: Any) -> None:
    """Store ``figures`` under ``key`` (e.g. "scale.steady_580") and print them. Under a
    lock on the report: make bench runs its modules in two processes side by side."""
    REPORT.parent.mkdir(exist_ok=True)
    with open(REPORT.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        report: dict[str, Any] = json.loads(REPORT.read_text()) if REPORT.exists() else {}
        report[key] = figures
        report["machine"] = {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "written_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        REPORT.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        SUMMARY.write_text(markdown(report))
    print(f"\n{key}: {json.dumps(figures, indent=2, sort_keys=True)}")


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: the cost per job of each path (``cost.*`` keys with a
    ``usd_per_million``, per fire) side by side, each one's dollars by service, then every
    key's figures."""
    lines = ["# Benchmark report", ""]
    machine = report.get("machine", {})
    if machine:
        lines += [
            f"Written {machine.get('written_at')} by `make bench` "
            f"(Python {machine.get('python')}, {machine.get('cpus')} CPUs).",
            "",
        ]
    costs = {
        key: value
        for key, value in sorted(report.items())
        if key.startswith("cost.")
        and isinstance(value, dict)
        and "usd_per_million" in value
        and value.get("per", "fire") == "fire"  # not the deployment's cost of a minute
    }
    if costs:
        lines += [
            "## Cost per job (us-east-1 list prices, per fire)",
            "",
            "| path | " + " | ".join(heading for heading, _ in COST_COLUMNS) + " |",
            "|---|" + "---:|" * len(COST_COLUMNS),
        ]
        for key, value in costs.items():
            cells = [_cell(value.get(name)) for _, name in COST_COLUMNS]
            lines.append(f"| {key.removeprefix('cost.')} | " + " | ".join(cells) + " |")
        services = sorted({s for v in costs.values() for s in v.get("usd_by_service", {})})
        lines += [
            "",
            "### $ per million by service",
            "",
            "| path | " + " | ".join(services) + " |",
            "|---|" + "---:|" * len(services),
        ]
        for key, value in costs.items():
            by = value.get("usd_by_service", {})
            cells = [_cell(by.get(s)) for s in services]
            lines.append(f"| {key.removeprefix('cost.')} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Every figure", "", "| key | figure |", "|---|---:|"]
    for key, value in sorted(report.items()):
        if key == "machine":
            continue
        for name, figure in _flatten(key, value):
            lines.append(f"| {name} | {_cell(figure)} |")
    return "\n".join(lines) + "\n"


def _flatten(prefix: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [
            pair
            for key, inner in sorted(value.items())
            for pair in _flatten(f"{prefix}.{key}", inner)
        ]
    return [(prefix, value)]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.4f}".rstrip("0").rstrip(".")
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value)
    return str(value).replace("|", "\\|")
