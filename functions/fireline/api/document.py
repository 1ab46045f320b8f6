"""The OpenAPI document's parts that hold for every route: who may call (the API key), the
errors any call can meet, the Idempotency-Key header, links between operations, and the
Swagger UI page that renders the document.

The routes in ``app`` declare their own success bodies (with :func:`success`) and links;
:func:`finish` adds what follows from how the API answers any request, by rule:

- every operation needs the ``x-api-key`` header (the gateway's authorizer reads it), and
  may answer 400, 401, 403, 422, 429 and 503;
- an operation with a path parameter may answer 404 (no such resource for this tenant);
- an operation that changes something may answer 409 (its state forbids it, or a
  concurrent change won);
- an operation that takes a body may answer 413 and 415 (checked on the raw request);
- a GET also takes ``tenant`` (an operator's key reads that tenant); any query parameter
  an operation does not list is refused with a 400 naming it.

Every error is the one shape ``{"error": {"type", "message", "field"}}`` (models.ErrorOut),
the gateway's own refusals included.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from aws_lambda_powertools.event_handler import content_types
from aws_lambda_powertools.event_handler.openapi import swagger_ui
from aws_lambda_powertools.event_handler.openapi.models import Example
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from fireline.api import models
from fireline.domain import api_keys

API_KEY_HEADER = "x-api-key"
SECURITY_SCHEME = "apiKey"
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,128}$"
# The operations that honour an Idempotency-Key header (app's ``once``).
IDEMPOTENT = frozenset(
    {
        ("post", "/schedules"),
        ("post", "/schedules/{schedule_id}/trigger"),
        ("post", "/jobs"),
        ("post", "/jobs/batch"),
        ("put", "/workflows/{workflow_id}"),
        ("post", "/workflows/{workflow_id}/runs"),
    }
)
# The query parameter every GET takes besides its own: an operator's key reads the tenant
# it names (app's ``tenant``).
TENANT_PARAMETER = "tenant"
ERRORS: dict[int, str] = {
    400: "A value the API refuses, its field named: a query parameter the operation does "
    "not list, a cursor it did not return, an unknown state, a schedule spec or time zone "
    "it cannot read, a body nested too deep",
    401: f"No {API_KEY_HEADER} header, or a key that is unknown or revoked",
    403: "The key's usage plan refuses the call, or a tenant quota is used up (then the "
    "error also gives quota, limit and used)",
    404: "No such resource for this tenant",
    409: "The resource's state forbids it, or a concurrent change won: read it and retry "
    "(or a run's stored definition no longer matches its digest: register it again)",
    413: "The request body is too large",
    415: "The request body is not application/json",
    422: "The request does not match this document, its field named",
    429: "Over the request rate, the daily request quota or a daily tenant quota: retry later",
    503: "A backend is unavailable: retry shortly",
}
ALWAYS = (400, 401, 403, 422, 429, 503)
# Reads that load a run's stored definition, refused (409) when it does not match its
# digest (errors.CorruptDefinition).
READS_DEFINITION = frozenset({"/runs/{run_id}/graph"})
ERROR_SCHEMA = "ErrorOut"
_REF = "#/components/schemas/"


# --- request examples (each a valid body: the document's readers, and its tests, send them) --

_ECHO = {"type": "python", "handler": "echo"}
SCHEDULE_EXAMPLES = {
    "weekdays": Example(
        summary="Every weekday at 09:00 Paris time, a registered handler with a payload",
        value={
            "spec": "cron(0 9 * * MON-FRI)",
            "timezone": "Europe/Paris",
            "target": _ECHO,
            "payload": {"report": "daily"},
        },
    ),
    "natural language": Example(
        summary="In words, with five attempts and no overlapping runs",
        value={
            "spec": "every day at 09:30",
            "target": {"type": "python", "handler": "noop"},
            "retry": {"max_attempts": 5},
            "overlap": "forbid",
        },
    ),
    "with exclusions": Example(
        summary="Every weekday at 09:00 New York time, except two holidays and a freeze",
        value={
            "spec": "cron(0 9 * * MON-FRI)",
            "timezone": "America/New_York",
            "target": _ECHO,
            "exclude": ["2026-12-25", "2027-01-01", {"from": "2026-11-23", "to": "2026-11-27"}],
        },
    ),
}
JOB_EXAMPLES = {
    "delay": Example(
        summary="Once, in an hour",
        value={"delay_seconds": 3600, "target": _ECHO, "payload": {"order": 42}},
    ),
    "at": Example(
        summary="Once, at a time, as a short job",
        value={"run_at": "2030-01-01T09:00:00Z", "job_class": "short", "target": _ECHO},
    ),
    "state machine": Example(
        summary="Once, in a minute: an execution of your state machine, as your role",
        value={
            "delay_seconds": 60,
            "target": {
                "type": "stepfunctions",
                "state_machine_arn": "arn:aws:states:us-east-1:111122223333:stateMachine:reports",
                "role_arn": "arn:aws:iam::111122223333:role/fireline-target/fireline-jobs",
            },
        },
    ),
}
JOB_BATCH_EXAMPLES = {
    "three": Example(
        summary="Three jobs in one request: two soon, one tomorrow",
        value={
            "jobs": [
                {"delay_seconds": 60, "target": _ECHO, "payload": {"order": 42}},
                {"delay_seconds": 60, "target": _ECHO, "payload": {"order": 43}},
                {"run_at": "2030-01-01T09:00:00Z", "target": _ECHO, "payload": {"order": 44}},
            ]
        },
    ),
}
HEARTBEAT_EXAMPLES = {
    "progress": Example(
        summary="Alive, 40 of 100 done", value={"progress": {"done": 40, "total": 100}}
    )
}
SKIP_EXAMPLES = {
    "one fire": Example(
        summary="Skip the fire of 25 December at 09:00 New York time",
        value={"fire_time": "2026-12-25T14:00:00Z"},
    )
}
WORKFLOW_EXAMPLES = {
    "two steps": Example(
        summary="Extract, then load",
        value={
            "nodes": [
                {"id": "extract", "target": _ECHO},
                {"id": "load", "target": {"type": "python", "handler": "noop"}},
            ],
            "edges": [["extract", "load"]],
            "description": "extract, then load",
        },
    ),
}
RUN_EXAMPLES = {"latest": Example(summary="A run of the latest version", value={})}


def success(
    status: int, model: type[Any] | None = None, links: dict[str, Any] | None = None
) -> dict[int, OpenAPIResponse]:
    """A route's success answer: ``model`` as its JSON body, or no body at all."""
    response = OpenAPIResponse(description="success")
    if model is not None:
        response["content"] = {content_types.APPLICATION_JSON: {"model": model}}
    else:
        # An empty map, so Powertools does not describe the handler's return type instead.
        response["content"] = {}
    if links:
        response["links"] = links
    return {status: response}


