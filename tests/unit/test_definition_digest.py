"""A stored workflow definition is checked against the digest its own key names on every
read: one changed after registration (an emulator that ignores an upload form's
conditions let another tenant rewrite it) is refused as corrupt, never run."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from fireline.adapters import memory
from fireline.domain import errors, workflow
from fireline.services import workflows

A, B = "tenant-a", "tenant-b"
NOOP = {"type": "python", "handler": "noop"}


@dataclass
class Flows:
    clock: memory.FakeClock = field(default_factory=memory.FakeClock)
    store: memory.MemoryWorkflowStore = field(default_factory=memory.MemoryWorkflowStore)
    documents: memory.MemoryDocumentStore = field(default_factory=memory.MemoryDocumentStore)

    def __post_init__(self) -> None:
        self.queue = memory.MemoryWorkQueue(self.clock)
        self.service = workflows.WorkflowService(
            store=self.store, documents=self.documents, queue=self.queue, clock=self.clock
        )

    def fresh_definitions(self) -> workflows.Definitions:
        """What a process that has cached nothing reads."""
        return workflows.Definitions(self.store, self.documents)


def rewritten(documents: memory.MemoryDocumentStore, key: str) -> None:
    """Another definition written over the stored one, under the same key."""
    doc = json.loads(documents.get(key) or b"{}")
    doc["nodes"] = [{"id": "intruder", "target": {"type": "python", "handler": "echo"}}]
    doc["edges"] = []
    documents.put(key, json.dumps(doc).encode())


def test_a_definition_rewritten_after_registration_is_refused_as_corrupt() -> None:
    # GIVEN B's registered workflow, whose stored document was then rewritten
    flows = Flows()
    meta = flows.service.register(B, "wf", [workflow.NodeSpec("a", target=NOOP)], [])
    rewritten(flows.documents, meta.document_key)
    # WHEN a process that has not cached it reads it
    # THEN it is refused as corrupt, naming the workflow and version
    with pytest.raises(errors.CorruptDefinition, match="'wf' version 1"):
        flows.fresh_definitions().get(B, "wf", 1)
    print(f"\n{meta.document_key} rewritten: its read refused as corrupt")


def test_a_run_of_a_rewritten_definition_fails_without_running_a_node() -> None:
    # GIVEN B's workflow, rewritten after registration, and a run of it started
    flows = Flows()
    meta = flows.service.register(B, "wf", [workflow.NodeSpec("a", target=NOOP)], [])
    rewritten(flows.documents, meta.document_key)
    run = flows.service.start(B, "wf", run_id="r1")
    controller = workflows.Controller(
        store=flows.store,
        documents=flows.documents,
        occurrences=memory.MemoryOccurrenceStore(),
        queue=flows.queue,
        clock=flows.clock,
        definitions=flows.fresh_definitions(),
    )
    # WHEN the controller takes the start event
    for message in flows.queue.receive(workflow.CONTROL_QUEUE, max_messages=10):
        controller.handle(message.body)
    # THEN the run ended failed and no node of the rewritten document was written or sent
    ended = flows.store.get_run(run.run_id)
    assert ended is not None and ended.state is workflow.RunState.FAILED
    assert flows.store.all_nodes(run.run_id) == []
    assert all(flows.queue.depth(c) == 0 for c in ("default", "short", "long"))


def test_an_unchanged_definition_reads_as_registered() -> None:
    # GIVEN a registered workflow WHEN a fresh process reads it THEN it is as registered
    flows = Flows()
    flows.service.register(A, "wf", [workflow.NodeSpec("a", target=NOOP)], [])
    assert list(flows.fresh_definitions().get(A, "wf", 1).specs) == ["a"]
