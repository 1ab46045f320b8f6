"""The operator CLI, run in-process against a real HTTP server serving canned answers.

The server records every request (method, path, query, headers, body), so each test checks
both sides: what the CLI sent, and what it printed for the answer it got.
"""

from __future__ import annotations

import argparse
import email
import email.policy
import io
import json
import shlex
import socket
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fireline.cli import client, main
from fireline.cli import schedules as schedules_cli
from fireline.local import command as local_command

KEY = "tenant-a-key"

SCHEDULE = {
    "id": "nightly",
    "spec": "cron(0 9 * * *)",
    "description": "At 09:00",
    "timezone": "Europe/Paris",
    "state": "active",
    "version": 3,
    "next_fire": "2026-12-01T08:00:00Z",
    "job_class": "default",
    "target": {"type": "python", "handler": "noop"},
    "payload": {},
    "overlap": "allow",
    "updated_at": "2026-11-30T10:00:00Z",
}
PAUSED = {
    **SCHEDULE,
    "id": "reports",
    "spec": "rate(5 minutes)",
    "description": "Every 5 minutes",
    "state": "paused",
    "next_fire": None,
}
OCCURRENCE = {
    "id": "bmlnaHRseSMzIzIwMjYtMTItMDFUMDg6MDA6MDBa",
    "key": "nightly#3#2026-12-01T08:00:00Z",
    "schedule_id": "nightly",
    "version": 3,
    "fire_time": "2026-12-01T08:00:00Z",
    "job_class": "default",
    "state": "dead",
    "attempts": 3,
    "created_at": "2026-12-01T07:59:50Z",
    "started_at": "2026-12-01T08:00:01Z",
    "finished_at": "2026-12-01T08:00:03Z",
    "duration_seconds": 1.5,
    "exit_reason": "ValueError: boom",
    "progress": {},
}
JOB = {
    "id": "job-7",
    "state": "scheduled",
    "run_at": "2026-12-01T09:00:00Z",
    "job_class": "short",
    "target": {"type": "python", "handler": "echo"},
    "payload": {"n": 1},
    "occurrence": None,
    "created_at": "2026-11-30T10:00:00Z",
}


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # names lower-cased
    body: Any


@dataclass
class FakeApi:
    url: str
    requests: list[Seen] = field(default_factory=list)
    answers: dict[tuple[str, str], list[tuple[int, Any]]] = field(default_factory=dict)

    def answer(self, method: str, path: str, status: int, body: Any = None) -> None:
        """Queue an answer for a route; the last one queued is repeated."""
        self.answers.setdefault((method, path), []).append((status, body))

    def next_answer(self, method: str, path: str) -> tuple[int, Any]:
        queued = self.answers.get((method, path))
        if not queued:
            return 404, {"error": {"type": "not_found", "message": "no such route"}}
        return queued.pop(0) if len(queued) > 1 else queued[0]

    @property
    def last(self) -> Seen:
        return self.requests[-1]


