"""A small JSON client for the Fireline HTTP API (standard library only).

Every answer outside 2xx becomes one typed ``ApiError`` carrying the API's error shape
``{"error": {"type", "message", "field"}}``; a server that cannot be reached becomes
``ApiUnreachable`` naming the URL. Callers never see ``urllib`` exceptions.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Mapping
from typing import Any

USER_AGENT = "fireline-cli/0.1"
DEFAULT_TIMEOUT_SECONDS = 30.0


class ClientError(Exception):
    """The Fireline API call failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class ApiError(ClientError):
    """The Fireline API refused the request."""

    def __init__(
        self,
        status: int,
        type: str,  # the API error shape's name for it
        message: str | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        #: Dotted path of the field at fault (``spec``, ``Idempotency-Key``), when named.
        self.field = field

    def __str__(self) -> str:
        where = f"{self.field}: " if self.field else ""
        return f"{where}{self.message} (HTTP {self.status})"


class ApiUnreachable(ClientError):
    """The Fireline API could not be reached."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach the Fireline API at {url}: {reason}")
        self.url = url
        self.reason = reason


class ApiClient:
    """Send JSON requests to one Fireline API endpoint.

    ``base_url`` may carry a path (an API Gateway stage such as ``.../Prod``): routes are
    appended to it, not resolved against it.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"the API URL must be http(s)://host[:port][/path], got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, object | None] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        """Send one request; return the status and the decoded JSON body (None when empty).

        ``path`` is already quoted (see ``route``); ``query`` entries that are None are left
        out. Raises ``ApiError`` for any status outside 2xx and ``ApiUnreachable`` when no
        answer came back.
        """
        url = self.base_url + path
        params = {k: str(v) for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urllib.parse.urlencode(params)
        sent = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if self.api_key is not None:
            sent["x-api-key"] = self.api_key
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        call = urllib.request.Request(url, data=data, headers=sent, method=method)
        try:
            with urllib.request.urlopen(call, timeout=self.timeout) as answer:
                status, raw = answer.status, answer.read()
        # HTTPError is a URLError and an OSError: it must be caught first, it is an answer.
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
            exc.close()
            raise _api_error(status, raw, exc.reason) from None
        except urllib.error.URLError as exc:
            raise ApiUnreachable(self.base_url, str(exc.reason)) from None
        except TimeoutError:
            raise ApiUnreachable(self.base_url, f"no answer within {self.timeout:g} s") from None
        except OSError as exc:  # a connection reset or closed mid-answer
            raise ApiUnreachable(self.base_url, str(exc) or type(exc).__name__) from None
        if not raw.strip():
            return status, None
        try:
            return status, json.loads(raw)
        except ValueError:
            raise ApiError(
                status, "invalid_response", f"the answer is not JSON: {_excerpt(raw)}"
            ) from None


def post_form(
    url: str,
    fields: Mapping[str, str],
    document: bytes,
    *,
    filename: str = "definition.json",
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> None:
    """POST a multipart form (``fields`` first, then ``document`` as the field ``file``), as
    a presigned S3 POST takes it; raises ``ApiError`` for an answer outside 2xx (S3's XML
    error text in its message) and ``ApiUnreachable`` when no answer came back."""
    boundary = f"fireline-{uuid.uuid4().hex}"
    parts: list[bytes] = []
    for name, value in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
            f"{value}\r\n".encode()
        )
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
        f'filename="{filename}"\r\nContent-Type: application/json\r\n\r\n'.encode()
        + document
        + f"\r\n--{boundary}--\r\n".encode()
    )
    call = urllib.request.Request(
        url,
        data=b"".join(parts),
        headers={
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "User-Agent": USER_AGENT,
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(call, timeout=timeout) as answer:
            answer.read()
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        exc.close()
        raise ApiError(exc.code, "upload", f"the upload was refused: {_excerpt(raw)}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
        raise ApiUnreachable(url, str(reason)) from None


def route(*segments: str) -> str:
    """A path from segments, each quoted whole (an id can never add a path level)."""
    return "".join("/" + urllib.parse.quote(s, safe="") for s in segments)


def _api_error(status: int, raw: bytes, reason: object) -> ApiError:
    """Read the API's error shape; fall back on what a gateway or proxy said instead."""
    try:
        document = json.loads(raw) if raw.strip() else None
    except ValueError:
        document = None
    if isinstance(document, dict):
        error = document.get("error")
        if isinstance(error, dict):
            field = error.get("field")
            return ApiError(
                status,
                str(error.get("type") or "error"),
                str(error.get("message") or reason),
                str(field) if field else None,
            )
        # API Gateway's own refusals (missing key, authorizer deny) are {"message": ...}.
        if isinstance(document.get("message"), str):
            return ApiError(status, "http", document["message"])
    return ApiError(status, "http", _excerpt(raw) if raw.strip() else str(reason))


def _excerpt(raw: bytes, limit: int = 200) -> str:
    text = raw.decode("utf-8", errors="replace").strip()
    return text if len(text) <= limit else text[:limit] + "..."
