"""API Gateway implementation of the UsagePlans port: one API Gateway API key per tenant.

With the REST API's key source set to AUTHORIZER, API Gateway never reads a key from
the request: the authorizer names the caller's usage identifier (``usageIdentifierKey``),
the value of an API Gateway API key, and the usage plan that key belongs to throttles it
(rate, burst) and counts it against the plan's quota. One such key per tenant, shared by
all of the tenant's Fireline keys, makes the limits per tenant, and a rotation keeps them.
Its value is not a credential: nothing accepts it as one (the authorizer looks keys up by
hash in ApiKeysTable), so it is stored beside the key records.
"""

from __future__ import annotations

import secrets
from typing import Any


class ApiGatewayUsagePlans:
    def __init__(self, client: Any, plan_id: str, *, name_prefix: str) -> None:
        self._client = client
        self.plan_id = plan_id
        self._prefix = name_prefix

    def name(self, tenant_id: str) -> str:
        return f"{self._prefix}{tenant_id}"

    def usage_key(self, tenant_id: str, *, plan_id: str | None = None) -> str:
        key = self._tenant_key(tenant_id)
        current = self._plans_of(str(key["id"]))
        if plan_id is None and current:
            return str(key["value"])  # in a plan already (the stack's, or a tier): kept
        wanted = plan_id or self.plan_id
        if wanted not in current:
            # A key is in at most one plan per stage: a tier moves the tenant out of the
            # plan it was in before it joins the new one.
            for other in current:
                self._client.delete_usage_plan_key(usagePlanId=other, keyId=key["id"])
            self._client.create_usage_plan_key(
                usagePlanId=wanted, keyId=key["id"], keyType="API_KEY"
            )
        return str(key["value"])

    def plans_of(self, tenant_id: str) -> list[str]:
        """The usage plans the tenant's key is in (what an operator checks a tier by)."""
        return self._plans_of(str(self._tenant_key(tenant_id)["id"]))

    def _plans_of(self, key_id: str) -> list[str]:
        plans = self._client.get_usage_plans(keyId=key_id).get("items", [])
        return sorted(str(p["id"]) for p in plans)

    def _tenant_key(self, tenant_id: str) -> dict[str, Any]:
        name = self.name(tenant_id)
        # nameQuery matches a prefix: keep the exact name only.
        found = self._client.get_api_keys(nameQuery=name, includeValues=True).get("items", [])
        exact = [k for k in found if k.get("name") == name]
        if exact:
            return dict(exact[0])
        created = self._client.create_api_key(
            name=name,
            description=f"usage identifier of Fireline tenant {tenant_id} (not a credential)",
            enabled=True,
            value=secrets.token_hex(20),
        )
        return dict(created)
