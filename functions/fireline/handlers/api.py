"""API Gateway -> the HTTP API (fireline.api.app)."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from fireline import wiring
from fireline.api import app
from fireline.handlers import traces

logger = wiring.logger()
tracer = wiring.tracer()


@tracer.capture_lambda_handler(capture_response=False)
@logger.inject_lambda_context(correlation_id_path="requestContext.requestId")
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    authorizer = (event.get("requestContext") or {}).get("authorizer") or {}
    traces.annotate(tracer, {"tenant_id": authorizer.get("tenant_id")})
    response = app.handle(wiring.api(), event, context)
    if not tracer.disabled and response.get("statusCode") in (200, 201, 202):
        traces.annotate(tracer, _created(response))
    return response


def _created(response: dict[str, Any]) -> dict[str, Any]:
    """What an answer names of a fire: a schedule's or a job's id (its schedule)."""
    try:
        body = json.loads(response.get("body") or "{}")
    except ValueError:
        return {}
    if not isinstance(body, dict) or not isinstance(body.get("id"), str):
        return {}
    return {"schedule_id": body["id"], "occurrence_key": body.get("occurrence_key")}
