"""The benchmark report: figures under stable dotted keys in .bench/report.json, and
the same as readable tables in .bench/report.md (a run at a reduced size: in
.bench/report-scale-<scale>.json and .md).

Each benchmark records its figures as it goes; the file keeps the keys of earlier
benchmarks (and earlier runs) it did not measure this time, so a partial run updates
what it measured and leaves the rest. report.md is written again from the whole of
report.json on every record: a summary of the cost per job of every path first, then
every key's figures flattened to dotted names.

Every key is stamped with the code it ran on (:func:`code_stamp`: the commit, and a hash
of the files the figures depend on as they are in the working tree), under ``stamps``,
and every scenario that passed is listed under ``completed`` with its stamp. A run that
resumes (``make bench``; ``FIRELINE_BENCH_RESUME``) skips the scenarios an earlier run
completed on the same code: a full run takes longer than a sitting on two cores, and
continues where the last one stopped, as long as the code is the same.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import platform
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.size import SCALE


# A run at a reduced size (make bench-quick) keeps its figures in a report of its own:
# they never replace the full-size figures the docs' tables quote.
def path_for(scale: float) -> Path:
    """The report a run at ``scale`` writes."""
    name = "report.json" if scale == 1 else f"report-scale-{scale:g}.json"
    return Path(__file__).resolve().parents[2] / ".bench" / name


REPORT = path_for(SCALE)
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


# What the figures depend on: the product's code and template, the benchmarks, the build.
STAMPED_PATHS = ("functions", "infra", "statemachines", "tests/bench", "Makefile", "pyproject.toml")
# Top-level entries of the report that are not figures.
BOOKKEEPING = ("machine", "stamps", "completed")


@functools.cache
def code_stamp() -> dict[str, str]:
    """The code this run's figures run on (see :func:`stamp_of`)."""
    return stamp_of(REPORT.parents[1])


def stamp_of(root: Path) -> dict[str, str]:
    """The code a figure ran on: the commit, and a hash of :data:`STAMPED_PATHS` as they
    are in the working tree (the index's blob ids and any uncommitted change), so two
    runs have one stamp exactly when what they ran is the same. ``unknown`` outside git."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=True
        ).stdout

    try:
        listed = git("ls-files", "-s", "--", *STAMPED_PATHS)
        changed = git("diff", "HEAD", "--", *STAMPED_PATHS)
        untracked = git("ls-files", "--others", "--exclude-standard", "--", *STAMPED_PATHS)
        commit = git("rev-parse", "--short=12", "HEAD").strip()
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown", "tree": "unknown"}
    digest = hashlib.sha1((listed + changed + untracked).encode()).hexdigest()[:16]
    return {"commit": commit + ("-dirty" if changed or untracked else ""), "tree": digest}


def _locked_update(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Apply ``change`` to the report under its lock (make bench runs scenarios in two
    processes side by side) and write it, with report.md; the report as written."""
    REPORT.parent.mkdir(exist_ok=True)
    with open(REPORT.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        report: dict[str, Any] = json.loads(REPORT.read_text()) if REPORT.exists() else {}
        change(report)
        REPORT.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        SUMMARY.write_text(markdown(report))
        return report


def _run_stamp() -> str:
    """This code at this size: a scenario completed by ``make bench-quick`` (a tenth of
    the size) never stands for the full-size one."""
    return f"{code_stamp()['tree']}@scale={SCALE:g}"


def completed(nodeid: str) -> None:
    """Note that the scenario ``nodeid`` passed on this code, at this size."""

    def note(report: dict[str, Any]) -> None:
        report.setdefault("completed", {})[nodeid] = _run_stamp()

    _locked_update(note)


def done_on_this_code(nodeid: str) -> bool:
    """Whether an earlier run completed the scenario ``nodeid`` on this very code, at
    this size."""
    if not REPORT.exists() or code_stamp()["tree"] == "unknown":
        return False
    report = json.loads(REPORT.read_text())
    return bool(report.get("completed", {}).get(nodeid) == _run_stamp())


def record(key: str, figures: Any) -> None:
    """Store ``figures`` under ``key`` (e.g. "scale.steady_580"), stamped with the code
    they ran on, and print them."""

    def store(report: dict[str, Any]) -> None:
        report[key] = figures
        report.setdefault("stamps", {})[key] = code_stamp()
        report["machine"] = {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "written_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }

    _locked_update(store)
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
        if key in BOOKKEEPING:
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
