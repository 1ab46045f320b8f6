"""Request and response models of the HTTP API (pydantic lives at this edge only).

Unknown fields are rejected (``extra="forbid"``): a misspelt ``retyr`` must not silently
fall back to defaults. Sizes are limited before anything is written; the limits are in
the OpenAPI document and docs/api.md.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, NotRequired

import pydantic
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    StringConstraints,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
    with_config,
)
from typing_extensions import TypedDict

from fireline.domain import (
    aws_target,
    dag,
    errors,
    exclusions,
    model,
    occurrence,
    policies,
    retry,
    schedule,
    workflow,
)
from fireline.domain import target as target_rules
from fireline.services import overview, workflows
from fireline.services import schedules as service

MAX_PAYLOAD_BYTES = 64 * 1024
MAX_TARGET_BYTES = 4 * 1024
MAX_BODY_BYTES = 128 * 1024  # checked on the raw request before parsing
# A batch of jobs (POST /jobs/batch): up to service.MAX_BATCH jobs of ~10 KiB each, well
# inside the gateway's 10 MB and Lambda's 6 MB request limits.
MAX_JOB_BATCH_BODY_BYTES = 1024 * 1024
# PUT /workflows/{id} takes a definition inline up to this; larger ones are uploaded.
# 4 MiB: API Gateway escapes the body into the event JSON (about +25%), and the event must
# stay under Lambda's 6 MB for synchronous invocations.
MAX_WORKFLOW_BODY_BYTES = 4 * 1024 * 1024
# Arrays and objects inside each other, the body itself counting as one: checked on the raw
# text before any decoder runs (a decoder recurses per level, and so do pydantic and the
# JSON encoder of the answer).
MAX_JSON_DEPTH = model.MAX_JSON_DEPTH
# A JSON string (its escapes included), and the brackets that remain once strings are gone.
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Does ``text`` open more than ``limit`` arrays or objects inside each other? Read
    without decoding: brackets inside strings do not count."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    if len(brackets) <= limit:
        return False
    return max(itertools.accumulate(map(_NESTING.__getitem__, brackets))) > limit


def _refuse_constant(name: str) -> Any:
    raise errors.ValidationError(f"{name} is not a JSON number", field="body")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise errors.ValidationError(f"{text[:32]} is out of range for a number", field="body")
    return value


def decode_json(text: str | bytes, *, field: str = "body") -> Any:
    """Decode a client's JSON, refusing what would break later rather than now: nesting
    past :data:`MAX_JSON_DEPTH`, ``NaN`` and ``Infinity`` (not JSON), numbers too large for
    a float (``1e309``: stored as null otherwise) and integers past Python's digit limit.
    Typed errors naming ``field``; text that is not JSON raises ``ValueError``."""
    if isinstance(text, bytes):
        text = text.decode()
    if json_too_deep(text):
        raise errors.ValidationError(f"nests deeper than {MAX_JSON_DEPTH} levels", field=field)
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)
    except errors.ValidationError as exc:
        raise errors.ValidationError(exc.detail, field=field) from exc


def _in_range(value: datetime) -> datetime:
    """Times must survive conversion to UTC and to epoch milliseconds."""
    try:
        utc = value.astimezone(UTC)
    except (OverflowError, ValueError) as exc:
        raise ValueError("is out of range (1970-01-01 to 9998-12-31 UTC)") from exc
    if not datetime(1970, 1, 1, tzinfo=UTC) <= utc <= datetime(9998, 12, 31, tzinfo=UTC):
        raise ValueError("is out of range (1970-01-01 to 9998-12-31 UTC)")
    return value


Instant = Annotated[AwareDatetime, AfterValidator(_in_range)]
# Numbers in a request are JSON numbers: "3" and true are refused, not read as 3 and 1
# (pydantic's strict mode on these fields; a whole number is still a valid float). The
# body guard has refused NaN and infinities already; the float fields refuse them again.
WholeNumber = Annotated[int, pydantic.Strict()]
Number = Annotated[float, pydantic.Strict(), pydantic.AllowInfNan(False)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- targets -----------------------------------------------------------------------------


class PythonTarget(Strict):
    """A handler registered by name in this deployment (built-in and example jobs)."""

    type: Literal["python"]
    handler: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")


class HttpTarget(Strict):
    """POST to a tenant webhook, with an Idempotency-Key header equal to the occurrence key."""

    type: Literal["http"]
    url: HttpUrl
    timeout_seconds: WholeNumber = Field(default=30, ge=1, le=900)
    headers: dict[str, str] = Field(
        default_factory=dict,
        max_length=20,
        description="sent with each call; names are tokens, values hold no line break, and "
        "the headers Fireline sets (Idempotency-Key, X-Fireline-Signature, Content-Type, "
        "User-Agent) and the client's own (Host, Content-Length, ...) cannot be replaced",
    )

    @field_validator("headers")
    @classmethod
    def _callable_headers(cls, value: dict[str, str]) -> dict[str, str]:
        try:
            target_rules.check_headers(value)
        except errors.ValidationError as exc:
            raise ValueError(exc.detail) from exc
        return value


# Whom an AWS target is called as (see fireline.domain.aws_target).
ROLE_ARN_DESCRIPTION = (
    "a role in your account that trusts Fireline's target caller role with your tenant id "
    "as ExternalId; the call is made as that role. Required unless the operator's "
    "allowlist names the target for your tenant"
)


class LambdaTarget(Strict):
    """Invoke a function synchronously, as ``role_arn``."""

    type: Literal["lambda"]
    function_arn: str = Field(
        pattern=r"^arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:\d{12}:function:[A-Za-z0-9_-]+(:[A-Za-z0-9_$-]+)?$"
    )
    role_arn: str | None = Field(
        default=None, pattern=rf"^{aws_target.ROLE_ARN.pattern}$", description=ROLE_ARN_DESCRIPTION
    )


class SqsTarget(Strict):
    """Send a message to a queue, as ``role_arn``."""

    type: Literal["sqs"]
    queue_url: HttpUrl
    role_arn: str | None = Field(
        default=None, pattern=rf"^{aws_target.ROLE_ARN.pattern}$", description=ROLE_ARN_DESCRIPTION
    )


def _arn_pattern(arn: re.Pattern[str]) -> str:
    """The domain's ARN shape as a JSON Schema pattern: ECMA-262 has no ``(?P<name>``."""
    return "^" + re.sub(r"\(\?P<\w+>", "(", arn.pattern) + "$"


