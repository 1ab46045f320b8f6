"""Figures the README states that the code decides: they must be the code's."""

from __future__ import annotations

import re
from pathlib import Path

from fireline.api import models
from fireline.domain import model

README = Path(__file__).resolve().parents[2] / "README.md"


def number(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_default_deadlines_in_the_readme_are_the_ones_the_worker_uses() -> None:
    # GIVEN the README's sentence on default deadlines
    found = re.search(
        r"its `deadline_seconds`, else ([\d,]+) s \(`short`\), ([\d,]+) s \(`default`\) or\s+"
        r"([\d,]+) s \(`long`\)",
        README.read_text(),
    )
    assert found is not None, "the README no longer states the default deadlines"
    # THEN each figure is the class's default deadline in the code
    stated = dict(zip(("short", "default", "long"), map(number, found.groups()), strict=True))
    assert stated == {c: model.deadline_for(c, None) for c in model.JOB_CLASSES}


def test_the_json_depth_limit_in_the_readme_is_the_one_the_api_applies() -> None:
    found = re.search(r"nested at most \*\*(\d+) levels\*\*", README.read_text())
    assert found is not None, "the README no longer states the nesting limit"
    assert int(found.group(1)) == models.MAX_JSON_DEPTH
