"""The OpenAPI document turned into requests by schemathesis, valid and invalid alike: no
answer is a 5xx. On the memory adapters (the same resolver and models as deployed), with a
bounded, derandomized number of examples per operation so it stays fast and repeatable."""

from __future__ import annotations

import json
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.core import NotSet

from fireline.adapters import memory
from fireline.api import app as api_app
from helpers.memory_system import MemorySystem, missing_workflows
from helpers.system import api_event

SYSTEM = MemorySystem()
APP = api_app.build_app(SYSTEM.service, memory.MemoryIdempotencyStore(), missing_workflows())
SCHEMA = schemathesis.openapi.from_dict(json.loads(api_app.openapi_document(APP)))
EXAMPLES_PER_OPERATION = 15


def event_of(case: Any) -> dict[str, Any]:
    body = None if isinstance(case.body, NotSet) else case.body
    if isinstance(body, bytes):  # a non-JSON media type's body
        body = body.decode(errors="replace")
    raw = body if isinstance(body, str) or body is None else json.dumps(body)
    query = {k: str(v) for k, v in (case.query or {}).items()} or None
    headers = {k: str(v) for k, v in (case.headers or {}).items()}
    if case.media_type:
        headers["Content-Type"] = case.media_type
    return api_event(case.method, case.formatted_path, raw, headers=headers, query=query)


@SCHEMA.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_request_the_document_describes_answers_5xx(case: Any) -> None:
    response = api_app.handle(APP, event_of(case), None)
    assert response["statusCode"] < 500, (case.method, case.formatted_path, response)
