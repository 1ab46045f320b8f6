"""A bench run resumes on the same code and only there (tests/bench/report.py): each
scenario that passed is noted with the code and the size it ran at, and a later run
skips it only when both are the same."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench import report


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def a_checkout(root: Path) -> Path:
    git(root, "init", "-q")
    git(root, "config", "user.email", "bench@example.com")
    git(root, "config", "user.name", "bench")
    (root / "functions").mkdir()
    (root / "functions" / "ticker.py").write_text("PACE = 1\n")
    (root / "README.md").write_text("words\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "first")
    return root


def test_the_stamp_follows_the_code_and_nothing_else(tmp_path: Path) -> None:
    # GIVEN a checkout
    root = a_checkout(tmp_path)
    first = report.stamp_of(root)
    assert len(first["tree"]) == 16 and not first["commit"].endswith("-dirty")
    # WHEN a file the figures do not depend on changes, the stamp stays
    (root / "README.md").write_text("other words\n")
    assert report.stamp_of(root) == first
    # WHEN the code changes in the working tree, it moves, and says it is uncommitted
    (root / "functions" / "ticker.py").write_text("PACE = 2\n")
    changed = report.stamp_of(root)
    assert changed["tree"] != first["tree"] and changed["commit"].endswith("-dirty")
    # AND a new file in the code moves it too
    (root / "functions" / "ticker.py").write_text("PACE = 1\n")
    assert report.stamp_of(root)["tree"] == first["tree"]
    (root / "functions" / "worker.py").write_text("BATCH = 256\n")
    assert report.stamp_of(root)["tree"] != first["tree"]
    # AND outside git there is no stamp to resume from
    assert report.stamp_of(tmp_path / "functions")["tree"] != first["tree"]


def test_a_scenario_is_done_only_on_the_same_code_at_the_same_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report, "REPORT", tmp_path / "report.json")
    monkeypatch.setattr(report, "SUMMARY", tmp_path / "report.md")
    monkeypatch.setattr(report, "code_stamp", lambda: {"commit": "abc", "tree": "t1"})
    monkeypatch.setattr(report, "SCALE", 1.0)
    scenario = "tests/bench/bench_e2e.py::test_the_largest_tenant"
    # GIVEN nothing run yet
    assert not report.done_on_this_code(scenario)
    # WHEN it passes, and its figures are recorded
    report.record("e2e.big_tenant", {"lost": 0})
    report.completed(scenario)
    # THEN it is done on this code at full size, its key stamped with the code
    assert report.done_on_this_code(scenario)
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["stamps"]["e2e.big_tenant"] == {"commit": "abc", "tree": "t1"}
    assert "stamps" not in (tmp_path / "report.md").read_text()
    # AND not at a tenth of the size, nor on other code
    monkeypatch.setattr(report, "SCALE", 0.1)
    assert not report.done_on_this_code(scenario)
    monkeypatch.setattr(report, "SCALE", 1.0)
    monkeypatch.setattr(report, "code_stamp", lambda: {"commit": "abd", "tree": "t2"})
    assert not report.done_on_this_code(scenario)
    # AND a scenario run quick on that code does not stand for the full one
    monkeypatch.setattr(report, "SCALE", 0.1)
    report.completed(scenario)
    monkeypatch.setattr(report, "SCALE", 1.0)
    assert not report.done_on_this_code(scenario)
    # AND a run at a reduced size writes a report of its own, never the full-size one
    assert report.path_for(1.0).name == "report.json"
    assert report.path_for(0.1).name == "report-scale-0.1.json"
