"""The Fireline construct: infra/template.yaml, translated and included, props as parameters.

One source of truth. At synth time the SAM template is read, packaged and translated to
plain CloudFormation offline by aws-sam-translator (the same steps the local cloud takes,
``fireline.local.deploy``), then included with ``CfnInclude``:

- every resource keeps its logical id, so the local cloud, the tests and a stack moved from
  `sam deploy` find the same names (one Fireline per stack, as one template per stack);
- each prop replaces one template parameter by its value (``PROP_PARAMETERS``), checked
  here against the parameter's own bounds, since CloudFormation no longer sees it; any
  other parameter, including ones added to the template later, is set by name through
  ``parameters``, or left to `cdk deploy --parameters`;
- the construct changes only what the CDK owns: the functions' code (an asset instead of
  `sam package`'s upload) and, when asked, the removal policy of what the template retains.

A change to the template reaches every CDK app at its next synth, with no edit here.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_sns as sns
from aws_cdk import cloudformation_include as cfn_include
from constructs import Construct
from samtranslator.yaml_helper import yaml_parse

from fireline.local import deploy
from fireline_cdk import acknowledgements, bundling

TEMPLATE = deploy.TEMPLATE
# What the translation puts in every function's Code until the construct sets the asset.
CODE_PLACEHOLDER = {"Bucket": "fireline-code-placeholder", "Key": "functions.zip"}

# What a condition sees of a value known only at deploy time.
SET_AT_DEPLOY = "set-at-deploy-time"

# prop name -> the template parameter it sets.
PROP_PARAMETERS = {
    "alarm_topic": "AlarmTopicArn",
    "stage_name": "StageName",
    "due_shards": "DueShards",
    "ticker_groups": "TickerGroups",
    "lookahead_seconds": "LookaheadSeconds",
    "horizon_seconds": "HorizonSeconds",
    "lag_alarm_threshold_seconds": "LagAlarmThresholdSeconds",
    "tenant_concurrency_limit": "TenantConcurrencyLimit",
    "authorizer_cache_ttl_seconds": "AuthorizerCacheTtlSeconds",
    "log_retention_days": "LogRetentionDays",
    "api_throttling.rate_limit": "ApiThrottlingRateLimit",
    "api_throttling.burst_limit": "ApiThrottlingBurstLimit",
    "usage_plan.rate_limit": "UsagePlanRateLimit",
    "usage_plan.burst_limit": "UsagePlanBurstLimit",
    "usage_plan.daily_quota": "UsagePlanDailyQuota",
    "memory_sizes.api": "ApiMemorySize",
    "memory_sizes.ticker": "TickerMemorySize",
    "memory_sizes.worker": "WorkerMemorySize",
    "memory_sizes.long_runner": "LongRunnerMemorySize",
    "memory_sizes.workflow": "WorkflowMemorySize",
    "vpc_subnets": "WorkerSubnetIds",
    "security_groups": "WorkerSecurityGroupIds",
    "tenant_quotas.schedules": "TenantScheduleQuota",
    "tenant_quotas.active_jobs": "TenantActiveJobQuota",
    "tenant_quotas.workflows": "TenantWorkflowQuota",
    "tenant_quotas.workflow_versions": "TenantWorkflowVersionQuota",
    "tenant_quotas.uploads_per_day": "TenantUploadsPerDayQuota",
}


@dataclass(frozen=True)
class MemorySizes:
    """Memory (MB) per function role; None keeps the template's default."""

    api: int | None = None
    ticker: int | None = None
    worker: int | None = None  # the default and short class workers
    long_runner: int | None = None
    workflow: int | None = None


@dataclass(frozen=True)
class UsagePlan:
    """Each tenant's limits (the API Gateway usage plan its keys are in): requests per
    second, burst, requests per day (0: no quota); None keeps the template's default."""

    rate_limit: int | None = None
    burst_limit: int | None = None
    daily_quota: int | None = None


@dataclass(frozen=True)
class ApiThrottling:
    """The API stage's throttle (requests per second, burst); None keeps the default."""

    rate_limit: int | None = None
    burst_limit: int | None = None


@dataclass(frozen=True)
class TenantQuotas:
    """Each tenant's default count quotas (0: no limit); None keeps the template's
    default. Per-tenant overrides are set with `fireline admin quotas`."""

    schedules: int | None = None
    active_jobs: int | None = None  # one-off jobs not yet finished
    workflows: int | None = None
    workflow_versions: int | None = None  # versions of one workflow
    uploads_per_day: int | None = None


