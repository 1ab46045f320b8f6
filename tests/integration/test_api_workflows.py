"""The workflow routes of the HTTP API on the memory adapters: registration (inline and
uploaded), refused definitions, runs, their views and node listings, cancel, retry and
reconcile, tenant isolation, body limits and the OpenAPI document."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from openapi_spec_validator import validate

from fireline.adapters import memory
from fireline.api import app as api_app
from fireline.api import models
from fireline.domain import dag, workflow
from fireline.domain.occurrence import State
from fireline.services import claims, schedules, workflows
from helpers.system import START, api_event

A, B = "tenant-a", "tenant-b"
PYTHON = {"type": "python", "handler": "noop"}
# Node ids may hold "." and ":" (route ids may not).
DIAMOND: dict[str, Any] = {
    "nodes": [
        {"id": "extract:users", "target": PYTHON},
        {"id": "clean.v2", "target": PYTHON, "payload": {"table": "users"}},
        {
            "id": "score",
            "target": {"type": "http", "url": "https://hooks.example.com/score"},
            "job_class": "short",
            "retry": {"max_attempts": 5, "base_seconds": 1, "jitter": "none"},
            "deadline_seconds": 15,
        },
        {"id": "load", "target": PYTHON},
    ],
    "edges": [
        ["extract:users", "clean.v2"],
        ["extract:users", "score"],
        ["clean.v2", "load"],
        ["score", "load"],
    ],
}
ROOT = "extract:users"

# system.call passes no Lambda context, so Powertools cannot tie the idempotency record's
# in-progress expiry to the invocation and says so; nothing to act on in a test.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Couldn't determine the remaining time left:UserWarning"
)


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Api:
    clock: memory.FakeClock
    queue: memory.MemoryWorkQueue
    documents: memory.MemoryDocumentStore
    store: memory.MemoryWorkflowStore
    occurrences: memory.MemoryOccurrenceStore
    service: workflows.WorkflowService
    app: Any
    scheduler: schedules.ScheduleService

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        tenant: str | None = A,
        headers: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """One API Gateway proxy event through the real resolver; (status, JSON body)."""
        event = api_event(method, path, body, tenant=tenant, headers=headers, query=query)
        response = api_app.handle(self.app, event, None)
        text = response.get("body") or ""
        return response["statusCode"], json.loads(text) if text else None

    def controller(self) -> workflows.Controller:
        return workflows.Controller(
            store=self.store,
            documents=self.documents,
            occurrences=self.occurrences,
            queue=self.queue,
            clock=self.clock,
        )

    def events(self) -> list[dict[str, Any]]:
        """Every message on the controller's queue (deleted as read)."""
        bodies: list[dict[str, Any]] = []
        while batch := self.queue.receive(workflow.CONTROL_QUEUE, max_messages=10):
            for message in batch:
                bodies.append(message.body)
                self.queue.delete(workflow.CONTROL_QUEUE, message.receipt)
        return bodies

    def document(self, workflow_id: str, version: int, tenant: str = A) -> dict[str, Any]:
        meta = self.store.get_definition(tenant, workflow_id, version)
        assert meta is not None
        raw = self.documents.get(meta.document_key)
        assert raw is not None
        return json.loads(raw)  # type: ignore[no-any-return]

    def versions(self, tenant: str = A, workflow_id: str = "wf") -> int:
        latest = self.store.latest_definition(tenant, workflow_id)
        return latest.version if latest else 0


def build(with_workflows: bool = True) -> Api:
    clock = memory.FakeClock(START)
    queue = memory.MemoryWorkQueue(clock)
    documents = memory.MemoryDocumentStore()
    store = memory.MemoryWorkflowStore()
    occurrences = memory.MemoryOccurrenceStore()
    service = workflows.WorkflowService(
        store=store, documents=documents, queue=queue, clock=clock, occurrences=occurrences
    )
    scheduler = schedules.ScheduleService(
        schedules=memory.MemoryScheduleStore(),
        occurrences=occurrences,
        queue=queue,
        clock=clock,
        workflows=service if with_workflows else None,
    )
    app = api_app.build_app(
        scheduler,
        memory.MemoryIdempotencyStore(),
        workflows=service if with_workflows else None,
    )
    return Api(clock, queue, documents, store, occurrences, service, app, scheduler)


@pytest.fixture
def api() -> Api:
    return build()


def register(api: Api, body: Any = DIAMOND, workflow_id: str = "wf", **kw: Any) -> dict[str, Any]:
    status, out = api.call("PUT", f"/workflows/{workflow_id}", body, **kw)
    assert status == 201, out
    return out  # type: ignore[no-any-return]


def start(api: Api, workflow_id: str = "wf", body: Any = None) -> dict[str, Any]:
    status, run = api.call("POST", f"/workflows/{workflow_id}/runs", body)
    assert status == 202, run
    return run  # type: ignore[no-any-return]


