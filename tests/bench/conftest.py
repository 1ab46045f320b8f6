"""Resuming a run: a scenario an earlier run completed on the same code is skipped
(``FIRELINE_BENCH_RESUME=1``, which ``make bench`` sets), and each one that passes is
noted in the report with the code it ran on (bench.report.completed), so a full run that
outlasts a sitting continues where it stopped."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from bench import report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get("FIRELINE_BENCH_RESUME") != "1":
        return
    for item in items:
        if report.done_on_this_code(item.nodeid):
            item.add_marker(
                pytest.mark.skip(reason="completed on this code by an earlier run: its keys stand")
            )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    made = yield
    if made.when == "call" and made.passed:
        report.completed(item.nodeid)
    return made