class StepFunctionsTarget(Strict):
    """Start an execution of a state machine, as ``role_arn``. The execution's name is
    derived from the occurrence key, so a standard state machine runs a fire once however
    often it is delivered (an express one keeps no names: it may run a fire twice)."""

    type: Literal["stepfunctions"]
    state_machine_arn: str = Field(
        pattern=_arn_pattern(aws_target.STATE_MACHINE_ARN),
        description="arn:aws:states:<region>:<account>:stateMachine:<name>",
    )
    role_arn: str | None = Field(
        default=None, pattern=rf"^{aws_target.ROLE_ARN.pattern}$", description=ROLE_ARN_DESCRIPTION
    )


class EventBridgeTarget(Strict):
    """Put one event on a bus, as ``role_arn``. EventBridge has no deduplication id: the
    event's detail carries ``occurrence_key`` for receivers to recognise a repeat."""

    type: Literal["eventbridge"]
    event_bus_arn: str = Field(
        pattern=_arn_pattern(aws_target.EVENT_BUS_ARN),
        description="arn:aws:events:<region>:<account>:event-bus/<name>",
    )
    detail_type: str = Field(min_length=1, max_length=aws_target.MAX_DETAIL_TYPE)
    source: str = Field(
        min_length=1,
        max_length=aws_target.MAX_SOURCE,
        description="the event's source; not starting with aws. (AWS's own sources)",
    )
    role_arn: str | None = Field(
        default=None, pattern=rf"^{aws_target.ROLE_ARN.pattern}$", description=ROLE_ARN_DESCRIPTION
    )


class SnsTarget(Strict):
    """Publish a message to a topic, as ``role_arn``, with the occurrence key as its
    ``IdempotencyKey`` attribute (and, on a FIFO topic, as its deduplication id)."""

    type: Literal["sns"]
    topic_arn: str = Field(
        pattern=_arn_pattern(aws_target.TOPIC_ARN),
        description="arn:aws:sns:<region>:<account>:<name>",
    )
    role_arn: str | None = Field(
        default=None, pattern=rf"^{aws_target.ROLE_ARN.pattern}$", description=ROLE_ARN_DESCRIPTION
    )


Target = Annotated[
    PythonTarget
    | HttpTarget
    | LambdaTarget
    | SqsTarget
    | StepFunctionsTarget
    | EventBridgeTarget
    | SnsTarget,
    Field(discriminator="type"),
]


class WorkflowTarget(Strict):
    """Start a run of a registered workflow on each fire (schedules and jobs only: a
    workflow's own nodes run jobs, so a workflow cannot start itself)."""

    type: Literal["workflow"]
    workflow_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    version: WholeNumber | None = Field(default=None, ge=1, description="default: the latest")


ScheduleTarget = Annotated[
    PythonTarget
    | HttpTarget
    | LambdaTarget
    | SqsTarget
    | StepFunctionsTarget
    | EventBridgeTarget
    | SnsTarget
    | WorkflowTarget,
    Field(discriminator="type"),
]


# --- policies ----------------------------------------------------------------------------


class DstIn(Strict):
    gap: Literal["shift", "skip"] = "shift"
    repeat: Literal["first", "last", "both"] = "first"


