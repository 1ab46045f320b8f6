"""Fireline assembled on moto (the template's tables and queues) with a fake clock.

Tests drive the real services and adapters through it: the ticker, the schedule service
and the API resolver, with every boto3 client hooked by a RequestLog so cost per fire
is counted, not guessed.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
from moto import mock_aws

from fireline import ports
from fireline.adapters import (
    backfills_dynamodb,
    leases_dynamodb,
    memory,
    occurrences_dynamodb,
    s3,
    schedules_dynamodb,
    slots_dynamodb,
    sqs,
    stepfunctions,
    threads,
    workflows_dynamodb,
)
from fireline.api import app as api_app
from fireline.domain import egress as egress_rules
from fireline.domain import model, workflow
from fireline.services import (
    backfills,
    claims,
    long_jobs,
    roles,
    schedules,
    targets,
    ticker,
    webhook,
    worker,
)

from .aws import REGION, RequestLog, Stack, emulator_cpu, serialized_item_writes, sqs_follows
from .flows import Flow, node, signing_key, wide_dag
from .transactions import item_scoped_transactions

START = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
LOCAL_EGRESS = egress_rules.EgressPolicy.parse("*", "127.0.0.0/8,::1/128")


@dataclass
class System:
    stack: Stack
    clock: memory.FakeClock
    log: RequestLog
    ddb: Any
    sqs_client: Any
    metrics: memory.RecordingMetrics = field(default_factory=memory.RecordingMetrics)
    #: The tenants' quota counts, when the system counts them (cost_paths.deployed_system).
    quotas: Any = None
    #: Where HTTP targets may go (registration and sends): https to public addresses.
    egress: egress_rules.EgressPolicy = egress_rules.STRICT

    def __post_init__(self) -> None:
        tables = self.stack.tables
        self.schedules = schedules_dynamodb.DynamoScheduleStore(self.ddb, tables["SchedulesTable"])
        self.occurrences = occurrences_dynamodb.DynamoOccurrenceStore(
            self.ddb, tables["OccurrencesTable"]
        )
        self.leases = leases_dynamodb.DynamoLeaseStore(self.ddb, tables["LeasesTable"])
        urls = {c: self.stack.queues[f"{c.capitalize()}Queue"] for c in model.JOB_CLASSES}
        dead = {c: self.stack.queues[f"{c.capitalize()}DeadLetterQueue"] for c in model.JOB_CLASSES}
        self.queue = sqs.SqsWorkQueue(self.sqs_client, urls, dead)
        self.service = schedules.ScheduleService(
            schedules=self.schedules,
            occurrences=self.occurrences,
            queue=self.queue,
            clock=self.clock,
        )
        self.slots = slots_dynamodb.DynamoSlotStore(self.ddb, tables["SlotsTable"])
        self.idempotency = memory.MemoryIdempotencyStore()
        #: Backfills, their records in the workflows table as deployed.
        self.backfills = backfills.Backfills(
            store=backfills_dynamodb.DynamoBackfillStore(self.ddb, tables["WorkflowsTable"]),
            schedules=self.schedules,
            occurrences=self.occurrences,
            queue=self.queue,
            clock=self.clock,
            ids=schedules.new_id,
            parallel=threads.ThreadPool(4, name="test-backfill"),
        )
        self._api = api_app.build_app(self.service, self.idempotency, backfills=self.backfills)
        #: Python handlers the workers of this system run (tests register their own).
        self.registry = targets.Registry()
        self.registry.register("noop")(lambda context: None)
        #: Tenants' roles, assumed on moto's STS (which gives each assumed role's
        #: credentials the role's account) as the deployed worker does.
        self.roles = roles.RoleAssumer(lambda credentials: client_as("sts", credentials))

    def metered(self, service: str, credentials: roles.Credentials | None) -> Any:
        """A moto client as ``credentials`` whose requests the system's log counts (the
        dispatch targets' calls, billed to the tenant's account; a cost path's roles)."""
        client = client_as(service, credentials)
        self.log.attach(client)
        return client

    def allow_local_webhooks(self) -> None:
        """The local cloud's operator setting: plain http and the loopback (test servers
        listen on 127.0.0.1)."""
        self.egress = LOCAL_EGRESS
        self.service.egress = LOCAL_EGRESS

    def runner(self) -> targets.TargetRunner:
        return targets.TargetRunner(
            registry=self.registry,
            signing_key=signing_key,
            lambda_client=lambda timeout, credentials: client_as("lambda", credentials),
            sqs_client=lambda credentials: (
                self.sqs_client if credentials is None else client_as("sqs", credentials)
            ),
            aws_client=lambda service, region, credentials: self.metered(service, credentials),
            roles_for_targets=self.roles,
            aws_targets=self.service.aws_targets,
            egress=webhook.Egress(policy=self.egress),
        )

    def long_jobs(self, heartbeat_seconds: int = 2) -> long_jobs.LongJobs:
        sfn = boto3.client("stepfunctions", region_name=REGION)
        return long_jobs.LongJobs(
            schedules=self.schedules,
            occurrences=self.occurrences,
            supervisor=stepfunctions.StepFunctionsLongJobs(
                sfn, self.stack.environment["LONG_JOB_STATE_MACHINE_ARN"]
            ),
            clock=self.clock,
            runner=self.runner(),
            config=long_jobs.LongJobConfig(heartbeat_seconds=heartbeat_seconds),
        )

    def worker(
        self,
        *,
        tenant_limit: int = 50,
        job_class: str = "default",
        long: long_jobs.LongJobs | None = None,
    ) -> worker.Worker:
        runner = self.runner()
        return worker.Worker(
            schedules=self.schedules,
            occurrences=self.occurrences,
            queue=self.queue,
            slots=self.slots,
            clock=self.clock,
            runner=runner,
            config=worker.WorkerConfig(job_class=job_class, tenant_limit=tenant_limit),
            metrics=self.metrics,
            long_jobs=long,
            backfills=self.backfills,
        )

    def receive(self, job_class: str = "default") -> list[ports.ReceivedMessage]:
        """Every message visible now on a class's queue, not deleted (as SQS delivers)."""
        found: list[ports.ReceivedMessage] = []
        while batch := self.queue.receive(job_class, max_messages=10, visibility_timeout=900):
            found += batch
        return found

    def ticker(
        self, owner: str = "ticker-a", *, use_lease: bool = True, **config: Any
    ) -> ticker.Ticker:
        return ticker.Ticker(
            schedules=self.schedules,
            occurrences=self.occurrences,
            queue=self.queue,
            leases=self.leases,
            clock=self.clock,
            owner=owner,
            config=ticker.TickerConfig(**config),
            metrics=self.metrics,
            use_lease=use_lease,
        )

    def claim(self, body: dict[str, Any]) -> claims.Claim:
        return claims.claim(
            body, schedules=self.schedules, occurrences=self.occurrences, now=self.clock.now()
        )

    def receive_all(self, job_class: str = "default") -> list[dict[str, Any]]:
        """Every message visible now on a class's queue (deleted as read)."""
        bodies: list[dict[str, Any]] = []
        while batch := self.queue.receive(job_class, max_messages=10):
            for message in batch:
                bodies.append(message.body)
                self.queue.delete(job_class, message.receipt)
        return bodies

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        tenant: str | None = "tenant-a",
        headers: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """One API Gateway proxy event through the real resolver; (status, JSON body)."""
        event = api_event(method, path, body, tenant=tenant, headers=headers, query=query)
        response = api_app.handle(self._api, event, None)
        text = response.get("body") or ""
        return response["statusCode"], json.loads(text) if text else None


