"""API Gateway REQUEST authorizer: the x-api-key header -> the tenant it belongs to.

The tenant id goes into the authorizer context, which is the only place the api Lambda
reads identity from. An unknown, revoked or expired key, or none, is a 401
("Unauthorized" is the string API Gateway turns into one). The tenant's usage identifier
goes back as ``usageIdentifierKey``: API Gateway's usage plan throttles by it.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from fireline import wiring

logger = wiring.logger()


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    api_key = headers.get("x-api-key") or ""
    record = wiring.api_key_store().get(api_key) if api_key else None
    now_ms = int(wiring.clock().now().timestamp() * 1000)
    if record is None or not record.accepted_at(now_ms):
        logger.info("rejected", extra={"action": "authorizer.deny"})
        raise Exception("Unauthorized")
    # Allow the whole API: the tenant check is per resource, inside the api Lambda.
    arn = event["methodArn"].split("/")[0] + "/*"
    decision: dict[str, Any] = {
        "principalId": record.tenant_id,
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [{"Action": "execute-api:Invoke", "Effect": "Allow", "Resource": arn}],
        },
        # The role decides what the API lets the key do: an operator reads any tenant
        # (named per request) and writes nothing.
        "context": {
            "tenant_id": record.tenant_id,
            "key_id": record.key_id,
            "role": "operator" if record.operator else "tenant",
        },
    }
    if record.usage_key:
        decision["usageIdentifierKey"] = record.usage_key
    return decision
