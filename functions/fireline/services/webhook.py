"""One POST to a tenant's webhook, through the SSRF guard.

The name is resolved once, every address it resolves to is checked against the egress
policy (``fireline.domain.egress``), and the connection goes to the address that was
checked: DNS is pinned for the connection, so a name that answers a public address to the
check and a private one to the connect (DNS rebinding) reaches nothing. The request still
names the host (the Host header, and the TLS SNI and certificate check for https).
Redirects are never followed: a 3xx is the answer, so the signature and the tenant's
headers go nowhere but the registered URL.

What goes wrong is told in categories (:class:`Refused`, :class:`Unreachable`,
:class:`TimedOut`): their text is what a tenant sees, and it carries no network detail
(no address, no "refused" versus "reset" versus "no route"), so the exit reason of a job
is not a port scanner. The detail goes to the operator's log only.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aws_lambda_powertools import Logger

from fireline.domain import egress, errors

logger = Logger(service="fireline", child=True)

# Resolves (host, port) to the addresses a connection may go to.
Resolver = Callable[[str, int], list[str]]
# Opens a TCP connection to (address, port) within a timeout.
Connector = Callable[[str, int, float], socket.socket]
MAX_ANSWER_BYTES = 64 * 1024
# getaddrinfo has no timeout of its own (the system's resolver retries for as long as its
# configuration says) and cannot be interrupted: names are resolved on these threads, and
# a send waits for its answer only until its deadline. A resolution that hangs keeps its
# thread until the resolver gives up; with every thread stuck, later names wait their
# turn and time out, never adding threads.
RESOLVER_THREADS = 4
_resolvers = concurrent.futures.ThreadPoolExecutor(
    max_workers=RESOLVER_THREADS, thread_name_prefix="fireline-resolve"
)


class SendFailed(Exception):
    """the webhook could not be called"""

    def __init__(self) -> None:
        # The docstring is the message: a category, the same for every such failure.
        super().__init__((type(self).__doc__ or "").strip())


class Refused(SendFailed):
    """destination not allowed or not resolved"""


class Unreachable(SendFailed):
    """no connection to the destination"""


class TimedOut(SendFailed):
    """no answer in time"""


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def system_connector(address: str, port: int, timeout: float) -> socket.socket:
    return socket.create_connection((address, port), timeout=timeout)


@dataclass(frozen=True)
class Egress:
    """The operator's policy and the network it is applied to (injectable for tests)."""

    policy: egress.EgressPolicy = field(default_factory=egress.EgressPolicy)
    resolve: Resolver = system_resolver
    connect: Connector = system_connector
    tls: ssl.SSLContext | None = None  # None: the system's trust store


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    location: str | None


def post(
    network: Egress,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    tenant_id: str,
    timeout: float,
) -> Answer:
    """POST ``body`` to ``url`` for ``tenant_id``: the answer, whatever its status.

    Raises :class:`Refused` before any connection when the URL or an address its name
    resolves to is not allowed, :class:`Unreachable` or :class:`TimedOut` afterwards."""
    ends = time.monotonic() + timeout
    parts = urllib.parse.urlsplit(url)
    try:
        egress.check_url(url, tenant_id, network.policy)
    except errors.ValidationError as exc:
        _log_refusal(tenant_id, parts.hostname, exc.message)
        raise Refused() from exc
    host = (parts.hostname or "").rstrip(".")
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    address = _checked_address(network, host, port, tenant_id, timeout)
    left = ends - time.monotonic()
    if left <= 0:
        raise TimedOut()
    connection = _connection(network, parts.scheme.lower(), host, port, address, left)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request("POST", path, body=body, headers=dict(headers))
        response = connection.getresponse()
        data = response.read(MAX_ANSWER_BYTES)
        return Answer(response.status, data, response.getheader("Location"))
    except TimeoutError as exc:
        raise TimedOut() from exc
    except (OSError, http.client.HTTPException) as exc:
        detail = {"tenant_id": tenant_id, "detail": repr(exc)}
        logger.info("webhook unreachable", extra={"action": "target.http.unreachable", **detail})
        raise Unreachable() from exc
    finally:
        connection.close()


def _checked_address(network: Egress, host: str, port: int, tenant_id: str, timeout: float) -> str:
    """The one address the connection goes to: every address the name has must pass (a
    name with one private address among public ones is refused, not tried elsewhere).
    A name not resolved within ``timeout`` is :class:`TimedOut`."""
    literal = egress.parse_address(host)
    if literal is not None:
        found = [str(literal)]
    else:
        pending = _resolvers.submit(network.resolve, host, port)
        try:
            found = pending.result(timeout=max(0.0, timeout))
        except concurrent.futures.TimeoutError as exc:
            pending.cancel()  # not started yet (every resolver thread busy): never start it
            _log_refusal(tenant_id, host, f"not resolved in {timeout:.1f} s")
            raise TimedOut() from exc
        except (OSError, UnicodeError) as exc:
            _log_refusal(tenant_id, host, f"not resolved: {exc!r}")
            raise Refused() from exc
    addresses = [egress.parse_address(a) for a in found]
    if not addresses:
        _log_refusal(tenant_id, host, "no address")
        raise Refused()
    for address in addresses:
        refused = network.policy.refusal(address) if address is not None else "unparsed"
        if refused is not None:
            _log_refusal(tenant_id, host, f"resolves to a {refused} address ({address})")
            raise Refused()
    return str(addresses[0])


def _log_refusal(tenant_id: str, host: str | None, why: str) -> None:
    logger.warning(
        "webhook refused",
        extra={"action": "target.http.refused", "tenant_id": tenant_id, "host": host, "why": why},
    )


def _connection(
    network: Egress, scheme: str, host: str, port: int, address: str, timeout: float
) -> http.client.HTTPConnection:
    if scheme == "https":
        context = network.tls or ssl.create_default_context()
        return _PinnedHTTPS(host, port, address, network.connect, timeout, context)
    return _PinnedHTTP(host, port, address, network.connect, timeout)


class _PinnedHTTP(http.client.HTTPConnection):
    """Names ``host`` in the request, connects to ``address`` (the checked one)."""

    def __init__(
        self, host: str, port: int, address: str, connect: Connector, timeout: float
    ) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address
        self._connect = connect

    def connect(self) -> None:
        self.sock = self._connect(self._address, self.port, self.timeout)  # type: ignore[arg-type]


class _PinnedHTTPS(http.client.HTTPSConnection):
    """As :class:`_PinnedHTTP`, with TLS: SNI and the certificate check use ``host``."""

    def __init__(
        self,
        host: str,
        port: int,
        address: str,
        connect: Connector,
        timeout: float,
        context: ssl.SSLContext,
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._address = address
        self._connect = connect
        self._tls = context

    def connect(self) -> None:
        raw = self._connect(self._address, self.port, self.timeout)  # type: ignore[arg-type]
        self.sock = self._tls.wrap_socket(raw, server_hostname=self.host)
