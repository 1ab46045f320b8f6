"""API Gateway -> the HTTP API (fireline.api.app)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from fireline import wiring
from fireline.api import app

logger = wiring.logger()


@logger.inject_lambda_context(correlation_id_path="requestContext.requestId")
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.handle(wiring.api(), event, context)
