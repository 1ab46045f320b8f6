"""The documentation site builds strictly (`mkdocs build --strict`, as `make docs` does):
a broken link, a missing page or a page left out of the navigation fails `make test`, not
only CI's `make docs`. Its API and CLI reference pages are generated at build time from the
code, so every route of the OpenAPI document and every command of the CLI is on them."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from fireline.cli import main
from helpers import docs


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = tmp_path_factory.mktemp("site")
    done = build(docs.ROOT, built)
    assert done.returncode == 0, done.stderr
    return built


def reference_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "docs_reference", docs.DOCS / "hooks" / "reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_page_of_the_navigation_is_built(site: Path) -> None:
    for page in docs.nav_pages():
        built = site / page.removesuffix(".md").removesuffix("index") / "index.html"
        assert built.is_file(), page


def test_the_api_reference_lists_every_operation_of_the_document(site: Path) -> None:
    # GIVEN the OpenAPI document the API serves, and the reference page built from it
    document = reference_hook().openapi()
    page = (site / "reference" / "api" / "index.html").read_text()
    # THEN every operation and every schema is on the page
    for path, item in document["paths"].items():
        for method in item:
            assert f"{method.upper()} {path}" in page, (method, path)
    for name in document["components"]["schemas"]:
        assert f'id="schema-{name.lower()}"' in page, name


def test_the_cli_reference_has_every_commands_help(site: Path) -> None:
    page = (site / "reference" / "cli" / "index.html").read_text()
    commands = [
        command for _, command, _ in reference_hook()._commands(main.build_parser(), "fireline", 0)
    ]
    assert len(commands) > 40
    for command in commands:
        assert f"<code>{command}</code>" in page, command
    # a leaf's own options, as its --help prints them
    assert "--target-python" in page and "--idempotency-key" in page


def test_the_quick_start_page_is_the_readmes_own_section(site: Path) -> None:
    # GIVEN the built page's text (the highlighter splits code into spans)
    text = re.sub(r"<[^>]+>", "", (site / "quick-start" / "index.html").read_text())
    # THEN it holds the README's quick start: its commands and its prose
    section = re.search(r"start:quickstart\] -->\n(.*?)<!-- --8<--", docs.README.read_text(), re.S)
    assert section is not None
    for command in docs.fenced(section.group(1), "sh"):
        last = command.strip().splitlines()[-1]
        assert html.escape(last, quote=False) in text, last


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    # GIVEN a copy of the site's sources whose Schedules page links to a page that is not there
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(docs.ROOT / name, tmp_path / name)
    shutil.copytree(docs.DOCS, tmp_path / "docs")
    (tmp_path / "tests" / "failure").mkdir(parents=True)
    shutil.copy(docs.ROOT / "tests" / "failure" / "README.md", tmp_path / "tests" / "failure")
    (tmp_path / "functions").symlink_to(docs.ROOT / "functions")
    schedules = tmp_path / "docs" / "schedules.md"
    schedules.write_text(schedules.read_text() + "\nSee [the timetable](timetable.md).\n")
    # WHEN it is built as make docs builds it
    done = build(tmp_path, tmp_path / "site")
    # THEN the build fails, naming the page and the link
    assert done.returncode != 0
    assert "schedules.md" in done.stderr and "timetable.md" in done.stderr, done.stderr
