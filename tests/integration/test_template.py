"""The SAM template: lint-clean, translatable offline, and holding what the code reads.

The template is linted as written (SAM) and again after the SAM transform, which runs here
offline the way `sam deploy` runs it in CloudFormation: the local cloud and a real deploy
see the same translated resources that these tests pin.
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from cfnlint import api as cfnlint_api
from cfnlint.decode import decode_str
from packaging.requirements import Requirement
from samtranslator.translator.transform import transform

from fireline.adapters import slots_dynamodb
from fireline.domain import model
from fireline.local import runtime
from fireline.services import dispatch, ticker, worker

ROOT = Path(__file__).parents[2]
TEMPLATE = ROOT / "infra" / "template.yaml"
# What `sam package` puts in place of the local CodeUri before the transform runs.
PACKAGED_CODE_URI = "s3://fireline-artifacts/functions.zip"
LONG_JOB_DEFINITION = ROOT / "statemachines" / "long_job.asl.json"
# The state machine definition's ${Name} placeholders and what CloudFormation puts there.
DEFINITION_SUBSTITUTIONS = {
    "LongTaskQueueUrl": {"Ref": "LongTaskQueue"},
    "OutcomeQueueUrl": {"Ref": "LongQueue"},
}

HANDLERS = {
    "ApiFunction": "fireline.handlers.api.handler",
    "AuthorizerFunction": "fireline.handlers.authorizer.handler",
    "TickerFunction": "fireline.handlers.ticker.handler",
    "DefaultWorkerFunction": "fireline.handlers.worker.handler",
    "ShortWorkerFunction": "fireline.handlers.worker.handler",
    "LongWorkerFunction": "fireline.handlers.worker.handler",
    "LongRunnerFunction": "fireline.handlers.long_runner.handler",
    "WorkflowFunction": "fireline.handlers.workflow.handler",
    "SweepFunction": "fireline.handlers.sweep.handler",
}
HANDLER_PATH = re.compile(r"fireline\.handlers\.[a-z_][a-z0-9_]*\.handler")

ENVIRONMENT = {
    "SCHEDULES_TABLE": {"Ref": "SchedulesTable"},
    "OCCURRENCES_TABLE": {"Ref": "OccurrencesTable"},
    "LEASES_TABLE": {"Ref": "LeasesTable"},
    "IDEMPOTENCY_TABLE": {"Ref": "IdempotencyTable"},
    "API_KEYS_TABLE": {"Ref": "ApiKeysTable"},
    "SLOTS_TABLE": {"Ref": "SlotsTable"},
    "QUEUE_URL_DEFAULT": {"Ref": "DefaultQueue"},
    "QUEUE_URL_SHORT": {"Ref": "ShortQueue"},
    "QUEUE_URL_LONG": {"Ref": "LongQueue"},
    "QUEUE_URL_DEFAULT_BURST": {"Ref": "DefaultBurstQueue"},
    "DEAD_LETTER_QUEUE_URL_DEFAULT": {"Ref": "DefaultDeadLetterQueue"},
    "DEAD_LETTER_QUEUE_URL_SHORT": {"Ref": "ShortDeadLetterQueue"},
    "DEAD_LETTER_QUEUE_URL_LONG": {"Ref": "LongDeadLetterQueue"},
    "DUE_SHARDS": {"Ref": "DueShards"},
    "TICKER_GROUPS": {"Ref": "TickerGroups"},
    "LOOKAHEAD_SECONDS": {"Ref": "LookaheadSeconds"},
    "BURST_LEAD_SECONDS": {"Ref": "BurstLeadSeconds"},
    "HORIZON_SECONDS": {"Ref": "HorizonSeconds"},
    "TENANT_CONCURRENCY_LIMIT": {"Ref": "TenantConcurrencyLimit"},
    "LONG_JOB_STATE_MACHINE_ARN": {"Ref": "LongJobStateMachine"},
    "LONG_TASK_QUEUE_URL": {"Ref": "LongTaskQueue"},
    "WORKFLOWS_TABLE": {"Ref": "WorkflowsTable"},
    "DEFINITIONS_BUCKET": {"Ref": "DefinitionsBucket"},
    "WORKFLOW_QUEUE_URL": {"Ref": "WorkflowQueue"},
    "HTTP_TARGET_ALLOW_HTTP": {"Ref": "HttpTargetAllowHttp"},
    "HTTP_TARGET_ALLOW_NETWORKS": {"Ref": "HttpTargetAllowNetworks"},
    "TARGET_ALLOWLIST": {"Ref": "TargetAllowlist"},
    "TARGET_CALLER_ROLE_ARN": {"Fn::GetAtt": ["TargetCallerRole", "Arn"]},
    "TENANT_TARGET_ROLE_PATH": {"Ref": "TenantTargetRolePath"},
    "FIRELINE_STACK_NAME": {"Ref": "AWS::StackName"},
    "FIRELINE_ACCOUNT_ID": {"Ref": "AWS::AccountId"},
    "POWERTOOLS_SERVICE_NAME": "fireline",
    "POWERTOOLS_METRICS_NAMESPACE": "Fireline",
    "LOG_LEVEL": "INFO",
    "TRACE_SEGMENTS": "xray",
    "TRACE_SAMPLE_RATE": {"Ref": "TraceSampleRate"},
}

# job class -> (queue, dead-letter queue, visibility timeout = 6 x the class's worker timeout)
QUEUE_CLASSES = {
    "default": ("DefaultQueue", "DefaultDeadLetterQueue", 6 * 240),
    "short": ("ShortQueue", "ShortDeadLetterQueue", 6 * 40),
    "long": ("LongQueue", "LongDeadLetterQueue", 6 * 60),
}
# worker -> (job class, timeout in seconds, memory in MB, maximum concurrency of its event
# source mapping). The long class's worker only starts executions and records outcomes.
WORKERS = {
    "DefaultWorkerFunction": ("default", 240, 1769, 50),
    "ShortWorkerFunction": ("short", 40, 1769, 100),
    "LongWorkerFunction": ("long", 60, 256, 10),
}
# The long runner runs one attempt of a long job, handed out by the state machine.
LONG_RUNNER = "LongRunnerFunction"
# The workflow controller: its timeout (a large run's start or reconcile) and memory.
WORKFLOW_CONTROLLER = "WorkflowFunction"
WORKFLOW_TIMEOUT = 300
# The functions that run tenant targets, a workflow target among them (a run's start).
TARGET_RUNNERS = ("DefaultWorkerFunction", "ShortWorkerFunction", LONG_RUNNER)
# function -> the job class it runs (JOB_CLASS)
JOB_CLASSES = {
    **{worker: job_class for worker, (job_class, *_) in WORKERS.items()},
    LONG_RUNNER: "long",
}
# Where the tenants' webhook signing secrets live (Secrets Manager names start with it).
SIGNING_PREFIX = {"Fn::Sub": "fireline/${AWS::StackName}/signing/"}
# The API enforces the tenants' count quotas: the defaults are the template's parameters.
QUOTA_ENVIRONMENT = {
    "QUOTA_SCHEDULES": {"Ref": "TenantScheduleQuota"},
    "QUOTA_ACTIVE_JOBS": {"Ref": "TenantActiveJobQuota"},
    "QUOTA_WORKFLOWS": {"Ref": "TenantWorkflowQuota"},
    "QUOTA_WORKFLOW_VERSIONS": {"Ref": "TenantWorkflowVersionQuota"},
    "QUOTA_UPLOADS_PER_DAY": {"Ref": "TenantUploadsPerDayQuota"},
}
# Only the functions that run targets sign webhooks (they are told where the tenants'
# secrets are, never a secret); the workers run one job class each; every function
# shares the rest.
FUNCTION_ENVIRONMENT = {
    **{function: ENVIRONMENT for function in HANDLERS if function not in JOB_CLASSES},
    "ApiFunction": {**ENVIRONMENT, **QUOTA_ENVIRONMENT},
    **{
        function: {
            **ENVIRONMENT,
            "JOB_CLASS": job_class,
            **({"SIGNING_SECRET_PREFIX": SIGNING_PREFIX} if function in TARGET_RUNNERS else {}),
        }
        for function, job_class in JOB_CLASSES.items()
    },
}
# The workers count a tenant's share of their class from the class's maximum concurrency
# (tests/unit/test_class_share.py holds it to the event source mappings').
CLASS_MAX_CONCURRENCY = {
    "DefaultWorkerFunction": "50",
    "ShortWorkerFunction": "100",
    "LongWorkerFunction": "20",
}
for _worker, _concurrency in CLASS_MAX_CONCURRENCY.items():
    FUNCTION_ENVIRONMENT[_worker] = {
        **FUNCTION_ENVIRONMENT[_worker],
        "CLASS_MAX_CONCURRENCY": _concurrency,
    }
# The workers that call remote targets keep a large batch's jobs in flight at once: their
# batch size and in-flight bound are parameters (WorkerBatchSize, WorkerInFlight), their
# batching window a second; the long class's worker only starts executions, ten a batch.
BATCHED_WORKERS = ("DefaultWorkerFunction", "ShortWorkerFunction")
WORKER_BATCH_SIZE = 256
WORKER_IN_FLIGHT = 256
for _worker in BATCHED_WORKERS:
    FUNCTION_ENVIRONMENT[_worker] = {
        **FUNCTION_ENVIRONMENT[_worker],
        "WORKER_IN_FLIGHT": {"Ref": "WorkerInFlight"},
    }
# Every SQS event source mapping: function -> its properties. Each function reads one queue
# and no two share one; none reads a dead-letter queue.
EVENT_SOURCE_MAPPINGS = {
    **{
        worker: {
            "FunctionName": {"Ref": worker},
            "EventSourceArn": {"Fn::GetAtt": [QUEUE_CLASSES[job_class][0], "Arn"]},
            **(
                {
                    "BatchSize": {"Ref": "WorkerBatchSize"},
                    # As long as the ticker makes the class's fires visible early.
                    "MaximumBatchingWindowInSeconds": dispatch.BATCHING_WINDOW_SECONDS,
                }
                if worker in BATCHED_WORKERS
                else {"BatchSize": 10, "MaximumBatchingWindowInSeconds": 0}
            ),
            # Only the failed records of a batch come back, not the whole batch.
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
            "ScalingConfig": {"MaximumConcurrency": max_concurrency},
        }
        for worker, (job_class, _, _, max_concurrency) in WORKERS.items()
    },
    # One attempt per invocation: an attempt may take the whole 900 s.
    LONG_RUNNER: {
        "FunctionName": {"Ref": LONG_RUNNER},
        "EventSourceArn": {"Fn::GetAtt": ["LongTaskQueue", "Arn"]},
        "BatchSize": 1,
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "ScalingConfig": {"MaximumConcurrency": 20},
    },
    # The controller's events; only the failed records of a batch come back.
    WORKFLOW_CONTROLLER: {
        "FunctionName": {"Ref": WORKFLOW_CONTROLLER},
        "EventSourceArn": {"Fn::GetAtt": ["WorkflowQueue", "Arn"]},
        "BatchSize": 10,
        "MaximumBatchingWindowInSeconds": 0,
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "ScalingConfig": {"MaximumConcurrency": 20},
    },
}
# function -> Step Functions actions its role allows on the named state machine (or its
# executions); any function not named here has none.
STATE_MACHINE_GRANTS = {
    # A tenant's heartbeat goes to the task token; cancel stops the execution.
    "ApiFunction": {"LongJobStateMachine": {"states:SendTaskHeartbeat", "states:StopExecution"}},
    # Cancelling a workflow run stops its running long nodes' executions.
    WORKFLOW_CONTROLLER: {"LongJobStateMachine": {"states:StopExecution"}},
    "LongWorkerFunction": {"LongJobStateMachine": {"states:StartExecution"}},
    LONG_RUNNER: {
        "LongJobStateMachine": {
            "states:SendTaskSuccess",
            "states:SendTaskFailure",
            "states:SendTaskHeartbeat",
        }
    },
}
FOUR_DAYS = 4 * 24 * 3600
FOURTEEN_DAYS = 14 * 24 * 3600

ALARM_ACTIONS = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
SERVICE_DIMENSION = [{"Name": "service", "Value": "fireline"}]
DYNAMODB_WRITES = {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}


class OfflinePolicyLoader:
    """Stands in for samtranslator's ManagedPolicyLoader, which lists policies through IAM.

    Any managed policy name resolves to its AWS managed policy ARN, so the transform needs
    no AWS account or network.
    """

    class _AnyPolicy(dict[str, str]):
        def get(self, name: str, default: str | None = None) -> str:  # type: ignore[override]
            return f"arn:aws:iam::aws:policy/{name}"

    def load(self) -> dict[str, str]:
        return self._AnyPolicy()


def _lint(text: str) -> list[str]:
    # Default rule set: errors and warnings. Informational checks are not run.
    return [
        f"{match.rule.id} line {match.linenumber}: {match.message}"
        for match in cfnlint_api.lint(text, regions=["us-east-1"])
    ]


def _resources_of_type(template: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {
        name: resource
        for name, resource in template["Resources"].items()
        if resource["Type"] == type_
    }


# ${Name} or ${Name.Attribute} in an Fn::Sub string; pseudo parameters (AWS::...) excluded.
SUB_VARIABLE = re.compile(r"\$\{([A-Za-z0-9_]+)(?:\.[A-Za-z0-9.]+)?\}")


def _referenced(node: Any) -> set[str]:
    """Logical ids named by Ref, Fn::GetAtt or Fn::Sub anywhere under ``node``."""
    if isinstance(node, list):
        return set().union(*(_referenced(item) for item in node))
    if not isinstance(node, dict):
        return set()
    found: set[str] = set()
    for key, value in node.items():
        if key == "Ref" and isinstance(value, str):
            found.add(value)
        elif key == "Fn::GetAtt":
            found.add(value[0] if isinstance(value, list) else value.split(".")[0])
        elif key == "Fn::Sub":
            text, local = (value, {}) if isinstance(value, str) else value
            found |= set(SUB_VARIABLE.findall(text)) - set(local)
            found |= _referenced(local)
        else:
            found |= _referenced(value)
    return found


def _default(template: dict[str, Any], value: Any) -> Any:
    """``value``, or the default of the parameter it refers to (what a deploy that sets
    no parameter gets)."""
    if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in template["Parameters"]:
        return template["Parameters"][value["Ref"]]["Default"]
    return value


def _sizes(template: dict[str, Any], function: str) -> tuple[int, int]:
    """A function's timeout and memory, parameters at their defaults."""
    props = template["Resources"][function]["Properties"]
    return props["Timeout"], _default(template, props["MemorySize"])


