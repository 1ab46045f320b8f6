"""The README's quick start, run as written against a local cloud: its curl block and its
CLI block, each through bash in the repository root, taken from README.md (between its
`quickstart` markers, the section the site's quick start page includes), never copied here.

The block's first step, `make run`, is played by the `cloud` fixture: `fireline local`'s
own `LocalCloud` (what `make run` starts), with its default API keys (and the smoke
test's), on the port the README names, 8080, when that port is free. When it is taken (a
`make run` of the developer's own), the cloud listens on a free port, and that one
address is the only text of the blocks the test changes. As under `make run` by the time
a reader pastes the next block (its examples fire every 10 s from its start), the ticker
and a worker have run a job before the blocks start.

A block passes when it exits 0 and what it prints shows the schedule it created with
succeeded occurrences, each also read back through the API.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from fireline.local import runtime
from fireline.local.cloud import DEFAULT_KEYS, LocalCloud, LocalOptions
from helpers import docs
from helpers.local_cloud import TEST_KEYS, a_schedule_fires_and_its_job_succeeds, call

README_URL = "http://127.0.0.1:8080"
README_KEY = "local-key-tenant-a"


def quick_start() -> str:
    text = docs.README.read_text()
    found = re.search(
        r"<!-- --8<-- \[start:quickstart\] -->\n(.*?)<!-- --8<-- \[end:quickstart\] -->",
        text,
        flags=re.DOTALL,
    )
    assert found is not None, "the README's quick start markers were not found"
    return found.group(1)


BLOCKS = docs.fenced(quick_start(), "sh")


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    options = LocalOptions(
        api_port=8080,
        # make run's keys, which the README names, and the smoke test's own
        api_keys={**DEFAULT_KEYS, **TEST_KEYS},
        log_path=tmp_path_factory.mktemp("quick-start") / "local.log",
    )
    # The port is taken before anything deploys: a taken one fails at once, and then any
    # free port serves (the blocks are pointed at whichever it is).
    started = LocalCloud(options)
    try:
        started.start()
    except runtime.ApiPortInUse:
        options.api_port = 0
        started = LocalCloud(options).start()
    try:
        a_schedule_fires_and_its_job_succeeds(started, timeout=180)
        yield started
    finally:
        started.stop()


def run_block(cloud: LocalCloud, block: str) -> subprocess.CompletedProcess[str]:
    script = block.replace(README_URL, cloud.api_url)
    # The reader's shell: nothing of the test's own API settings; the block exports its own.
    reader = {
        k: v
        for k, v in os.environ.items()
        if k not in {"API", "KEY", "SCHEDULE", "FIRELINE_API_URL", "FIRELINE_API_KEY"}
    }
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=docs.ROOT,
        env=reader,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def created_and_rest(output: str) -> tuple[str, str]:
    """The id the block's `echo "created $SCHEDULE"` printed, and what followed."""
    first, _, rest = output.partition("\n")
    found = re.fullmatch(r"created (sch_\w+)", first.strip())
    assert found is not None, output
    return found.group(1), rest


def succeeded_through_the_api(cloud: LocalCloud, schedule_id: str) -> list[dict[str, Any]]:
    status, page = call(
        cloud, "GET", f"/schedules/{schedule_id}/occurrences?state=succeeded", key=README_KEY
    )
    assert status == 200, page
    items: list[dict[str, Any]] = page["items"]
    return items


def test_the_quick_start_is_make_run_then_curl_then_the_cli() -> None:
    assert [block.strip() for block in BLOCKS[:1]] == ["make run"]
    assert len(BLOCKS) == 3, BLOCKS
    assert "curl " in BLOCKS[1] and ".venv/bin/fireline " not in BLOCKS[1]
    assert ".venv/bin/fireline " in BLOCKS[2] and "curl " not in BLOCKS[2]
    for block in BLOCKS[1:]:
        assert README_URL in block and README_KEY in block and "every 10 seconds" in block


def test_the_curl_quick_start_shows_its_schedules_succeeded_occurrences(
    cloud: LocalCloud,
) -> None:
    # WHEN the README's curl block runs as written
    done = run_block(cloud, BLOCKS[1])
    # THEN it created a schedule every 10 seconds, stored as the README says
    assert done.returncode == 0, (done.stdout, done.stderr)
    schedule_id, shown = created_and_rest(done.stdout)
    status, schedule = call(cloud, "GET", f"/schedules/{schedule_id}", key=README_KEY)
    assert status == 200 and schedule["spec"] == "rate(10 seconds)", schedule
    assert schedule["description"] == "Every 10 seconds"
    # AND its last command printed the schedule's succeeded occurrences, one attempt each
    page = json.loads(shown)
    assert page["items"], "no succeeded occurrence within the quick start's wait"
    assert {o["schedule_id"] for o in page["items"]} == {schedule_id}
    assert {(o["state"], o["attempts"], o["exit_reason"]) for o in page["items"]} == {
        ("succeeded", 1, "succeeded")
    }
    # AND they are the API's own record of the schedule's fires
    recorded = {o["fire_time"] for o in succeeded_through_the_api(cloud, schedule_id)}
    assert {o["fire_time"] for o in page["items"]} <= recorded


def test_the_cli_quick_start_shows_its_schedules_succeeded_occurrences(
    cloud: LocalCloud,
) -> None:
    # WHEN the README's CLI block runs as written
    done = run_block(cloud, BLOCKS[2])
    # THEN it created a schedule, and its last command printed a table of succeeded fires
    assert done.returncode == 0, (done.stdout, done.stderr)
    schedule_id, table = created_and_rest(done.stdout)
    rows = [line.split() for line in table.splitlines() if line.strip()]
    assert rows[0][:2] == ["fire", "time"], table
    fires = [row for row in rows[1:]]
    assert fires, "no succeeded occurrence within the quick start's wait"
    assert {(row[1], row[2]) for row in fires} == {("succeeded", "1")}, table
    # AND each row is a succeeded occurrence the API records for that schedule
    recorded = {o["fire_time"] for o in succeeded_through_the_api(cloud, schedule_id)}
    assert {row[0] for row in fires} <= recorded


def reference_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "docs_reference", docs.DOCS / "hooks" / "reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_api_reference_is_built_from_the_document_the_api_serves(
    cloud: LocalCloud,
) -> None:
    # GIVEN the document the local cloud's API serves without a key
    with urllib.request.urlopen(cloud.api_url + "/openapi.json", timeout=30) as response:
        served = json.loads(response.read())
    # THEN the site's API reference page is rendered from that same document
    assert reference_hook().openapi() == served
