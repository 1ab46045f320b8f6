"""Built-in jobs: Python handlers every deployment has, for examples and smoke tests.

Register your own with ``@registry.register("name")`` in a module the worker imports
(``JOB_MODULES`` in its environment names them). A handler receives a
:class:`fireline.services.targets.JobContext`; raise to fail the attempt, return a
JSON-able value to record it.
"""

from __future__ import annotations

import time
from typing import Any

from fireline.services.targets import JobContext, Registry, TargetFailed

registry = Registry()


@registry.register("noop")
def noop(context: JobContext) -> None:
    return None


@registry.register("echo")
def echo(context: JobContext) -> dict[str, Any]:
    return {"payload": context.payload, "attempt": context.attempt}


@registry.register("sleep")
def sleep(context: JobContext) -> dict[str, Any]:
    seconds = float(context.payload.get("seconds", 1))
    time.sleep(min(seconds, 900))
    return {"slept": seconds}


@registry.register("fail")
def fail(context: JobContext) -> None:
    raise TargetFailed(str(context.payload.get("reason", "this job always fails")))


@registry.register("progress-demo")
def progress_demo(context: JobContext) -> dict[str, Any]:
    """A long job for the local demo: works for a while, reporting its progress."""
    steps = int(context.payload.get("steps", 20))
    for step in range(1, steps + 1):
        time.sleep(float(context.payload.get("seconds_per_step", 1)))
        context.progress({"step": step, "of": steps})
    return {"steps": steps}
