"""The OpenAPI document tells the truth: its shape (who may call, every error in the one
error shape, typed bodies, the Idempotency-Key header, examples, links), and the defects
of the API that schemathesis found against it, each reproduced on its own.

On the memory adapters, through the real resolver (tests/integration/test_api_fuzz.py runs
schemathesis itself over the local cloud)."""

from __future__ import annotations

import json
import re
from typing import Any, cast

import pytest
from openapi_spec_validator import validate

from fireline.adapters import memory
from fireline.api import app as api_app
from fireline.api import backfill_routes, document, models
from fireline.local import runtime
from helpers.memory_system import MemorySystem, missing_workflows
from helpers.system import api_event

# No Lambda context here, so Powertools cannot tie an idempotency record's in-progress
# expiry to the invocation and says so; nothing to act on in a test.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Couldn't determine the remaining time left:UserWarning"
)
METHODS = ("get", "put", "post", "delete", "patch")
ERROR_REF = "#/components/schemas/ErrorOut"
# The requests each body model is validated as.
BODY_MODELS: dict[str, type[Any]] = {
    "ScheduleIn": models.ScheduleIn,
    "JobIn": models.JobIn,
    "JobBatchIn": models.JobBatchIn,
    "HeartbeatIn": models.HeartbeatIn,
    "WorkflowIn": models.WorkflowIn,
    "RunIn": models.RunIn,
    "SkipIn": models.SkipIn,
    "BackfillIn": backfill_routes.BackfillIn,
}


def build() -> Any:
    system = MemorySystem()
    return api_app.build_app(
        system.service,
        memory.MemoryIdempotencyStore(),
        missing_workflows(),
        backfills=system.backfills,
    )


@pytest.fixture(scope="module")
def described() -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(api_app.openapi_document(build())))


