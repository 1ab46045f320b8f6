"""The HTTP API: Powertools REST resolver, pydantic validation, OpenAPI at /openapi.json.

Tenant identity comes from ``requestContext.authorizer`` only (the authorizer's context,
``tenant_id``, or a Cognito claim ``custom:tenant_id``), never from the body or a header.
Errors are mapped to status codes by exception type, never by message text.

Creates, trigger-now, workflow registrations and run starts honour an ``Idempotency-Key``
header through Powertools idempotency: a retried request with the same key and body gets
the first response back (the same schedule, job, occurrence, version or run); the same
key with another body is a 422.

The workflow routes exist when the app is built with a workflow service (a deployment
without the workflow table answers them "no such route").
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Annotated, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer
from pydantic import ValidationError as ModelError

from fireline import console
from fireline.api import backfill_routes, document, models
from fireline.domain import api_keys, dag, errors
from fireline.services import backfills as backfill_service
from fireline.services import overview as overview_service
from fireline.services import skips
from fireline.services import workflows as workflow_service
from fireline.services.schedules import (
    JOB_STATES,
    MAX_BATCH,
    OCCURRENCE_STATES,
    SCHEDULE_STATES,
    ScheduleService,
    one_of,
)
from fireline.services.workflows import WorkflowService

logger = Logger(service="fireline", child=True)
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,128}$")
IDEMPOTENCY_TTL_SECONDS = 24 * 3600
TITLE = "Fireline"
API_VERSION = "1.0.0"
DESCRIPTION = (
    "Schedules, one-off jobs and their occurrences. Delivery contract: at-least-once "
    "execution, exactly-once claim, idempotent handlers (never exactly-once execution)."
)
# A discriminated union of targets puts the variant's tag in an error's path.
TARGET_TAGS = frozenset(
    {"python", "http", "lambda", "sqs", "stepfunctions", "eventbridge", "sns", "workflow"}
)
NODE_STATES = tuple(s.value for s in dag.NodeState)
UPLOAD_HINT = (
    "; upload larger definitions: POST /workflow-uploads, POST the document to its "
    'upload_url with its upload_fields, then PUT /workflows/{workflow_id} with {"upload_id": ...}'
)
# (method, path, limit, what the 413 adds): routes whose raw body may exceed the default.
BATCH_HINT = f"; send at most {MAX_BATCH} jobs a request, or fewer when they are large"
BODY_LIMITS: tuple[tuple[str, re.Pattern[str], int, str], ...] = (
    ("PUT", re.compile(r"^/workflows/[^/]+/?$"), models.MAX_WORKFLOW_BODY_BYTES, UPLOAD_HINT),
    ("POST", re.compile(r"^/jobs/batch/?$"), models.MAX_JOB_BATCH_BODY_BYTES, BATCH_HINT),
)

ID = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
Limit = Annotated[int, Query(ge=1, le=100)]
Cursor = Annotated[
    str | None, Query(max_length=2048, description="the next_cursor of the previous page")
]
# An instant in a query string, with its UTC offset (the API reads ISO 8601).
INSTANT = {"format": "date-time"}


class Unauthorized(errors.FirelineError):
    """No tenant identity in the authorizer context."""


class Forbidden(errors.FirelineError):
    """This key may not do that."""


OPERATOR = "operator"
# What an operator's key may do: read. Its writes are refused before any route runs.
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _error(status: int, kind: str, message: str, field: str | None = None) -> Response[str]:
    body = models.ErrorOut(error=models.ErrorBody(type=kind, message=message, field=field))
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=body.model_dump_json(),
    )


Operation = Callable[[str, Callable[[], dict[str, Any]]], dict[str, Any]]


def build_app(
    service: ScheduleService,
    idempotency: BasePersistenceLayer | None = None,
    workflows: WorkflowService | None = None,
    overview: overview_service.Overview | None = None,
    tenants: Callable[[], list[str]] | None = None,
    backfills: backfill_service.Backfills | None = None,
) -> APIGatewayRestResolver:
    """``overview`` answers GET /overview; ``tenants`` lists the deployment's tenants for
    operators' keys (GET /tenants); ``backfills`` adds the backfill routes."""
    app = APIGatewayRestResolver(enable_validation=True)

    def identity() -> tuple[str, bool]:
        """The caller's own tenant, and whether its key is an operator's."""
        context = app.current_event.raw_event.get("requestContext", {}).get("authorizer") or {}
        claims = context.get("claims") or {}
        found = context.get("tenant_id") or claims.get("custom:tenant_id")
        if not isinstance(found, str) or not found:
            raise Unauthorized()
        return found, context.get("role") == OPERATOR

    def tenant() -> str:
        """The tenant whose data the request reads or writes: the key's own; an operator's
        key reads the tenant its request names (``?tenant=``), its own when none."""
        own, operator = identity()
        named = (app.current_event.query_string_parameters or {}).get("tenant")
        if named is None:
            return own
        # Checked for every key, so a malformed one is a 400 whoever sends it.
        api_keys.check_tenant_id(named)
        return named if operator else own  # a tenant's key reads its own, whatever it names

    def header(name: str) -> str | None:
        for key, value in (app.current_event.headers or {}).items():
            if key.lower() == name.lower():
                return str(value)
        return None

    def request_key() -> str | None:
        """The request's Idempotency-Key, when creates are idempotent in this deployment:
        a create's id is derived from it, so a retry finds the first attempt's item."""
        key = header("Idempotency-Key")
        return key if idempotency is not None and key is not None else None

    def once(operation: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run ``run`` at most once per (tenant, operation, Idempotency-Key)."""
        key = header("Idempotency-Key")
        if key is None or idempotency is None:
            return run()
        if not IDEMPOTENCY_KEY.match(key):
            raise errors.ValidationError(
                "must be 1-128 printable ASCII characters", field="Idempotency-Key"
            )

        def idempotent_operation(request: dict[str, Any]) -> dict[str, Any]:
            return run()

        config = IdempotencyConfig(
            event_key_jmespath="[tenant_id, operation, key]",
            payload_validation_jmespath="body",
            expires_after_seconds=IDEMPOTENCY_TTL_SECONDS,
            raise_on_no_idempotency_key=True,
        )
        if app.lambda_context is not None:
            # An invocation that times out mid-request leaves an in-progress record that
            # expires with the invocation instead of blocking the key for a day.
            config.register_lambda_context(app.lambda_context)
        guarded = idempotent_function(
            idempotent_operation,
            data_keyword_argument="request",
            persistence_store=idempotency,
            config=config,
        )
        request = {
            "tenant_id": tenant(),
            "operation": operation,
            "key": key,
            "body": app.current_event.json_body if app.current_event.body else None,
        }
        return guarded(request=request)  # type: ignore[no-any-return]

    # --- schedules -------------------------------------------------------------------------

    @app.post(
        "/schedules",
        summary="Create a schedule",
        responses=document.success(201, models.ScheduleOut, document.SCHEDULE_LINKS),
    )
    def create_schedule(
        body: Annotated[models.ScheduleIn, Body(openapi_examples=document.SCHEDULE_EXAMPLES)],
    ) -> Response[str]:
        owner = tenant()

        def run() -> dict[str, Any]:
            created = service.create(owner, body.to_draft(), request_key=request_key())
            return models.ScheduleOut.of(created, service.clock.now()).model_dump(mode="json")

        return _json(once("create_schedule", run), 201)

    @app.get("/schedules", summary="List the tenant's schedules by id, filtered if asked")
    def list_schedules(
        limit: Limit = 50,
        cursor: Cursor = None,
        state: Annotated[str | None, _state_filter(SCHEDULE_STATES)] = None,
        q: Annotated[
            str | None,
            Query(
                min_length=1,
                max_length=256,
                description="only those whose id, description or spec holds this text "
                "(case-insensitive)",
            ),
        ] = None,
    ) -> models.SchedulePage:
        owner = tenant()
        filters: dict[str, str | None] = {"state": state, "q": q}
        after = models.listing_cursor_after(cursor, owner, "schedules", filters)
        page = service.list(owner, limit=limit, cursor=after, state=state, q=q)
        return models.SchedulePage(
            items=[models.ScheduleOut.of(s, service.clock.now()) for s in page.items],
            next_cursor=models.listing_cursor(owner, "schedules", filters, page.cursor),
        )

    @app.get("/schedules/<schedule_id>", summary="Get a schedule")
    def get_schedule(schedule_id: ID) -> models.ScheduleOut:
        return models.ScheduleOut.of(service.get(tenant(), schedule_id), service.clock.now())

    @app.put("/schedules/<schedule_id>", summary="Replace a schedule (new version)")
    def update_schedule(
        schedule_id: ID,
        body: Annotated[models.ScheduleIn, Body(openapi_examples=document.SCHEDULE_EXAMPLES)],
    ) -> models.ScheduleOut:
        return models.ScheduleOut.of(
            service.update(tenant(), schedule_id, body.to_draft()), service.clock.now()
        )

    @app.delete(
        "/schedules/<schedule_id>", summary="Delete a schedule", responses=document.success(204)
    )
    def delete_schedule(schedule_id: ID) -> Response[str]:
        service.delete(tenant(), schedule_id)
        return Response(status_code=204, body="")

    @app.post("/schedules/<schedule_id>/pause", summary="Pause (leaves the due index)")
    def pause_schedule(schedule_id: ID) -> models.ScheduleOut:
        return models.ScheduleOut.of(service.pause(tenant(), schedule_id), service.clock.now())

    @app.post("/schedules/<schedule_id>/resume", summary="Resume (missed fires: misfire policy)")
    def resume_schedule(schedule_id: ID) -> models.ScheduleOut:
        return models.ScheduleOut.of(service.resume(tenant(), schedule_id), service.clock.now())

    @app.post(
        "/schedules/<schedule_id>/trigger",
        summary="Fire now, through the same path as a scheduled fire",
        responses=document.success(202, models.OccurrenceOut),
    )
    def trigger_schedule(schedule_id: ID) -> Response[str]:
        owner = tenant()

        def run() -> dict[str, Any]:
            fired = service.trigger(owner, schedule_id)
            return models.OccurrenceOut.of(fired).model_dump(mode="json")

        return _json(once(f"trigger:{schedule_id}", run), 202)

    @app.get("/schedules/<schedule_id>/preview", summary="The next N fire times")
    def preview_schedule(
        schedule_id: ID,
        count: Annotated[int, Query(ge=1, le=100)] = 10,
        after: Annotated[
            str | None,
            Query(
                description="fires after this instant (ISO 8601; default now)",
                json_schema_extra=INSTANT,
            ),
        ] = None,
    ) -> models.PreviewOut:
        owner = tenant()
        item = service.get(owner, schedule_id)
        fires = service.preview(owner, schedule_id, count, models.instant(after, "after"))
        return models.PreviewOut(
            schedule_id=schedule_id,
            description=item.description,
            timezone=item.timing.timezone,
            fire_times=[f.fire_time for f in fires if f.excluded is None],
            fires=[
                models.FireOut(
                    fire_time=f.fire_time, queued=f.queued, sent_at=f.sent_at, excluded=f.excluded
                )
                for f in fires
            ],
        )

    @app.post("/schedules/<schedule_id>/skip", summary="Skip one upcoming fire (a new version)")
    def skip_fire(
        schedule_id: ID,
        body: Annotated[models.SkipIn, Body(openapi_examples=document.SKIP_EXAMPLES)],
    ) -> models.ScheduleOut:
        item = skips.skip(service, tenant(), schedule_id, body.fire_time)
        return models.ScheduleOut.of(item, service.clock.now())

    @app.delete(
        "/schedules/<schedule_id>/skip",
        summary="Take back the skip of one upcoming fire (a new version)",
    )
    def unskip_fire(
        schedule_id: ID,
        fire_time: Annotated[
            str, Query(description="the skipped fire time (ISO 8601)", json_schema_extra=INSTANT)
        ],
    ) -> models.ScheduleOut:
        when = models.instant(fire_time, "fire_time")
        assert when is not None
        item = skips.unskip(service, tenant(), schedule_id, when)
        return models.ScheduleOut.of(item, service.clock.now())

    @app.get("/schedules/<schedule_id>/occurrences", summary="Occurrence history, newest first")
    def schedule_history(
        schedule_id: ID,
        limit: Limit = 50,
        cursor: Cursor = None,
        state: Annotated[str | None, _state_filter(OCCURRENCE_STATES)] = None,
        since: Annotated[
            str | None,
            Query(
                alias="from",
                description="fire time at or after (ISO 8601)",
                json_schema_extra=INSTANT,
            ),
        ] = None,
        until: Annotated[
            str | None,
            Query(alias="to", description="fire time before (ISO 8601)", json_schema_extra=INSTANT),
        ] = None,
    ) -> models.OccurrencePage:
        owner = tenant()
        filters = {"schedule_id": schedule_id, "state": state, "from": since, "to": until}
        after = models.listing_cursor_after(cursor, owner, "occurrences", filters)
        page = service.history(
            owner,
            schedule_id,
            limit=limit,
            cursor=after,
            state=state,
            since=models.instant(since, "from"),
            until=models.instant(until, "to"),
        )
        return models.OccurrencePage(
            items=[models.OccurrenceOut.of(o) for o in page.items],
            next_cursor=models.listing_cursor(owner, "occurrences", filters, page.cursor),
        )

    # --- one-off jobs ----------------------------------------------------------------------

    @app.post(
        "/jobs",
        summary="Create a one-off job",
        responses=document.success(201, models.JobOut, document.JOB_LINKS),
    )
    def create_job(
        body: Annotated[models.JobIn, Body(openapi_examples=document.JOB_EXAMPLES)],
    ) -> Response[str]:
        owner = tenant()

        def run() -> dict[str, Any]:
            view = service.create_job(owner, body.to_draft(), request_key=request_key())
            return models.JobOut.of(view).model_dump(mode="json")

        return _json(once("create_job", run), 201)

    @app.post(
        "/jobs/batch",
        summary=f"Create 1 to {MAX_BATCH} one-off jobs in one request, all or none",
        description="Each job as POST /jobs takes it. Every job is checked before anything "
        "is written (a bad one is refused naming jobs[i] and its field); the active_jobs "
        "quota is taken for the whole batch at once (refused whole if the batch would pass "
        "the limit), and a job's unit comes back at the first sweep (every minute) after "
        "its fire minute is over and it ended, or at its cancel. The answer comes once the "
        "jobs are stored and those due within 15 minutes are on their queue: sent 0.85 s "
        "into a second when none is due sooner (up to a second after the request), so "
        "each becomes visible just before its fire time. With an Idempotency-Key a retry "
        "after any failure finishes the first attempt's batch and answers with the same ids.",
        responses=document.success(201, models.JobBatchOut),
    )
    def create_jobs(
        body: Annotated[models.JobBatchIn, Body(openapi_examples=document.JOB_BATCH_EXAMPLES)],
    ) -> Response[str]:
        owner = tenant()

        def run() -> dict[str, Any]:
            views = service.create_jobs(owner, body.to_drafts(), request_key=request_key())
            out = models.JobBatchOut(jobs=[models.JobCreatedOut.of(v) for v in views])
            return out.model_dump(mode="json")

        return _json(once("create_jobs", run), 201)

    @app.get("/jobs", summary="List the tenant's one-off jobs by id, in one state if given")
    def list_jobs(
        limit: Limit = 50,
        cursor: Cursor = None,
        state: Annotated[str | None, _state_filter(JOB_STATES)] = None,
    ) -> models.JobPage:
        owner = tenant()
        filters: dict[str, str | None] = {"state": state}
        after = models.listing_cursor_after(cursor, owner, "jobs", filters)
        page = service.list_jobs(owner, state=state, limit=limit, cursor=after)
        return models.JobPage(
            items=[models.JobOut.of(v) for v in page.items],
            next_cursor=models.listing_cursor(owner, "jobs", filters, page.cursor),
        )

    @app.get("/jobs/<job_id>", summary="Get a job: state, attempts, timestamps, exit reason")
    def get_job(job_id: ID) -> models.JobOut:
        return models.JobOut.of(service.get_job(tenant(), job_id))

    @app.post(
        "/jobs/<job_id>/heartbeat",
        summary="A running long job is alive (with progress, shown by GET)",
    )
    def heartbeat_job(
        job_id: ID,
        body: Annotated[models.HeartbeatIn, Body(openapi_examples=document.HEARTBEAT_EXAMPLES)],
    ) -> models.JobOut:
        return models.JobOut.of(service.heartbeat_job(tenant(), job_id, body.progress))

    @app.post(
        "/jobs/<job_id>/cancel",
        summary="Cancel a job that has not started, or stop a running long job",
    )
    def cancel_job(job_id: ID) -> models.JobOut:
        return models.JobOut.of(service.cancel_job(tenant(), job_id))

    # --- dead letters ----------------------------------------------------------------------

    @app.get("/dead-letters", summary="Occurrences whose attempts ran out, newest first")
    def list_dead_letters(limit: Limit = 50, cursor: Cursor = None) -> models.OccurrencePage:
        page = service.dead_letters(tenant(), limit=limit, cursor=cursor)
        return models.OccurrencePage(
            items=[models.OccurrenceOut.of(o) for o in page.items], next_cursor=page.cursor
        )

    @app.post(
        "/dead-letters/<dead_letter_id>/redrive",
        summary="Queue a dead occurrence again (attempts start over)",
        responses=document.success(202, models.OccurrenceOut),
    )
    def redrive_dead_letter(
        dead_letter_id: Annotated[str, Path(min_length=1, max_length=400)],
    ) -> Response[str]:
        owner = tenant()  # identity first: an anonymous caller learns nothing
        queued = service.redrive(owner, models.occurrence_key(dead_letter_id))
        return _json(models.OccurrenceOut.of(queued).model_dump(mode="json"), 202)

    # --- workflows -------------------------------------------------------------------------

    if workflows is not None:
        _workflow_routes(app, workflows, tenant, once)
    if backfills is not None:
        backfill_routes.register(app, backfills, tenant)

    # --- the console's own reads -----------------------------------------------------------

    @app.get("/whoami", summary="Who this key is: its tenant and its role (tenant or operator)")
    def whoami() -> models.WhoAmIOut:
        own, operator = identity()
        return models.WhoAmIOut(
            tenant_id=own, role=OPERATOR if operator else "tenant", viewing=tenant()
        )

    @app.get("/tenants", summary="Every tenant with an API key (operators' keys only)")
    def list_tenants() -> models.TenantsOut:
        if not identity()[1]:
            raise Forbidden("only an operator's key lists tenants")
        return models.TenantsOut(items=tenants() if tenants is not None else [])

    if overview is not None:
        figures_of = overview

        @app.get(
            "/overview",
            summary="The last hour: backlog and in-flight by class, occurrences by state, "
            "start and enqueue lag per minute, ticker leases, dead letters",
        )
        def get_overview() -> models.OverviewOut:
            # An operator's key also sees the class queues, which hold every tenant's work.
            return models.OverviewOut.of(figures_of.figures(tenant(), deployment=identity()[1]))

    # --- the console (public static assets; the page asks for the key) --------------------

    @app.get("/console", include_in_schema=False)
    def console_page() -> Response[str]:
        return _asset(console.INDEX)

    @app.get("/console/<name>", include_in_schema=False)
    def console_asset(name: str) -> Response[str]:
        return _asset(name)

    # Browsers ask for it on every page of the origin, with no key: a 401 here is an
    # error in every console's log.
    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response[str]:
        return _asset(console.FAVICON)

    # --- the front door (public: what a browser or a client finds at the API's root) ---------

    @app.get("/", include_in_schema=False)
    def index() -> Response[str]:
        accept = (app.current_event.headers or {}).get("accept") or ""
        if "text/html" in accept:
            return Response(status_code=200, content_type="text/html", body=INDEX_PAGE)
        return _json(INDEX, 200)

    # --- the document ----------------------------------------------------------------------

    @app.get("/openapi.json", include_in_schema=False)
    def openapi() -> Response[str]:
        return Response(
            status_code=200,
            content_type=content_types.APPLICATION_JSON,
            body=openapi_document(app),
        )

    @app.get("/docs", include_in_schema=False)
    def docs() -> Response[str]:
        # The page names its document as /docs?format=json (Swagger UI resolves the
        # document's relative server against it, the stage's path included).
        if (app.current_event.query_string_parameters or {}).get("format") == "json":
            return openapi()
        described = json.loads(openapi_document(app))
        return Response(
            status_code=200, content_type="text/html", body=document.swagger_page(described)
        )

    # --- errors, by type -------------------------------------------------------------------

    @app.exception_handler(RequestValidationError)
    def invalid_request(exc: RequestValidationError) -> Response[str]:
        problems = list(exc.errors())
        first = problems[0] if problems else {}
        loc = tuple(first.get("loc", ()))
        if first.get("type") == "json_invalid":
            loc = ("body",)  # Powertools puts the character offset there: it names no field
        location = [str(p) for p in loc if p not in ("body", "query", "path")]
        # The variant's tag is not a field of the body: dropped for the reader.
        location = [p for p in location if p not in TARGET_TAGS]
        message = str(first.get("msg", "invalid request"))
        # A body that is missing or not an object is at fault as a whole.
        whole = "body" if loc[:1] == ("body",) else None
        return _error(422, "validation", message, ".".join(location) or whole)

    @app.exception_handler(errors.ValidationError)
    def invalid_value(exc: errors.ValidationError) -> Response[str]:
        return _error(400, "validation", exc.detail, exc.field)

    @app.exception_handler(errors.TooLarge)
    def too_large(exc: errors.TooLarge) -> Response[str]:
        return _error(413, "too_large", exc.message, exc.field)

    @app.exception_handler(errors.QuotaExceeded)
    def quota_exceeded(exc: errors.QuotaExceeded) -> Response[str]:
        # 429 where waiting frees the quota (a daily count), 403 where only the tenant's
        # own deletes (or an operator's override) do.
        body = models.QuotaErrorOut(
            error=models.QuotaErrorBody(
                type="quota_exceeded",
                message=exc.message,
                quota=exc.quota,
                limit=exc.limit,
                used=exc.used,
            )
        )
        return Response(
            status_code=429 if exc.retry_later else 403,
            content_type=content_types.APPLICATION_JSON,
            body=body.model_dump_json(),
        )

    @app.exception_handler(Unauthorized)
    def unauthorized(exc: Unauthorized) -> Response[str]:
        return _error(401, "unauthorized", exc.message)

    @app.exception_handler(Forbidden)
    def forbidden(exc: Forbidden) -> Response[str]:
        return _error(403, "forbidden", exc.message)

    @app.exception_handler(errors.NotFound)
    def not_found(exc: errors.NotFound) -> Response[str]:
        return _error(404, "not_found", exc.message)

    @app.exception_handler(
        [
            errors.ConflictError,
            errors.AlreadyExists,
            errors.IllegalTransition,
            errors.CorruptDefinition,
        ]
    )
    def conflict(exc: errors.FirelineError) -> Response[str]:
        return _error(409, "conflict", exc.message)

    @app.exception_handler(IdempotencyValidationError)
    def idempotency_mismatch(exc: IdempotencyValidationError) -> Response[str]:
        return _error(
            422, "validation", "was used before with a different request", "Idempotency-Key"
        )

    @app.exception_handler(IdempotencyAlreadyInProgressError)
    def idempotency_in_progress(exc: IdempotencyAlreadyInProgressError) -> Response[str]:
        return _error(409, "conflict", "the first request with this Idempotency-Key is running")

    @app.exception_handler(errors.Unavailable)
    def unavailable(exc: errors.Unavailable) -> Response[str]:
        logger.warning("backend unavailable", extra={"action": "api.unavailable"})
        return _error(503, "unavailable", "try again shortly")

    @app.not_found
    def no_route(exc: Exception) -> Response[str]:
        path = app.current_event.path
        allowed = methods_of(app, path)
        if not allowed:
            return _error(404, "not_found", "no such route")
        return _not_allowed(app.current_event.http_method, path, allowed)

    return app


def openapi_document(app: APIGatewayRestResolver) -> str:
    generated = app.get_openapi_json_schema(
        title=TITLE, version=API_VERSION, description=DESCRIPTION
    )
    return json.dumps(document.finish(json.loads(generated)))


def body_limit(method: str, path: str) -> tuple[int, str]:
    """The largest raw body a route takes, and what its 413 adds to the message."""
    for route_method, pattern, limit, hint in BODY_LIMITS:
        if method.upper() == route_method and pattern.match(path):
            return limit, hint
    return models.MAX_BODY_BYTES, ""


def handle(app: APIGatewayRestResolver, event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Resolve one API Gateway proxy event. A body is checked before the resolver decodes
    it: its size, its type (a JSON object only) and its nesting, NaN, infinities and numbers
    out of range, so what the resolver and the models then read cannot fail them (a 5xx) or
    be stored changed (a non-finite number as null)."""
    refused = (
        _refused_operator(event)
        or _refused_shadowed(app, event)
        or _refused_query(app, event)
        or _refused_body(event)
    )
    if refused is not None:
        return {
            "statusCode": refused.status_code,
            "headers": {
                **{k: str(v) for k, v in refused.headers.items()},
                "Content-Type": content_types.APPLICATION_JSON,
            },
            "body": refused.body,
        }
    # The resolver compares media types as written (they are case-insensitive), and parses
    # by the type even an empty body (a multipart type without a boundary would fail it):
    # with no body the type says nothing, so it goes.
    for headers in (event.get("headers") or {}, event.get("multiValueHeaders") or {}):
        for key in [k for k in headers if k.lower() == "content-type"]:
            if not event.get("body"):
                del headers[key]
            elif isinstance(headers[key], str):
                headers[key] = headers[key].lower()
            else:
                headers[key] = [str(v).lower() for v in headers[key]]
    return app.resolve(event, context)


def methods_of(app: APIGatewayRestResolver, path: str) -> list[str]:
    """The methods ``path`` has, by Powertools' compiled route patterns. A path that is a
    static route (``/jobs/batch``) is that route only, though a dynamic one's pattern
    (``/jobs/<job_id>``) matches it too."""
    static = {r.method for r in app._static_routes if r.rule.match(path)}
    return sorted(static or {r.method for r in app._dynamic_routes if r.rule.match(path)})


def _not_allowed(method: str, path: str, allowed: list[str]) -> Response[str]:
    answer = _error(405, "method_not_allowed", f"{method} is not a method of {path}", "method")
    answer.headers["Allow"] = ", ".join(allowed)
    return answer


def _refused_shadowed(app: APIGatewayRestResolver, event: dict[str, Any]) -> Response[str] | None:
    """A method a static route lacks is refused (405) before a dynamic route whose pattern
    also matches the path could serve it (GET /jobs/batch is not the job named "batch")."""
    path = str(event.get("path") or "")
    method = str(event.get("httpMethod") or "").upper()
    static = {r.method for r in app._static_routes if r.rule.match(path)}
    if static and method not in static:
        shadow = any(r.method == method and r.rule.match(path) for r in app._dynamic_routes)
        if shadow:
            return _not_allowed(method, path, sorted(static))
    return None


def _route(app: APIGatewayRestResolver, method: str, path: str) -> Any:
    """The route the resolver would serve ``method`` ``path`` with (a static one first,
    as the resolver prefers it), or None."""
    for routes in (app._static_routes, app._dynamic_routes):
        for route in routes:
            if route.method == method and route.rule.match(path):
                return route
    return None


def _refused_query(app: APIGatewayRestResolver, event: dict[str, Any]) -> Response[str] | None:
    """A query parameter the route does not read is refused (400 naming it), not ignored:
    a misspelt ``stat=failed`` would otherwise list every state as if filtered. A route
    takes the parameters its document lists, and a GET also ``tenant`` (an operator's
    view of another tenant). Routes outside the document (the console, the document
    itself) are left as they are, and so is a caller without an identity (its 401 first)."""
    names = [
        *(event.get("queryStringParameters") or {}),
        *(event.get("multiValueQueryStringParameters") or {}),
    ]
    if not names or not ((event.get("requestContext") or {}).get("authorizer") or {}):
        return None
    method = str(event.get("httpMethod") or "").upper()
    route = _route(app, method, str(event.get("path") or ""))
    if route is None or not route.include_in_schema:
        return None  # the resolver answers 404 or 405
    known = {str(q.alias) for q in route.dependant.query_params}
    if method == "GET":
        known.add(document.TENANT_PARAMETER)
    for name in names:
        if name not in known:
            takes = ", ".join(sorted(known)) or "none"
            return _error(
                400,
                "validation",
                f"is not a query parameter of {method} {route.openapi_path} (it takes: {takes})",
                name,
            )
    return None


def _refused_operator(event: dict[str, Any]) -> Response[str] | None:
    """An operator's key reads every tenant and writes nothing: any other method is refused
    here, before a route (or an idempotency record) could act on it."""
    context = (event.get("requestContext") or {}).get("authorizer") or {}
    method = str(event.get("httpMethod") or "").upper()
    if context.get("role") == OPERATOR and method not in READ_METHODS:
        return _error(403, "forbidden", "an operator's key is read-only")
    return None


# The API's root: where to go next. Links are relative to the root, so they hold on a
# stage's path (/Prod/) and on the local cloud's bare host alike.
INDEX: dict[str, Any] = {
    "name": "Fireline",
    "about": "a serverless job scheduler: schedules, one-off jobs and workflows; every other"
    " route needs an API key (x-api-key)",
    "links": {
        "console": "console",
        "docs": "docs",
        "openapi": "openapi.json",
    },
}
INDEX_PAGE = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Fireline</title>'
    "</head><body><h1>Fireline</h1><p>A serverless job scheduler. Every route but these "
    "needs an API key (<code>x-api-key</code>).</p><ul>"
    '<li><a href="console">Console</a> (sign in with an API key)</li>'
    '<li><a href="docs">API documentation</a></li>'
    '<li><a href="openapi.json">OpenAPI document</a></li>'
    "</ul></body></html>"
)


