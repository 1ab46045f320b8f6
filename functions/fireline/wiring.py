"""The one composition root: reads the environment, builds clients lazily, caches them.

Nothing else in the package reads ``os.environ`` or creates a boto3 client. Everything
is built on first use and kept for the life of a warm Lambda container; ``reset()``
forgets it all (tests and the local cloud use it after changing the environment).
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
from botocore.config import Config

from fireline import jobs, ports
from fireline.adapters import (
    api_keys_dynamodb,
    backfills_dynamodb,
    leases_dynamodb,
    occurrences_dynamodb,
    quotas_dynamodb,
    s3,
    schedules_dynamodb,
    secretsmanager,
    slots_dynamodb,
    sqs,
    stepfunctions,
    sweep_dynamodb,
    threads,
    workflows_dynamodb,
    xray,
)
from fireline.adapters import clock as clock_adapter
from fireline.api import app as api_app
from fireline.domain import aws_target, egress, errors, model, quota, workflow
from fireline.domain import tracing as trace_rules
from fireline.services import (
    backfills,
    isolation,
    keys,
    overview,
    roles,
    schedules,
    targets,
    ticker,
    webhook,
    workflows,
)
from fireline.services import long_jobs as long_jobs_service
from fireline.services import sweep as sweep_service
from fireline.services import tracing as tracing_service
from fireline.services import worker as worker_service
from fireline.services.worker import dispatcher as worker_dispatch

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayRestResolver
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

JOB_CLASSES = model.JOB_CLASSES
# Short timeouts and standard retries: a Lambda should fail fast and let the platform retry.
# (botocore's max_attempts counts retries: up to 4 requests per call.) Connections for
# every thread of the ticker's and workers' I/O pools (urllib3 would otherwise open and
# drop extra connections past its default of 10).
BOTO_CONFIG = Config(
    retries={"max_attempts": 3, "mode": "standard"},
    connect_timeout=2,
    read_timeout=5,
    max_pool_connections=64,
)
# Calls one ticker invocation keeps in flight at once (sends, advances, reads).
TICKER_POOL_SIZE = 32
# A tenant's Lambda target is invoked synchronously: the answer comes when the function
# ends, so the read must wait as long as the job's deadline allows, and a request that was
# sent is never repeated by the SDK (a read timeout would invoke the function again while
# it still runs). A failed invoke is a failed attempt, retried under the job's policy.
TARGET_LAMBDA_CONFIG = Config(
    retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=2
)


@dataclass(frozen=True)
class Settings:
    schedules_table: str
    occurrences_table: str
    leases_table: str
    idempotency_table: str
    api_keys_table: str
    slots_table: str
    queue_urls: dict[str, str]
    dead_letter_urls: dict[str, str]
    # The classes' burst queues (QUEUE_URL_<CLASS>_BURST), by class: absent, a class's
    # bursts go to its own queue.
    burst_queue_urls: dict[str, str] = field(default_factory=dict)
    shards: int = model.DEFAULT_SHARDS
    ticker_groups: int = 1
    lookahead_seconds: int = 300
    horizon_seconds: int = 900
    # How long before their second a burst's fires are visible on their burst queue
    # (BurstLeadSeconds); the workers hold them until their time.
    burst_lead_seconds: int = ticker.TickerConfig.burst_lead_seconds
    tenant_limit: int = quota.DEFAULT_LIMIT
    job_class: str = "default"  # the worker's class (JOB_CLASS)
    # The class's maximum concurrency, as its event source mapping sets it: a tenant's
    # share of the class is counted from it (0: none).
    class_max_concurrency: int = 0
    # Remote jobs one worker invocation keeps in flight at once (WORKER_IN_FLIGHT), and the
    # function's memory (Lambda's AWS_LAMBDA_FUNCTION_MEMORY_SIZE; 0 unknown), which sizes
    # how many Python jobs it runs at once (see services.worker.dispatcher).
    worker_in_flight: int = worker_dispatch.DEFAULT_IN_FLIGHT
    memory_mb: int = 0
    # Where tenants' webhook signing keys live (Secrets Manager names start with it), and
    # how long a worker keeps a tenant's ring; set for the functions that call targets.
    signing_secret_prefix: str = ""
    signing_cache_seconds: int = keys.DEFAULT_CACHE_SECONDS
    long_job_state_machine_arn: str = ""
    long_job_heartbeat_seconds: int = 60
    job_modules: tuple[str, ...] = ()  # modules whose @registry.register handlers to load
    workflows_table: str = ""
    definitions_bucket: str = ""
    workflow_queue_url: str = ""
    endpoint_url: str | None = None  # an emulator (moto, LocalStack); None on AWS
    # HTTP targets: tenants allowed plain http ("*": all), networks allowed although not
    # public (CIDRs); by default https to public addresses only.
    http_target_allow_http: str = ""
    http_target_allow_networks: str = ""
    # AWS targets: tenant=arn-pattern pairs callable without a role (default: none), the
    # role every tenant's role trusts (assumed first), and what makes a resource Fireline's.
    target_allowlist: str = ""
    target_caller_role_arn: str = ""
    # The IAM path tenants' roles live under (TenantTargetRolePath): the only ones the
    # target caller role may assume. Empty: any path (tools, tests).
    tenant_target_role_path: str = ""
    stack_name: str = ""
    account_id: str = ""
    long_task_queue_url: str = ""
    region: str = "us-east-1"
    # Per-tenant count quotas (QUOTA_SCHEDULES, ...): the deployment's defaults; counted
    # only where the slots table (which keeps the counts and overrides) is set.
    quotas: dict[quota.Quota, int] = field(default_factory=lambda: dict(quota.DEFAULT_QUOTAS))

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        def need(name: str) -> str:
            value = env.get(name)
            if not value:
                raise errors.ValidationError("is not set", field=name)
            return value

        def number(name: str, default: int) -> int:
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                return int(raw)
            except ValueError as exc:
                raise errors.ValidationError(f"{raw!r} is not a number", field=name) from exc

        return cls(
            schedules_table=need("SCHEDULES_TABLE"),
            occurrences_table=need("OCCURRENCES_TABLE"),
            leases_table=need("LEASES_TABLE"),
            idempotency_table=need("IDEMPOTENCY_TABLE"),
            api_keys_table=env.get("API_KEYS_TABLE", ""),
            slots_table=env.get("SLOTS_TABLE", ""),
            queue_urls={c: need(f"QUEUE_URL_{c.upper()}") for c in JOB_CLASSES},
            burst_queue_urls={
                c: url
                for c in model.BURST_QUEUES
                if (url := env.get(f"QUEUE_URL_{c.upper()}_BURST", ""))
            },
            dead_letter_urls={
                c: env.get(f"DEAD_LETTER_QUEUE_URL_{c.upper()}", "") for c in JOB_CLASSES
            },
            shards=number("DUE_SHARDS", model.DEFAULT_SHARDS),
            ticker_groups=number("TICKER_GROUPS", 1),
            lookahead_seconds=number("LOOKAHEAD_SECONDS", 300),
            horizon_seconds=number("HORIZON_SECONDS", 900),
            burst_lead_seconds=number("BURST_LEAD_SECONDS", ticker.TickerConfig.burst_lead_seconds),
            tenant_limit=number("TENANT_CONCURRENCY_LIMIT", quota.DEFAULT_LIMIT),
            job_class=env.get("JOB_CLASS", "default"),
            class_max_concurrency=number("CLASS_MAX_CONCURRENCY", 0),
            worker_in_flight=number("WORKER_IN_FLIGHT", worker_dispatch.DEFAULT_IN_FLIGHT),
            memory_mb=number("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", 0),
            signing_secret_prefix=env.get("SIGNING_SECRET_PREFIX", ""),
            signing_cache_seconds=number("SIGNING_KEY_CACHE_SECONDS", keys.DEFAULT_CACHE_SECONDS),
            long_job_state_machine_arn=env.get("LONG_JOB_STATE_MACHINE_ARN", ""),
            long_job_heartbeat_seconds=number("LONG_JOB_HEARTBEAT_SECONDS", 60),
            job_modules=tuple(
                m.strip() for m in env.get("JOB_MODULES", "").split(",") if m.strip()
            ),
            workflows_table=env.get("WORKFLOWS_TABLE", ""),
            definitions_bucket=env.get("DEFINITIONS_BUCKET", ""),
            workflow_queue_url=env.get("WORKFLOW_QUEUE_URL", ""),
            endpoint_url=env.get("AWS_ENDPOINT_URL") or None,
            http_target_allow_http=env.get("HTTP_TARGET_ALLOW_HTTP", ""),
            http_target_allow_networks=env.get("HTTP_TARGET_ALLOW_NETWORKS", ""),
            target_allowlist=env.get("TARGET_ALLOWLIST", ""),
            target_caller_role_arn=env.get("TARGET_CALLER_ROLE_ARN", ""),
            tenant_target_role_path=env.get("TENANT_TARGET_ROLE_PATH", ""),
            stack_name=env.get("FIRELINE_STACK_NAME", ""),
            account_id=env.get("FIRELINE_ACCOUNT_ID", ""),
            long_task_queue_url=env.get("LONG_TASK_QUEUE_URL", ""),
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            quotas={
                q: quota.check_quota(q, number(quota_variable(q), default))
                for q, default in quota.DEFAULT_QUOTAS.items()
            },
        )


def quota_variable(name: quota.Quota) -> str:
    """The environment variable of one default quota: QUOTA_SCHEDULES, ..."""
    return f"QUOTA_{name.value.upper()}"


@functools.cache
def settings() -> Settings:
    return Settings.from_env(os.environ)


def _client(service: str) -> Any:
    s = settings()
    return boto3.session.Session().client(
        service,  # type: ignore[call-overload]
        region_name=s.region,
        endpoint_url=s.endpoint_url,
        config=BOTO_CONFIG,
    )


@functools.cache
def dynamodb_client() -> DynamoDBClient:
    return _client("dynamodb")  # type: ignore[no-any-return]


@functools.cache
def sqs_client() -> SQSClient:
    return _client("sqs")  # type: ignore[no-any-return]


@functools.cache
def logger() -> Logger:
    return Logger(service="fireline")


@functools.cache
def metrics() -> Metrics:
    return Metrics(namespace="Fireline", service="fireline")


@functools.cache
def tracer() -> Tracer:
    """Powertools' X-Ray tracer of the handlers. Off outside Lambda (and wherever
    POWERTOOLS_TRACE_DISABLED is set), so tests and the local cloud need no daemon. No
    patching of boto3: the worker's records run on threads, which X-Ray's thread-local
    context does not follow; a fire's own trace is recorded by :func:`tracing`."""
    return Tracer(service="fireline", auto_patch=False)


