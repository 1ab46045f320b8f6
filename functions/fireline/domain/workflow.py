"""Workflow definitions, runs and run-nodes: the records the controller keeps.

A definition is immutable once registered (a change is a new version), so every process
may cache it by (tenant, workflow, version). A run executes one version; each of its
nodes has a state and a counter of unfinished parents (see :mod:`fireline.domain.dag`).

A node runs as an ordinary occurrence through the per-class queues and workers: its
occurrence is keyed ``wf.{run_id}.{node_id}#{generation}#{run start}``. Schedule ids
cannot contain ``.``, so a node's occurrence never collides with a schedule's. The
generation starts at 1 and moves on when "retry failed" re-runs the node, so the re-run
is a new occurrence (new idempotency record) and the old one stays in the history.
"""

from __future__ import annotations

import enum
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fireline.domain import dag, errors, model, occurrence, retry, schedule

NODE_PREFIX = "wf."
# The controller's own queue (an SQS queue beside the per-class ones): node completions,
# run starts, fan-out continuations, cancels and reconciles.
CONTROL_QUEUE = "workflow"
# A node's success decrements its children this many at a time, each chunk behind one
# step of the parent's own fan-out cursor (a bounded step per write of the parent).
FANOUT_CHUNK = 99
# Node states a store lists from an index of their own: the rare ones (a run's failures
# and what they stopped). A node's way through waiting, dispatched and succeeded, every
# node's, is not indexed: those are listed and counted from the run's own rows.
INDEXED_STATES = frozenset({dag.NodeState.FAILED, dag.NodeState.BLOCKED, dag.NodeState.CANCELLED})


DEFAULT_RETRY = retry.RetryPolicy()


class RunState(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # finished with failed (and blocked) nodes: "retry failed" resumes it
    CANCELLED = "cancelled"


RUN_FINISHED = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED})


@dataclass(frozen=True)
class NodeSpec:
    """The job a node runs: the same fields as a one-off job."""

    node_id: str
    target: dict[str, Any]
    payload: dict[str, Any] = field(default_factory=dict)
    job_class: str = "default"
    retry: retry.RetryPolicy = field(default_factory=retry.RetryPolicy)
    deadline_seconds: int | None = None

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"id": self.node_id, "target": self.target}
        if self.payload:
            doc["payload"] = self.payload
        if self.job_class != "default":
            doc["job_class"] = self.job_class
        if self.retry != DEFAULT_RETRY:
            doc["retry"] = {
                "max_attempts": self.retry.max_attempts,
                "base_seconds": self.retry.base_seconds,
                "factor": self.retry.factor,
                "cap_seconds": self.retry.cap_seconds,
                "jitter": self.retry.jitter.value,
            }
        if self.deadline_seconds is not None:
            doc["deadline_seconds"] = self.deadline_seconds
        return doc

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> NodeSpec:
        policy = doc.get("retry")
        return cls(
            node_id=doc["id"],
            target=dict(doc["target"]),
            payload=dict(doc.get("payload") or {}),
            job_class=doc.get("job_class", "default"),
            retry=retry.RetryPolicy(
                max_attempts=policy["max_attempts"],
                base_seconds=policy["base_seconds"],
                factor=policy["factor"],
                cap_seconds=policy["cap_seconds"],
                jitter=retry.Jitter(policy["jitter"]),
            )
            if policy
            else retry.RetryPolicy(),
            deadline_seconds=doc.get("deadline_seconds"),
        )


