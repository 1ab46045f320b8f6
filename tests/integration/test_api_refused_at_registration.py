"""Input that registration used to accept and every run then failed on: a header value an
HTTP request cannot carry, a workflow node naming a handler this deployment does not
have, and query parameters no route reads. Each is refused when sent, naming what is at
fault, with nothing written."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from fireline.adapters import memory
from fireline.api import app as api_app
from fireline.services import schedules, workflows
from helpers.system import START, api_event

TENANT = "tenant-a"
NOOP = {"type": "python", "handler": "noop"}
SNOWMAN = {"type": "http", "url": "https://hooks.example.com/x", "headers": {"X-Mood": "☃"}}


@dataclass
class Api:
    app: Any
    scheduler: schedules.ScheduleService
    flows: workflows.WorkflowService
    store: memory.MemoryWorkflowStore

    def call(
        self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        event = api_event(method, path, body, query=query)
        response = api_app.handle(self.app, event, None)
        text = response.get("body") or ""
        return response["statusCode"], json.loads(text) if text else None

    def written(self) -> tuple[int, int, bool]:
        """What a refused request could have written: schedules and jobs, workflows."""
        items = self.scheduler.schedules.list(TENANT, limit=100).items
        jobs = self.scheduler.list_jobs(TENANT, limit=100).items
        return len(items), len(jobs), self.flows.exists(TENANT, "wf")


def build() -> Api:
    """The API with workflow routes, in a deployment whose only handler is ``noop``."""
    clock = memory.FakeClock(START)
    queue = memory.MemoryWorkQueue(clock)
    store = memory.MemoryWorkflowStore()
    occurrences = memory.MemoryOccurrenceStore()
    flows = workflows.WorkflowService(
        store=store,
        documents=memory.MemoryDocumentStore(),
        queue=queue,
        clock=clock,
        occurrences=occurrences,
        handlers={"noop"},
    )
    scheduler = schedules.ScheduleService(
        schedules=memory.MemoryScheduleStore(),
        occurrences=occurrences,
        queue=queue,
        clock=clock,
        handlers={"noop"},
        workflows=flows,
    )
    app = api_app.build_app(scheduler, memory.MemoryIdempotencyStore(), workflows=flows)
    return Api(app, scheduler, flows, store)


def bodies(target: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any], str]]:
    """Every request that takes a target: (method, path, body, the field at fault's prefix)."""
    return {
        "schedule": ("POST", "/schedules", {"spec": "rate(1 minute)", "target": target}, ""),
        "schedule update": (
            "PUT",
            "/schedules/{s}",
            {"spec": "rate(1 minute)", "target": target},
            "",
        ),
        "job": ("POST", "/jobs", {"delay_seconds": 60, "target": target}, ""),
        "batch": (
            "POST",
            "/jobs/batch",
            {
                "jobs": [
                    {"delay_seconds": 60, "target": NOOP},
                    {"delay_seconds": 60, "target": target},
                ]
            },
            "jobs.1.",
        ),
        "workflow node": (
            "PUT",
            "/workflows/wf",
            {"nodes": [{"id": "a", "target": NOOP}, {"id": "b", "target": target}], "edges": []},
            "nodes.1.",
        ),
    }


REQUESTS = list(bodies(NOOP))


def send_refused(api: Api, request: str, target: dict[str, Any]) -> tuple[int, str, str]:
    """Send one request carrying ``target``; (status, field, message), after checking it
    wrote nothing."""
    status, made = api.call("POST", "/schedules", {"spec": "rate(1 minute)", "target": NOOP})
    assert status == 201
    method, path, body, _ = bodies(target)[request]
    before = api.written()
    status, answer = api.call(method, path.format(s=made["id"]), body)
    assert api.written() == before, answer
    assert api.scheduler.get(TENANT, made["id"]).version == 1
    error = answer["error"] if isinstance(answer, dict) and "error" in answer else {}
    return status, str(error.get("field")), str(error.get("message"))


@pytest.mark.parametrize("request_name", REQUESTS)
def test_a_header_value_outside_latin_1_is_refused_422_naming_the_header(
    request_name: str,
) -> None:
    # GIVEN the API, and a webhook target whose header value is a snowman (http.client
    # sends header values as Latin-1: every attempt would die encoding it)
    api = build()
    # WHEN a request registers that target
    status, where, message = send_refused(api, request_name, SNOWMAN)
    # THEN it is refused with 422 naming the headers field and the header, nothing written
    prefix = bodies(NOOP)[request_name][3]
    assert (status, where) == (422, f"{prefix}target.headers"), message
    assert "X-Mood" in message and "Latin-1" in message
    print(f"\n{request_name}: {status}, naming {where} and X-Mood, nothing written")


def test_a_latin_1_header_value_is_still_accepted() -> None:
    # GIVEN a header value with an accented letter (Latin-1 holds it)
    api = build()
    target = {**SNOWMAN, "headers": {"X-Name": "Zoë"}}
    # WHEN a schedule registers it THEN it is made
    status, _ = api.call("POST", "/schedules", {"spec": "rate(1 minute)", "target": target})
    assert status == 201


@pytest.mark.parametrize("request_name", REQUESTS)
def test_an_unregistered_python_handler_is_refused_400_naming_the_handler(
    request_name: str,
) -> None:
    # GIVEN a deployment whose only handler is noop
    api = build()
    # WHEN a request names os.system as its handler
    status, where, message = send_refused(
        api, request_name, {"type": "python", "handler": "os.system"}
    )
    # THEN it is refused with 400 naming the handler field, nothing written
    expected = {"batch": "jobs[1].", "workflow node": "nodes[1]."}.get(request_name, "")
    assert (status, where) == (400, f"{expected}target.handler"), message
    assert "os.system" in message
    print(f"\n{request_name}: {status}, naming {where} and os.system, nothing written")


def get_routes(api: Api) -> list[str]:
    """Every GET route of the API document, its path parameters filled in."""
    status, described = api.call("GET", "/openapi.json")
    assert status == 200
    return [path for path, operations in described["paths"].items() if "get" in operations]


def test_every_get_route_refuses_a_query_parameter_it_does_not_take_400_naming_it() -> None:
    # GIVEN the API and every GET route its document lists
    api = build()
    routes = get_routes(api)
    assert len(routes) >= 8
    answers = {}
    for route in routes:
        path = route.format(
            schedule_id="s1", job_id="j1", workflow_id="wf", run_id="r1", dead_letter_id="d1"
        )
        # WHEN a request adds a parameter the route does not take
        status, answer = api.call("GET", path, query={"x-unknown": "42"})
        answers[route] = (status, (answer or {}).get("error", {}).get("field"))
    # THEN every one is refused with 400 naming that parameter
    assert answers == dict.fromkeys(routes, (400, "x-unknown"))
    print(
        f"\n{len(routes)} GET routes given x-unknown=42: each answered "
        f"{answers[routes[0]][0]} naming {answers[routes[0]][1]}"
    )


def test_a_post_route_refuses_a_query_parameter_and_writes_nothing() -> None:
    # GIVEN the API
    api = build()
    before = api.written()
    # WHEN a create carries a query parameter no route reads
    status, answer = api.call(
        "POST", "/schedules", {"spec": "rate(1 minute)", "target": NOOP}, query={"dry_run": "1"}
    )
    # THEN it is refused naming it, and nothing is made
    assert (status, answer["error"]["field"]) == (400, "dry_run")
    assert api.written() == before


def test_the_parameters_a_route_takes_are_still_read() -> None:
    # GIVEN a schedule
    api = build()
    status, _ = api.call("POST", "/schedules", {"spec": "rate(1 minute)", "target": NOOP})
    assert status == 201
    # WHEN a listing names the parameters it takes, and its own tenant
    status, page = api.call(
        "GET", "/schedules", query={"limit": "1", "state": "active", "tenant": TENANT}
    )
    # THEN it answers as before
    assert status == 200 and len(page["items"]) == 1


def test_a_tenant_id_that_cannot_be_one_is_refused_whoever_names_it() -> None:
    # GIVEN tenant-a's key
    api = build()
    # WHEN it names a tenant id that cannot be one
    status, answer = api.call("GET", "/schedules", query={"tenant": "a b"})
    # THEN it is refused naming the parameter (not read past as its own listing)
    assert (status, answer["error"]["field"]) == (400, "tenant")