def _definition_string(state_machine: dict[str, Any]) -> str:
    """The translated state machine's definition, as CloudFormation joins it."""
    separator, lines = state_machine["Properties"]["DefinitionString"]["Fn::Join"]
    return separator.join(lines)


def _statements(role: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        statement
        for policy in role["Properties"].get("Policies", [])
        for statement in policy["PolicyDocument"]["Statement"]
    ]


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else actions


def _grants(
    role: dict[str, Any], service: str, *, attributes: list[str] | None = None
) -> dict[str, set[str]]:
    """Resource logical id -> actions of ``service`` the role's inline policies allow on it.

    Statements on "*" name no resource and are left out here: see ``_wildcard_actions``.
    With ``attributes``, only the statements limited to exactly those DynamoDB attributes.
    """
    grants: dict[str, set[str]] = {}
    for statement in _statements(role):
        mine = {action for action in _actions(statement) if action.startswith(f"{service}:")}
        if not mine:
            continue
        if attributes is not None and statement.get("Condition") != {
            "ForAllValues:StringEquals": {"dynamodb:Attributes": attributes}
        }:
            continue
        for target in _referenced(statement["Resource"]):
            grants.setdefault(target, set()).update(mine)
    return grants


def _wildcard_actions(role: dict[str, Any]) -> set[str]:
    """Actions (any service) the role's inline policies allow on every resource ("*")."""
    found: set[str] = set()
    for statement in _statements(role):
        resources = statement["Resource"]
        if "*" in ([resources] if isinstance(resources, str) else resources):
            assert statement["Effect"] == "Allow", statement
            found.update(_actions(statement))
    return found


@pytest.fixture(scope="module")
def sam_template() -> dict[str, Any]:
    template, errors = decode_str(TEMPLATE.read_text())
    assert not errors, errors
    # decode_str returns its own node types (they carry line numbers); plain JSON values
    # compare and copy like any other dict.
    return json.loads(json.dumps(template))


@pytest.fixture(scope="module")
def translated(sam_template: dict[str, Any]) -> dict[str, Any]:
    packaged = copy.deepcopy(sam_template)
    packaged["Globals"]["Function"]["CodeUri"] = PACKAGED_CODE_URI
    # The transform takes a state machine definition from S3 or inline, never from a local
    # file: `sam package` uploads the file to S3; offline, the same file goes inline. Either
    # way CloudFormation receives this definition and the same DefinitionSubstitutions.
    for resource in _resources_of_type(packaged, "AWS::Serverless::StateMachine").values():
        props = resource["Properties"]
        uri = props.get("DefinitionUri")
        if isinstance(uri, str) and not uri.startswith("s3://"):
            props["Definition"] = json.loads(
                (TEMPLATE.parent / props.pop("DefinitionUri")).read_text()
            )
    with pytest.MonkeyPatch.context() as env:
        # The transform fills AWS::Region and AWS::Partition from a boto3 session.
        env.setenv("AWS_DEFAULT_REGION", "us-east-1")
        env.delenv("AWS_PROFILE", raising=False)
        return transform(packaged, {}, OfflinePolicyLoader(), None)


# ---------------------------------------------------------------- lint


def test_template_as_written_is_lint_clean() -> None:
    # GIVEN the SAM template WHEN cfn-lint checks it THEN it reports nothing
    assert _lint(TEMPLATE.read_text()) == []


def test_translated_template_is_lint_clean(translated: dict[str, Any]) -> None:
    # GIVEN the template after the SAM transform WHEN cfn-lint checks the plain
    # CloudFormation THEN it reports nothing either
    assert _lint(json.dumps(translated)) == []


def test_translated_state_machine_definition_is_lint_clean(translated: dict[str, Any]) -> None:
    # The transform emits the definition as an Fn::Join of its lines, which cfn-lint does
    # not look into. GIVEN the definition joined into the string CloudFormation receives
    # WHEN cfn-lint checks it against the States Language schema THEN it reports nothing
    resolved = copy.deepcopy(translated)
    state_machine = resolved["Resources"]["LongJobStateMachine"]
    state_machine["Properties"]["DefinitionString"] = _definition_string(state_machine)

    assert _lint(json.dumps(resolved)) == []


# ---------------------------------------------------------------- parameters and globals


def test_parameters_have_their_defaults_and_bounds(sam_template: dict[str, Any]) -> None:
    parameters = sam_template["Parameters"]

    assert set(parameters) == {
        "StageName",
        "DueShards",
        "TickerGroups",
        "LookaheadSeconds",
        "HorizonSeconds",
        "BurstLeadSeconds",
        "BurstBatchSize",
        "LagAlarmThresholdSeconds",
        "TenantConcurrencyLimit",
        "HttpTargetAllowHttp",
        "HttpTargetAllowNetworks",
        "AlarmTopicArn",
        "ApiThrottlingRateLimit",
        "ApiThrottlingBurstLimit",
        "UsagePlanRateLimit",
        "UsagePlanBurstLimit",
        "UsagePlanDailyQuota",
        "AuthorizerCacheTtlSeconds",
        "ApiMemorySize",
        "TickerMemorySize",
        "WorkerMemorySize",
        "LongRunnerMemorySize",
        "WorkflowMemorySize",
        "LogRetentionDays",
        "WorkerSubnetIds",
        "WorkerSecurityGroupIds",
        "WorkerBatchSize",
        "WorkerInFlight",
        "TargetAllowlist",
        "TargetAllowlistArns",
        "TenantTargetRolePath",
        "TenantScheduleQuota",
        "TenantActiveJobQuota",
        "TenantWorkflowQuota",
        "TenantWorkflowVersionQuota",
        "TenantUploadsPerDayQuota",
        "TraceSampleRate",
    }
    # HTTP targets: https to public addresses only unless the operator widens it.
    assert parameters["HttpTargetAllowHttp"]["Default"] == ""
    assert parameters["HttpTargetAllowNetworks"]["Default"] == ""
    assert parameters["StageName"]["Default"] == "prod"
    due_shards = parameters["DueShards"]
    assert {key: due_shards[key] for key in ("Type", "Default", "MinValue", "MaxValue")} == {
        "Type": "Number",
        "Default": 16,
        "MinValue": 1,
        "MaxValue": 64,
    }
    # Early pickups are delivered with SQS DelaySeconds, which stops at 900.
    assert [
        (parameters[name]["Default"], parameters[name]["MinValue"], parameters[name]["MaxValue"])
        for name in ("LookaheadSeconds", "HorizonSeconds")
    ] == [(300, 0, 900), (900, 0, 900)]
    # A burst's fires are visible up to a minute early, held by warm workers: no more than
    # the workers' timeouts allow (test_each_class_deadline_fits_in_the_function_...).
    lead = parameters["BurstLeadSeconds"]
    assert (lead["Type"], lead["Default"], lead["MinValue"], lead["MaxValue"]) == (
        "Number",
        90,
        0,
        120,
    )
    # One group by default; each group a rule of its own, so the count is bounded.
    groups = parameters["TickerGroups"]
    assert (groups["Default"], groups["AllowedValues"]) == ("2", [str(g) for g in range(1, 9)])
    assert parameters["LagAlarmThresholdSeconds"]["Default"] == "10"
    limit = parameters["TenantConcurrencyLimit"]
    # 0 means no limit.
    assert {key: limit[key] for key in ("Type", "Default", "MinValue", "MaxValue")} == {
        "Type": "Number",
        "Default": 25,
        "MinValue": 0,
        "MaxValue": 10000,
    }
    # Per tenant: 50 requests/s, bursts of 100, no daily quota; the authorizer's cache
    # (how long a revoked key may still work) 300 s, 0 for none.
    assert [
        tuple(parameters[name][key] for key in ("Default", "MinValue", "MaxValue"))
        for name in (
            "UsagePlanRateLimit",
            "UsagePlanBurstLimit",
            "UsagePlanDailyQuota",
            "AuthorizerCacheTtlSeconds",
        )
    ] == [(50, 1, 10000), (100, 1, 5000), (0, 0, 100000000), (300, 0, 3600)]
    assert parameters["AlarmTopicArn"]["Default"] == ""
    # Tenants' target roles live under one path (role path /fireline-target/ by default);
    # nothing is allowlisted for the workers to call as themselves by default.
    role_path = parameters["TenantTargetRolePath"]
    assert (role_path["Type"], role_path["Default"]) == ("String", "fireline-target/")
    assert re.fullmatch(role_path["AllowedPattern"], role_path["Default"])
    assert len(role_path["ConstraintDescription"]) > 20
    allowlisted = parameters["TargetAllowlistArns"]
    assert (allowlisted["Type"], allowlisted["Default"]) == ("CommaDelimitedList", "")
    assert re.fullmatch(allowlisted["AllowedPattern"], allowlisted["Default"])
    assert len(allowlisted["ConstraintDescription"]) > 20
    assert sam_template["Conditions"]["HasAlarmTopic"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]}]
    }


