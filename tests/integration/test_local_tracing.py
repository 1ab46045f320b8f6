"""One fire's trace on the local cloud: from its API create to its target's request,
found in the local log by the one trace id the target received."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fireline.adapters import xray
from fireline.domain import tracing
from fireline.local.cloud import LocalCloud, LocalOptions
from helpers.local_cloud import TEST_KEYS, call, wait_for
from helpers.receiver import http_receiver


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    options = LocalOptions(
        api_port=0,
        api_keys=dict(TEST_KEYS),
        log_path=tmp_path_factory.mktemp("local") / "local.log",
        stack_name="fireline-local-tracing",
    )
    with LocalCloud(options) as started:
        yield started


def segments_of(cloud: LocalCloud, trace_id: str) -> list[dict[str, Any]]:
    """The trace segments of ``trace_id`` in the local cloud's log, with their function."""
    found = []
    for line in Path(cloud.options.log_path or "").read_text().splitlines():
        record = json.loads(line)
        segment = record.get("segment")
        if record.get("action") == xray.LOG_ACTION and segment.get("trace_id") == trace_id:
            found.append({**segment, "function": record["function"]})
    return found


def test_one_fires_trace_runs_from_its_api_create_to_its_targets_request(
    cloud: LocalCloud,
) -> None:
    with http_receiver("/hook") as (url, received):
        # GIVEN a job created through the API whose target is an HTTP receiver
        status, job = call(
            cloud, "POST", "/jobs", {"delay_seconds": 0, "target": {"type": "http", "url": url}}
        )
        assert status == 201, job
        # WHEN the worker delivers it
        (delivery,) = wait_for(lambda: list(received), 60)
    # THEN the request carries a sampled W3C trace context, the same as its signed body's
    headers = {k.lower(): v for k, v in delivery["headers"].items()}
    parsed = tracing.parse_traceparent(headers["traceparent"])
    assert parsed is not None
    context, sampled = parsed
    assert sampled is True
    body = json.loads(delivery["body"])
    assert body["traceparent"] == headers["traceparent"]

    # AND that one id finds the fire's whole trace in the local log: the API's send of
    # the job (the trace's root), then the worker's attempt beneath it, whose target
    # call is the parent the request names
    def whole_trace() -> list[dict[str, Any]]:
        found = segments_of(cloud, context.trace_id)
        return found if len(found) >= 2 else []

    segments = wait_for(whole_trace, 30)
    by_name = {s["name"]: s for s in segments}
    assert set(by_name) == {"fireline-api", "fireline-worker"}
    fire, attempt = by_name["fireline-api"], by_name["fireline-worker"]
    assert "parent_id" not in fire
    assert attempt["parent_id"] == fire["id"]
    (call_segment,) = attempt["subsegments"]
    assert call_segment["name"] == "http" and call_segment["id"] == context.parent_id
    # AND every segment names the fire's tenant, schedule and occurrence key
    key = body["occurrence_key"]
    for segment in (fire, attempt):
        assert segment["annotations"]["tenant"] == "tenant-a"
        assert segment["annotations"]["schedule"] == job["id"]
        assert segment["annotations"]["occurrence_key"] == key
    assert attempt["annotations"]["state"] == "succeeded"
