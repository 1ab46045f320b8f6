"""Deploying infra/template.yaml into an emulator, the way `sam deploy` would.

1. Package (what `sam package` does, offline): zip functions/ into the emulator's S3 and
   point every CodeUri at it; read each DefinitionUri file into the state machine's
   Definition (its DefinitionSubstitutions stay and CloudFormation applies them).
2. Transform: aws-sam-translator turns the SAM template into plain CloudFormation, with
   managed policy names resolved offline.

A template synthesized by the CDK (cdk.out/<stack>.template.json) takes the way
`cdk deploy` would instead of steps 1-2: the emulator is bootstrapped as `cdk bootstrap`
would (the assets bucket and the bootstrap version parameter) and the stack's assets
(cdk.out/<stack>.assets.json) are published to it. Both ways then go on with:
3. Set aside what the emulator cannot create, and say so: the API Gateway REST API built
   from an OpenAPI body (the local cloud serves the API itself), its deployment, stage,
   authorizer and invoke permissions, and CloudWatch alarms (and outputs naming them).
4. Create the stack through the emulator's CloudFormation and wait for it.
"""

from __future__ import annotations

import io
import json
import re
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import yaml  # type: ignore[import-untyped]
from samtranslator.model.exceptions import InvalidDocumentException
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import yaml_parse

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = ROOT / "infra" / "template.yaml"
ARTIFACTS_BUCKET = "fireline-local-artifacts"
# Resource types the local cloud plays itself (or that the emulator cannot create).
PLAYED_LOCALLY = ("AWS::ApiGateway::",)
# CDK::Metadata only reports the CDK version to AWS; CloudFormation creates nothing for it.
# What the local cloud has no use for (it has no X-Ray: its traces go to its log).
SKIPPED = ("AWS::CloudWatch::Alarm", "AWS::CDK::Metadata", "AWS::XRay::SamplingRule")
# What `cdk bootstrap` leaves for a stack synthesized with the default synthesizer: its
# template checks this SSM parameter, and its assets go to a bucket named after the
# account and region. The version is one any current CDK accepts.
BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
BOOTSTRAP_VERSION = "30"


class DeployFailed(Exception):
    """The template cannot be read as one, or its stack did not deploy."""


def _resources(template: Any, template_path: Path) -> dict[str, Any]:
    """The template's Resources, once it is a mapping naming each resource's Type."""
    resources = template.get("Resources") if isinstance(template, dict) else None
    if not isinstance(resources, dict) or not resources:
        raise DeployFailed(f"{template_path}: Resources is not a mapping of resources")
    for logical, resource in resources.items():
        if not isinstance(resource, dict) or not isinstance(resource.get("Type"), str):
            raise DeployFailed(f"{template_path}: Resources.{logical} names no Type")
    return resources


class _OfflinePolicies:
    """samtranslator asks IAM for managed policy ARNs; offline, a name maps to its ARN."""

    class _Any(dict[str, str]):
        def get(self, name: str, default: str | None = None) -> str:  # type: ignore[override]
            return f"arn:aws:iam::aws:policy/{name}"

    def load(self) -> dict[str, str]:
        return self._Any()


@dataclass
class Deployed:
    stack_name: str
    outputs: dict[str, str]
    resources: dict[str, tuple[str, str]]  # logical id -> (type, physical id)
    set_aside: list[str] = field(default_factory=list)  # resources the local cloud plays
    # The definitions of those it plays (API Gateway's), and the stack's parameter values.
    played: dict[str, Any] = field(default_factory=dict)
    parameters: dict[str, str] = field(default_factory=dict)

    def resolved(self, value: Any) -> Any:
        """A played resource's property: a parameter's Ref as its value, else as written."""
        if isinstance(value, dict) and set(value) == {"Ref"}:
            return self.parameters.get(str(value["Ref"]), value)
        return value

    def physical(self, logical: str) -> str:
        return self.resources[logical][1]

    def of_type(self, kind: str) -> dict[str, str]:
        return {logical: pid for logical, (t, pid) in self.resources.items() if t == kind}


