"""The domain is pure: time, randomness, ids and configuration come in as arguments."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

DOMAIN = Path(__file__).parents[2] / "functions" / "fireline" / "domain"
FORBIDDEN_MODULES = {"boto3", "botocore", "os", "uuid", "random", "time", "socket", "urllib"}
# Parts of those that only compute on their arguments (URL text).
PURE_MODULES = {"urllib.parse"}
# Calls that read the clock, make ids or read configuration. (Parameters named `now` are
# what we want: the instant comes in as an argument.)
FORBIDDEN_CALLS = {"now", "utcnow", "today", "uuid4", "uuid1", "getenv"}
MODULES = sorted(DOMAIN.glob("*.py"))


def test_there_is_a_domain_to_check() -> None:
    names = {path.stem for path in MODULES}
    assert {"schedule", "occurrence", "lease", "retry", "errors"} <= names


def forbidden(module: str) -> bool:
    return module not in PURE_MODULES and module.split(".")[0] in FORBIDDEN_MODULES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_domain_module_imports_no_io_and_reads_no_clock(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    offences: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            offences += [a.name for a in node.names if forbidden(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if forbidden(node.module):
                offences.append(node.module)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in FORBIDDEN_CALLS:
                offences.append(f"line {node.lineno}: {name}()")
        elif isinstance(node, ast.Attribute) and node.attr == "environ":
            offences.append(f"line {node.lineno}: .environ")
    assert offences == []


def test_domain_imports_with_boto3_and_environment_unavailable() -> None:
    # GIVEN a Python where importing boto3/botocore fails and os.environ is empty
    code = (
        "import sys; sys.modules['boto3'] = None; sys.modules['botocore'] = None\n"
        "import importlib, pkgutil, fireline.domain as d\n"
        "for m in pkgutil.iter_modules(d.__path__):\n"
        "    importlib.import_module(f'fireline.domain.{m.name}')\n"
        "print('ok')\n"
    )
    # WHEN every domain module is imported
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={}, check=False
    )
    # THEN they all load
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
