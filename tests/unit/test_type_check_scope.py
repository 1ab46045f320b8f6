"""mypy reads aws-cdk-lib only where fireline_cdk imports it (pyproject.toml says why):
every aws_cdk module the construct imports must be on the list mypy follows, or its names
would type as Any and strict mode would check nothing about them."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "infra" / "cdk" / "fireline_cdk"


def _imported(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
            # `from aws_cdk import aws_sns` imports the submodule aws_cdk.aws_sns.
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def _followed() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    return {
        module
        for override in config["overrides"]
        if override.get("follow_imports") == "normal"
        for module in override["module"]
    }


def test_mypy_follows_every_aws_cdk_module_the_construct_imports() -> None:
    # GIVEN the aws_cdk modules fireline_cdk imports (a name imported from a module that is
    # not itself a module, like aws_cdk.App, is not a module to follow)
    imported = set().union(*(_imported(path) for path in sorted(PACKAGE.glob("*.py"))))
    cdk_modules = {
        name
        for name in imported
        if name == "aws_cdk" or (name.startswith("aws_cdk.") and name.split(".")[1].islower())
    }

    # THEN mypy follows each of them, and nothing it no longer imports
    assert "aws_cdk.cloudformation_include" in cdk_modules
    assert _followed() == cdk_modules