def code_zip(source: Path, pattern: str = "*.py") -> bytes:
    """The functions/ folder as a Lambda deployment package (or any folder's files that
    match ``pattern``, zipped as the CDK zips a directory asset)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(source.rglob(pattern)):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, path.relative_to(source).as_posix())
    return buffer.getvalue()


def inline_definitions(template: dict[str, Any], base: Path) -> dict[str, Any]:
    """Each state machine's local DefinitionUri file read into its Definition: the
    transform takes a definition from S3 or inline, never from a local path."""
    for resource in template["Resources"].values():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::Serverless::StateMachine" and "DefinitionUri" in props:
            uri = props["DefinitionUri"]
            if isinstance(uri, str) and not uri.startswith("s3://"):
                props["Definition"] = json.loads((base / props.pop("DefinitionUri")).read_text())
    return template


def package(template: dict[str, Any], s3: Any, base: Path) -> dict[str, Any]:
    """Upload local code and inline local definitions, as `sam package` does."""
    s3.create_bucket(Bucket=ARTIFACTS_BUCKET)
    uploaded: dict[str, str] = {}

    def upload(code_uri: str) -> str:
        if code_uri.startswith("s3://"):
            return code_uri
        if code_uri not in uploaded:
            key = f"code/{abs(hash(code_uri))}.zip"
            s3.put_object(
                Bucket=ARTIFACTS_BUCKET, Key=key, Body=code_zip((base / code_uri).resolve())
            )
            uploaded[code_uri] = f"s3://{ARTIFACTS_BUCKET}/{key}"
        return uploaded[code_uri]

    globals_function = template.get("Globals", {}).get("Function", {})
    if "CodeUri" in globals_function:
        globals_function["CodeUri"] = upload(globals_function["CodeUri"])
    for resource in template["Resources"].values():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::Serverless::Function" and "CodeUri" in props:
            props["CodeUri"] = upload(props["CodeUri"])
    return inline_definitions(template, base)


CDK_TEMPLATE_SUFFIX = ".template.json"


def is_cloud_assembly_template(template_path: Path) -> bool:
    """A template the CDK synthesized: <stack>.template.json, its assets manifest
    (<stack>.assets.json) beside it. Any other name is a SAM template, whatever lies
    beside it."""
    return (
        template_path.name.endswith(CDK_TEMPLATE_SUFFIX)
        and assets_manifest(template_path).is_file()
    )


def assets_manifest(template_path: Path) -> Path:
    stack = template_path.name.removesuffix(CDK_TEMPLATE_SUFFIX)
    return template_path.with_name(f"{stack}.assets.json")


def publish_assets(template_path: Path, session: Any) -> None:
    """Bootstrap the emulator and publish the stack's file assets, as `cdk deploy` does.

    Each destination names its bucket and key with ${AWS::AccountId}, ${AWS::Region} and
    ${AWS::Partition} placeholders, filled in here for the emulator's account."""
    s3, ssm = session.client("s3"), session.client("ssm")
    identity = session.client("sts").get_caller_identity()
    placeholders = {
        "${AWS::AccountId}": identity["Account"],
        "${AWS::Region}": s3.meta.region_name,
        "${AWS::Partition}": "aws",
    }
    ssm.put_parameter(
        Name=BOOTSTRAP_VERSION_PARAMETER, Value=BOOTSTRAP_VERSION, Type="String", Overwrite=True
    )
    manifest = json.loads(assets_manifest(template_path).read_text())
    for asset in manifest.get("files", {}).values():
        source = template_path.parent / asset["source"]["path"]
        zipped = asset["source"].get("packaging") == "zip"
        body = code_zip(source, "*") if zipped else source.read_bytes()
        for destination in asset["destinations"].values():
            bucket, key = destination["bucketName"], destination["objectKey"]
            for placeholder, value in placeholders.items():
                bucket, key = bucket.replace(placeholder, value), key.replace(placeholder, value)
            s3.create_bucket(Bucket=bucket)
            s3.put_object(Bucket=bucket, Key=key, Body=body)