@functools.cache
def tracing() -> tracing_service.Tracing:
    """Where a fire's trace segments go (TRACE_SEGMENTS): ``xray``, X-Ray's daemon (as
    deployed); ``log``, a log line each (the local cloud); unset, nowhere. A share of the
    fires is recorded (TRACE_SAMPLE_RATE, 0 to 1); every target gets the context."""
    where = os.environ.get("TRACE_SEGMENTS", "")
    raw = os.environ.get("TRACE_SAMPLE_RATE", "")
    try:
        rate = float(raw) if raw else trace_rules.DEFAULT_SAMPLE_RATE
    except ValueError as exc:
        raise errors.ValidationError(f"{raw!r} is not a number", field="TRACE_SAMPLE_RATE") from exc
    if not 0.0 <= rate <= 1.0:
        raise errors.ValidationError("must be 0 to 1", field="TRACE_SAMPLE_RATE")
    emitters: dict[str, Any] = {
        "": lambda: None,
        "xray": lambda: xray.UdpSegmentEmitter(
            os.environ.get("AWS_XRAY_DAEMON_ADDRESS", xray.DEFAULT_DAEMON_ADDRESS)
        ),
        "log": xray.LogSegmentEmitter,
    }
    if where not in emitters:
        raise errors.ValidationError(f"{where!r} is not xray or log", field="TRACE_SEGMENTS")
    service = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "fireline")
    return tracing_service.Tracing(emitters[where](), rate=rate, service=service)


