"""The settings a fresh deploy runs with, read from the SAM template's defaults.

The simulator's fleets take their shape from here, not from numbers of their own: a
worker's batch size, batching window, event source concurrency, memory, timeout and
in-flight bound, the ticker's groups and memory, the tenant limit. So a change to
infra/template.yaml's defaults is what the simulation measures next.

This module reads a template already parsed into a dict (CloudFormation's short tags as
their long forms: ``!Ref X`` is ``{"Ref": "X"}``, as cfn-lint's decoder gives them); the
caller reads the file. Only what a parameter's default or a literal settles is resolved:
anything else is an error naming the property, never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The names a worker's in-flight bound may go by: a parameter of the template or a
# variable of the function's environment. Absent, every record of a batch is in flight
# at once (the handler's pool is the batch's size).
IN_FLIGHT_NAMES = ("WORKER_IN_FLIGHT", "IN_FLIGHT", "MAX_IN_FLIGHT")


class TemplateError(ValueError):
    """The template does not settle a setting the simulation needs."""


@dataclass(frozen=True)
class WorkerSettings:
    """One job class's worker as deployed: its function and its event source mapping."""

    function: str  # the template's logical id
    job_class: str
    memory_mb: int
    timeout_seconds: float
    batch_size: int
    batching_window_seconds: float
    max_concurrency: int | None  # ScalingConfig's MaximumConcurrency (None: unset)
    # Provisioned mode's pollers (None: standard mode).
    minimum_pollers: int | None
    maximum_pollers: int | None
    in_flight: int | None  # records of one invocation in flight at once (None: all)
    class_max_concurrency: int  # the function's CLASS_MAX_CONCURRENCY
    visibility_timeout: int  # the class's queue's
    environment: Mapping[str, str]


@dataclass(frozen=True)
class Deployment:
    tenant_limit: int
    ticker_groups: int
    ticker_memory_mb: int
    workers: Mapping[str, WorkerSettings]  # by job class: its queue's event source
    # How long before its second a burst's fires are made visible (BurstLeadSeconds).
    burst_lead_seconds: int = 0
    # A class's burst queue's event source, on the same function, where it has one.
    bursts: Mapping[str, WorkerSettings] = field(default_factory=dict)

    def worker(self, job_class: str = "default") -> WorkerSettings:
        return self.workers[job_class]

    def burst(self, job_class: str = "default") -> WorkerSettings | None:
        return self.bursts.get(job_class)


def from_template(template: Mapping[str, Any]) -> Deployment:
    """The deployment a ``sam deploy`` with no parameter overrides makes of ``template``."""
    parameters = {
        name: spec.get("Default") for name, spec in (template.get("Parameters") or {}).items()
    }
    resources = template.get("Resources") or {}
    resolve = _Resolver(parameters, resources)
    workers: dict[str, WorkerSettings] = {}
    bursts: dict[str, WorkerSettings] = {}
    for logical, resource in resources.items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        props = resource.get("Properties") or {}
        if props.get("Handler") != "fireline.handlers.worker.handler":
            continue
        sqs_events = [
            e.get("Properties") or {}
            for e in (props.get("Events") or {}).values()
            if e.get("Type") == "SQS"
        ]
        main = [e for e in sqs_events if not _is_burst_queue(e)]
        if len(main) != 1:
            raise TemplateError(
                f"{logical}: expected one SQS event of its class, found {len(main)}"
            )
        settings = _worker(logical, props, main[0], resolve, parameters)
        workers[settings.job_class] = settings
        for event in sqs_events:
            if _is_burst_queue(event):
                bursts[settings.job_class] = _worker(logical, props, event, resolve, parameters)
    ticker = resources.get("TickerFunction", {}).get("Properties", {})
    return Deployment(
        tenant_limit=int(resolve.value(parameters.get("TenantConcurrencyLimit", 0), "tenant")),
        ticker_groups=int(resolve.value(parameters.get("TickerGroups", 1), "TickerGroups")),
        ticker_memory_mb=int(resolve.value(ticker.get("MemorySize", 1769), "TickerFunction")),
        workers=workers,
        bursts=bursts,
        burst_lead_seconds=int(
            resolve.value(parameters.get("BurstLeadSeconds", 0), "BurstLeadSeconds")
        ),
    )


