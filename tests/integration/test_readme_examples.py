"""The documentation's examples run as written against a local cloud: every `curl` and
`.venv/bin/fireline` command of the `sh` blocks of the site's pages (docs/, in the order of
the site's navigation), through bash, in the repository root. The README's own example, its
quick start, is run by tests/integration/test_readme_quick_start.py.

What the test supplies, as a reader would: `$API` and `$KEY` (the cloud's URL and a
tenant's key), `FIRELINE_API_URL` and `FIRELINE_API_KEY` in place of the block's `export`
line (which names the default port 8080; this cloud listens on its own), `$RUN` from the
`run_id` of the answer before it (a curl's or a CLI's `--json`), `sch_...` and `job_...` as
the schedule and the job the CLI examples created, and `DEAD_LETTER_ID` as a dead letter's.
A command that acts on a state waits for it first, as a reader would: a redrive for a dead
letter to exist, a run's retry for the run to have failed.

Each curl command must answer 2xx, or the status its comment states (`# 202 ...`); each
CLI command must exit 0.

Skipped, by the marker `SKIP_MARKERS` (a command naming one is not run): the presigned
upload steps (the POST of the form the first step's `$UPLOAD` holds, and the registration
of its `upload_id`), which need a document on disk and that answer;
tests/integration/test_local_cloud.py runs the upload block as written, end to end.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator

import pytest

from fireline.local.cloud import LocalCloud, LocalOptions
from helpers import docs
from helpers.local_cloud import KEY, TEST_KEYS, call, state_of, wait_for

ROOT = docs.ROOT
SKIP_MARKERS = ("workflow-uploads", '"$UPLOAD"')
COMMAND_START = re.compile(r"^(curl |\.venv/bin/fireline )")


def documented_commands() -> list[str]:
    """Every curl and CLI command of the pages' sh blocks, in the site's order, continuation
    lines joined (a command goes on while its single quotes are open or its line ends in a
    backslash)."""
    blocks = [
        block for page in docs.written_pages() for block in docs.fenced(page.read_text(), "sh")
    ]
    commands: list[str] = []
    for block in blocks:
        current: list[str] = []
        for line in block.splitlines():
            if current:
                current.append(line)
            elif COMMAND_START.match(line):
                current = [line]
            if (
                current
                and not current[-1].endswith("\\")
                and "\n".join(current).count("'") % 2 == 0
            ):
                commands.append("\n".join(current))
                current = []
    return commands


COMMANDS = documented_commands()
RUN_IN_ORDER = [c for c in COMMANDS if not any(marker in c for marker in SKIP_MARKERS)]


def test_the_pages_have_the_examples_this_test_runs() -> None:
    curls = [c for c in RUN_IN_ORDER if c.startswith("curl")]
    clis = [c for c in RUN_IN_ORDER if c.startswith(".venv/bin/fireline")]
    assert len(curls) >= 3 and len(clis) >= 5, COMMANDS
    assert len(COMMANDS) - len(RUN_IN_ORDER) == 2  # the two upload steps, no more


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    options = LocalOptions(
        api_port=0,
        api_keys=dict(TEST_KEYS),
        log_path=tmp_path_factory.mktemp("readme") / "local.log",
    )
    with LocalCloud(options) as started:
        yield started


@pytest.fixture(scope="module")
def shell(cloud: LocalCloud, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment the examples run in; curl prints the status after the body."""
    curl_home = tmp_path_factory.mktemp("curl")
    (curl_home / ".curlrc").write_text('silent\nmax-time = 60\nwrite-out = "\\n%{http_code}"\n')
    return {
        **os.environ,
        "API": cloud.api_url,
        "KEY": KEY,
        "FIRELINE_API_URL": cloud.api_url,
        "FIRELINE_API_KEY": KEY,
        "CURL_HOME": str(curl_home),
    }


def placeholders_filled(cloud: LocalCloud, command: str, shell: dict[str, str]) -> str:
    """The command with the ids a reader would copy from earlier answers."""
    if "sch_..." in command:
        _, page = call(cloud, "GET", "/schedules")
        (created,) = [s for s in page["items"] if s["spec"] == "rate(5 minutes)"]
        command = command.replace("sch_...", created["id"])
    if "job_..." in command:
        _, page = call(cloud, "GET", "/jobs")
        (job,) = [j for j in page["items"] if j["target"].get("url") == "https://example.com/hook"]
        command = command.replace("job_...", job["id"])
    if "DEAD_LETTER_ID" in command:
        letters = wait_for(lambda: call(cloud, "GET", "/dead-letters")[1]["items"])
        command = command.replace("DEAD_LETTER_ID", letters[0]["id"])
    if " runs retry " in command:
        wait_for(lambda: state_of(cloud, f"/runs/{shell['RUN']}") == "failed", timeout=90)
    return command


def test_every_documented_example_runs_as_written(cloud: LocalCloud, shell: dict[str, str]) -> None:
    for command in RUN_IN_ORDER:
        command = placeholders_filled(cloud, command, shell)
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=ROOT,
            env=shell,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if command.startswith("curl"):
            body, _, status = done.stdout.rpartition("\n")
            stated = re.search(r"#\s*(\d{3})\b", command)
            if stated:
                assert status == stated[1], (command, body)
            else:
                assert status.startswith("2"), (command, status, body)
            answer = json.loads(body) if body.strip() else {}
            if isinstance(answer, dict) and "run_id" in answer:
                shell["RUN"] = answer["run_id"]
        else:
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            # A run's start answers its run_id; other answers may carry the field too (an
            # occurrence's, null where it is no workflow node's), in a list
            answer = json.loads(done.stdout) if "--json" in command else None
            if isinstance(answer, dict) and answer.get("run_id"):
                shell["RUN"] = answer["run_id"]
