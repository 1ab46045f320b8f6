"""Every ``fireline admin`` command the documentation names, run as written on the local
cloud, with no AWS_* variable in the environment: the emulator's region and dummy
credentials are filled in by the command itself.

The local cloud here is deployed as the stack ``fireline`` (an admin command's default
stack), and the environment names only the emulator (``$FIRELINE_ENDPOINT_URL``): each
command line is the documentation's own, its placeholders filled in (a tenant, a key id).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fireline.cli import deployment, main
from fireline.local import command as local_command
from fireline.local.cloud import LocalCloud, LocalOptions
from helpers.local_cloud import TEST_KEYS, call, wait_for

ROOT = Path(__file__).resolve().parents[2]
STACK = "fireline"

# The documentation's admin command lines as written (README.md today), in an order in
# which each finds what the one before made. {key}: a key id made by an earlier line.
DOCUMENTED = [
    "fireline admin keys create --tenant acme",
    "fireline admin keys create --tenant ops --operator",
    "fireline admin keys list",
    "fireline admin keys list --tenant acme",
    "fireline admin keys rotate {key} --grace 3600",
    "fireline admin keys revoke {key}",
    "fireline admin signing show --tenant acme --json",
    "fireline admin signing rotate --tenant acme",
    "fireline admin signing rotate --tenant acme --overlap 600",
    "fireline admin quotas set tenant-a --schedules 50000 --uploads-per-day 0 --stack fireline",
    "fireline admin quotas show tenant-a --stack fireline",
    "fireline admin quotas clear tenant-a --quota schedules --stack fireline",
    "fireline admin limits set tenant-a 5",
    "fireline admin limits show tenant-a",
    "fireline admin limits clear tenant-a",
    "fireline admin migrate overrides",
    "fireline admin migrate overrides --stack fireline",
    "fireline admin migrate listings --stack fireline",
    "fireline admin migrate schedule-keys --stack fireline",
]


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    options = LocalOptions(
        api_port=0,
        api_keys=dict(TEST_KEYS),
        log_path=tmp_path_factory.mktemp("admin") / "local.log",
        stack_name=STACK,
    )
    with LocalCloud(options) as started:
        yield started


@pytest.fixture
def admin(
    cloud: LocalCloud, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """Run a command line as a shell would, with no AWS_* variable set: (code, out, err)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv(deployment.STACK_ENV, raising=False)
    monkeypatch.setenv(deployment.ENDPOINT_ENV, cloud.endpoint_url)
    # No AWS configuration of the machine's either: nothing but the emulator to reach.
    monkeypatch.setenv("HOME", str(cloud.options.log_path.parent))

    def run(line: str) -> tuple[int, str, str]:
        argv = shlex.split(line)
        assert argv[:2] == ["fireline", "admin"], line
        capsys.readouterr()
        code = main.main(argv[1:])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def documented_commands() -> set[tuple[str, ...]]:
    """Each ``fireline admin AREA [ACTION]`` the README and docs/ name."""
    parser = main.build_parser()
    areas = _choices(_choices(parser)["admin"])
    text = "\n".join(
        p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    )
    named: set[tuple[str, ...]] = set()
    for area, word in re.findall(r"fireline admin (\w+)\s*(\w*)", text):
        assert area in areas, f"the docs name 'fireline admin {area}', which does not exist"
        actions = _choices(areas[area])
        named.add((area, word) if word in actions else (area,))
    return named


def _choices(parser: Any) -> dict[str, Any]:
    for action in parser._actions:
        if action.choices and isinstance(action.choices, dict):
            return dict(action.choices)
    return {}


def test_every_admin_command_the_docs_name_is_run_here() -> None:
    # GIVEN the admin commands the documentation names
    named = documented_commands()
    # THEN each is among the command lines this file runs
    run = {tuple(shlex.split(line)[2:4]) for line in DOCUMENTED}
    areas = {area for area, _ in run}
    missing = [c for c in named if (c not in run if len(c) == 2 else c[0] not in areas)]
    assert not missing, missing


