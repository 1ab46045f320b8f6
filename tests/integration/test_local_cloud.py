"""The local cloud, end to end: the real template deployed into moto's server, the real
handlers in their own processes, everything reached over HTTP like a user would."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fireline.local import deploy
from fireline.local.cloud import LocalCloud, LocalOptions
from fireline.services import dispatch
from helpers.local_cloud import (
    KEY,
    OTHER_KEY,
    TEST_KEYS,
    a_schedule_fires_and_its_job_succeeds,
    call,
    state_of,
    wait_for,
)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    log = tmp_path_factory.mktemp("local") / "local.log"
    options = LocalOptions(
        api_port=0,
        api_keys=dict(TEST_KEYS),
        log_path=log,
        # The local cloud's own window. A heartbeat goes every third of it, so only a runner
        # starved for over 6 s misses one: a shorter window failed on a loaded machine.
        long_job_heartbeat_seconds=10,
    )
    with LocalCloud(options) as started:
        yield started


def test_a_schedule_due_in_two_seconds_fires_and_succeeds(cloud: LocalCloud) -> None:
    a_schedule_fires_and_its_job_succeeds(cloud)


def test_the_workers_mappings_are_played_with_the_deployed_batch_size_and_window(
    cloud: LocalCloud,
) -> None:
    # GIVEN the deployed stack's event source mappings, as the local runtime plays them
    played = {
        name: (mapping.batch_size, mapping.batching_window)
        for name, mapping in cloud.mappings.items()
    }

    def of(queue: str) -> tuple[int, float]:
        [found] = [value for name, value in played.items() if queue in name]
        return found

    # THEN the default and short workers take batches of the template's size, gathered
    # for the batching window the ticker sends their fires that far ahead for, and the
    # long class's worker ten at a time, as soon as they come
    assert of("DefaultQueue") == of("ShortQueue") == (256, dispatch.BATCHING_WINDOW_SECONDS)
    assert of("-LongQueue") == (10, 0.0)


def test_requests_without_a_valid_key_are_401_and_tenants_are_isolated(cloud: LocalCloud) -> None:
    assert call(cloud, "GET", "/schedules", key=None)[0] == 401
    assert call(cloud, "GET", "/schedules", key="not-a-key")[0] == 401
    status, document = call(cloud, "GET", "/openapi.json", key=None)
    assert status == 200 and "/schedules" in document["paths"]
    _, mine = call(
        cloud,
        "POST",
        "/schedules",
        {"spec": "rate(1 hour)", "target": {"type": "python", "handler": "noop"}},
    )
    assert call(cloud, "GET", f"/schedules/{mine['id']}", key=OTHER_KEY)[0] == 404


def test_the_root_is_an_index_of_links_without_a_key_and_other_methods_need_one(
    cloud: LocalCloud,
) -> None:
    # WHEN the root is asked for without a key, through the local gateway
    status, index = call(cloud, "GET", "/", key=None)
    # THEN it names the console, the docs and the API description, each served keyless
    assert status == 200, index
    for link in ("console", "docs", "openapi.json"):
        assert link in index["links"].values()
        assert urllib.request.urlopen(f"{cloud.api_url}/{link}", timeout=30).status == 200
    # AND another method on the root is still the authorizer's (as deployed: GET only)
    assert call(cloud, "POST", "/", {}, key=None)[0] == 401


def test_a_poison_job_goes_dead_and_can_be_redriven(cloud: LocalCloud) -> None:
    # GIVEN a job that always fails, allowed two attempts
    status, job = call(
        cloud,
        "POST",
        "/jobs",
        {
            "delay_seconds": 0,
            "target": {"type": "python", "handler": "fail"},
            "retry": {"max_attempts": 2, "base_seconds": 1, "cap_seconds": 1},
        },
    )
    assert status == 201
    # WHEN it has run out of attempts
    wait_for(lambda: state_of(cloud, f"/jobs/{job['id']}") == "dead", timeout=60)
    # THEN it is a dead letter, with its attempts and reason
    _, dead = call(cloud, "GET", "/dead-letters")
    (letter,) = [d for d in dead["items"] if d["schedule_id"] == job["id"]]
    assert letter["attempts"] == 2 and letter["exit_reason"].startswith("error: ")
    # AND a redrive queues it again, and it runs again (and fails again: still poison)
    status, redriven = call(cloud, "POST", f"/dead-letters/{letter['id']}/redrive")
    assert status == 202 and redriven["state"] == "queued"
    wait_for(lambda: state_of(cloud, f"/jobs/{job['id']}") == "dead", timeout=60)


def test_a_long_job_runs_under_the_state_machine_with_heartbeats(cloud: LocalCloud) -> None:
    # GIVEN a long job that works 20 s (twice the 10 s heartbeat window), reporting progress
    status, job = call(
        cloud,
        "POST",
        "/jobs",
        {
            "delay_seconds": 0,
            "job_class": "long",
            "target": {"type": "python", "handler": "progress-demo"},
            "payload": {"steps": 8, "seconds_per_step": 2.5},
        },
    )
    assert status == 201
    # WHEN it runs: progress shows while it is running...
    running = wait_for(
        lambda: (
            (j := call(cloud, "GET", f"/jobs/{job['id']}")[1])["state"] == "running"
            and j["occurrence"]["progress"]
            and j
        ),
        timeout=60,
    )
    assert running["occurrence"]["progress"]["of"] == 8
    # THEN it finishes, heartbeats having kept it alive past the window
    done = wait_for(
        lambda: (j := call(cloud, "GET", f"/jobs/{job['id']}")[1])["state"] == "succeeded" and j,
        timeout=90,
    )
    assert done["occurrence"]["progress"] == {"step": 8, "of": 8}
    assert done["occurrence"]["attempts"] == 1


def test_the_status_screen_figures_come_from_the_emulator(cloud: LocalCloud) -> None:
    # GIVEN a job of its own that succeeded (run alone, or before the file's other tests,
    # no other test's job is in this local cloud)
    status, job = call(
        cloud,
        "POST",
        "/jobs",
        {"delay_seconds": 0, "target": {"type": "python", "handler": "echo"}},
    )
    assert status == 201, job
    wait_for(lambda: state_of(cloud, f"/jobs/{job['id']}") == "succeeded", timeout=120)
    # WHEN the status screen is read while the ticker holds its lease (it holds it while an
    # invocation ticks; between one invocation's end and the next rule's start, nothing does)
    found = wait_for(lambda: (seen := cloud.status())["lease"] is not None and seen)
    # THEN its figures are the emulator's: the classes' queues and the job's success
    assert set(found["classes"]) == {"default", "short", "long"}
    assert found["occurrences"].get("succeeded", 0) >= 1
    log = Path(cloud.options.log_path or "")
    assert '"action"' in log.read_text()  # the functions' structured logs were collected


def run_cli(cloud: LocalCloud, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    from fireline.cli.main import main

    capsys.readouterr()
    code = main(["--api", cloud.api_url, "--api-key", KEY, *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_operator_cli_works_against_the_local_cloud(
    cloud: LocalCloud, capsys: pytest.CaptureFixture[str]
) -> None:
    # create, list, pause, preview: each through the CLI, checked through the API
    code, out = run_cli(
        cloud, capsys, "schedules", "create", "every day at 09:30", "--target-python", "noop",
        "--timezone", "Europe/Paris", "--json",
    )  # fmt: skip
    assert code == 0
    created = json.loads(out)
    assert created["spec"] == "cron(30 9 * * *)"
    code, out = run_cli(cloud, capsys, "schedules", "list", "--all")
    assert code == 0 and created["id"] in out
    code, out = run_cli(cloud, capsys, "schedules", "pause", created["id"], "--json")
    assert code == 0 and json.loads(out)["state"] == "paused"
    assert call(cloud, "GET", f"/schedules/{created['id']}")[1]["state"] == "paused"
    code, out = run_cli(
        cloud, capsys, "schedules", "preview", created["id"], "--count", "3", "--json"
    )
    assert code == 0 and len(json.loads(out)["fire_times"]) == 3
    # a job through the CLI runs, and `jobs get` shows it succeeded
    code, out = run_cli(
        cloud, capsys, "jobs", "create", "--in", "1", "--target-python", "echo", "--json"
    )
    job = json.loads(out)
    wait_for(lambda: state_of(cloud, f"/jobs/{job['id']}") == "succeeded")
    code, out = run_cli(cloud, capsys, "jobs", "get", job["id"])
    assert code == 0 and "succeeded" in out
    # a bad request names the field and exits 1
    code, out = run_cli(
        cloud, capsys, "schedules", "create", "61 * * * *", "--target-python", "noop"
    )
    assert code == 1
    assert "spec" in out and "HTTP 400" in out


def test_a_workflow_runs_on_the_local_cloud_in_dependency_order(cloud: LocalCloud) -> None:
    # GIVEN the diamond registered over HTTP (a -> b, a -> c, b -> d, c -> d)
    nodes = [
        {"id": n, "target": {"type": "python", "handler": "echo"}, "job_class": "short"}
        for n in "abcd"
    ]
    edges = [["a", "b"], ["a", "c"], ["b", "d"], ["c", "d"]]
    status, registered = call(cloud, "PUT", "/workflows/diamond", {"nodes": nodes, "edges": edges})
    assert status == 201 and registered["version"] >= 1
    # WHEN a run starts: the workflow function (WorkflowQueue) and the short workers play it
    status, run = call(cloud, "POST", "/workflows/diamond/runs")
    assert status == 202

    def finished() -> Any:
        _, view = call(cloud, "GET", f"/runs/{run['run_id']}")
        return view if view["state"] != "running" else None

    view = wait_for(finished, timeout=90)
    # THEN it succeeded, every node once, each after its parents
    assert view["state"] == "succeeded" and view["counts"]["succeeded"] == 4
    assert view["progress"] == 1.0 and view["failed_nodes"] == []
    status, page = call(cloud, "GET", f"/runs/{run['run_id']}/nodes?state=succeeded")
    assert status == 200 and [n["id"] for n in page["items"]] == ["a", "b", "c", "d"]
    # AND another tenant cannot see the run
    assert call(cloud, "GET", f"/runs/{run['run_id']}", key=OTHER_KEY)[0] == 404


def documented_upload_commands() -> str:
    """The Workflows page's three-step upload (docs/workflows.md), as written there."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "workflows.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", page, re.DOTALL)
    (found,) = [b for b in blocks if "workflow-uploads" in b and "upload_fields" in b]
    return found