def error_of(response: tuple[int, Any]) -> tuple[int, str | None]:
    status, body = response
    return status, body["error"]["field"]


def chain(count: int) -> str:
    """A definition of ``count`` nodes as JSON text, built as text (cheap at 100,000)."""
    nodes = ",".join(
        f'{{"id":"n{i}","target":{{"type":"python","handler":"noop"}}}}' for i in range(count)
    )
    return f'{{"nodes":[{nodes}],"edges":[]}}'


def put_upload(api: Api, raw: bytes, tenant: str = A) -> str:
    status, upload = api.call("POST", "/workflow-uploads", tenant=tenant)
    assert status == 201, upload
    api.documents.put(workflows.upload_key(tenant, upload["upload_id"]), raw)
    return upload["upload_id"]  # type: ignore[no-any-return]


# --- registration ------------------------------------------------------------------------


def test_registering_the_diamond_stores_version_1_then_version_2(api: Api) -> None:
    # WHEN the diamond is registered
    first = register(api)
    # THEN it is version 1 with its size
    assert first == {
        "workflow_id": "wf",
        "version": 1,
        "nodes": 4,
        "edges": 4,
        "created_at": iso(START),
    }
    # AND the stored document holds every node's job, normalised, and every edge
    document = api.document("wf", 1)
    assert [n["id"] for n in document["nodes"]] == ["extract:users", "clean.v2", "score", "load"]
    assert sorted(document["edges"]) == sorted(DIAMOND["edges"])
    stored = workflow.Definition.from_document(A, "wf", 1, json.dumps(document).encode())
    score = stored.specs["score"]
    assert score.target == {
        "type": "http",
        "url": "https://hooks.example.com/score",
        "timeout_seconds": 30,
        "headers": {},
    }
    assert (score.job_class, score.deadline_seconds) == ("short", 15)
    assert (score.retry.max_attempts, score.retry.base_seconds) == (5, 1.0)
    assert score.retry.jitter.value == "none"
    assert stored.specs["clean.v2"].payload == {"table": "users"}
    assert stored.specs["load"].target == PYTHON
    # AND GET gives the latest version
    assert api.call("GET", "/workflows/wf") == (200, first)
    # WHEN it is registered again (a day later)
    api.clock.advance(86_400)
    second = register(api)
    # THEN it is version 2, and GET follows
    assert (second["version"], second["created_at"]) == (2, "2026-05-02T12:00:00Z")
    assert api.call("GET", "/workflows/wf") == (200, second)


def test_a_definition_without_edges_is_one_level(api: Api) -> None:
    out = register(api, {"nodes": [{"id": "only", "target": PYTHON}]})
    assert (out["nodes"], out["edges"]) == (1, 0)


def test_a_cycle_is_refused_naming_the_cycle_and_stores_nothing(api: Api) -> None:
    # GIVEN the diamond with an edge back from load to clean.v2
    body = {**DIAMOND, "edges": [*DIAMOND["edges"], ["load", "clean.v2"]]}
    # WHEN it is registered
    status, out = api.call("PUT", "/workflows/wf", body)
    # THEN it is a 400 on edges naming the nodes of the cycle in order
    assert (status, out["error"]["field"]) == (400, "edges")
    assert out["error"]["message"] == "the graph has a cycle: clean.v2 -> load -> clean.v2"
    # AND nothing was stored
    assert api.call("GET", "/workflows/wf")[0] == 404
    assert api.documents.keys() == []


def node(node_id: str = "a", **fields: Any) -> dict[str, Any]:
    return {"id": node_id, "target": PYTHON, **fields}


def bad(name: str, status: int, field: str, body: Any) -> Any:
    return pytest.param(body, status, field, id=name)