class Fireline(Construct):
    """Fireline's resources, as infra/template.yaml defines them.

    Props left at None keep the template's defaults. ``ticker_groups`` (1 to 8, at most
    ``due_shards``) splits the due index's shards over that many leased tickers, each with
    its own rule, lease and two reserved invocations. ``vpc`` puts the functions that call
    tenant targets (default and short workers, long runner) in ``vpc_subnets`` of it
    (private subnets with egress by default) with ``security_groups`` (one allowing all
    outbound traffic is created if none is given). ``removal_policy`` applies to what the
    template retains on delete (tables with history, the definitions bucket, the log group);
    ``DESTROY`` also turns those tables' deletion protection off.
    ``bundle_dependencies=False`` packages the code without its requirements: enough to
    synthesize and to deploy into the local cloud, not to run on AWS.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        alarm_topic: sns.ITopic | None = None,
        stage_name: str | None = None,
        due_shards: int | None = None,
        ticker_groups: int | None = None,
        lookahead_seconds: int | None = None,
        horizon_seconds: int | None = None,
        lag_alarm_threshold_seconds: int | None = None,
        tenant_concurrency_limit: int | None = None,
        authorizer_cache_ttl_seconds: int | None = None,
        log_retention_days: int | None = None,
        api_throttling: ApiThrottling | None = None,
        usage_plan: UsagePlan | None = None,
        memory_sizes: MemorySizes | None = None,
        tenant_quotas: TenantQuotas | None = None,
        vpc: ec2.IVpc | None = None,
        vpc_subnets: ec2.SubnetSelection | None = None,
        security_groups: Sequence[ec2.ISecurityGroup] | None = None,
        removal_policy: cdk.RemovalPolicy | None = None,
        parameters: Mapping[str, Any] | None = None,
        bundle_dependencies: bool = True,
        template_file: Path = TEMPLATE,
    ) -> None:
        super().__init__(scope, construct_id)
        code_folder = template_file.parent / code_uri(template_file)
        props: dict[str, Any] = {
            "alarm_topic": alarm_topic.topic_arn if alarm_topic else None,
            "stage_name": stage_name,
            "due_shards": due_shards,
            "ticker_groups": ticker_groups,
            "lookahead_seconds": lookahead_seconds,
            "horizon_seconds": horizon_seconds,
            "lag_alarm_threshold_seconds": lag_alarm_threshold_seconds,
            "tenant_concurrency_limit": tenant_concurrency_limit,
            "authorizer_cache_ttl_seconds": authorizer_cache_ttl_seconds,
            "log_retention_days": log_retention_days,
            **_nested("api_throttling", api_throttling or ApiThrottling()),
            **_nested("usage_plan", usage_plan or UsagePlan()),
            **_nested("memory_sizes", memory_sizes or MemorySizes()),
            **_nested("tenant_quotas", tenant_quotas or TenantQuotas()),
        }
        if vpc is not None:
            selection = vpc_subnets or ec2.SubnetSelection(
                subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS
            )
            groups = security_groups or [
                ec2.SecurityGroup(
                    self,
                    "WorkerSecurityGroup",
                    vpc=vpc,
                    description="Fireline functions that call tenant targets",
                    allow_all_outbound=True,
                )
            ]
            # A struct in jsii's Python binding: its fields are the call's keywords.
            props["vpc_subnets"] = vpc.select_subnets(**selection._values).subnet_ids
            props["security_groups"] = [group.security_group_id for group in groups]
        elif vpc_subnets is not None or security_groups is not None:
            raise ValueError("vpc_subnets and security_groups need a vpc")

        declared = yaml_parse(template_file.read_text())
        self.parameter_values = parameter_values(declared, props, parameters or {})
        # The SAM transform resolves some parameters itself (the API's Auth: the
        # authorizer's cache TTL), as CloudFormation's transform does with a deploy's
        # values: it is given the values known at synth.
        # (A Number as a number: the API definition's TTL is an integer.)
        kinds = {name: spec["Type"] for name, spec in declared["Parameters"].items()}
        translated = translate(
            template_file,
            {
                name: int(value) if kinds[name] == "Number" and value.isdigit() else value
                for name, value in self.parameter_values.items()
                if isinstance(value, str) and not cdk.Token.is_unresolved(value)
            },
        )
        with tempfile.TemporaryDirectory() as work:
            # CfnInclude reads a file, once, here.
            included = Path(work) / "template.json"
            included.write_text(
                json.dumps(conditions_set_at_deploy(translated, self.parameter_values))
            )
            self.template = cfn_include.CfnInclude(
                self,
                "Template",
                template_file=str(included),
                parameters=self.parameter_values,
                preserve_logical_ids=True,
            )

        code = s3_assets.Asset(
            self,
            "Code",
            path=str(code_folder),
            exclude=["**/__pycache__", "**/*.pyc", "*.egg-info"],
            bundling=bundling.options(code_folder) if bundle_dependencies else None,
        )
        placeholder = {"S3Bucket": CODE_PLACEHOLDER["Bucket"], "S3Key": CODE_PLACEHOLDER["Key"]}
        for logical_id, resource in translated["Resources"].items():
            if resource["Type"] != "AWS::Lambda::Function":
                continue
            if resource["Properties"].get("Code") != placeholder:
                continue  # a function with code of its own keeps it
            function = self.template.get_resource(logical_id)
            assert isinstance(function, lambda_.CfnFunction)
            function.code = lambda_.CfnFunction.CodeProperty(
                s3_bucket=code.s3_bucket_name, s3_key=code.s3_object_key
            )
        if removal_policy is not None:
            for logical_id, resource in translated["Resources"].items():
                if resource.get("DeletionPolicy") != "Retain":
                    continue
                kept = self.template.get_resource(logical_id)
                kept.apply_removal_policy(removal_policy)
                # A protected table refuses CloudFormation's DeleteTable too: a stack
                # that destroys its tables must not protect them, or its deletion fails.
                protected = resource["Properties"].get("DeletionProtectionEnabled")
                if removal_policy is cdk.RemovalPolicy.DESTROY and protected:
                    kept.add_property_override("DeletionProtectionEnabled", False)
        acknowledgements.acknowledge(self, self.template, translated, self.parameter_values)

    def resource(self, logical_id: str) -> cdk.CfnResource:
        """A resource of the template by its logical id (as in infra/template.yaml or its
        translation), to read its attributes or, for what no prop covers, override it."""
        return self.template.get_resource(logical_id)


def translate(
    template_file: Path = TEMPLATE, parameter_values: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The SAM template as plain CloudFormation, with the code left as a placeholder."""
    template = yaml_parse(template_file.read_text())
    template["Globals"]["Function"]["CodeUri"] = dict(CODE_PLACEHOLDER)
    deploy.inline_definitions(template, template_file.parent)
    return deploy.translate(template, parameter_values=dict(parameter_values or {}))


