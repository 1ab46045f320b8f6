"""How every ``fireline admin`` command reaches a deployment: one set of options.

- ``--stack`` (default ``$FIRELINE_STACK``, else ``fireline``): the CloudFormation stack
  whose outputs name the resources;
- ``--endpoint-url`` (default ``$FIRELINE_ENDPOINT_URL``): an emulator instead of AWS (the
  local cloud prints its URL at start). An emulator takes any credentials and serves one
  region, so when the AWS configuration has none, the emulator's are filled in;
- ``--region``: the deployment's region (default: the AWS configuration's).

A command on one table also takes ``--table`` (or an environment variable) to name it
instead of the stack's output. Against AWS the operator's own credentials are used
(boto3's usual chain).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fireline.domain import errors

if TYPE_CHECKING:
    import boto3

STACK_ENV = "FIRELINE_STACK"
ENDPOINT_ENV = "FIRELINE_ENDPOINT_URL"
DEFAULT_STACK = "fireline"
# What the local cloud's emulator serves and accepts (fireline.local.cloud).
EMULATOR_REGION = "us-east-1"
EMULATOR_CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}


def add_deployment_options(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """``--stack``, ``--endpoint-url`` and ``--region``, in a group of their own."""
    where = parser.add_argument_group("deployment")
    where.add_argument(
        "--stack",
        default=os.environ.get(STACK_ENV) or DEFAULT_STACK,
        help=f"CloudFormation stack whose outputs name the resources (default: ${STACK_ENV}, "
        f"else {DEFAULT_STACK}; the local cloud's is fireline-local)",
    )
    where.add_argument(
        "--endpoint-url",
        metavar="URL",
        default=os.environ.get(ENDPOINT_ENV) or None,
        help=f"an emulator instead of AWS: the URL the local cloud prints (default: "
        f"${ENDPOINT_ENV}); its region and dummy credentials are filled in",
    )
    where.add_argument("--region", help="AWS region (default: the AWS configuration's)")
    return where


def add_table_options(parser: argparse.ArgumentParser, *, output: str, env: str, what: str) -> None:
    """The deployment's options, ``--table`` to name the table directly, and ``--json``."""
    where = add_deployment_options(parser)
    where.add_argument(
        "--table",
        default=os.environ.get(env) or None,
        help=f"the {what} table's name instead of the stack's {output} output (default: ${env})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def aws_errors() -> tuple[type[Exception], ...]:
    """What boto3 raises when AWS refuses or cannot be reached (imported only when an
    operator command runs: the tenant commands start without boto3)."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (BotoCoreError, ClientError)


def session(args: argparse.Namespace) -> boto3.session.Session:
    """A session for the deployment the options name: on an emulator, its region and
    dummy credentials where the AWS configuration has none; on AWS, a region is needed."""
    import boto3

    found = boto3.session.Session(region_name=args.region)
    if args.endpoint_url:
        credentials = {} if found.get_credentials() is not None else EMULATOR_CREDENTIALS
        return boto3.session.Session(
            region_name=found.region_name or EMULATOR_REGION,
            **credentials,  # type: ignore[arg-type]
        )
    if found.region_name is None:
        raise errors.ValidationError(
            "name the deployment's region: --region, or $AWS_DEFAULT_REGION "
            "(--endpoint-url for the local cloud)",
            field="region",
        )
    return found


def client(args: argparse.Namespace, found: boto3.session.Session, service: str) -> Any:
    return found.client(service, endpoint_url=args.endpoint_url)  # type: ignore[call-overload]


def stack_outputs(args: argparse.Namespace, found: boto3.session.Session) -> dict[str, str]:
    """The outputs of the stack ``--stack`` names; a stack that is not there is named."""
    from botocore.exceptions import ClientError

    try:
        stacks = client(args, found, "cloudformation").describe_stacks(StackName=args.stack)
    except ClientError as exc:
        where = f" at {args.endpoint_url}" if args.endpoint_url else ""
        raise errors.ValidationError(
            f"no stack {args.stack!r}{where} to read outputs from ({exc}): name it with "
            "--stack (the local cloud's: --stack fireline-local --endpoint-url URL)",
            field="stack",
        ) from exc
    (stack,) = stacks["Stacks"]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def table(args: argparse.Namespace, *, output: str, env: str, what: str) -> tuple[Any, str]:
    """A DynamoDB client and the table's name, from ``add_table_options``' arguments."""
    found = session(args)
    name = args.table or stack_outputs(args, found).get(output)
    if not name:
        raise errors.ValidationError(
            f"stack {args.stack!r} has no {output} output: name the {what} table with "
            f"--table or ${env}",
            field="table",
        )
    return client(args, found, "dynamodb"), name


def reported(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A refused value or an AWS error is a message and exit code 1, not a traceback."""

    def guarded(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except errors.FirelineError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except aws_errors() as exc:
            print(f"error: AWS: {exc}", file=sys.stderr)
            return 1

    return guarded