BAD_DEFINITIONS = [
    bad(
        "dangling edge",
        400,
        "edges[1]",
        {"nodes": [node("a"), node("b")], "edges": [["a", "b"], ["b", "ghost"]]},
    ),
    bad("duplicate node id", 400, "nodes[2]", {"nodes": [node("a"), node("b"), node("a")]}),
    bad(
        "duplicate edge",
        400,
        "edges[1]",
        {"nodes": [node("a"), node("b")], "edges": [["a", "b"]] * 2},
    ),
    bad("no node", 400, "nodes", {"nodes": []}),
    bad("unknown node field", 422, "nodes.1.retyr", {"nodes": [node("a"), node("b", retyr={})]}),
    bad("unknown top-level field", 422, "nodez", {"nodes": [node()], "nodez": []}),
    bad(
        "bad http target",
        422,
        "nodes.0.target.url",
        {"nodes": [node(target={"type": "http", "url": "not a url"})]},
    ),
    bad("unknown target type", 422, "nodes.0.target", {"nodes": [node(target={"type": "ftp"})]}),
    bad("target missing", 422, "nodes.0.target", {"nodes": [{"id": "a"}]}),
    bad("bad node id", 422, "nodes.0.id", {"nodes": [node("a b")]}),
    bad("bad job_class", 422, "nodes.0.job_class", {"nodes": [node(job_class="huge")]}),
    bad(
        "zero attempts",
        422,
        "nodes.0.retry.max_attempts",
        {"nodes": [node(retry={"max_attempts": 0})]},
    ),
    bad(
        "payload over 64 KiB",
        422,
        "nodes.0.payload",
        {"nodes": [node(payload={"x": "y" * 70_000})]},
    ),
    bad("edge not a pair", 422, "edges.0", {"nodes": [node()], "edges": [["a", "a", "a"]]}),
    bad("nodes and upload_id", 422, "upload_id", {"nodes": [node()], "upload_id": "abc"}),
    bad("neither nodes nor upload_id", 422, "upload_id", {"edges": []}),
    bad("upload_id with edges", 422, "upload_id", {"upload_id": "abc", "edges": []}),
    bad("bad upload_id", 422, "upload_id", {"upload_id": "../etc"}),
    bad("not JSON", 422, "body", "{nodes"),
    bad(
        "deadline past its class's limit",
        400,
        "nodes[1].deadline_seconds",
        {"nodes": [node("a"), node("b", job_class="long", deadline_seconds=3600)]},
    ),
]


@pytest.mark.parametrize(("body", "status", "field"), BAD_DEFINITIONS)
def test_a_bad_definition_is_refused_naming_the_field_and_stores_nothing(
    api: Api, body: Any, status: int, field: str
) -> None:
    # GIVEN version 1 is registered
    register(api)
    # WHEN a bad definition is put
    response = api.call("PUT", "/workflows/wf", body)
    # THEN it is refused naming the field at fault (the graph's rules are 400s like the
    # other domain rules; the shape's are 422s like every other body)
    assert error_of(response) == (status, field), response
    # AND no version was added
    assert api.versions() == 1


def test_the_dangling_edges_message_names_the_missing_node(api: Api) -> None:
    body = {"nodes": [node("a")], "edges": [["a", "ghost"]]}
    status, out = api.call("PUT", "/workflows/wf", body)
    assert status == 400
    assert out["error"] == {
        "type": "validation",
        "message": "edge 'a' -> 'ghost' names no node 'ghost'",
        "field": "edges[0]",
    }


def test_a_workflow_id_outside_the_id_pattern_is_refused(api: Api) -> None:
    assert error_of(api.call("PUT", "/workflows/a.b", DIAMOND)) == (422, "workflow_id")


# --- size limits -------------------------------------------------------------------------


def test_more_than_100000_nodes_is_refused_naming_nodes(api: Api) -> None:
    # GIVEN 100,001 nodes (too many for 4 MiB inline: they come as an upload)
    upload_id = put_upload(api, chain(dag.MAX_NODES + 1).encode())
    # WHEN they are registered
    status, out = api.call("PUT", "/workflows/wf", {"upload_id": upload_id})
    # THEN it is a 400 on nodes giving the count and the limit, and nothing is stored
    assert (status, out["error"]["field"]) == (400, "nodes")
    assert out["error"]["message"] == "100001 nodes; the limit is 100000"
    assert api.versions() == 0


def test_more_than_1000000_edges_is_refused_naming_edges(api: Api) -> None:
    edges = ",".join(['["n0","n1"]'] * (dag.MAX_EDGES + 1))
    raw = chain(2).replace('"edges":[]', f'"edges":[{edges}]')
    upload_id = put_upload(api, raw.encode())
    status, out = api.call("PUT", "/workflows/wf", {"upload_id": upload_id})
    assert (status, out["error"]["field"]) == (400, "edges")
    assert out["error"]["message"] == "1000001 edges; the limit is 1000000"
    assert api.versions() == 0


def test_a_definition_over_the_general_body_limit_is_taken_inline(api: Api) -> None:
    # GIVEN a definition of 3,000 nodes: more than the 128 KiB other routes take
    raw = chain(3000)
    assert models.MAX_BODY_BYTES < len(raw) < models.MAX_WORKFLOW_BODY_BYTES
    # WHEN it is put inline THEN it is registered whole
    out = register(api, raw)
    assert out["nodes"] == 3000
    assert len(api.document("wf", 1)["nodes"]) == 3000


def test_an_inline_definition_over_4_mib_is_413_pointing_at_uploads(api: Api) -> None:
    # GIVEN a body one byte over 4 MiB
    body = {"nodes": [node(payload={"blob": ""})]}
    padding = models.MAX_WORKFLOW_BODY_BYTES + 1 - len(json.dumps(body))
    body["nodes"][0]["payload"]["blob"] = "x" * padding
    assert len(json.dumps(body)) == models.MAX_WORKFLOW_BODY_BYTES + 1
    # WHEN it is put THEN it is refused before parsing, telling the client to upload
    status, out = api.call("PUT", "/workflows/wf", body)
    assert (status, out["error"]["field"], out["error"]["type"]) == (413, "body", "too_large")
    assert f"exceeds {models.MAX_WORKFLOW_BODY_BYTES} bytes" in out["error"]["message"]
    assert "POST /workflow-uploads" in out["error"]["message"]
    assert api.versions() == 0


