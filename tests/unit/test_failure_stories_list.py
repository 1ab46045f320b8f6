"""`make stories` runs every test the failure stories' table names (tests/failure/README.md),
so each story's figure is printed by the one command the table's header promises."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def named_in_the_table() -> list[str]:
    """The test ids of the table's test column, a ``::name`` cell part completed with the
    file named before it."""
    lines = (ROOT / "tests/failure/README.md").read_text().splitlines()
    ids: list[str] = []
    for row in [line for line in lines if line.startswith("| ")][2:]:
        current = None
        for token in re.findall(r"`([^`]+)`", row.split(" | ")[1]):
            if token.startswith("tests/"):
                current = token.split("::")[0]
                ids.append(token)
            elif token.startswith("::") and current is not None:
                ids.append(current + token)
    return ids


def stories_target() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    listed = makefile[makefile.index("STORIES :=") : makefile.index("stories: install")]
    return set(re.findall(r"(tests/\S+)", listed))


def test_make_stories_runs_every_test_the_table_names() -> None:
    named = named_in_the_table()
    runs = stories_target()
    missing = [
        test_id
        for test_id in named
        if test_id not in runs
        and not any(test_id.startswith(f"{folder}/") or test_id == folder for folder in runs)
        and test_id.split("::")[0] not in runs
    ]
    assert len(named) > 20
    assert missing == []