def link(method: str, path: str, **parameters: str) -> dict[str, Any]:
    """An OpenAPI link to the operation at ``method`` ``path``, its parameters taken from
    the answer (``"$response.body#/id"``)."""
    pointer = path.replace("~", "~0").replace("/", "~1")
    return {"operationRef": f"#/paths/{pointer}/{method}", "parameters": parameters}


def links(parameter: str, pointer: str, *targets: tuple[str, str, str]) -> dict[str, Any]:
    """Links named (name, method, path), each passing ``pointer`` of the answer (the created
    resource's id) as ``parameter``."""
    return {name: link(method, path, **{parameter: pointer}) for name, method, path in targets}


_SCHEDULE = "/schedules/{schedule_id}"
SCHEDULE_LINKS = links(
    "schedule_id",
    "$response.body#/id",
    ("GetSchedule", "get", _SCHEDULE),
    ("ReplaceSchedule", "put", _SCHEDULE),
    ("DeleteSchedule", "delete", _SCHEDULE),
    ("PauseSchedule", "post", _SCHEDULE + "/pause"),
    ("ResumeSchedule", "post", _SCHEDULE + "/resume"),
    ("TriggerSchedule", "post", _SCHEDULE + "/trigger"),
    ("PreviewSchedule", "get", _SCHEDULE + "/preview"),
    ("ScheduleOccurrences", "get", _SCHEDULE + "/occurrences"),
)
JOB_LINKS = links(
    "job_id",
    "$response.body#/id",
    ("GetJob", "get", "/jobs/{job_id}"),
    ("HeartbeatJob", "post", "/jobs/{job_id}/heartbeat"),
    ("CancelJob", "post", "/jobs/{job_id}/cancel"),
)
WORKFLOW_LINKS = links(
    "workflow_id",
    "$response.body#/workflow_id",
    ("GetWorkflow", "get", "/workflows/{workflow_id}"),
    ("StartRun", "post", "/workflows/{workflow_id}/runs"),
    ("WorkflowRuns", "get", "/workflows/{workflow_id}/runs"),
)
RUN_LINKS = links(
    "run_id",
    "$response.body#/run_id",
    ("GetRun", "get", "/runs/{run_id}"),
    ("RunNodes", "get", "/runs/{run_id}/nodes"),
    ("CancelRun", "post", "/runs/{run_id}/cancel"),
    ("RetryRun", "post", "/runs/{run_id}/retry"),
    ("ReconcileRun", "post", "/runs/{run_id}/reconcile"),
)


