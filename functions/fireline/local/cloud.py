"""The embedded local cloud: the real template and handlers on an emulator, on this machine.

``LocalCloud.start`` starts moto's server on 127.0.0.1 (or uses ``endpoint_url``, such as
LocalStack on :4566), turns on its Step Functions interpreter, deploys infra/template.yaml
through its CloudFormation (fireline.local.deploy), then plays the AWS service side with
fireline.local.runtime: function processes, the ticker's schedule rule, the SQS event
source mappings and API Gateway on a real HTTP port, with API keys mapped to tenants by
the deployed authorizer and the usage plan's per-tenant limits applied. The API keys it
starts with are created as `fireline admin keys create` creates keys: hashed, each
tenant with its own webhook signing secret in the emulator's Secrets Manager.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import urllib.request
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from fireline.adapters import api_keys_dynamodb, memory_keys, secretsmanager
from fireline.domain import errors
from fireline.domain import lease as lease_rules
from fireline.local import deploy, emulator, runtime, state
from fireline.services import keys

REGION = "us-east-1"
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
DEFAULT_KEYS = {"local-key-tenant-a": "tenant-a", "local-key-tenant-b": "tenant-b"}
LOCAL_PARAMETERS = {
    # Webhooks on this machine (a receiver on 127.0.0.1 while trying Fireline out): plain
    # http and the loopback are allowed here, and nowhere by default.
    "HttpTargetAllowHttp": "*",
    "HttpTargetAllowNetworks": "127.0.0.0/8,::1/128",
}


@dataclass
class LocalOptions:
    host: str = "127.0.0.1"
    emulator_port: int = 0  # 0: any free port
    api_port: int = 8080  # 0: any free port
    endpoint_url: str | None = None  # an existing emulator instead of starting moto
    tick_period: float | None = None  # override the ticker rule's period (seconds)
    api_keys: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_KEYS))
    state_dir: Path | None = None  # export on stop, import on start
    log_path: Path | None = None
    stack_name: str = "fireline-local"
    # The SAM template, or a template the CDK synthesized (cdk.out/<stack>.template.json).
    template_path: Path = deploy.TEMPLATE
    long_job_heartbeat_seconds: int = 10
    # Execution environments per function (each runs one invocation at a time); the
    # ticker gets one per rule that starts it (one per ticker group), as its group's lease
    # would idle any other.
    function_processes: int = 2
    extra_environment: dict[str, str] = field(default_factory=dict)
    # Template parameters over LOCAL_PARAMETERS (UsagePlanRateLimit=..., and so on).
    parameters: dict[str, str] = field(default_factory=dict)


class Metrics:
    """Recent metric values from the functions' EMF output (for the status screen)."""

    def __init__(self, window: int = 5000) -> None:
        self._values: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=window))
        self.totals: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()

    def add(self, name: str, value: float) -> None:
        with self._lock:
            self._values[name].append(value)
            self.totals[name] += value

    def percentile(self, name: str, p: float) -> float | None:
        with self._lock:
            values = sorted(self._values.get(name, ()))
        if not values:
            return None
        return values[round(p / 100 * (len(values) - 1))]