def api_event(
    method: str,
    path: str,
    body: Any = None,
    *,
    tenant: str | None = "tenant-a",
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
) -> dict[str, Any]:
    raw = body if isinstance(body, str) or body is None else json.dumps(body)
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": {"Content-Type": "application/json", **(headers or {})},
        "multiValueHeaders": {},
        "queryStringParameters": query,
        "multiValueQueryStringParameters": {k: [v] for k, v in (query or {}).items()} or None,
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "body": raw,
        "isBase64Encoded": False,
        "requestContext": {
            "resourcePath": "/{proxy+}",
            "httpMethod": method,
            "path": f"/prod{path}",
            "stage": "prod",
            "requestId": "test-request",
            "authorizer": {"tenant_id": tenant} if tenant else None,
        },
    }


@contextlib.contextmanager
def moto_system(
    start: datetime = START, *, lambda_without_docker: bool = False
) -> Iterator[System]:
    clock = memory.FakeClock(start)
    # moto runs state machine definitions when asked to (long jobs need it).
    sfn_config: Any = {"stepfunctions": {"execute_state_machine": True}}
    if lambda_without_docker:
        # Invoke answers from moto's own stub (per account) instead of a container.
        sfn_config["lambda"] = {"use_docker": False}
    with (
        mock_aws(config=sfn_config),
        serialized_item_writes(),
        sqs_follows(clock),
        emulator_cpu() as moto_cpu,
    ):
        stack = Stack.create()
        log = RequestLog(indexes=stack.indexes, outside_cpu=moto_cpu)
        ddb = boto3.client("dynamodb", region_name=REGION)
        sqs_client = boto3.client("sqs", region_name=REGION)
        log.attach(ddb)
        log.attach(sqs_client)
        yield System(stack=stack, clock=clock, log=log, ddb=ddb, sqs_client=sqs_client)