def traced_queue(name: str) -> tracing_service.TracedQueue:
    """The work queue of a fire's sender (the API, the ticker): each fire it sends
    starts its trace with a segment named ``name``."""
    return tracing_service.TracedQueue(work_queue(), tracing(), clock(), name=name)


@functools.cache
def clock() -> clock_adapter.SystemClock:
    return clock_adapter.SystemClock()


@functools.cache
def quota_store() -> quotas_dynamodb.DynamoQuotaStore | None:
    """Quota use and overrides, beside the concurrency overrides (None: not counted)."""
    if not settings().slots_table:
        return None
    return quotas_dynamodb.DynamoQuotaStore(dynamodb_client(), settings().slots_table)


@functools.cache
def schedule_store() -> schedules_dynamodb.DynamoScheduleStore:
    return schedules_dynamodb.DynamoScheduleStore(
        dynamodb_client(),
        settings().schedules_table,
        shards=settings().shards,
        quotas=quota_store(),
    )


@functools.cache
def occurrence_store() -> occurrences_dynamodb.DynamoOccurrenceStore:
    return occurrences_dynamodb.DynamoOccurrenceStore(
        dynamodb_client(), settings().occurrences_table
    )


@functools.cache
def lease_store() -> leases_dynamodb.DynamoLeaseStore:
    return leases_dynamodb.DynamoLeaseStore(dynamodb_client(), settings().leases_table)


