"""checkov on the template CloudFormation deploys (after the SAM transform): every check
passes, or the template skips it on the resource with the reason it does not apply.

checkov lives in a virtualenv of its own (`make checkov`, and `make test` builds it): it
pins a ``packaging`` older than pytest accepts.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from fireline.local import deploy

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "template.yaml"
CHECKOV = Path(os.environ.get("FIRELINE_CHECKOV", ROOT / ".venv-checkov" / "bin" / "checkov"))
# Every IAM policy (inline or a role's) is scoped to the resources its code calls.
LEAST_PRIVILEGE = "CKV_AWS_111"


def translated_for_checkov() -> dict[str, Any]:
    """The template as CloudFormation receives it. A SAM API's Metadata lands on the
    RestApi it generates, not on the stage: the API's skips are copied to its stages,
    which the checks about stages (caching, access logs) look at."""
    template = yaml_parse(TEMPLATE.read_text())
    template["Globals"]["Function"]["CodeUri"] = "s3://fireline-artifacts/functions.zip"
    out = deploy.translate(deploy.inline_definitions(template, TEMPLATE.parent))
    resources = out["Resources"]
    for resource in resources.values():
        if resource["Type"] != "AWS::ApiGateway::Stage":
            continue
        api = resource["Properties"]["RestApiId"]["Ref"]
        if "Metadata" in resources[api]:
            resource["Metadata"] = resources[api]["Metadata"]
    return out


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not CHECKOV.exists():
        pytest.fail(f"checkov is not installed at {CHECKOV}: run `make checkov`")
    path = tmp_path_factory.mktemp("checkov") / "template.json"
    path.write_text(json.dumps(translated_for_checkov()))
    # --skip-download: checkov runs offline (its policy metadata is a download away).
    done = subprocess.run(
        [
            str(CHECKOV),
            "-f",
            str(path),
            "--framework",
            "cloudformation",
            "-o",
            "json",
            "--compact",
            "--skip-download",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # Exit 1 means failed checks, which the tests below name; anything else is checkov's.
    assert done.returncode in (0, 1), done.stderr[-2000:]
    found: dict[str, Any] = json.loads(done.stdout)
    return found["results"]


def test_every_check_passes_or_is_skipped_in_the_template_with_a_reason(
    report: dict[str, Any],
) -> None:
    # GIVEN the translated template WHEN checkov checks it
    failed = [f"{c['check_id']} {c['resource']}" for c in report["failed_checks"]]
    unexplained = [
        f"{c['check_id']} {c['resource']}"
        for c in report["skipped_checks"]
        if len(c.get("check_result", {}).get("suppress_comment", "").strip()) < 20
    ]
    # THEN nothing fails, and each skip says why the check does not apply
    assert failed == []
    assert unexplained == []
    assert len(report["passed_checks"]) > 100


def test_least_privilege_holds_for_every_role_and_is_never_skipped(
    report: dict[str, Any],
) -> None:
    passed = {c["resource"] for c in report["passed_checks"] if c["check_id"] == LEAST_PRIVILEGE}
    skipped = [c["resource"] for c in report["skipped_checks"] if c["check_id"] == LEAST_PRIVILEGE]
    roles = {
        f"AWS::IAM::Role.{name}"
        for name, resource in translated_for_checkov()["Resources"].items()
        if resource["Type"] == "AWS::IAM::Role" and resource["Properties"].get("Policies")
    }
    # GIVEN every role with inline policies (the functions', the state machine's, the
    # target caller's) THEN CKV_AWS_111 (no write without a resource constraint) passed
    # on each, and no resource skips it
    assert skipped == []
    assert roles and roles <= passed, roles - passed