def client_as(service: str, credentials: roles.Credentials | None) -> Any:
    """A moto client as ``credentials`` (a tenant's assumed role), or as Fireline."""
    if credentials is None:
        return boto3.client(service, region_name=REGION)  # type: ignore[call-overload]
    return boto3.client(  # type: ignore[call-overload]
        service,
        region_name=REGION,
        aws_access_key_id=credentials.access_key_id,
        aws_secret_access_key=credentials.secret_access_key,
        aws_session_token=credentials.session_token,
    )


def flow_on(system: System) -> Flow:
    """The workflow pieces of ``system``, driven as a Flow (see helpers.flows)."""
    stack = system.stack
    s3_client = boto3.client("s3", region_name=REGION)
    system.log.attach(s3_client)
    urls = {c: stack.queues[f"{c.capitalize()}Queue"] for c in model.JOB_CLASSES}
    urls[workflow.CONTROL_QUEUE] = stack.queues["WorkflowQueue"]
    return Flow(
        store=workflows_dynamodb.DynamoWorkflowStore(system.ddb, stack.tables["WorkflowsTable"]),
        documents=s3.S3DocumentStore(s3_client, stack.buckets["DefinitionsBucket"]),
        occurrences=system.occurrences,
        queue=sqs.SqsWorkQueue(system.sqs_client, urls),
        slots=system.slots,
        schedules=system.schedules,
        clock=system.clock,
    )


@contextlib.contextmanager
def moto_flow() -> Iterator[tuple[System, Flow]]:
    """A system on moto with the workflow pieces (WorkflowsTable, DefinitionsBucket,
    WorkflowQueue) as a Flow."""
    with moto_system() as system, item_scoped_transactions():
        yield system, flow_on(system)


def run_wide_dag_on_moto(size: int) -> tuple[float, dict[str, float]]:
    """A wide DAG of ``size`` short nodes run to success on moto, its bounds held: the
    WorkflowsTable item writes per node and the AWS requests per node."""
    with moto_flow() as (system, flow):
        names, edges = wide_dag(size)
        flow.register([node(n, job_class="short") for n in names], edges)
        run = flow.start()
        flow.drain()
        assert flow.run_state(run) is workflow.RunState.SUCCEEDED
        assert len(flow.ledger.effects) == size and set(flow.ledger.effects.values()) == {1}
        table = system.stack.tables["WorkflowsTable"]
        node_writes = system.log.item_writes.get(table, 0)
        # Per node: its row, its dispatch, its success, one decrement per edge (the wide
        # DAG has about 2 parents per node), and a leaf's count: a bounded handful, not
        # O(nodes).
        per_node = node_writes / size
        leaves = sum(1 for n in names if not any(parent == n for parent, _ in edges))
        assert per_node <= 3 + (len(edges) + leaves) / size + 0.1, per_node
        # No transaction but the run's creation (a success is plain writes), the node rows
        # in batches of 25, and no Scan anywhere.
        requests = system.log.requests
        assert requests["TransactWriteItems"] == 1
        assert requests["BatchWriteItem"] == -(-size // 25)
        assert requests.get("Scan", 0) == 0
        # AND two occurrence writes per node, both the worker's (its claim writes the row:
        # the controller writes none), give or take a repeated delivery's
        occurrences = system.log.item_writes.get(system.stack.tables["OccurrencesTable"], 0)
        assert 2 * size <= occurrences <= 2.1 * size, occurrences / size
        controller_and_worker = {
            op: round(n / size, 2)
            for op, n in sorted(requests.items())
            if op not in ("ReceiveMessage", "DeleteMessage")  # the test's queue polling
        }
        print(
            f"\n{size:,} nodes, {len(edges)} edges on moto: {per_node:.2f} WorkflowsTable item "
            f"writes per node; requests per node: {controller_and_worker}"
        )
        return per_node, controller_and_worker