class LocalCloud:
    def __init__(self, options: LocalOptions | None = None) -> None:
        self.options = options or LocalOptions()
        self.metrics = Metrics()
        self.hosts: dict[str, runtime.FunctionHost] = {}
        self.mappings: dict[str, runtime.SqsMapping] = {}
        self.rules: list[runtime.ScheduleRule] = []
        self._server: Any = None
        self._http: Any = None  # the API's server, once it answers
        self._listening: Any = None  # the API's port, bound before the deploy
        self._started = False
        # What the embedded emulator holds while it runs (its item calls made atomic).
        self._emulating = contextlib.ExitStack()
        self.endpoint_url = ""
        self.api_url = ""
        self.deployed: deploy.Deployed | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> LocalCloud:
        """Start the emulator, deploy the stack and run its functions and API. The API's
        port is taken first, so a taken one fails before a minute of deploying; a start
        that fails stops what it had started (its emulator, threads and processes)."""
        self._listening = runtime.listen(self.options.host, self.options.api_port)
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> LocalCloud:
        o = self.options
        if o.endpoint_url:
            self.endpoint_url = o.endpoint_url.rstrip("/")
        else:
            from moto.server import ThreadedMotoServer

            # The emulator's HTTP server logs every request; the status screen says enough.
            logging.getLogger("werkzeug").setLevel(logging.ERROR)
            self._server = ThreadedMotoServer(
                ip_address=o.host, port=o.emulator_port, verbose=False
            )
            # Its server answers each request on a thread of its own, and the functions'
            # writes race the API's reads: each item call is made atomic, as in DynamoDB.
            self._emulating.enter_context(emulator.atomic_item_calls())
            self._server.start()
            host, port = self._server.get_host_and_port()
            self.endpoint_url = f"http://{host}:{port}"
            # moto's state machine interpreter calls the services it integrates with (SQS
            # here) on localhost:$MOTO_PORT: point it at this server.
            os.environ["MOTO_PORT"] = str(port)
            # moto keeps its resources per process, not per server: a local cloud started
            # before in this process (a test module's) left its stack there. Start empty.
            reset = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
            urllib.request.urlopen(reset, timeout=10).close()
            # Run state machine definitions (long jobs) instead of only recording them.
            request = urllib.request.Request(
                f"{self.endpoint_url}/moto-api/config",
                data=json.dumps({"stepfunctions": {"execute_state_machine": True}}).encode(),
                method="POST",
            )
            urllib.request.urlopen(request, timeout=10).close()
        self.deployed = deploy.deploy(
            self,
            stack_name=o.stack_name,
            parameters={**LOCAL_PARAMETERS, **o.parameters},
            template_path=o.template_path,
        )
        if self._server is not None:
            self._register_state_machines()
        self._collector = runtime.Collector(
            str(o.log_path) if o.log_path else None, self.metrics.add
        )
        self._collector.start()
        self._start_functions()
        if o.state_dir is not None:
            state.restore(self, o.state_dir)
        self._register_keys()
        self._start_event_sources()
        self._start_api()
        self._started = True
        return self

    def stop(self) -> None:
        for rule in self.rules:
            rule.stop()
        for mapping in self.mappings.values():
            mapping.stop()
        if self._http is not None:
            self._http.shutdown()
        if self._listening is not None:
            self._listening.server_close()
        # Every function is asked to stop first, so their grace periods run side by side.
        for host in self.hosts.values():
            host.request_stop()
        deadline = time.monotonic() + runtime.STOP_GRACE_SECONDS
        for host in self.hosts.values():
            host.stop(deadline)
        collector = getattr(self, "_collector", None)  # none when the deploy failed
        if collector is not None:
            collector.close()
        # Exported last, once nothing runs any more, so no outcome lands after the export;
        # never from a start that failed (a half-restored state would replace the saved one).
        if self.options.state_dir is not None and self._started:
            state.save(self, self.options.state_dir)
        if self._server is not None:
            self._server.stop()
        self._emulating.close()

    def __enter__(self) -> LocalCloud:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- clients -------------------------------------------------------------------------------

    def client(self, service: str) -> Any:
        return boto3.session.Session(
            aws_access_key_id="local", aws_secret_access_key="local", region_name=REGION
        ).client(service, endpoint_url=self.endpoint_url)  # type: ignore[call-overload]

    # --- functions, event sources, API ----------------------------------------------------------

    def _start_functions(self) -> None:
        assert self.deployed is not None
        lambdas = self.client("lambda")
        started_by = self._schedule_rules_by_function()
        for logical, name in self.deployed.of_type("AWS::Lambda::Function").items():
            config = lambdas.get_function_configuration(FunctionName=name)
            variables = config.get("Environment", {}).get("Variables", {})
            environment = {
                **{str(k): str(v) for k, v in variables.items()},
                **FAKE_CREDENTIALS,
                "AWS_ENDPOINT_URL": self.endpoint_url,
                "AWS_REGION": REGION,
                "AWS_DEFAULT_REGION": REGION,
                "AWS_LAMBDA_FUNCTION_NAME": name,
                "AWS_LAMBDA_FUNCTION_TIMEOUT": str(config.get("Timeout", 3)),
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(config.get("MemorySize", 128)),
                "LONG_JOB_HEARTBEAT_SECONDS": str(self.options.long_job_heartbeat_seconds),
                # No X-Ray daemon here: Powertools' tracer stays off, and every fire's
                # trace segments are lines of the log (nothing is billed on a laptop).
                "POWERTOOLS_TRACE_DISABLED": "true",
                "TRACE_SEGMENTS": "log",
                "TRACE_SAMPLE_RATE": "1",
                **self.options.extra_environment,
            }
            spec = runtime.FunctionSpec(
                logical_id=logical,
                name=name,
                handler=config["Handler"],
                timeout_seconds=int(config.get("Timeout", 3)),
                environment=environment,
                memory_mb=int(config.get("MemorySize", 128)),
                concurrency=(
                    max(1, started_by[name])
                    if logical == "TickerFunction"
                    else self.options.function_processes
                ),
            )
            host = runtime.FunctionHost(spec, self._collector.lines)
            host.start()
            self.hosts[logical] = host

    def _schedule_rules_by_function(self) -> Counter[str]:
        """Function name -> how many of this stack's schedule rules invoke it."""
        assert self.deployed is not None
        events = self.client("events")
        counts: Counter[str] = Counter()
        for rule in self.deployed.of_type("AWS::Events::Rule").values():
            for target in events.list_targets_by_rule(Rule=rule)["Targets"]:
                counts[_function_name(target["Arn"])] += 1
        return counts

    def _register_state_machines(self) -> None:
        """moto keeps state machines created by its CloudFormation apart from the ones its
        interpreter runs: register each deployed definition again, by the same name, so
        the ARN the functions were given starts real executions."""
        from moto.stepfunctions.models import stepfunctions_backends

        assert self.deployed is not None
        sfn = self.client("stepfunctions")
        for arn in self.deployed.of_type("AWS::StepFunctions::StateMachine").values():
            account, region = arn.split(":")[4], arn.split(":")[3]
            machine = stepfunctions_backends[account][region].describe_state_machine(arn)
            sfn.create_state_machine(
                name=machine.name, definition=machine.definition, roleArn=machine.roleArn
            )

    def key_admin(self) -> keys.KeyAdmin:
        """What `fireline admin keys` does against this cloud (no API Gateway here: the
        usage identifiers are the tenants' own, and the local gateway applies the plan)."""
        assert self.deployed is not None
        return keys.KeyAdmin(
            keys=api_keys_dynamodb.DynamoApiKeyStore(
                self.client("dynamodb"), self.deployed.physical("ApiKeysTable")
            ),
            signing_keys=secretsmanager.SecretsManagerSigningKeys(
                self.client("secretsmanager"), self.deployed.outputs["SigningSecretPrefix"]
            ),
            usage=memory_keys.MemoryUsagePlans(),
            now_ms=lambda: int(time.time() * 1000),
        )

    def _register_keys(self) -> None:
        admin = self.key_admin()
        for key, tenant in self.options.api_keys.items():
            with contextlib.suppress(errors.AlreadyExists):  # restored from the state directory
                admin.create(tenant, api_key=key)
        # Keys restored from the state directory keep working; their tenants' signing keys
        # (not exported) are new ones in this emulator.
        for tenant in sorted({record.tenant_id for record in admin.list()}):
            admin.ensure_signing_ring(tenant)

    def _host_by_name(self, function: str) -> runtime.FunctionHost | None:
        """The host of one of this stack's functions (None for another stack's)."""
        name = _function_name(function)
        return next((h for h in self.hosts.values() if h.spec.name == name), None)

    def _start_event_sources(self) -> None:
        lambdas, sqs, events = self.client("lambda"), self.client("sqs"), self.client("events")
        for mapping in lambdas.list_event_source_mappings()["EventSourceMappings"]:
            host = self._host_by_name(mapping["FunctionArn"])
            if host is None:
                continue  # another stack's, in a shared emulator
            # The emulator would take the messages itself for its Lambda stub: disable it
            # there and play the mapping here, from its own configuration.
            lambdas.update_event_source_mapping(UUID=mapping["UUID"], Enabled=False)
            queue_name = mapping["EventSourceArn"].split(":")[-1]
            played = runtime.SqsMapping(
                sqs,
                host,
                queue_url=sqs.get_queue_url(QueueName=queue_name)["QueueUrl"],
                queue_arn=mapping["EventSourceArn"],
                batch_size=int(mapping.get("BatchSize") or 10),
                batching_window=float(mapping.get("MaximumBatchingWindowInSeconds") or 0),
                max_concurrency=int(mapping.get("ScalingConfig", {}).get("MaximumConcurrency", 10)),
                partial_failures="ReportBatchItemFailures"
                in mapping.get("FunctionResponseTypes", []),
            )
            played.start()
            self.mappings[queue_name] = played
        for rule in events.list_rules()["Rules"]:
            expression = rule.get("ScheduleExpression")
            if not expression:
                continue
            for target in events.list_targets_by_rule(Rule=rule["Name"])["Targets"]:
                target_host = self._host_by_name(target["Arn"])
                if target_host is None:
                    continue  # another stack's, in a shared emulator
                period = self.options.tick_period or runtime.rate_seconds(expression)
                constant = json.loads(target["Input"]) if target.get("Input") else None
                played_rule = runtime.ScheduleRule(
                    target_host, name=rule["Name"], period=period, constant_input=constant
                )
                played_rule.start()
                self.rules.append(played_rule)

    def _start_api(self) -> None:
        cache_seconds, plan = self._gateway_settings()
        gateway = runtime.ApiGateway(
            api=self.hosts["ApiFunction"],
            authorizer=self.hosts.get("AuthorizerFunction"),
            public_paths=self._public_paths(),
            cache_seconds=cache_seconds,
            usage_plan=plan,
        )
        self._http = gateway.serve_on(self._listening)
        host, port = self._http.server_address[:2]
        self.api_url = f"http://{host}:{port}"
        self.gateway = gateway

    def _public_paths(self) -> tuple[str, ...]:
        """The routes the deployed API serves without the authorizer (an operation whose
        security is empty: the index, the API description and its page, the console), as
        "METHOD /path", or "/path" for any method."""
        assert self.deployed is not None
        public = []
        for resource in self.deployed.played.values():
            if resource["Type"] == "AWS::ApiGateway::RestApi":
                paths = (resource.get("Properties", {}).get("Body") or {}).get("paths", {})
                for path, operations in paths.items():
                    for method, op in operations.items():
                        if op.get("security") == []:
                            any_method = method == "x-amazon-apigateway-any-method"
                            public.append(path if any_method else f"{method.upper()} {path}")
        return tuple(public)

    def _gateway_settings(self) -> tuple[float, runtime.UsagePlan | None]:
        """The authorizer's cache TTL and the usage plan's limits, as deployed: read from
        the API's definition and the plan the local cloud plays (the values the template's
        parameters, or a CDK app's props, gave them)."""
        assert self.deployed is not None
        deployed = self.deployed
        ttl = 300.0
        plan = None
        for resource in deployed.played.values():
            props = resource.get("Properties", {})
            if resource["Type"] == "AWS::ApiGateway::RestApi":
                schemes = (props.get("Body") or {}).get("securityDefinitions", {})
                for scheme in schemes.values():
                    found = scheme.get("x-amazon-apigateway-authorizer", {})
                    if "authorizerResultTtlInSeconds" in found:
                        ttl = float(deployed.resolved(found["authorizerResultTtlInSeconds"]))
            if resource["Type"] == "AWS::ApiGateway::UsagePlan":
                throttle = props.get("Throttle", {})
                quota = props.get("Quota", {})
                if "Fn::If" in quota:  # HasDailyQuota: the quota's value decides it
                    quota = quota["Fn::If"][1]
                limit = int(deployed.resolved(quota.get("Limit", 0)) or 0)
                plan = runtime.UsagePlan(
                    rate=float(deployed.resolved(throttle["RateLimit"])),
                    burst=int(deployed.resolved(throttle["BurstLimit"])),
                    daily_quota=limit or None,
                )
        return ttl, plan

    # --- what the status screen shows ----------------------------------------------------------

    def status(self) -> dict[str, Any]:
        assert self.deployed is not None
        sqs = self.client("sqs")
        classes: dict[str, dict[str, int]] = {}
        for job_class in ("default", "short", "long"):
            logical = f"{job_class.capitalize()}Queue"
            attributes = sqs.get_queue_attributes(
                QueueUrl=self.deployed.physical(logical),
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                ],
            )["Attributes"]
            classes[job_class] = {
                "backlog": int(attributes["ApproximateNumberOfMessages"]),
                "in_flight": int(attributes["ApproximateNumberOfMessagesNotVisible"]),
            }
        counts: dict[str, int] = defaultdict(int)
        ddb = self.client("dynamodb")
        paginator = ddb.get_paginator("scan")
        for page in paginator.paginate(
            TableName=self.deployed.physical("OccurrencesTable"),
            ProjectionExpression="#s",
            ExpressionAttributeNames={"#s": "state"},
        ):
            for item in page["Items"]:
                counts[item["state"]["S"]] += 1
        # Each ticker group's lease: the holders of those held now, or None.
        ticker = self.hosts.get("TickerFunction")
        groups = int(ticker.spec.environment.get("TICKER_GROUPS", "1")) if ticker else 1
        holders = []
        for group in range(groups):
            name = lease_rules.ticker_lease_name(group, groups)
            lease = ddb.get_item(
                TableName=self.deployed.physical("LeasesTable"), Key={"name": {"S": name}}
            ).get("Item")
            if lease and int(lease["expires_at_ms"]["N"]) > time.time() * 1000:
                holders.append(f"{lease['owner']['S'][:8]} (token {lease['token']['N']})")
        holder = ", ".join(holders) or None
        return {
            "classes": classes,
            "occurrences": dict(counts),
            # The lateness users feel: a fire's first start in a worker, and its message's
            # send by the ticker (0 when sent ahead), each less the fire time.
            "lags_ms": {
                name: (self.metrics.percentile(name, 50), self.metrics.percentile(name, 99))
                for name in ("StartLag", "EnqueueLag")
            },
            "lease": holder,
            "api_requests": self.gateway.requests,
        }


def _function_name(function: str) -> str:
    """A function's name from its name or ARN (qualified or not)."""
    return function.split(":function:")[-1].split(":")[0]
