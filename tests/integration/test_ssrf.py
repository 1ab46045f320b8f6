"""The SSRF guard of HTTP targets, against local HTTP servers.

A local server listens on 127.0.0.1, itself a loopback address the guard refuses. So the
network is injected: a resolver answering the address under test for a name, and a
connector that routes every connection to the local server, whatever address it was
asked for (as a network would route a private address to a live host). A refused send
must then leave both untouched: the connector never asked, the server never called. A
control case proves the same route delivers when the address is allowed.
"""

from __future__ import annotations

import datetime as dt
import http.server
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fireline.domain import egress, errors, occurrence, retry, workflow
from fireline.services import targets, webhook
from fireline.services.schedules import JobDraft, ScheduleDraft
from fireline.services.worker import Result
from helpers.flows import signing_key
from helpers.memory_system import REMAINING_MS, MemorySystem, missing_workflows

TENANT = "tenant-a"
PUBLIC = "93.184.215.14"  # a public address: the control case
HTTP_EVERYONE = egress.EgressPolicy.parse("*", "")

# Every refused range, in every form an address can be written or resolved to.
REFUSED_ADDRESSES = [
    ("127.0.0.1", egress.LOOPBACK),
    ("127.255.255.254", egress.LOOPBACK),
    ("::1", egress.LOOPBACK),
    ("::ffff:127.0.0.1", egress.LOOPBACK),  # IPv4-mapped IPv6
    ("::127.0.0.1", egress.LOOPBACK),  # IPv4-compatible IPv6
    ("169.254.169.254", egress.METADATA),
    ("::ffff:169.254.169.254", egress.METADATA),
    ("fd00:ec2::254", egress.METADATA),
    ("169.254.170.2", egress.METADATA),
    ("168.63.129.16", egress.METADATA),
    ("100.100.100.200", egress.METADATA),
    ("169.254.1.1", egress.LINK_LOCAL),
    ("fe80::1", egress.LINK_LOCAL),
    ("10.0.0.1", egress.PRIVATE),
    ("172.16.5.4", egress.PRIVATE),
    ("172.31.255.255", egress.PRIVATE),
    ("192.168.1.1", egress.PRIVATE),
    ("100.64.0.1", egress.PRIVATE),
    ("::ffff:10.0.0.1", egress.PRIVATE),
    ("64:ff9b::a00:1", egress.PRIVATE),  # NAT64 of 10.0.0.1
    ("2002:a00:1::1", egress.PRIVATE),  # 6to4 of 10.0.0.1
    ("fec0::1", egress.PRIVATE),
    ("fc00::1", egress.UNIQUE_LOCAL),
    ("fd12:3456::1", egress.UNIQUE_LOCAL),
    ("224.0.0.1", egress.MULTICAST),
    ("239.255.255.250", egress.MULTICAST),
    ("ff02::1", egress.MULTICAST),
    ("0.0.0.0", egress.UNSPECIFIED),
    ("::", egress.UNSPECIFIED),
    ("240.0.0.1", egress.RESERVED),
    ("255.255.255.255", egress.RESERVED),
    ("192.0.2.1", egress.RESERVED),  # documentation
    ("198.18.0.1", egress.RESERVED),  # benchmarking
    ("2001:db8::1", egress.RESERVED),  # documentation
]
# Literal hosts as a URL may spell them: decimal, octal, hex, short and bracketed forms.
LITERAL_HOSTS = [
    ("127.0.0.1", "127.0.0.1"),
    ("2130706433", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"),
    ("0x7f.0.0.1", "127.0.0.1"),
    ("0x7f000001", "127.0.0.1"),
    ("017700000001", "127.0.0.1"),
    ("127.1", "127.0.0.1"),
    ("127.0.1", "127.0.0.1"),
    ("0251.0376.0251.0376", "169.254.169.254"),
    ("2852039166", "169.254.169.254"),
    ("0xa9fea9fe", "169.254.169.254"),
    ("169.254.43518", "169.254.169.254"),
    ("[fd00:ec2::254]", "fd00:ec2::254"),
    ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1"),
    ("[::ffff:7f00:1]", "::ffff:127.0.0.1"),
    ("[::1]", "::1"),
    ("[fe80::1%25eth0]", "fe80::1"),
    ("10.1", "10.0.0.1"),
    ("0", "0.0.0.0"),
]


# --- the network, injected -----------------------------------------------------------------


class Receiver:
    """A local webhook receiver: it records each request and answers ``status``."""

    def __init__(self, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append({"headers": dict(self.headers), "body": body})
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "13")
                self.end_headers()
                self.wfile.write(b"secret detail")

            def log_message(self, *args: Any) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        # A short poll: shutdown() waits for it, once per test.
        serve = lambda: self.server.serve_forever(poll_interval=0.01)  # noqa: E731
        threading.Thread(target=serve, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Network:
    """Names resolve as told; every connection, to any address, reaches ``port`` on the
    loopback. Records what was resolved and where connections were asked to go."""

    def __init__(self, port: int, names: dict[str, list[str]] | None = None) -> None:
        self.port = port
        self.names = names or {}
        self.resolved: list[str] = []
        self.connected: list[tuple[str, int]] = []

    def resolve(self, host: str, port: int) -> list[str]:
        self.resolved.append(host)
        if host not in self.names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.names[host]

    def connect(self, address: str, port: int, timeout: float) -> socket.socket:
        self.connected.append((address, port))
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)

    def egress(self, policy: egress.EgressPolicy = HTTP_EVERYONE, **kw: Any) -> webhook.Egress:
        return webhook.Egress(policy=policy, resolve=self.resolve, connect=self.connect, **kw)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def context(tenant: str = TENANT) -> targets.JobContext:
    return targets.JobContext(
        occurrence_key="sch_1#1#2026-05-01T12:00:00Z",
        tenant_id=tenant,
        schedule_id="sch_1",
        fire_time=dt.datetime(2026, 5, 1, 12, tzinfo=dt.UTC),
        attempt=1,
        payload={},
    )


def runner(network: webhook.Egress) -> targets.TargetRunner:
    return targets.TargetRunner(
        registry=targets.Registry(),
        signing_key=signing_key,
        lambda_client=lambda timeout, credentials: None,
        sqs_client=lambda credentials: None,
        egress=network,
    )


def send(network: webhook.Egress, url: str, tenant: str = TENANT, **target: Any) -> Any:
    return runner(network).run(
        {"type": "http", "url": url, "timeout_seconds": 5, **target}, context(tenant), timeout=5
    )


# --- send time: the resolved address is checked, and is the one connected to --------------


def test_control_a_public_address_is_connected_to_by_the_checked_ip_naming_the_host(
    receiver: Receiver,
) -> None:
    # GIVEN a name resolving to a public address, on a network routing it to the receiver
    network = Network(receiver.port, {"hooks.tenant.test": [PUBLIC]})
    # WHEN the target is called
    answer = send(network.egress(), "http://hooks.tenant.test:8080/fire?x=1")
    # THEN the connection went to the address that was checked, and the request reached
    # the receiver naming the host (DNS pinned for the connection, the Host header kept)
    assert answer["status"] == 200
    assert network.resolved == ["hooks.tenant.test"]
    assert network.connected == [(PUBLIC, 8080)]
    (request,) = receiver.requests
    assert request["headers"]["Host"] == "hooks.tenant.test:8080"


@pytest.mark.parametrize(
    ("address", "kind"), REFUSED_ADDRESSES, ids=[a for a, _ in REFUSED_ADDRESSES]
)
def test_a_name_resolving_to_a_refused_address_is_never_connected_to(
    receiver: Receiver, address: str, kind: str
) -> None:
    # GIVEN a name resolving to an address of a refused range (the policy knows why)
    assert egress.category(ipaddress.ip_address(address)) == kind
    network = Network(receiver.port, {"hooks.tenant.test": [address]})
    # WHEN the target is called
    with pytest.raises(targets.TargetFailed) as failed:
        send(network.egress(), "http://hooks.tenant.test/fire")
    # THEN it fails before any connection: the receiver was never called
    assert network.connected == []
    assert receiver.requests == []
    # AND the reason is a category, naming no address, range or port
    assert str(failed.value) == "destination not allowed or not resolved"


@pytest.mark.parametrize(("host", "address"), LITERAL_HOSTS, ids=[h for h, _ in LITERAL_HOSTS])
def test_a_literal_address_in_any_form_is_refused_without_resolving(
    receiver: Receiver, host: str, address: str
) -> None:
    # GIVEN a URL naming a refused address in one of the forms resolvers accept
    assert egress.parse_address(host.replace("%25", "%")) == ipaddress.ip_address(address)
    network = Network(receiver.port)
    # WHEN the target is called (stored as it is: registered before the guard existed)
    with pytest.raises(targets.TargetFailed):
        send(network.egress(), f"http://{host}:{receiver.port}/fire")
    # THEN nothing was resolved, connected to or called
    assert (network.resolved, network.connected, receiver.requests) == ([], [], [])


def test_a_name_with_one_refused_address_among_public_ones_is_refused(receiver: Receiver) -> None:
    network = Network(receiver.port, {"mixed.test": [PUBLIC, "10.0.0.7"]})
    with pytest.raises(targets.TargetFailed):
        send(network.egress(), "http://mixed.test/fire")
    assert (network.connected, receiver.requests) == ([], [])


def test_a_name_that_changes_its_answer_is_resolved_once_and_the_checked_address_used(
    receiver: Receiver,
) -> None:
    # GIVEN a name whose DNS answers public, then the metadata address (rebinding)
    answers = [[PUBLIC], ["169.254.169.254"]]
    network = Network(receiver.port)
    network.resolve = lambda host, port: answers.pop(0)  # type: ignore[method-assign]
    # WHEN the target is called
    send(network.egress(), "http://rebind.test/fire")
    # THEN the name was resolved once, and the connection went to the checked address
    assert answers == [["169.254.169.254"]]
    assert network.connected == [(PUBLIC, 80)]


def test_the_loopback_is_reached_only_where_the_operator_allows_it(receiver: Receiver) -> None:
    url = f"http://127.0.0.1:{receiver.port}/fire"
    # GIVEN the real network (no injection): plain http allowed, the loopback not
    with pytest.raises(targets.TargetFailed):
        send(webhook.Egress(policy=HTTP_EVERYONE), url)
    assert receiver.requests == []
    # WHEN the operator allows the loopback network (the local cloud's setting)
    local = egress.EgressPolicy.parse("*", "127.0.0.0/8,::1/128")
    # THEN the same target reaches it
    assert send(webhook.Egress(policy=local), url)["status"] == 200
    assert len(receiver.requests) == 1
    # AND the metadata address stays refused even inside an allowed network
    everything = egress.EgressPolicy.parse("*", "0.0.0.0/0,::/0")
    assert everything.refusal(ipaddress.ip_address("169.254.169.254")) == egress.METADATA
    assert everything.refusal(ipaddress.ip_address("fd00:ec2::254")) == egress.METADATA
    assert everything.refusal(ipaddress.ip_address("10.0.0.1")) is None


def test_plain_http_is_sent_only_for_tenants_the_operator_allows(receiver: Receiver) -> None:
    network = Network(receiver.port, {"hooks.tenant.test": [PUBLIC]})
    policy = egress.EgressPolicy.parse("tenant-b", "")
    # tenant-a has https only: its http target is refused before anything happens
    with pytest.raises(targets.TargetFailed):
        send(network.egress(policy), "http://hooks.tenant.test/fire", tenant="tenant-a")
    assert (network.resolved, receiver.requests) == ([], [])
    # tenant-b is allowed plain http
    assert (
        send(network.egress(policy), "http://hooks.tenant.test/fire", "tenant-b")["status"] == 200
    )


# --- redirects ------------------------------------------------------------------------------


def test_a_redirect_is_a_failure_naming_the_location_and_is_not_followed() -> None:
    # GIVEN a webhook answering 302 to another server that would accept the request
    elsewhere = Receiver()
    location = f"http://127.0.0.1:{elsewhere.port}/steal"
    redirecting = Receiver(status=302, headers={"Location": location})
    local = egress.EgressPolicy.parse("*", "127.0.0.0/8")
    try:
        # WHEN the target, carrying the tenant's Authorization header, is called
        with pytest.raises(targets.TargetFailed) as failed:
            send(
                webhook.Egress(policy=local),
                f"http://127.0.0.1:{redirecting.port}/fire",
                headers={"Authorization": "Bearer tenant-secret"},
            )
        # THEN the attempt failed naming the status and the location
        assert str(failed.value) == f"HTTP 302: redirect to {location} not followed"
        # AND the signature and the Authorization header went to the registered URL only
        assert len(redirecting.requests) == 1
        assert elsewhere.requests == []
    finally:
        elsewhere.close()
        redirecting.close()


# --- what a tenant reads: a status or a category, no network detail ---------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_exit_reasons_name_a_status_or_a_category_and_no_network_detail() -> None:
    system = MemorySystem()
    # GIVEN targets stored under a wider setting than the one sends now run under
    system.service.egress = egress.EgressPolicy.parse("*", "0.0.0.0/0")
    local = egress.EgressPolicy.parse("*", "127.0.0.0/8")
    failing = Receiver(status=503)
    closed = free_port()
    reasons = {}
    try:
        for name, url in {
            "error status": f"http://127.0.0.1:{failing.port}/x",
            "closed port": f"http://127.0.0.1:{closed}/x",
            "refused address": "http://10.0.0.1:22/x",
            "unresolved name": "http://no-such-host.invalid:6379/x",
        }.items():
            body = system.due_job(
                target={"type": "http", "url": url}, retry=retry.RetryPolicy(max_attempts=1)
            )
            worker = system.worker(runner=runner(webhook.Egress(policy=local)))
            # WHEN the worker runs each failing target
            assert worker.handle(body, remaining_ms=lambda: REMAINING_MS) is Result.DEAD
            row = system.row(body)
            assert row.state is occurrence.State.DEAD
            reasons[name] = row.exit_reason
    finally:
        failing.close()
    # THEN each reason is the status or a category; a refused address and a name that did
    # not resolve read the same, so neither internal DNS nor an address range shows
    assert reasons == {
        "error status": "error: HTTP 503",
        "closed port": "error: no connection to the destination",
        "refused address": "error: destination not allowed or not resolved",
        "unresolved name": "error: destination not allowed or not resolved",
    }
    assert not any(str(closed) in r or "10.0.0.1" in r for r in reasons.values())


# --- https: the checked address is connected to, the name is the SNI and the certificate's ---


@pytest.fixture
def tls_receiver(tmp_path: Path) -> Iterator[tuple[Receiver, ssl.SSLContext]]:
    """A receiver serving https for hooks.tenant.test, and a client context trusting it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hooks.tenant.test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("hooks.tenant.test")]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = Receiver()
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert_file, key_file)
    server.sni: list[str | None] = []  # type: ignore[attr-defined]
    served.sni_callback = lambda sock, sni, ctx: server.sni.append(sni)  # type: ignore[attr-defined]
    server.server.socket = served.wrap_socket(server.server.socket, server_side=True)
    client = ssl.create_default_context(cafile=str(cert_file))
    yield server, client
    server.close()


def test_https_connects_to_the_checked_address_with_the_name_as_sni_and_certificate(
    tls_receiver: tuple[Receiver, ssl.SSLContext],
) -> None:
    server, client = tls_receiver
    network = Network(server.port, {"hooks.tenant.test": [PUBLIC]})
    # WHEN an https target is called (https needs no operator allowance)
    answer = send(network.egress(egress.STRICT, tls=client), "https://hooks.tenant.test/fire")
    # THEN the TLS connection went to the checked address, named the host in SNI, and the
    # certificate was verified for that name
    assert answer["status"] == 200
    assert network.connected == [(PUBLIC, 443)]
    assert server.sni == ["hooks.tenant.test"]  # type: ignore[attr-defined]
    assert server.requests[0]["headers"]["Host"] == "hooks.tenant.test"


# --- registration: obviously bad URLs are refused naming target.url --------------------------


REFUSED_URLS = [
    "http://hooks.example.com/plain-http",
    "https://127.0.0.1/",
    "https://localhost:8443/",
    "https://api.localhost/",
    "https://169.254.169.254/latest/meta-data/",
    "https://metadata.google.internal/computeMetadata/v1/",
    "https://[fd00:ec2::254]/latest/meta-data/",
    "https://10.0.0.1/",
    "https://192.168.1.1/",
    "https://172.16.0.1/",
    "https://2130706433/",
    "https://0177.0.0.1/",
    "https://0x7f.0.0.1/",
    "https://127.1/",
    "https://[::ffff:127.0.0.1]/",
    "https://[::1]/",
    "https://[fe80::1]/",
    "https://[fc00::1]/",
    "https://224.0.0.1/",
    "https://0.0.0.0/",
    "https://user:password@hooks.example.com/",
    "ftp://hooks.example.com/",
]


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_registration_refuses_a_url_no_send_could_be_allowed_to(url: str) -> None:
    system = MemorySystem()
    target = {"type": "http", "url": url}
    # WHEN a schedule and a job are registered with it
    for register in (
        lambda: system.service.create(TENANT, ScheduleDraft(spec="rate(1 hour)", target=target)),
        lambda: system.service.create_job(TENANT, JobDraft(delay_seconds=5, target=target)),
    ):
        with pytest.raises(errors.ValidationError) as refused:
            register()
        # THEN it is refused naming the field
        assert refused.value.field == "target.url"
    flows = missing_workflows()
    with pytest.raises(errors.ValidationError) as refused:
        flows.register(TENANT, "wf", [workflow.NodeSpec("a", target)], [])
    assert refused.value.field == "nodes[0].target.url"
    # AND nothing was stored
    assert system.schedules.list(TENANT, limit=10).items == []
    assert not flows.exists(TENANT, "wf")


def test_registration_takes_plain_http_and_local_addresses_where_the_operator_allows() -> None:
    system = MemorySystem()
    system.service.egress = egress.EgressPolicy.parse(TENANT, "127.0.0.0/8")
    target = {"type": "http", "url": "http://127.0.0.1:9000/hook"}
    created = system.service.create(TENANT, ScheduleDraft(spec="rate(1 hour)", target=target))
    assert created.target["url"] == "http://127.0.0.1:9000/hook"
    # another tenant is still held to https
    with pytest.raises(errors.ValidationError):
        system.service.create("tenant-b", ScheduleDraft(spec="rate(1 hour)", target=target))
