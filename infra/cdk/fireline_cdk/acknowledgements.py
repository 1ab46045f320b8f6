"""Findings Fireline accepts, each with its reason: cdk-nag's AwsSolutions rules and the
CDK's own template validator (CloudFormation-Validate).

Acknowledged through aws-cdk-lib's own ``Validations`` (what cdk-nag reads), so an app
that runs cdk-nag sees only what its own resources add, and the construct needs no
cdk-nag at run time. Findings on named resources are acknowledged on those resources
only: a new table, queue or role in the template that trips a rule fails the check until
someone writes down why it is acceptable. The tests fail on an acknowledgement nothing
trips any more, so none outlives its finding.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Any

import aws_cdk as cdk
from aws_cdk import cloudformation_include as cfn_include
from constructs import Construct

# The translation's AWS managed policies: the partition is the one it ran for.
MANAGED = "arn:aws:iam::aws:policy/"

# finding -> reason, for every role the SAM transform generates.
EVERY_ROLE = {
    f"AwsSolutions-IAM4[Policy::{MANAGED}service-role/AWSLambdaBasicExecutionRole]": (
        "Added by the SAM transform to every function: writing its own logs only."
    ),
    f"AwsSolutions-IAM4[Policy::{MANAGED}AWSXrayWriteOnlyAccess]": (
        "Added by the SAM transform for Tracing: Active: sending trace segments only."
    ),
    f"AwsSolutions-IAM4[Policy::{MANAGED}service-role/AWSLambdaSQSQueueExecutionRole]": (
        "Added by the SAM transform to functions fed by an SQS event source mapping: "
        "receiving and deleting the mapping's messages."
    ),
    f"AwsSolutions-IAM4[Policy::{MANAGED}service-role/AWSLambdaVPCAccessExecutionRole]": (
        "Added by the SAM transform to the functions that may join the workers' VPC "
        "(WorkerSubnetIds): managing their own network interfaces."
    ),
    "AwsSolutions-IAM5[Action::sqs:SendMessage*]": (
        "SAM's SQSSendMessagePolicy: SendMessage and SendMessageBatch, on one named queue."
    ),
    "AwsSolutions-L1": (
        "Every function runs python3.11, the version the package supports and is tested "
        "on (requires-python >= 3.11); a runtime upgrade is a template change of its own."
    ),
}

# What the functions that sign webhooks may read (GetSecretValue only), as the template says.
SIGNING_SECRETS = (
    "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}"
    ":secret:fireline/${AWS::StackName}/signing/*"
)
SIGNING_SECRETS_REASON = (
    "The tenants' webhook signing secrets, one per tenant, created by `fireline admin` as "
    "tenants are added: read-only, and only the names under this stack's prefix."
)

# What TargetCallerRole may assume, as the template writes it: the account is "*" because
# tenants' roles are in the tenants' own accounts; the path is the documented one.
TENANT_TARGET_ROLES = "arn:${AWS::Partition}:iam::*:role/${TenantTargetRolePath}*"
TENANT_TARGET_ROLES_REASON = (
    "Tenants' target roles: only those under the documented path (TenantTargetRolePath), "
    "in any account, since they are in the tenants' own accounts, unknown at deploy time; "
    "each trusts this role only with its tenant id as ExternalId, only the three roles "
    "that call targets may assume this one, and it may do nothing else."
)

# Executions of the long job state machine: named after their jobs' occurrences, so their
# ARNs exist only once each starts; the grant names the state machine, not "*".
LONG_JOB_EXECUTIONS = (
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:"
    "<AWS::AccountId>:execution:<LongJobStateMachine.Name>:*]"
)

# The template validator reads the empty default of WorkerSubnetIds and
# WorkerSecurityGroupIds as ids; they are empty only when HasWorkerVpc is false.
OPTIONAL_VPC = (
    "Empty subnet and security group ids only when HasWorkerVpc is false, and then "
    "VpcConfig is AWS::NoValue: the function joins no VPC."
)

# A prop replaces its parameter by a value at synth, so a condition on it is decided there.
CONSTANT_CONDITIONS = (
    "Conditions on parameters the app's props set ({}) are decided at synth by design: "
    "the props replace those parameters by their values (a value known only at deploy "
    "time reads as set), and CloudFormation evaluates the conditions as written."
)

QUEUES_OVER_HTTPS = (
    "No queue policy grants anyone access: only Fireline's roles and its state machine use "
    "the queues, through the AWS SDK, which uses HTTPS."
)

# logical id -> {finding: reason}
RESOURCES = {
    **{
        table: {
            "AwsSolutions-DDB3": (
                "Seconds-to-hours lived records (leases, idempotency records, tenant "
                "slots): nothing to restore to a point in time."
            )
        }
        for table in ("LeasesTable", "IdempotencyTable", "SlotsTable")
    },
    "DefinitionsBucket": {
        "AwsSolutions-S1": (
            "Only Fireline's functions read and write it (their roles are the only grants, "
            "public access is blocked); object-level audit is CloudTrail data events, which "
            "an organisation enables account-wide, not a log bucket per deployment."
        ),
        "AwsSolutions-S10": (
            "No bucket policy grants anyone access; Fireline's roles reach it through the "
            "AWS SDK, which uses HTTPS, and presigned upload URLs are HTTPS."
        ),
    },
    **{
        f"{queue}{kind}": {"AwsSolutions-SQS4": QUEUES_OVER_HTTPS}
        for queue in ("Default", "Short", "Long", "Workflow")
        for kind in ("Queue", "DeadLetterQueue")
    },
    "DefaultBurstQueue": {"AwsSolutions-SQS4": QUEUES_OVER_HTTPS},
    "LongTaskQueue": {
        "AwsSolutions-SQS4": QUEUES_OVER_HTTPS,
        "AwsSolutions-SQS3": (
            "Each message is an attempt the state machine waits on with a heartbeat and a "
            "deadline: an attempt never answered times out there and is retried or "
            "reported dead to LongQueue, which has its dead-letter queue and alarm."
        ),
    },
    "LongJobStateMachine": {
        "AwsSolutions-SF1": (
            "Each attempt's progress, heartbeats and outcome are recorded on the occurrence "
            "row and in the worker and runner logs; Step Functions keeps execution history."
        ),
        "AwsSolutions-SF2": (
            "The functions on both ends of each task are traced (Tracing: Active); the "
            "state machine itself only waits on a task token."
        ),
    },
    "FirelineApi": {
        "AwsSolutions-APIG2": (
            "The API function validates every request against its pydantic models (the "
            "source of the OpenAPI document) and answers 400 naming the field."
        ),
    },
    "ApiFunctionRole": {
        LONG_JOB_EXECUTIONS: (
            "A tenant's cancel stops its long job's execution, one of the long job state "
            "machine's, whose ARN exists only once it starts."
        ),
        "AwsSolutions-IAM5[Resource::<DefinitionsBucket.Arn>/*]": (
            "The objects of DefinitionsBucket (definition documents and uploads, keyed by "
            "tenant and version): get and put, no other bucket, nothing deleted."
        ),
    },
    "WorkflowFunctionRole": {
        LONG_JOB_EXECUTIONS: (
            "Cancelling a run stops its long nodes' executions, the long job state "
            "machine's, whose ARNs exist only once they start."
        ),
    },
    "ApiGatewayLoggingRole": {
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
        "AmazonAPIGatewayPushToCloudWatchLogs]": (
            "The policy AWS provides for API Gateway's account-level logging role: "
            "creating and writing the log groups of the account's API stages."
        ),
    },
    "FirelineApiStage": {
        "AwsSolutions-APIG6": (
            "The stage writes an access log line per request (ApiAccessLogGroup); execution "
            "logs would add API Gateway's own trace of each request, and each request's "
            "invocation is in the API function's log group."
        ),
        "AwsSolutions-APIG3": (
            "A WAF web ACL is the account's or organisation's choice (Firewall Manager); "
            "every route but the public API description needs a key, and the stage is "
            "throttled (ApiThrottlingRateLimit, ApiThrottlingBurstLimit)."
        ),
    },
}


def acknowledge(
    scope: Construct,
    template: cfn_include.CfnInclude,
    translated: Any,
    replaced: Mapping[str, Any],
) -> None:
    """Acknowledge on ``scope`` (the Fireline construct) and the template's resources what
    the template's own resources trip; ``replaced`` maps the parameters props (or
    ``parameters``) replaced to their values."""
    resources = translated["Resources"]
    constant = constant_conditions(translated, replaced)
    if constant:
        # The template validator reports a constant condition on the stack, not on the
        # condition, so this is the one acknowledgement the construct makes on its stack.
        _ack(
            cdk.Stack.of(scope),
            "CloudFormation-Validate::W8003",
            CONSTANT_CONDITIONS.format(", ".join(constant)),
        )
    for finding, reason in EVERY_ROLE.items():
        _ack(scope, finding, reason)
    wildcards = _policy_template_wildcards(resources)
    signing_finding = _sub_finding(SIGNING_SECRETS, replaced)
    wildcards[signing_finding] = SIGNING_SECRETS_REASON
    for logical_id, resource in resources.items():
        if resource["Type"] == "AWS::IAM::Role":
            # Each role only for the tables and buckets its own policies name.
            for sub in _subs(resource):
                finding = signing_finding if sub == SIGNING_SECRETS else _resource_finding(sub)
                if finding in wildcards:
                    _ack(template.get_resource(logical_id), finding, wildcards[finding])
    for logical_id, resource in resources.items():
        if "VpcConfig" in resource.get("Properties", {}):
            for finding in ("CloudFormation-Validate::F3031", "CloudFormation-Validate::E1150"):
                _ack(template.get_resource(logical_id), finding, OPTIONAL_VPC)
    for logical_id, findings in RESOURCES.items():
        if logical_id in resources:
            for finding, reason in findings.items():
                _ack(template.get_resource(logical_id), finding, reason)
    if "TargetCallerRole" in resources:
        # The path is a parameter an app may set, and CfnInclude writes its value in.
        finding = _sub_finding(TENANT_TARGET_ROLES, replaced)
        _ack(template.get_resource("TargetCallerRole"), finding, TENANT_TARGET_ROLES_REASON)


def constant_conditions(translated: Any, replaced: Collection[str]) -> list[str]:
    """The template's conditions that test (directly or through another condition) a
    parameter a prop replaced by its value: constant once included."""
    conditions: dict[str, Any] = translated.get("Conditions", {})

    def tests(node: Any) -> bool:
        if isinstance(node, dict):
            if set(node) == {"Ref"}:
                return node["Ref"] in replaced
            if set(node) == {"Condition"}:
                return tests(conditions[node["Condition"]])
            return any(tests(value) for value in node.values())
        if isinstance(node, list):
            return any(tests(item) for item in node)
        return False

    return sorted(name for name, expression in conditions.items() if tests(expression))


def _policy_template_wildcards(resources: dict[str, Any]) -> dict[str, str]:
    """The wildcards SAM's policy templates write for the template's own tables and
    buckets: a table's indexes and a bucket's objects, nothing beyond them."""
    found = {}
    for logical_id, resource in resources.items():
        if resource["Type"] == "AWS::DynamoDB::Table":
            arn = "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}"
            pattern = [f"{arn}:table/${{tableName}}/index/*", {"tableName": {"Ref": logical_id}}]
            found[_resource_finding(pattern)] = (
                f"SAM's DynamoDB policy templates: the indexes of {logical_id}, no other table."
            )
        if resource["Type"] == "AWS::S3::Bucket":
            objects = "arn:${AWS::Partition}:s3:::${bucketName}/*"
            pattern = [objects, {"bucketName": {"Ref": logical_id}}]
            found[_resource_finding(pattern)] = (
                f"SAM's S3 policy templates: the objects of {logical_id}, no other bucket."
            )
    return found


def _subs(node: Any) -> list[Any]:
    """Every Fn::Sub in ``node``, in order."""
    if isinstance(node, list):
        return [sub for item in node for sub in _subs(item)]
    if not isinstance(node, dict):
        return []
    own = [node["Fn::Sub"]] if set(node) == {"Fn::Sub"} else []
    return own + [sub for value in node.values() for sub in _subs(value)]


def _sub_finding(sub: str, replaced: Mapping[str, Any]) -> str:
    """cdk-nag's name for a wildcard in a plain Fn::Sub string: <...> for each ${...},
    or the value CfnInclude wrote in for a replaced parameter."""

    def named(match: re.Match[str]) -> str:
        value = replaced.get(match[1])
        if isinstance(value, str) and not cdk.Token.is_unresolved(value):
            return value
        return f"<{match[1]}>"

    return "AwsSolutions-IAM5[Resource::{}]".format(re.sub(r"\$\{([^}]+)\}", named, sub))


def _resource_finding(sub: Any) -> str:
    # cdk-nag names a wildcard finding by the resource's Fn::Sub, as compact JSON.
    return f"AwsSolutions-IAM5[Resource::{json.dumps(sub, separators=(',', ':'))}]"


def _ack(scope: Construct, finding: str, reason: str) -> None:
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=finding, reason=reason))
