"""EventBridge rate(5 minutes) -> the sweep: jobs written and never sent, and quota units
held by nothing (see fireline.services.sweep)."""

from __future__ import annotations

import dataclasses
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from fireline import wiring

logger = wiring.logger()


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return dataclasses.asdict(wiring.sweep().run())
