"""API keys: what is kept of one (never the key itself), and when it stops working.

A key is shown once, when it is created; the store keeps its SHA-256 hash, so a leaked
table or backup yields no usable key. A key is refused from its end time on: revoking
sets the end to now, rotating sets the old key's end to now plus a grace period.
Pure: ids, keys and times come in as arguments.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import re
from dataclasses import dataclass

from fireline.domain import errors

# Tenant ids name a Secrets Manager secret and an API Gateway key: the characters both allow.
TENANT_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
KEY_PREFIX = "fl_"


class KeyState(enum.StrEnum):
    ACTIVE = "active"
    EXPIRING = "expiring"  # rotated out, still accepted until its end
    REVOKED = "revoked"


@dataclass(frozen=True)
class ApiKey:
    key_hash: str
    key_id: str
    tenant_id: str
    created_ms: int
    # From this instant on the key is refused; None: no end.
    ends_ms: int | None = None
    # The tenant's API Gateway usage identifier (usage plans); None: none registered.
    usage_key: str | None = None
    # An operator's key reads every tenant's data (naming the tenant) and writes nothing.
    operator: bool = False

    def state_at(self, now_ms: int) -> KeyState:
        if self.ends_ms is None:
            return KeyState.ACTIVE
        return KeyState.EXPIRING if now_ms < self.ends_ms else KeyState.REVOKED

    def accepted_at(self, now_ms: int) -> bool:
        return self.state_at(now_ms) is not KeyState.REVOKED

    def ending(self, at_ms: int) -> ApiKey:
        """This key refused from ``at_ms`` on (or earlier, if it already ends sooner)."""
        end = at_ms if self.ends_ms is None else min(self.ends_ms, at_ms)
        return dataclasses.replace(self, ends_ms=end)


def key_hash(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def check_tenant_id(tenant_id: str) -> str:
    if not TENANT_ID.match(tenant_id):
        raise errors.ValidationError(
            f"{tenant_id!r} is not 1-64 letters, digits, '_', '.' or '-'", field="tenant"
        )
    return tenant_id
