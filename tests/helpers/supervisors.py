"""A long-job supervisor for tests on the memory adapters: it accepts every call and
keeps what each execution was started with."""

from __future__ import annotations

from typing import Any


class RecordingSupervisor:
    def __init__(self) -> None:
        self.inputs: list[dict[str, Any]] = []
        self.stopped: list[str] = []
        self.succeeded: list[dict[str, Any]] = []  # each task's output
        self.failed: list[tuple[str, str]] = []  # each task's error and cause

    def start(self, name: str, job_input: dict[str, Any]) -> str:
        self.inputs.append(job_input)
        return name

    def stop(self, execution: str, cause: str) -> None:
        self.stopped.append(execution)

    def heartbeat(self, task_token: str) -> bool:
        return True

    def succeed(self, task_token: str, output: dict[str, Any]) -> bool:
        self.succeeded.append(output)
        return True

    def fail(self, task_token: str, error: str, cause: str) -> bool:
        self.failed.append((error, cause))
        return True
