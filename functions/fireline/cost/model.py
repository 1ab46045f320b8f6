"""Metered requests and units turned into dollars per million jobs.

Per job, by line: DynamoDB write units (base tables and indexes) and read units, billed
requests of SQS, S3, Secrets Manager, Step Functions' state transitions, Lambda's
invocations, duration and wait, and CloudWatch Logs' ingestion.

Lambda bills an invocation's wall time. Here it is put together, not measured (an
emulator's speed is not Lambda's): 5 ms of waiting per AWS call, plus the CPU seconds
measured here scaled to the function's share of a vCPU (a full one at 1,769 MB,
proportionally less below), plus the time the invocation waits on its remote targets (an
HTTP target's answer, a Lambda target invoked RequestResponse: ``target_seconds``, the
span of a batch's target calls side by side); an invocation known to last a given wall
time (the leased ticker's, which ticks until its minute is up) is billed at least that.
Where a path works out how a worker invocation's calls overlap (its records side by side,
``network_seconds``), that wait replaces the 5 ms per call in turn.
The latency-model simulation measures the same wall time directly (fireline.sim's
WorkerFleet.durations). Logs are the bytes
the product wrote, plus the platform's START, END and REPORT lines of each invocation.
Requests that come through the API are billed API Gateway's REST request each. A dispatch
target's call (StartExecution, PutEvents, Publish) is billed its request (an express
workflow's price for a start: a standard machine's transitions are its owner's, as many as
its definition takes), and the AssumeRole calls of tenants' roles are counted (STS is free).

A worker invocation is also billed the time it holds a message that became visible before
its fire time (``lambda.wait``, a line of its own). SQS counts a delay in whole seconds and
the product rounds it down (dispatch.delay_until), and a sender's clock stands at any phase
of the second, so a fire due on a whole second, sent ahead of its time, is visible up to a
second early, and the worker sleeps until its time inside the invocation. What is billed
is the wait expected (:func:`expected_wait`, no wall clock). The API's clock stands at any
phase of the second: averaged over :data:`SEND_PHASES` evenly spread phases, a job it sends
on a whole second waits 0.5 s. The ticker sends fires picked up ahead of their time at a
set phase of the second (``TickerConfig.send_phase``, 0.85) and counts each delay from a
tenth of a second past its clock's reading (dispatch.IN_FLIGHT, so that a slow send is
rarely late): its fires on a whole second are visible 0.15 s early, as the metered tick's
clock stands at that phase when it sends. That is a floor: a deployed tick's sends take
time, and the latency-model simulation measures its fires visible 0.24 s early on average
at 580 fires a second (docs/cost.md says what that leaves out).
Less with jitter under a second; none for a message sent at or after its time (a trigger, a
retry, a deferral, a redelivery).
It is billed on top of the invocation's work, though the batch's first reads (a few ms)
happen while it waits: a slight overstatement.

The alternatives are priced from the same file: EventBridge Scheduler invoking a Lambda
per fire, and the same with Powertools idempotency in its own table (2 writes a run).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from fireline.cost import prices
from fireline.domain import tracing
from fireline.services import dispatch

SECONDS_PER_AWS_CALL = 0.005
MIN_BILLED_SECONDS = 0.001  # Lambda bills each invocation by the millisecond, at least one
FULL_VCPU_MB = 1769
MILLION = 1_000_000
#: The phases of the second, evenly spread, at which a sender's clock may stand when it
#: works out a message's delay: a wait expected over them is deterministic.
SEND_PHASES = 100

_REQUEST_ID = "8f507cfc-1a2b-4697-b07a-ac58fc914c95"
#: What Lambda itself logs per invocation (X-Ray tracing on, as deployed).
PLATFORM_LINES = (
    f"START RequestId: {_REQUEST_ID} Version: $LATEST\n"
    f"END RequestId: {_REQUEST_ID}\n"
    f"REPORT RequestId: {_REQUEST_ID}\tDuration: 12.34 ms\tBilled Duration: 13 ms\t"
    "Memory Size: 512 MB\tMax Memory Used: 98 MB\t\n"
    "XRAY TraceId: 1-5759e988-bd862e3fe1be46a994272793\tSegmentId: 53995c3f42cd8ad8\t"
    "Sampled: true\t\n"
)
PLATFORM_LOG_BYTES = len(PLATFORM_LINES.encode())
#: The template's TraceSampleRate: the share of fires whose own trace is recorded.
DEFAULT_FIRE_TRACE_RATE = tracing.DEFAULT_SAMPLE_RATE
#: Lambda's sampling of an invocation with Tracing: Active, past its first a second (that
#: reservoir is a fixed cost, not a fire's: at most one trace a second a function).
LAMBDA_TRACE_RATE = 0.05
#: Functions invoked behind API Gateway: the template's sampling rule for the API stage
#: decides at the fire's rate, and Lambda follows the decision the request carries.
SAMPLED_UPSTREAM = frozenset({"api"})
#: Each recorded trace taken to be retrieved once (an operator opening it): an upper
#: bound for most, which nobody reads.
RETRIEVALS_PER_TRACE = 1.0


@dataclass(frozen=True)
class Function:
    memory_mb: int
    architecture: str = "arm64"


#: The deployed functions' memory (infra/template.yaml's defaults) and architecture.
FUNCTIONS = {
    "ticker": Function(1769),
    "worker": Function(1769),
    "api": Function(256),
    "sweep": Function(256),
    "workflow": Function(1024),
    "long": Function(1024),
    "target": Function(512),  # an alternative's own function
}


@dataclass(frozen=True)
class Usage:
    """What one job uses, on average."""

    billed: Mapping[str, float]  # billed requests by "service.Operation"
    write_units: float = 0.0  # DynamoDB base tables
    index_write_units: float = 0.0
    read_units: float = 0.0
    invocations: Mapping[str, float] = field(default_factory=dict)  # per function
    aws_calls: Mapping[str, float] = field(default_factory=dict)  # per function
    cpu_seconds: Mapping[str, float] = field(default_factory=dict)  # per function
    # Per function, the wall time its invocations last whatever their work (Lambda bills
    # the wall clock): the least duration billed.
    wall_seconds: Mapping[str, float] = field(default_factory=dict)
    # Per function, the time its invocations hold messages until their fire time, billed
    # on top of their work (see expected_wait).
    wait_seconds: Mapping[str, float] = field(default_factory=dict)
    # Per function, the time its invocations wait on remote targets: part of their wall
    # time, billed as duration.
    target_seconds: Mapping[str, float] = field(default_factory=dict)
    # Per function, the time its invocations wait on the network with their calls (and
    # targets) side by side, where known: billed in place of 5 ms per call in turn plus
    # the target wait.
    network_seconds: Mapping[str, float] = field(default_factory=dict)
    log_bytes: float = 0.0  # the product's own lines
    state_transitions: float = 0.0
    scheduler_invocations: float = 0.0
    # X-Ray traces recorded and retrieved per job (see :meth:`traced`).
    traces_recorded: float = 0.0
    traces_retrieved: float = 0.0

    @classmethod
    def of(cls, meter: Any, jobs: int, **extra: Any) -> Usage:
        """A meter's counts per job (``meter``: a fireline.cost.meter.Meter). Work metered
        under a name that is not a function (an event source mapping's receives) is in
        the requests, not in Lambda's lines."""
        per = 1.0 / jobs
        return cls(
            billed={op: n * per for op, n in sorted(meter.billed.items())},
            write_units=meter.write_units * per,
            index_write_units=meter.index_write_units * per,
            read_units=meter.read_units * per,
            invocations={f: n * per for f, n in meter.invocations.items() if f in FUNCTIONS},
            aws_calls={f: n * per for f, n in meter.function_calls.items() if f in FUNCTIONS},
            cpu_seconds={f: n * per for f, n in meter.cpu_seconds.items() if f in FUNCTIONS},
            wait_seconds={f: n * per for f, n in meter.wait_seconds.items() if f in FUNCTIONS},
            target_seconds={f: n * per for f, n in meter.target_seconds.items() if f in FUNCTIONS},
            network_seconds={
                f: n * per for f, n in meter.network_seconds.items() if f in FUNCTIONS
            },
            log_bytes=sum(meter.log_bytes.values()) * per,
            **extra,
        )

    def plus(self, other: Usage, scale: float = 1.0) -> Usage:
        """This job's usage with ``other`` times ``scale`` added (a fixed cost per minute
        spread over the jobs of a minute)."""

        def add(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
            return {k: a.get(k, 0.0) + b.get(k, 0.0) * scale for k in sorted({*a, *b})}

        return Usage(
            billed=add(self.billed, other.billed),
            write_units=self.write_units + other.write_units * scale,
            index_write_units=self.index_write_units + other.index_write_units * scale,
            read_units=self.read_units + other.read_units * scale,
            invocations=add(self.invocations, other.invocations),
            aws_calls=add(self.aws_calls, other.aws_calls),
            cpu_seconds=add(self.cpu_seconds, other.cpu_seconds),
            wall_seconds=add(self.wall_seconds, other.wall_seconds),
            wait_seconds=add(self.wait_seconds, other.wait_seconds),
            target_seconds=add(self.target_seconds, other.target_seconds),
            network_seconds=add(self.network_seconds, other.network_seconds),
            log_bytes=self.log_bytes + other.log_bytes * scale,
            state_transitions=self.state_transitions + other.state_transitions * scale,
            scheduler_invocations=self.scheduler_invocations + other.scheduler_invocations * scale,
            traces_recorded=self.traces_recorded + other.traces_recorded * scale,
            traces_retrieved=self.traces_retrieved + other.traces_retrieved * scale,
        )

    def traced(self, fire_rate: float = DEFAULT_FIRE_TRACE_RATE) -> Usage:
        """This job's usage with its X-Ray traces: its fire's own at ``fire_rate`` (the
        template's TraceSampleRate), plus the traces Lambda records of the invocations it
        takes (Tracing: Active) at :data:`LAMBDA_TRACE_RATE` each, or at ``fire_rate``
        for those API Gateway invokes (:data:`SAMPLED_UPSTREAM`), every one retrieved once
        (:data:`RETRIEVALS_PER_TRACE`)."""
        recorded = fire_rate + sum(
            count * (fire_rate if name in SAMPLED_UPSTREAM else LAMBDA_TRACE_RATE)
            for name, count in self.invocations.items()
        )
        return dataclasses.replace(
            self,
            traces_recorded=recorded,
            traces_retrieved=recorded * RETRIEVALS_PER_TRACE,
        )

    def lambda_gb_seconds(self) -> dict[str, float]:
        """GB-seconds per function: its wait on the network (5 ms per AWS call in turn
        plus the wait on remote targets, or the overlapped wait where it was worked out)
        plus CPU at the function's share of a vCPU, or the wall time its invocations last
        if that is longer. CPU is added to the waits, not overlapped with them: an upper
        bound by the overlap."""
        gb_seconds: dict[str, float] = {}
        names = {
            *self.invocations, *self.aws_calls, *self.cpu_seconds, *self.wall_seconds,
            *self.target_seconds,
        }  # fmt: skip
        for name in sorted(names):
            function = FUNCTIONS[name]
            share = min(1.0, function.memory_mb / FULL_VCPU_MB)
            if name in self.network_seconds:
                seconds = self.network_seconds[name]
            else:
                seconds = self.aws_calls.get(name, 0.0) * SECONDS_PER_AWS_CALL
                seconds += self.target_seconds.get(name, 0.0)
            seconds += self.cpu_seconds.get(name, 0.0) / share
            seconds = max(
                seconds,
                self.invocations.get(name, 0.0) * MIN_BILLED_SECONDS,
                self.wall_seconds.get(name, 0.0),
            )
            gb_seconds[name] = seconds * function.memory_mb / 1024
        return gb_seconds

    def wait_gb_seconds(self) -> dict[str, float]:
        """GB-seconds per function of holding messages until their fire time."""
        return {
            name: seconds * FUNCTIONS[name].memory_mb / 1024
            for name, seconds in sorted(self.wait_seconds.items())
        }

    def all_log_bytes(self) -> float:
        return self.log_bytes + sum(self.invocations.values()) * PLATFORM_LOG_BYTES


def dollars(usage: Usage) -> dict[str, float]:
    """Dollars per job, by line."""
    p = prices
    billed = usage.billed

    def requests(service: str, operations: frozenset[str] | None = None) -> float:
        return sum(
            n
            for op, n in billed.items()
            if op.split(".")[0] == service
            and (operations is None or op.split(".", 1)[1] in operations)
        )

    def gb_seconds(by_function: dict[str, float]) -> float:
        return sum(
            gb_s * p.LAMBDA_GB_SECOND[FUNCTIONS[name].architecture].usd
            for name, gb_s in by_function.items()
        )

    s3_puts = requests("s3", p.S3_PUT_CLASS)
    lines = {
        "dynamodb.writes": usage.write_units * p.DYNAMODB_WRITE_REQUEST_UNIT.usd,
        "dynamodb.index_writes": usage.index_write_units * p.DYNAMODB_WRITE_REQUEST_UNIT.usd,
        "dynamodb.reads": usage.read_units * p.DYNAMODB_READ_REQUEST_UNIT.usd,
        "apigateway": requests("apigateway") * p.API_GATEWAY_REST_REQUEST.usd,
        "sqs": requests("sqs") * p.SQS_REQUEST.usd,
        "s3": s3_puts * p.S3_PUT_REQUEST.usd + (requests("s3") - s3_puts) * p.S3_GET_REQUEST.usd,
        "secretsmanager": requests("secretsmanager") * p.SECRETS_MANAGER_API_CALL.usd,
        "stepfunctions.requests": requests("stepfunctions", frozenset({"StartExecution"}))
        * p.STEP_FUNCTIONS_EXPRESS_REQUEST.usd,
        "events": requests("events", frozenset({"PutEvents"})) * p.EVENTBRIDGE_CUSTOM_EVENT.usd,
        "sns": requests("sns", frozenset({"Publish"})) * p.SNS_PUBLISH_REQUEST.usd,
        "sts": requests("sts") * p.STS_REQUEST.usd,
        "stepfunctions": usage.state_transitions * p.STEP_FUNCTIONS_STATE_TRANSITION.usd,
        "scheduler": usage.scheduler_invocations * p.EVENTBRIDGE_SCHEDULER_INVOCATION.usd,
        "lambda.requests": sum(usage.invocations.values()) * p.LAMBDA_REQUEST.usd,
        "lambda.duration": gb_seconds(usage.lambda_gb_seconds()),
        "lambda.wait": gb_seconds(usage.wait_gb_seconds()),
        "logs": usage.all_log_bytes() * p.CLOUDWATCH_LOGS_INGESTION.usd,
        "xray.recorded": usage.traces_recorded * p.XRAY_TRACE_RECORDED.usd,
        "xray.retrieved": usage.traces_retrieved * p.XRAY_TRACE_RETRIEVED.usd,
    }
    return {line: usd for line, usd in lines.items() if usd}


def per_million(usage: Usage) -> dict[str, Any]:
    """$ per million jobs, all in, with its lines."""
    lines = {line: round(usd * MILLION, 4) for line, usd in dollars(usage).items()}
    return {"usd_per_million": round(sum(lines.values()), 4), "usd_by_service": lines}


def expected_wait(
    fire_time: datetime,
    deliver_at: datetime,
    sent_at: datetime,
    *,
    counted_from: timedelta = timedelta(0),
    at_its_phase: bool = False,
) -> float:
    """Seconds a worker is expected to hold a message before its ``fire_time``: the
    message is due to be visible at ``deliver_at`` (its fire time, plus any jitter) and
    its delay was worked out at ``sent_at`` as the emulator's clock read it, counted from
    ``counted_from`` past that reading as the sender counts it (the ticker's
    dispatch.IN_FLIGHT), rounded down (dispatch.delay_until). SQS is taken to hold the
    message from the reading itself: the real moment is a few milliseconds later, so
    this is an upper bound by those milliseconds.

    Deployed, an API request's clock stands at any phase of the second: the wait is
    averaged over :data:`SEND_PHASES` evenly spread phases. ``at_its_phase``: the sender
    chooses its phase (the ticker sends at ``TickerConfig.send_phase``), and the
    emulator's clock stands there: the wait is the one at ``sent_at`` itself."""
    if at_its_phase:
        return _wait(fire_time, deliver_at, sent_at, counted_from)
    total = 0.0
    for phase in range(SEND_PHASES):
        now = sent_at + timedelta(seconds=(phase + 0.5) / SEND_PHASES)
        total += _wait(fire_time, deliver_at, now, counted_from)
    return total / SEND_PHASES


def _wait(
    fire_time: datetime, deliver_at: datetime, now: datetime, counted_from: timedelta
) -> float:
    visible = now + timedelta(seconds=dispatch.delay_until(deliver_at, now + counted_from))
    return max(0.0, (fire_time - visible).total_seconds())


def alternatives(*, target_cpu_seconds: float = 0.0) -> dict[str, dict[str, Any]]:
    """EventBridge Scheduler invoking a 512 MB Lambda per fire, without and with
    Powertools idempotency (a conditional put, then an update: 2 writes and 2 calls a run,
    in its own table without indexes). ``target_cpu_seconds``: the function's own CPU a
    run, the same for both (the job's work is not counted on either side); without it,
    each run is billed its calls or its minimum millisecond."""
    plain = Usage(
        billed={},
        invocations={"target": 1.0},
        cpu_seconds={"target": target_cpu_seconds},
        scheduler_invocations=1.0,
    )
    idempotent = Usage(
        billed={"dynamodb.PutItem": 1.0, "dynamodb.UpdateItem": 1.0},
        write_units=2.0,
        invocations={"target": 1.0},
        aws_calls={"target": 2.0},
        cpu_seconds={"target": target_cpu_seconds},
        scheduler_invocations=1.0,
    )
    return {
        "eventbridge_scheduler_lambda": per_million(plain),
        "eventbridge_scheduler_lambda_idempotency": per_million(idempotent),
    }
