"""One fire, one trace: the context derived from the fire, carried on its message from the
API to the worker and on to its target, segments only for sampled fires, and the context
sent whether sampled or not."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from fireline.adapters import memory
from fireline.domain import signing, tracing
from fireline.services import schedules, targets, webhook
from fireline.services import tracing as tracing_service
from fireline.services.worker import Result
from helpers.flows import SIGNING_KEY
from helpers.memory_system import NOW, REMAINING_MS, MemorySystem


def test_a_fires_trace_is_derived_from_the_fire_and_differs_between_tenants() -> None:
    # GIVEN one occurrence key fired for two tenants
    key = "sch_1#1#2026-05-01T12:00:00Z"
    # WHEN each sender derives the fire's context
    first = tracing.for_fire("tenant-a", key, NOW)
    again = tracing.for_fire("tenant-a", key, NOW)
    other = tracing.for_fire("tenant-b", key, NOW)
    # THEN the same fire names the same trace, below its fire segment, whoever derives it
    assert first == again
    assert first.parent_id == tracing.span_id(first.trace_id, tracing.FIRE_SPAN)
    # AND its time part is the fire time's second, as X-Ray reads a trace's start
    assert first.trace_id.split("-")[1] == f"{int(NOW.timestamp()):08x}"
    # AND another tenant's fire of the same key is another trace
    assert other.trace_id != first.trace_id


def test_the_xray_header_and_w3c_traceparent_carry_the_same_context() -> None:
    # GIVEN a fire's context
    context = tracing.for_fire("tenant-a", "s#1#2026-05-01T12:00:00Z", NOW)
    # WHEN it is written as X-Ray's header and as W3C traceparent, and read back
    from_header = tracing.parse_header(tracing.header(context))
    parsed = tracing.parse_traceparent(tracing.traceparent(context, sampled=False))
    # THEN both give the context back, with the sampled flag as written
    assert from_header == context
    assert parsed == (context, False)
    assert tracing.traceparent(context, sampled=True).endswith("-01")


@pytest.mark.parametrize("text", [None, 7, "", "Root=1-abc;Parent=xyz", "Parent=0123456789abcdef"])
def test_a_field_that_is_not_a_trace_header_gives_no_context(text: object) -> None:
    assert tracing.parse_header(text) is None


def test_the_sampling_decision_is_the_same_at_every_hop_and_near_its_rate() -> None:
    # GIVEN 20,000 fires' trace ids
    ids = [
        tracing.for_fire("tenant-a", f"s#1#{i}", NOW + timedelta(seconds=i)).trace_id
        for i in range(20_000)
    ]
    # WHEN each is decided at the default rate, twice (two hops)
    first = [tracing.is_sampled(i, tracing.DEFAULT_SAMPLE_RATE) for i in ids]
    second = [tracing.is_sampled(i, tracing.DEFAULT_SAMPLE_RATE) for i in ids]
    # THEN both hops agree on every fire, and about 1 in 1,000 is recorded
    assert first == second
    assert 8 <= sum(first) <= 35
    # AND rate 0 records none, rate 1 all
    assert not any(tracing.is_sampled(i, 0.0) for i in ids)
    assert all(tracing.is_sampled(i, 1.0) for i in ids)


def _traced_run(rate: float) -> tuple[memory.MemorySegments, dict[str, Any], list[str]]:
    """A job created through the schedule service on a traced queue and run by a traced
    worker at ``rate``: the segments, the message the worker got and the traceparent
    its Python handler was given."""
    system = MemorySystem()
    segments = memory.MemorySegments()
    traced = tracing_service.Tracing(segments, rate=rate)
    given: list[str] = []
    system.registry.register("traced")(lambda context: given.append(context.traceparent()))
    service = schedules.ScheduleService(
        schedules=system.schedules,
        occurrences=system.occurrences,
        queue=tracing_service.TracedQueue(system.queue, traced, system.clock, name="fireline-api"),
        clock=system.clock,
        handlers=system.registry,
    )
    service.create_job(
        "tenant-a",
        schedules.JobDraft(delay_seconds=0, target={"type": "python", "handler": "traced"}),
    )
    (message,) = system.queue.receive("default")
    worker = system.worker(runner=system.runner(python=targets.run_in_own_thread))
    worker.tracing = traced
    assert worker.handle(message.body, remaining_ms=lambda: REMAINING_MS) is Result.SUCCEEDED
    return segments, message.body, given


def test_a_sampled_fire_is_one_trace_from_the_api_send_to_the_targets_call() -> None:
    # GIVEN tracing that records every fire
    # WHEN a job is created, sent and run
    segments, body, given = _traced_run(rate=1.0)
    # THEN its message carries the fire's context
    carried = tracing_service.of_message(body)
    assert carried is not None
    # AND the trace holds the API's send as its root and the worker's attempt below it
    (fire, attempt) = segments.of_trace(carried.trace_id)
    assert fire["name"] == "fireline-api" and "parent_id" not in fire
    assert fire["id"] == carried.parent_id
    assert attempt["name"] == "fireline-worker" and attempt["parent_id"] == fire["id"]
    assert attempt["annotations"] == {
        **tracing_service.fire_annotations("tenant-a", body["schedule_id"], body["occurrence_key"]),
        "attempt": 1,
        "state": "succeeded",
    }
    # AND the handler was given the trace below the target's call, sampled
    (call,) = attempt["subsegments"]
    assert given == [tracing.traceparent(tracing.TraceContext(carried.trace_id, call["id"]), True)]


def test_an_unsampled_fire_records_nothing_and_still_hands_its_context_on() -> None:
    # GIVEN tracing that records no fire
    # WHEN a job is created, sent and run
    segments, body, given = _traced_run(rate=0.0)
    # THEN no segment was recorded
    assert segments.documents == []
    # AND the target still got the fire's trace context, flagged not sampled, so a
    # tenant's own tracing can join it
    carried = tracing_service.of_message(body)
    assert carried is not None
    (traceparent,) = given
    parsed = tracing.parse_traceparent(traceparent)
    assert parsed is not None
    assert parsed[0].trace_id == carried.trace_id and parsed[1] is False


def test_an_http_target_gets_traceparent_in_its_header_and_its_signed_body(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a receiver that keeps what it is sent, and a fire with a trace context
    sent: list[dict[str, Any]] = []

    def post(network: Any, url: str, body: bytes, headers: Any, **_: Any) -> webhook.Answer:
        sent.append({"url": url, "body": body, "headers": dict(headers)})
        return webhook.Answer(status=204, body=b"", location=None)

    monkeypatch.setattr(webhook, "post", post)
    context = targets.JobContext(
        occurrence_key="s1#1#2026-05-01T12:00:00Z",
        tenant_id="tenant-a",
        schedule_id="s1",
        fire_time=NOW,
        attempt=2,
        payload={},
        trace=tracing.for_fire("tenant-a", "s1#1#2026-05-01T12:00:00Z", NOW),
        sampled=True,
    )
    # WHEN the HTTP target is called
    MemorySystem().runner().run(
        {"type": "http", "url": "https://hooks.example.com/x"}, context, timeout=5
    )
    # THEN the header names the attempt's target call, and the body says the same
    (request,) = sent
    traceparent = request["headers"][tracing.TRACEPARENT]
    assert traceparent == context.traceparent()
    assert json.loads(request["body"])[tracing.TRACEPARENT] == traceparent
    # AND the signature covers that body: it verifies over the body as sent
    parsed = signing.parse_header(request["headers"][signing.SIGNATURE_HEADER])
    assert parsed is not None
    expected = signing.digest(
        SIGNING_KEY.secret, parsed.timestamp, "POST", request["url"], request["body"]
    )
    assert parsed.signatures == (expected,)


def test_a_stored_traceparent_header_gives_way_to_the_fires_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a target stored with a header of the trace context's name (registration
    # refuses one now; a target stored earlier may have it)
    sent: list[dict[str, str]] = []

    def post(network: Any, url: str, body: bytes, headers: Any, **_: Any) -> webhook.Answer:
        sent.append(dict(headers))
        return webhook.Answer(status=204, body=b"", location=None)

    monkeypatch.setattr(webhook, "post", post)
    key = "s1#1#2026-05-01T12:00:00Z"
    context = targets.JobContext(
        occurrence_key=key,
        tenant_id="tenant-a",
        schedule_id="s1",
        fire_time=NOW,
        attempt=1,
        payload={},
        trace=tracing.for_fire("tenant-a", key, NOW),
        sampled=False,
    )
    target = {
        "type": "http",
        "url": "https://hooks.example.com/x",
        "headers": {"TraceParent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01", "X-Team": "a"},
    }
    # WHEN it is called, THEN the call goes out with the fire's context only, and the
    # tenant's other headers
    MemorySystem().runner().run(target, context, timeout=5)
    (headers,) = sent
    assert [k for k in headers if k.lower() == tracing.TRACEPARENT] == [tracing.TRACEPARENT]
    assert headers[tracing.TRACEPARENT] == context.traceparent()
    assert headers["X-Team"] == "a"


def test_dispatch_targets_get_the_same_context_at_every_attempt() -> None:
    # GIVEN one fire's context at its first and its third attempt
    trace = tracing.for_fire("tenant-a", "s1#1#2026-05-01T12:00:00Z", NOW)

    def at(attempt: int) -> targets.JobContext:
        return targets.JobContext(
            occurrence_key="s1#1#2026-05-01T12:00:00Z",
            tenant_id="tenant-a",
            schedule_id="s1",
            fire_time=NOW,
            attempt=attempt,
            payload={},
            trace=trace,
        )

    # WHEN the message a state machine, bus or topic receives is made for each
    first, third = targets.delivered_message(at(1)), targets.delivered_message(at(3))
    # THEN both carry the fire's context below its fire segment, so the input is the same
    assert first == third
    assert first[tracing.TRACEPARENT] == tracing.traceparent(trace, sampled=False)
    # AND a Lambda's or a queue's message names each attempt's own call
    assert at(1).as_message()[tracing.TRACEPARENT] != at(3).as_message()[tracing.TRACEPARENT]