@functools.cache
def work_queue() -> sqs.SqsWorkQueue:
    s = settings()
    urls = dict(s.queue_urls)
    urls.update({model.BURST_QUEUES[c]: url for c, url in s.burst_queue_urls.items()})
    if s.workflow_queue_url:
        urls[workflow.CONTROL_QUEUE] = s.workflow_queue_url
    return sqs.SqsWorkQueue(sqs_client(), urls, s.dead_letter_urls)


@functools.cache
def idempotency_store() -> DynamoDBPersistenceLayer:
    return DynamoDBPersistenceLayer(
        table_name=settings().idempotency_table, boto3_client=dynamodb_client()
    )


@functools.cache
def api_key_store() -> api_keys_dynamodb.DynamoApiKeyStore:
    return api_keys_dynamodb.DynamoApiKeyStore(dynamodb_client(), settings().api_keys_table)


@functools.cache
def signing_key_store() -> secretsmanager.SecretsManagerSigningKeys:
    s = settings()
    return secretsmanager.SecretsManagerSigningKeys(
        _client("secretsmanager"), s.signing_secret_prefix
    )


@functools.cache
def signing_keys() -> keys.SigningKeys:
    return keys.SigningKeys(
        signing_key_store(),
        monotonic=clock().monotonic,
        ttl_seconds=settings().signing_cache_seconds,
    )


@functools.cache
def slot_store() -> slots_dynamodb.DynamoSlotStore:
    s = settings()
    return slots_dynamodb.DynamoSlotStore(
        dynamodb_client(), s.slots_table, default_limit=s.tenant_limit
    )


@functools.cache
def _target_session() -> boto3.session.Session:
    return boto3.session.Session()


def _client_as(
    service: str, credentials: roles.Credentials | None, config: Config, region: str = ""
) -> Any:
    """A client of ``service`` calling as ``credentials`` (a tenant's role), or as the
    function itself when None; in ``region`` (default: the deployment's)."""
    s = settings()
    keys = credentials or roles.Credentials("", "", "", 0)
    return _target_session().client(
        service,  # type: ignore[call-overload]
        region_name=region or s.region,
        endpoint_url=s.endpoint_url,
        config=config,
        aws_access_key_id=keys.access_key_id or None,
        aws_secret_access_key=keys.secret_access_key or None,
        aws_session_token=keys.session_token or None,
    )


# Clients per tenant role are kept while their credentials are (renewed hourly, so an
# old client falls out of the cache); the bound covers a worker's tenants at once.
@functools.lru_cache(maxsize=64)
def target_lambda_client(read_timeout: int, credentials: roles.Credentials | None = None) -> Any:
    """A client for invoking tenants' functions whose reads wait ``read_timeout`` seconds,
    as ``credentials`` (a tenant's role) or, with None, as the worker.

    botocore fixes the read timeout per client, so there is one per timeout in use (a
    class's deadline, mostly), kept while warm; one session shares the service model."""
    config = TARGET_LAMBDA_CONFIG.merge(Config(read_timeout=max(1, read_timeout)))
    return _client_as("lambda", credentials, config)


