"""A target is refused by the domain's own check (every entry: the API, the CLI, a service
called directly) when no attempt could send it as stored: a header value outside
Latin-1, a URL the request line cannot carry, a type or a handler name that names
nothing, a timeout or headers of the wrong shape. One stored before these rules fails its
attempt saying why, never with an encoder's error."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from fireline.adapters import memory
from fireline.domain import errors, occurrence, retry, workflow
from fireline.domain import target as target_rules
from fireline.services import workflows
from fireline.services.worker import Result
from helpers.memory_system import REMAINING_MS, MemorySystem

HOOK = "https://hooks.example.com/x"


@pytest.mark.parametrize(
    ("target", "field", "says"),
    [
        ({"type": "http", "url": HOOK, "headers": {"X-Mood": "☃"}}, "headers", "Latin-1"),
        (
            {"type": "http", "url": HOOK, "headers": {"X-Mood": "ok \U0001f600"}},
            "headers",
            r"U\+1F600",
        ),
        ({"type": "http", "url": "https://hooks.example.com/☃"}, "url", "percent-encode"),
        ({"type": "http", "url": "https://hooks.example.com/a b"}, "url", "percent-encode"),
        ({"type": "http", "url": "https://hooks.example.com/x?q=é"}, "url", "percent-encode"),
        ({"type": "http", "url": 7}, "url", "not a URL"),
        ({"type": "http", "url": HOOK, "timeout_seconds": "30"}, "timeout_seconds", "whole"),
        ({"type": "http", "url": HOOK, "timeout_seconds": 0}, "timeout_seconds", "1 to 900"),
        ({"type": "http", "url": HOOK, "headers": ["X-A"]}, "headers", "an object"),
        ({"type": "python"}, "handler", "not a handler name"),
        ({"type": "python", "handler": "os.system()"}, "handler", "not a handler name"),
        ({"type": "shell", "command": "ls"}, "type", "not a target type"),
    ],
)
def test_a_target_no_attempt_could_send_is_refused_naming_its_field(
    target: dict[str, Any], field: str, says: str
) -> None:
    # GIVEN a target as some entry handed it over (not through the API's own model)
    # WHEN the domain checks it THEN it is refused naming the field at fault
    with pytest.raises(errors.ValidationError, match=says) as refused:
        target_rules.check(target, tenant_id="tenant-a")
    assert refused.value.field == f"target.{field}"


@pytest.mark.parametrize(
    "target",
    [
        {"type": "http", "url": HOOK, "headers": {"X-Name": "Zoë", "X-Trace": "a\tb"}},
        {"type": "http", "url": "https://hooks.example.com/a%20b?q=%C3%A9#frag ment"},
        {"type": "http", "url": HOOK, "timeout_seconds": 900},
        {"type": "python", "handler": "jobs.nightly:report"},
    ],
)
def test_targets_that_can_be_sent_pass(target: dict[str, Any]) -> None:
    target_rules.check(target, tenant_id="tenant-a")


def test_a_workflow_registered_without_the_api_refuses_what_its_nodes_could_not_run() -> None:
    # GIVEN the workflow service of a deployment whose only handler is noop
    service = workflows.WorkflowService(
        store=memory.MemoryWorkflowStore(),
        documents=memory.MemoryDocumentStore(),
        queue=memory.MemoryWorkQueue(memory.FakeClock()),
        clock=memory.FakeClock(),
        handlers={"noop"},
    )
    noop = {"type": "python", "handler": "noop"}
    cases = {
        "nodes[1].target.handler": {"type": "python", "handler": "os.system"},
        "nodes[1].target.headers": {"type": "http", "url": HOOK, "headers": {"X-A": "☃"}},
    }
    for field, bad in cases.items():
        specs = [workflow.NodeSpec("a", target=noop), workflow.NodeSpec("b", target=bad)]
        # WHEN a definition with that node is registered directly
        with pytest.raises(errors.ValidationError) as refused:
            service.register("tenant-a", "wf", specs, [("a", "b")])
        # THEN it is refused naming the node's field, and no version is stored
        assert refused.value.field == field
        assert not service.exists("tenant-a", "wf")


@pytest.mark.parametrize(
    ("stored", "says"),
    [
        ({"type": "http", "url": HOOK, "headers": {"X-Mood": "☃"}}, "a header cannot be sent"),
        ({"type": "http", "url": "https://hooks.example.com/☃"}, "the URL cannot be sent"),
    ],
)
def test_a_stored_target_that_cannot_be_sent_fails_saying_why(
    stored: dict[str, Any], says: str
) -> None:
    # GIVEN a job whose stored target (written before these rules) cannot be sent
    system = MemorySystem()
    body = system.due_job(retry=retry.RetryPolicy(max_attempts=1))
    item = system.schedules.get("tenant-a", system.row(body).schedule_id)
    assert item is not None
    system.schedules.replace(
        replace(item, target=stored, version=item.version), expected_version=item.version
    )
    # WHEN a worker runs it
    result = system.worker().handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN the attempt ends dead saying what cannot be sent, not with an encoder's error
    assert result is Result.DEAD
    row = system.row(body)
    assert row.state is occurrence.State.DEAD
    assert row.exit_reason is not None
    assert row.exit_reason.startswith(f"error: {says}"), row.exit_reason
    assert "Encode" not in row.exit_reason