def finish(document: dict[str, Any]) -> dict[str, Any]:
    """The generated document with what holds for every route added (see the module)."""
    document = copy.deepcopy(document)
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    # Powertools describes its own validation error; the API answers 422 in its own shape.
    for powertools_own in ("HTTPValidationError", "ValidationError", "ResponseValidationError"):
        schemas.pop(powertools_own, None)
    error = models.ErrorOut.model_json_schema(ref_template=_REF + "{model}")
    schemas.update(error.pop("$defs", {}))
    schemas[ERROR_SCHEMA] = error
    components["securitySchemes"] = {
        SECURITY_SCHEME: {
            "type": "apiKey",
            "in": "header",
            "name": API_KEY_HEADER,
            "description": "The tenant's API key (`fireline admin keys create`)",
        }
    }
    document["security"] = [{SECURITY_SCHEME: []}]
    # Relative to where the document is served: the API's own root, stage included.
    document["servers"] = [{"url": ".", "description": "this API (where this document is)"}]
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            _finish_operation(path, method, operation)
    return document


def _finish_operation(path: str, method: str, operation: dict[str, Any]) -> None:
    operation["security"] = [{SECURITY_SCHEME: []}]
    for parameter in operation.get("parameters", []):
        parameter["schema"] = _not_null(parameter["schema"])
    responses = operation["responses"]
    for response in responses.values():
        if response.get("content") == {}:
            del response["content"]  # no body (a 204)
    statuses = list(ALWAYS)
    if "{" in path:
        statuses.append(404)
    if method != "get" or path in READS_DEFINITION:
        statuses.append(409)
    if "requestBody" in operation:
        statuses += [413, 415]
    for status in sorted(statuses):
        responses[str(status)] = {
            "description": ERRORS[status],
            "content": {content_types.APPLICATION_JSON: {"schema": {"$ref": _REF + ERROR_SCHEMA}}},
        }
    if method == "get":
        operation.setdefault("parameters", []).append(
            {
                "name": TENANT_PARAMETER,
                "in": "query",
                "required": False,
                "description": "An operator's key: the tenant whose data to read (default "
                "the key's own). A tenant's key reads its own tenant whatever this names",
                "schema": {"type": "string", "pattern": api_keys.TENANT_ID.pattern},
            }
        )
    if (method, path) in IDEMPOTENT:
        operation.setdefault("parameters", []).append(
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "description": "A retry with the same key and body gets the first answer "
                "back (for 24 hours); the same key with another body is a 422",
                "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN},
            }
        )


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter's schema without its ``null`` variant: a query string or a header has
    no null, only a parameter left out (which the optional parameters allow)."""
    variants = [v for v in schema.get("anyOf", []) if v != {"type": "null"}]
    if len(variants) != 1:
        return schema
    outer = {k: v for k, v in schema.items() if k != "anyOf"}
    return {**variants[0], **outer}


def swagger_page(document: dict[str, Any]) -> str:
    """Swagger UI on ``document``, its script and styles inline from the copy Powertools
    ships (no CDN: the page works offline, in the local cloud too)."""
    assets = Path(swagger_ui.__file__).parent
    script = (assets / "swagger-ui-bundle.min.js").read_text(encoding="utf-8")
    styles = (assets / "swagger-ui.min.css").read_text(encoding="utf-8")
    # "</" inside the inline JSON must not close the script element.
    spec = json.dumps(document).replace("</", "<\\/")
    return swagger_ui.generate_swagger_html(spec, script, styles, "", None)