def test_other_workflow_routes_keep_the_general_body_limit(api: Api) -> None:
    register(api)
    status, out = api.call("POST", "/workflows/wf/runs", {"version": 1, "x": "y" * 200_000})
    assert (status, out["error"]["field"]) == (413, "body")
    assert "exceeds 131072 bytes" in out["error"]["message"]
    assert "upload" not in out["error"]["message"]
    assert api.events() == []


# --- uploads -----------------------------------------------------------------------------


def test_an_uploaded_definition_is_registered_by_its_upload_id(api: Api) -> None:
    # WHEN an upload is asked for
    status, upload = api.call("POST", "/workflow-uploads")
    # THEN it gives an id and a form to POST the document with, valid 15 minutes, for
    # JSON of 64 MiB at most
    assert status == 201
    assert upload["expires_in"] == workflows.UPLOAD_EXPIRES_SECONDS == 900
    assert upload["max_bytes"] == workflows.MAX_UPLOAD_BYTES == 64 * 1024 * 1024
    key = workflows.upload_key(A, upload["upload_id"])
    assert upload["upload_url"] == f"memory://{key}"
    assert upload["upload_fields"]["key"] == key
    assert upload["upload_fields"]["Content-Type"] == "application/json"
    # WHEN the document is uploaded there and registered by its id
    api.documents.put(key, json.dumps(DIAMOND).encode())
    out = register(api, {"upload_id": upload["upload_id"]})
    # THEN it is registered as if it came inline
    assert (out["version"], out["nodes"], out["edges"]) == (1, 4, 4)
    assert api.document("wf", 1) == register_inline_document(DIAMOND)


def register_inline_document(body: dict[str, Any]) -> dict[str, Any]:
    """What the inline path stores for ``body`` (on a fresh API)."""
    other = build()
    register(other, body)
    return other.document("wf", 1)


def test_an_unknown_upload_id_is_400(api: Api) -> None:
    status, out = api.call("PUT", "/workflows/wf", {"upload_id": "0123abcd"})
    assert (status, out["error"]["field"]) == (400, "upload_id")
    assert "nothing was uploaded" in out["error"]["message"]
    assert api.versions() == 0


def test_another_tenants_upload_is_not_found(api: Api) -> None:
    upload_id = put_upload(api, json.dumps(DIAMOND).encode(), tenant=B)
    assert error_of(api.call("PUT", "/workflows/wf", {"upload_id": upload_id})) == (
        400,
        "upload_id",
    )
    assert api.versions() == 0


@pytest.mark.parametrize(
    ("raw", "status", "field"),
    [
        (b"{not json", 400, "upload_id"),
        (b"[1, 2]", 400, "upload_id"),
        (b"\xff\xfe", 400, "upload_id"),
        (json.dumps({"nodes": [node(target={"type": "ftp"})]}).encode(), 422, "nodes.0.target"),
        (json.dumps({"nodes": [node()], "upload_id": "x"}).encode(), 422, "upload_id"),
        (json.dumps({"nodes": [node("a")], "edges": [["a", "a"]]}).encode(), 400, "edges"),
    ],
    ids=["not-json", "not-object", "not-utf8", "bad-target", "unknown-field", "cycle"],
)
def test_a_bad_uploaded_definition_is_refused_like_an_inline_one(
    api: Api, raw: bytes, status: int, field: str
) -> None:
    upload_id = put_upload(api, raw)
    assert error_of(api.call("PUT", "/workflows/wf", {"upload_id": upload_id})) == (
        status,
        field,
    )
    assert api.versions() == 0


# --- runs --------------------------------------------------------------------------------


def test_starting_a_run_answers_202_and_sends_a_start_event(api: Api) -> None:
    # GIVEN two versions
    register(api)
    register(api, {"nodes": [node("only")]})
    # WHEN a run is started without a version
    run = start(api)
    # THEN it runs the latest, with every node counted, and nothing finished
    assert run == {
        "run_id": run["run_id"],
        "workflow_id": "wf",
        "version": 2,
        "state": "running",
        "total": 1,
        "generation": 1,
        "created_at": iso(START),
        "finished_at": None,
    }
    # AND the controller's queue has its start event
    assert api.events() == [{"type": "start", "run_id": run["run_id"]}]
    # WHEN version 1 is asked for THEN that version runs
    older = start(api, body={"version": 1})
    assert (older["version"], older["total"]) == (1, 4)
    assert older["run_id"] != run["run_id"]
    assert api.events() == [{"type": "start", "run_id": older["run_id"]}]


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/workflows/nope/runs", None, 404, None),
        ("/workflows/wf/runs", {"version": 9}, 404, None),
        ("/workflows/wf/runs", {"version": 0}, 422, "version"),
        ("/workflows/wf/runs", {"versoin": 1}, 422, "versoin"),
    ],
    ids=["unknown-workflow", "unknown-version", "version-0", "unknown-field"],
)
def test_a_run_that_cannot_start_sends_nothing(
    api: Api, path: str, body: Any, status: int, field: str | None
) -> None:
    register(api)
    assert error_of(api.call("POST", path, body)) == (status, field)
    assert api.events() == []
    assert api.store.active_runs(limit=10).items == []


