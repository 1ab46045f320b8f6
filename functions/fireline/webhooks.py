"""Verifying Fireline's webhook deliveries, for receivers.

Standard library only (with ``fireline.domain``), so a receiver can install the package
or copy this module with ``fireline/domain/signing.py`` and ``errors.py``::

    from fireline import webhooks

    key_id = webhooks.verify(
        {"sig_4f2a...": "whsec_..."},          # the tenant's valid keys, by key id
        headers=request.headers,
        method=request.method,
        url="https://hooks.example.com/fireline",  # the URL the target was registered with
        body=request.body,                        # the raw bytes, before any JSON parsing
    )

``verify`` returns the key id that verified, or raises :class:`InvalidSignature` (one of
its subclasses says why). The replay window: a signature is accepted for ``tolerance``
seconds (default 300) either side of its timestamp; within it, a repeated delivery is
recognised by its ``Idempotency-Key`` header (the occurrence key), which stays the same
on every attempt of a job.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Mapping

from fireline.domain import errors, signing

SIGNATURE_HEADER = signing.SIGNATURE_HEADER
DEFAULT_TOLERANCE_SECONDS = signing.DEFAULT_TOLERANCE_SECONDS


class InvalidSignature(Exception):
    """the delivery's signature does not verify"""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or "").strip())


class MalformedSignature(InvalidSignature):
    """the X-Fireline-Signature header is missing or not in Fireline's format"""


class UnknownKey(InvalidSignature):
    """the delivery is signed with a key id this receiver does not hold"""


class OutsideReplayWindow(InvalidSignature):
    """the signature's timestamp is outside the replay window"""


class SignatureMismatch(InvalidSignature):
    """the signature does not match this method, URL and body"""


def verify(
    secrets: Mapping[str, str | bytes],
    *,
    headers: Mapping[str, str],
    method: str,
    url: str,
    body: bytes,
    now: float | None = None,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
) -> str:
    """Check one delivery against the tenant's keys (key id -> secret): the key id used.

    ``url`` is the URL the target was registered with, exactly (scheme, host, path and
    query), as Fireline signs it; a receiver behind a proxy passes that, not what its
    framework reconstructs."""
    value = next((v for k, v in headers.items() if k.lower() == SIGNATURE_HEADER.lower()), None)
    parsed = signing.parse_header(value) if value else None
    if parsed is None:
        raise MalformedSignature()
    secret = secrets.get(parsed.key_id)
    if secret is None:
        raise UnknownKey(f"no key {parsed.key_id!r} among {sorted(secrets)}")
    moment = time.time() if now is None else now
    if abs(moment - parsed.timestamp) > tolerance:
        raise OutsideReplayWindow(
            f"signed at {parsed.timestamp}, {abs(moment - parsed.timestamp):.0f} s from now "
            f"(window: {tolerance} s)"
        )
    expected = signing.digest(secret, parsed.timestamp, method, url, body)
    if not any(hmac.compare_digest(expected, s) for s in parsed.signatures):
        raise SignatureMismatch()
    return parsed.key_id


def keys_from_document(
    document: str | Mapping[str, object], *, now: float | None = None
) -> dict[str, str]:
    """Key id -> secret of the keys valid at ``now``, from the JSON document
    ``fireline admin signing show --json`` prints (a key past its overlap is left out)."""
    text = document if isinstance(document, str) else json.dumps(document)
    try:
        ring = signing.KeyRing.from_json(text)
    except errors.ValidationError as exc:
        raise ValueError(str(exc)) from exc
    moment = time.time() if now is None else now
    return ring.secrets_at(int(moment * 1000))
