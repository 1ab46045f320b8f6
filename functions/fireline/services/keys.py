"""Tenants' API keys and webhook signing keys: what ``fireline admin`` and the workers do.

- ``KeyAdmin`` (the operator's command): create a tenant's API key (shown once, kept as
  a hash), with the tenant's signing key ring if it has none yet and its usage identifier
  in the usage plan; list, revoke, rotate keys; rotate signing keys with an overlap.
- ``SigningKeys`` (the workers): the key a tenant's deliveries are signed with, read
  from the store through a cache, so a busy worker reads each tenant's secret once per
  TTL, not once per delivery.

A worker may keep signing with a rotated-out key until its cache entry expires; the
rotation's overlap (at least the cache TTL, checked here) keeps those deliveries valid.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass

from fireline import ports
from fireline.domain import api_keys, errors, signing

# How long a worker keeps a tenant's key ring before reading it again.
DEFAULT_CACHE_SECONDS = 300
# A tenant without a ring is asked again after this (a ring may be created meanwhile).
MISSING_CACHE_SECONDS = 30


def new_signing_key(now_ms: int) -> signing.SigningKey:
    return signing.SigningKey(
        key_id="sig_" + secrets.token_hex(8),
        secret="whsec_" + secrets.token_urlsafe(32),
        created_ms=now_ms,
    )


class NoSigningKey(errors.NotFound):
    """The tenant has no webhook signing key: create one with `fireline admin keys create`
    or `fireline admin signing rotate`."""


class SigningKeys:
    """The current signing key of each tenant, cached for ``ttl_seconds``."""

    def __init__(
        self,
        store: ports.SigningKeyStore,
        *,
        monotonic: Callable[[], float],
        ttl_seconds: float = DEFAULT_CACHE_SECONDS,
    ) -> None:
        self._store = store
        self._monotonic = monotonic
        self.ttl_seconds = ttl_seconds
        self._cache: dict[str, tuple[float, signing.KeyRing | None]] = {}
        self._lock = threading.Lock()

    def current(self, tenant_id: str) -> signing.SigningKey:
        now = self._monotonic()
        with self._lock:
            cached = self._cache.get(tenant_id)
        if cached is not None:
            read_at, ring = cached
            fresh = self.ttl_seconds if ring is not None else MISSING_CACHE_SECONDS
            if now - read_at < min(fresh, self.ttl_seconds):
                return _current_of(tenant_id, ring)
        ring = self._store.get(tenant_id)
        with self._lock:
            self._cache[tenant_id] = (now, ring)
        return _current_of(tenant_id, ring)


def _current_of(tenant_id: str, ring: signing.KeyRing | None) -> signing.SigningKey:
    if ring is None:
        raise NoSigningKey(f"tenant {tenant_id!r} has no webhook signing key")
    return ring.current


@dataclass(frozen=True)
class CreatedKey:
    api_key: str  # shown once, never stored
    record: api_keys.ApiKey
    signing_ring_created: bool


class KeyAdmin:
    def __init__(
        self,
        *,
        keys: ports.ApiKeyStore,
        signing_keys: ports.SigningKeyStore,
        usage: ports.UsagePlans | None,
        now_ms: Callable[[], int],
        cache_seconds: int = DEFAULT_CACHE_SECONDS,
    ) -> None:
        self._keys = keys
        self._signing = signing_keys
        self._usage = usage
        self._now_ms = now_ms
        self._cache_seconds = cache_seconds

    # --- API keys ------------------------------------------------------------------------

    def create(
        self,
        tenant_id: str,
        *,
        usage_plan_id: str | None = None,
        api_key: str | None = None,
        operator: bool = False,
    ) -> CreatedKey:
        """A new API key for ``tenant_id``. ``api_key`` sets its value (the local cloud's
        fixed keys); by default it is 32 random bytes. An ``operator`` key reads every
        tenant (read-only); its own tenant still carries its usage plan."""
        api_keys.check_tenant_id(tenant_id)
        value = api_key or api_keys.KEY_PREFIX + secrets.token_urlsafe(32)
        if len(value) < 16:
            raise errors.ValidationError("must be at least 16 characters", field="api_key")
        now = self._now_ms()
        # The ring and the usage identifier first: a key that exists always has both, and
        # a failure before the key is written leaves only what a retry reuses.
        ring_created = self.ensure_signing_ring(tenant_id)
        usage_key = self._usage.usage_key(tenant_id, plan_id=usage_plan_id) if self._usage else None
        record = api_keys.ApiKey(
            key_hash=api_keys.key_hash(value),
            key_id="ak_" + secrets.token_hex(8),
            tenant_id=tenant_id,
            created_ms=now,
            usage_key=usage_key,
            operator=operator,
        )
        self._keys.add(record)
        return CreatedKey(value, record, ring_created)

    def list(self, tenant_id: str | None = None) -> list[api_keys.ApiKey]:
        return self._keys.list(tenant_id)

    def revoke(self, key_id: str) -> api_keys.ApiKey:
        return self._keys.end(key_id, at_ms=self._now_ms())

    def rotate(
        self, key_id: str, *, grace_seconds: int = 0, usage_plan_id: str | None = None
    ) -> tuple[CreatedKey, api_keys.ApiKey]:
        """A new key for the old key's tenant; the old one is refused ``grace_seconds``
        from now (at once by default)."""
        if grace_seconds < 0:
            raise errors.ValidationError("must be 0 or more", field="grace_seconds")
        old = self._keys.find(key_id)
        if old is None:
            raise errors.NotFound(f"no API key {key_id!r}")
        if not old.accepted_at(self._now_ms()):
            raise errors.ValidationError(f"{key_id} is revoked already", field="key_id")
        created = self.create(old.tenant_id, usage_plan_id=usage_plan_id, operator=old.operator)
        ended = self._keys.end(key_id, at_ms=self._now_ms() + grace_seconds * 1000)
        return created, ended

    # --- signing keys --------------------------------------------------------------------

    def ensure_signing_ring(self, tenant_id: str) -> bool:
        """Give the tenant its first signing key if it has none; True if it was created."""
        api_keys.check_tenant_id(tenant_id)
        if self._signing.get(tenant_id) is not None:
            return False
        return self._signing.create(signing.KeyRing(tenant_id, (new_signing_key(self._now_ms()),)))

    def signing_ring(self, tenant_id: str) -> signing.KeyRing:
        ring = self._signing.get(api_keys.check_tenant_id(tenant_id))
        if ring is None:
            raise NoSigningKey(f"tenant {tenant_id!r} has no webhook signing key")
        return ring

    def rotate_signing(
        self, tenant_id: str, *, overlap_seconds: int = signing.DEFAULT_OVERLAP_SECONDS
    ) -> signing.KeyRing:
        """A new signing key; the keys valid now stay valid ``overlap_seconds`` longer.

        The overlap must cover the workers' cache TTL: a worker may sign with the old key
        until its cached ring expires. A tenant without a ring gets its first one."""
        api_keys.check_tenant_id(tenant_id)
        if overlap_seconds < self._cache_seconds:
            raise errors.ValidationError(
                f"must be at least the workers' cache TTL ({self._cache_seconds} s), so "
                "deliveries signed from a cached ring still verify",
                field="overlap_seconds",
            )
        now = self._now_ms()
        key = new_signing_key(now)
        ring = self._signing.get(tenant_id)
        if ring is None:
            first = signing.KeyRing(tenant_id, (key,))
            if self._signing.create(first):
                return first
            ring = self.signing_ring(tenant_id)
        rotated = ring.rotated(key, now_ms=now, overlap_seconds=overlap_seconds)
        self._signing.replace(rotated)
        return rotated
