"""What the console reads from the API, on the memory adapters: who a key is, the
operator role (reads any tenant, writes nothing), the overview's figures, a run's graph,
and the console's assets served without a key."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from fireline import ports
from fireline.adapters import memory
from fireline.api import app as api_app
from fireline.domain import dag, lease, retry
from fireline.services import overview, schedules
from helpers.flows import Flow, node
from helpers.system import api_event

OPERATOR = {"tenant_id": "operators", "role": "operator"}
TARGET = {"type": "python", "handler": "noop"}


class Api:
    def __init__(self) -> None:
        self.flow = Flow.on_memory()
        self.clock = self.flow.clock
        self.service = schedules.ScheduleService(
            schedules=self.flow.schedules,
            occurrences=self.flow.occurrences,
            queue=self.flow.queue,
            clock=self.clock,
        )
        self.leases = memory.MemoryLeaseStore()
        self.app = api_app.build_app(
            self.service,
            workflows=self.flow.service,
            overview=overview.Overview(
                self.service, leases=self.leases, ticker_groups=1, queues=self.flow.queue
            ),
            tenants=lambda: ["operators", "tenant-a", "tenant-b"],
        )

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        tenant: str | None = "tenant-a",
        context: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        event = api_event(method, path, body, tenant=tenant, query=query)
        if context is not None:
            event["requestContext"]["authorizer"] = dict(context)
        response = api_app.handle(self.app, event, None)
        text = response.get("body") or ""
        try:
            decoded = json.loads(text) if text else None
        except ValueError:
            decoded = text
        headers = dict(response.get("headers") or {})
        headers.update({k: v[0] for k, v in (response.get("multiValueHeaders") or {}).items()})
        return response["statusCode"], decoded, headers

    def schedule(self, tenant: str = "tenant-a") -> str:
        status, made, _ = self.call(
            "POST", "/schedules", {"spec": "rate(1 hour)", "target": TARGET}, tenant=tenant
        )
        assert status == 201, made
        return str(made["id"])


@pytest.fixture
def api() -> Api:
    return Api()


def test_whoami_names_the_keys_tenant_and_role(api: Api) -> None:
    assert api.call("GET", "/whoami")[1] == {
        "tenant_id": "tenant-a",
        "role": "tenant",
        "viewing": "tenant-a",
    }
    status, found, _ = api.call("GET", "/whoami", context=OPERATOR, query={"tenant": "tenant-b"})
    assert status == 200
    assert found == {"tenant_id": "operators", "role": "operator", "viewing": "tenant-b"}
    assert api.call("GET", "/whoami", tenant=None)[0] == 401


def test_an_operator_reads_the_tenant_it_names_and_a_tenant_key_never_does(api: Api) -> None:
    # GIVEN a schedule of tenant A
    schedule_id = api.schedule("tenant-a")

    # WHEN an operator names tenant A, and tenant B names tenant A
    status, as_operator, _ = api.call(
        "GET", "/schedules", context=OPERATOR, query={"tenant": "tenant-a"}
    )
    _, as_b, _ = api.call("GET", "/schedules", tenant="tenant-b", query={"tenant": "tenant-a"})
    b_one = api.call(
        "GET", f"/schedules/{schedule_id}", tenant="tenant-b", query={"tenant": "tenant-a"}
    )

    # THEN the operator reads it; tenant B reads its own (nothing), the query ignored
    assert status == 200 and [s["id"] for s in as_operator["items"]] == [schedule_id]
    assert as_b["items"] == []
    assert b_one[0] == 404
    # and a tenant named badly is a 400 naming the field
    status, refused, _ = api.call("GET", "/schedules", context=OPERATOR, query={"tenant": "a/b"})
    assert status == 400 and refused["error"]["field"] == "tenant"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/schedules", {"spec": "rate(1 hour)", "target": TARGET}),
        ("POST", "/schedules/{id}/pause", None),
        ("POST", "/schedules/{id}/trigger", None),
        ("PUT", "/schedules/{id}", {"spec": "rate(2 hours)", "target": TARGET}),
        ("DELETE", "/schedules/{id}", None),
        ("POST", "/jobs", {"delay_seconds": 5, "target": TARGET}),
    ],
)
def test_an_operator_key_writes_nothing(api: Api, method: str, path: str, body: Any) -> None:
    # GIVEN a schedule of tenant A
    schedule_id = api.schedule("tenant-a")
    before = api.call("GET", f"/schedules/{schedule_id}")[1]

    # WHEN an operator's key writes, naming tenant A
    status, refused, _ = api.call(
        method,
        path.format(id=schedule_id),
        body,
        context=OPERATOR,
        query={"tenant": "tenant-a"},
    )

    # THEN it is refused and nothing changed
    assert status == 403 and refused["error"]["type"] == "forbidden"
    assert api.call("GET", f"/schedules/{schedule_id}")[1] == before
    assert len(api.call("GET", "/schedules")[1]["items"]) == 1
    assert api.call("GET", "/jobs")[1]["items"] == []
    assert api.call("GET", f"/schedules/{schedule_id}/occurrences")[1]["items"] == []


def test_only_an_operator_lists_the_tenants(api: Api) -> None:
    assert api.call("GET", "/tenants")[0] == 403
    status, found, _ = api.call("GET", "/tenants", context=OPERATOR)
    assert status == 200 and found["items"] == ["operators", "tenant-a", "tenant-b"]


def test_the_overview_counts_the_tenants_last_hour_and_plots_its_lag(api: Api) -> None:
    # GIVEN a schedule of tenant A fired three times: one started 2 s late, one 4 s late,
    # one still queued; and tenant B's schedule fired once
    schedule_id = api.schedule("tenant-a")
    fired = [api.service.trigger("tenant-a", schedule_id) for _ in range(3)]
    api.service.trigger("tenant-b", api.schedule("tenant-b"))
    for row, late in zip(fired[:2], (2, 4), strict=True):
        claimed, _ = api.flow.occurrences.claim(
            row.key,
            now=row.fire_time + timedelta(seconds=late),
            until=row.fire_time + timedelta(seconds=60),
        )
        assert claimed
    api.leases.acquire("ticker", "owner-0123456789", 0, lease.LeaseTerms())
    api.clock.advance(1)

    # WHEN tenant A reads its overview
    status, found, _ = api.call("GET", "/overview")

    # THEN its own occurrences are counted by state and class, tenant B's are not
    assert status == 200
    assert found["occurrences"]["running"] == 2 and found["occurrences"]["queued"] == 1
    assert sum(found["occurrences"].values()) == 3
    assert {c["job_class"]: (c["backlog"], c["in_flight"]) for c in found["classes"]} == {
        "default": (1, 2),
        "short": (0, 0),
        "long": (0, 0),
    }
    # AND the start lag of that minute: p50 and p99 of 2 s and 4 s (nearest rank)
    (minute,) = found["lag"]
    assert minute["count"] == 3
    assert (minute["start_p50_ms"], minute["start_p99_ms"]) == (2000, 4000)
    # AND the ticker lease (held long ago: expired, so no live holder) and no dead letter
    assert found["tickers"] == [
        {
            "group": 0,
            "lease": "ticker",
            "holder": None,
            "token": 1,
            "expires_at": found["tickers"][0]["expires_at"],
        }
    ]
    assert found["dead_letters"] == 0 and found["schedules"] == 1 and found["capped"] is False
    # AND a tenant's key does not see the class queues, which hold every tenant's work
    assert found["queues"] is None


def test_an_operators_overview_counts_the_deployments_queues_of_every_tenant(api: Api) -> None:
    # GIVEN four fires on the default queue, of two tenants: one taken by a worker
    for tenant in ("tenant-a", "tenant-a", "tenant-b", "tenant-b"):
        api.service.trigger(tenant, api.schedule(tenant))
    assert len(api.flow.queue.receive("default", max_messages=1)) == 1
    # AND one fire sent ahead of its time (a delayed message) on the short queue
    api.flow.queue.send_batch(
        "short", [ports.OutboundMessage(body={"ahead": True}, delay_seconds=60)]
    )

    # WHEN an operator reads the overview (of tenant A)
    status, found, _ = api.call("GET", "/overview", context=OPERATOR, query={"tenant": "tenant-a"})

    # THEN it sees each class queue's messages, every tenant's
    assert status == 200, found
    assert {
        q["job_class"]: (q["ready"], q["delayed"], q["in_flight"]) for q in found["queues"]
    } == {
        "default": (3, 0, 1),
        "short": (0, 1, 0),
        "long": (0, 0, 0),
    }
    # AND the rest of its figures are tenant A's own
    assert found["tenant_id"] == "tenant-a" and found["schedules"] == 2


def test_percentiles_are_nearest_rank() -> None:
    assert overview.percentile([], 50) is None
    assert overview.percentile([5.0], 99) == 5.0
    values = [float(v) for v in range(1, 101)]
    assert (overview.percentile(values, 50), overview.percentile(values, 99)) == (50.0, 99.0)


def test_a_run_graph_has_each_node_with_its_state_and_layer(api: Api) -> None:
    # GIVEN a run whose "b" fails for good: "c" below it is blocked, "d" beside it succeeds
    flow = api.flow
    flow.register(
        [node("a"), node("b", retry=retry.RetryPolicy(max_attempts=1)), node("c"), node("d")],
        [("a", "b"), ("b", "c"), ("a", "d")],
    )
    flow.ledger.failing["b"] = 1
    run = flow.start()
    flow.drain()

    # WHEN its graph is read
    status, graph, _ = api.call("GET", f"/runs/{run.run_id}/graph")

    # THEN every node is there with its state and depth, and the edges between them
    assert status == 200 and graph["complete"] is True
    assert {n["id"]: (n["state"], n["depth"]) for n in graph["nodes"]} == {
        "a": ("succeeded", 0),
        "b": ("failed", 1),
        "c": ("blocked", 2),
        "d": ("succeeded", 1),
    }
    assert sorted(map(tuple, graph["edges"])) == [("a", "b"), ("a", "d"), ("b", "c")]
    # AND another tenant cannot read it
    assert api.call("GET", f"/runs/{run.run_id}/graph", tenant="tenant-b")[0] == 404


def test_a_large_graph_is_cut_around_its_failures() -> None:
    # GIVEN a chain of 100 nodes and a fan of 100 leaves, node n60 failed
    chain = [f"n{i}" for i in range(100)]
    leaves = [f"leaf{i}" for i in range(100)]
    graph = dag.validate(
        chain + leaves,
        [(chain[i], chain[i + 1]) for i in range(99)] + [("n0", leaf) for leaf in leaves],
    )

    # WHEN 5 nodes are chosen around it, and 3 with no failure
    around = dag.around(graph, ["n60"], 5)
    start = dag.around(graph, [], 3)

    # THEN the failure and its nearest neighbours come first; without one, the roots
    assert around == ["n60", "n59", "n61", "n58", "n62"]
    assert start[0] == "n0" and len(start) == 3


def test_the_console_is_served_without_a_key_and_only_its_own_files(api: Api) -> None:
    status, page, headers = api.call("GET", "/console", tenant=None)
    assert status == 200 and "<title>Fireline console</title>" in page
    assert headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    status, script, headers = api.call("GET", "/console/console.js", tenant=None)
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    assert "sessionStorage" in script
    for missing in ("/console/nothing.js", "/console/..%2Fapp.py", "/console/__init__.py"):
        assert api.call("GET", missing, tenant=None)[0] == 404, missing


def test_a_nodes_dead_letters_name_their_run_node_and_generation(api: Api) -> None:
    # GIVEN a run whose node "b" dies, is retried ("retry failed") and dies again
    flow = api.flow
    flow.register([node("a"), node("b", retry=retry.RetryPolicy(max_attempts=1))], [("a", "b")])
    flow.ledger.failing["b"] = 2
    run = flow.start()
    flow.drain()
    flow.service.retry_failed("tenant-a", run.run_id)
    flow.drain()

    # WHEN tenant A lists its dead letters
    status, page, _ = api.call("GET", "/dead-letters")

    # THEN each names the run and the node it is of, and the generation tells them apart
    assert status == 200, page
    assert sorted((d["run_id"], d["node_id"], d["version"]) for d in page["items"]) == [
        (run.run_id, "b", 1),
        (run.run_id, "b", 2),
    ]


def test_the_overview_says_what_its_dead_letters_are_of(api: Api) -> None:
    # GIVEN a node that died twice and a job that died once
    flow = api.flow
    flow.register([node("b", retry=retry.RetryPolicy(max_attempts=1))], [])
    flow.ledger.failing["b"] = 2
    run = flow.start()
    flow.drain()
    flow.service.retry_failed("tenant-a", run.run_id)
    flow.drain()
    flow.ledger.failing["job"] = 1
    once = retry.RetryPolicy(max_attempts=1)
    draft = schedules.JobDraft(
        target={"type": "python", "handler": "ledger"},
        payload={"node": "job"},
        retry=once,
        delay_seconds=0,
    )
    api.service.create_job("tenant-a", draft)
    flow.drain()

    # WHEN tenant A reads its overview
    status, found, _ = api.call("GET", "/overview")

    # THEN the dead letters are counted by what they are of, and add up to the total
    assert status == 200, found
    assert found["dead_letters_by_source"] == {"schedules": 0, "jobs": 1, "workflow nodes": 2}
    assert found["dead_letters"] == 3
    # AND the last hour's occurrences, which count schedules' and jobs' only, have the job's
    assert found["occurrences"]["dead"] == 1


def test_the_favicon_is_served_without_a_key(api: Api) -> None:
    # WHEN a browser asks the origin for its icon, with no key
    status, icon, headers = api.call("GET", "/favicon.ico", tenant=None)
    # THEN it is the console's icon, an SVG
    assert status == 200, icon
    assert headers["Content-Type"] == "image/svg+xml" and icon.startswith("<svg")
    assert api.call("GET", "/console/favicon.svg", tenant=None)[1] == icon
