"""The functions' deployment package built on this machine, as `sam build` builds it.

`sam build` installs functions/requirements.txt beside the code for each function; the
construct does it once for all of them (they share one package), with pip's wheels for
the functions' platform (arm64, CPython 3.11), so no Docker is needed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii

# What the template's Globals say: Runtime python3.11, Architectures arm64.
PIP_PLATFORM = ["--platform", "manylinux2014_aarch64", "--implementation", "cp"]
PYTHON_VERSION = "3.11"


@jsii.implements(cdk.ILocalBundling)
class PipBundling:
    """Installs the requirements' wheels into the asset, then copies the package."""

    def __init__(self, source: Path) -> None:
        self.source = source

    def try_bundle(self, output_dir: str, *, image: cdk.DockerImage, **_: Any) -> bool:
        subprocess.run(
            [
                sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                "--target", output_dir, "--requirement", str(self.source / "requirements.txt"),
                *PIP_PLATFORM, "--python-version", PYTHON_VERSION, "--only-binary=:all:",
            ],
            check=True,
        )  # fmt: skip
        for package in sorted(p for p in self.source.iterdir() if (p / "__init__.py").is_file()):
            shutil.copytree(
                package,
                Path(output_dir) / package.name,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                dirs_exist_ok=True,
            )
        return True


def options(source: Path) -> cdk.BundlingOptions:
    # The image is what the CDK would run in Docker if local bundling were refused; the
    # local bundling never refuses (it fails loudly instead).
    return cdk.BundlingOptions(
        image=cdk.DockerImage.from_registry("public.ecr.aws/sam/build-python3.11"),
        local=PipBundling(source),
    )