@functools.lru_cache(maxsize=64)
def target_sqs_client(credentials: roles.Credentials | None) -> Any:
    """A client for sending to tenants' queues as ``credentials`` (None: the worker)."""
    if credentials is None:
        return sqs_client()
    return _client_as("sqs", credentials, BOTO_CONFIG)


@functools.lru_cache(maxsize=64)
def target_aws_client(service: str, region: str, credentials: roles.Credentials | None) -> Any:
    """A client for a dispatch target (``stepfunctions``, ``events``, ``sns``) in the
    region its ARN names, as ``credentials`` (None: the worker). These calls are not
    idempotent by themselves, but each carries the occurrence's own name or key, so the
    SDK's resend of a request whose answer was lost converges (a state machine starts a
    name once) or reaches a receiver that de-duplicates on the key."""
    return _client_as(service, credentials, BOTO_CONFIG, region)


def _sts_client(credentials: roles.Credentials | None) -> Any:
    # STS's regional endpoint (the region's own, not the global one in us-east-1).
    return _client_as("sts", credentials, BOTO_CONFIG)


@functools.cache
def role_assumer() -> roles.RoleAssumer:
    return roles.RoleAssumer(_sts_client, caller_role_arn=settings().target_caller_role_arn)


@functools.cache
def aws_target_policy() -> aws_target.AwsTargetPolicy:
    """The operator's allowlist and this deployment's own queues, functions and state
    machine (never targets)."""
    s = settings()
    return aws_target.AwsTargetPolicy.parse(
        s.target_allowlist,
        account=s.account_id,
        stack_name=s.stack_name,
        own_resources=[
            *s.queue_urls.values(),
            *s.burst_queue_urls.values(),
            *s.dead_letter_urls.values(),
            s.workflow_queue_url,
            s.long_task_queue_url,
            s.long_job_state_machine_arn,
        ],
        role_path=s.tenant_target_role_path,
    )


@functools.cache
def registry() -> targets.Registry:
    """The built-in jobs plus the handlers of every module JOB_MODULES names."""
    for name in settings().job_modules:
        importlib.import_module(name)
    return jobs.registry


@functools.cache
def egress_policy() -> egress.EgressPolicy:
    s = settings()
    return egress.EgressPolicy.parse(s.http_target_allow_http, s.http_target_allow_networks)


@functools.cache
def target_runner() -> targets.TargetRunner:
    return targets.TargetRunner(
        registry=registry(),
        # Resolved per delivery: a worker without a prefix fails only its HTTP targets.
        signing_key=lambda tenant_id: signing_keys().current(tenant_id),
        lambda_client=lambda timeout, credentials: target_lambda_client(
            math.ceil(timeout), credentials
        ),
        sqs_client=target_sqs_client,
        aws_client=target_aws_client,
        workflows=workflow_service if settings().workflows_table else None,
        egress=webhook.Egress(policy=egress_policy()),
        roles_for_targets=role_assumer(),
        aws_targets=aws_target_policy(),
        # A process per attempt, killed at its deadline: a runaway job of one tenant
        # never keeps running beside the next jobs of another. No more of them at once
        # than the function has vCPUs, whichever lane a record came in.
        python=worker_dispatch.gated(isolation.run_in_child_process, dispatch_limits().compute),
    )


@functools.cache
def dispatch_pools() -> worker_dispatch.Pools:
    """The worker's threads, made once per container and kept warm between batches."""
    return worker_dispatch.Pools(dispatch_limits())


@functools.cache
def dispatch_limits() -> worker_dispatch.Limits:
    """How many records one worker invocation runs at once: remote jobs up to
    WORKER_IN_FLIGHT, Python jobs as many as its memory buys vCPUs (os.cpu_count() caps
    it; a function of unknown memory counts as one vCPU)."""
    s = settings()
    return worker_dispatch.Limits(
        in_flight=s.worker_in_flight,
        compute=worker_dispatch.compute_slots(
            s.memory_mb or worker_dispatch.ONE_VCPU_MB, os.cpu_count()
        ),
    )