def test_a_retried_start_with_the_same_idempotency_key_starts_once(api: Api) -> None:
    register(api)
    key = {"Idempotency-Key": "start-1"}
    first = api.call("POST", "/workflows/wf/runs", headers=key)
    again = api.call("POST", "/workflows/wf/runs", headers=key)
    assert first[0] == again[0] == 202
    assert again[1] == first[1]
    assert api.events() == [{"type": "start", "run_id": first[1]["run_id"]}]
    assert api.store.active_runs(limit=10).items == [first[1]["run_id"]]


def test_a_run_view_counts_nodes_per_state(api: Api) -> None:
    # GIVEN a run of the diamond, just started: no node row written yet
    register(api)
    run = start(api)
    status, view = api.call("GET", f"/runs/{run['run_id']}")
    # THEN every node counts as waiting, every state is present, nothing is done
    assert status == 200
    assert view["counts"] == {
        s.value: (4 if s is dag.NodeState.WAITING else 0) for s in dag.NodeState
    }
    assert (view["progress"], view["failed_nodes"]) == (0.0, [])
    assert {k: view[k] for k in run} == run
    # WHEN the controller starts it (the root is dispatched) and then the root succeeds
    # and one branch fails
    api.controller().start(run["run_id"])
    mid = api.call("GET", f"/runs/{run['run_id']}")[1]
    assert (mid["counts"]["dispatched"], mid["counts"]["waiting"]) == (1, 3)
    move(api, run["run_id"], ROOT, dag.NodeState.DISPATCHED, dag.NodeState.SUCCEEDED)
    move(api, run["run_id"], "score", dag.NodeState.WAITING, dag.NodeState.FAILED)
    # THEN the view counts them, shows half the nodes finished, and names the failed one
    view = api.call("GET", f"/runs/{run['run_id']}")[1]
    assert {k: v for k, v in view["counts"].items() if v} == {
        "succeeded": 1,
        "failed": 1,
        "waiting": 2,
    }
    assert (view["progress"], view["failed_nodes"]) == (0.5, ["score"])


def move(api: Api, run_id: str, node_id: str, expected: dag.NodeState, to: dag.NodeState) -> None:
    assert api.store.move_node(run_id, node_id, expected=expected, to=to)


def test_run_nodes_are_listed_by_state_page_by_page(api: Api) -> None:
    # GIVEN a started run: the root dispatched, three nodes waiting
    register(api)
    run_id = start(api)["run_id"]
    api.controller().start(run_id)
    path = f"/runs/{run_id}/nodes"
    # WHEN the dispatched nodes are listed
    status, page = api.call("GET", path, query={"state": "dispatched"})
    # THEN the root is there with its generation and counter
    assert status == 200
    assert page == {
        "items": [
            {"id": ROOT, "state": "dispatched", "generation": 1, "pending": 0, "exit_reason": None}
        ],
        "next_cursor": None,
    }
    # WHEN the waiting ones are listed one per page THEN every one comes once, by id
    seen, query = [], {"state": "waiting", "limit": "1"}
    while True:
        status, page = api.call("GET", path, query=query)
        assert status == 200, page
        seen += [(n["id"], n["pending"]) for n in page["items"]]
        if page["next_cursor"] is None:
            break
        query = {**query, "cursor": page["next_cursor"]}
    assert seen == [("clean.v2", 1), ("load", 2), ("score", 1)]
    # AND a cursor is good only for its own listing
    cursor = api.call("GET", path, query={"state": "waiting", "limit": "1"})[1]["next_cursor"]
    other = api.call("GET", path, query={"state": "failed", "cursor": cursor})
    assert error_of(other) == (400, "cursor")


@pytest.mark.parametrize(
    ("query", "status", "field"),
    [
        ({"state": "exploded"}, 400, "state"),
        ({"state": ""}, 400, "state"),
        ({"state": "failed", "limit": "0"}, 422, "limit"),
        ({"state": "failed", "limit": "1001"}, 422, "limit"),
        ({"state": "failed", "cursor": "bm90LWEtY3Vyc29y!"}, 400, "cursor"),
        ({"state": "failed", "cursor": "WyJhIl0="}, 400, "cursor"),  # base64 of ["a"]
    ],
    ids=["unknown-state", "empty-state", "limit-0", "limit-1001", "tampered-cursor", "not-a-key"],
)
def test_a_bad_node_listing_is_refused_naming_the_parameter(
    api: Api, query: dict[str, str], status: int, field: str
) -> None:
    register(api)
    run_id = start(api)["run_id"]
    response = api.call("GET", f"/runs/{run_id}/nodes", query=query)
    assert error_of(response) == (status, field)
    if field == "state":
        assert "'waiting'" in response[1]["error"]["message"]  # the states are listed


