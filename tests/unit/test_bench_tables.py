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
