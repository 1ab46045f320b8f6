"""The operator CLI end to end: each command run against one local cloud (the real API over
HTTP), its outcome checked through the API itself, not through the CLI's own output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fireline.cli import main
from fireline.local.cloud import LocalCloud, LocalOptions
from helpers.local_cloud import KEY, TEST_KEYS, call, wait_for

NOOP = ("--target-python", "noop")


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    options = LocalOptions(
        api_port=0,
        api_keys=dict(TEST_KEYS),
        log_path=tmp_path_factory.mktemp("cli") / "local.log",
    )
    with LocalCloud(options) as started:
        yield started


@pytest.fixture
def cli(
    cloud: LocalCloud, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """Run ``fireline ARGS`` against the cloud as tenant-a: (exit code, stdout, stderr)."""
    monkeypatch.delenv("FIRELINE_API_KEY", raising=False)
    monkeypatch.delenv("FIRELINE_API_URL", raising=False)

    def run(*args: str, key: str | None = KEY) -> tuple[int, str, str]:
        capsys.readouterr()
        keyed = ["--api-key", key] if key else []
        code = main.main(["--api", cloud.api_url, *keyed, *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def answer(cli: Any, *args: str) -> Any:
    """The JSON answer of a command that must succeed."""
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return json.loads(out) if out else None


def api(cloud: LocalCloud, path: str) -> Any:
    status, body = call(cloud, "GET", path)
    assert status == 200, body
    return body


# --- schedules ---------------------------------------------------------------------------


def test_a_schedule_made_with_every_option_is_stored_with_them(
    cloud: LocalCloud, cli: Any, tmp_path: Path
) -> None:
    # GIVEN a payload in a file
    (tmp_path / "payload.json").write_text('{"report": "weekly"}')
    # WHEN a schedule is created with options of every kind
    created = answer(
        cli, "schedules", "create", "every monday at 09:00", *NOOP,
        "--timezone", "America/New_York", "--start", "2026-01-01T00:00:00Z",
        "--end", "2099-01-01T00:00:00Z", "--dst-gap", "skip", "--dst-repeat", "both",
        "--jitter", "5", "--misfire", "fire_all", "--misfire-grace", "120",
        "--catch-up-window", "7200", "--catch-up-max", "4", "--overlap", "forbid",
        "--class", "short", "--payload", f"@{tmp_path / 'payload.json'}", "--deadline", "15",
        "--max-attempts", "5", "--backoff", "1", "--backoff-factor", "3",
        "--backoff-cap", "30", "--retry-jitter", "none",
    )  # fmt: skip
    # THEN the API holds each of them
    stored = api(cloud, f"/schedules/{created['id']}")
    assert stored["timezone"] == "America/New_York"
    assert (stored["start"], stored["end"]) == ("2026-01-01T00:00:00Z", "2099-01-01T00:00:00Z")
    assert stored["dst"] == {"gap": "skip", "repeat": "both"}
    assert stored["misfire"] == {
        "policy": "fire_all",
        "grace_seconds": 120,
        "catch_up_window_seconds": 7200,
        "catch_up_max": 4,
    }
    assert stored["retry"] == {
        "max_attempts": 5,
        "base_seconds": 1.0,
        "factor": 3.0,
        "cap_seconds": 30.0,
        "jitter": "none",
    }
    assert (stored["overlap"], stored["job_class"], stored["jitter_seconds"]) == (
        "forbid",
        "short",
        5,
    )
    assert (stored["payload"], stored["deadline_seconds"]) == ({"report": "weekly"}, 15)

    # WHEN it is updated: a few options, one cleared
    code, out, err = cli(
        "schedules", "update", created["id"], "--max-attempts", "2", "--misfire", "skip",
        "--no-deadline", "--end", "none", "--target-python", "echo",
    )  # fmt: skip
    # THEN it is a new version with those changed and the rest as it was
    assert code == 0, err
    assert created["id"] in out
    updated = api(cloud, f"/schedules/{created['id']}")
    assert updated["version"] == stored["version"] + 1
    assert updated["retry"] == {**stored["retry"], "max_attempts": 2}
    assert updated["misfire"] == {**stored["misfire"], "policy": "skip"}
    assert (updated["deadline_seconds"], updated["end"]) == (None, None)
    assert updated["target"] == {"type": "python", "handler": "echo"}
    unchanged = ("spec", "timezone", "dst", "start", "payload", "overlap", "job_class")
    assert {k: updated[k] for k in unchanged} == {k: stored[k] for k in unchanged}


def test_schedules_are_listed_paused_resumed_previewed_and_deleted(
    cloud: LocalCloud, cli: Any
) -> None:
    # GIVEN two schedules, one of them paused through the CLI
    kept = answer(cli, "schedules", "create", "rate(17 minutes)", *NOOP)
    paused = answer(cli, "schedules", "create", "cron(13 3 * * *)", *NOOP)
    assert answer(cli, "schedules", "pause", paused["id"])["state"] == "paused"
    assert api(cloud, f"/schedules/{paused['id']}")["state"] == "paused"
    # WHEN they are listed by state and text THEN each filter finds its own
    by_state = answer(cli, "schedules", "list", "--state", "paused", "--all")
    assert paused["id"] in {s["id"] for s in by_state["items"]}
    assert kept["id"] not in {s["id"] for s in by_state["items"]}
    by_text = answer(cli, "schedules", "list", "--q", "RATE(17", "--limit", "1")
    assert [s["id"] for s in by_text["items"]] == [kept["id"]]
    code, out, _ = cli("schedules", "list", "--q", "cron(13 3")
    assert code == 0 and paused["id"] in out and kept["id"] not in out

    # WHEN it is resumed THEN it is active again
    code, _, err = cli("schedules", "resume", paused["id"])
    assert code == 0, err
    assert api(cloud, f"/schedules/{paused['id']}")["state"] == "active"

    # WHEN its fires are previewed after an instant THEN they come after it, at 03:13
    preview = answer(
        cli, "schedules", "preview", paused["id"], "--after", "2030-01-01T00:00:00Z",
        "--count", "3",
    )  # fmt: skip
    assert preview["fire_times"] == [
        "2030-01-01T03:13:00Z",
        "2030-01-02T03:13:00Z",
        "2030-01-03T03:13:00Z",
    ]

    # WHEN it is deleted THEN it is gone, and getting it again names what is missing
    code, out, _ = cli("schedules", "delete", paused["id"])
    assert code == 0 and out == f"deleted schedule {paused['id']}\n"
    assert call(cloud, "GET", f"/schedules/{paused['id']}")[0] == 404
    code, _, err = cli("schedules", "get", paused["id"])
    assert code == 1
    assert err == f"error: schedule {paused['id']} not found (HTTP 404)\n"


def test_the_next_fire_shown_counts_the_fires_the_ticker_sent_ahead(
    cloud: LocalCloud, cli: Any
) -> None:
    # GIVEN an every-10-second schedule whose fires the ticker has sent minutes ahead
    created = answer(cli, "schedules", "create", "rate(10 seconds)", *NOOP)
    path = f"/schedules/{created['id']}/preview?count=20"
    wait_for(lambda: all(f["queued"] and f["sent_at"] for f in api(cloud, path)["fires"]))
    # WHEN it is read through the CLI, alone and in the list
    before = datetime.now(UTC)
    got = answer(cli, "schedules", "get", created["id"])
    listed = answer(cli, "schedules", "list", "--all")
    after = datetime.now(UTC)
    (in_list,) = [s for s in listed["items"] if s["id"] == created["id"]]
    # THEN its next fire is within 10 seconds, in both
    for shown in (got, in_list):
        next_fire = datetime.fromisoformat(shown["next_fire"])
        assert before - timedelta(seconds=1) < next_fire <= after + timedelta(seconds=10), shown
    # AND its preview shows the next fires queued, with the time they were sent
    code, out, err = cli("schedules", "preview", created["id"], "--count", "3")
    assert code == 0, err
    assert out.count("sent 20") == 3, out


def test_a_triggered_fire_is_in_the_history_by_state_and_time(cloud: LocalCloud, cli: Any) -> None:
    # GIVEN a daily schedule
    created = answer(cli, "schedules", "create", "rate(1 day)", "--target-python", "echo")
    # WHEN it is triggered through the CLI
    fired = answer(cli, "schedules", "trigger", created["id"], "--idempotency-key", "t-1")
    assert fired["schedule_id"] == created["id"]

    # THEN the fire runs, and the history finds it by state and time range
    def succeeded() -> Any:
        page = answer(cli, "schedules", "history", created["id"], "--state", "succeeded")
        return page["items"]

    (done,) = wait_for(succeeded, timeout=60)
    assert (done["key"], done["attempts"]) == (fired["key"], 1)
    at = datetime.fromisoformat(fired["fire_time"])
    window = ("--from", at.isoformat(), "--to", at.replace(year=at.year + 1).isoformat())
    in_window = answer(cli, "schedules", "history", created["id"], *window)["items"]
    assert [o["key"] for o in in_window] == [fired["key"]]
    after = ("--from", at.replace(year=at.year + 1).isoformat())
    assert answer(cli, "schedules", "history", created["id"], *after)["items"] == []
    # AND the same trigger key gives the same fire back, not a second one
    again = answer(cli, "schedules", "trigger", created["id"], "--idempotency-key", "t-1")
    assert again["key"] == fired["key"]


def test_a_backfill_runs_the_past_hours_once_and_reports_its_progress(
    cloud: LocalCloud, cli: Any
) -> None:
    # GIVEN an hourly schedule and the three whole hours before now
    created = answer(cli, "schedules", "create", "rate(1 hour)", "--target-python", "echo")
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    window = ("--from", (hour - timedelta(hours=3)).isoformat(), "--to", hour.isoformat())
    # WHEN they are backfilled through the CLI
    started = answer(cli, "schedules", "backfill", created["id"], *window)
    assert (started["fires"], started["created"], started["existed"]) == (3, 3, 0)

    # THEN the three fires run, each once, their history saying they came from a backfill
    def succeeded() -> Any:
        page = answer(cli, "schedules", "history", created["id"], "--state", "succeeded")
        return page["items"] if len(page["items"]) == 3 else None

    done = wait_for(succeeded, timeout=90)
    assert {(o["origin"], o["backfill_id"], o["attempts"]) for o in done} == {
        ("backfill", started["id"], 1)
    }

    # AND its status says so, and a second backfill of the range creates nothing
    def finished() -> Any:
        found = answer(cli, "schedules", "backfill-status", created["id"], started["id"])
        return found if found["state"] == "done" else None

    status = wait_for(finished, timeout=90)
    assert (status["run"], status["left"]) == (3, 0)
    again = answer(cli, "schedules", "backfill", created["id"], *window)
    assert (again["created"], again["existed"]) == (0, 3)
    # AND a range reaching past now is refused, naming the option at fault
    future = ("--from", hour.isoformat(), "--to", (hour + timedelta(hours=2)).isoformat())
    code, _, err = cli("schedules", "backfill", created["id"], *future)
    assert code == 1 and "--to" in err, err


# --- jobs and dead letters ---------------------------------------------------------------


def test_a_job_is_created_listed_by_state_and_cancelled(cloud: LocalCloud, cli: Any) -> None:
    # GIVEN a job an hour away
    job = answer(cli, "jobs", "create", "--in", "3600", *NOOP, "--max-attempts", "2")
    assert api(cloud, f"/jobs/{job['id']}")["state"] == "scheduled"
    waiting = answer(cli, "jobs", "list", "--state", "scheduled", "--all")
    assert job["id"] in {j["id"] for j in waiting["items"]}
    # WHEN it is cancelled through the CLI
    code, out, err = cli("jobs", "cancel", job["id"])
    # THEN the API has it cancelled, and the cancelled listing has it
    assert code == 0 and "cancelled" in out, err
    assert api(cloud, f"/jobs/{job['id']}")["state"] == "cancelled"
    assert answer(cli, "jobs", "get", job["id"])["state"] == "cancelled"
    cancelled = answer(cli, "jobs", "list", "--state", "cancelled", "--all")
    assert job["id"] in {j["id"] for j in cancelled["items"]}


def test_a_batch_of_jobs_from_a_file_is_created_in_one_request(
    cloud: LocalCloud, cli: Any, tmp_path: Path
) -> None:
    # GIVEN three jobs in a file
    noop = {"type": "python", "handler": "noop"}
    jobs = [{"delay_seconds": 3600, "target": noop, "payload": {"n": n}} for n in range(3)]
    (tmp_path / "jobs.json").write_text(json.dumps({"jobs": jobs}))
    batch = ("jobs", "create-batch", f"@{tmp_path / 'jobs.json'}", "--idempotency-key", "b-1")
    # WHEN they are created with the CLI, and the command repeated with its key
    created = answer(cli, *batch)
    again = answer(cli, *batch)
    # THEN the API has the three, in order, once
    ids = [j["id"] for j in created["jobs"]]
    assert [api(cloud, f"/jobs/{i}")["payload"] for i in ids] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert again == created
    # AND a bad job is refused naming its place in the batch
    bad = json.dumps(
        [{"delay_seconds": 60, "target": {"type": "http", "url": "https://10.0.0.1/"}}]
    )
    code, _, err = cli("jobs", "create-batch", bad)
    assert code != 0 and "jobs[0].target.url" in err, err


def test_a_dead_job_is_listed_and_redriven(cloud: LocalCloud, cli: Any) -> None:
    # GIVEN a job that fails on its only attempt
    job = answer(
        cli, "jobs", "create", "--in", "0", "--target-python", "fail", "--max-attempts", "1"
    )
    wait_for(lambda: api(cloud, f"/jobs/{job['id']}")["state"] == "dead", timeout=60)
    # WHEN the dead letters are listed THEN it is there, with its reason
    letters = answer(cli, "dead-letters", "list", "--all")["items"]
    (letter,) = [d for d in letters if d["schedule_id"] == job["id"]]
    assert letter["exit_reason"].startswith("error: ")
    # WHEN it is redriven THEN it is queued again, its attempts starting over
    queued = answer(cli, "dead-letters", "redrive", letter["id"])
    assert (queued["key"], queued["state"], queued["attempts"]) == (letter["key"], "queued", 0)

    # AND it runs (and fails) once more
    def dead_again() -> bool:
        row = api(cloud, f"/jobs/{job['id']}")["occurrence"]
        return bool(
            row["state"] == "dead" and row["finished_at"] not in (None, letter["finished_at"])
        )

    wait_for(dead_again, timeout=60)


# --- workflows and runs ------------------------------------------------------------------


def test_a_workflow_is_registered_run_retried_and_cancelled(
    cloud: LocalCloud, cli: Any, tmp_path: Path
) -> None:
    # GIVEN a workflow of two nodes, the second failing, registered from a file
    definition = {
        "nodes": [
            {"id": "a", "target": {"type": "python", "handler": "noop"}, "job_class": "short"},
            {
                "id": "b",
                "target": {"type": "python", "handler": "fail"},
                "job_class": "short",
                "retry": {"max_attempts": 1},
            },
        ],
        "edges": [["a", "b"]],
    }
    (tmp_path / "flaky.json").write_text(json.dumps(definition))
    registered = answer(cli, "workflows", "register", "flaky", f"@{tmp_path / 'flaky.json'}")
    assert (registered["nodes"], registered["edges"]) == (2, 1)
    assert api(cloud, "/workflows/flaky")["version"] == registered["version"]
    assert answer(cli, "workflows", "get", "flaky")["version"] == registered["version"]
    listed = answer(cli, "workflows", "list", "--all")["items"]
    assert "flaky" in {w["workflow_id"] for w in listed}
    # AND the same document through a presigned upload is the same workflow's next version
    uploaded = answer(cli, "workflows", "register", "flaky", json.dumps(definition), "--upload")
    assert uploaded["version"] == registered["version"] + 1
    assert (api(cloud, "/workflows/flaky")["nodes"], uploaded["edges"]) == (2, 1)

    # WHEN a run starts THEN it fails at b, which the node listing shows by state
    run = answer(cli, "runs", "start", "flaky")
    run_id = run["run_id"]
    wait_for(lambda: api(cloud, f"/runs/{run_id}")["state"] == "failed", timeout=90)
    view = answer(cli, "runs", "get", run_id)
    assert view["failed_nodes"] == ["b"]
    failed = answer(cli, "runs", "nodes", run_id, "--state", "failed")["items"]
    assert [n["id"] for n in failed] == ["b"]
    assert failed[0]["exit_reason"] is not None
    runs = answer(cli, "runs", "list", "flaky", "--state", "failed")["items"]
    assert [r["run_id"] for r in runs] == [run_id]

    # WHEN it is retried THEN b runs again, in a new generation
    retried = answer(cli, "runs", "retry", run_id)
    assert retried["generation"] == 2
    wait_for(lambda: api(cloud, f"/runs/{run_id}")["state"] == "failed", timeout=90)
    assert answer(cli, "runs", "nodes", run_id, "--state", "failed")["items"][0]["generation"] == 2

    # WHEN a run of a slow first node is cancelled THEN it ends cancelled, b never ran
    first, second_node = definition["nodes"]
    slow = {
        **definition,
        "nodes": [{**first, "target": SLEEP, "payload": {"seconds": 20}}, second_node],
    }
    answer(cli, "workflows", "register", "slow", json.dumps(slow))
    second = answer(cli, "runs", "start", "slow")["run_id"]
    # (Once its first node is under way: a run cancelled before the controller wrote its
    # node rows ends with none, and this step is about a run cut off mid-node.)
    wait_for(
        lambda: any(
            n["id"] == "a" and n["state"] == "dispatched"
            for n in api(cloud, f"/runs/{second}/nodes")["items"]
        ),
        timeout=90,
    )
    code, out, err = cli("runs", "cancel", second)
    assert code == 0 and "cancelled" in out, err
    assert api(cloud, f"/runs/{second}")["state"] == "cancelled"
    nodes = api(cloud, f"/runs/{second}/nodes")["items"]
    assert {n["id"]: n["exit_reason"] for n in nodes}["b"] is None


SLEEP = {"type": "python", "handler": "sleep"}


# --- errors ------------------------------------------------------------------------------


def test_errors_say_what_to_do_and_exit_apart_from_usage_errors(cli: Any) -> None:
    # no key at all: the API refuses, and the CLI says which variable to set
    code, _, err = cli("schedules", "list", key=None)
    assert code == 1 and "FIRELINE_API_KEY is unset" in err
    # a key the API does not know
    code, _, err = cli("schedules", "list", key="not-a-key")
    assert code == 1 and "the API refused the key" in err
    # a field the API refuses, named with the option that sets it
    code, _, err = cli("jobs", "create", "--in", "1", *NOOP, "--backoff", "5", "--backoff-cap", "1")
    assert code == 1 and err.startswith("error: retry"), err
    code, _, err = cli("schedules", "create", "61 * * * *", *NOOP)
    assert code == 1 and err.startswith("error: spec: "), err
    # what was not found, named
    code, _, err = cli("runs", "get", "run_nope")
    assert code == 1 and "run_nope" in err and "(HTTP 404)" in err
    # a usage error: exit 2, nothing sent
    code, _, err = cli("schedules", "list", "--state", "ended")
    assert code == 2 and "invalid choice: 'ended'" in err
