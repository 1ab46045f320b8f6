"""What a target must be for a worker to be able to call it, checked at registration.

A target that cannot even be sent (an HTTP header the client refuses) would fail every
attempt, and one the SSRF rules refuse (``fireline.domain.egress``) would be refused at
every attempt; both are refused when registered instead, naming the field.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from fireline.domain import aws_target, egress, errors

# RFC 9110 field names are tokens.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Field values: visible characters, spaces and tabs; never CR, LF, NUL or other controls
# (a CR/LF would let a value start a header of its own). Beyond ASCII, only what Latin-1
# holds: the HTTP client writes a header value as Latin-1 bytes, and a character outside
# it (a snowman) fails every send with an encoding error instead of being sent.
_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# Length bounds: well inside what servers accept (8 KB for a request's whole header block
# is common), so a header that passes here is never the reason a call is refused.
MAX_HEADER_NAME = 128
MAX_HEADER_VALUE = 2048
# What a target's type may be, and a Python handler's name (as the API's model reads it).
TYPES = ("python", "http", "lambda", "sqs", "workflow", "stepfunctions", "eventbridge", "sns")
HANDLER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,127}")
# An HTTP target's own timeout (the API's bound).
MAX_HTTP_TIMEOUT = 900
# Headers every call carries: set by Fireline (the idempotency key, the signature, the
# body's type, the fire's trace context) or by the HTTP client itself; a target may not
# replace them.
RESERVED_HEADERS = frozenset(
    {
        "idempotency-key",
        "x-fireline-signature",
        "traceparent",
        "content-type",
        "user-agent",
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
    }
)


def check_headers(headers: Mapping[str, Any], *, field: str = "target.headers") -> None:
    for name, value in headers.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise errors.ValidationError(
                f"{name!r} is not a header name (letters, digits and !#$%&'*+-.^_`|~)",
                field=field,
            )
        if len(name) > MAX_HEADER_NAME:
            raise errors.ValidationError(
                f"a header name is {len(name)} characters; at most {MAX_HEADER_NAME}",
                field=field,
            )
        if name.lower() in RESERVED_HEADERS:
            raise errors.ValidationError(f"{name} is set by Fireline", field=field)
        if not isinstance(value, str):
            raise errors.ValidationError(f"the value of {name} is not a string", field=field)
        if len(value) > MAX_HEADER_VALUE:
            raise errors.ValidationError(
                f"the value of {name} is {len(value)} characters; at most {MAX_HEADER_VALUE}",
                field=field,
            )
        if not _VALUE.fullmatch(value):
            if _CONTROLS.search(value):
                raise errors.ValidationError(
                    f"the value of {name} holds a line break or a control character",
                    field=field,
                )
            outside = next(c for c in value if ord(c) > 0xFF)
            raise errors.ValidationError(
                f"the value of {name} holds {outside!r} (U+{ord(outside):04X}); a header "
                "value is sent as Latin-1, which does not hold it",
                field=field,
            )


def check(
    target: Mapping[str, Any],
    *,
    tenant_id: str,
    policy: egress.EgressPolicy = egress.STRICT,
    aws: aws_target.AwsTargetPolicy = aws_target.ROLES_ONLY,
    field: str = "target",
) -> None:
    """Refuse a target no attempt could call, one the SSRF rules refuse, or an AWS target
    the tenant may not call as it stands (typed error naming the field)."""
    kind = target.get("type")
    if kind not in TYPES:
        raise errors.ValidationError(
            f"{kind!r} is not a target type (one of {', '.join(TYPES)})", field=f"{field}.type"
        )
    aws_target.check(target, tenant_id=tenant_id, policy=aws, field=field)
    if kind == "python":
        handler = target.get("handler")
        if not isinstance(handler, str) or not HANDLER_NAME.fullmatch(handler):
            raise errors.ValidationError(
                f"{handler!r} is not a handler name", field=f"{field}.handler"
            )
    if kind == "http":
        url = target.get("url")
        if not isinstance(url, str):
            raise errors.ValidationError("is not a URL", field=f"{field}.url")
        check_request_target(url, field=f"{field}.url")
        egress.check_url(url, tenant_id, policy, field=f"{field}.url")
        timeout = target.get("timeout_seconds", MAX_HTTP_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, int):
            raise errors.ValidationError("is not a whole number", field=f"{field}.timeout_seconds")
        if not 1 <= timeout <= MAX_HTTP_TIMEOUT:
            raise errors.ValidationError(
                f"must be 1 to {MAX_HTTP_TIMEOUT} seconds", field=f"{field}.timeout_seconds"
            )
        headers = target.get("headers") or {}
        if not isinstance(headers, Mapping):
            raise errors.ValidationError("must be an object", field=f"{field}.headers")
        check_headers(headers, field=f"{field}.headers")


def check_request_target(url: str, *, field: str = "target.url") -> None:
    """A URL's path and query go on the request line as they are written: ASCII, with
    no space or control character (the HTTP client refuses anything else at every send).
    Other characters must be percent-encoded (``%E2%98%83``); the API's own parser does
    that for what it accepts, other entries must have done so."""
    parts = urllib.parse.urlsplit(url)
    for part in (parts.path, parts.query):  # the fragment is never sent
        bad = next((c for c in part if not "\x21" <= c <= "\x7e"), None)
        if bad is not None:
            raise errors.ValidationError(
                f"holds {bad!r}, which a request line cannot carry: percent-encode it", field=field
            )