def test_a_runs_nodes_in_every_state_are_listed_with_their_exit_reasons(api: Api) -> None:
    # GIVEN a started run whose root's attempt failed
    register(api)
    run_id = start(api)["run_id"]
    api.controller().start(run_id)
    run = api.store.get_run(run_id)
    root = api.store.get_nodes(run_id, [ROOT])[ROOT]
    assert run is not None
    key = workflow.node_occurrence_key(run, root)
    # (the controller sends the root's message without a row: its first claim writes it)
    intent = claims.intent_of({"tenant_id": run.tenant_id}, key)
    claimed, _ = api.occurrences.claim(
        key, now=START, until=START + timedelta(minutes=1), intent=intent
    )
    assert claimed
    assert api.occurrences.settle(key, state=State.FAILED, now=START, exit_reason="error: boom")
    # WHEN the nodes are listed without a state, one a page
    seen, query = [], {"limit": "1"}
    while True:
        status, page = api.call("GET", f"/runs/{run_id}/nodes", query=query)
        assert status == 200, page
        seen += [(n["id"], n["state"], n["exit_reason"]) for n in page["items"]]
        if page["next_cursor"] is None:
            break
        query = {**query, "cursor": page["next_cursor"]}
    # THEN every node comes once, by id, the root with its attempt's exit reason
    assert seen == [
        ("clean.v2", "waiting", None),
        (ROOT, "dispatched", "error: boom"),
        ("load", "waiting", None),
        ("score", "waiting", None),
    ]
    # AND a page's exit reasons are one batch read, never a read per node
    batches: list[list[str]] = []
    real_get_many = api.occurrences.get_many

    def get_many(keys: list[str]) -> dict[str, Any]:
        batches.append(list(keys))
        return real_get_many(keys)

    def no_single_reads(key: str) -> None:
        raise AssertionError(f"a node's row was read alone: {key}")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(api.occurrences, "get_many", get_many)
        patch.setattr(api.occurrences, "get", no_single_reads)
        status, page = api.call("GET", f"/runs/{run_id}/nodes", query={"limit": "100"})
    assert status == 200 and len(page["items"]) == 4
    assert batches == [[key]]  # the waiting nodes have no row to read
    # AND that cursor is not good for a listing by state, nor for another tenant
    cursor = api.call("GET", f"/runs/{run_id}/nodes", query={"limit": "1"})[1]["next_cursor"]
    by_state = {"state": "waiting", "cursor": cursor}
    assert error_of(api.call("GET", f"/runs/{run_id}/nodes", query=by_state)) == (400, "cursor")


def test_a_run_lists_up_to_1000_nodes_a_page(api: Api) -> None:
    register(api)
    run_id = start(api)["run_id"]
    api.controller().start(run_id)
    status, page = api.call(
        "GET", f"/runs/{run_id}/nodes", query={"state": "waiting", "limit": "1000"}
    )
    assert status == 200
    assert [n["id"] for n in page["items"]] == ["clean.v2", "load", "score"]


def test_cancel_is_200_then_repeating_it_changes_nothing(api: Api) -> None:
    register(api)
    run_id = start(api)["run_id"]
    api.events()
    api.clock.advance(30)
    # WHEN the run is cancelled
    status, cancelled = api.call("POST", f"/runs/{run_id}/cancel")
    # THEN it is cancelled now, and the controller is told
    assert status == 200
    assert (cancelled["state"], cancelled["finished_at"]) == ("cancelled", "2026-05-01T12:00:30Z")
    assert api.events() == [{"type": "cancel", "run_id": run_id}]
    # WHEN it is cancelled again (later) THEN the same run comes back, and nothing is sent
    api.clock.advance(30)
    assert api.call("POST", f"/runs/{run_id}/cancel") == (200, cancelled)
    assert api.events() == []
    assert api.call("GET", f"/runs/{run_id}")[1]["state"] == "cancelled"


def test_retry_of_a_running_run_is_409_and_changes_nothing(api: Api) -> None:
    register(api)
    run_id = start(api)["run_id"]
    api.events()
    status, out = api.call("POST", f"/runs/{run_id}/retry")
    assert (status, out["error"]["type"]) == (409, "conflict")
    assert "only a failed run is retried" in out["error"]["message"]
    assert api.events() == []
    view = api.call("GET", f"/runs/{run_id}")[1]
    assert (view["state"], view["generation"]) == ("running", 1)


