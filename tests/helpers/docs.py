"""The README and the documentation site's pages, as the tests that hold them to the code
read them: the pages in the site's order, their text, their fenced examples."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MKDOCS = ROOT / "mkdocs.yml"
# Written by docs/hooks/reference.py at build time: in the navigation, not in docs/.
GENERATED = frozenset({"reference/api.md", "reference/cli.md"})


def nav_pages() -> list[str]:
    """Every page of the site's navigation, in its order (paths under docs/)."""

    def walk(entry: Any) -> list[str]:
        if isinstance(entry, str):
            return [entry]
        if isinstance(entry, list):
            return [page for item in entry for page in walk(item)]
        if isinstance(entry, dict):
            return [page for value in entry.values() for page in walk(value)]
        return []

    return walk(yaml.safe_load(MKDOCS.read_text())["nav"])


def written_pages() -> list[Path]:
    """The pages kept in docs/ (not the generated ones), in the navigation's order."""
    return [DOCS / page for page in nav_pages() if page not in GENERATED]


def page(name: str) -> str:
    return (DOCS / name).read_text()


def fenced(text: str, language: str) -> list[str]:
    """The bodies of the text's fenced blocks in that language, in order."""
    pattern = rf"^```{re.escape(language)}\n(.*?)^```"
    return re.findall(pattern, text, flags=re.MULTILINE | re.DOTALL)
