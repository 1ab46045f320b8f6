"""What a target must be for a worker to be able to call it, checked at registration.

A target that cannot even be sent (an HTTP header the client refuses) would fail every
attempt, and one the SSRF rules refuse (``fireline.domain.egress``) would be refused at
every attempt; both are refused when registered instead, naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fireline.domain import aws_target, egress, errors

# RFC 9110 field names are tokens.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Field values: visible characters, spaces and tabs; never CR, LF, NUL or other controls
# (a CR/LF would let a value start a header of its own).
_VALUE = re.compile(r"[\t\x20-\x7e\x80-\U0010ffff]*")
# Length bounds: well inside what servers accept (8 KB for a request's whole header block
# is common), so a header that passes here is never the reason a call is refused.
MAX_HEADER_NAME = 128
MAX_HEADER_VALUE = 2048
# Headers every call carries: set by Fireline (the idempotency key, the signature, the
# body's type) or by the HTTP client itself; a target may not replace them.
RESERVED_HEADERS = frozenset(
    {
        "idempotency-key",
        "x-fireline-signature",
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
            raise errors.ValidationError(
                f"the value of {name} holds a line break or a control character", field=field
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
    aws_target.check(target, tenant_id=tenant_id, policy=aws, field=field)
    if target.get("type") == "http":
        egress.check_url(str(target.get("url", "")), tenant_id, policy, field=f"{field}.url")
        check_headers(target.get("headers") or {}, field=f"{field}.headers")