def _asset(name: str) -> Response[str]:
    found = console.asset(name)
    if found is None:
        return _error(404, "not_found", "no such route")
    return Response(
        status_code=200,
        content_type=found.content_type,
        body=found.body,
        headers=dict(console.SECURITY_HEADERS),
    )


def _refused_body(event: dict[str, Any]) -> Response[str] | None:
    body = event.get("body") or ""
    limit, hint = body_limit(str(event.get("httpMethod") or ""), str(event.get("path") or ""))
    raw = body.encode() if isinstance(body, str) else body
    if len(raw) > limit:
        return _error(413, "too_large", f"the request body exceeds {limit} bytes{hint}", "body")
    if not raw:
        return None
    media = _content_type(event).split(";", 1)[0].strip().lower()
    if media not in ("", content_types.APPLICATION_JSON):
        return _error(
            415, "unsupported_media_type", "the body must be application/json", "Content-Type"
        )
    try:
        if event.get("isBase64Encoded"):
            raw = base64.b64decode(raw, validate=True)
        decoded = models.decode_json(raw)
    except errors.ValidationError as exc:
        return _error(400, "validation", exc.detail, exc.field)
    except ValueError:  # not base64, not UTF-8, not JSON, an integer of 4,300+ digits
        return _error(422, "validation", "the body is not JSON", "body")
    if decoded is not None and not isinstance(decoded, dict):
        # Every body of the API is an object; the resolver would read an array's first
        # element as the body and drop the rest (two creates sent, one made).
        return _error(422, "validation", "the body must be a JSON object", "body")
    return None


