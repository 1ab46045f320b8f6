"""Targets as the deployed worker builds them (wiring's clients), against local
endpoints that misbehave the way real ones do: slow, failing, missing."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from fireline import wiring
from fireline.domain import occurrence, retry
from fireline.services.worker import Result
from helpers.memory_system import REMAINING_MS, MemorySystem

FUNCTION_ARN = "arn:aws:lambda:us-east-1:123456789012:function:tenant-report"


class SlowLambda:
    """A Lambda endpoint whose function outlives every deadline: it counts each Invoke
    request and answers none until the test ends."""

    def __init__(self) -> None:
        self.invocations = 0
        self.released = threading.Event()
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                endpoint.invocations += 1
                endpoint.released.wait()  # the function is still running

            def log_message(self, *args: Any) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> SlowLambda:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def deployment_env(endpoint: str) -> dict[str, str]:
    """What the template gives a worker function, pointed at a local endpoint."""
    names = ("SCHEDULES_TABLE", "OCCURRENCES_TABLE", "LEASES_TABLE", "IDEMPOTENCY_TABLE")
    env = {name: "unused" for name in names}
    env |= {f"QUEUE_URL_{c.upper()}": f"{endpoint}/queue/{c}" for c in ("default", "short", "long")}
    env |= {
        "WEBHOOK_SIGNING_SECRET": "a-signing-secret-of-some-length",
        "AWS_ENDPOINT_URL": endpoint,
        "JOB_CLASS": "short",
    }
    return env


@pytest.fixture
def slow_lambda(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowLambda]:
    with SlowLambda() as endpoint:
        for name, value in deployment_env(endpoint.url).items():
            monkeypatch.setenv(name, value)
        wiring.reset()
        try:
            yield endpoint
        finally:
            wiring.reset()


def test_a_lambda_target_slower_than_its_deadline_is_invoked_once_and_fails_with_deadline(
    slow_lambda: SlowLambda,
) -> None:
    system = MemorySystem()
    # GIVEN a job whose Lambda target runs longer than the job's 1 s deadline
    body = system.due_job(
        job_class="short",
        target={"type": "lambda", "function_arn": FUNCTION_ARN},
        deadline_seconds=1,
        retry=retry.RetryPolicy(max_attempts=3),
    )
    worker = system.worker(job_class="short", runner=wiring.target_runner())
    # WHEN the worker runs it with the deployment's Lambda client
    result = worker.handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN the function was invoked once (no SDK retry after the request was sent), and
    # the attempt failed with reason deadline, to be retried under the job's policy
    assert slow_lambda.invocations == 1
    assert result is Result.RETRYING
    row = system.row(body)
    assert (row.state, row.exit_reason, row.attempts) == (occurrence.State.FAILED, "deadline", 1)
