"""Where an operator command finds one of the deployment's tables: ``--table`` (or an
environment variable), else the output of the CloudFormation stack ``--stack`` names;
``--endpoint-url`` points at an emulator (the local cloud's). The operator's own AWS
credentials are used (boto3's usual chain)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from fireline.domain import errors


def add_table_options(parser: argparse.ArgumentParser, *, output: str, env: str, what: str) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--table",
        default=os.environ.get(env) or None,
        help=f"the deployment's {what} table (default: ${env})",
    )
    where.add_argument("--stack", help=f"a stack whose {output} output names it")
    parser.add_argument("--endpoint-url", help="an emulator's URL (the local cloud's)")
    parser.add_argument("--region", default=None, help="the deployment's AWS region")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def aws_errors() -> tuple[type[Exception], ...]:
    """What boto3 raises when AWS refuses or cannot be reached (imported only when an
    operator command runs: the tenant commands start without boto3)."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (BotoCoreError, ClientError)


def table(args: argparse.Namespace, *, output: str, env: str, what: str) -> tuple[Any, str]:
    """A DynamoDB client and the table's name, from ``add_table_options``' arguments."""
    import boto3

    session = boto3.session.Session(region_name=args.region)
    name = args.table
    if name is None and args.stack is not None:
        cloudformation = session.client("cloudformation", endpoint_url=args.endpoint_url)
        (stack,) = cloudformation.describe_stacks(StackName=args.stack)["Stacks"]
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        name = outputs.get(output)
    if not name:
        raise errors.ValidationError(
            f"name the {what} table: --table, --stack or ${env}", field="table"
        )
    return session.client("dynamodb", endpoint_url=args.endpoint_url), name


def reported(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A refused value or an AWS error is a message and exit code 1, not a traceback."""

    def guarded(args: argparse.Namespace) -> int:
        refused: tuple[type[Exception], ...] = (errors.FirelineError, *aws_errors())
        try:
            return run(args)
        except refused as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1

    return guarded