def _content_type(event: dict[str, Any]) -> str:
    for key, value in (event.get("headers") or {}).items():
        if key.lower() == "content-type" and value:
            return str(value)
    for key, values in (event.get("multiValueHeaders") or {}).items():
        if key.lower() == "content-type" and values:
            return str(values[0])
    return ""


def _listed(states: tuple[str, ...]) -> str:
    return "only those in this state: " + ", ".join(states)


def _state_filter(states: tuple[str, ...]) -> Any:
    """A ``state`` query parameter, its values listed in the document (an unknown one is a
    400 naming ``state``)."""
    return Query(description=_listed(states), json_schema_extra={"enum": list(states)})


def _json(body: dict[str, Any], status: int) -> Response[str]:
    return Response(
        status_code=status, content_type=content_types.APPLICATION_JSON, body=json.dumps(body)
    )


def _workflow_routes(
    app: APIGatewayRestResolver,
    workflows: WorkflowService,
    tenant: Callable[[], str],
    once: Operation,
) -> None:
    """Workflows (DAGs of jobs), their uploads and their runs."""

    def definition_of(owner: str, body: models.WorkflowIn) -> models.DefinitionIn:
        inline = body.inline()
        if inline is not None:
            return inline
        assert body.upload_id is not None  # the model requires one of the two
        raw = workflows.uploaded(owner, body.upload_id)
        try:
            return models.uploaded_definition(raw)
        except ModelError as exc:  # the same answer as the same mistake inline
            raise RequestValidationError(exc.errors(include_url=False)) from exc

    @app.put(
        "/workflows/<workflow_id>",
        summary="Register a workflow definition: a new version (inline up to 4 MiB, or "
        "an upload_id)",
        responses=document.success(201, models.WorkflowOut, document.WORKFLOW_LINKS),
    )
    def register_workflow(
        workflow_id: ID,
        body: Annotated[models.WorkflowIn, Body(openapi_examples=document.WORKFLOW_EXAMPLES)],
    ) -> Response[str]:
        owner = tenant()

        def run() -> dict[str, Any]:
            definition = definition_of(owner, body)
            meta = workflows.register(owner, workflow_id, definition.specs(), definition.edges)
            return models.WorkflowOut.of(meta).model_dump(mode="json")

        return _json(once(f"register_workflow:{workflow_id}", run), 201)

    @app.post(
        "/workflow-uploads",
        summary="A presigned POST to upload a large workflow definition with, then "
        "register it by upload_id",
        responses=document.success(201, models.UploadOut),
    )
    def create_workflow_upload() -> Response[str]:
        upload_id, form = workflows.upload(tenant())
        out = models.UploadOut(
            upload_id=upload_id,
            upload_url=form.url,
            upload_fields=form.fields,
            expires_in=workflow_service.UPLOAD_EXPIRES_SECONDS,
            max_bytes=workflow_service.MAX_UPLOAD_BYTES,
        )
        return _json(out.model_dump(mode="json"), 201)

    @app.get("/workflows", summary="List the tenant's workflows by id (each its latest version)")
    def list_workflows(limit: Limit = 50, cursor: Cursor = None) -> models.WorkflowPage:
        owner = tenant()
        after = models.listing_cursor_after(cursor, owner, "workflows", {})
        page = workflows.catalog(owner, limit=limit, cursor=after)
        return models.WorkflowPage(
            items=[models.WorkflowOut.of(m) for m in page.items],
            next_cursor=models.listing_cursor(owner, "workflows", {}, page.cursor),
        )

    @app.get("/workflows/<workflow_id>/runs", summary="A workflow's runs, newest first")
    def list_workflow_runs(
        workflow_id: ID,
        limit: Limit = 50,
        cursor: Cursor = None,
        state: Annotated[str | None, _state_filter(workflow_service.RUN_STATES)] = None,
    ) -> models.RunPage:
        owner = tenant()
        filters: dict[str, str | None] = {"workflow_id": workflow_id, "state": state}
        after = models.listing_cursor_after(cursor, owner, "runs", filters)
        page = workflows.runs(owner, workflow_id, state=state, limit=limit, cursor=after)
        return models.RunPage(
            items=[models.RunOut.of(r) for r in page.items],
            next_cursor=models.listing_cursor(owner, "runs", filters, page.cursor),
        )

    @app.get("/workflows/<workflow_id>", summary="Get a workflow's latest version")
    def get_workflow(workflow_id: ID) -> models.WorkflowOut:
        return models.WorkflowOut.of(workflows.get(tenant(), workflow_id))

    @app.post(
        "/workflows/<workflow_id>/runs",
        summary="Start a run of a workflow (its latest version unless one is given)",
        responses=document.success(202, models.RunOut, document.RUN_LINKS),
    )
    def start_run(
        workflow_id: ID,
        body: Annotated[models.RunIn | None, Body(openapi_examples=document.RUN_EXAMPLES)] = None,
    ) -> Response[str]:
        owner = tenant()
        version = body.version if body is not None else None

        def run() -> dict[str, Any]:
            started = workflows.start(owner, workflow_id, version=version)
            return models.RunOut.of(started).model_dump(mode="json")

        return _json(once(f"start_run:{workflow_id}", run), 202)

    @app.get("/runs/<run_id>", summary="A run: its state, nodes per state and progress")
    def get_run(run_id: ID) -> models.RunViewOut:
        return models.RunViewOut.of_view(workflows.view(tenant(), run_id))

    @app.get(
        "/runs/<run_id>/nodes",
        summary="A run's nodes by node id (in one state if given), with their exit reasons",
    )
    def list_run_nodes(
        run_id: ID,
        state: Annotated[str | None, _state_filter(NODE_STATES)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        cursor: Cursor = None,
    ) -> models.RunNodePage:
        owner = tenant()
        one_of(state, NODE_STATES)
        chosen = dag.NodeState(state) if state is not None else None
        filters: dict[str, str | None] = {"run_id": run_id, "state": state}
        after = models.listing_cursor_after(cursor, owner, "nodes", filters)
        page = workflows.nodes(owner, run_id, chosen, limit=limit, cursor=after)
        return models.RunNodePage(
            items=[models.RunNodeOut.of(n) for n in page.items],
            next_cursor=models.listing_cursor(owner, "nodes", filters, page.cursor),
        )

    @app.get(
        "/runs/<run_id>/graph",
        summary="A run's graph to draw: all its nodes up to limit, else limit nodes around "
        "its failures; each node's state and depth, and the edges between them",
    )
    def run_graph(
        run_id: ID, limit: Annotated[int, Query(ge=1, le=500)] = 200
    ) -> models.RunGraphOut:
        return models.RunGraphOut.of(workflows.graph(tenant(), run_id, limit=limit))

    @app.post(
        "/runs/<run_id>/cancel",
        summary="Cancel a run: waiting nodes never start (repeating it is harmless)",
    )
    def cancel_run(run_id: ID) -> models.RunOut:
        return models.RunOut.of(workflows.cancel(tenant(), run_id))

    @app.post(
        "/runs/<run_id>/retry",
        summary="Re-run a failed run's failed and blocked nodes (what succeeded stays)",
        responses=document.success(202, models.RunOut),
    )
    def retry_run(run_id: ID) -> Response[str]:
        retried = workflows.retry_failed(tenant(), run_id)
        return _json(models.RunOut.of(retried).model_dump(mode="json"), 202)

    @app.post(
        "/runs/<run_id>/reconcile",
        summary="Repair a run from its node states (dispatch what is ready, finish it)",
        responses=document.success(202, models.RunOut),
    )
    def reconcile_run(run_id: ID) -> Response[str]:
        found = workflows.reconcile(tenant(), run_id)
        return _json(models.RunOut.of(found).model_dump(mode="json"), 202)