def test_lag_threshold_accepts_only_whole_seconds(sam_template: dict[str, Any]) -> None:
    # The alarm appends "000" to the parameter; a decimal would silently mean milliseconds.
    pattern = sam_template["Parameters"]["LagAlarmThresholdSeconds"]["AllowedPattern"]

    candidates = ["10", "1", "120", "2.5", "0", "", "-1", "10s"]

    assert [value for value in candidates if re.fullmatch(pattern, value)] == ["10", "1", "120"]


@pytest.mark.parametrize(
    ("path", "accepted"),
    [
        ("fireline-target/", True),
        ("fireline-target/acme/", True),
        ("team_a+b=c,d.e@f/", True),
        # IAM's path is /fireline-target/: the parameter is the part after the first slash.
        ("/fireline-target/", False),
        ("fireline-target", False),
        ("", False),
        ("/", False),
        ("fireline-target//", False),
        # A wildcard would widen the role ARN the target caller role may assume.
        ("*", False),
        ("*/", False),
        ("fireline-*/", False),
        ("fire line/", False),
    ],
)
def test_the_tenant_target_role_path_is_an_iam_path_without_its_leading_slash(
    sam_template: dict[str, Any], path: str, accepted: bool
) -> None:
    # GIVEN the path TargetCallerRole may assume roles under
    pattern = sam_template["Parameters"]["TenantTargetRolePath"]["AllowedPattern"]

    # THEN only a concrete path of IAM's characters ending in a slash passes
    assert (re.fullmatch(pattern, path) is not None) is accepted


@pytest.mark.parametrize(
    ("arn", "accepted"),
    [
        # the default: nothing allowlisted
        ("", True),
        ("arn:aws:lambda:eu-west-1:123456789012:function:acme-*", True),
        ("arn:aws:lambda:eu-west-1:123456789012:function:acme-report", True),
        ("arn:aws:lambda:eu-west-1:123456789012:function:acme-report:live", True),
        ("arn:aws:sqs:eu-west-1:123456789012:acme-*", True),
        ("arn:aws:sqs:us-east-1:123456789012:acme-jobs.fifo", True),
        ("arn:aws:states:eu-west-1:123456789012:stateMachine:acme-?", True),
        ("arn:aws:events:eu-west-1:123456789012:event-bus/acme-*", True),
        ("arn:aws:events:eu-west-1:123456789012:event-bus/default", True),
        ("arn:aws:sns:ap-southeast-2:123456789012:acme-alerts", True),
        ("arn:aws-cn:sqs:cn-north-1:123456789012:acme-*", True),
        ("arn:aws-us-gov:lambda:us-gov-west-1:123456789012:function:acme-*", True),
        # everything, or everything of a service
        ("*", False),
        ("arn:*", False),
        ("arn:aws:lambda:*:*:function:*", False),
        ("arn:aws:sqs:*:*:*", False),
        # a wildcard partition, region or account
        ("arn:*:sqs:eu-west-1:123456789012:acme-*", False),
        ("arn:aws:sqs:*:123456789012:acme-*", False),
        ("arn:aws:sqs:eu-west-*:123456789012:acme-*", False),
        ("arn:aws:sqs:eu-west-1:*:acme-*", False),
        ("arn:aws:sqs:eu-west-1:12345678901*:acme-*", False),
        ("arn:aws:sqs:eu-west-1::acme-*", False),
        ("arn:aws:sqs:eu-west-1:1234567890:acme-*", False),
        # every resource of an account: a wildcard with no concrete prefix
        ("arn:aws:lambda:eu-west-1:123456789012:function:*", False),
        ("arn:aws:lambda:eu-west-1:123456789012:*", False),
        ("arn:aws:sqs:eu-west-1:123456789012:*", False),
        ("arn:aws:states:eu-west-1:123456789012:stateMachine:*", False),
        ("arn:aws:events:eu-west-1:123456789012:event-bus/*", False),
        ("arn:aws:sns:eu-west-1:123456789012:?*", False),
        # a prefix that is no resource type of the service ("f*" matches every function)
        ("arn:aws:lambda:eu-west-1:123456789012:f*", False),
        ("arn:aws:states:eu-west-1:123456789012:execution:acme:*", False),
        ("arn:aws:sqs:eu-west-1:123456789012:function:acme-*", False),
        # another service's ARN: the allowlist is for the targets' calls only
        ("arn:aws:iam::123456789012:role/acme-*", False),
        ("arn:aws:dynamodb:eu-west-1:123456789012:table/acme-*", False),
        ("arn:aws:s3:::acme-*", False),
        ("arn:aws:sqs:eu-west-1:123456789012:acme-* ", False),
    ],
)
def test_target_allowlist_arns_accepts_only_concrete_arns_of_the_target_services(
    sam_template: dict[str, Any], arn: str, accepted: bool
) -> None:
    # GIVEN the pattern CloudFormation applies to each ARN of TargetAllowlistArns (the
    # resources of TargetAllowlistPolicy)
    pattern = sam_template["Parameters"]["TargetAllowlistArns"]["AllowedPattern"]

    # THEN an ARN passes only with a concrete partition, region and account, and a
    # wildcard only after a concrete prefix of a function, queue, state machine, bus or
    # topic name
    assert (re.fullmatch(pattern, arn) is not None) is accepted


def test_code_uri_points_at_the_package_from_infra(sam_template: dict[str, Any]) -> None:
    code_uri = sam_template["Globals"]["Function"]["CodeUri"]

    assert code_uri == "../functions/"
    assert (TEMPLATE.parent / code_uri / "fireline" / "__init__.py").is_file()


def test_definition_uri_points_at_the_long_job_definition_from_infra(
    sam_template: dict[str, Any],
) -> None:
    state_machines = _resources_of_type(sam_template, "AWS::Serverless::StateMachine")
    definition_uri = state_machines["LongJobStateMachine"]["Properties"]["DefinitionUri"]

    assert list(state_machines) == ["LongJobStateMachine"]
    assert definition_uri == "../statemachines/long_job.asl.json"
    assert (TEMPLATE.parent / definition_uri).resolve() == LONG_JOB_DEFINITION.resolve()


# ---------------------------------------------------------------- tables


