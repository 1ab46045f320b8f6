"""Example schedules, jobs and a workflow the local cloud registers at start, through its
own HTTP API."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

_STEP = {"type": "python", "handler": "echo"}
# The classic ETL DAG: cleanup waits for every other node.
ETL_NODES = ["source", "extract", "validate", "transform", "load", "audit", "cleanup"]
ETL_EDGES = [
    ["source", "extract"],
    ["source", "validate"],
    ["extract", "transform"],
    ["validate", "transform"],
    ["transform", "load"],
    ["load", "audit"],
    *[[node, "cleanup"] for node in ETL_NODES[:-1]],
]
WORKFLOWS: list[tuple[str, dict[str, Any]]] = [
    (
        "/workflows/example-etl",
        {
            "nodes": [
                {"id": n, "target": _STEP, "job_class": "short", "payload": {"step": n}}
                for n in ETL_NODES
            ],
            "edges": ETL_EDGES,
        },
    )
]

EXAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        "/schedules",
        {
            "spec": "cron(*/10 * * * * *)",
            "job_class": "short",
            "target": {"type": "python", "handler": "echo"},
            "payload": {"example": "every 10 seconds, cron with seconds"},
        },
    ),
    (
        "/schedules",
        {
            "spec": "rate(1 minute)",
            "target": {"type": "python", "handler": "noop"},
            "payload": {"example": "every minute"},
        },
    ),
    (
        "/schedules",
        {
            "spec": "every day at 09:30",
            "timezone": "Europe/Paris",
            "target": {"type": "python", "handler": "noop"},
            "payload": {"example": "natural language, shown back as cron"},
        },
    ),
    (
        "/jobs",
        {
            "delay_seconds": 15,
            "target": {"type": "python", "handler": "echo"},
            "payload": {"example": "a one-off job in 15 seconds"},
        },
    ),
    (
        "/jobs",
        {
            "delay_seconds": 5,
            "job_class": "long",
            "target": {"type": "python", "handler": "progress-demo"},
            "payload": {"steps": 30, "seconds_per_step": 1},
        },
    ),
    (
        "/jobs",
        {
            "delay_seconds": 20,
            "target": {"type": "python", "handler": "fail"},
            "payload": {"reason": "an example poison job: retried, then dead"},
            "retry": {"max_attempts": 2, "base_seconds": 2, "cap_seconds": 5},
        },
    ),
    (
        "/schedules",
        {
            "spec": "rate(2 minutes)",
            "target": {"type": "workflow", "workflow_id": "example-etl"},
            "payload": {"example": "a workflow run (the ETL DAG) every 2 minutes"},
        },
    ),
]


def register(api_url: str, api_key: str) -> list[dict[str, Any]]:
    """Create the examples (idempotently: a restart does not create them twice). The
    workflow comes first: a schedule below starts it."""
    created = []
    calls = [("PUT", path, body, f"local-workflow-{n}") for n, (path, body) in enumerate(WORKFLOWS)]
    calls += [("POST", path, body, f"local-example-{n}") for n, (path, body) in enumerate(EXAMPLES)]
    for method, path, body, idempotency_key in calls:
        request = urllib.request.Request(
            api_url + path,
            data=json.dumps(body).encode(),
            method=method,
            headers={
                "Content-Type": "application/json",
                "x-api-key": api_key,
                "Idempotency-Key": idempotency_key,
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                created.append(json.loads(response.read()))
        except urllib.error.HTTPError as exc:
            created.append({"error": exc.code, "body": exc.read().decode(errors="replace")})
    return created
