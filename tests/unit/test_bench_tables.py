"""The docs' figures are written from a bench run's report (tests/bench/tables.py): each
block names the report key of every figure and the calibration it ran under, and a key
the run did not measure reads "not measured", never an older value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import tables

REPORT = {
    "machine": {"written_at": "2026-12-07T12:00:00Z"},
    "e2e.burst_50k.defaults": {
        "started_within_2s_share": 0.9934,
        "start_lag_seconds": {"count": 50_000, "p50": 0.41, "p99": 1.73, "max": 2.6},
        "lost": 0,
        "started_twice": 0,
        "calibration": {
            "sdk_client_cpu_us_per_call": {
                "dynamodb.GetItem": 2300,
                "dynamodb.Query": 2700,
                "sqs.SendMessageBatch": 2600,
            },
        },
        "scale": 1.0,
    },
    "cost.http_3s": {"usd_per_million": 2.41},
}


def test_the_headline_names_each_figures_key_and_the_calibration() -> None:
    text = tables.headline(REPORT)
    assert "| `e2e.burst_50k.defaults` | 99.34% |" in text
    assert "0.41 / 1.73 / 2.60 s" in text
    assert "| `cost.http_3s` | 2.41 |" in text
    assert "SDK client CPU 2.60 ms a call (median of 3 operations), full size" in text
    # a key the run did not measure
    assert "| `cost.http_1s` | not measured |" in text
    assert "| `e2e.burst_50k.defaults_cpu_x2` | not measured; not measured |" in text


@pytest.mark.parametrize("name", sorted(tables.BLOCKS))
def test_each_document_holds_its_block(name: str) -> None:
    path, render = tables.BLOCKS[name]
    text = path.read_text()
    # the block is there once, and a rewrite puts the rendering in it and nothing else
    assert text.count(f"<!-- bench:{name} -->") == 1
    rewritten = tables.rewrite(text, name, render(REPORT))
    assert render(REPORT) in rewritten
    outside = text.split(f"<!-- bench:{name} -->")[0]
    assert rewritten.startswith(outside)


def test_main_rewrites_every_block_from_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN copies of the documents and a report
    copies = {}
    for name, (path, render) in tables.BLOCKS.items():
        copy = tmp_path / path.name
        copy.write_text(path.read_text())
        copies[name] = (copy, render)
    monkeypatch.setattr(tables, "BLOCKS", copies)
    report = tmp_path / "report.json"
    report.write_text(json.dumps(REPORT))
    monkeypatch.setattr(tables, "ROOT", tmp_path)
    # WHEN the tables are written
    assert tables.main(report) == 0
    # THEN each copy holds its block as rendered from the report
    for copy, render in copies.values():
        assert render(REPORT) in copy.read_text()


def test_without_a_report_nothing_is_written(tmp_path: Path) -> None:
    assert tables.main(tmp_path / "missing.json") == 2


PEER = {
    "machine": {"written_at": "2026-12-07T12:00:00Z"},
    "peer.apscheduler.memory": {
        "cpu_seconds_per_1k_fires": 0.183,
        "lateness_seconds": {"p50": 0.052, "p99": 0.123, "max": 0.156},
        "fires_run": 90_000,
        "fires_due": 90_000,
        "lost": 0,
        "misfires": 0,
        "duplicates": 0,
    },
    "peer.fireline.memory": {
        "cpu_seconds_per_1k_fires": 0.482,
        "cpu_seconds_per_1k_fires_with_sdk_client_cpu": 15.06,
        "lateness_seconds": {"p50": 0.085, "p99": 0.215, "max": 0.304},
        "fires_run": 89_999,
        "fires_due": 90_000,
        "lost": 1,
        "duplicates": 0,
        "aws_requests_per_fire": 3.32,
        "sdk_client_cpu_us_per_call": {"dynamodb.UpdateItem": 3500},
        "window_seconds": 180,
    },
}


def test_the_comparison_gives_each_contender_and_fireline_with_its_sdk_cpu() -> None:
    text = tables.peer(PEER)
    assert (
        "| APScheduler 3, memory job store | `peer.apscheduler.memory` | 0.183 | "
        "0.05 / 0.12 / 0.16 s | 90,000 of 90,000 | 0 (0) | 0 |"
    ) in text
    assert "| Fireline, memory adapters | `peer.fireline.memory` | 0.482 | " in text
    assert "| 89,999 of 90,000 | 1 | 0 |" in text
    assert "worker spend) | `peer.fireline.memory` | 15.060 |" in text
    assert "dynamodb.UpdateItem 3.50 ms" in text
    # the contender this run did not measure
    assert "| `peer.apscheduler.sqlite` | not measured | not measured |" in text


def test_a_cost_path_measured_without_a_figure_says_it_does_not_apply() -> None:
    report = {**REPORT, "cost.workflow_node": {"usd_per_million": 8.16}}
    text = tables.cost(report)
    assert "| `cost.workflow_node` | 8.16 | does not apply | does not apply |" in text
    assert "| `cost.http_1s` | not measured | not measured |" in text


def test_the_costs_calibration_is_its_own_or_says_whose_it_is() -> None:
    simulated = "cost.simulated_workers.remote_3s"
    calibrated = {"sdk_client_cpu_us_per_call": {"dynamodb.GetItem": 1800}}
    own = tables.cost({**REPORT, simulated: {"scale": 1.0, "calibration": calibrated}})
    assert "wall time: SDK client CPU 1.80 ms a call (median of 1 operations), full size" in own
    borrowed = tables.cost({**REPORT, simulated: {"scale": 1.0}})
    assert (
        "not recorded by the simulated workers; the same run's end-to-end burst measured "
        "SDK client CPU 2.60 ms a call"
    ) in borrowed