class RetryIn(Strict):
    max_attempts: WholeNumber = Field(
        default=3, ge=1, le=100, description="counts the first attempt"
    )
    base_seconds: Number = Field(default=2.0, ge=0, le=900)
    factor: Number = Field(default=2.0, ge=1, le=10)
    cap_seconds: Number = Field(default=300.0, ge=0, le=900)
    jitter: Literal["full", "none"] = "full"

    @model_validator(mode="after")
    def _cap_covers_base(self) -> RetryIn:
        if self.cap_seconds < self.base_seconds:
            raise ValueError("cap_seconds must be at least base_seconds")
        return self

    def to_domain(self) -> retry.RetryPolicy:
        return retry.RetryPolicy(
            max_attempts=self.max_attempts,
            base_seconds=self.base_seconds,
            factor=self.factor,
            cap_seconds=self.cap_seconds,
            jitter=retry.Jitter(self.jitter),
        )


class MisfireIn(Strict):
    policy: Literal["fire_all", "fire_once", "skip"] = "fire_once"
    grace_seconds: WholeNumber = Field(default=60, ge=0, le=86_400)
    catch_up_window_seconds: WholeNumber = Field(default=3600, ge=0, le=7 * 86_400)
    catch_up_max: WholeNumber = Field(default=10, ge=0, le=1000)

    def to_domain(self) -> policies.Misfire:
        return policies.Misfire(
            policy=policies.MisfirePolicy(self.policy),
            grace_seconds=self.grace_seconds,
            catch_up_window_seconds=self.catch_up_window_seconds,
            catch_up_max=self.catch_up_max,
        )


def _check_size(value: Any, limit: int, what: str) -> Any:
    size = len(json.dumps(value, separators=(",", ":")).encode())
    if size > limit:
        raise ValueError(f"{what} is {size} bytes; the limit is {limit}")
    return value


# --- requests ----------------------------------------------------------------------------


