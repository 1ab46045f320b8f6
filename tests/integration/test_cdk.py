"""The CDK construct: the example app synthesized offline (no AWS credentials), held to the
SAM template (drift), checked by cdk-nag, and deployed into the local cloud through the
same path as the SAM template, where a schedule fires and its job succeeds.

The app is synthesized once per session; the tests read what it wrote into cdk.out.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_ec2 as ec2
from cdk_nag import AwsSolutionsChecks
from samtranslator.yaml_helper import yaml_parse

from fireline.cli import main
from fireline.local import command, deploy, runtime
from fireline.local.cloud import LocalCloud
from fireline_cdk import PROP_PARAMETERS, Fireline, acknowledgements, construct, example
from helpers.local_cloud import TEST_KEYS, a_schedule_fires_and_its_job_succeeds

ROOT = Path(__file__).parents[2]
# What the construct changes in a resource of the template, and why: the code is a CDK
# asset where `sam package` would upload the folder.
CONSTRUCT_OWNED = {"AWS::Lambda::Function": {"Code"}}
# The resource types the drift check must cover, whatever else the template holds.
KEY_TYPES = {
    "AWS::DynamoDB::Table",  # keys, indexes, TTL
    "AWS::SQS::Queue",  # redrive
    "AWS::Lambda::EventSourceMapping",
    "AWS::CloudWatch::Alarm",
    "AWS::IAM::Role",  # statements
    "AWS::Lambda::Function",
}


@dataclass
class Synthesized:
    outdir: Path
    template: dict[str, Any]
    # template parameter -> the value the app's props gave it, as CloudFormation reads it
    values: dict[str, Any]
    app: cdk.App
    # logical ids of the resources the construct's included template made
    scheduler_ids: set[str]


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    # GIVEN the example app, code packaged without its requirements (no pip, no network)
    outdir = tmp_path_factory.mktemp("cdk") / "cdk.out"
    app = example.build(str(outdir), bundle_dependencies=False)
    # WHEN it is synthesized: cdk-nag runs as a validation plugin and fails the synth on
    # any finding that carries no reason
    app.synth()
    stack = app.node.find_child(example.STACK_NAME)
    assert isinstance(stack, example.FirelineStack)
    template = json.loads((outdir / f"{example.STACK_NAME}.template.json").read_text())
    values = {
        name: stack.resolve(value) for name, value in stack.scheduler.parameter_values.items()
    }
    scheduler_ids = {
        stack.resolve(node.logical_id)
        for node in stack.scheduler.template.node.find_all()
        if isinstance(node, cdk.CfnResource)
    }
    return Synthesized(outdir, template, values, app, scheduler_ids)


@pytest.fixture(scope="session")
def sam_translated() -> dict[str, Any]:
    """infra/template.yaml after the SAM transform, as the local cloud and `sam deploy`
    translate it (the code folder's upload left as a placeholder)."""
    template = yaml_parse(deploy.TEMPLATE.read_text())
    template["Globals"]["Function"]["CodeUri"] = "s3://fireline-artifacts/functions.zip"
    deploy.inline_definitions(template, deploy.TEMPLATE.parent)
    return deploy.translate(template)


def _with_values(node: Any, values: dict[str, Any]) -> Any:
    """``node`` with each parameter replaced by its value, as CloudFormation would."""
    if isinstance(node, list):
        return [_with_values(item, values) for item in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Ref"} and node["Ref"] in values:
        return values[node["Ref"]]
    if set(node) == {"Fn::Sub"} and isinstance(node["Fn::Sub"], str):
        text = re.sub(
            r"\$\{(\w+)\}",
            lambda m: str(values[m[1]]) if isinstance(values.get(m[1]), str) else m[0],
            node["Fn::Sub"],
        )
        return {"Fn::Sub": text}
    return {key: _with_values(value, values) for key, value in node.items()}


def _number_agnostic(node: Any) -> Any:
    """``node`` with numbers as strings: CloudFormation reads 90 and "90" alike, and the
    CDK writes a replaced parameter's value as its property's type."""
    if isinstance(node, list):
        return [_number_agnostic(item) for item in node]
    if isinstance(node, dict):
        return {key: _number_agnostic(value) for key, value in node.items()}
    if isinstance(node, bool):
        return node
    return str(node) if isinstance(node, int | float) else node


def _scheduler_resources(synthesized: Synthesized) -> dict[str, dict[str, Any]]:
    """The resources the construct's included template made (not the app's own)."""
    return {
        logical_id: resource
        for logical_id, resource in synthesized.template["Resources"].items()
        if logical_id in synthesized.scheduler_ids
    }


def _drift(sam: dict[str, Any], synthesized: Synthesized) -> list[str]:
    """Every difference between the SAM template's resources (parameters set to the
    app's values) and the construct's, but for what the construct owns."""
    expected = _number_agnostic(_with_values(sam["Resources"], synthesized.values))
    mine_by_id = _number_agnostic(_scheduler_resources(synthesized))
    found = [f"{r}: only in the CDK template" for r in sorted(set(mine_by_id) - set(expected))]
    for logical_id, resource in expected.items():
        if logical_id not in mine_by_id:
            found.append(f"{logical_id}: missing from the CDK template")
            continue
        mine = copy.deepcopy(mine_by_id[logical_id])
        # Metadata annotates, it deploys nothing: the CDK's own (construct paths) and the
        # template's (checkov's reasons) alike.
        mine.pop("Metadata", None)
        resource = {key: value for key, value in resource.items() if key != "Metadata"}
        for owned in CONSTRUCT_OWNED.get(resource["Type"], set()):
            mine["Properties"].pop(owned, None)
            resource = {**resource, "Properties": dict(resource["Properties"])}
            resource["Properties"].pop(owned, None)
        for key in sorted(set(resource) | set(mine)):
            if key == "Properties":
                props, my_props = resource.get(key, {}), mine.get(key, {})
                found += [
                    f"{logical_id}.{name}: {props.get(name)!r} != {my_props.get(name)!r}"
                    for name in sorted(set(props) | set(my_props))
                    if props.get(name) != my_props.get(name)
                ]
            elif resource.get(key) != mine.get(key):
                found.append(f"{logical_id} {key}: {resource.get(key)!r} != {mine.get(key)!r}")
    return found


# ---------------------------------------------------------------- drift


def test_cdk_template_has_the_sam_templates_resources_by_type_and_count(
    synthesized: Synthesized, sam_translated: dict[str, Any]
) -> None:
    # THEN the construct made exactly the SAM template's resources, type by type
    sam_types = Counter(r["Type"] for r in sam_translated["Resources"].values())
    cdk_types = Counter(r["Type"] for r in _scheduler_resources(synthesized).values())

    assert cdk_types == sam_types
    assert set(sam_types) >= KEY_TYPES


def test_every_resource_matches_the_sam_template_with_the_apps_parameter_values(
    synthesized: Synthesized, sam_translated: dict[str, Any]
) -> None:
    # THEN every property of every resource (keys, indexes, redrive, event source
    # mappings, alarms, IAM statements, ...) is the SAM template's, its parameters set to
    # the app's props; only the functions' code location differs
    assert _drift(sam_translated, synthesized) == []


def test_the_drift_check_sees_a_changed_key_property(
    synthesized: Synthesized, sam_translated: dict[str, Any]
) -> None:
    # GIVEN the SAM template with one queue's redrive changed
    changed = copy.deepcopy(sam_translated)
    changed["Resources"]["DefaultQueue"]["Properties"]["RedrivePolicy"]["maxReceiveCount"] = 9

    # WHEN it is compared with the construct's THEN exactly that difference is reported
    (difference,) = _drift(changed, synthesized)
    assert difference.startswith("DefaultQueue.RedrivePolicy: ")


def test_props_replace_their_template_parameters_with_the_apps_values(
    synthesized: Synthesized,
) -> None:
    resources = synthesized.template["Resources"]
    worker = resources["DefaultWorkerFunction"]["Properties"]
    stage = next(r for r in resources.values() if r["Type"] == "AWS::ApiGateway::Stage")
    (throttle,) = stage["Properties"]["MethodSettings"]

    # THEN the parameters the app set are gone, their values in place
    assert {"TenantConcurrencyLimit", "AlarmTopicArn", "WorkerMemorySize"}.isdisjoint(
        synthesized.template["Parameters"]
    )
    assert worker["MemorySize"] == 1024
    assert worker["Environment"]["Variables"]["TENANT_CONCURRENCY_LIMIT"] == "20"
    # The worker's batch and in-flight bound no prop sets: still the template's parameters
    # (`parameters=` sets them by name), the batching window with them.
    assert worker["Environment"]["Variables"]["WORKER_IN_FLIGHT"] == {"Ref": "WorkerInFlight"}
    mappings = {
        r["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]: r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping"
        and r["Properties"]["FunctionName"] == {"Ref": "DefaultWorkerFunction"}
    }
    assert sorted(mappings) == ["DefaultBurstQueue", "DefaultQueue"]
    jobs, bursts = mappings["DefaultQueue"], mappings["DefaultBurstQueue"]
    assert (jobs["BatchSize"], jobs["MaximumBatchingWindowInSeconds"]) == (
        {"Ref": "WorkerBatchSize"},
        3,
    )
    assert (bursts["BatchSize"], bursts["MaximumBatchingWindowInSeconds"]) == (
        {"Ref": "BurstBatchSize"},
        1,
    )
    assert resources["StartLagAlarm"]["Properties"]["Threshold"] == {"Fn::Sub": "5000"}
    assert resources["FunctionLogGroup"]["Properties"]["RetentionInDays"] == 90
    assert (throttle["ThrottlingRateLimit"], throttle["ThrottlingBurstLimit"]) == (200, 400)
    api = resources["ApiFunction"]["Properties"]["Environment"]["Variables"]
    assert (api["QUOTA_SCHEDULES"], api["QUOTA_UPLOADS_PER_DAY"]) == ("5000", "100")
    assert api["QUOTA_WORKFLOWS"] == {"Ref": "TenantWorkflowQuota"}  # no prop set it
    # AND the alarms notify the app's topic, which a condition cannot name (CloudFormation
    # evaluates conditions before any resource exists): there it reads as set
    topic = synthesized.values["AlarmTopicArn"]
    assert resources[topic["Ref"]]["Type"] == "AWS::SNS::Topic"
    assert resources["TickerStalledAlarm"]["Properties"]["AlarmActions"] == {
        "Fn::If": ["HasAlarmTopic", [topic], {"Ref": "AWS::NoValue"}]
    }
    assert synthesized.template["Conditions"]["HasAlarmTopic"] == {
        "Fn::Not": [{"Fn::Equals": [construct.SET_AT_DEPLOY, ""]}]
    }
    # AND the parameters no prop set are still there for `cdk deploy --parameters`
    assert {"AuthorizerCacheTtlSeconds", "DueShards"} <= set(synthesized.template["Parameters"])


def test_every_prop_names_a_parameter_of_the_template(sam_translated: dict[str, Any]) -> None:
    assert set(PROP_PARAMETERS.values()) - set(sam_translated["Parameters"]) == set()


# ---------------------------------------------------------------- cdk-nag


def test_cdk_nag_finds_nothing_unacknowledged(synthesized: Synthesized) -> None:
    # WHEN AwsSolutions checks the synthesized app
    report = AwsSolutionsChecks().validate_scope(synthesized.app)

    # THEN it passes: every finding the template has is acknowledged with its reason
    assert [(v.rule_name, len(v.violating_resources)) for v in report.violations] == []
    assert report.success


def _acknowledged(app: cdk.App) -> dict[tuple[str, str], str]:
    """(construct path, finding) -> reason, for every acknowledgement in the app.

    aws-cdk-lib records an id of no validator it knows (cdk-nag's) as
    ``Annotation::<id>``; cdk-nag reads it without the prefix, and so does this."""
    return {
        (node.node.path, re.sub(r"^annotation::", "", finding, flags=re.IGNORECASE)): reason
        for node in app.node.find_all()
        for entry in node.node.metadata
        if entry.type == cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
        for finding, reason in entry.data.items()
    }


def _stale(acknowledged: Iterable[tuple[str, str]], findings: set[tuple[str, str]]) -> list[str]:
    """The acknowledgements that no finding on their construct or below it matches."""
    return sorted(
        f"{path}: {finding}"
        for path, finding in acknowledged
        if not any(
            found == finding and (at == path or at.startswith(f"{path}/")) for at, found in findings
        )
    )


@pytest.fixture(scope="session")
def findings(synthesized: Synthesized) -> set[tuple[str, str]]:
    """(construct path, finding) for everything the example app trips with no
    acknowledgement: cdk-nag's AwsSolutions on the app built again without them, and the
    template validator's from the synth's report, where acknowledged findings are kept."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(acknowledgements, "_ack", lambda scope, finding, reason: None)
        bare = example.build(bundle_dependencies=False)
    report = AwsSolutionsChecks().validate_scope(bare)
    found = {
        (resource.construct_path, violation.rule_name)
        for violation in report.violations
        for resource in violation.violating_resources
    }
    validation = json.loads((synthesized.outdir / "validation-report.json").read_text())
    for plugin in validation["pluginReports"]:
        if plugin["pluginName"] != "CloudFormation Validate":
            continue
        for violation in plugin["violations"] + plugin.get("suppressedViolations", []):
            for at in violation["violatingConstructs"]:
                found.add(
                    (at["constructPath"], f"CloudFormation-Validate::{violation['ruleName']}")
                )
    return found


def test_every_acknowledged_finding_carries_a_reason(synthesized: Synthesized) -> None:
    acknowledged = _acknowledged(synthesized.app)

    assert any("AwsSolutions-IAM5" in finding for _, finding in acknowledged)
    assert [finding for finding, reason in acknowledged.items() if len(reason) < 40] == []


def test_every_acknowledgement_has_a_finding_it_silences(
    synthesized: Synthesized, findings: set[tuple[str, str]]
) -> None:
    # THEN no acknowledgement outlives its finding: each one, on its construct or below it,
    # meets a finding cdk-nag or the template validator reports without it
    assert ("Fireline", "CloudFormation-Validate::W8003") in findings
    assert _stale(_acknowledged(synthesized.app), findings) == []


def test_the_stale_check_sees_an_acknowledgement_nothing_trips(
    synthesized: Synthesized, findings: set[tuple[str, str]]
) -> None:
    # GIVEN the app's acknowledgements and one more, for a rule the table does not trip
    table = f"{example.STACK_NAME}/Scheduler/Template/LeasesTable"
    acknowledged = {*_acknowledged(synthesized.app), (table, "AwsSolutions-S1")}

    # WHEN they are held to the findings THEN exactly that one is reported
    assert _stale(acknowledged, findings) == [f"{table}: AwsSolutions-S1"]


def test_an_app_that_sets_the_tenants_role_path_has_its_wildcard_acknowledged() -> None:
    # GIVEN an app whose tenants' target roles live under a path of its own
    app = cdk.App()
    stack = cdk.Stack(app, "Scheduling")
    Fireline(
        stack,
        "Scheduler",
        parameters={"TenantTargetRolePath": "team/jobs/"},
        bundle_dependencies=False,
    )
    # WHEN AwsSolutions checks it
    report = AwsSolutionsChecks().validate_scope(app)

    # THEN the target caller role may assume only roles under that path, and the
    # acknowledgement follows the value the parameter was given
    caller = assertions.Template.from_stack(stack).find_resources("AWS::IAM::Role")[
        "TargetCallerRole"
    ]
    (policy,) = caller["Properties"]["Policies"]
    assert [s["Resource"] for s in policy["PolicyDocument"]["Statement"]] == [
        {"Fn::Sub": "arn:${AWS::Partition}:iam::*:role/team/jobs/*"}
    ]
    assert [(v.rule_name, len(v.violating_resources)) for v in report.violations] == []


# ---------------------------------------------------------------- props and template changes


def test_a_prop_out_of_its_parameters_bounds_is_refused_by_name() -> None:
    stack = cdk.Stack(cdk.App())

    with pytest.raises(ValueError, match=r"tenant_concurrency_limit must be at most 10000"):
        Fireline(stack, "Scheduler", tenant_concurrency_limit=20_000, bundle_dependencies=False)
    with pytest.raises(ValueError, match=r"NoSuchParameter: the template has no parameter"):
        Fireline(stack, "Other", parameters={"NoSuchParameter": "1"}, bundle_dependencies=False)


def test_removal_policy_and_vpc_reach_the_retained_resources_and_the_target_callers(
    sam_translated: dict[str, Any],
) -> None:
    # GIVEN a Fireline for a development stack: destroyed with it, workers in a VPC
    stack = cdk.Stack(cdk.App(), "Dev")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    Fireline(
        stack,
        "Scheduler",
        removal_policy=cdk.RemovalPolicy.DESTROY,
        vpc=vpc,
        bundle_dependencies=False,
    )

    # WHEN it is synthesized
    template = assertions.Template.from_stack(stack).to_json()
    resources = template["Resources"]

    # THEN what the template retains is deleted with the stack, the rest unchanged
    sam_resources = sam_translated["Resources"]
    retained = {name for name, r in sam_resources.items() if r.get("DeletionPolicy") == "Retain"}
    assert {"SchedulesTable", "DefinitionsBucket", "FunctionLogGroup"} <= retained
    assert {resources[name]["DeletionPolicy"] for name in retained} == {"Delete"}
    assert resources["LeasesTable"]["DeletionPolicy"] == "Delete"
    # AND the retained tables' deletion protection is off: CloudFormation's DeleteTable
    # would be refused by it, and the stack's deletion fail
    protected = {
        name
        for name, r in sam_resources.items()
        if r["Type"] == "AWS::DynamoDB::Table" and r["Properties"].get("DeletionProtectionEnabled")
    }
    assert protected and protected <= retained
    assert {resources[name]["Properties"]["DeletionProtectionEnabled"] for name in protected} == {
        False
    }
    # AND the functions that call targets join the VPC's private subnets with a new
    # security group; no other function does
    joined = {
        name
        for name, r in resources.items()
        if r["Type"] == "AWS::Lambda::Function" and "VpcConfig" in r["Properties"]
    }
    assert joined == {"DefaultWorkerFunction", "ShortWorkerFunction", "LongRunnerFunction"}
    vpc_config = resources["LongRunnerFunction"]["Properties"]["VpcConfig"]["Fn::If"]
    subnets = vpc_config[1]["SubnetIds"]
    assert vpc_config[0] == "HasWorkerVpc" and len(subnets) == 2
    assert all(resources[s["Ref"]]["Type"] == "AWS::EC2::Subnet" for s in subnets)
    (group,) = vpc_config[1]["SecurityGroupIds"]
    assert resources[group["Fn::GetAtt"][0]]["Type"] == "AWS::EC2::SecurityGroup"


def test_a_template_change_reaches_the_construct_without_an_edit(tmp_path: Path) -> None:
    # GIVEN a copy of the template with a new parameter and a queue that uses it
    (tmp_path / "infra").mkdir()
    for folder in ("functions", "statemachines"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    text = deploy.TEMPLATE.read_text().replace(
        "Resources:\n",
        "Resources:\n"
        "  ExtraQueue:\n"
        "    Type: AWS::SQS::Queue\n"
        "    Properties:\n"
        "      MessageRetentionPeriod: !Ref ExtraRetention\n",
        1,
    )
    text = text.replace(
        "Parameters:\n", "Parameters:\n  ExtraRetention:\n    Type: Number\n    Default: 60\n", 1
    )
    changed = tmp_path / "infra" / "template.yaml"
    changed.write_text(text)

    # WHEN a Fireline is built from it, the new parameter set by name
    stack = cdk.Stack(cdk.App(), "Changed")
    Fireline(
        stack,
        "Scheduler",
        template_file=changed,
        parameters={"ExtraRetention": 120},
        bundle_dependencies=False,
    )

    # THEN the queue is there with the value
    queue = assertions.Template.from_stack(stack).to_json()["Resources"]["ExtraQueue"]
    assert queue["Properties"] == {"MessageRetentionPeriod": 120}


def test_the_authorizer_cache_prop_reaches_the_api_which_the_sam_transform_resolves() -> None:
    # GIVEN a Fireline whose authorizer caches decisions 60 s (a revoked key's longest life)
    stack = cdk.Stack(cdk.App(), "ShortCache")
    Fireline(stack, "Scheduler", authorizer_cache_ttl_seconds=60, bundle_dependencies=False)
    # THEN the API's authorizer says so (the transform resolved it at synth)
    resources = assertions.Template.from_stack(stack).to_json()["Resources"]
    definitions = resources["FirelineApi"]["Properties"]["Body"]["securityDefinitions"]
    authorizer = definitions["ApiKeyAuthorizer"]["x-amazon-apigateway-authorizer"]
    assert authorizer["authorizerResultTtlInSeconds"] == 60


# ---------------------------------------------------------------- deployed


@pytest.fixture(scope="module")
def cdk_cloud(
    synthesized: Synthesized, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCloud]:
    # GIVEN the synthesized template deployed into the local cloud by `fireline local
    # --template cdk.out/Fireline.template.json`'s own options: assets published, stack
    # created (named apart from the SAM stack an earlier test left in the same emulator)
    keys = [f"--key={key}={tenant}" for key, tenant in TEST_KEYS.items()]
    template = synthesized.outdir / f"{example.STACK_NAME}.template.json"
    log = tmp_path_factory.mktemp("cdk-local") / "local.log"
    argv = ["local", f"--template={template}", "--port=0", "--stack-name=fireline-cdk"]
    options = command.options_from(
        main.build_parser().parse_args([*argv, f"--log-file={log}", *keys])
    )
    assert options.template_path == template
    with LocalCloud(options) as started:
        yield started


def _conditions_that_hold(template: dict[str, Any], values: dict[str, Any]) -> set[str]:
    """The template's conditions that hold with ``values`` for its parameters (the rest
    at their defaults), as CloudFormation evaluates them; a value known only at deploy
    time (a reference) reads as set."""
    parameters: dict[str, Any] = {}
    for name, declared in template.get("Parameters", {}).items():
        value = values.get(name, declared.get("Default", ""))
        if declared["Type"] == "CommaDelimitedList" and isinstance(value, str):
            value = value.split(",")
        parameters[name] = construct.SET_AT_DEPLOY if isinstance(value, dict) else value

    def evaluate(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        ((function, argument),) = node.items()
        operations = {
            "Ref": lambda: parameters[argument],
            "Condition": lambda: evaluate(template["Conditions"][argument]),
            "Fn::Not": lambda: not evaluate(argument[0]),
            "Fn::And": lambda: all(evaluate(a) for a in argument),
            "Fn::Or": lambda: any(evaluate(a) for a in argument),
            "Fn::Equals": lambda: str(evaluate(argument[0])) == str(evaluate(argument[1])),
            "Fn::Join": lambda: argument[0].join(map(str, evaluate(argument[1]))),
        }
        return operations[function]()

    return {name for name, condition in template["Conditions"].items() if evaluate(condition)}


def test_the_cdk_stack_deploys_into_the_local_cloud_with_the_sam_stacks_resources(
    cdk_cloud: LocalCloud, sam_translated: dict[str, Any], synthesized: Synthesized
) -> None:
    assert cdk_cloud.deployed is not None
    deployed = set(cdk_cloud.deployed.resources) | set(cdk_cloud.deployed.set_aside)
    holds = _conditions_that_hold(sam_translated, synthesized.values)
    expected = {
        name
        for name, resource in sam_translated["Resources"].items()
        if resource.get("Condition") in {None, *holds}
    }

    # THEN the stack holds exactly the SAM template's resources whose conditions hold for
    # the app's props (two ticker groups: group 1's rule, not group 2's), each created or
    # played by the local cloud
    assert "TickerGroup1Rule" in expected and "TickerGroup2Rule" not in expected
    assert deployed & synthesized.scheduler_ids == expected
    # AND the local cloud runs one ticker process per rule that starts it, so each ticker
    # group's invocation runs under its own lease, as two reserved slots per group allow
    assert cdk_cloud.hosts["TickerFunction"].spec.concurrency == 2
    # AND each function runs with the memory the template gives it (the ticker's default
    # is a full vCPU), the app's props applied
    memory = {logical: host.spec.memory_mb for logical, host in cdk_cloud.hosts.items()}
    assert (memory["TickerFunction"], memory["DefaultWorkerFunction"]) == (1769, 1024)
    assert memory["WorkflowFunction"] == 2048
    # AND the functions run the handlers the template names, with the app's settings
    lambdas = cdk_cloud.client("lambda")
    worker = lambdas.get_function_configuration(
        FunctionName=cdk_cloud.deployed.physical("DefaultWorkerFunction")
    )
    assert worker["Handler"] == "fireline.handlers.worker.handler"
    assert worker["Environment"]["Variables"]["TENANT_CONCURRENCY_LIMIT"] == "20"


def test_on_the_cdk_stack_a_schedule_fires_and_its_job_succeeds(cdk_cloud: LocalCloud) -> None:
    a_schedule_fires_and_its_job_succeeds(cdk_cloud)


def test_every_function_runs_the_code_asset_of_the_functions_folder(
    synthesized: Synthesized, sam_translated: dict[str, Any]
) -> None:
    # GIVEN the zip asset the assets manifest lists
    manifest = json.loads((synthesized.outdir / f"{example.STACK_NAME}.assets.json").read_text())
    (asset,) = [a for a in manifest["files"].values() if a["source"].get("packaging") == "zip"]
    (destination,) = asset["destinations"].values()
    folder = synthesized.outdir / asset["source"]["path"]
    functions = [
        r["Properties"]
        for r in _scheduler_resources(synthesized).values()
        if r["Type"] == "AWS::Lambda::Function"
    ]

    # THEN it holds the package (with bundling off, alone), and every function runs it
    assert (folder / "fireline" / "handlers" / "worker.py").is_file()
    assert not list(folder.rglob("__pycache__"))
    sam_functions = [
        r for r in sam_translated["Resources"].values() if r["Type"] == "AWS::Lambda::Function"
    ]
    assert len(functions) == len(sam_functions) > 0
    assert {f["Code"]["S3Key"] for f in functions} == {destination["objectKey"]}


def test_on_the_cdk_stack_the_gateway_applies_the_apps_usage_plan(cdk_cloud: LocalCloud) -> None:
    # the example app's usage_plan=UsagePlan(rate_limit=20, burst_limit=40), no quota; the
    # authorizer's cache at the template's default
    assert cdk_cloud.gateway.usage_plan == runtime.UsagePlan(rate=20, burst=40, daily_quota=None)
    assert cdk_cloud.gateway.cache_seconds == 300
