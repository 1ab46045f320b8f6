"""dynalite: an independent implementation of DynamoDB (the npm package pinned in
tests/dynalite), run on 127.0.0.1 for a test session.

moto and our memory adapters could share a misreading of DynamoDB's rules; a second,
separately written implementation catches what only one of them gets wrong. The first
run installs the package (``npm ci``, into tests/dynalite/node_modules); without Node.js
the tests that need it are skipped, saying so.

It is a backend of the contract suite when FIRELINE_DYNALITE=1 (``make strictness``, which
CI runs): the suite on it takes about a minute, too long for every ``make test``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from .aws import REGION, load_template

ENABLED = os.environ.get("FIRELINE_DYNALITE") == "1"
ROOT = Path(__file__).resolve().parent.parent / "dynalite"
CLI = ROOT / "node_modules" / "dynalite" / "cli.js"
# What dynalite 4.0.0 does not implement: the tests whose adapter calls need it are
# marked with the reason and run on the other backends only.
NO_TRANSACTIONS = "dynalite has no TransactWriteItems"
NO_RETURN_VALUES_ON_FAILURE = (
    "dynalite ignores ReturnValuesOnConditionCheckFailure (a failed condition returns no item)"
)

_tables = itertools.count()
_template = functools.cache(load_template)


def unavailable() -> str | None:
    """Why dynalite cannot run here, or None once it is installed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None:
        return "Node.js is not installed: dynalite cannot run"
    if not CLI.exists():
        if npm is None:
            return "npm is not installed: dynalite cannot be installed"
        subprocess.run(
            [npm, "ci", "--prefix", str(ROOT), "--no-audit", "--no-fund", "--loglevel=error"],
            check=True,
            timeout=300,
        )
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def server() -> Iterator[str]:
    """dynalite listening on a free port of 127.0.0.1, in memory; its endpoint URL."""
    port = _free_port()
    args = ["--host", "127.0.0.1", "--port", str(port)]
    # Tables are ACTIVE at once (DynamoDB takes seconds; the tests need not wait).
    args += ["--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"]
    node = shutil.which("node") or "node"
    process = subprocess.Popen([node, str(CLI), *args], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dynalite did not start (exit code {process.poll()})")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def client(endpoint: str) -> Any:
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="dynalite",
        aws_secret_access_key="dynalite",
        # A local server: no proxy, and a refused call is an answer, not a reason to retry.
        config=Config(proxies={}, retries={"max_attempts": 1}),
    )


def create_table(ddb: Any, logical: str) -> str:
    """A fresh copy of the template's table ``logical``; its name."""
    props = _template()["Resources"][logical]["Properties"]
    name = f"d{next(_tables)}-{logical}"
    throughput = {"ReadCapacityUnits": 1000, "WriteCapacityUnits": 1000}
    kwargs: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "ProvisionedThroughput": throughput,
    }
    if "GlobalSecondaryIndexes" in props:
        kwargs["GlobalSecondaryIndexes"] = [
            {
                "IndexName": gsi["IndexName"],
                "KeySchema": gsi["KeySchema"],
                "Projection": gsi["Projection"],
                "ProvisionedThroughput": throughput,
            }
            for gsi in props["GlobalSecondaryIndexes"]
        ]
    ddb.create_table(**kwargs)
    ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 0.05})
    return name