@pytest.mark.skipif(
    shutil.which("curl") is None or shutil.which("jq") is None,
    reason="the documented upload example is run as written, with curl and jq",
)
def test_a_large_definition_goes_through_the_documented_presigned_post(
    cloud: LocalCloud, tmp_path: Path
) -> None:
    # GIVEN a definition of 3,000 nodes in a chain, as big-workflow.json
    nodes = [{"id": f"n{i}", "target": {"type": "python", "handler": "noop"}} for i in range(3000)]
    edges = [[f"n{i}", f"n{i + 1}"] for i in range(2999)]
    (tmp_path / "big-workflow.json").write_text(json.dumps({"nodes": nodes, "edges": edges}))
    # WHEN the documented commands run as written: ask for a form, POST the file with it to
    # the emulator's S3, register the upload as workflow "big"
    done = subprocess.run(
        ["bash", "-eu", "-o", "pipefail", "-c", documented_upload_commands()],
        cwd=tmp_path,
        env={**os.environ, "API": cloud.api_url, "KEY": KEY},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # THEN the registration answered with the workflow, like an inline definition
    assert done.returncode == 0, done.stderr
    registered = json.loads(done.stdout)
    assert "workflow_id" in registered, done.stdout
    assert (registered["workflow_id"], registered["nodes"], registered["edges"]) == (
        "big",
        3000,
        2999,
    )
    assert call(cloud, "GET", "/workflows/big")[1]["nodes"] == 3000


def test_a_sigterm_to_the_process_group_stops_fireline_local_cleanly(tmp_path: Path) -> None:
    # GIVEN `fireline local` running in a process group of its own, as make run runs it
    root = Path(__file__).resolve().parents[2]
    output = tmp_path / "out.txt"
    with output.open("w") as sink:
        started = subprocess.Popen(
            [sys.executable, "-m", "fireline.cli.main", "local", "--port", "0", "--plain",
             "--no-examples", "--log-file", str(tmp_path / "local.log")],
            cwd=root, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            wait_for(lambda: "console:" in output.read_text() or started.poll() is not None, 300)
            assert started.poll() is None, output.read_text()
            # WHEN the whole group is sent SIGTERM (make, its fireline and every function)
            os.killpg(started.pid, signal.SIGTERM)
            code = started.wait(timeout=120)
        finally:
            if started.poll() is None:
                os.killpg(started.pid, signal.SIGKILL)
                started.wait()
    # THEN it stops as a Ctrl-C stops it: exit 0, no traceback, every process gone
    printed = output.read_text()
    assert code == 0, printed
    assert "Traceback" not in printed, printed
    assert printed.rstrip().endswith("stopping ..."), printed
    wait_for(lambda: not group_members(started.pid), 30)


def group_members(group: int) -> list[int]:
    """The live (not zombie) processes of a process group."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it exited meanwhile
        if int(fields[2]) == group and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def test_fireline_local_on_a_taken_port_says_so_before_deploying_anything(tmp_path: Path) -> None:
    # GIVEN a port another process listens on (a local cloud already running)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        # WHEN `fireline local` is asked for that port
        root = Path(__file__).resolve().parents[2]
        done = subprocess.run(
            [sys.executable, "-m", "fireline.cli.main", "local", "--port", str(port), "--plain",
             "--no-examples", "--log-file", str(tmp_path / "local.log")],
            cwd=root, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    # THEN it exits 2 naming the port and the way out, with no traceback, and deployed
    # nothing (no function ever logged)
    printed = done.stdout + done.stderr
    assert done.returncode == 2, printed
    assert f"port {port} on 127.0.0.1 is in use" in printed, printed
    assert "--port" in printed and "Traceback" not in printed, printed
    assert "deployed in" not in printed, printed
    assert not (tmp_path / "local.log").exists() or not (tmp_path / "local.log").read_text()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("Resources: [1, 2]\n", "Resources is not a mapping of resources"),
        ("Resources:\n  Queue: {}\n", "Resources.Queue names no Type"),
        ("Resources: {a: [\n", "not a template"),
        (
            "Transform: AWS::Serverless-2016-10-31\nResources:\n  F:\n"
            "    Type: AWS::Serverless::Function\n    Properties: {Runtime: 3}\n",
            "Resource with id [F] is invalid",
        ),
    ],
)
def test_fireline_local_with_a_broken_template_names_what_is_wrong(
    tmp_path: Path, text: str, says: str
) -> None:
    template = tmp_path / "mine.yaml"
    template.write_text(text)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "fireline.cli.main", "local", "--port", "0", "--plain",
         "--no-examples", "--template", str(template), "--log-file", str(tmp_path / "l.log")],
        cwd=root, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    printed = done.stdout + done.stderr
    assert done.returncode == 2, printed
    assert "mine.yaml" in printed and says in printed, printed
    assert "Traceback" not in printed, printed


def test_a_start_that_fails_stops_what_it_had_started(tmp_path: Path) -> None:
    # GIVEN a template the deploy refuses (it names no resource at all)
    template = tmp_path / "broken.yaml"
    template.write_text("AWSTemplateFormatVersion: '2010-09-09'\nResources: nope\n")
    options = LocalOptions(api_port=0, template_path=template, log_path=tmp_path / "local.log")
    cloud = LocalCloud(options)
    # WHEN its start fails, THEN the error names the template and what is wrong with it
    with pytest.raises(deploy.DeployFailed, match=r"broken\.yaml: Resources is not a mapping"):
        cloud.start()
    # AND the API's port and the emulator were let go: both ports take a new listener
    api_port = cloud._listening.server_address[1]
    with socket.create_server(("127.0.0.1", api_port)):
        pass
    assert cloud._server is not None
    emulator_port = cloud._server.get_host_and_port()[1]
    with socket.create_server(("127.0.0.1", emulator_port)):
        pass