def _is_burst_queue(event: Mapping[str, Any]) -> bool:
    """Whether an SQS event's queue is a class's burst queue (DefaultBurstQueue)."""
    queue = event.get("Queue")
    queue_id = queue.get("Fn::GetAtt", [None])[0] if isinstance(queue, dict) else None
    return isinstance(queue_id, str) and queue_id.endswith("BurstQueue")


def _worker(
    logical: str,
    props: Mapping[str, Any],
    event: Mapping[str, Any],
    resolve: _Resolver,
    parameters: Mapping[str, Any],
) -> WorkerSettings:
    env = {
        str(k): str(resolve.value(v, f"{logical}.Environment.{k}"))
        for k, v in ((props.get("Environment") or {}).get("Variables") or {}).items()
        if not isinstance(v, dict) or "Ref" in v
    }
    where = f"{logical}.Events"
    scaling = event.get("ScalingConfig") or {}
    provisioned = event.get("ProvisionedPollerConfig") or {}
    queue = event.get("Queue")
    queue_id = queue.get("Fn::GetAtt", [None])[0] if isinstance(queue, dict) else None
    queue_props = resolve.resources.get(queue_id, {}).get("Properties", {}) if queue_id else {}
    in_flight = next(
        (resolve.value(env[n], f"{logical}.{n}") for n in IN_FLIGHT_NAMES if n in env),
        None,
    )
    if in_flight is None:
        in_flight = next(
            (
                parameters[name]
                for name in parameters
                if "inflight" in name.lower() and "worker" in name.lower()
            ),
            None,
        )

    def optional_int(value: Any, name: str) -> int | None:
        return None if value is None else int(resolve.value(value, name))

    return WorkerSettings(
        function=logical,
        job_class=env.get("JOB_CLASS", "default"),
        memory_mb=int(resolve.value(props.get("MemorySize", 128), f"{logical}.MemorySize")),
        timeout_seconds=float(resolve.value(props.get("Timeout", 3), f"{logical}.Timeout")),
        batch_size=int(resolve.value(event.get("BatchSize", 10), f"{where}.BatchSize")),
        batching_window_seconds=float(
            resolve.value(
                event.get("MaximumBatchingWindowInSeconds", 0),
                f"{where}.MaximumBatchingWindowInSeconds",
            )
        ),
        max_concurrency=optional_int(scaling.get("MaximumConcurrency"), f"{where}.Scaling"),
        minimum_pollers=optional_int(provisioned.get("MinimumPollers"), f"{where}.Pollers"),
        maximum_pollers=optional_int(provisioned.get("MaximumPollers"), f"{where}.Pollers"),
        in_flight=optional_int(in_flight, f"{logical}.in_flight"),
        class_max_concurrency=int(env.get("CLASS_MAX_CONCURRENCY", "0")),
        visibility_timeout=int(
            resolve.value(queue_props.get("VisibilityTimeout", 30), f"{queue_id}.Visibility")
        ),
        environment=env,
    )


@dataclass(frozen=True)
class _Resolver:
    parameters: Mapping[str, Any]
    resources: Mapping[str, Any]

    def value(self, value: Any, where: str) -> Any:
        """A literal, or a parameter's default through ``Ref``."""
        if isinstance(value, dict):
            if set(value) == {"Ref"} and value["Ref"] in self.parameters:
                default = self.parameters[value["Ref"]]
                if default is None:
                    raise TemplateError(f"{where}: parameter {value['Ref']} has no default")
                return default
            raise TemplateError(f"{where}: {value!r} is not a literal or a parameter's default")
        return value
