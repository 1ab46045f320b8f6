"""In-memory API keys, signing key rings and usage plans (tests, simulation, examples).

The same semantics as the AWS adapters (tests/contract holds them together): records kept
by key hash, a ring created only once, a tenant's usage identifier stable across keys.
"""

from __future__ import annotations

import builtins
import threading
from dataclasses import dataclass, field

from fireline.domain import api_keys, errors, signing


class MemoryApiKeyStore:
    def __init__(self) -> None:
        self._records: dict[str, api_keys.ApiKey] = {}
        self._lock = threading.Lock()

    def get(self, api_key: str) -> api_keys.ApiKey | None:
        return self._records.get(api_keys.key_hash(api_key))

    def add(self, record: api_keys.ApiKey) -> None:
        with self._lock:
            if record.key_hash in self._records:
                raise errors.AlreadyExists("an API key with this hash exists")
            self._records[record.key_hash] = record

    def find(self, key_id: str) -> api_keys.ApiKey | None:
        return next((r for r in self._records.values() if r.key_id == key_id), None)

    def list(self, tenant_id: str | None = None) -> builtins.list[api_keys.ApiKey]:
        found = [r for r in self._records.values() if tenant_id in (None, r.tenant_id)]
        return sorted(found, key=lambda r: (r.created_ms, r.key_id))

    def end(self, key_id: str, *, at_ms: int) -> api_keys.ApiKey:
        with self._lock:
            record = self.find(key_id)
            if record is None:
                raise errors.NotFound(f"no API key {key_id!r}")
            ended = record.ending(at_ms)
            self._records[record.key_hash] = ended
            return ended


class MemorySigningKeyStore:
    def __init__(self) -> None:
        self._rings: dict[str, signing.KeyRing] = {}
        self._lock = threading.Lock()
        self.reads = 0  # what a cache in front of it saves

    def get(self, tenant_id: str) -> signing.KeyRing | None:
        self.reads += 1
        return self._rings.get(tenant_id)

    def create(self, ring: signing.KeyRing) -> bool:
        with self._lock:
            if ring.tenant_id in self._rings:
                return False
            self._rings[ring.tenant_id] = ring
            return True

    def replace(self, ring: signing.KeyRing) -> None:
        with self._lock:
            self._rings[ring.tenant_id] = ring


@dataclass
class MemoryUsagePlans:
    """Usage identifiers without API Gateway: ``usage-<tenant>``, with plan membership
    recorded (the local cloud's gateway enforces one plan's limits by identifier)."""

    default_plan: str = "default"
    members: dict[str, set[str]] = field(default_factory=dict)  # plan -> usage keys

    def usage_key(self, tenant_id: str, *, plan_id: str | None = None) -> str:
        key = f"usage-{tenant_id}"
        self.members.setdefault(plan_id or self.default_plan, set()).add(key)
        return key