def test_retry_of_a_failed_run_resumes_it_as_a_new_generation(api: Api) -> None:
    # GIVEN a run whose score node failed (load blocked behind it), recorded as failed
    register(api)
    run_id = start(api)["run_id"]
    api.controller().start(run_id)
    definition = api.controller().definitions.get("tenant-a", "wf", 1)
    assert api.store.succeed_node(run_id, ROOT, chunk=0, children=definition.chunk(ROOT, 0))
    move(api, run_id, "clean.v2", dag.NodeState.WAITING, dag.NodeState.DISPATCHED)
    assert api.store.succeed_node(
        run_id, "clean.v2", chunk=0, children=definition.chunk("clean.v2", 0)
    )
    move(api, run_id, "score", dag.NodeState.WAITING, dag.NodeState.FAILED)
    move(api, run_id, "load", dag.NodeState.WAITING, dag.NodeState.BLOCKED)
    stored = api.store.get_run(run_id)
    assert stored is not None
    assert api.store.update_run(
        replace(stored, state=workflow.RunState.FAILED, finished_at=START),
        expected_state=stored.state,
        expected_generation=stored.generation,
    )
    api.events()
    # WHEN it is retried
    status, retried = api.call("POST", f"/runs/{run_id}/retry")
    # THEN it runs again as generation 2, and the controller is asked to reset its nodes
    assert status == 202
    assert (retried["state"], retried["generation"], retried["finished_at"]) == (
        "running",
        2,
        None,
    )
    assert api.events() == [{"type": "retry", "run_id": run_id}]
    # AND once the controller has handled that, the failed and blocked nodes wait again
    # (score is dispatched at once: its parents succeeded); what succeeded stays
    api.controller().handle({"type": "retry", "run_id": run_id})
    counts = api.call("GET", f"/runs/{run_id}")[1]["counts"]
    assert {k: v for k, v in counts.items() if v} == {"succeeded": 2, "dispatched": 1, "waiting": 1}


def test_reconcile_is_202_and_asks_the_controller(api: Api) -> None:
    register(api)
    run = start(api)
    api.events()
    status, out = api.call("POST", f"/runs/{run['run_id']}/reconcile")
    assert (status, out) == (202, run)
    assert api.events() == [{"type": "reconcile", "run_id": run["run_id"]}]


# --- tenants -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "suffix", "query"),
    [
        ("GET", "", None),
        ("GET", "/nodes", {"state": "waiting"}),
        ("POST", "/cancel", None),
        ("POST", "/retry", None),
        ("POST", "/reconcile", None),
    ],
    ids=["view", "nodes", "cancel", "retry", "reconcile"],
)
def test_another_tenants_run_is_not_found(
    api: Api, method: str, suffix: str, query: dict[str, str] | None
) -> None:
    register(api)
    run_id = start(api)["run_id"]
    api.events()
    status, out = api.call(method, f"/runs/{run_id}{suffix}", tenant=B, query=query)
    assert (status, out["error"]["type"]) == (404, "not_found")
    assert api.events() == []
    assert api.call("GET", f"/runs/{run_id}")[1]["state"] == "running"


def test_workflows_are_per_tenant(api: Api) -> None:
    register(api)
    assert api.call("GET", "/workflows/wf", tenant=B)[0] == 404
    assert api.call("POST", "/workflows/wf/runs", tenant=B)[0] == 404
    # AND the same id is a separate workflow for another tenant
    assert register(api, tenant=B)["version"] == 1
    assert api.versions(A) == 1


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/workflows/wf"),
        ("POST", "/workflow-uploads"),
        ("GET", "/workflows/wf"),
        ("POST", "/workflows/wf/runs"),
        ("GET", "/runs/r1"),
        ("POST", "/runs/r1/cancel"),
    ],
)
def test_workflow_routes_need_a_tenant(api: Api, method: str, path: str) -> None:
    status, out = api.call(method, path, DIAMOND if method == "PUT" else None, tenant=None)
    assert (status, out["error"]["type"]) == (401, "unauthorized")
    assert api.versions() == 0


# --- without a workflow service, and the document ---------------------------------------


def test_without_a_workflow_service_the_routes_do_not_exist() -> None:
    api = build(with_workflows=False)
    for method, path in [
        ("PUT", "/workflows/wf"),
        ("GET", "/runs/r1"),
        ("POST", "/workflow-uploads"),
    ]:
        status, out = api.call(method, path, DIAMOND if method == "PUT" else None)
        assert (status, out["error"]["message"]) == (404, "no such route")
    document = api.call("GET", "/openapi.json", tenant=None)[1]
    assert not [p for p in document["paths"] if "workflow" in p or p.startswith("/runs")]