def operations(described: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, item in described["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


def call(app: Any, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any, Any]:
    """(status, JSON body or None, the whole response)."""
    response = api_app.handle(app, api_event(method, path, body, **kw), None)
    text = response.get("body") or ""
    try:
        return response["statusCode"], json.loads(text) if text else None, response
    except ValueError:
        return response["statusCode"], None, response


# --- the document's shape ----------------------------------------------------------------


def test_the_document_is_valid_openapi(described: dict[str, Any]) -> None:
    validate(described)


def test_every_operation_needs_the_api_key_header_the_authorizer_reads(
    described: dict[str, Any],
) -> None:
    scheme = described["components"]["securitySchemes"][document.SECURITY_SCHEME]

    assert scheme == {**scheme, "type": "apiKey", "in": "header", "name": "x-api-key"}
    assert described["security"] == [{document.SECURITY_SCHEME: []}]
    unsecured = [
        (method, path)
        for method, path, operation in operations(described)
        if operation.get("security") != [{document.SECURITY_SCHEME: []}]
    ]
    assert unsecured == []
    # the public routes are served, and left out of the operations that need a key
    assert "/openapi.json" not in described["paths"]
    assert "/docs" not in described["paths"]


def test_every_operation_documents_its_errors_in_the_one_error_shape(
    described: dict[str, Any],
) -> None:
    missing = []
    for method, path, operation in operations(described):
        expected = {400, 401, 403, 422, 429, 503}
        expected |= {404} if "{" in path else set()
        expected |= {409} if method != "get" else set()
        expected |= {413, 415} if "requestBody" in operation else set()
        for status in expected:
            response = operation["responses"].get(str(status), {})
            schema = response.get("content", {}).get("application/json", {}).get("schema")
            if schema != {"$ref": ERROR_REF} or not response.get("description"):
                missing.append((method, path, status))
    assert missing == []
    error = described["components"]["schemas"]["ErrorOut"]
    assert error["required"] == ["error"]
    body = described["components"]["schemas"]["ErrorBody"]
    assert set(body["properties"]) == {"type", "message", "field"}
    # Powertools' own validation error shape is not what the API answers
    assert "HTTPValidationError" not in described["components"]["schemas"]


def test_every_success_has_a_typed_body_or_none_at_all(described: dict[str, Any]) -> None:
    untyped = []
    for method, path, operation in operations(described):
        for status, response in operation["responses"].items():
            if not status.startswith("2"):
                continue
            content = response.get("content")
            if status == "204":
                if content is not None:
                    untyped.append((method, path, status))
                continue
            schema = (content or {}).get("application/json", {}).get("schema", {})
            if "$ref" not in schema:
                untyped.append((method, path, status))
    assert untyped == []
    created = described["paths"]["/schedules"]["post"]["responses"]["201"]
    assert created["content"]["application/json"]["schema"]["$ref"].endswith("/ScheduleOut")


def test_idempotency_key_is_documented_exactly_where_it_is_honoured(
    described: dict[str, Any],
) -> None:
    documented = {
        (method, path)
        for method, path, operation in operations(described)
        for parameter in operation.get("parameters", [])
        if parameter["in"] == "header" and parameter["name"] == "Idempotency-Key"
    }
    assert documented == document.IDEMPOTENT


NOOP = {"type": "python", "handler": "noop"}


@pytest.mark.parametrize(
    ("method", "path", "body", "other"),
    [
        ("POST", "/schedules", {"spec": "rate(5 minutes)", "target": NOOP}, {"payload": {"x": 1}}),
        ("POST", "/jobs", {"delay_seconds": 60, "target": NOOP}, {"payload": {"x": 1}}),
        (
            "POST",
            "/jobs/batch",
            {"jobs": [{"delay_seconds": 60, "target": NOOP}] * 3},
            {"jobs": [{"delay_seconds": 60, "target": NOOP}]},
        ),
        ("PUT", "/workflows/wf", {"nodes": [{"id": "a", "target": NOOP}]}, {"description": "b"}),
    ],
)
def test_each_documented_idempotent_create_answers_a_retry_with_its_first_answer(
    method: str, path: str, body: dict[str, Any], other: dict[str, Any]
) -> None:
    # GIVEN a create sent with an Idempotency-Key
    app = build()
    headers = {"Idempotency-Key": "retry-1"}
    first = call(app, method, path, body, headers=headers)
    # WHEN it is sent again with the same key
    again = call(app, method, path, body, headers=headers)
    # THEN the retry answers what the first did
    assert first[0] in (201, 202) and again[:2] == first[:2]
    # AND the same key with another body is refused naming the header
    status, refused, _ = call(app, method, path, {**body, **other}, headers=headers)
    assert (status, refused["error"]["field"]) == (422, "Idempotency-Key")


def test_every_request_body_has_examples_its_model_accepts(described: dict[str, Any]) -> None:
    bodies = 0
    for method, path, operation in operations(described):
        if "requestBody" not in operation:
            continue
        bodies += 1
        media = operation["requestBody"]["content"]["application/json"]
        examples = media.get("examples")
        assert examples, (method, path)
        schema = media["schema"]
        ref = schema.get("$ref") or next(v["$ref"] for v in schema["anyOf"] if "$ref" in v)
        model = BODY_MODELS[ref.rsplit("/", 1)[1]]
        for example in examples.values():
            model.model_validate(example["value"])
    assert bodies == len(BODY_MODELS) + 1  # ScheduleIn twice: create and replace


TENANT_ROLE = "arn:aws:iam::111122223333:role/fireline-target/fireline-jobs"
DISPATCH_TARGETS = {
    "StepFunctionsTarget": {
        "type": "stepfunctions",
        "state_machine_arn": "arn:aws:states:eu-west-1:111122223333:stateMachine:reports",
        "role_arn": TENANT_ROLE,
    },
    "EventBridgeTarget": {
        "type": "eventbridge",
        "event_bus_arn": "arn:aws:events:eu-west-1:111122223333:event-bus/reports",
        "detail_type": "report due",
        "source": "acme.reports",
        "role_arn": TENANT_ROLE,
    },
    "SnsTarget": {
        "type": "sns",
        "topic_arn": "arn:aws:sns:eu-west-1:111122223333:reports.fifo",
        "role_arn": TENANT_ROLE,
    },
}


def test_the_dispatch_targets_are_documented_and_created_as_documented(
    described: dict[str, Any],
) -> None:
    schemas = described["components"]["schemas"]
    # Patterns a JavaScript client can read too (ECMA-262 has no Python named groups).
    assert "(?P<" not in json.dumps(described)
    app = build()
    for name, target in DISPATCH_TARGETS.items():
        # GIVEN each kind's schema in the document, its fields and their shapes
        schema = schemas[name]
        assert set(schema["properties"]) == set(target)
        assert set(schema["required"]) == set(target) - {"role_arn"}
        for field, value in target.items():
            pattern = schema["properties"][field].get("pattern")
            assert pattern is None or re.fullmatch(pattern, value), (name, field)
        # WHEN a schedule and a job are created with it THEN both are, the target as sent
        for path, body in (
            ("/schedules", {"spec": "rate(1 hour)", "target": target}),
            ("/jobs", {"delay_seconds": 60, "target": target}),
        ):
            status, created, _ = call(app, "POST", path, body)
            assert status == 201, created
            assert created["target"] == target


@pytest.mark.parametrize(
    ("target", "field"),
    [
        ({**DISPATCH_TARGETS["SnsTarget"], "topic_arn": "arn:aws:sqs:eu-west-1:1:q"}, "topic_arn"),
        ({**DISPATCH_TARGETS["EventBridgeTarget"], "detail_type": ""}, "detail_type"),
        (
            {**DISPATCH_TARGETS["StepFunctionsTarget"], "state_machine_arn": "machine"},
            "state_machine_arn",
        ),
        ({"type": "workflow", "workflow_id": "not an id"}, "workflow_id"),
    ],
)
def test_a_refused_target_field_is_named_without_the_variants_tag(
    target: dict[str, Any], field: str
) -> None:
    # WHEN a schedule's target has a field of the wrong shape
    app = build()
    status, body, _ = call(app, "POST", "/schedules", {"spec": "rate(1 hour)", "target": target})
    # THEN 422 naming target.<field> (the union's tag, stepfunctions or workflow, is no
    # field of the body), and no schedule exists
    assert (status, body["error"]["field"]) == (422, f"target.{field}")
    assert call(app, "GET", "/schedules")[1]["items"] == []


def test_creates_link_to_what_they_created(described: dict[str, Any]) -> None:
    def links(method: str, path: str, status: str) -> set[str]:
        found = described["paths"][path][method]["responses"][status].get("links", {})
        for item in found.values():
            # each link names an operation of the document
            target, verb = item["operationRef"].removeprefix("#/paths/").rsplit("/", 1)
            assert verb in described["paths"][target.replace("~1", "/").replace("~0", "~")]
        return set(found)

    assert {"GetSchedule", "ReplaceSchedule", "DeleteSchedule"} <= links(
        "post", "/schedules", "201"
    )
    assert {"GetJob", "CancelJob"} <= links("post", "/jobs", "201")
    assert {"GetWorkflow", "StartRun"} <= links("put", "/workflows/{workflow_id}", "201")
    assert {"GetRun", "RunNodes", "CancelRun"} <= links(
        "post", "/workflows/{workflow_id}/runs", "202"
    )


def test_state_filters_list_their_values_and_no_parameter_is_null(
    described: dict[str, Any],
) -> None:
    for method, path, operation in operations(described):
        for parameter in operation.get("parameters", []):
            schema = parameter["schema"]
            assert "anyOf" not in schema or {"type": "null"} not in schema["anyOf"], (
                method,
                path,
                parameter["name"],
            )
            if parameter["name"] == "state":
                assert schema.get("enum"), (method, path)


def test_the_swagger_page_is_served_whole_without_a_key_or_a_cdn() -> None:
    # WHEN the page is asked for without a tenant
    status, _, response = call(build(), "GET", "/docs", tenant=None)
    page = response["body"]

    # THEN it is the Swagger UI, its script, styles and the document inline
    assert status == 200
    assert response["multiValueHeaders"]["Content-Type"] == ["text/html"]
    assert "SwaggerUIBundle" in page and '"/schedules"' in page
    assert "<script src=" not in page and "<link rel=" not in page
    # AND the document it names for itself is the API's
    status, described, _ = call(build(), "GET", "/docs", tenant=None, query={"format": "json"})
    assert (status, described) == (200, json.loads(api_app.openapi_document(build())))


# --- what schemathesis found -------------------------------------------------------------


def test_a_method_a_path_does_not_have_is_a_405_naming_the_methods_it_has() -> None:
    # GIVEN a path the API serves for GET only
    # WHEN another method is sent to it
    status, body, response = call(build(), "PUT", "/dead-letters")
    # THEN the answer is 405 with an Allow header, in the error shape
    assert (status, body["error"]["type"]) == (405, "method_not_allowed")
    assert (
        response["multiValueHeaders"]["Allow"] == ["GET"] or response["headers"]["Allow"] == "GET"
    )
    # AND a path the API does not serve at all is still a 404
    assert call(build(), "PUT", "/nowhere")[0] == 404


def test_a_static_path_is_its_own_route_not_the_dynamic_one_its_pattern_also_matches() -> None:
    # GIVEN /jobs/batch (POST only), which /jobs/{job_id}'s pattern also matches
    for method in ("GET", "PUT", "OPTIONS"):
        # WHEN another method is sent to it
        status, body, response = call(build(), method, "/jobs/batch")
        # THEN it is a 405 naming POST alone, not the job named "batch"
        assert (status, body["error"]["type"]) == (405, "method_not_allowed"), method
        multi = response.get("multiValueHeaders") or {}
        single = response.get("headers") or {}
        assert multi.get("Allow") == ["POST"] or single.get("Allow") == "POST", method
    # AND a job's own path still has its methods
    assert call(build(), "GET", "/jobs/job_0123456789abcdef0123")[0] == 404


def test_a_create_whose_body_is_a_list_of_bodies_is_refused_and_creates_nothing() -> None:
    # GIVEN two valid schedules sent as one JSON array (the resolver used to read the first
    # element of an array as the body, and drop the rest)
    app = build()
    one = {"spec": "rate(5 minutes)", "target": {"type": "python", "handler": "noop"}}
    # WHEN they are posted
    status, body, _ = call(app, "POST", "/schedules", [one, one])
    # THEN the body is refused as a whole, and nothing was created
    assert (status, body["error"]["field"]) == (422, "body")
    assert call(app, "GET", "/schedules")[1]["items"] == []


def test_a_run_start_whose_body_is_not_an_object_is_refused_and_starts_nothing() -> None:
    # GIVEN a registered workflow
    app = build()
    definition = {"nodes": [{"id": "a", "target": {"type": "python", "handler": "noop"}}]}
    assert call(app, "PUT", "/workflows/wf", definition)[0] == 201
    # WHEN a run is started with a body that is a JSON array
    status, body, _ = call(app, "POST", "/workflows/wf/runs", [None, None])
    # THEN it is refused naming the body, and no run exists
    assert (status, body["error"]["field"]) == (422, "body")
    assert call(app, "GET", "/workflows/wf/runs")[1]["items"] == []


class _Host:
    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome

    def invoke(self, event: Any, timeout: float | None = None) -> Any:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


def test_the_gateways_refusals_are_in_the_documented_error_shape() -> None:
    refused = _Host(
        runtime.FunctionError({"errorType": "Exception", "errorMessage": "Unauthorized"})
    )
    api = _Host({"statusCode": 200, "body": "{}"})
    gateway = runtime.ApiGateway(
        api=cast(runtime.FunctionHost, api), authorizer=cast(runtime.FunctionHost, refused)
    )
    allowed = _Host(
        {"principalId": "t", "policyDocument": {"Statement": [{"Effect": "Allow"}]}, "context": {}}
    )
    planned = runtime.ApiGateway(
        api=cast(runtime.FunctionHost, api),
        authorizer=cast(runtime.FunctionHost, allowed),
        usage_plan=runtime.UsagePlan(rate=1, burst=1, daily_quota=None),
    )

    for status, body in (
        gateway.handle("GET", "/schedules", {}, b"")[::2],
        gateway.handle("GET", "/schedules", {"x-api-key": "bad"}, b"")[::2],
        planned.handle("GET", "/schedules", {"x-api-key": "no-usage-key"}, b"")[::2],
    ):
        error = json.loads(body)["error"]
        assert status in (401, 403)
        assert set(error) == {"type", "message", "field"} and error["field"] == "x-api-key"


def test_an_empty_query_parameter_reaches_the_api_as_api_gateway_passes_it() -> None:
    # GIVEN the local gateway in front of an API that records its events
    class Recording(_Host):
        def __init__(self, outcome: Any) -> None:
            super().__init__(outcome)
            self.events: list[Any] = []

        def invoke(self, event: Any, timeout: float | None = None) -> Any:
            self.events.append(event)
            return super().invoke(event, timeout)

    api = Recording({"statusCode": 200, "body": "{}"})
    gateway = runtime.ApiGateway(api=cast(runtime.FunctionHost, api), authorizer=None)
    # WHEN a query parameter is sent empty (API Gateway passes it as "", and the API then
    # refuses it as an instant; dropped, it read as no parameter at all)
    gateway.handle("GET", "/openapi.json?after=&count=3", {}, b"")
    # THEN the API sees it, empty
    assert api.events[0]["queryStringParameters"] == {"after": "", "count": "3"}