@dataclass(frozen=True)
class Definition:
    tenant_id: str
    workflow_id: str
    version: int
    specs: Mapping[str, NodeSpec]
    graph: dag.Graph

    @classmethod
    def build(
        cls,
        tenant_id: str,
        workflow_id: str,
        version: int,
        specs: list[NodeSpec],
        edges: list[tuple[str, str]],
    ) -> Definition:
        """Validate the graph (typed errors name the cycle, the dangling edge...)."""
        graph = dag.validate([s.node_id for s in specs], edges)
        for spec in specs:
            if spec.job_class not in model.JOB_CLASSES:
                raise errors.ValidationError(
                    f"{spec.job_class!r} is not one of {', '.join(model.JOB_CLASSES)}",
                    field=f"nodes.{spec.node_id}.job_class",
                )
        return cls(tenant_id, workflow_id, version, {s.node_id: s for s in specs}, graph)

    def to_document(self) -> bytes:
        """The stored form: compact JSON, nodes in the order given, edges as pairs."""
        doc = {
            "nodes": [self.specs[n].to_document() for n in self.graph.nodes],
            "edges": [[p, c] for p in self.graph.nodes for c in self.graph.children[p]],
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_document(
        cls, tenant_id: str, workflow_id: str, version: int, raw: bytes
    ) -> Definition:
        doc = json.loads(raw)
        specs = [NodeSpec.from_document(n) for n in doc["nodes"]]
        edges = [(p, c) for p, c in doc["edges"]]
        return cls.build(tenant_id, workflow_id, version, specs, edges)

    @functools.cached_property
    def leaves(self) -> int:
        """How many nodes have no child: the run is over only once each is finished."""
        return sum(1 for n in self.graph.nodes if not self.graph.children[n])

    def chunks(self, node_id: str) -> int:
        """How many fan-out transactions the node's success takes."""
        return math.ceil(len(self.graph.children[node_id]) / FANOUT_CHUNK)

    def chunk(self, node_id: str, index: int) -> tuple[str, ...]:
        kids = self.graph.children[node_id]
        return kids[index * FANOUT_CHUNK : (index + 1) * FANOUT_CHUNK]


@dataclass(frozen=True)
class DefinitionMeta:
    """The index entry of one stored version; the document lives in the blob store."""

    tenant_id: str
    workflow_id: str
    version: int
    nodes: int
    edges: int
    created_at: datetime
    # SHA-256 of the document (first 16 hex digits), part of its key: two registrations
    # racing for the same version write different objects, so the loser's document can
    # never replace the one the winner's index entry points at.
    digest: str = ""

    @property
    def document_key(self) -> str:
        return definition_key(self.tenant_id, self.workflow_id, self.version, self.digest)


def definition_key(tenant_id: str, workflow_id: str, version: int, digest: str = "") -> str:
    suffix = f"-{digest}" if digest else ""
    return f"definitions/{tenant_id}/{workflow_id}/{version:08d}{suffix}.json"


@dataclass(frozen=True)
class Run:
    tenant_id: str
    run_id: str
    workflow_id: str
    version: int  # the definition's
    total: int  # nodes
    state: RunState = RunState.RUNNING
    created_at: datetime | None = None
    finished_at: datetime | None = None
    generation: int = 1  # +1 on each "retry failed"
    materialized: int = 0  # node rows written so far (a start resumes from here)
    source: str | None = None  # the occurrence that started it, for a scheduled run
    has_failures: bool = False  # a node failed: the run ends failed
    # "retry failed" is moving failed and blocked nodes back to waiting: the run must not
    # be seen as finished (nothing waiting yet) until that is done.
    resetting: bool = False


@dataclass(frozen=True)
class RunNode:
    node_id: str
    state: dag.NodeState = dag.NodeState.WAITING
    pending: int = 0  # unfinished parents
    generation: int = 1
    fanout: int = 0  # fan-out transactions applied after its success


def node_schedule_id(run_id: str, node_id: str) -> str:
    return f"{NODE_PREFIX}{run_id}.{node_id}"


def parse_node_schedule_id(schedule_id: str) -> tuple[str, str] | None:
    """(run_id, node_id) of a node occurrence's schedule id; None for a schedule's."""
    if not schedule_id.startswith(NODE_PREFIX):
        return None
    run_id, _, node_id = schedule_id[len(NODE_PREFIX) :].partition(".")
    if not run_id or not node_id:
        return None
    return run_id, node_id


def is_node_key(key: str) -> bool:
    """Whether an occurrence key is a workflow node's (cheap: no parsing)."""
    return key.startswith(NODE_PREFIX)


def node_occurrence_key(run: Run, node: RunNode) -> str:
    assert run.created_at is not None
    return occurrence.occurrence_key(
        node_schedule_id(run.run_id, node.node_id), node.generation, run.created_at
    )


def node_job(run: Run, spec: NodeSpec, generation: int) -> model.Schedule:
    """The node as the one-off job the worker runs (same retries, deadline, targets)."""
    assert run.created_at is not None
    return model.Schedule(
        tenant_id=run.tenant_id,
        schedule_id=node_schedule_id(run.run_id, spec.node_id),
        timing=schedule.Timing(spec=schedule.parse_spec(f"at({_at(run.created_at)})")),
        spec_text=f"at({_at(run.created_at)})",
        kind=model.Kind.JOB,
        job_class=spec.job_class,
        target=spec.target,
        payload=spec.payload,
        retry=spec.retry,
        deadline_seconds=spec.deadline_seconds,
        state=model.ScheduleState.COMPLETED,
        version=generation,
        created_at=run.created_at,
    )


def _at(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
