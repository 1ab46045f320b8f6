"""Hostile input on the HTTP API (moto): every answer is a 4xx naming what is at fault,
never a 5xx, and nothing is written before the input is known good."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from fireline.api import app as api_app
from fireline.api import models
from fireline.domain import model
from fireline.services import workflows
from helpers.memory_system import missing_workflows
from helpers.system import System, api_event, moto_system

PYTHON = {"type": "python", "handler": "noop"}
VALID = {"spec": "rate(1 minute)", "target": PYTHON}

pytestmark = pytest.mark.filterwarnings(
    "ignore:Couldn't determine the remaining time left:UserWarning"
)


class Api:
    """The API with its workflow routes, over the moto system's schedules."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.workflows: workflows.WorkflowService = missing_workflows()
        self.app = api_app.build_app(system.service, system.idempotency, self.workflows)
        self.schedule_id = ""
        self.job_id = ""

    def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        event = api_event(method, path, body, headers=headers)
        response = api_app.handle(self.app, event, None)
        text = response.get("body") or ""
        return response["statusCode"], json.loads(text) if text else None

    def written(self) -> tuple[list[model.Schedule], list[Any], bool]:
        """Everything a request could have written: the tenant's schedules and jobs, their
        occurrences, and whether a workflow exists."""
        items = self.system.schedules.list("tenant-a", limit=100).items
        rows = [
            r
            for item in items
            for r in self.system.occurrences.history("tenant-a", item.schedule_id, limit=100).items
        ]
        return items, rows, self.workflows.exists("tenant-a", "wf")


@pytest.fixture
def api() -> Iterator[Api]:
    with moto_system() as system:
        built = Api(system)
        # GIVEN the tenant has a schedule and a job
        status, created = built.call("POST", "/schedules", VALID)
        assert status == 201
        built.schedule_id = created["id"]
        status, job = built.call("POST", "/jobs", {"target": PYTHON, "delay_seconds": 60})
        assert status == 201
        built.job_id = job["id"]
        yield built


def refused(api: Api, method: str, path: str, body: Any, headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """Send one bad request; its (status, field), after checking nothing was written and
    the tenant's listing still answers."""
    before = api.written()
    status, answer = api.call(method, path.format(s=api.schedule_id, j=api.job_id), body, headers)
    assert api.written() == before
    assert api.call("GET", "/schedules")[0] == 200
    return status, answer["error"]["field"]


def nested(depth: int) -> str:
    """A JSON text of ``depth`` objects inside each other (written out: the encoder
    itself cannot go that deep)."""
    return '{"a": ' * depth + "1" + "}" * depth


def schedule_with_payload(payload: str) -> str:
    return '{"spec": "rate(1 minute)", "target": {"type": "python", "handler": "noop"}, ' + (
        f'"payload": {payload}}}'
    )


# --- nesting: refused before any decoding -------------------------------------------------------


@pytest.mark.parametrize("depth", [15_000, 1_200, 300, models.MAX_JSON_DEPTH])
def test_a_body_nested_past_the_limit_is_refused_before_decoding(api: Api, depth: int) -> None:
    # WHEN a payload nests `depth` levels (the body around it adds one)
    body = schedule_with_payload(nested(depth))
    # THEN it is a 400 naming the body, nothing is written, and the listing still answers
    assert refused(api, "POST", "/schedules", body) == (400, "body")


def test_arrays_nested_past_what_a_decoder_can_go_are_refused(api: Api) -> None:
    body = schedule_with_payload('{"a": ' + "[" * 60_000 + "]" * 60_000 + "}")
    assert refused(api, "POST", "/schedules", body) == (400, "body")


def test_an_unclosed_nest_is_refused_too(api: Api) -> None:
    assert refused(api, "POST", "/jobs", "[" * 50_000) == (400, "body")


def test_a_body_at_the_depth_limit_is_taken_and_reads_back(api: Api) -> None:
    # The body is one level, so its payload may nest one level less than the limit.
    body = schedule_with_payload(nested(models.MAX_JSON_DEPTH - 1))
    status, created = api.call("POST", "/schedules", body)
    assert status == 201
    assert api.call("GET", f"/schedules/{created['id']}") == (200, created)
    assert api.call("GET", "/schedules")[0] == 200


def test_brackets_inside_strings_do_not_count_as_nesting(api: Api) -> None:
    body = {**VALID, "payload": {"text": "[" * 5_000 + '\\"{' * 5_000}}
    assert api.call("POST", "/schedules", body)[0] == 201


# --- content types ----------------------------------------------------------------------------

BODY_ROUTES = [
    ("POST", "/schedules"),
    ("PUT", "/schedules/{s}"),
    ("POST", "/jobs"),
    ("POST", "/jobs/{j}/heartbeat"),
    ("PUT", "/workflows/wf"),
    ("POST", "/workflows/wf/runs"),
]


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
@pytest.mark.parametrize(
    "content_type",
    ["multipart/form-data", "multipart/form-data; boundary=x", "text/plain", "application/xml"],
)
def test_a_body_that_is_not_json_is_415_on_every_body_route(
    api: Api, method: str, path: str, content_type: str
) -> None:
    body = "--x\r\nContent-Disposition: form-data; name=spec\r\n\r\nrate(1 minute)\r\n--x--\r\n"
    headers = {"Content-Type": content_type}
    assert refused(api, method, path, body, headers) == (415, "Content-Type")


def test_json_with_a_charset_or_in_capitals_is_taken(api: Api) -> None:
    for content_type in ("application/json; charset=utf-8", "Application/JSON"):
        headers = {"Content-Type": content_type}
        assert api.call("POST", "/schedules", VALID, headers)[0] == 201


# --- numbers: no overflow, no coercion, nothing non-finite -------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/schedules", {**VALID, "spec": "rate(99999999999999999999 days)"}),
        ("/schedules", {**VALID, "spec": "rate(9999999999 seconds)"}),
        ("/schedules", {**VALID, "spec": "every 99999999999999 minutes"}),
        ("/schedules", {**VALID, "spec": "in 99999999999 days"}),
        ("/schedules", {**VALID, "spec": "cron(0 0 1 1 ? 99999999999999999999)"}),
        ("/schedules/{s}", {**VALID, "spec": "rate(99999999999999999999 days)"}),
    ],
    ids=["rate days", "rate seconds", "every minutes", "in days", "cron year", "update rate"],
)
def test_an_overflowing_rate_or_offset_is_400_naming_the_spec(
    api: Api, path: str, body: dict[str, Any]
) -> None:
    method = "PUT" if "{s}" in path else "POST"
    assert refused(api, method, path, body) == (400, "spec")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/schedules", {**VALID, "retry": {"max_attempts": "3"}}, "retry.max_attempts"),
        ("/schedules", {**VALID, "retry": {"max_attempts": True}}, "retry.max_attempts"),
        ("/schedules", {**VALID, "retry": {"max_attempts": 3.0}}, "retry.max_attempts"),
        ("/schedules", {**VALID, "retry": {"base_seconds": "2"}}, "retry.base_seconds"),
        ("/schedules", {**VALID, "retry": {"factor": False}}, "retry.factor"),
        ("/schedules", {**VALID, "jitter_seconds": "5"}, "jitter_seconds"),
        ("/schedules", {**VALID, "deadline_seconds": True}, "deadline_seconds"),
        ("/schedules", {**VALID, "misfire": {"grace_seconds": "60"}}, "misfire.grace_seconds"),
        ("/jobs", {"target": PYTHON, "delay_seconds": "5"}, "delay_seconds"),
        ("/jobs", {"target": PYTHON, "delay_seconds": True}, "delay_seconds"),
        (
            "/schedules",
            {**VALID, "target": {"type": "http", "url": "https://x.test", "timeout_seconds": "5"}},
            "target.timeout_seconds",
        ),
    ],
    ids=[
        "string attempts",
        "boolean attempts",
        "float attempts",
        "string base",
        "boolean factor",
        "string jitter",
        "boolean deadline",
        "string grace",
        "string delay",
        "boolean delay",
        "string timeout",
    ],
)
def test_a_number_given_as_a_string_or_boolean_is_422_naming_it(
    api: Api, path: str, body: dict[str, Any], field: str
) -> None:
    assert refused(api, "POST", path, body) == (422, field)


NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e309", "-1e400"]


@pytest.mark.parametrize("number", NON_FINITE)
@pytest.mark.parametrize("where", ["payload", "retry"])
def test_a_non_finite_number_is_refused_not_stored_as_null(
    api: Api, number: str, where: str
) -> None:
    inner = (
        f'"payload": {{"x": {number}}}'
        if where == "payload"
        else f'"retry": {{"base_seconds": {number}}}'
    )
    text = '{"spec": "rate(1 minute)", "target": {"type": "python", "handler": "noop"}, '
    assert refused(api, "POST", "/schedules", text + inner + "}") == (400, "body")


def test_a_heartbeat_with_non_finite_progress_is_refused(api: Api) -> None:
    text = '{"progress": {"done": NaN}}'
    assert refused(api, "POST", "/jobs/{j}/heartbeat", text) == (400, "body")


# --- target headers (refused at registration since before) -----------------------------------


@pytest.mark.parametrize(
    "headers",
    [{"X-A": "1\r\nX-B: 2"}, {"X-A\r\nX-B": "2"}, {"X-A": "\n"}, {"X-A": "a\x00b"}],
    ids=["CR/LF in a value", "CR/LF in a name", "LF alone", "NUL"],
)
def test_a_target_header_with_a_line_break_is_refused(api: Api, headers: dict[str, str]) -> None:
    target = {"type": "http", "url": "https://hooks.example.com/x", "headers": headers}
    assert refused(api, "POST", "/schedules", {**VALID, "target": target}) == (
        422,
        "target.headers",
    )


# --- cursors: a client's text too, decoded as JSON -----------------------------------------------


def deep_cursor() -> str:
    # 1,500 arrays inside each other, within the 2,048 characters a cursor may have.
    return base64.urlsafe_b64encode(b"[" * 1_500).decode()


@pytest.mark.parametrize(
    "path", ["/schedules", "/schedules/{s}/occurrences", "/dead-letters", "/runs/r1/nodes"]
)
def test_a_cursor_nested_past_what_a_decoder_can_go_is_400(api: Api, path: str) -> None:
    query = {"cursor": deep_cursor()}
    if path != "/dead-letters":  # the one of these with no state filter
        query["state"] = "waiting"
    event = api_event("GET", path.format(s=api.schedule_id), None, query=query)
    response = api_app.handle(api.app, event, None)
    assert response["statusCode"] == 400
    assert json.loads(response["body"])["error"]["field"] == "cursor"