def test_every_documented_admin_command_runs_on_the_local_cloud_as_written(
    cloud: LocalCloud, admin: Any
) -> None:
    key_ids: list[str] = []
    outputs: dict[str, str] = {}
    for line in DOCUMENTED:
        filled = line.format(key=key_ids[0] if key_ids else "")
        # WHEN the line is run as written
        code, out, err = admin(filled)
        # THEN it succeeds, says nothing on stderr
        assert (code, err) == (0, ""), (filled, out, err)
        outputs[line] = out
        if line.startswith("fireline admin keys create --tenant acme"):
            key_ids.append(re.search(r"key id (\S+)", out).group(1))  # type: ignore[union-attr]

    # AND each did what it says: the key made for acme was rotated, then its new key...
    created_key = outputs[DOCUMENTED[0]].splitlines()[1]
    assert "of tenant acme" in outputs[DOCUMENTED[0]]
    assert "ops" in outputs["fireline admin keys list"]
    assert "acme" in outputs["fireline admin keys list --tenant acme"]
    assert "ops" not in outputs["fireline admin keys list --tenant acme"]
    # (the rotated key was revoked: refused once the authorizer's cache lets go of it;
    # the local cloud's cache is the template's, so only the new key is checked here)
    rotated = outputs["fireline admin keys rotate {key} --grace 3600"].splitlines()[1]
    assert rotated != created_key
    wait_for(lambda: call(cloud, "GET", "/schedules", key=rotated)[0] == 200)
    ring = json.loads(outputs["fireline admin signing show --tenant acme --json"])
    assert len(ring["keys"]) == 1
    assert (
        "deliveries are signed with"
        in outputs["fireline admin signing rotate --tenant acme --overlap 600"]
    )
    # ...the quota was set, shown, then cleared back to its default...
    shown = outputs["fireline admin quotas show tenant-a --stack fireline"]
    assert re.search(r"schedules\W+50000", shown), shown
    code, out, _ = admin("fireline admin quotas show tenant-a --json")
    assert json.loads(out)["quotas"]["schedules"]["limit"] == "default"
    assert json.loads(out)["quotas"]["uploads_per_day"]["limit"] == 0
    # ...the limit was set, then cleared...
    assert outputs["fireline admin limits show tenant-a"].startswith("tenant-a: 5")
    assert outputs["fireline admin limits clear tenant-a"].startswith("tenant-a: default")
    # ...and the migrations ran to their end
    assert outputs["fireline admin migrate overrides"].startswith("done: the register holds")
    assert "done:" in outputs["fireline admin migrate listings --stack fireline"]
    assert (
        "schedules moved to their keys"
        in outputs["fireline admin migrate schedule-keys --stack fireline"]
    )


def test_without_the_emulator_named_a_command_says_which_region_is_missing(
    admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN no endpoint and no AWS configuration (no region)
    monkeypatch.delenv(deployment.ENDPOINT_ENV)
    # WHEN a command that reads a table is run
    code, _, err = admin("fireline admin quotas show tenant-a")
    # THEN it is refused naming the region and how to reach the local cloud instead
    assert code == 1
    assert err.startswith("error: region: name the deployment's region: --region"), err
    assert "--endpoint-url" in err


def test_the_local_clouds_admin_hint_runs_when_pasted_with_no_aws_setting(
    cloud: LocalCloud, admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the line `fireline local` prints for the admin commands (the fixture took
    # every AWS_* variable and the emulator's address out of the environment)
    hint = local_command.admin_hint(cloud.endpoint_url, STACK, argv0="python")
    monkeypatch.delenv(deployment.ENDPOINT_ENV)
    assert hint.startswith("admin: ")
    # WHEN it is pasted into a shell
    done = subprocess.run(
        ["bash", "-c", hint.removeprefix("admin: ")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # THEN the command it names lists the cloud's keys
    assert done.returncode == 0, done.stderr
    assert "tenant-a" in done.stdout
