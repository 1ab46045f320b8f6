"""Talking to a started local cloud over HTTP, as a user would, and its smoke test."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from fireline.local.cloud import LocalCloud

KEY = "test-key-tenant-a"
OTHER_KEY = "test-key-tenant-b"
# What a local cloud under test is started with: key -> tenant.
TEST_KEYS = {KEY: "tenant-a", OTHER_KEY: "tenant-b"}


def call(
    cloud: LocalCloud, method: str, path: str, body: Any = None, key: str | None = KEY
) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["x-api-key"] = key
    request = urllib.request.Request(
        cloud.api_url + path,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers=headers,
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        text = exc.read()
        return exc.code, json.loads(text) if text else None


def wait_for(check: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError("timed out")


def state_of(cloud: LocalCloud, path: str) -> str | None:
    """The state of the resource at ``path``, or None while the API does not answer 200.

    Under a heavily loaded machine a poll can meet a gateway timeout (504, as API Gateway
    answers a slow integration); that is not the state being waited for, so the poll
    goes on, and a wait that never sees a 200 still fails by its own timeout.
    """
    status, body = call(cloud, "GET", path)
    return body.get("state") if status == 200 and isinstance(body, dict) else None


def a_schedule_fires_and_its_job_succeeds(cloud: LocalCloud, timeout: float = 180) -> None:
    """The smoke test of a deployment: every piece from the API to a worker, once.

    The wait is generous: on a loaded machine (the suite runs on every core) a cold
    ticker, worker and API process each start slowly; a success ends the wait at once."""
    # GIVEN a schedule registered over HTTP with an API key, due two seconds from now (as
    # the API's clock reads it: a time computed here could be past by the time a cold
    # API function reads the request)
    status, created = call(
        cloud,
        "POST",
        "/schedules",
        {"spec": "in 2 seconds", "target": {"type": "python", "handler": "echo"}},
    )
    assert status == 201, created
    at = created["spec"].removeprefix("at(").removesuffix(")")

    # WHEN the ticker and the default class's worker run it
    def succeeded() -> Any:
        _, page = call(cloud, "GET", f"/schedules/{created['id']}/occurrences")
        return [o for o in page["items"] if o["state"] == "succeeded"]

    (done,) = wait_for(succeeded, timeout=timeout)
    # THEN its occurrence succeeded, fired at its time, seen through the API
    assert done["fire_time"] == at
    assert done["attempts"] == 1 and done["exit_reason"] == "succeeded"