class JobSpecIn(Strict):
    job_class: Literal["default", "short", "long"] = "default"
    target: ScheduleTarget
    payload: dict[str, Any] = Field(default_factory=dict, description="at most 64 KiB as JSON")
    retry: RetryIn = Field(default_factory=RetryIn)
    deadline_seconds: WholeNumber | None = Field(default=None, ge=1, le=7 * 86_400)

    @field_validator("payload")
    @classmethod
    def _payload_size(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _check_size(value, MAX_PAYLOAD_BYTES, "payload")  # type: ignore[no-any-return]

    @field_validator("target")
    @classmethod
    def _target_size(cls, value: BaseModel) -> BaseModel:
        _check_size(value.model_dump(mode="json"), MAX_TARGET_BYTES, "target")
        return value

    def target_dict(self) -> dict[str, Any]:
        return self.target.model_dump(mode="json")


class ExcludeRangeIn(Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    first: str = Field(alias="from", max_length=10, examples=["2026-12-28"])
    last: str = Field(alias="to", max_length=10, examples=["2026-12-31"])


ExcludeEntry = Annotated[str | ExcludeRangeIn, Field(union_mode="left_to_right")]


class SkipIn(Strict):
    fire_time: Instant = Field(description="one of the schedule's upcoming fire times")


class ScheduleIn(JobSpecIn):
    spec: str = Field(
        min_length=1,
        max_length=256,
        description="cron(...) (5 fields, or 6 with seconds first), rate(N unit), at(ISO time), "
        "bare cron fields, or a natural-language form such as 'every day at 09:30'",
        examples=["cron(0 9 * * MON-FRI)", "rate(5 minutes)", "every day at 09:30"],
    )
    timezone: str = Field(default="UTC", max_length=64, examples=["Europe/Paris"])
    dst: DstIn = Field(default_factory=DstIn)
    start: Instant | None = None
    end: Instant | None = None
    misfire: MisfireIn = Field(default_factory=MisfireIn)
    overlap: Literal["allow", "forbid", "buffer_one"] = "allow"
    jitter_seconds: WholeNumber = Field(default=0, ge=0, le=900)
    exclude: list[ExcludeEntry] = Field(
        default_factory=list,
        max_length=exclusions.MAX_ENTRIES,
        description="days of the schedule's zone it does not fire on: dates (2026-12-25), "
        "ranges ({from, to}, both included) and day patterns (five cron fields whose minute "
        "and hour are *: '* * 1 1 *' is every 1 January)",
        examples=[["2026-12-25", {"from": "2026-12-28", "to": "2026-12-31"}, "* * 1 1 *"]],
    )

    def to_draft(self) -> service.ScheduleDraft:
        return service.ScheduleDraft(
            spec=self.spec,
            timezone=self.timezone,
            dst=schedule.DstPolicy(
                gap=schedule.GapPolicy(self.dst.gap), repeat=schedule.RepeatPolicy(self.dst.repeat)
            ),
            start=self.start,
            end=self.end,
            job_class=self.job_class,
            target=self.target_dict(),
            payload=self.payload,
            retry=self.retry.to_domain(),
            misfire=self.misfire.to_domain(),
            overlap=policies.OverlapPolicy(self.overlap),
            jitter_seconds=self.jitter_seconds,
            deadline_seconds=self.deadline_seconds,
            exclude=exclusions.parse(
                [e if isinstance(e, str) else e.model_dump(by_alias=True) for e in self.exclude]
            ),
        )


class JobIn(JobSpecIn):
    run_at: Instant | None = Field(default=None, description="give run_at or delay_seconds")
    # validate_default: the check below must also run when delay_seconds is left out.
    delay_seconds: WholeNumber | None = Field(
        default=None, ge=0, le=365 * 86_400, validate_default=True
    )

    @field_validator("delay_seconds")
    @classmethod
    def _one_time(cls, value: int | None, info: ValidationInfo) -> int | None:
        # On a field rather than the model, so the error names a field for the client.
        # A run_at that failed its own validation is absent from info.data: not repeated.
        if "run_at" in info.data and (info.data["run_at"] is None) == (value is None):
            raise ValueError("give exactly one of run_at and delay_seconds")
        return value

    def to_draft(self) -> service.JobDraft:
        return service.JobDraft(
            run_at=self.run_at,
            delay_seconds=self.delay_seconds,
            job_class=self.job_class,
            target=self.target_dict(),
            payload=self.payload,
            retry=self.retry.to_domain(),
            deadline_seconds=self.deadline_seconds,
        )


class JobBatchIn(Strict):
    jobs: list[JobIn] = Field(
        min_length=1,
        max_length=service.MAX_BATCH,
        description=f"1 to {service.MAX_BATCH} jobs, each as POST /jobs takes it; created "
        "all or none",
    )

    def to_drafts(self) -> list[service.JobDraft]:
        return [job.to_draft() for job in self.jobs]


class HeartbeatIn(Strict):
    progress: dict[str, Any] | None = Field(
        default=None, description="how far the job got (at most 16 KiB as JSON)"
    )

    @field_validator("progress")
    @classmethod
    def _progress_size(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            _check_size(value, 16 * 1024, "progress")
        return value


# --- workflows ---------------------------------------------------------------------------
#
# A definition may hold 100,000 nodes. Each node is validated as a TypedDict (no model
# instance per node: about three times faster than a model), and the nodes of a workflow
# mostly share a few targets, so each distinct target is validated and dumped once.

MAX_UPLOAD_BYTES = workflows.MAX_UPLOAD_BYTES  # an uploaded definition (the POST policy's)
_DEFAULT_RETRY = retry.RetryPolicy()

NodeId = Annotated[str, StringConstraints(pattern=dag.NODE_ID.pattern)]
EdgeEnd = Annotated[str, StringConstraints(max_length=128)]
Edge = tuple[EdgeEnd, EdgeEnd]


def _node_payload_size(value: dict[str, Any]) -> dict[str, Any]:
    if value:
        _check_size(value, MAX_PAYLOAD_BYTES, "payload")
    return value


def _node_target_size(value: BaseModel) -> BaseModel:
    # Only an http target's headers are unbounded; the other fields have patterns/limits.
    if isinstance(value, HttpTarget) and value.headers:
        _check_size(value.model_dump(mode="json"), MAX_TARGET_BYTES, "target")
    return value


class _Shared:
    """Validate each distinct input once (nodes mostly share a few targets and retry
    policies). The key is the input's repr: for JSON input, equal reprs are equal values,
    so the cached result is what validating would give. Cached models are never changed
    (they are only read and dumped)."""

    def __init__(self, check: Callable[[BaseModel], BaseModel] | None = None) -> None:
        self._check = check
        self._cache: dict[str, BaseModel] = {}

    def __call__(self, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(value, dict):
            return handler(value)
        key = repr(value)
        found = self._cache.get(key)
        if found is None:
            found = handler(value)
            if self._check is not None:
                found = self._check(found)
            if len(self._cache) >= 1024:  # bounded: a process lives on between requests
                self._cache.clear()
            self._cache[key] = found
        return found


@with_config(ConfigDict(extra="forbid"))
class NodeIn(TypedDict):
    """One node of a workflow: its id and the job it runs (the fields of a one-off job)."""

    id: NodeId
    target: Annotated[Target, WrapValidator(_Shared(_node_target_size))]
    payload: NotRequired[Annotated[dict[str, Any], AfterValidator(_node_payload_size)]]
    job_class: NotRequired[Literal["default", "short", "long"]]
    retry: NotRequired[Annotated[RetryIn, WrapValidator(_Shared())]]
    deadline_seconds: NotRequired[Annotated[WholeNumber, Field(ge=1, le=7 * 86_400)]]


_NODES_DOC = f"1 to {dag.MAX_NODES:,} nodes; ids (1-128 of A-Z a-z 0-9 _ . : -) are unique"
_EDGES_DOC = (
    f"[parent, child] pairs, at most {dag.MAX_EDGES:,}: a child runs once every parent "
    "succeeded; the graph has no cycle"
)


def node_specs(nodes: list[NodeIn]) -> list[workflow.NodeSpec]:
    # By model: nodes share validated targets and policies (see _Shared).
    dumped: dict[int, dict[str, Any]] = {}
    policies: dict[int, retry.RetryPolicy] = {}
    specs = []
    for node in nodes:
        target: BaseModel = node["target"]
        as_dict = dumped.get(id(target))
        if as_dict is None:
            as_dict = dumped[id(target)] = target.model_dump(mode="json")
        policy = _DEFAULT_RETRY
        if "retry" in node:
            given = node["retry"]
            policy = policies.get(id(given)) or policies.setdefault(id(given), given.to_domain())
        specs.append(
            workflow.NodeSpec(
                node_id=node["id"],
                target=as_dict,
                payload=node.get("payload") or {},
                job_class=node.get("job_class", "default"),
                retry=policy,
                deadline_seconds=node.get("deadline_seconds"),
            )
        )
    return specs


class DefinitionIn(Strict):
    """A workflow definition: inline in PUT /workflows/{id}, or the uploaded document."""

    nodes: list[NodeIn] = Field(description=_NODES_DOC)
    edges: list[Edge] = Field(default_factory=list, description=_EDGES_DOC)
    description: str | None = Field(default=None, max_length=1024)

    def specs(self) -> list[workflow.NodeSpec]:
        return node_specs(self.nodes)


class WorkflowIn(Strict):
    """Body of PUT /workflows/{id}: the definition inline (at most 4 MiB), or the id of a
    definition uploaded through POST /workflow-uploads."""

    nodes: list[NodeIn] | None = Field(default=None, description=_NODES_DOC)
    edges: list[Edge] | None = Field(default=None, description=_EDGES_DOC)
    description: str | None = Field(default=None, max_length=1024)
    # validate_default: the check below must also run when upload_id is left out.
    upload_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9]{1,64}$",
        validate_default=True,
        description="from POST /workflow-uploads; instead of nodes and edges",
    )

    @field_validator("upload_id")
    @classmethod
    def _one_source(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Nodes that failed their own validation are absent from info.data: not repeated.
        if "nodes" in info.data and (info.data["nodes"] is None) == (value is None):
            raise ValueError("give exactly one of nodes and upload_id")
        if value is not None and (
            info.data.get("edges") is not None or info.data.get("description") is not None
        ):
            raise ValueError("an uploaded definition carries its own edges and description")
        return value

    def inline(self) -> DefinitionIn | None:
        """The inline definition (already validated), or None for an upload."""
        if self.nodes is None:
            return None
        return DefinitionIn.model_construct(
            nodes=self.nodes, edges=self.edges or [], description=self.description
        )


def uploaded_definition(raw: bytes) -> DefinitionIn:
    """An uploaded document, validated by the same model as an inline body.

    Its size was checked before it was read (WorkflowService.uploaded); the node and
    edge counts are checked before any node is, so a document far over them is refused
    without validating a node. Raises pydantic's ValidationError for the model's errors.
    """
    try:
        doc = decode_json(raw, field="upload_id")
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.ValidationError(
            "the uploaded definition is not JSON", field="upload_id"
        ) from exc
    if not isinstance(doc, dict):
        raise errors.ValidationError(
            "the uploaded definition is not a JSON object", field="upload_id"
        )
    for name, limit in (("nodes", dag.MAX_NODES), ("edges", dag.MAX_EDGES)):
        items = doc.get(name)
        if isinstance(items, list) and len(items) > limit:
            raise errors.ValidationError(f"{len(items)} {name}; the limit is {limit}", field=name)
    return DefinitionIn.model_validate(doc)


class RunIn(Strict):
    version: WholeNumber | None = Field(default=None, ge=1, description="the latest when left out")


# --- responses ---------------------------------------------------------------------------


def shown(stored: dict[str, Any]) -> dict[str, Any]:
    """A stored free-form value as an answer shows it: itself, or, if it nests past
    MAX_JSON_DEPTH (a row written before the API refused such input), an account of it:
    encoding it whole would fail the answer, and with it the tenant's whole listing."""
    return model.too_deep_account(stored) or stored


class ScheduleOut(BaseModel):
    id: str
    spec: str
    description: str
    timezone: str
    dst: DstIn
    start: datetime | None
    end: datetime | None
    job_class: str
    target: dict[str, Any]
    payload: dict[str, Any]
    retry: RetryIn
    misfire: MisfireIn
    overlap: str
    jitter_seconds: int
    deadline_seconds: int | None
    state: str
    version: int
    next_fire: datetime | None = Field(
        description="the earliest fire that has not run yet, whether or not the ticker has"
        " sent it ahead (none while paused or once completed)"
    )
    created_at: datetime | None
    updated_at: datetime | None
    exclude: list[str | dict[str, str]] = Field(
        default_factory=list, description="the days it does not fire on, as given"
    )
    skipped_fires: list[datetime] = Field(
        default_factory=list,
        description="upcoming fires skipped one by one (POST /schedules/{id}/skip)",
    )

    @classmethod
    def of(cls, item: model.Schedule, now: datetime | None = None) -> ScheduleOut:
        """``now``: what the next fire is counted from (None: the schedule's next fire to
        send, as stored; the fires it was sent ahead of are then not counted)."""
        t = item.timing
        return cls(
            id=item.schedule_id,
            spec=item.spec_text,
            description=item.description,
            timezone=t.timezone,
            dst=DstIn(gap=t.dst.gap.value, repeat=t.dst.repeat.value),
            start=t.start,
            end=t.end,
            job_class=item.job_class,
            target=shown(item.target),
            payload=shown(item.payload),
            retry=RetryIn(
                max_attempts=item.retry.max_attempts,
                base_seconds=item.retry.base_seconds,
                factor=item.retry.factor,
                cap_seconds=item.retry.cap_seconds,
                jitter=item.retry.jitter.value,
            ),
            misfire=MisfireIn(
                policy=item.misfire.policy.value,
                grace_seconds=item.misfire.grace_seconds,
                catch_up_window_seconds=item.misfire.catch_up_window_seconds,
                catch_up_max=item.misfire.catch_up_max,
            ),
            overlap=item.overlap.value,
            jitter_seconds=item.jitter_seconds,
            deadline_seconds=item.deadline_seconds,
            state=item.state.value,
            version=item.version,
            next_fire=item.next_fire if now is None else item.upcoming(now),
            created_at=item.created_at,
            updated_at=item.updated_at,
            exclude=t.exclude.as_json(),
            skipped_fires=sorted(s for s in t.skips if now is None or s > now),
        )


def occurrence_id(key: str) -> str:
    """A URL-safe id for an occurrence key (which holds '#' and ':')."""
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def occurrence_key(occurrence_id: str) -> str:
    padded = occurrence_id + "=" * (-len(occurrence_id) % 4)
    try:
        return base64.urlsafe_b64decode(padded.encode()).decode()
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.NotFound("no such occurrence") from exc


class OccurrenceOut(BaseModel):
    id: str = Field(description="URL-safe id of the occurrence (base64url of its key)")
    key: str
    schedule_id: str
    version: int
    fire_time: datetime
    job_class: str
    state: str
    attempts: int
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    duration_seconds: float | None
    exit_reason: str | None
    progress: dict[str, Any]
    run_id: str | None = Field(
        default=None, description="a workflow node's occurrence: the run it belongs to"
    )
    node_id: str | None = Field(
        default=None,
        description="a workflow node's occurrence: the node (its generation is `version`: "
        "each 'retry failed' runs a node again as a new generation)",
    )
    skipped_last: datetime | None = Field(
        default=None,
        description=(
            "a summary of skipped fires: the last fire it counts (every fire from fire_time"
            " to this one was skipped, but for a fire with an occurrence of its own); null"
            " for the occurrence of one fire"
        ),
    )
    skipped_count: int | None = Field(
        default=None, description="a summary of skipped fires: how many fires it counts"
    )
    origin: str | None = Field(
        default=None, description="`backfill` for a fire a backfill wrote; null otherwise"
    )
    backfill_id: str | None = Field(default=None, description="the backfill that wrote it")

    @classmethod
    def of(cls, item: occurrence.Occurrence) -> OccurrenceOut:
        run_id, node_id = workflow.parse_node_schedule_id(item.schedule_id) or (None, None)
        return cls(
            id=occurrence_id(item.key),
            key=item.key,
            schedule_id=item.schedule_id,
            run_id=run_id,
            node_id=node_id,
            version=item.version,
            fire_time=item.fire_time,
            job_class=item.job_class,
            state=item.state.value,
            attempts=item.attempts,
            created_at=item.created_at,
            started_at=item.started_at,
            finished_at=item.finished_at,
            duration_seconds=item.duration_seconds,
            exit_reason=item.exit_reason,
            skipped_last=item.skipped_last,
            skipped_count=item.skipped_count,
            origin="backfill" if item.backfill_id else None,
            backfill_id=item.backfill_id,
            progress=shown(item.progress),
        )


class JobOut(BaseModel):
    id: str
    state: str
    run_at: datetime
    job_class: str
    target: dict[str, Any]
    payload: dict[str, Any]
    occurrence: OccurrenceOut | None
    created_at: datetime | None

    @classmethod
    def of(cls, view: service.JobView) -> JobOut:
        job = view.job
        spec = job.timing.spec
        assert isinstance(spec, schedule.AtSpec)
        return cls(
            id=job.schedule_id,
            state=view.state,
            run_at=spec.when,
            job_class=job.job_class,
            target=shown(job.target),
            payload=shown(job.payload),
            occurrence=OccurrenceOut.of(view.occurrence) if view.occurrence else None,
            created_at=job.created_at,
        )


class JobCreatedOut(BaseModel):
    id: str
    state: str
    run_at: datetime

    @classmethod
    def of(cls, view: service.JobView) -> JobCreatedOut:
        return cls(id=view.job.schedule_id, state=view.state, run_at=view.fire_time)


class JobBatchOut(BaseModel):
    jobs: list[JobCreatedOut] = Field(description="the created jobs, in the request's order")


class SchedulePage(BaseModel):
    items: list[ScheduleOut]
    next_cursor: str | None


class OccurrencePage(BaseModel):
    items: list[OccurrenceOut]
    next_cursor: str | None


class FireOut(BaseModel):
    fire_time: datetime
    queued: bool = Field(description="already sent: its message waits in the queue")
    sent_at: datetime | None = Field(
        default=None,
        description="when a queued fire's message was sent, when known (null: not sent, or"
        " sent by an earlier pass of the ticker)",
    )
    excluded: Literal["skipped", "excluded"] | None = Field(
        default=None,
        description="a fire of the spec that does not run: 'skipped' one by one (DELETE "
        "/schedules/{id}/skip takes it back) or 'excluded' by the exclude list",
    )


class PreviewOut(BaseModel):
    schedule_id: str
    description: str
    timezone: str
    fire_times: list[datetime]
    fires: list[FireOut] = Field(
        description="the same fire times, the queued ones marked, and among them the fires "
        "of the spec the schedule skips or excludes (marked; they do not run)"
    )


class WorkflowOut(BaseModel):
    workflow_id: str
    version: int
    nodes: int
    edges: int
    created_at: datetime

    @classmethod
    def of(cls, meta: workflow.DefinitionMeta) -> WorkflowOut:
        return cls(
            workflow_id=meta.workflow_id,
            version=meta.version,
            nodes=meta.nodes,
            edges=meta.edges,
            created_at=meta.created_at,
        )


class UploadOut(BaseModel):
    upload_id: str
    upload_url: str = Field(
        description="POST the definition document (JSON) here, as a multipart form: "
        "upload_fields first, then the document as the field named file"
    )
    upload_fields: dict[str, str] = Field(
        description="the form's fields, as given (the key, the content type and the signed policy)"
    )
    expires_in: int = Field(description="seconds the form stays valid")
    max_bytes: int = Field(description="the largest document the form accepts")


class RunOut(BaseModel):
    run_id: str
    workflow_id: str
    version: int
    state: str
    total: int = Field(description="nodes in the run")
    generation: int = Field(description="1, then +1 on each retry of the failed nodes")
    created_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, run: workflow.Run) -> RunOut:
        return cls(
            run_id=run.run_id,
            workflow_id=run.workflow_id,
            version=run.version,
            state=run.state.value,
            total=run.total,
            generation=run.generation,
            created_at=run.created_at,
            finished_at=run.finished_at,
        )


class WorkflowPage(BaseModel):
    items: list[WorkflowOut]
    next_cursor: str | None


class RunPage(BaseModel):
    items: list[RunOut]
    next_cursor: str | None


class RunViewOut(RunOut):
    counts: dict[str, int] = Field(description="nodes in each state (every state is present)")
    progress: float = Field(ge=0, le=1, description="finished nodes / total")
    failed_nodes: list[str] = Field(description="the first failed nodes (at most 100)")

    @classmethod
    def of_view(cls, view: workflows.RunView) -> RunViewOut:
        return cls(
            **RunOut.of(view.run).model_dump(),
            counts={state.value: view.counts.get(state, 0) for state in dag.NodeState},
            progress=view.progress,
            failed_nodes=view.failed_nodes,
        )


class RunNodeOut(BaseModel):
    id: str
    state: str
    generation: int
    pending: int = Field(description="parents not finished yet")
    exit_reason: str | None = Field(description="of its latest attempt; null before it ran")

    @classmethod
    def of(cls, view: workflows.NodeView) -> RunNodeOut:
        node = view.node
        return cls(
            id=node.node_id,
            state=node.state.value,
            generation=node.generation,
            pending=node.pending,
            exit_reason=view.exit_reason,
        )


class RunNodePage(BaseModel):
    items: list[RunNodeOut]
    next_cursor: str | None


class JobPage(BaseModel):
    items: list[JobOut]
    next_cursor: str | None


def listing_cursor(
    tenant_id: str, listing: str, filters: dict[str, str | None], after: str | None
) -> str | None:
    """An opaque cursor that is only good for the listing (its filters, its tenant) that
    returned it: ``after`` is the store's own cursor, which knows nothing of filters."""
    if after is None:
        return None
    key = {"tenant": tenant_id, "listing": listing, "filters": _given(filters), "after": after}
    return base64.urlsafe_b64encode(json.dumps(key, sort_keys=True).encode()).decode()


def _given(filters: dict[str, str | None]) -> dict[str, str]:
    # A filter left out is no filter: a listing's cursor stays the same when it gains one.
    return {name: value for name, value in filters.items() if value is not None}


def listing_cursor_after(
    cursor: str | None, tenant_id: str, listing: str, filters: dict[str, str | None]
) -> str | None:
    """Where a cursor from :func:`listing_cursor` resumes; a client's input, so checked:
    a cursor of another tenant, listing or filter is refused (a 400 naming ``cursor``)."""
    if cursor is None:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, RecursionError) as exc:  # not base64, not JSON, nested too deep
        raise errors.ValidationError("is not a cursor this API returned", field="cursor") from exc
    if (
        not isinstance(key, dict)
        or set(key) != {"tenant", "listing", "filters", "after"}
        or not isinstance(key["after"], str)
        or not isinstance(key["filters"], dict)
    ):
        raise errors.ValidationError("is not a cursor this API returned", field="cursor")
    if (key["tenant"], key["listing"], key["filters"]) != (tenant_id, listing, _given(filters)):
        raise errors.ValidationError("belongs to another listing", field="cursor")
    return str(key["after"])


def instant(text: str | None, field: str) -> datetime | None:
    """An ISO 8601 instant of a query string (with its UTC offset), in the API's range;
    anything else is a 400 naming ``field``."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
        if value.tzinfo is None:
            raise ValueError("no UTC offset")
        return _in_range(value).astimezone(UTC)
    except ValueError as exc:
        raise errors.ValidationError(
            "must be an ISO 8601 instant with a UTC offset, e.g. 2026-05-01T12:00:00Z",
            field=field,
        ) from exc


class ErrorBody(BaseModel):
    type: str
    message: str
    field: str | None = None


class QuotaErrorBody(ErrorBody):
    quota: str = Field(description="the quota used up (schedules, active_jobs, ...)")
    limit: int
    used: int


class ErrorOut(BaseModel):
    error: ErrorBody


class QuotaErrorOut(BaseModel):
    error: QuotaErrorBody


class WhoAmIOut(BaseModel):
    tenant_id: str = Field(description="the key's own tenant")
    role: str = Field(description="tenant, or operator (reads every tenant, writes nothing)")
    viewing: str = Field(description="the tenant this request read (an operator's ?tenant=)")


class TenantsOut(BaseModel):
    items: list[str]


class ClassLoadOut(BaseModel):
    job_class: str
    backlog: int = Field(description="the tenant's occurrences queued")
    in_flight: int = Field(description="the tenant's occurrences running")


class LagPointOut(BaseModel):
    minute: datetime = Field(description="the minute of the fire times")
    count: int
    start_p50_ms: float | None
    start_p99_ms: float | None
    enqueue_p50_ms: float | None
    enqueue_p99_ms: float | None


class TickerGroupOut(BaseModel):
    group: int
    lease: str
    holder: str | None = Field(description="the holder's id (its first 8 characters); null: none")
    token: int | None
    expires_at: datetime | None


class QueueLoadOut(BaseModel):
    job_class: str
    ready: int = Field(description="waiting to be taken")
    delayed: int = Field(description="sent ahead of their fire time")
    in_flight: int = Field(description="taken by a worker, not yet deleted")


class OverviewOut(BaseModel):
    tenant_id: str
    generated_at: datetime
    since: datetime
    classes: list[ClassLoadOut]
    occurrences: dict[str, int] = Field(
        description="schedules' and jobs' occurrences fired since `since`, by state "
        "(workflow nodes are counted on their runs)"
    )
    lag: list[LagPointOut]
    tickers: list[TickerGroupOut]
    dead_letters: int = Field(
        description="dead occurrences waiting for a redrive, whenever they died: of "
        "schedules, jobs and workflow nodes (`dead_letters_by_source`)"
    )
    dead_letters_by_source: dict[str, int] = Field(
        description="`dead_letters` by what they are of: schedules, jobs, workflow nodes"
    )
    schedules: int
    capped: bool = Field(description="a read bound was met: counts are lower bounds")
    queues: list[QueueLoadOut] | None = Field(
        default=None,
        description="the deployment's class queues, every tenant's messages (SQS's "
        "approximate counts); operators' keys only",
    )

    @classmethod
    def of(cls, found: overview.Figures) -> OverviewOut:
        return cls(
            tenant_id=found.tenant_id,
            generated_at=found.now,
            since=found.since,
            classes=[
                ClassLoadOut(job_class=c, backlog=b, in_flight=f)
                for c, (b, f) in found.classes.items()
            ],
            occurrences=found.states,
            lag=[LagPointOut(**dataclasses.asdict(p)) for p in found.lags],
            tickers=[
                TickerGroupOut(
                    group=t.group,
                    lease=t.lease,
                    holder=t.holder,
                    token=t.token,
                    expires_at=(
                        None
                        if t.expires_at_ms is None
                        else datetime.fromtimestamp(t.expires_at_ms / 1000, UTC)
                    ),
                )
                for t in found.tickers
            ],
            dead_letters=found.dead_letters,
            dead_letters_by_source=found.dead_by_source,
            schedules=found.schedules,
            capped=found.capped,
            queues=(
                [
                    QueueLoadOut(job_class=c, **dataclasses.asdict(load))
                    for c, load in found.queues.items()
                ]
                if found.queues is not None
                else None
            ),
        )


class GraphNodeOut(BaseModel):
    id: str
    state: str
    depth: int = Field(description="longest path from a root: the layer it is drawn in")


class RunGraphOut(BaseModel):
    run: RunOut
    nodes: list[GraphNodeOut]
    edges: list[tuple[str, str]]
    complete: bool = Field(description="every node of the run is here")

    @classmethod
    def of(cls, found: workflows.RunGraph) -> RunGraphOut:
        return cls(
            run=RunOut.of(found.run),
            nodes=[GraphNodeOut(id=n, state=s.value, depth=d) for n, s, d in found.nodes],
            edges=found.edges,
            complete=found.complete,
        )
