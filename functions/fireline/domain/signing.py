"""Webhook signatures: a tenant's signing keys, what is signed, and the header.

Each tenant has its own key ring (kept in Secrets Manager, one secret per tenant): one
or more keys, each with a key id. Deliveries are signed with the newest key; a rotation
adds a new key and keeps the previous ones valid until the end of an overlap window, so
a receiver that has not yet taken the new key, and a worker whose cached ring still has
the old one, keep working meanwhile.

The signature is an HMAC-SHA256 over the timestamp, the method, the exact URL and the
body, each on its own line::

    X-Fireline-Signature: t=<unix seconds>,keyid=<key id>,v1=<hex digest>
    digest = HMAC-SHA256(secret, "<t>\\n<METHOD>\\n<url>\\n" + body)

So a delivery moved to another URL (another tenant's receiver), sent with another method
or with another body does not verify, and the timestamp bounds when it can be replayed.
Pure: times, ids and secrets come in as arguments.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass, replace
from typing import Any

from fireline.domain import errors

SIGNATURE_HEADER = "X-Fireline-Signature"
# A receiver accepts a signature this long either side of its timestamp (the replay window).
DEFAULT_TOLERANCE_SECONDS = 300
# A rotated-out key stays valid this long after the rotation.
DEFAULT_OVERLAP_SECONDS = 24 * 3600
SCHEME = "v1"
KEY_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# The shortest secret a key may have (the generated ones have 32 random bytes).
MIN_SECRET_CHARS = 16


@dataclass(frozen=True)
class SigningKey:
    key_id: str
    secret: str
    created_ms: int
    # When the key stops being valid (set when a newer key replaces it); None: no end.
    not_after_ms: int | None = None

    def __post_init__(self) -> None:
        if not KEY_ID.match(self.key_id):
            raise errors.ValidationError(
                f"{self.key_id!r} is not 1-64 letters, digits, _ or -", field="key_id"
            )
        if len(self.secret) < MIN_SECRET_CHARS:
            raise errors.ValidationError(
                f"must be at least {MIN_SECRET_CHARS} characters", field="secret"
            )

    def valid_at(self, now_ms: int) -> bool:
        return self.not_after_ms is None or now_ms < self.not_after_ms


@dataclass(frozen=True)
class KeyRing:
    """A tenant's signing keys, oldest first; the last one signs."""

    tenant_id: str
    keys: tuple[SigningKey, ...]

    def __post_init__(self) -> None:
        if not self.keys:
            raise errors.ValidationError("a key ring needs at least one key", field="keys")
        ids = [k.key_id for k in self.keys]
        if len(set(ids)) != len(ids):
            raise errors.ValidationError("key ids repeat", field="keys")

    @property
    def current(self) -> SigningKey:
        return self.keys[-1]

    def valid_at(self, now_ms: int) -> tuple[SigningKey, ...]:
        return tuple(k for k in self.keys if k.valid_at(now_ms))

    def secrets_at(self, now_ms: int) -> dict[str, str]:
        """Key id -> secret of every key valid at ``now_ms``: what a receiver verifies with."""
        return {k.key_id: k.secret for k in self.valid_at(now_ms)}

    def rotated(self, new: SigningKey, *, now_ms: int, overlap_seconds: int) -> KeyRing:
        """``new`` signs from now on; the keys valid now stay valid ``overlap_seconds``
        longer (never longer than they already would), expired ones are dropped."""
        if overlap_seconds < 0:
            raise errors.ValidationError("must be 0 or more", field="overlap_seconds")
        until = now_ms + overlap_seconds * 1000
        kept = tuple(
            replace(k, not_after_ms=until if k.not_after_ms is None else min(k.not_after_ms, until))
            for k in self.valid_at(now_ms)
        )
        return KeyRing(self.tenant_id, (*kept, new))

    def to_document(self) -> dict[str, Any]:
        return {
            "tenant_id": self.tenant_id,
            "keys": [
                {
                    "key_id": k.key_id,
                    "secret": k.secret,
                    "created_ms": k.created_ms,
                    "not_after_ms": k.not_after_ms,
                }
                for k in self.keys
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_document(), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> KeyRing:
        try:
            document = json.loads(text)
            keys = tuple(
                SigningKey(
                    key_id=str(k["key_id"]),
                    secret=str(k["secret"]),
                    created_ms=int(k["created_ms"]),
                    not_after_ms=None if k.get("not_after_ms") is None else int(k["not_after_ms"]),
                )
                for k in document["keys"]
            )
            return cls(str(document["tenant_id"]), keys)
        except (ValueError, KeyError, TypeError) as exc:
            raise errors.ValidationError(
                f"not a signing key document ({type(exc).__name__})", field="keys"
            ) from exc


def signed_content(timestamp: int, method: str, url: str, body: bytes) -> bytes:
    return f"{timestamp}\n{method.upper()}\n{url}\n".encode() + body


def digest(secret: str | bytes, timestamp: int, method: str, url: str, body: bytes) -> str:
    key = secret.encode() if isinstance(secret, str) else secret
    content = signed_content(timestamp, method, url, body)
    return hmac.new(key, content, hashlib.sha256).hexdigest()


def header(key: SigningKey, timestamp: int, method: str, url: str, body: bytes) -> str:
    """The X-Fireline-Signature value of one delivery."""
    value = digest(key.secret, timestamp, method, url, body)
    return f"t={timestamp},keyid={key.key_id},{SCHEME}={value}"


@dataclass(frozen=True)
class ParsedHeader:
    timestamp: int
    key_id: str
    signatures: tuple[str, ...]


def parse_header(text: str) -> ParsedHeader | None:
    """The header's parts; None when it is not one Fireline writes."""
    timestamp: int | None = None
    key_id: str | None = None
    signatures: list[str] = []
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            return None
        if name == "t" and value.isdigit() and len(value) <= 12:
            timestamp = int(value)
        elif name == "keyid":
            key_id = value
        elif name == SCHEME:
            signatures.append(value)
    if timestamp is None or not key_id or not signatures:
        return None
    return ParsedHeader(timestamp, key_id, tuple(signatures))