def test_schedules_table_has_the_sparse_keys_only_due_and_held_indexes(
    translated: dict[str, Any],
) -> None:
    table = translated["Resources"]["SchedulesTable"]
    props = table["Properties"]

    assert table["Type"] == "AWS::DynamoDB::Table"
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["KeySchema"] == [
        {"AttributeName": "tenant_id", "KeyType": "HASH"},
        {"AttributeName": "schedule_id", "KeyType": "RANGE"},
    ]
    assert props["GlobalSecondaryIndexes"] == [
        {
            "IndexName": "due",
            "KeySchema": [
                {"AttributeName": "due_shard", "KeyType": "HASH"},
                {"AttributeName": "next_fire_ms", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
        },
        {
            "IndexName": "held",
            "KeySchema": [
                {"AttributeName": "held_by", "KeyType": "HASH"},
                {"AttributeName": "held_fire_ms", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
        },
    ]
    assert sorted(props["AttributeDefinitions"], key=lambda a: a["AttributeName"]) == [
        {"AttributeName": "due_shard", "AttributeType": "N"},
        {"AttributeName": "held_by", "AttributeType": "S"},
        {"AttributeName": "held_fire_ms", "AttributeType": "N"},
        {"AttributeName": "next_fire_ms", "AttributeType": "N"},
        {"AttributeName": "schedule_id", "AttributeType": "S"},
        {"AttributeName": "tenant_id", "AttributeType": "S"},
    ]
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}


def test_occurrences_table_keeps_history_per_schedule_with_only_sparse_indexes(
    translated: dict[str, Any],
) -> None:
    props = translated["Resources"]["OccurrencesTable"]["Properties"]

    assert props["KeySchema"] == [
        {"AttributeName": "schedule_id", "KeyType": "HASH"},
        {"AttributeName": "occurrence_sk", "KeyType": "RANGE"},
    ]
    # History needs no index (a Query on schedule_id, newest first). Both indexes are
    # sparse: only dead rows carry dead_tenant_id, so "dead" is written only when a job
    # runs out of attempts; only a trigger's row carries awaiting_send_*, until its send
    # is confirmed. A scheduled fire's writes touch neither.
    assert props["GlobalSecondaryIndexes"] == [
        {
            "IndexName": "dead",
            "KeySchema": [
                {"AttributeName": "dead_tenant_id", "KeyType": "HASH"},
                {"AttributeName": "occurrence_sk", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "ALL"},
        },
        {
            "IndexName": "awaiting_send",
            "KeySchema": [
                {"AttributeName": "awaiting_send_shard", "KeyType": "HASH"},
                {"AttributeName": "awaiting_send_since_ms", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["occurrence_key"]},
        },
    ]
    assert sorted(props["AttributeDefinitions"], key=lambda a: a["AttributeName"]) == [
        {"AttributeName": "awaiting_send_shard", "AttributeType": "S"},
        {"AttributeName": "awaiting_send_since_ms", "AttributeType": "N"},
        {"AttributeName": "dead_tenant_id", "AttributeType": "S"},
        {"AttributeName": "occurrence_sk", "AttributeType": "S"},
        {"AttributeName": "schedule_id", "AttributeType": "S"},
    ]
    assert "LocalSecondaryIndexes" not in props
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}


@pytest.mark.parametrize(
    ("table", "key", "ttl_attribute"),
    [
        ("LeasesTable", "name", None),
        ("IdempotencyTable", "id", "expiration"),
        ("ApiKeysTable", "key_hash", None),
    ],
)
def test_small_tables_have_their_key_and_ttl(
    translated: dict[str, Any], table: str, key: str, ttl_attribute: str | None
) -> None:
    props = translated["Resources"][table]["Properties"]

    assert props["KeySchema"] == [{"AttributeName": key, "KeyType": "HASH"}]
    assert props["AttributeDefinitions"] == [{"AttributeName": key, "AttributeType": "S"}]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["SSESpecification"] == {"SSEEnabled": True}
    expected_ttl = (
        None if ttl_attribute is None else {"AttributeName": ttl_attribute, "Enabled": True}
    )
    assert props.get("TimeToLiveSpecification") == expected_ttl


def test_slots_table_holds_expiring_slots_per_tenant(translated: dict[str, Any]) -> None:
    # One item per running job's slot (tenant_id, 0..limit-1) plus slot -1 for the
    # tenant's limit override; a slot expires by itself if its worker crashed.
    props = translated["Resources"]["SlotsTable"]["Properties"]

    assert props == {
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [
            {"AttributeName": "tenant_id", "AttributeType": "S"},
            {"AttributeName": "slot", "AttributeType": "N"},
        ],
        "KeySchema": [
            {"AttributeName": "tenant_id", "KeyType": "HASH"},
            {"AttributeName": "slot", "KeyType": "RANGE"},
        ],
        "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True},
        "SSESpecification": {"SSEEnabled": True},
    }


def test_workflows_table_holds_definitions_runs_and_nodes_with_the_sparse_state_index(
    translated: dict[str, Any],
) -> None:
    props = translated["Resources"]["WorkflowsTable"]["Properties"]

    # One table: pk = T#{tenant}#W#{workflow} | R#{run_id}; sk = v#{version} | run | N#{node}.
    assert props["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    # state_key = "{run_id}#{state}" on nodes in a rare state (failed, blocked,
    # cancelled), "active-runs" on running runs only. Keys only: a page of nodes is read
    # back by key, and a node's moves write nothing here unless its key changes.
    assert props["GlobalSecondaryIndexes"] == [
        {
            "IndexName": "by_state",
            "KeySchema": [
                {"AttributeName": "state_key", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            "Projection": {
                "ProjectionType": "KEYS_ONLY",
            },
        }
    ]
    assert sorted(props["AttributeDefinitions"], key=lambda a: a["AttributeName"]) == [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
        {"AttributeName": "state_key", "AttributeType": "S"},
    ]
    assert "LocalSecondaryIndexes" not in props
    assert "TimeToLiveSpecification" not in props
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}


def test_there_are_exactly_seven_tables_and_the_irreplaceable_ones_are_retained(
    translated: dict[str, Any],
) -> None:
    tables = _resources_of_type(translated, "AWS::DynamoDB::Table")

    assert {name: table.get("DeletionPolicy") for name, table in tables.items()} == {
        "SchedulesTable": "Retain",
        "OccurrencesTable": "Retain",
        "ApiKeysTable": "Retain",
        "WorkflowsTable": "Retain",
        "LeasesTable": "Delete",
        "IdempotencyTable": "Delete",
        "SlotsTable": "Delete",
    }
    assert all(t["UpdateReplacePolicy"] == t["DeletionPolicy"] for t in tables.values())


# ---------------------------------------------------------------- documents


def test_definitions_bucket_is_private_encrypted_retained_and_expires_uploads(
    translated: dict[str, Any],
) -> None:
    buckets = _resources_of_type(translated, "AWS::S3::Bucket")
    bucket = buckets["DefinitionsBucket"]
    props = bucket["Properties"]

    assert list(buckets) == ["DefinitionsBucket"]
    # Runs refer to their definition's version for as long as they are kept.
    assert (bucket["DeletionPolicy"], bucket["UpdateReplacePolicy"]) == ("Retain", "Retain")
    # CloudFormation names it: no fixed name to collide across stacks or accounts.
    assert "BucketName" not in props
    assert props["BucketEncryption"] == {
        "ServerSideEncryptionConfiguration": [
            {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
        ]
    }
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    # Uploads are read once, at registration; the registered document lives elsewhere
    # (definitions/...) and never expires.
    assert props["LifecycleConfiguration"] == {
        "Rules": [
            {
                "Id": "ExpireUploads",
                "Status": "Enabled",
                "Prefix": "uploads/",
                "ExpirationInDays": 1,
            },
            {
                "Id": "AbortIncompleteMultipartUploads",
                "Status": "Enabled",
                "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
            },
        ]
    }


# ---------------------------------------------------------------- queues


def test_there_are_ten_queues_a_pair_per_job_class_the_bursts_long_tasks_and_a_workflow_pair(
    translated: dict[str, Any],
) -> None:
    queues = _resources_of_type(translated, "AWS::SQS::Queue")
    class_queues = {name for pair in QUEUE_CLASSES.values() for name in pair[:2]}

    assert set(queues) == class_queues | {
        "DefaultBurstQueue",
        "LongTaskQueue",
        "WorkflowQueue",
        "WorkflowDeadLetterQueue",
    }


def test_the_default_class_bursts_have_a_queue_and_a_mapping_of_their_own(
    translated: dict[str, Any],
) -> None:
    # GIVEN the queue the ticker sends a burst's default-class fires to
    resources = translated["Resources"]
    burst = resources["DefaultBurstQueue"]["Properties"]
    # THEN it keeps them as the class's queue does, its failures among the class's dead
    # letters
    assert burst == {
        **resources["DefaultQueue"]["Properties"],
        "RedrivePolicy": {
            "deadLetterTargetArn": {"Fn::GetAtt": ["DefaultDeadLetterQueue", "Arn"]},
            "maxReceiveCount": 5,
        },
    }
    # AND the default worker takes it by a mapping of its own: batches of BurstBatchSize
    # gathered for a second, failures reported per record, up to 500 invocations
    mappings = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping"
        and r["Properties"]["EventSourceArn"] == {"Fn::GetAtt": ["DefaultBurstQueue", "Arn"]}
    ]
    assert [
        (
            m["FunctionName"],
            m["BatchSize"],
            m["MaximumBatchingWindowInSeconds"],
            m["FunctionResponseTypes"],
            m["ScalingConfig"],
        )
        for m in mappings
    ] == [
        (
            {"Ref": "DefaultWorkerFunction"},
            {"Ref": "BurstBatchSize"},
            1,
            ["ReportBatchItemFailures"],
            {"MaximumConcurrency": 500},
        )
    ]
    # AND only the ticker sends to it
    senders = {
        name
        for name, r in resources.items()
        if r["Type"] == "AWS::IAM::Role"
        and "DefaultBurstQueue" in json.dumps(r["Properties"].get("Policies", []))
    }
    assert senders == {"TickerFunctionRole"}


def test_workflow_queue_redrives_to_its_own_dead_letter_queue_after_five_receives(
    translated: dict[str, Any],
) -> None:
    queue = translated["Resources"]["WorkflowQueue"]
    dlq = translated["Resources"]["WorkflowDeadLetterQueue"]

    assert queue["Properties"] == {
        "VisibilityTimeout": 6 * WORKFLOW_TIMEOUT,
        "MessageRetentionPeriod": FOUR_DAYS,
        "SqsManagedSseEnabled": True,
        "RedrivePolicy": {
            "deadLetterTargetArn": {"Fn::GetAtt": ["WorkflowDeadLetterQueue", "Arn"]},
            "maxReceiveCount": 5,
        },
    }
    assert dlq["Properties"] == {
        "MessageRetentionPeriod": FOURTEEN_DAYS,
        "SqsManagedSseEnabled": True,
    }
    assert {(q["DeletionPolicy"], q["UpdateReplacePolicy"]) for q in (queue, dlq)} == {
        ("Delete", "Delete")
    }


@pytest.mark.parametrize("job_class", sorted(QUEUE_CLASSES))
def test_each_class_queue_redrives_to_its_own_dead_letter_queue(
    translated: dict[str, Any], job_class: str
) -> None:
    queue_name, dlq_name, visibility = QUEUE_CLASSES[job_class]
    queue = translated["Resources"][queue_name]["Properties"]
    dlq = translated["Resources"][dlq_name]["Properties"]

    assert queue == {
        "VisibilityTimeout": visibility,
        "MessageRetentionPeriod": FOUR_DAYS,
        "SqsManagedSseEnabled": True,
        "RedrivePolicy": {
            "deadLetterTargetArn": {"Fn::GetAtt": [dlq_name, "Arn"]},
            "maxReceiveCount": 5,
        },
    }
    assert dlq == {"MessageRetentionPeriod": FOURTEEN_DAYS, "SqsManagedSseEnabled": True}


def test_long_task_queue_hides_a_task_for_six_runner_timeouts_and_has_no_redrive(
    translated: dict[str, Any],
) -> None:
    # The state machine owns an attempt's retries (missed heartbeat, deadline): the task
    # queue has no dead-letter queue of its own.
    queue = translated["Resources"]["LongTaskQueue"]

    assert queue["Properties"] == {
        "VisibilityTimeout": 6 * 900,
        "MessageRetentionPeriod": FOUR_DAYS,
        "SqsManagedSseEnabled": True,
    }
    assert (queue["DeletionPolicy"], queue["UpdateReplacePolicy"]) == ("Delete", "Delete")


# ---------------------------------------------------------------- functions


def test_every_function_handler_is_a_module_under_fireline_handlers(
    translated: dict[str, Any],
) -> None:
    functions = _resources_of_type(translated, "AWS::Lambda::Function")
    handlers = {name: fn["Properties"]["Handler"] for name, fn in functions.items()}

    assert handlers == HANDLERS
    assert [h for h in handlers.values() if not HANDLER_PATH.fullmatch(h)] == []


@pytest.mark.parametrize("function", sorted(HANDLERS))
def test_every_function_gets_the_shared_runtime_and_environment(
    translated: dict[str, Any], function: str
) -> None:
    props = translated["Resources"][function]["Properties"]

    assert props["Environment"] == {"Variables": FUNCTION_ENVIRONMENT[function]}
    assert props["Runtime"] == "python3.11"
    assert props["Architectures"] == ["arm64"]
    assert props["TracingConfig"] == {"Mode": "Active"}
    assert props["Code"] == {"S3Bucket": "fireline-artifacts", "S3Key": "functions.zip"}
    assert props["LoggingConfig"] == {"LogGroup": {"Ref": "FunctionLogGroup"}}


@pytest.mark.parametrize("name", ["FunctionLogGroup", "ApiAccessLogGroup"])
def test_logs_expire_after_the_retention_parameter(translated: dict[str, Any], name: str) -> None:
    # GIVEN the log group every function writes to, and the API's access log
    assert set(_resources_of_type(translated, "AWS::Logs::LogGroup")) == {
        "FunctionLogGroup",
        "ApiAccessLogGroup",
    }
    group = translated["Resources"][name]
    retention = translated["Parameters"]["LogRetentionDays"]

    # THEN its retention is the parameter (30 days unless set), one CloudWatch accepts
    assert group["Properties"] == {"RetentionInDays": {"Ref": "LogRetentionDays"}}
    assert retention["Default"] == 30 and retention["Default"] in retention["AllowedValues"]
    # AND like the run history it outlives the stack, expiring by its retention
    assert (group["DeletionPolicy"], group["UpdateReplacePolicy"]) == ("Retain", "Retain")


def test_the_api_stage_writes_a_json_access_log_line_per_request(
    translated: dict[str, Any],
) -> None:
    # GIVEN the API's stage
    (stage,) = _resources_of_type(translated, "AWS::ApiGateway::Stage").values()
    setting = stage["Properties"]["AccessLogSetting"]
    line = json.loads(setting["Format"])

    # THEN it logs to the access log group, one JSON object per request naming the
    # request, the tenant the authorizer found, the answer and how long it took
    assert setting["DestinationArn"] == {"Fn::GetAtt": ["ApiAccessLogGroup", "Arn"]}
    assert line["requestId"] == "$context.requestId"
    assert line["tenant"] == "$context.authorizer.tenant_id"
    assert line["status"] == "$context.status"
    assert line["latency"] == "$context.responseLatency"
    # AND the account's API Gateway logging role is set before the API is made
    account = translated["Resources"]["ApiGatewayAccount"]
    assert account["Properties"]["CloudWatchRoleArn"] == {
        "Fn::GetAtt": ["ApiGatewayLoggingRole", "Arn"]
    }
    assert "ApiGatewayAccount" in translated["Resources"]["FirelineApi"]["DependsOn"]


def test_retained_tables_are_protected_from_deletion(translated: dict[str, Any]) -> None:
    tables = _resources_of_type(translated, "AWS::DynamoDB::Table")
    retained = {name for name, table in tables.items() if table["DeletionPolicy"] == "Retain"}
    protected = {
        name
        for name, table in tables.items()
        if table["Properties"].get("DeletionProtectionEnabled") is True
    }

    # GIVEN the tables holding what cannot be rebuilt (kept when the stack goes)
    assert retained == {"SchedulesTable", "OccurrencesTable", "ApiKeysTable", "WorkflowsTable"}
    # THEN each refuses a DeleteTable until someone turns protection off; the
    # short-lived ones are not protected (they go with the stack)
    assert protected == retained


def _assume_grants(resources: dict[str, Any], role: str) -> dict[str, str]:
    """Role logical id -> where it is allowed sts:AssumeRole on ``role``: "inline" (its
    own Policies) or the logical id of the AWS::IAM::Policy attached to it."""
    found: dict[str, str] = {}
    for name, resource in resources.items():
        if resource["Type"] == "AWS::IAM::Role" and role in _grants(resource, "sts"):
            found[name] = "inline"
        if resource["Type"] == "AWS::IAM::Policy":
            document = resource["Properties"]["PolicyDocument"]
            if role in _grants({"Properties": {"Policies": [{"PolicyDocument": document}]}}, "sts"):
                found.update({r["Ref"]: name for r in resource["Properties"]["Roles"]})
    return found


def test_tenant_targets_are_called_through_the_target_caller_role_only(
    translated: dict[str, Any],
) -> None:
    resources = translated["Resources"]
    caller = resources["TargetCallerRole"]["Properties"]
    (trust,) = caller["AssumeRolePolicyDocument"]["Statement"]
    (grant,) = [s for p in caller["Policies"] for s in p["PolicyDocument"]["Statement"]]
    runner_roles = {f"{function}Role" for function in TARGET_RUNNERS}

    # GIVEN the role tenants' target roles trust: it trusts the roles of the functions
    # that call targets by their ARNs, not the account (where any role granted
    # sts:AssumeRole on it could assume it)
    assert (trust["Effect"], trust["Action"]) == ("Allow", "sts:AssumeRole")
    assert set(trust["Principal"]) == {"AWS"}
    assert sorted(trust["Principal"]["AWS"], key=json.dumps) == sorted(
        ({"Fn::GetAtt": [role, "Arn"]} for role in runner_roles), key=json.dumps
    )
    # AND it may do nothing but assume roles under the tenants' path, in any account (a
    # tenant's role is in the tenant's own)
    assert (grant["Effect"], grant["Action"], grant["Resource"]) == (
        "Allow",
        "sts:AssumeRole",
        {"Fn::Sub": "arn:${AWS::Partition}:iam::*:role/${TenantTargetRolePath}*"},
    )
    # THEN exactly those roles may assume it, through one policy of their own: a grant in
    # their inline policies would name TargetCallerRole, which names them (a cycle)
    assumers = _assume_grants(resources, "TargetCallerRole")
    assert set(assumers) == runner_roles
    (policy,) = set(assumers.values())
    assert policy != "inline" and resources[policy].get("Condition") is None
    assert resources[policy]["Properties"]["PolicyDocument"]["Statement"] == [
        {
            "Effect": "Allow",
            "Action": "sts:AssumeRole",
            "Resource": {"Fn::GetAtt": ["TargetCallerRole", "Arn"]},
        }
    ]
    # AND none of them may invoke a function or send to a queue as itself unless the
    # operator allowlists ARNs: a policy that exists only then, on those ARNs alone
    calls = ["lambda:InvokeFunction", "sqs:SendMessage", "states:StartExecution"]
    calls += ["events:PutEvents", "sns:Publish"]
    for function in TARGET_RUNNERS:
        role = resources[f"{function}Role"]
        actions = {a for s in _statements(role) for a in _actions(s)}
        assert (set(calls) - {"states:StartExecution"}) & actions == set()
        # (a long job's own state machine is started by Fireline, never a tenant's)
        started = {r for r, a in _grants(role, "states").items() if "states:StartExecution" in a}
        assert started <= {"LongJobStateMachine"}, (function, started)
    allowlisted = resources["TargetAllowlistPolicy"]
    assert allowlisted["Condition"] == "HasTargetAllowlistArns"
    assert allowlisted["Properties"]["PolicyDocument"]["Statement"] == [
        {"Effect": "Allow", "Action": calls, "Resource": {"Ref": "TargetAllowlistArns"}}
    ]
    assert {r["Ref"] for r in allowlisted["Properties"]["Roles"]} == runner_roles


@pytest.mark.parametrize("function", sorted(HANDLERS))
def test_only_the_target_runners_join_the_worker_vpc_when_subnets_are_given(
    translated: dict[str, Any], function: str
) -> None:
    # HTTP targets may live inside a VPC; only the functions that call targets join it,
    # and only when WorkerSubnetIds is not empty.
    props = translated["Resources"][function]["Properties"]
    joins = {
        "Fn::If": [
            "HasWorkerVpc",
            {
                "SubnetIds": {"Ref": "WorkerSubnetIds"},
                "SecurityGroupIds": {"Ref": "WorkerSecurityGroupIds"},
            },
            {"Ref": "AWS::NoValue"},
        ]
    }

    assert props.get("VpcConfig") == (joins if function in TARGET_RUNNERS else None)
    assert translated["Conditions"]["HasWorkerVpc"] == {
        "Fn::Not": [{"Fn::Equals": [{"Fn::Join": ["", {"Ref": "WorkerSubnetIds"}]}, ""]}]
    }
    assert translated["Parameters"]["WorkerSubnetIds"]["Default"] == ""


def test_ticker_runs_under_a_minute_on_a_full_vcpu_with_two_slots_per_group(
    translated: dict[str, Any], sam_template: dict[str, Any]
) -> None:
    props = translated["Resources"]["TickerFunction"]["Properties"]

    assert _sizes(translated, "TickerFunction") == (60, 1769)
    assert props["MemorySize"] == {"Ref": "TickerMemorySize"}
    assert props["ReservedConcurrentExecutions"] == {
        "Fn::FindInMap": ["TickerConcurrency", {"Ref": "TickerGroups"}, "Reserved"]
    }
    reserved = sam_template["Mappings"]["TickerConcurrency"]
    assert {int(k): v["Reserved"] for k, v in reserved.items()} == {k: 2 * k for k in range(1, 9)}


def test_other_functions_keep_the_global_sizes(translated: dict[str, Any]) -> None:
    api = translated["Resources"]["ApiFunction"]["Properties"]
    authorizer = translated["Resources"]["AuthorizerFunction"]["Properties"]

    assert _sizes(translated, "ApiFunction") == (30, 256)
    assert api["MemorySize"] == {"Ref": "ApiMemorySize"}
    assert "ReservedConcurrentExecutions" not in api
    assert (authorizer["Timeout"], authorizer["MemorySize"]) == (10, 256)


def test_a_rule_per_ticker_group_the_workflow_reconcile_and_the_sweep_every_minute(
    translated: dict[str, Any],
) -> None:
    rules = _resources_of_type(translated, "AWS::Events::Rule")
    # rule -> (function it invokes, the constant input it sends)
    targets = {
        name: (_referenced(target["Arn"]).pop(), target.get("Input"))
        for name, rule in rules.items()
        for target in rule["Properties"]["Targets"]
    }

    every = {name: r["Properties"]["ScheduleExpression"] for name, r in rules.items()}
    sweep = {name for name, (function, _) in targets.items() if function == "SweepFunction"}
    assert len(sweep) == 1
    assert set(every.values()) == {"rate(1 minute)"}
    assert all(len(r["Properties"]["Targets"]) == 1 for r in rules.values())
    ticker_inputs = sorted(
        (json.loads(given) for function, given in targets.values() if function == "TickerFunction"),
        key=lambda i: i["group"],
    )
    assert ticker_inputs == [{"group": g} for g in range(8)]
    assert {function for function, _ in targets.values()} == {
        "TickerFunction",
        WORKFLOW_CONTROLLER,
        "SweepFunction",
    }
    # Group g's rule and permission exist only when TickerGroups > g (group 0 always).
    conditions = {name: rule.get("Condition") for name, rule in rules.items() if targets[name][1]}
    assert sorted(c for c in conditions.values() if c) == [
        f"HasTickerGroup{g}" for g in range(1, 8)
    ]
    permissions = {
        name: p
        for name, p in _resources_of_type(translated, "AWS::Lambda::Permission").items()
        if p["Properties"]["Principal"] == "events.amazonaws.com"
    }
    # Each rule may invoke its own function and nothing else.
    by_rule = {p["Properties"]["SourceArn"]["Fn::GetAtt"][0]: p for p in permissions.values()}
    assert set(by_rule) == set(rules)
    for rule_name, permission in by_rule.items():
        assert permission["Properties"]["FunctionName"] == {"Ref": targets[rule_name][0]}
        assert permission["Properties"]["Action"] == "lambda:InvokeFunction"
        assert permission.get("Condition") == rules[rule_name].get("Condition")


# ---------------------------------------------------------------- workers


@pytest.mark.parametrize("worker", sorted(WORKERS))
def test_each_worker_has_its_class_timeout_and_no_reserved_concurrency(
    translated: dict[str, Any], worker: str
) -> None:
    _, timeout, memory, _ = WORKERS[worker]
    props = translated["Resources"][worker]["Properties"]

    assert _sizes(translated, worker) == (timeout, memory)
    # Concurrency is capped per class by the event source mapping, not reserved.
    assert "ReservedConcurrentExecutions" not in props


@pytest.mark.parametrize("function", ["DefaultWorkerFunction", "ShortWorkerFunction", LONG_RUNNER])
def test_each_class_deadline_fits_in_the_function_that_runs_its_attempts(
    translated: dict[str, Any], function: str
) -> None:
    # The longest deadline a class accepts (and its default) plus the time to claim, stop
    # the job and record its outcome must fit in the function's timeout, or Lambda would
    # kill every attempt before its deadline; for a class whose bursts the ticker makes
    # visible early, after the longest hold of a burst's fire too (BurstLeadSeconds at its
    # most, and the clocks' margin), and with the dispatcher's reserve to spare.
    job_class = JOB_CLASSES[function]
    timeout = translated["Resources"][function]["Properties"]["Timeout"]
    lead = translated["Parameters"]["BurstLeadSeconds"]["MaxValue"]
    hold = worker.early_hold_for(job_class, lead)
    assert model.DEADLINES[job_class] + worker.STOP_MARGIN_SECONDS + hold < timeout
    assert lead <= ticker.MAX_BURST_LEAD_SECONDS


def test_workflow_controller_has_time_for_a_large_run_and_no_reserved_concurrency(
    translated: dict[str, Any],
) -> None:
    props = translated["Resources"][WORKFLOW_CONTROLLER]["Properties"]

    assert _sizes(translated, WORKFLOW_CONTROLLER) == (WORKFLOW_TIMEOUT, 1024)
    assert props["MemorySize"] == {"Ref": "WorkflowMemorySize"}
    # Concurrency is capped by its event source mapping.
    assert "ReservedConcurrentExecutions" not in props


def test_long_runner_may_take_lambdas_whole_limit_with_no_reserved_concurrency(
    translated: dict[str, Any],
) -> None:
    props = translated["Resources"][LONG_RUNNER]["Properties"]

    assert _sizes(translated, LONG_RUNNER) == (900, 1024)
    assert props["MemorySize"] == {"Ref": "LongRunnerMemorySize"}
    assert "ReservedConcurrentExecutions" not in props


def test_each_queue_reader_is_fed_by_exactly_one_mapping_on_its_own_queue(
    translated: dict[str, Any],
) -> None:
    everything = _resources_of_type(translated, "AWS::Lambda::EventSourceMapping")
    queues = [_referenced(m["Properties"]["EventSourceArn"]).pop() for m in everything.values()]
    # (the default worker's second mapping, on the bursts' queue: see
    # test_the_default_class_bursts_have_a_queue_and_a_mapping_of_their_own)
    mappings = {name: m for name, m in everything.items() if not _on_burst_queue(m)}
    by_function = {
        _referenced(m["Properties"]["FunctionName"]).pop(): m["Properties"]
        for m in mappings.values()
    }

    # One mapping per worker, one for the long runner and one for the workflow controller.
    assert len(mappings) == len(EVENT_SOURCE_MAPPINGS) == 5
    assert len(everything) == 6
    assert by_function == EVENT_SOURCE_MAPPINGS
    # No two share a queue.
    assert len(set(queues)) == len(queues)


def test_the_workers_batch_and_in_flight_defaults_start_a_whole_batch_at_once(
    translated: dict[str, Any],
) -> None:
    # GIVEN the template's worker dispatch parameters
    parameters = translated["Parameters"]
    bounds = {
        name: tuple(parameters[name][key] for key in ("Type", "Default", "MinValue", "MaxValue"))
        for name in ("WorkerBatchSize", "WorkerInFlight")
    }
    # THEN a batch is as large as SQS allows for a standard queue at most, and by default
    # no larger than what one invocation keeps in flight: every record of a default batch
    # starts at once
    assert bounds == {
        "WorkerBatchSize": ("Number", WORKER_BATCH_SIZE, 1, 10_000),
        "WorkerInFlight": ("Number", WORKER_IN_FLIGHT, 1, 10_000),
    }
    assert WORKER_BATCH_SIZE <= WORKER_IN_FLIGHT
    # AND a batch larger than ten has the batching window SQS requires for it
    for function in BATCHED_WORKERS:
        mapping = _mapping_of(translated, function)
        assert _default(translated, mapping["BatchSize"]) == WORKER_BATCH_SIZE
        assert mapping["MaximumBatchingWindowInSeconds"] >= 1


def _on_burst_queue(resource: dict[str, Any]) -> bool:
    arn = resource["Properties"]["EventSourceArn"]
    return bool(arn == {"Fn::GetAtt": ["DefaultBurstQueue", "Arn"]})


def _mapping_of(template: dict[str, Any], function: str) -> dict[str, Any]:
    """The function's mapping on its class's own queue (not the bursts')."""
    [mapping] = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping"
        and r["Properties"]["FunctionName"] == {"Ref": function}
        and not _on_burst_queue(r)
    ]
    return mapping  # type: ignore[no-any-return]


@pytest.mark.parametrize("function", sorted(EVENT_SOURCE_MAPPINGS))
def test_each_queue_hides_a_message_for_six_timeouts_of_its_reader(
    translated: dict[str, Any], function: str
) -> None:
    # AWS's guidance for SQS event sources: visibility at least 6x the function timeout, so
    # a message being worked on (or retried by the poller) never reappears mid-run.
    queue_name = _referenced(EVENT_SOURCE_MAPPINGS[function]["EventSourceArn"]).pop()
    queue = translated["Resources"][queue_name]["Properties"]
    timeout = translated["Resources"][function]["Properties"]["Timeout"]

    assert queue["VisibilityTimeout"] >= 6 * timeout


# ---------------------------------------------------------------- long jobs


def test_long_job_state_machine_is_standard_and_substitutes_its_queue_urls(
    translated: dict[str, Any],
) -> None:
    state_machines = _resources_of_type(translated, "AWS::StepFunctions::StateMachine")
    props = state_machines["LongJobStateMachine"]["Properties"]

    assert list(state_machines) == ["LongJobStateMachine"]
    assert set(props) == {
        "DefinitionString",
        "DefinitionSubstitutions",
        "RoleArn",
        "StateMachineType",
        "Tags",
    }
    # Express workflows run for 5 minutes at most and cannot wait for a task token.
    assert props["StateMachineType"] == "STANDARD"
    assert props["RoleArn"] == {"Fn::GetAtt": ["LongJobStateMachineRole", "Arn"]}
    assert props["DefinitionSubstitutions"] == DEFINITION_SUBSTITUTIONS
    # What deploys is the definition file as it stands.
    assert json.loads(_definition_string(state_machines["LongJobStateMachine"])) == json.loads(
        LONG_JOB_DEFINITION.read_text()
    )


def test_long_job_definition_hands_each_attempt_out_with_a_task_token() -> None:
    text = LONG_JOB_DEFINITION.read_text()
    states = json.loads(text)["States"]
    run = states["Run"]

    # Every placeholder is one the template substitutes, and every substitution is used.
    assert set(re.findall(r"\$\{([^}]*)\}", text)) == set(DEFINITION_SUBSTITUTIONS)
    assert (run["Type"], run["Resource"]) == (
        "Task",
        "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
    )
    assert run["Parameters"]["MessageBody"]["task_token.$"] == "$$.Task.Token"
    # The heartbeat interval and the deadline come from each execution's input.
    assert (run["HeartbeatSecondsPath"], run["TimeoutSecondsPath"]) == (
        "$.heartbeat_seconds",
        "$.deadline_seconds",
    )
    assert {"HeartbeatSeconds", "TimeoutSeconds"} & set(run) == set()
    # Attempts go to the task queue; outcomes go back to the long class's queue.
    assert {
        name: state["Parameters"]["QueueUrl"]
        for name, state in states.items()
        if state.get("Resource", "").startswith("arn:aws:states:::sqs:sendMessage")
    } == {
        "Run": "${LongTaskQueueUrl}",
        "Dead": "${OutcomeQueueUrl}",
        "Succeeded": "${OutcomeQueueUrl}",
    }


# ---------------------------------------------------------------- API


def test_api_is_a_rest_api_with_a_traced_throttled_stage(translated: dict[str, Any]) -> None:
    assert list(_resources_of_type(translated, "AWS::ApiGateway::RestApi")) == ["FirelineApi"]
    (stage,) = _resources_of_type(translated, "AWS::ApiGateway::Stage").values()
    props = stage["Properties"]

    assert props["StageName"] == {"Ref": "StageName"}
    assert props["TracingEnabled"] is True
    assert [
        (
            s["ResourcePath"],
            s["HttpMethod"],
            _default(translated, s["ThrottlingRateLimit"]),
            _default(translated, s["ThrottlingBurstLimit"]),
        )
        for s in props["MethodSettings"]
    ] == [("/*", "*", 500, 1000)]


def test_every_route_but_the_api_description_and_the_console_needs_the_key_authorizer(
    translated: dict[str, Any],
) -> None:
    body = translated["Resources"]["FirelineApi"]["Properties"]["Body"]
    security = {
        (path, method): operation.get("security")
        for path, operations in body["paths"].items()
        for method, operation in operations.items()
    }

    assert security == {
        # the authorizer, and the usage plan's key (the authorizer's usageIdentifierKey)
        ("/{proxy+}", "x-amazon-apigateway-any-method"): [
            {"ApiKeyAuthorizer": []},
            {"api_key": []},
        ],
        ("/", "x-amazon-apigateway-any-method"): [{"ApiKeyAuthorizer": []}, {"api_key": []}],
        # the root's index of links, for a browser or client without a key yet
        ("/", "get"): [],
        ("/openapi.json", "get"): [],
        ("/docs", "get"): [],
        # the console's page and static assets: the page asks for the key itself
        ("/console", "get"): [],
        ("/console/{asset}", "get"): [],
        # and the icon browsers ask the origin for
        ("/favicon.ico", "get"): [],
    }
    # the local cloud's gateway lets the same routes through without a key
    public = {
        f"{method.upper()} {path}" for (path, method), scheme in security.items() if scheme == []
    }
    gateway = runtime.ApiGateway.__dataclass_fields__["public_paths"].default
    assert set(gateway) == public
    integrations = {
        _referenced(operation["x-amazon-apigateway-integration"]["uri"]).pop()
        for operations in body["paths"].values()
        for operation in operations.values()
    }
    assert integrations == {"ApiFunction"}


def test_authorizer_is_a_request_authorizer_on_the_api_key_header(
    translated: dict[str, Any],
) -> None:
    definitions = translated["Resources"]["FirelineApi"]["Properties"]["Body"][
        "securityDefinitions"
    ]
    authorizer = definitions["ApiKeyAuthorizer"]["x-amazon-apigateway-authorizer"]

    assert list(definitions) == ["ApiKeyAuthorizer", "api_key"]
    assert authorizer["type"] == "request"
    # the decision is cached per key for AuthorizerCacheTtlSeconds (its default here)
    assert authorizer["authorizerResultTtlInSeconds"] == 300
    assert authorizer["identitySource"] == "method.request.header.x-api-key"
    assert _referenced(authorizer["authorizerUri"]) == {"AuthorizerFunction"}


# ---------------------------------------------------------------- least privilege


@pytest.mark.parametrize(
    ("function", "tables", "queues"),
    [
        # A cancelled long job's tenant slot is given back by whoever cancels it. The
        # console's overview reads the ticker leases; an operator's key lists the tenants.
        (
            "ApiFunction",
            {
                "SchedulesTable",
                "OccurrencesTable",
                "IdempotencyTable",
                "WorkflowsTable",
                "SlotsTable",
                "LeasesTable",
                "ApiKeysTable",
            },
            {"DefaultQueue", "ShortQueue", "LongQueue", "WorkflowQueue"},
        ),
        (
            "TickerFunction",
            {"SchedulesTable", "OccurrencesTable", "LeasesTable"},
            {"DefaultQueue", "DefaultBurstQueue", "ShortQueue", "LongQueue"},
        ),
        ("AuthorizerFunction", {"ApiKeysTable"}, set()),
        *(
            (
                worker,
                {"SchedulesTable", "OccurrencesTable", "SlotsTable", "WorkflowsTable"},
                {"DefaultQueue", "ShortQueue", "LongQueue", "WorkflowQueue"},
            )
            for worker in ("DefaultWorkerFunction", "ShortWorkerFunction")
        ),
        # Retries and deferrals go back to its own class's queue only; a node's completion
        # goes to the controller.
        (
            "LongWorkerFunction",
            {"SchedulesTable", "OccurrencesTable", "SlotsTable", "WorkflowsTable"},
            {"LongQueue", "WorkflowQueue"},
        ),
        # Sends to tenant targets (on "*": see the wildcard grants) and, for a workflow
        # target, the run's start to the controller.
        (LONG_RUNNER, {"SchedulesTable", "OccurrencesTable", "WorkflowsTable"}, {"WorkflowQueue"}),
        # Nodes become occurrences on their class's queue; continuations go to its own.
        (
            WORKFLOW_CONTROLLER,
            {"WorkflowsTable", "OccurrencesTable", "SlotsTable"},
            {"DefaultQueue", "ShortQueue", "LongQueue", "WorkflowQueue"},
        ),
    ],
)
def test_each_function_reaches_only_its_tables_and_queues(
    translated: dict[str, Any], function: str, tables: set[str], queues: set[str]
) -> None:
    role = translated["Resources"][f"{function}Role"]

    assert set(_grants(role, "dynamodb")) == tables
    assert set(_grants(role, "sqs")) == queues
    # SendMessage* is the SAM template's grant: SendMessage and SendMessageBatch, no receive;
    # the API also reads the class queues' counts (an operator's overview), nothing else.
    reads = {"sqs:GetQueueAttributes"} if function == "ApiFunction" else set()
    for queue, actions in _grants(role, "sqs").items():
        class_queue = queue in {"DefaultQueue", "ShortQueue", "LongQueue"}
        assert set(actions) == {"sqs:SendMessage*"} | (reads if class_queue else set()), queue


@pytest.mark.parametrize(
    ("function", "table"),
    [
        ("AuthorizerFunction", "ApiKeysTable"),
        *((function, "SchedulesTable") for function in sorted(JOB_CLASSES)),
        # Looks nodes up before starting them; runs no target that could start a run.
        ("LongWorkerFunction", "WorkflowsTable"),
    ],
)
def test_read_only_grants_cannot_write(
    translated: dict[str, Any], function: str, table: str
) -> None:
    role = translated["Resources"][f"{function}Role"]
    grants = _grants(role, "dynamodb")
    # A worker's one write to a schedule, a finished job's quota mark, is scoped to it.
    scoped = _grants(role, "dynamodb", attributes=QUOTA_MARK)

    assert "dynamodb:GetItem" in grants[table]
    assert (grants[table] - scoped.get(table, set())) & DYNAMODB_WRITES == set()


QUOTA_MARK = [
    "tenant_id",
    "schedule_id",
    "quota_held",
    "quota_released",
    "held_by",
    "held_fire_ms",
]


@pytest.mark.parametrize("function", sorted(WORKERS))
def test_workers_may_write_a_schedules_quota_mark_and_nothing_else_of_it(
    translated: dict[str, Any], function: str
) -> None:
    # A finished one-off job gives its unit of quota back: its mark goes in one transaction
    # with the count (an UpdateItem of the mark), and no other attribute may be written.
    role = translated["Resources"][f"{function}Role"]

    scoped = _grants(role, "dynamodb", attributes=QUOTA_MARK)

    assert scoped == {"SchedulesTable": {"dynamodb:UpdateItem"}}
    assert "dynamodb:UpdateItem" in _grants(role, "dynamodb")["SlotsTable"]
    assert (
        _grants(translated["Resources"][f"{LONG_RUNNER}Role"], "dynamodb", attributes=QUOTA_MARK)
        == {}
    )


SWEEP_MARKS = [*QUOTA_MARK, "held_in", "sweep_sent_ms"]
# A trigger's row listed as awaiting its message: settled skipped, or its listing
# cleared, by the sweep.
AWAITING_SEND = [
    "schedule_id",
    "occurrence_sk",
    "awaiting_send_shard",
    "awaiting_send_since_ms",
    "state",
    "exit_reason",
    "finished_at_ms",
]


def test_the_sweep_reads_what_may_be_stuck_and_writes_only_marks_and_counts(
    translated: dict[str, Any],
) -> None:
    # GIVEN the sweep's role
    role = translated["Resources"]["SweepFunctionRole"]

    grants = _grants(role, "dynamodb")
    scoped = _grants(role, "dynamodb", attributes=SWEEP_MARKS)

    # THEN of a schedule it may write a job's quota mark and its resend's time, nothing
    # else; of an occurrence row, a listed trigger's settle as skipped and its listing,
    # nothing else; it reads the held index, a tenant's jobs (before reducing its count), jobs
    # and occurrence rows by key, the awaiting_send index, and the slots table's usage
    # items and holders (scan, query, read, the count's conditional update, a holder's
    # change or delete); it may put the register of limit overrides, and no other item
    # of the slots table
    assert scoped == {"SchedulesTable": {"dynamodb:UpdateItem"}}
    assert _grants(role, "dynamodb", attributes=AWAITING_SEND) == {
        "OccurrencesTable": {"dynamodb:UpdateItem"}
    }
    assert grants == {
        "SchedulesTable": {
            "dynamodb:GetItem",
            "dynamodb:BatchGetItem",
            "dynamodb:Query",
            "dynamodb:UpdateItem",
        },
        "OccurrencesTable": {
            "dynamodb:GetItem",
            "dynamodb:BatchGetItem",
            "dynamodb:Query",
            "dynamodb:UpdateItem",
        },
        "SlotsTable": {
            "dynamodb:Scan",
            "dynamodb:Query",
            "dynamodb:GetItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
            "dynamodb:PutItem",
        },
    }
    (put,) = [s for s in _statements(role) if "dynamodb:PutItem" in _actions(s)]
    assert put["Condition"] == {
        "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [slots_dynamodb.OVERRIDES_TENANT]}
    }
    query = [s for s in _statements(role) if "dynamodb:Query" in _actions(s)]
    assert [s["Resource"] for s in query] == [
        [
            {"Fn::GetAtt": ["SchedulesTable", "Arn"]},
            {"Fn::Sub": "${SchedulesTable.Arn}/index/held"},
        ],
        # the occurrences table's awaiting_send index only, never its rows' history
        {"Fn::Sub": "${OccurrencesTable.Arn}/index/awaiting_send"},
        {"Fn::GetAtt": ["SlotsTable", "Arn"]},
    ]
    assert _wildcard_actions(role) & DYNAMODB_WRITES == set()


@pytest.mark.parametrize("function", TARGET_RUNNERS)
def test_target_runners_may_only_read_workflows_and_create_runs(
    translated: dict[str, Any], function: str
) -> None:
    # A schedule whose target is a workflow starts a run (a conditional PutItem); nodes
    # are otherwise moved by the controller alone.
    grants = _grants(translated["Resources"][f"{function}Role"], "dynamodb")

    assert {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:BatchGetItem"} <= grants[
        "WorkflowsTable"
    ]
    assert grants["WorkflowsTable"] & DYNAMODB_WRITES == {"dynamodb:PutItem"}
    assert "dynamodb:BatchWriteItem" not in grants["WorkflowsTable"]


@pytest.mark.parametrize(
    ("function", "crud"),
    [
        # Registers definitions (puts documents) and reads what a client uploaded.
        ("ApiFunction", True),
        # Reads definitions to run their nodes.
        (WORKFLOW_CONTROLLER, False),
        ("DefaultWorkerFunction", False),
        ("ShortWorkerFunction", False),
        ("LongWorkerFunction", False),
        (LONG_RUNNER, False),
        # Nothing else touches the bucket.
        ("AuthorizerFunction", None),
        ("TickerFunction", None),
    ],
)
def test_only_the_api_writes_definitions_and_the_workflow_functions_read_them(
    translated: dict[str, Any], function: str, crud: bool | None
) -> None:
    grants = _grants(translated["Resources"][f"{function}Role"], "s3")

    if crud is None:
        assert grants == {}
        return
    assert set(grants) == {"DefinitionsBucket"}
    actions = grants["DefinitionsBucket"]
    assert "s3:GetObject" in actions
    assert ("s3:PutObject" in actions) == crud
    # Nothing deletes a definition or an upload (the lifecycle rule expires uploads).
    assert "s3:DeleteObject" not in actions


@pytest.mark.parametrize("function", sorted(HANDLERS))
def test_no_function_has_a_grant_on_every_resource(
    translated: dict[str, Any], function: str
) -> None:
    # Tenant targets are called as the tenant's role (or what the operator allowlists),
    # the API heartbeats and stops only the long job state machine's executions: no role
    # allows anything on "*".
    role = translated["Resources"][f"{function}Role"]

    assert _wildcard_actions(role) == set()


@pytest.mark.parametrize("function", sorted(HANDLERS))
def test_only_the_long_worker_and_runner_reach_the_state_machine(
    translated: dict[str, Any], function: str
) -> None:
    # The long worker starts executions; the runner answers its task token.
    role = translated["Resources"][f"{function}Role"]

    assert _grants(role, "states") == STATE_MACHINE_GRANTS.get(function, {})


def test_state_machine_only_sends_to_the_task_queue_and_the_outcome_queue(
    translated: dict[str, Any],
) -> None:
    role = translated["Resources"]["LongJobStateMachineRole"]
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]

    assert trust["Principal"] == {"Service": ["states.amazonaws.com"]}
    assert role["Properties"]["ManagedPolicyArns"] == []
    assert _grants(role, "sqs") == {
        "LongTaskQueue": {"sqs:SendMessage*"},
        "LongQueue": {"sqs:SendMessage*"},
    }
    assert {action for s in _statements(role) for action in _actions(s)} == {"sqs:SendMessage*"}
    assert _wildcard_actions(role) == set()


# ---------------------------------------------------------------- alarms


def test_there_is_one_alarm_for_lag_one_for_a_stalled_ticker_and_one_per_dlq(
    translated: dict[str, Any],
) -> None:
    alarms = _resources_of_type(translated, "AWS::CloudWatch::Alarm")

    assert set(alarms) == {
        "StartLagAlarm",
        "TickerStalledAlarm",
        "DefaultDeadLetterAlarm",
        "ShortDeadLetterAlarm",
        "LongDeadLetterAlarm",
        "WorkflowDeadLetterAlarm",
    }
    assert [
        name for name, a in alarms.items() if a["Properties"]["AlarmActions"] != ALARM_ACTIONS
    ] == []


def test_lag_alarm_watches_p99_start_lag_in_milliseconds(translated: dict[str, Any]) -> None:
    props = translated["Resources"]["StartLagAlarm"]["Properties"]

    assert (props["Namespace"], props["MetricName"], props["Dimensions"]) == (
        "Fireline",
        "StartLag",
        SERVICE_DIMENSION,
    )
    assert (props["Unit"], props["ExtendedStatistic"], props["Period"]) == (
        "Milliseconds",
        "p99",
        60,
    )
    assert "Statistic" not in props
    # LagAlarmThresholdSeconds=10 -> "10000" (ms).
    assert props["Threshold"] == {"Fn::Sub": "${LagAlarmThresholdSeconds}000"}
    assert props["ComparisonOperator"] == "GreaterThanThreshold"


def test_stalled_ticker_alarm_treats_silence_as_failure(translated: dict[str, Any]) -> None:
    props = translated["Resources"]["TickerStalledAlarm"]["Properties"]

    assert (props["Namespace"], props["MetricName"], props["Dimensions"]) == (
        "Fireline",
        "TicksCompleted",
        SERVICE_DIMENSION,
    )
    assert (
        props["Statistic"],
        props["Period"],
        props["EvaluationPeriods"],
        props["ComparisonOperator"],
        props["Threshold"],
        props["TreatMissingData"],
    ) == ("Sum", 60, 3, "LessThanThreshold", 1, "breaching")


@pytest.mark.parametrize(
    ("alarm", "dlq_name"),
    [
        *(
            (f"{job_class.title()}DeadLetterAlarm", dlq_name)
            for job_class, (_, dlq_name, _) in sorted(QUEUE_CLASSES.items())
        ),
        # A controller event that failed five times: the reconcile repairs the run, but
        # something keeps failing.
        ("WorkflowDeadLetterAlarm", "WorkflowDeadLetterQueue"),
    ],
)
def test_each_dead_letter_queue_alarms_on_its_first_message(
    translated: dict[str, Any], alarm: str, dlq_name: str
) -> None:
    props = translated["Resources"][alarm]["Properties"]

    assert (props["Namespace"], props["MetricName"]) == (
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
    )
    assert props["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": [dlq_name, "QueueName"]}}
    ]
    assert (props["ComparisonOperator"], props["Threshold"]) == ("GreaterThanThreshold", 0)


# ---------------------------------------------------------------- outputs and packaging


def test_outputs_name_the_api_the_state_machine_every_table_bucket_and_queue(
    translated: dict[str, Any],
) -> None:
    outputs = translated["Outputs"]
    tables = _resources_of_type(translated, "AWS::DynamoDB::Table")
    buckets = _resources_of_type(translated, "AWS::S3::Bucket")
    queues = _resources_of_type(translated, "AWS::SQS::Queue")
    named = {f"{t}Name" for t in [*tables, *buckets]} | {f"{q}Url" for q in queues}

    assert {"WorkflowsTableName", "DefinitionsBucketName", "WorkflowQueueUrl"} <= named
    assert (
        set(outputs)
        == {
            "ApiUrl",
            "LongJobStateMachineArn",
            "SigningSecretPrefix",
            "UsagePlanId",
            "AuthorizerCacheTtlSeconds",
            "TargetCallerRoleArn",
        }
        | named
    )
    # what `fireline admin` finds the deployment's key resources by
    assert outputs["SigningSecretPrefix"]["Value"] == SIGNING_PREFIX
    assert outputs["UsagePlanId"]["Value"] == {"Ref": "TenantUsagePlan"}
    assert outputs["LongJobStateMachineArn"]["Value"] == {"Ref": "LongJobStateMachine"}
    assert all(outputs[f"{t}Name"]["Value"] == {"Ref": t} for t in [*tables, *buckets])
    assert all(outputs[f"{q}Url"]["Value"] == {"Ref": q} for q in queues)
    assert _referenced(outputs["ApiUrl"]["Value"]) == {"FirelineApi", "StageName"}
    assert outputs["ApiUrl"]["Value"] == {
        "Fn::Sub": "https://${FirelineApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}/${StageName}/"
    }


def test_lambda_requirements_match_the_package_dependencies() -> None:
    # `sam build` installs functions/requirements.txt; pip installs pyproject's list.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    lines = (ROOT / "functions" / "requirements.txt").read_text().splitlines()
    requirements = [line for line in lines if line.strip() and not line.startswith("#")]

    assert sorted(str(Requirement(r)) for r in requirements) == sorted(
        str(Requirement(d)) for d in pyproject["project"]["dependencies"]
    )


# ---------------------------------------------------------------- tenants' keys and limits


def test_only_the_target_runners_read_signing_secrets_and_only_under_the_stacks_prefix(
    translated: dict[str, Any],
) -> None:
    readers = {}
    for logical_id, resource in _resources_of_type(translated, "AWS::IAM::Role").items():
        for statement in _statements(resource):
            actions = [a for a in _actions(statement) if a.startswith("secretsmanager:")]
            if actions:
                readers.setdefault(logical_id.removesuffix("Role"), []).append(
                    (actions, statement["Resource"])
                )
    prefix = (
        "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}"
        ":secret:fireline/${AWS::StackName}/signing/*"
    )
    assert readers == {
        function: [(["secretsmanager:GetSecretValue"], {"Fn::Sub": prefix})]
        for function in TARGET_RUNNERS
    }


def test_no_secret_is_in_the_template_or_a_functions_environment(
    sam_template: dict[str, Any], translated: dict[str, Any]
) -> None:
    text = TEMPLATE.read_text().lower()
    assert "change-me" not in text and "signing_secret:" not in text
    assert not any(spec.get("NoEcho") for spec in sam_template["Parameters"].values())
    for resource in _resources_of_type(translated, "AWS::Lambda::Function").values():
        variables = resource["Properties"]["Environment"]["Variables"]
        assert not any("SECRET" in name and "PREFIX" not in name for name in variables)


def test_the_usage_plan_throttles_each_tenant_on_the_apis_stage(translated: dict[str, Any]) -> None:
    (plan,) = _resources_of_type(translated, "AWS::ApiGateway::UsagePlan").values()
    props = plan["Properties"]
    assert props["ApiStages"] == [
        {"ApiId": {"Ref": "FirelineApi"}, "Stage": {"Ref": "FirelineApiStage"}}
    ]
    assert props["Throttle"] == {
        "RateLimit": {"Ref": "UsagePlanRateLimit"},
        "BurstLimit": {"Ref": "UsagePlanBurstLimit"},
    }
    assert props["Quota"] == {
        "Fn::If": [
            "HasDailyQuota",
            {"Limit": {"Ref": "UsagePlanDailyQuota"}, "Period": "DAY"},
            {"Ref": "AWS::NoValue"},
        ]
    }
    api = translated["Resources"]["FirelineApi"]["Properties"]
    # the key the plan counts by is the authorizer's usageIdentifierKey
    assert api["ApiKeySourceType"] == "AUTHORIZER"


def test_api_gateway_refuses_with_the_local_gateways_bodies_in_the_apis_error_shape(
    translated: dict[str, Any],
) -> None:
    body = translated["Resources"]["FirelineApi"]["Properties"]["Body"]
    responses = body["x-amazon-apigateway-gateway-responses"]
    answered = {
        kind: (
            int(response["statusCode"]),
            json.loads(response["responseTemplates"]["application/json"]),
        )
        for kind, response in responses.items()
    }
    assert answered == {
        "THROTTLED": (429, json.loads(runtime.THROTTLED_BODY)),
        "QUOTA_EXCEEDED": (429, json.loads(runtime.QUOTA_EXCEEDED_BODY)),
        "UNAUTHORIZED": (401, json.loads(runtime.UNAUTHORIZED_BODY)),
        "ACCESS_DENIED": (403, json.loads(runtime.FORBIDDEN_BODY)),
        "INVALID_API_KEY": (403, json.loads(runtime.FORBIDDEN_BODY)),
    }


@pytest.mark.parametrize(
    "function", ["ApiFunction", "TickerFunction", "DefaultWorkerFunction", "WorkflowFunction"]
)
def test_traced_functions_may_send_segments_and_record_a_share_of_fires(
    translated: dict[str, Any], sam_template: dict[str, Any], function: str
) -> None:
    # GIVEN the translated function, its role and the template's sampling parameter
    props = translated["Resources"][function]["Properties"]
    role = translated["Resources"][props["Role"]["Fn::GetAtt"][0]]
    rate = sam_template["Parameters"]["TraceSampleRate"]
    # THEN X-Ray records its invocations and it may write segments (its fires' own too)
    assert props["TracingConfig"] == {"Mode": "Active"}
    managed = [str(arn) for arn in role["Properties"]["ManagedPolicyArns"]]
    assert [arn for arn in managed if arn.endswith("policy/AWSXrayWriteOnlyAccess")] != []
    # AND its fires' segments go to the daemon, at a default share of 1 in 1,000
    variables = props["Environment"]["Variables"]
    assert variables["TRACE_SEGMENTS"] == "xray"
    assert variables["TRACE_SAMPLE_RATE"] == {"Ref": "TraceSampleRate"}
    assert (rate["Default"], rate["MinValue"], rate["MaxValue"]) == (0.001, 0, 1)


def test_the_api_stage_is_sampled_at_the_fires_rate_not_xrays_default(
    translated: dict[str, Any],
) -> None:
    # GIVEN the translated template's X-Ray sampling rules
    rules = [
        r["Properties"]["SamplingRule"]
        for r in translated["Resources"].values()
        if r["Type"] == "AWS::XRay::SamplingRule"
    ]
    # THEN one rule takes this API's stage, ahead of X-Ray's default (priority 10,000):
    # no reservoir, the fires' own share, so a job created one request each is traced at
    # the rate its fire is
    (rule,) = rules
    assert rule["ServiceType"] == "AWS::ApiGateway::Stage"
    assert "/restapis/${FirelineApi}/stages/${StageName}" in rule["ResourceARN"]["Fn::Sub"]
    assert rule["FixedRate"] == {"Ref": "TraceSampleRate"}
    assert (rule["ReservoirSize"], rule["Priority"]) == (0, 100)
    assert all(rule[k] == "*" for k in ("ServiceName", "Host", "HTTPMethod", "URLPath"))
    # AND the stage it names records traces
    stages = [r for r in translated["Resources"].values() if r["Type"] == "AWS::ApiGateway::Stage"]
    assert [s["Properties"]["TracingEnabled"] for s in stages] == [True]