def parameter_values(
    translated: dict[str, Any], props: Mapping[str, Any], parameters: Mapping[str, Any]
) -> dict[str, Any]:
    """Template parameter -> value, from the props set and ``parameters``, each checked
    against the parameter's declared type and bounds (CloudFormation checks them only for
    the parameters it is given, and these are replaced before it sees them)."""
    declared = translated.get("Parameters", {})
    values: dict[str, Any] = {}
    named = {**{prop: v for prop, v in props.items() if v is not None}, **parameters}
    for name, value in named.items():
        parameter = PROP_PARAMETERS.get(name, name)
        if parameter not in declared:
            raise ValueError(f"{name}: the template has no parameter {parameter}")
        values[parameter] = _checked(name, declared[parameter], value)
    return values


def conditions_set_at_deploy(
    translated: dict[str, Any], values: Mapping[str, Any]
) -> dict[str, Any]:
    """The template with each parameter whose value is known only at deploy time (a
    topic or subnet created in the same app) taken as set, non-empty, in its Conditions.

    CloudFormation evaluates conditions before it creates any resource, so a condition
    may not refer to one; such a value is a resource's attribute, never empty.
    """
    deferred = {
        name: [SET_AT_DEPLOY] if isinstance(value, list) else SET_AT_DEPLOY
        for name, value in values.items()
        if any(cdk.Token.is_unresolved(v) for v in (value if isinstance(value, list) else [value]))
    }

    def settled(node: Any) -> Any:
        if isinstance(node, dict):
            if set(node) == {"Ref"} and node["Ref"] in deferred:
                return deferred[node["Ref"]]
            return {key: settled(value) for key, value in node.items()}
        if isinstance(node, list):
            return [settled(item) for item in node]
        return node

    return {**translated, "Conditions": settled(translated.get("Conditions", {}))}


def _checked(name: str, declared: dict[str, Any], value: Any) -> Any:
    if declared["Type"] == "CommaDelimitedList" or declared["Type"].startswith("List<"):
        items = [value] if isinstance(value, str) else list(value)
        return [_checked(name, {**declared, "Type": "String"}, item) for item in items]
    if cdk.Token.is_unresolved(value):
        return value  # known at deploy time only
    text = str(value)
    problems = []
    if declared["Type"] == "Number":
        number = float(text)
        if "MinValue" in declared and number < float(declared["MinValue"]):
            problems.append(f"at least {declared['MinValue']}")
        if "MaxValue" in declared and number > float(declared["MaxValue"]):
            problems.append(f"at most {declared['MaxValue']}")
    if "AllowedValues" in declared and text not in {str(v) for v in declared["AllowedValues"]}:
        problems.append(f"one of {declared['AllowedValues']}")
    if "AllowedPattern" in declared and not re.fullmatch(declared["AllowedPattern"], text):
        problems.append(f"matching {declared['AllowedPattern']}")
    if len(text) < int(declared.get("MinLength", 0)):
        problems.append(f"at least {declared['MinLength']} characters")
    if problems:
        raise ValueError(f"{name} must be {' and '.join(problems)}, got {value!r}")
    # CloudFormation hands every parameter over as a string, numbers included.
    return text


def _nested(
    prefix: str, values: MemorySizes | ApiThrottling | UsagePlan | TenantQuotas
) -> dict[str, Any]:
    return {f"{prefix}.{f.name}": getattr(values, f.name) for f in fields(values)}


def code_uri(template_file: Path) -> str:
    """The template's CodeUri for every function: a local folder, as `sam build` reads."""
    uri = yaml_parse(template_file.read_text())["Globals"]["Function"]["CodeUri"]
    if not isinstance(uri, str) or uri.startswith("s3://"):
        raise ValueError(f"CodeUri must be a local folder, got {uri!r}")
    return uri