@functools.cache
def sfn_client() -> Any:
    return _client("stepfunctions")


@functools.cache
def long_jobs() -> long_jobs_service.LongJobs:
    s = settings()
    if not s.long_job_state_machine_arn:
        raise errors.ValidationError("is not set", field="LONG_JOB_STATE_MACHINE_ARN")
    return long_jobs_service.LongJobs(
        schedules=schedule_store(),
        occurrences=occurrence_store(),
        supervisor=stepfunctions.StepFunctionsLongJobs(sfn_client(), s.long_job_state_machine_arn),
        clock=clock(),
        runner=target_runner() if s.signing_secret_prefix else None,
        config=long_jobs_service.LongJobConfig(heartbeat_seconds=s.long_job_heartbeat_seconds),
        nodes=node_jobs() if s.workflows_table else None,
        slots=slot_store() if s.slots_table else None,
    )


@functools.cache
def worker() -> worker_service.Worker:
    s = settings()
    return worker_service.Worker(
        schedules=schedule_store(),
        occurrences=occurrence_store(),
        queue=work_queue(),
        slots=slot_store(),
        clock=clock(),
        runner=target_runner(),
        config=worker_service.WorkerConfig(
            job_class=s.job_class,
            tenant_limit=s.tenant_limit,
            class_max_concurrency=s.class_max_concurrency,
            # A long job runs in a runner of its own: that class's jobs are its runners.
            in_flight=1 if s.job_class == "long" else s.worker_in_flight,
            early_hold_seconds=worker_service.early_hold_for(s.job_class, s.burst_lead_seconds),
            jobs_counted=quota_store() is not None,
            # This container in its class's register of live containers (one a warm
            # container: the worker is built once per container).
            pool_member=uuid.uuid4().hex,
        ),
        metrics=metrics(),
        long_jobs=long_jobs() if s.job_class == "long" else None,
        nodes=node_jobs() if s.workflows_table else None,
        tracing=tracing(),
        backfills=backfill_service() if s.workflows_table else None,
    )


@functools.cache
def schedule_service() -> schedules.ScheduleService:
    return schedules.ScheduleService(
        schedules=schedule_store(),
        occurrences=occurrence_store(),
        queue=traced_queue("fireline-api"),
        clock=clock(),
        handlers=registry(),
        long_jobs=long_jobs() if settings().long_job_state_machine_arn else None,
        workflows=workflow_service() if settings().workflows_table else None,
        egress=egress_policy(),
        aws_targets=aws_target_policy(),
        quotas=settings().quotas if quota_store() is not None else None,
    )


@functools.cache
def api() -> APIGatewayRestResolver:
    s = settings()
    return api_app.build_app(
        schedule_service(),
        idempotency_store(),
        workflows=workflow_service() if s.workflows_table else None,
        overview=overview.Overview(
            schedule_service(),
            leases=lease_store(),
            ticker_groups=s.ticker_groups,
            queues=work_queue(),
        ),
        tenants=tenant_ids if s.api_keys_table else None,
        backfills=backfill_service() if s.workflows_table else None,
    )


# A backfill's conditional puts side by side: 10,000 fires at ~5 ms each in about 3 s.
BACKFILL_PUTS_IN_FLIGHT = 16


@functools.cache
def backfill_service() -> backfills.Backfills:
    """Backfills keep their records in the workflows table (generic keys, a sparse index)."""
    return backfills.Backfills(
        store=backfills_dynamodb.DynamoBackfillStore(dynamodb_client(), settings().workflows_table),
        schedules=schedule_store(),
        occurrences=occurrence_store(),
        queue=work_queue(),
        clock=clock(),
        ids=schedules.new_id,
        parallel=threads.ThreadPool(BACKFILL_PUTS_IN_FLIGHT, name="fireline-backfill"),
    )


def tenant_ids() -> list[str]:
    """The tenants with an API key (an operator's tenant picker): one Scan of the keys
    table, small (a row per key)."""
    return sorted({record.tenant_id for record in api_key_store().list()})


