"""The client-side CPU of each AWS call the ticker and workers make, measured here.

An SDK call spends CPU in the caller's process before and after the network: parameter
validation and serialization, SigV4 signing, the HTTP exchange, parsing, and our own
adapter's encoding and decoding of items. On a Lambda's fraction of a vCPU that is the
ticker's main cost, so the simulator charges it per call. It is measured by making each
call through the real adapters (boto3, DynamoDB and SQS) against moto's server running in
other threads, and reading this thread's CPU clock alone.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import resource
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from fireline import ports
from fireline.domain import model, occurrence, schedule
from fireline.sim import network as sim_network

REGION = "us-east-1"
_RUNS = itertools.count(1)


@contextlib.contextmanager
def _moto_server() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        # Its own API has no address getter; the port is the one the OS chose.
        wsgi = server._server
        assert wsgi is not None
        yield f"http://127.0.0.1:{int(wsgi.server_address[1])}"
    finally:
        server.stop()


def _clients(endpoint: str) -> tuple[Any, Any]:
    import boto3
    from botocore.config import Config

    from fireline import wiring

    session = boto3.session.Session(
        aws_access_key_id="calibration", aws_secret_access_key="calibration", region_name=REGION
    )
    # The production client's options, but a local server on a busy machine may take longer
    # than its read timeout: a wait costs no client CPU, so waiting longer changes nothing
    # measured.
    config = wiring.BOTO_CONFIG.merge(Config(read_timeout=120))
    return (
        session.client("dynamodb", endpoint_url=endpoint, config=config),
        session.client("sqs", endpoint_url=endpoint, config=config),
    )


def _tables(ddb: Any, prefix: str) -> None:
    ddb.create_table(
        TableName=f"{prefix}schedules",
        KeySchema=[
            {"AttributeName": "tenant_id", "KeyType": "HASH"},
            {"AttributeName": "schedule_id", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "tenant_id", "AttributeType": "S"},
            {"AttributeName": "schedule_id", "AttributeType": "S"},
            {"AttributeName": "due_shard", "AttributeType": "N"},
            {"AttributeName": "next_fire_ms", "AttributeType": "N"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "due",
                "KeySchema": [
                    {"AttributeName": "due_shard", "KeyType": "HASH"},
                    {"AttributeName": "next_fire_ms", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.create_table(
        TableName=f"{prefix}occurrences",
        KeySchema=[
            {"AttributeName": "schedule_id", "KeyType": "HASH"},
            {"AttributeName": "occurrence_sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "schedule_id", "AttributeType": "S"},
            {"AttributeName": "occurrence_sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def _cpu_per_call(call: Callable[[int], object], repeats: int) -> float:
    """Median of this thread's CPU per call, over a few batches (robust to a GC pause)."""
    call(0)  # warm: first calls load models and open connections
    batches = []
    per_batch = max(1, repeats // 5)
    done = 1
    for _ in range(5):
        started = time.thread_time()
        for _ in range(per_batch):
            call(done)
            done += 1
        batches.append((time.thread_time() - started) / per_batch)
    return statistics.median(batches)


def measure(repeats: int = 200) -> sim_network.SdkCost:
    """Client CPU (seconds of this machine's CPU) of each operation the ticker and the
    workers make, through the production adapters."""
    from fireline.adapters import occurrences_dynamodb, schedules_dynamodb, sqs

    start = datetime(2026, 5, 1, 12, tzinfo=UTC)
    with _moto_server() as endpoint:
        ddb, sqs_client = _clients(endpoint)
        # moto's state is the process's: a measurement after another in the same run (a
        # benchmark module after another) makes tables of its own.
        prefix = f"calibration-{next(_RUNS)}-"
        _tables(ddb, prefix)
        queue_url = sqs_client.create_queue(QueueName=f"{prefix}default")["QueueUrl"]
        schedules = schedules_dynamodb.DynamoScheduleStore(ddb, f"{prefix}schedules")
        occurrences = occurrences_dynamodb.DynamoOccurrenceStore(ddb, f"{prefix}occurrences")
        queue = sqs.SqsWorkQueue(sqs_client, {"default": queue_url})
        timing = schedule.Timing(spec=schedule.parse_spec("cron(0 * * * * *)"))
        items = [
            model.Schedule(
                tenant_id=f"tenant-{n % 10}",
                schedule_id=f"sch{n:05d}",
                timing=timing,
                spec_text="cron(0 * * * * *)",
                target={"type": "python", "handler": "noop"},
                next_fire=start + timedelta(minutes=n % 7),
            )
            for n in range(400)
        ]
        for item in items:
            schedules.create(item)
        keys = [(i.tenant_id, i.schedule_id) for i in items]
        body = {
            "v": 1,
            "occurrence_key": occurrence.occurrence_key("sch00001", 1, start),
            "tenant_id": "tenant-1",
            "schedule_id": "sch00001",
            "version": 1,
            "fire_time": occurrence.format_fire_time(start),
            "job_class": "default",
        }
        messages = [ports.OutboundMessage(body=body, delay_seconds=5) for _ in range(10)]

        def advance(n: int) -> object:
            item = items[n % len(items)]
            return schedules.advance(
                item.tenant_id,
                item.schedule_id,
                expected_next_fire=start,  # refused or not, the call costs the same
                expected_version=1,
                next_fire=start + timedelta(minutes=1),
                now=start,
            )

        def put(n: int) -> object:
            row = occurrence.new(
                tenant_id="tenant-1",
                schedule_id="sch00001",
                version=1,
                fire_time=start + timedelta(seconds=n),
                job_class="default",
                created_at=start,
            )
            return occurrences.put_new(row)

        def claim(n: int) -> object:
            row = occurrence.new(
                tenant_id="tenant-1",
                schedule_id="sch00002",
                version=1,
                fire_time=start + timedelta(seconds=n),
                job_class="default",
                created_at=start,
            )
            return occurrences.claim(row.key, now=start, until=start, intent=row)

        measured = {
            "dynamodb.Query": _cpu_per_call(
                lambda n: schedules.due(n % 16, until=start + timedelta(hours=1), limit=25),
                repeats,
            ),
            # A batch read of one key: the call's own cost (its per-key cost below).
            "dynamodb.BatchGetItem": _cpu_per_call(
                lambda n: schedules.get_many(keys[n % len(keys) : n % len(keys) + 1]), repeats
            ),
            "dynamodb.GetItem": _cpu_per_call(
                lambda n: schedules.get(*keys[n % len(keys)]), repeats
            ),
            # Two calls per repeat: an advance and a claim (which writes the row).
            "dynamodb.UpdateItem": _cpu_per_call(lambda n: (advance(n), claim(n)), repeats) / 2,
            "dynamodb.PutItem": _cpu_per_call(put, repeats),
            "sqs.SendMessageBatch": _cpu_per_call(
                lambda n: queue.send_batch("default", messages), repeats
            ),
        }
        # A hundred keys, the most one request carries: each key past the first adds
        # its share (serializing it, parsing its item).
        hundred = _cpu_per_call(
            lambda n: schedules.get_many(keys[(n * 100) % 300 : (n * 100) % 300 + 100]),
            repeats // 4,
        )
    everything = sorted(measured.values())
    per_key = max(0.0, hundred - measured["dynamodb.BatchGetItem"]) / 99
    return sim_network.SdkCost(
        per_call=measured,
        default=everything[len(everything) // 2],
        per_item={"dynamodb.BatchGetItem": per_key},
    )


# --- a worker environment's start and a Python attempt's child ----------------------------------

WORKER_HANDLER_MODULE = "fireline.handlers.worker"


def import_cpu_seconds(module: str = WORKER_HANDLER_MODULE, repeats: int = 3) -> float:
    """CPU seconds (this machine's) a fresh interpreter spends importing ``module``: what
    a new Lambda environment does before its first invocation (its init), the median of
    ``repeats`` fresh interpreters. The interpreter's own start is not counted (Lambda's
    runtime has started before the handler's module is imported)."""
    code = (
        "import time, sys\n"
        "t = time.process_time()\n"
        f"import {module}\n"
        "sys.stdout.write(repr(time.process_time() - t))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.setdefault("AWS_DEFAULT_REGION", REGION)
    runs = []
    for _ in range(repeats):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        runs.append(float(done.stdout.strip().splitlines()[-1]))
    return statistics.median(runs)


def fork_cpu_seconds(repeats: int = 40) -> float:
    """CPU seconds (this machine's) of one child process for a Python attempt, as
    fireline.services.isolation makes it: the fork, the child's exit and its reaping,
    the parent's CPU and the child's both, the median of ``repeats``. Measured from this
    process: a fork's cost grows with the parent's memory, and a benchmark's process
    holds more than a worker's, so this leans high."""

    def used() -> float:
        mine = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime

    runs = []
    for _ in range(repeats):
        before = used()
        pid = os.fork()
        if pid == 0:  # the child: nothing but its exit, as a no-op job's child
            os._exit(0)
        os.waitpid(pid, 0)
        runs.append(used() - before)
    return statistics.median(runs)


# --- an HTTP target's call ------------------------------------------------------------------


@contextlib.contextmanager
def _https_receiver() -> Iterator[tuple[int, ssl.SSLContext]]:
    """An HTTPS server on 127.0.0.1 answering every POST at once (its own threads), and a
    client TLS context that trusts its certificate: a new self-signed one, its key a P-256
    key, as public endpoints' usually are."""
    import http.server
    import tempfile
    import threading

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    with tempfile.TemporaryDirectory() as folder:
        cert_path, key_path = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
        with open(cert_path, "wb") as out:
            out.write(certificate.public_bytes(serialization.Encoding.PEM))
        with open(key_path, "wb") as out:
            out.write(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
        server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_tls.load_cert_chain(cert_path, key_path)
        client_tls = ssl.create_default_context(cafile=cert_path)

        class Answer(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
        server.socket = server_tls.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield int(server.server_address[1]), client_tls
        finally:
            server.shutdown()


def http_target_cpu_seconds(repeats: int = 100) -> float:
    """Client CPU (seconds of this machine's) of one HTTP target's call as a worker makes
    it (services.targets' HTTP target: the body built and signed, the URL and every
    address its name resolves to checked, a pinned connection, TLS's handshake, the POST
    and its answer), to an HTTPS endpoint on this machine answering at once. The
    connection is new each call (a target's address is checked and pinned at every
    send), so the handshake is in every call, as deployed."""
    from fireline.domain import egress, signing
    from fireline.services import targets, webhook

    key = signing.SigningKey("sig_calibration", "calibration-secret", created_ms=0)
    with _https_receiver() as (port, tls):
        runner = targets.TargetRunner(
            registry=targets.Registry(),
            signing_key=lambda tenant_id: key,
            lambda_client=lambda timeout, credentials: None,
            sqs_client=lambda credentials: None,
            # The loopback allowed (the endpoint is here), https as deployed.
            egress=webhook.Egress(
                policy=egress.EgressPolicy.parse("", "127.0.0.0/8"),
                resolve=lambda host, port: ["127.0.0.1"],
                tls=tls,
            ),
        )
        target = {"type": "http", "url": f"https://localhost:{port}/hook"}
        start = datetime(2026, 5, 1, 12, tzinfo=UTC)

        def call(n: int) -> object:
            context = targets.JobContext(
                occurrence_key=occurrence.occurrence_key("sch00001", 1, start),
                tenant_id="tenant-1",
                schedule_id="sch00001",
                fire_time=start,
                attempt=1,
                payload={"n": n},
            )
            return runner.run(target, context, timeout=10.0)

        return _cpu_per_call(call, repeats)