def test_openapi_lists_the_workflow_routes_with_summaries(api: Api) -> None:
    status, document = api.call("GET", "/openapi.json", tenant=None)
    assert status == 200
    validate(document)
    paths = document["paths"]
    expected = {
        ("/workflows/{workflow_id}", "put", "201"),
        ("/workflows/{workflow_id}", "get", "200"),
        ("/workflow-uploads", "post", "201"),
        ("/workflows/{workflow_id}/runs", "post", "202"),
        ("/runs/{run_id}", "get", "200"),
        ("/runs/{run_id}/nodes", "get", "200"),
        ("/runs/{run_id}/cancel", "post", "200"),
        ("/runs/{run_id}/retry", "post", "202"),
        ("/runs/{run_id}/reconcile", "post", "202"),
    }
    for path, method, success in expected:
        operation = paths[path][method]
        assert operation["summary"], (path, method)
        assert success in operation["responses"], (path, method)
    # AND the definition's shape and the node states are documented
    schemas = document["components"]["schemas"]
    assert {"WorkflowIn", "NodeIn", "RunViewOut", "RunNodePage"} <= set(schemas)
    assert set(schemas["NodeIn"]["required"]) == {"id", "target"}
    state = next(
        p for p in paths["/runs/{run_id}/nodes"]["get"]["parameters"] if p["name"] == "state"
    )
    assert state.get("required", False) is False


def test_a_schedule_may_target_a_workflow_but_a_node_may_not(api: Api) -> None:
    register(api)
    target = {"type": "workflow", "workflow_id": "wf"}
    status, out = api.call("POST", "/schedules", {"spec": "rate(1 hour)", "target": target})
    assert status == 201, out
    assert out["target"] == {**target, "version": None}
    body = {"nodes": [{"id": "a", "target": target}], "edges": []}
    status, out = api.call("PUT", "/workflows/recursive", body)
    assert status == 422 and out["error"]["field"].startswith("nodes.0.target")
    assert api.call("GET", "/workflows/recursive")[0] == 404


@pytest.mark.parametrize(
    ("target", "field"),
    [
        ({"type": "workflow", "workflow_id": "nothing-here"}, "target.workflow_id"),
        ({"type": "workflow", "workflow_id": "wf", "version": 9}, "target.version"),
    ],
    ids=["unknown workflow", "unknown version"],
)
def test_a_schedule_or_job_targeting_a_workflow_that_does_not_exist_is_refused(
    api: Api, target: dict[str, Any], field: str
) -> None:
    # GIVEN tenant-a has version 1 of "wf", and tenant-b a workflow named "nothing-here"
    register(api)
    register(api, workflow_id="nothing-here", tenant=B)
    # WHEN a schedule or a job names a workflow (or version) tenant-a does not have
    schedule = api.call("POST", "/schedules", {"spec": "rate(1 hour)", "target": target})
    job = api.call("POST", "/jobs", {"delay_seconds": 60, "target": target})
    # THEN each is refused naming the field, and nothing is stored
    assert error_of(schedule) == (400, field)
    assert error_of(job) == (400, field)
    assert api.scheduler.schedules.list(A, limit=100).items == []


def test_a_node_whose_http_header_is_invalid_is_refused_naming_it(api: Api) -> None:
    target = {"type": "http", "url": "https://x.example", "headers": {"X-Tag": "a\r\nb"}}
    response = api.call("PUT", "/workflows/wf", {"nodes": [node("a", target=target)]})
    assert error_of(response) == (422, "nodes.0.target.headers")
    assert api.versions() == 0


def test_an_upload_over_the_document_limit_is_refused_as_too_large_without_being_read(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The limit is 64 MiB; a smaller one here keeps the test cheap.
    monkeypatch.setattr(workflows, "MAX_UPLOAD_BYTES", 1024)
    raw = json.dumps({"nodes": [{"id": f"n{i}", "target": PYTHON} for i in range(40)], "edges": []})
    assert len(raw) > 1024
    # GIVEN an object put behind the upload form's back, past its content-length-range
    upload_id = put_upload(api, raw.encode())
    read_before = api.documents.bytes_read
    # WHEN it is registered
    status, out = api.call("PUT", "/workflows/wf", {"upload_id": upload_id})
    # THEN 413 naming upload_id, decided on its size alone: not a byte of it was read
    assert (status, out["error"]["type"], out["error"]["field"]) == (
        413,
        "too_large",
        "upload_id",
    )
    assert f"{len(raw)} bytes; the limit is 1024" in out["error"]["message"]
    assert api.documents.bytes_read == read_before
    assert api.versions() == 0


def test_an_upload_of_another_content_type_is_refused_naming_upload_id(api: Api) -> None:
    status, upload = api.call("POST", "/workflow-uploads")
    assert status == 201
    key = workflows.upload_key(A, upload["upload_id"])
    api.documents.put(key, json.dumps(DIAMOND).encode(), content_type="text/html")

    status, out = api.call("PUT", "/workflows/wf", {"upload_id": upload["upload_id"]})

    assert (status, out["error"]["field"]) == (400, "upload_id")
    assert "must be application/json" in out["error"]["message"]
    assert api.versions() == 0