@pytest.fixture
def api(server: FakeApi, monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    """The module's server, with no requests seen and no answers queued."""
    # The operator's own environment must not leak into the tests.
    monkeypatch.delenv("FIRELINE_API_URL", raising=False)
    monkeypatch.delenv("FIRELINE_API_KEY", raising=False)
    server.requests.clear()
    server.answers.clear()
    return server


@pytest.fixture(scope="module")
def server() -> Iterator[FakeApi]:
    # One server for the module: starting and stopping one per test costs half a second.
    fake: FakeApi

    class Handler(BaseHTTPRequestHandler):
        def serve(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            fake.requests.append(
                Seen(
                    method=self.command,
                    path=url.path,
                    query=dict(urllib.parse.parse_qsl(url.query)),
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=decoded(raw, self.headers.get("Content-Type") or ""),
                )
            )
            status, body = fake.next_answer(self.command, url.path)
            data = b"" if body is None else (body if isinstance(body, bytes) else None)
            if data is None:
                data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = serve

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake = FakeApi(url=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def decoded(raw: bytes, content_type: str) -> Any:
    """A JSON body decoded; a form's parts as {name: text}; nothing as None."""
    if not raw:
        return None
    if content_type.startswith("multipart/form-data"):
        message = email.message_from_bytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + raw, policy=email.policy.HTTP
        )
        return {
            part.get_param("name", header="content-disposition"): part.get_content()
            for part in message.iter_parts()  # type: ignore[attr-defined]
        }
    return json.loads(raw)


def run(api: FakeApi, *argv: str) -> int:
    return main.main(["--api", api.url, "--api-key", KEY, *argv])


def rows(text: str) -> list[list[str]]:
    """The printed table as cells: columns are separated by runs of 3+ spaces."""
    return [
        [c.strip() for c in line.strip().split("   ") if c.strip()] for line in text.splitlines()
    ]


# --- schedules ---------------------------------------------------------------------------


def test_schedules_list_sends_the_key_and_prints_a_table(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN two schedules
    api.answer("GET", "/schedules", 200, {"items": [SCHEDULE, PAUSED], "next_cursor": None})
    # WHEN they are listed
    code = run(api, "schedules", "list", "--limit", "20")
    # THEN one authenticated GET asked for them
    out = capsys.readouterr()
    assert code == 0
    assert [(r.method, r.path, r.query) for r in api.requests] == [
        ("GET", "/schedules", {"limit": "20"})
    ]
    assert api.last.headers["x-api-key"] == KEY
    # AND the table has a header and one row per schedule
    assert rows(out.out) == [
        ["id", "spec", "description", "state", "next fire"],
        ["nightly", "cron(0 9 * * *)", "At 09:00", "active", "2026-12-01T08:00:00Z"],
        ["reports", "rate(5 minutes)", "Every 5 minutes", "paused", "-"],
    ]
    assert out.err == ""


def test_json_prints_the_response_body_as_is(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {"items": [SCHEDULE], "next_cursor": "abc"}
    api.answer("GET", "/schedules", 200, body)

    code = run(api, "--json", "schedules", "list")

    out = capsys.readouterr().out
    assert code == 0
    assert json.loads(out) == body
    assert out == json.dumps(body, indent=2) + "\n"
    # AND no limit was sent: the API's default applies
    assert api.last.query == {}


def test_global_options_also_work_after_the_command(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answer("GET", "/schedules/nightly", 200, SCHEDULE)

    code = main.main(["schedules", "get", "nightly", "--json", "--api", api.url, "--api-key", "k2"])

    assert code == 0
    assert json.loads(capsys.readouterr().out) == SCHEDULE
    assert api.last.headers["x-api-key"] == "k2"


def test_url_and_key_default_to_the_environment(
    api: FakeApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the URL and key only in the environment
    monkeypatch.setenv("FIRELINE_API_URL", api.url + "/")
    monkeypatch.setenv("FIRELINE_API_KEY", "from-env")
    api.answer("GET", "/schedules/nightly", 200, SCHEDULE)
    # WHEN a command is run without --api or --api-key
    code = main.main(["schedules", "get", "nightly"])
    # THEN the request went there, with that key
    assert code == 0
    assert api.last.path == "/schedules/nightly"
    assert api.last.headers["x-api-key"] == "from-env"
    assert ["description", "At 09:00"] in rows(capsys.readouterr().out)


def test_no_key_sends_no_key_header(api: FakeApi) -> None:
    api.answer("GET", "/schedules/nightly", 200, SCHEDULE)

    assert main.main(["--api", api.url, "schedules", "get", "nightly"]) == 0

    assert "x-api-key" not in api.last.headers


def test_list_all_follows_cursors_and_merges_the_pages(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN two pages
    api.answer("GET", "/schedules", 200, {"items": [SCHEDULE], "next_cursor": "page2"})
    api.answer("GET", "/schedules", 200, {"items": [PAUSED], "next_cursor": None})
    # WHEN every schedule is asked for
    code = run(api, "--json", "schedules", "list", "--all")
    # THEN the second request carried the first page's cursor
    assert code == 0
    assert [r.query for r in api.requests] == [
        {"limit": "100"},
        {"limit": "100", "cursor": "page2"},
    ]
    assert json.loads(capsys.readouterr().out) == {
        "items": [SCHEDULE, PAUSED],
        "next_cursor": None,
    }


def test_a_partial_list_says_there_is_more(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answer("GET", "/schedules", 200, {"items": [SCHEDULE], "next_cursor": "page2"})

    assert run(api, "schedules", "list", "--limit", "1") == 0

    assert "use --all" in capsys.readouterr().err


def test_create_sends_the_fields_and_the_idempotency_key(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answer("POST", "/schedules", 201, SCHEDULE)

    code = run(
        api,
        "schedules",
        "create",
        "every day at 09:00",
        "--target-python",
        "noop",
        "--timezone",
        "Europe/Paris",
        "--class",
        "long",
        "--payload",
        '{"report": "daily", "n": 2}',
        "--idempotency-key",
        "create-nightly-1",
    )

    assert code == 0
    assert (api.last.method, api.last.path) == ("POST", "/schedules")
    assert api.last.headers["idempotency-key"] == "create-nightly-1"
    assert api.last.headers["content-type"] == "application/json"
    assert api.last.body == {
        "spec": "every day at 09:00",
        "target": {"type": "python", "handler": "noop"},
        "timezone": "Europe/Paris",
        "job_class": "long",
        "payload": {"report": "daily", "n": 2},
    }
    table = rows(capsys.readouterr().out)
    assert ["id", "nightly"] in table
    assert ["target", '{"type":"python","handler":"noop"}'] in table


@pytest.mark.parametrize(
    ("option", "value", "target"),
    [
        (
            "--target-http",
            "https://hooks.example.com/x",
            {"type": "http", "url": "https://hooks.example.com/x"},
        ),
        (
            "--target-lambda",
            "arn:aws:lambda:us-east-1:123456789012:function:job",
            {
                "type": "lambda",
                "function_arn": "arn:aws:lambda:us-east-1:123456789012:function:job",
            },
        ),
        (
            "--target-sqs",
            "https://sqs.us-east-1.amazonaws.com/123456789012/q",
            {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q"},
        ),
    ],
)
def test_create_leaves_unset_options_to_the_api(
    api: FakeApi, option: str, value: str, target: dict[str, str]
) -> None:
    api.answer("POST", "/schedules", 201, SCHEDULE)

    assert run(api, "--json", "schedules", "create", "rate(5 minutes)", option, value) == 0

    assert api.last.body == {"spec": "rate(5 minutes)", "target": target}
    assert "idempotency-key" not in api.last.headers


def test_a_role_arn_goes_with_an_aws_target(api: FakeApi) -> None:
    api.answer("POST", "/schedules", 201, SCHEDULE)
    role = "arn:aws:iam::111122223333:role/fireline-target/fireline-jobs"
    queue = "https://sqs.us-east-1.amazonaws.com/111122223333/q"

    args = ("schedules", "create", "rate(5 minutes)", "--target-sqs", queue, "--role-arn", role)
    assert run(api, "--json", *args) == 0

    assert api.last.body["target"] == {
        "type": "sqs",
        "queue_url": queue,
        "role_arn": role,
    }


@pytest.mark.parametrize(
    ("options", "target"),
    [
        (
            ["--target-stepfunctions", "arn:aws:states:us-east-1:111122223333:stateMachine:m"],
            {
                "type": "stepfunctions",
                "state_machine_arn": "arn:aws:states:us-east-1:111122223333:stateMachine:m",
            },
        ),
        (
            [
                "--target-eventbridge",
                "arn:aws:events:us-east-1:111122223333:event-bus/b",
                "--detail-type",
                "report due",
                "--event-source",
                "acme.reports",
            ],
            {
                "type": "eventbridge",
                "event_bus_arn": "arn:aws:events:us-east-1:111122223333:event-bus/b",
                "detail_type": "report due",
                "source": "acme.reports",
            },
        ),
        (
            ["--target-sns", "arn:aws:sns:us-east-1:111122223333:t"],
            {"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:111122223333:t"},
        ),
    ],
)
def test_a_dispatch_target_is_sent_with_its_fields_and_role(
    api: FakeApi, options: list[str], target: dict[str, str]
) -> None:
    api.answer("POST", "/jobs", 201, SCHEDULE)
    role = "arn:aws:iam::111122223333:role/fireline-target/fireline-jobs"
    # WHEN a job is created with the kind's options and a role
    assert run(api, "--json", "jobs", "create", "--in", "60", *options, "--role-arn", role) == 0
    # THEN the body's target is the kind's, with the role
    assert api.last.body["target"] == {**target, "role_arn": role}


def test_create_sends_every_option_of_the_schedule_body(api: FakeApi, tmp_path: Path) -> None:
    # GIVEN a payload in a file
    payload = tmp_path / "payload.json"
    payload.write_text('{"report": "weekly"}')
    api.answer("POST", "/schedules", 201, SCHEDULE)
    # WHEN a schedule is created with every option
    code = run(
        api, "--json", "schedules", "create", "cron(0 9 * * MON)",
        "--target-http", "https://hooks.example.com/x", "--http-timeout", "20",
        "--header", "X-Team: reports", "--header", "X-Env:prod",
        "--timezone", "America/New_York", "--start", "2026-12-01T00:00:00Z",
        "--end", "2027-06-01T00:00:00+02:00", "--dst-gap", "skip", "--dst-repeat", "both",
        "--jitter", "30", "--misfire", "fire_all", "--misfire-grace", "120",
        "--catch-up-window", "7200", "--catch-up-max", "5", "--overlap", "forbid",
        "--class", "short", "--payload", f"@{payload}", "--deadline", "600",
        "--max-attempts", "5", "--backoff", "1.5", "--backoff-factor", "3",
        "--backoff-cap", "60", "--retry-jitter", "none",
    )  # fmt: skip
    # THEN each lands in its field of the body
    assert code == 0
    assert api.last.body == {
        "spec": "cron(0 9 * * MON)",
        "target": {
            "type": "http",
            "url": "https://hooks.example.com/x",
            "timeout_seconds": 20,
            "headers": {"X-Team": "reports", "X-Env": "prod"},
        },
        "timezone": "America/New_York",
        "start": "2026-12-01T00:00:00Z",
        "end": "2027-06-01T00:00:00+02:00",
        "dst": {"gap": "skip", "repeat": "both"},
        "jitter_seconds": 30,
        "misfire": {
            "policy": "fire_all",
            "grace_seconds": 120,
            "catch_up_window_seconds": 7200,
            "catch_up_max": 5,
        },
        "overlap": "forbid",
        "job_class": "short",
        "payload": {"report": "weekly"},
        "deadline_seconds": 600,
        "retry": {
            "max_attempts": 5,
            "base_seconds": 1.5,
            "factor": 3.0,
            "cap_seconds": 60.0,
            "jitter": "none",
        },
    }


def test_a_workflow_target_with_its_version(api: FakeApi) -> None:
    api.answer("POST", "/schedules", 201, SCHEDULE)

    args = ("rate(1 day)", "--target-workflow", "etl", "--workflow-version", "2")
    assert run(api, "--json", "schedules", "create", *args) == 0

    assert api.last.body["target"] == {"type": "workflow", "workflow_id": "etl", "version": 2}


STORED = {
    **SCHEDULE,
    "dst": {"gap": "shift", "repeat": "first"},
    "start": "2026-12-01T00:00:00Z",
    "end": None,
    "retry": {
        "max_attempts": 3,
        "base_seconds": 2.0,
        "factor": 2.0,
        "cap_seconds": 300.0,
        "jitter": "full",
    },
    "misfire": {
        "policy": "fire_once",
        "grace_seconds": 60,
        "catch_up_window_seconds": 3600,
        "catch_up_max": 10,
    },
    "jitter_seconds": 0,
    "deadline_seconds": 900,
    "created_at": "2026-11-30T10:00:00Z",
}
# What a PUT of STORED unchanged would send: the stored definition, nothing read-only.
DEFINITION = {
    key: STORED[key]
    for key in (
        "spec", "timezone", "dst", "start", "end", "job_class", "target", "payload", "retry",
        "misfire", "overlap", "jitter_seconds", "deadline_seconds",
    )
}  # fmt: skip


def test_update_sends_the_stored_definition_with_the_options_given(api: FakeApi) -> None:
    # GIVEN a stored schedule
    api.answer("GET", "/schedules/nightly", 200, STORED)
    api.answer("PUT", "/schedules/nightly", 200, {**STORED, "version": 4})
    # WHEN some of its options are changed
    code = run(
        api, "--json", "schedules", "update", "nightly", "--spec", "cron(0 10 * * *)",
        "--max-attempts", "7", "--misfire", "skip", "--dst-repeat", "last",
        "--start", "none", "--no-deadline", "--role-arn", "arn:aws:iam::111122223333:role/r",
    )  # fmt: skip
    # THEN the whole definition is put back, those options changed, the rest as stored
    assert code == 0
    assert [(r.method, r.path) for r in api.requests] == [
        ("GET", "/schedules/nightly"),
        ("PUT", "/schedules/nightly"),
    ]
    assert api.last.body == {
        **DEFINITION,
        "spec": "cron(0 10 * * *)",
        "retry": {**DEFINITION["retry"], "max_attempts": 7},
        "misfire": {**DEFINITION["misfire"], "policy": "skip"},
        "dst": {"gap": "shift", "repeat": "last"},
        "start": None,
        "deadline_seconds": None,
        # sent as asked: the API names the field a python target does not take
        "target": {**SCHEDULE["target"], "role_arn": "arn:aws:iam::111122223333:role/r"},
    }


def test_update_with_a_new_target_replaces_the_old_one(api: FakeApi) -> None:
    api.answer("GET", "/schedules/nightly", 200, STORED)
    api.answer("PUT", "/schedules/nightly", 200, STORED)

    assert run(api, "--json", "schedules", "update", "nightly", "--target-python", "echo") == 0

    assert api.last.body == {**DEFINITION, "target": {"type": "python", "handler": "echo"}}


def test_list_sends_its_filters_and_cursor(api: FakeApi) -> None:
    api.answer("GET", "/schedules", 200, {"items": [PAUSED], "next_cursor": None})

    args = ("--state", "paused", "--q", "Every 5", "--limit", "5", "--cursor", "c1")
    assert run(api, "--json", "schedules", "list", *args) == 0

    assert api.last.query == {"state": "paused", "q": "Every 5", "limit": "5", "cursor": "c1"}


def test_list_all_sends_the_filters_with_every_page(api: FakeApi) -> None:
    api.answer("GET", "/schedules", 200, {"items": [SCHEDULE], "next_cursor": "p2"})
    api.answer("GET", "/schedules", 200, {"items": [PAUSED], "next_cursor": None})

    assert run(api, "--json", "schedules", "list", "--all", "--state", "active") == 0

    assert [r.query for r in api.requests] == [
        {"state": "active", "limit": "100"},
        {"state": "active", "limit": "100", "cursor": "p2"},
    ]


def test_history_and_preview_send_their_filters(api: FakeApi) -> None:
    page = {"items": [OCCURRENCE], "next_cursor": None}
    api.answer("GET", "/schedules/nightly/occurrences", 200, page)
    preview = {"schedule_id": "nightly", "description": "d", "timezone": "UTC", "fire_times": []}
    api.answer("GET", "/schedules/nightly/preview", 200, preview)

    code = run(
        api, "--json", "schedules", "history", "nightly", "--state", "dead",
        "--from", "2026-12-01T00:00:00Z", "--to", "2026-12-02T00:00:00Z", "--cursor", "c",
    )  # fmt: skip
    assert code == 0
    assert api.last.query == {
        "state": "dead",
        "from": "2026-12-01T00:00:00Z",
        "to": "2026-12-02T00:00:00Z",
        "cursor": "c",
    }

    after = ("--after", "2027-01-01T00:00:00Z", "--count", "3")
    assert run(api, "--json", "schedules", "preview", "nightly", *after) == 0
    assert api.last.query == {"after": "2027-01-01T00:00:00Z", "count": "3"}


@pytest.mark.parametrize(("action", "state"), [("pause", "paused"), ("resume", "active")])
def test_pause_and_resume_post_to_the_schedule(
    api: FakeApi, capsys: pytest.CaptureFixture[str], action: str, state: str
) -> None:
    api.answer("POST", f"/schedules/nightly/{action}", 200, {**SCHEDULE, "state": state})

    assert run(api, "schedules", action, "nightly") == 0

    assert (api.last.method, api.last.path, api.last.body) == (
        "POST",
        f"/schedules/nightly/{action}",
        None,
    )
    assert ["state", state] in rows(capsys.readouterr().out)


def test_trigger_sends_its_idempotency_key_and_shows_the_occurrence(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    queued = {**OCCURRENCE, "state": "queued", "attempts": 0, "duration_seconds": None}
    queued["exit_reason"] = None
    api.answer("POST", "/schedules/nightly/trigger", 202, queued)

    assert run(api, "schedules", "trigger", "nightly", "--idempotency-key", "t-1") == 0

    assert api.last.headers["idempotency-key"] == "t-1"
    out = capsys.readouterr().out
    assert "nightly#3#2026-12-01T08:00:00Z" in out
    assert ["2026-12-01T08:00:00Z", "queued", "0", "-", "-"] in rows(out)


def test_delete_answers_no_content(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer("DELETE", "/schedules/nightly", 204)

    assert run(api, "schedules", "delete", "nightly") == 0
    assert capsys.readouterr().out == "deleted schedule nightly\n"

    # AND with --json there is no body to print
    assert run(api, "--json", "schedules", "delete", "nightly") == 0
    assert capsys.readouterr().out == ""


def test_preview_asks_for_a_count_and_lists_fire_times(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    times = ["2026-12-01T08:00:00Z", "2026-12-02T08:00:00Z"]
    body = {
        "schedule_id": "nightly",
        "description": "At 09:00",
        "timezone": "Europe/Paris",
        "fire_times": times,
    }
    api.answer("GET", "/schedules/nightly/preview", 200, body)

    assert run(api, "schedules", "preview", "nightly", "--count", "2") == 0

    assert api.last.query == {"count": "2"}
    assert rows(capsys.readouterr().out) == [
        ["nightly: At 09:00 (Europe/Paris)"],
        ["fire time", "queued"],
        [times[0]],
        [times[1]],
    ]


def test_history_shows_the_occurrences(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer(
        "GET", "/schedules/nightly/occurrences", 200, {"items": [OCCURRENCE], "next_cursor": None}
    )

    assert run(api, "schedules", "history", "nightly", "--limit", "5") == 0

    assert api.last.query == {"limit": "5"}
    assert rows(capsys.readouterr().out) == [
        ["fire time", "state", "attempts", "duration", "exit reason"],
        ["2026-12-01T08:00:00Z", "dead", "3", "1.50s", "ValueError: boom"],
    ]


def test_server_text_is_printed_literally(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN text that rich would otherwise read as markup and emoji
    odd = {**SCHEDULE, "description": "[bold]x[/bold] :smile:"}
    api.answer("GET", "/schedules", 200, {"items": [odd], "next_cursor": None})

    assert run(api, "schedules", "list") == 0

    assert "[bold]x[/bold] :smile:" in capsys.readouterr().out


# --- jobs --------------------------------------------------------------------------------


def test_job_create_with_a_delay(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer("POST", "/jobs", 201, JOB)

    code = run(
        api, "jobs", "create", "--in", "30", "--target-python", "echo", "--class", "short",
        "--payload", '{"n": 1}', "--idempotency-key", "job-key",
    )  # fmt: skip

    assert code == 0
    assert api.last.body == {
        "delay_seconds": 30,
        "target": {"type": "python", "handler": "echo"},
        "job_class": "short",
        "payload": {"n": 1},
    }
    assert api.last.headers["idempotency-key"] == "job-key"
    assert rows(capsys.readouterr().out) == [
        ["id", "state", "run at", "class", "attempts", "exit reason"],
        ["job-7", "scheduled", "2026-12-01T09:00:00Z", "short", "0", "-"],
    ]


def test_job_create_at_a_time(api: FakeApi) -> None:
    api.answer("POST", "/jobs", 201, JOB)

    code = run(api, "jobs", "create", "--at", "2026-12-01T09:00:00Z", "--target-python", "noop")

    assert code == 0
    assert api.last.body == {
        "run_at": "2026-12-01T09:00:00Z",
        "target": {"type": "python", "handler": "noop"},
    }


def test_job_get_and_cancel_show_the_run(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    ran = {**JOB, "state": "failed", "occurrence": {**OCCURRENCE, "state": "failed"}}
    api.answer("GET", "/jobs/job-7", 200, ran)
    api.answer("POST", "/jobs/job-7/cancel", 200, {**JOB, "state": "cancelled"})

    assert run(api, "jobs", "get", "job-7") == 0
    assert ["job-7", "failed", "2026-12-01T09:00:00Z", "short", "3", "ValueError: boom"] in rows(
        capsys.readouterr().out
    )

    assert run(api, "jobs", "cancel", "job-7") == 0
    assert (api.last.method, api.last.path) == ("POST", "/jobs/job-7/cancel")
    cancelled = ["job-7", "cancelled", "2026-12-01T09:00:00Z", "short", "0", "-"]
    assert cancelled in rows(capsys.readouterr().out)


def test_jobs_list_by_state(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer("GET", "/jobs", 200, {"items": [JOB], "next_cursor": "more"})

    assert run(api, "jobs", "list", "--state", "scheduled", "--limit", "1") == 0

    assert api.last.query == {"state": "scheduled", "limit": "1"}
    out = capsys.readouterr()
    assert ["job-7", "scheduled", "2026-12-01T09:00:00Z", "short", "0", "-"] in rows(out.out)
    assert "next cursor more" in out.err


# --- workflows and runs ------------------------------------------------------------------

WORKFLOW = {
    "workflow_id": "etl",
    "version": 2,
    "nodes": 2,
    "edges": 1,
    "created_at": "2026-12-01T08:00:00Z",
}
RUN = {
    "run_id": "run_1",
    "workflow_id": "etl",
    "version": 2,
    "state": "running",
    "total": 2,
    "generation": 1,
    "created_at": "2026-12-01T08:00:00Z",
    "finished_at": None,
}


def test_workflows_register_get_and_list(
    api: FakeApi, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    definition = {
        "nodes": [{"id": "a", "target": {"type": "python", "handler": "noop"}}],
        "edges": [],
    }
    document = tmp_path / "etl.json"
    document.write_text(json.dumps(definition))
    api.answer("PUT", "/workflows/etl", 201, WORKFLOW)
    api.answer("GET", "/workflows/etl", 200, WORKFLOW)
    api.answer("GET", "/workflows", 200, {"items": [WORKFLOW], "next_cursor": None})

    code = run(
        api, "workflows", "register", "etl", f"@{document}", "--description", "nightly ETL",
        "--idempotency-key", "wf-1",
    )  # fmt: skip
    assert code == 0
    assert api.last.body == {**definition, "description": "nightly ETL"}
    assert api.last.headers["idempotency-key"] == "wf-1"
    assert ["etl", "2", "2", "1", "2026-12-01T08:00:00Z"] in rows(capsys.readouterr().out)

    assert run(api, "workflows", "get", "etl") == 0
    assert ["etl", "2", "2", "1", "2026-12-01T08:00:00Z"] in rows(capsys.readouterr().out)
    assert run(api, "workflows", "list", "--limit", "10") == 0
    assert api.last.query == {"limit": "10"}


def test_a_definition_too_large_for_a_request_goes_through_an_upload(api: FakeApi) -> None:
    # GIVEN an API that finds the definition too large inline, and gives an upload form
    too_large = {"error": {"type": "too_large", "message": "over 4 MiB", "field": "body"}}
    api.answer("PUT", "/workflows/big", 413, too_large)
    api.answer("PUT", "/workflows/big", 201, WORKFLOW)
    form = {
        "upload_id": "up1",
        "upload_url": f"{api.url}/bucket",
        "upload_fields": {"key": "uploads/tenant-a/up1", "policy": "signed"},
        "expires_in": 900,
        "max_bytes": 100,
    }
    api.answer("POST", "/workflow-uploads", 201, form)
    api.answer("POST", "/bucket", 204)
    definition = {"nodes": [{"id": "a", "target": {"type": "python", "handler": "noop"}}]}
    # WHEN it is registered
    assert run(api, "--json", "workflows", "register", "big", json.dumps(definition)) == 0
    # THEN it was tried inline, then posted with the form's fields, then named by upload id
    assert [(r.method, r.path) for r in api.requests] == [
        ("PUT", "/workflows/big"),
        ("POST", "/workflow-uploads"),
        ("POST", "/bucket"),
        ("PUT", "/workflows/big"),
    ]
    posted = api.requests[2]
    assert "x-api-key" not in posted.headers  # the form is the credential, not the key
    assert {k: v for k, v in posted.body.items() if k != "file"} == form["upload_fields"]
    assert json.loads(posted.body["file"]) == definition
    assert api.last.body == {"upload_id": "up1"}


def test_runs_start_list_and_act(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer("POST", "/workflows/etl/runs", 202, RUN)
    api.answer("GET", "/workflows/etl/runs", 200, {"items": [RUN], "next_cursor": None})
    for action in ("cancel", "retry", "reconcile"):
        api.answer("POST", f"/runs/run_1/{action}", 200, {**RUN, "state": "cancelled"})

    assert run(api, "--json", "runs", "start", "etl", "--version", "2") == 0
    assert (api.last.path, api.last.body) == ("/workflows/etl/runs", {"version": 2})
    assert json.loads(capsys.readouterr().out) == RUN

    assert run(api, "runs", "list", "etl", "--state", "running") == 0
    assert api.last.query == {"state": "running"}
    assert rows(capsys.readouterr().out)[1][:4] == ["run_1", "etl", "2", "running"]

    for action in ("cancel", "retry", "reconcile"):
        assert run(api, "runs", action, "run_1") == 0
        assert (api.last.method, api.last.path) == ("POST", f"/runs/run_1/{action}")


def test_run_get_and_nodes(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    view = {
        **RUN,
        "state": "failed",
        "counts": {"succeeded": 1, "failed": 1, "waiting": 0},
        "progress": 1.0,
        "failed_nodes": ["b"],
    }
    node = {"id": "b", "state": "failed", "generation": 1, "pending": 0, "exit_reason": "boom"}
    api.answer("GET", "/runs/run_1", 200, view)
    api.answer("GET", "/runs/run_1/nodes", 200, {"items": [node], "next_cursor": None})

    assert run(api, "runs", "get", "run_1") == 0
    out = capsys.readouterr().out
    assert "nodes: succeeded 1, failed 1; progress 100%" in out
    assert "failed: b" in out

    assert run(api, "runs", "nodes", "run_1", "--state", "failed", "--limit", "500") == 0
    assert api.last.query == {"state": "failed", "limit": "500"}
    assert rows(capsys.readouterr().out)[1] == ["b", "failed", "1", "0", "boom"]


# --- completion --------------------------------------------------------------------------


def completions(shell_script: str, *words: str) -> list[str]:
    """What the script offers for ``words`` (the last one being completed)."""
    line = " ".join(shlex.quote(w) for w in words)
    done = subprocess.run(
        ["bash", "-c", f'{shell_script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; '
         '_fireline_complete; printf "%s\\n" "${COMPREPLY[@]}"'],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    return [w for w in done.stdout.splitlines() if w]


def test_the_bash_completion_knows_commands_options_and_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN the script the CLI prints
    assert main.main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    # THEN it completes commands, a command's actions, its options and their values
    assert completions(script, "fireline", "wo") == ["workflows"]
    assert "update" in completions(script, "fireline", "schedules", "")
    assert completions(script, "fireline", "--json", "schedules", "list", "--st") == ["--state"]
    assert completions(script, "fireline", "schedules", "list", "--state", "") == [
        "active",
        "paused",
        "completed",
    ]
    assert completions(script, "fireline", "runs", "nodes", "r1", "--state", "bl") == ["blocked"]
    assert "--misfire-grace" in completions(script, "fireline", "schedules", "update", "x", "--m")


def test_the_zsh_completion_loads_the_bash_one_through_bashcompinit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main.main(["completion", "zsh"]) == 0
    script = capsys.readouterr().out
    assert "bashcompinit" in script and "complete -o default -F _fireline_complete" in script


# --- dead letters ------------------------------------------------------------------------


def test_dead_letters_list_and_redrive(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer("GET", "/dead-letters", 200, {"items": [OCCURRENCE], "next_cursor": None})
    api.answer(
        "POST",
        f"/dead-letters/{OCCURRENCE['id']}/redrive",
        202,
        {**OCCURRENCE, "state": "queued", "attempts": 0},
    )

    assert run(api, "dead-letters", "list") == 0
    assert rows(capsys.readouterr().out) == [
        ["id", "of", "fire time", "attempts", "exit reason", "finished"],
        [
            OCCURRENCE["id"],
            "schedule nightly",
            "2026-12-01T08:00:00Z",
            "3",
            "ValueError: boom",
            "2026-12-01T08:00:03Z",
        ],
    ]

    assert run(api, "dead-letters", "redrive", str(OCCURRENCE["id"])) == 0
    assert api.last.method == "POST"
    assert "queued" in capsys.readouterr().out


def test_a_nodes_dead_letters_are_listed_by_run_node_and_generation(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a node that died, was retried and died again, and a job that died
    node = {**OCCURRENCE, "schedule_id": "wf.r1.validate", "run_id": "r1", "node_id": "validate"}
    job = {**OCCURRENCE, "id": "am9i", "schedule_id": "job_7", "run_id": None, "node_id": None}
    items = [{**node, "id": "Zzk", "version": 2}, {**node, "id": "Zzg", "version": 1}, job]
    api.answer("GET", "/dead-letters", 200, {"items": items, "next_cursor": None})

    # WHEN the dead letters are listed
    assert run(api, "dead-letters", "list") == 0

    # THEN each row says what it is of: the node's two apart by their generation
    assert [row[:2] for row in rows(capsys.readouterr().out)[1:]] == [
        ["Zzk", "node validate of run r1 (generation 2)"],
        ["Zzg", "node validate of run r1 (generation 1)"],
        ["am9i", "job job_7"],
    ]


# --- errors ------------------------------------------------------------------------------


def test_an_api_error_prints_its_field_and_exits_1(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the API refuses the spec
    message = "61 is out of range in '61' (allowed 0-59)"
    api.answer(
        "POST",
        "/schedules",
        400,
        {"error": {"type": "validation", "message": message, "field": "spec"}},
    )
    # WHEN a schedule is created
    code = run(api, "schedules", "create", "61 * * * *", "--target-python", "noop")
    # THEN the field and the status are on stderr, nothing on stdout
    out = capsys.readouterr()
    assert code == 1
    assert out.err == f"error: spec: {message} (HTTP 400)\n"
    assert out.out == ""


def test_an_error_without_a_field(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer("GET", "/jobs/nope", 404, {"error": {"type": "not_found", "message": "no such job"}})

    assert run(api, "--json", "jobs", "get", "nope") == 1

    assert capsys.readouterr().err == "error: job 'nope' not found: no such job (HTTP 404)\n"


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        # the stack's gateway response to a key it refuses
        (
            {
                "error": {
                    "type": "forbidden",
                    "message": "this key may not make this call",
                    "field": "x-api-key",
                }
            },
            "this key may not make this call",
        ),
        # a gateway without those responses
        ({"message": "Forbidden"}, "Forbidden"),
    ],
)
def test_a_gateway_refusal_of_the_key_says_it_was_refused(
    api: FakeApi, capsys: pytest.CaptureFixture[str], body: dict[str, Any], shown: str
) -> None:
    # GIVEN API Gateway's own answer to an unknown key
    api.answer("GET", "/schedules", 403, body)

    assert run(api, "schedules", "list") == 1

    err = capsys.readouterr().err
    assert err.startswith("error: the API refused the key (from --api-key or $FIRELINE_API_KEY)")
    assert err.endswith(f"(HTTP 403: {shown})\n")


def test_a_quota_refusal_is_not_taken_for_a_refused_key(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    refusal = {"error": {"type": "quota_exceeded", "message": "schedules quota of 5 reached",
                         "field": "quota"}}  # fmt: skip
    api.answer("GET", "/schedules", 403, refusal)

    assert run(api, "schedules", "list") == 1

    assert "refused the key" not in capsys.readouterr().err


def test_a_401_without_a_key_says_how_to_set_one(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.answer("GET", "/jobs", 401, {"error": {"type": "unauthorized", "message": "no tenant"}})

    assert main.main(["--api", api.url, "jobs", "list"]) == 1

    err = capsys.readouterr().err
    assert "x-api-key" not in api.last.headers
    assert err.startswith("error: no API key: $FIRELINE_API_KEY is unset.")
    assert "export FIRELINE_API_KEY=" in err and "--api-key" in err


def test_a_quota_refusal_is_not_taken_for_a_bad_key(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    refused = {"error": {"type": "quota_exceeded", "message": "10 schedules is the limit"}}
    api.answer("POST", "/schedules", 403, refused)

    assert run(api, "schedules", "create", "rate(1 hour)", "--target-python", "noop") == 1

    assert capsys.readouterr().err == "error: 10 schedules is the limit (HTTP 403)\n"


def test_a_field_error_names_the_option_that_sets_it(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    message = "Input should be less than or equal to 100"
    refused = {"error": {"type": "validation", "message": message, "field": "retry.max_attempts"}}
    api.answer("POST", "/jobs", 422, refused)

    code = run(api, "jobs", "create", "--in", "1", "--target-python", "a", "--max-attempts", "101")

    assert code == 1
    assert capsys.readouterr().err == (
        f"error: retry.max_attempts (--max-attempts): {message} (HTTP 422)\n"
    )


def test_a_missing_route_says_the_url_may_be_wrong(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    # (the fake API answers "no such route" to what it was not told to answer)
    assert run(api, "workflows", "get", "etl") == 1

    assert capsys.readouterr().err.startswith(f"error: {api.url} has no such route")


def test_the_client_raises_a_typed_error(api: FakeApi) -> None:
    api.answer(
        "POST",
        "/jobs",
        422,
        {"error": {"type": "validation", "message": "bad", "field": "Idempotency-Key"}},
    )

    with pytest.raises(client.ApiError) as raised:
        client.ApiClient(api.url, KEY).request("POST", "/jobs", {"x": 1})

    assert (raised.value.status, raised.value.type, raised.value.field) == (
        422,
        "validation",
        "Idempotency-Key",
    )
    assert raised.value.message == "bad"


def test_a_non_json_answer_is_an_error(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer("GET", "/schedules", 200, b"<html>proxy login</html>")

    assert run(api, "schedules", "list") == 1

    assert capsys.readouterr().err == (
        "error: the answer is not JSON: <html>proxy login</html> (HTTP 200)\n"
    )


def test_an_unreachable_api_exits_3_naming_the_url(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a port nothing listens on
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    # WHEN a command is run against it
    code = main.main(["--api", url, "schedules", "list"])
    # THEN it fails, not as a refusal, with a message that says where it tried
    assert code == 3
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot reach the Fireline API at {url}: ")


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["schedules"],
        ["schedules", "create", "rate(1 minute)"],  # no target
        ["schedules", "create", "x", "--target-python", "a", "--target-http", "http://h"],
        ["schedules", "create", "x", "--target-python", "a", "--payload", "[1]"],
        ["schedules", "create", "x", "--target-python", "a", "--payload", "{nope"],
        ["schedules", "create", "x", "--target-python", "a", "--class", "huge"],
        ["schedules", "list", "--limit", "0"],
        ["jobs", "create", "--target-python", "a"],  # no time
        ["jobs", "create", "--in", "-1", "--target-python", "a"],
        ["jobs", "create", "--at", "2026-12-01T09:00:00", "--target-python", "a"],  # no offset
        ["--api", "localhost:8080", "schedules", "list"],  # no scheme
        ["schedules", "list", "--state", "ended"],
        ["schedules", "list", "--all", "--cursor", "c"],
        ["schedules", "update", "x", "--deadline", "5", "--no-deadline"],
        ["schedules", "create", "x", "--target-python", "a", "--no-deadline"],  # update only
        ["schedules", "create", "x", "--target-python", "a", "--payload", "@/nonexistent.json"],
        ["schedules", "create", "x", "--target-python", "a", "--header", "no-colon"],
        ["schedules", "create", "x", "--target-python", "a", "--backoff", "nan"],
        ["schedules", "history", "x", "--from", "yesterday"],
        ["jobs", "list", "--state", "exploded"],
        ["runs", "nodes", "r", "--state", "stuck"],
        ["workflows", "register", "etl", "[1, 2]"],
        ["completion", "fish"],
    ],
)
def test_usage_errors_exit_2_without_a_request(
    api: FakeApi, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code = main.main(["--api", api.url, *argv])

    assert code == 2
    assert "error:" in capsys.readouterr().err
    assert api.requests == []


def test_a_usage_error_is_the_error_first_then_one_line_of_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # WHEN a command with many options is run without its SPEC
    code = main.main(["schedules", "create"])
    # THEN stderr is two lines: the error, then the usage on one line and where the rest is
    assert code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "fireline schedules create: error: the following arguments are required: SPEC",
        "usage: fireline schedules create [options] SPEC"
        "   (fireline schedules create --help: every option)",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["schedules"],
        ["bogus"],
        ["admin", "quotas", "set"],
        ["admin", "keys", "create"],
        ["runs", "nodes"],
        ["local", "--port", "many"],
    ],
)
def test_every_usage_error_is_two_lines_the_error_first(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main.main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert ": error: " in lines[0] and lines[1].startswith("usage: fireline")


def test_version_names_the_installed_package(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib import metadata

    assert main.main(["--version"]) == 0
    assert capsys.readouterr().out == f"fireline {metadata.version('fireline')}\n"


def command_groups(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser that has subcommands of its own, with the words that reach it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield prefix, parser
            for name, child in action.choices.items():
                yield from command_groups(child, (*prefix, name))


def test_every_command_groups_help_page_describes_it(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN every group of commands (schedules, admin, admin keys, ...)
    groups = list(command_groups(main.build_parser()))
    assert len(groups) >= 12
    for words, parser in groups:
        # THEN its help page has a description, more than its name
        assert parser.description, words
        assert len(parser.description.split()) >= 4, (words, parser.description)
        # AND it is shown on the page
        assert main.main([*words, "--help"]) == 0
        assert parser.description.split()[0] in capsys.readouterr().out, words


def test_a_naive_time_is_refused_with_an_example(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    main.main(["jobs", "create", "--at", "2026-12-01T09:00:00", "--target-python", "a"])

    assert "needs a UTC offset, e.g. 2026-12-01T09:00:00Z" in capsys.readouterr().err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["--help"]) == 0
    assert "dead-letters" in capsys.readouterr().out


# --- the seam for other command groups ---------------------------------------------------


def test_another_command_group_can_sit_beside_the_operator_commands(
    api: FakeApi,
) -> None:
    # GIVEN a parser with the operator commands and a `local` command beside them
    parser = argparse.ArgumentParser(prog="fireline")
    commands = parser.add_subparsers(dest="command", required=True)
    main.add_operator_commands(commands)
    local = commands.add_parser("local")
    local.set_defaults(run=lambda args: 7)
    # WHEN each is parsed
    args = parser.parse_args(["local"])
    other = parser.parse_args(["schedules", "get", "nightly"])
    # THEN each dispatches through its own `run`
    assert args.run(args) == 7
    assert other.run is schedules_cli._get


def test_ids_are_quoted_as_one_path_segment() -> None:
    assert client.route("schedules", "a/b c", "pause") == "/schedules/a%2Fb%20c/pause"


def test_local_takes_a_synthesized_template_and_a_stack_name() -> None:
    # WHEN `fireline local` is given a CDK template and a stack name
    args = main.build_parser().parse_args(
        ["local", "--template", "cdk.out/Fireline.template.json", "--stack-name", "mine"]
    )
    options = local_command.options_from(args)

    # THEN the local cloud deploys that template under that name; the rest keeps defaults
    assert options.template_path == Path("cdk.out/Fireline.template.json")
    assert (options.stack_name, options.api_port) == ("mine", 8080)


# --- the local cloud's hint ----------------------------------------------------------------


def test_the_local_clouds_hint_runs_when_pasted_into_a_shell(
    api: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the CLI started as make run starts it, .venv/bin/fireline, not on PATH
    program = tmp_path / ".venv" / "bin" / "fireline"
    program.parent.mkdir(parents=True)
    program.write_text(f"#!{sys.executable}\nfrom fireline.cli.main import main\nmain()\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    api.answer("GET", "/schedules", 200, {"items": [SCHEDULE], "next_cursor": None})
    # WHEN its hint is pasted into a shell in the same folder
    hint = local_command.try_hint(api.url, KEY, argv0=".venv/bin/fireline")
    assert hint.startswith("try: ")
    done = subprocess.run(
        ["bash", "-c", hint.removeprefix("try: ")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # THEN it lists the tenant's schedules, with the key it names
    assert done.returncode == 0, done.stderr
    assert "nightly" in done.stdout
    assert api.requests[-1].headers["x-api-key"] == KEY


def test_the_hint_names_fireline_when_that_is_this_cli_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = tmp_path / "fireline"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert local_command.try_hint("http://h", "k", argv0=str(program)).endswith(
        "; fireline schedules list"
    )
    # AND another program (python -m, a test runner) is named through this Python
    assert local_command.try_hint("http://h", "k", argv0="pytest").endswith(
        f"{sys.executable} -m fireline.cli.main schedules list"
    )


def test_the_status_lines_are_not_wrapped_without_a_terminal() -> None:
    # GIVEN the local cloud's console writing to a file (piped: no terminal)
    out = io.StringIO()
    console = local_command.status_console(file=out)
    # WHEN the hint, longer than 80 columns, is printed
    hint = local_command.try_hint("http://127.0.0.1:8080", "local-key-tenant-a", "x/fireline")
    assert len(hint) > 80
    console.print(hint)
    # THEN it is one line, as it was made
    assert out.getvalue() == hint + "\n"
