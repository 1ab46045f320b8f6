"""The deployed worker handler as a simulated invocation's entry point.

fireline.handlers.worker.handler is called as Lambda calls it: an SQS event of the batch's
records and a context, its partial batch response read back. While installed, its worker
is the simulation's and its thread pools are simulated threads, so whatever the handler
does with a batch (its intake, its dispatch, its in-flight bound read from the function's
environment) runs in virtual time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fireline import ports
from fireline.sim import kernel as sim_kernel
from fireline.sim import network as sim_network


class _SimThreadPool:
    """adapters.threads.ThreadPool as the deployed handler uses it, on simulated
    threads of the calling invocation."""

    def __init__(self, kernel: sim_kernel.Kernel, max_workers: int = 32, name: str = "") -> None:
        self._pool = sim_network.SimPool(kernel, max_workers)

    def run(self, calls: Any) -> list[Any]:
        return self._pool.run(calls)

    def close(self) -> None:
        return None

    def __enter__(self) -> _SimThreadPool:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@dataclass
class Context:
    """The Lambda context the deployed handler reads (Powertools' keys, the time left)."""

    function_name: str
    memory_limit_in_mb: int
    aws_request_id: str
    remaining: Callable[[], int]
    function_version: str = "$LATEST"
    log_group_name: str = "/aws/lambda/sim"
    log_stream_name: str = "sim"

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining()


class HandlerEntry:
    """The deployed entry point, fireline.handlers.worker.handler, run as Lambda runs
    it: an SQS event of the batch's records and a context, its partial batch response
    read back. While installed, the handler's worker is the simulation's (wiring.worker)
    and its thread pools are simulated threads (adapters.threads.ThreadPool); the
    function's environment is the template's (``environment``), so whatever the handler
    reads from it (an in-flight bound) is the deployed default. Installed for a run and
    removed after it (``remove``): process-wide, as one simulation runs at a time."""

    def __init__(self, kernel: sim_kernel.Kernel, environment: dict[str, str]) -> None:
        self.kernel = kernel
        self.environment = dict(environment)
        self._saved: list[tuple[Any, str, Any]] = []
        self._saved_env: dict[str, str | None] = {}

    def install(self, make_worker: Callable[[], Any]) -> None:
        import os

        from fireline import wiring
        from fireline.adapters import threads

        kernel = self.kernel

        def pool(max_workers: int = 32, name: str = "") -> _SimThreadPool:
            return _SimThreadPool(kernel, max_workers, name)

        replacements: list[tuple[Any, str, Any]] = [
            (wiring, "worker", make_worker),
            (threads, "ThreadPool", pool),
        ]
        for owner, attribute, replacement in replacements:
            self._saved.append((owner, attribute, getattr(owner, attribute)))
            setattr(owner, attribute, replacement)
        for key, setting in self.environment.items():
            self._saved_env[key] = os.environ.get(key)
            os.environ[key] = setting

    def remove(self) -> None:
        import os

        for owner, attribute, original in reversed(self._saved):
            setattr(owner, attribute, original)
        self._saved.clear()
        for key, before in self._saved_env.items():
            if before is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = before
        self._saved_env.clear()

    def call(
        self,
        received: list[ports.ReceivedMessage],
        context: Context,
    ) -> list[bool]:
        """Each record's outcome: True if the handler reported it failed."""
        from fireline.handlers import worker as worker_handler

        event = {
            "Records": [
                {
                    "messageId": f"{n}",
                    "receiptHandle": m.receipt,
                    "body": json.dumps(m.body),
                    "attributes": {"ApproximateReceiveCount": str(m.receive_count)},
                    "eventSource": "aws:sqs",
                }
                for n, m in enumerate(received)
            ]
        }
        answer = worker_handler.handler(event, context)
        failed = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
        return [str(n) in failed for n in range(len(received))]