@functools.cache
def s3_client() -> Any:
    # Signature v4 for presigned upload URLs too (botocore would sign them with v2, which
    # S3 refuses in newer regions and for newer buckets).
    s = settings()
    return boto3.session.Session().client(
        "s3",
        region_name=s.region,
        endpoint_url=s.endpoint_url,
        config=BOTO_CONFIG.merge(Config(signature_version="s3v4")),
    )


@functools.cache
def workflow_store() -> workflows_dynamodb.DynamoWorkflowStore:
    s = settings()
    if not s.workflows_table:
        raise errors.ValidationError("is not set", field="WORKFLOWS_TABLE")
    return workflows_dynamodb.DynamoWorkflowStore(
        dynamodb_client(), s.workflows_table, quotas=quota_store()
    )


@functools.cache
def document_store() -> s3.S3DocumentStore:
    s = settings()
    if not s.definitions_bucket:
        raise errors.ValidationError("is not set", field="DEFINITIONS_BUCKET")
    return s3.S3DocumentStore(s3_client(), s.definitions_bucket)


@functools.cache
def definitions() -> workflows.Definitions:
    return workflows.Definitions(workflow_store(), document_store())


@functools.cache
def workflow_service() -> workflows.WorkflowService:
    return workflows.WorkflowService(
        store=workflow_store(),
        documents=document_store(),
        queue=work_queue(),
        clock=clock(),
        definitions=definitions(),
        egress=egress_policy(),
        aws_targets=aws_target_policy(),
        quotas=quota_store(),
        limits=settings().quotas,
        occurrences=occurrence_store(),
        handlers=registry(),
    )


@functools.cache
def controller() -> workflows.Controller:
    return workflows.Controller(
        store=workflow_store(),
        documents=document_store(),
        occurrences=occurrence_store(),
        queue=work_queue(),
        clock=clock(),
        metrics=metrics(),
        definitions=definitions(),
        long_jobs=long_jobs() if settings().long_job_state_machine_arn else None,
    )


@functools.cache
def node_jobs() -> workflows.NodeJobs:
    return workflows.NodeJobs(store=workflow_store(), definitions=definitions(), queue=work_queue())


def ticker_for(
    owner: str, *, group: int = 0, parallel: ports.Parallel | None = None
) -> ticker.Ticker:
    s = settings()
    return ticker.Ticker(
        schedules=schedule_store(),
        occurrences=occurrence_store(),
        queue=traced_queue("fireline-ticker"),
        leases=lease_store(),
        clock=clock(),
        owner=owner,
        config=ticker.TickerConfig(
            shards=s.shards,
            groups=s.ticker_groups,
            group=group,
            lookahead_seconds=s.lookahead_seconds,
            horizon_seconds=s.horizon_seconds,
            burst_lead_seconds=s.burst_lead_seconds,
            burst_queues={c: model.BURST_QUEUES[c] for c in s.burst_queue_urls},
        ),
        metrics=metrics(),
        parallel=parallel,
    )


def sweep() -> sweep_service.Sweep:
    """The sweep (see fireline.services.sweep); it needs the slots table: without quotas
    no job holds a unit, and nothing is found."""
    s = settings()
    return sweep_service.Sweep(
        store=sweep_dynamodb.DynamoSweepStore(
            dynamodb_client(), schedules_table=s.schedules_table, slots_table=s.slots_table
        ),
        schedules=schedule_store(),
        occurrences=occurrence_store(),
        queue=work_queue(),
        clock=clock(),
        slots=slot_store(),
    )


def reset() -> None:
    """Forget every cached setting, client and service."""
    for cached in (
        settings, dynamodb_client, sqs_client, logger, metrics, tracer, tracing, clock,
        schedule_store,
        occurrence_store, lease_store, work_queue, api_key_store, signing_key_store,
        signing_keys, idempotency_store,
        schedule_service, api, slot_store, quota_store, target_lambda_client, _target_session,
        target_sqs_client, target_aws_client, role_assumer, aws_target_policy,
        target_runner, worker, registry, sfn_client, long_jobs, s3_client, workflow_store,
        document_store, definitions, workflow_service, controller, node_jobs,
        dispatch_limits, dispatch_pools, backfill_service,
    ):  # fmt: skip
        cached.cache_clear()