def translate(
    template: dict[str, Any],
    region: str = "us-east-1",
    parameter_values: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """SAM to CloudFormation, offline: managed policies by name, the region given.

    The transform resolves some parameters itself (an API's Auth, such as the
    authorizer's cache TTL), as CloudFormation's transform does with the values a deploy
    is given: ``parameter_values`` are those values, the template's defaults otherwise."""
    translator = Translator(None, Parser(), boto_session=boto3.session.Session(region_name=region))
    policies = _OfflinePolicies().load()
    translated: dict[str, Any] = translator.translate(
        template,
        parameter_values=dict(parameter_values or {}),
        get_managed_policy_map=lambda: policies,
    )
    return translated


def substitute_definitions(translated: dict[str, Any]) -> dict[str, Any]:
    """Apply DefinitionSubstitutions as an Fn::Join of the definition's text and the
    substituted values: the emulator's CloudFormation ignores DefinitionSubstitutions,
    and its Fn::Sub would also rewrite the "$$." context paths the definition uses."""
    for resource in translated["Resources"].values():
        props = resource.get("Properties", {})
        if resource["Type"] != "AWS::StepFunctions::StateMachine":
            continue
        substitutions = props.pop("DefinitionSubstitutions", None)
        definition = props.get("DefinitionString")
        if isinstance(definition, dict) and "Fn::Join" in definition:
            separator, parts = definition["Fn::Join"]
            if all(isinstance(p, str) for p in parts):
                definition = separator.join(parts)
        if substitutions and isinstance(definition, str):
            pieces = re.split(r"\$\{(\w+)\}", definition)  # text, name, text, name, ...
            parts = [p if i % 2 == 0 else substitutions[p] for i, p in enumerate(pieces)]
            props["DefinitionString"] = {"Fn::Join": ["", parts]}
    return translated


def set_aside(translated: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Drop what the local cloud plays itself, and every output or reference to it."""
    resources = translated["Resources"]
    dropped = [
        logical
        for logical, resource in resources.items()
        if resource["Type"].startswith(PLAYED_LOCALLY)
        or resource["Type"] in SKIPPED
        or (
            resource["Type"] == "AWS::Lambda::Permission"
            and "execute-api" in json.dumps(resource.get("Properties", {}))
        )
    ]
    for logical in dropped:
        del resources[logical]
    text = json.dumps(translated.get("Outputs", {}))
    translated["Outputs"] = {
        name: output
        for name, output in translated.get("Outputs", {}).items()
        if not any(d in json.dumps(output) for d in dropped)
    }
    del text
    return translated, dropped


def deploy(
    session: Any,
    *,
    stack_name: str = "fireline-local",
    parameters: dict[str, str] | None = None,
    template_path: Path = TEMPLATE,
    timeout_seconds: float = 120,
) -> Deployed:
    s3 = session.client("s3")
    cloudformation = session.client("cloudformation")
    try:
        text = template_path.read_text()
    except OSError as exc:
        raise DeployFailed(f"{template_path}: {exc.strerror}") from exc
    synthesized_by_cdk = is_cloud_assembly_template(template_path)
    try:
        template = json.loads(text) if synthesized_by_cdk else yaml_parse(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise DeployFailed(f"{template_path}: not a template ({exc})") from exc
    _resources(template, template_path)
    if synthesized_by_cdk:
        publish_assets(template_path, session)
        translated: dict[str, Any] = template
    else:
        packaged = package(template, s3, template_path.parent)
        try:
            translated = translate(packaged, parameter_values=parameters)
        except InvalidDocumentException as exc:
            causes = "; ".join(cause.message for cause in exc.causes)
            raise DeployFailed(f"{template_path}: {causes}") from exc
    played = {
        logical: resource
        for logical, resource in translated["Resources"].items()
        if resource["Type"].startswith(PLAYED_LOCALLY)
    }
    translated, dropped = set_aside(substitute_definitions(translated))
    # A CDK app may have replaced a parameter with its prop's value: only the parameters
    # the template still declares can be given.
    declared = translated.get("Parameters", {})
    cloudformation.create_stack(
        StackName=stack_name,
        TemplateBody=json.dumps(translated),
        Parameters=[
            {"ParameterKey": k, "ParameterValue": v}
            for k, v in (parameters or {}).items()
            if k in declared
        ],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    deadline = time.monotonic() + timeout_seconds
    while True:
        stack = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
        status = stack["StackStatus"]
        if status == "CREATE_COMPLETE":
            break
        if (
            status.endswith("FAILED")
            or status.startswith("ROLLBACK")
            or time.monotonic() > deadline
        ):
            events = cloudformation.describe_stack_events(StackName=stack_name)["StackEvents"]
            reasons = [
                e.get("ResourceStatusReason", "") for e in events if "FAILED" in e["ResourceStatus"]
            ]
            raise DeployFailed(f"stack {stack_name} is {status}: {reasons[:3]}")
        time.sleep(0.2)
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    resources: dict[str, tuple[str, str]] = {}
    paginator = cloudformation.get_paginator("list_stack_resources")
    for page in paginator.paginate(StackName=stack_name):
        for summary in page["StackResourceSummaries"]:
            resources[summary["LogicalResourceId"]] = (
                summary["ResourceType"],
                summary.get("PhysicalResourceId", ""),
            )
    values = {p["ParameterKey"]: p["ParameterValue"] for p in stack.get("Parameters", [])}
    return Deployed(stack_name, outputs, resources, dropped, played, values)
