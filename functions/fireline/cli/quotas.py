"""``fireline admin quotas``: a tenant's quota use and the operator's overrides.

An operator command, not a tenant's: it writes the deployment's slots table directly with
the operator's AWS credentials (a tenant's API key cannot change its own limits). The
table is named by ``--table`` or found in the stack's outputs (``--stack``, output
``SlotsTableName``); ``--endpoint-url`` points at an emulator (the local cloud's).

- ``show TENANT``: each quota's override (or ``default``) and what the tenant uses;
- ``set TENANT --schedules N ...``: override quotas for the tenant (0: no limit);
- ``clear TENANT [--quota NAME ...]``: back to the deployment's defaults.

An override takes effect at the tenant's next create: the create's condition reads it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from fireline.cli import deployment
from fireline.domain import errors, quota

if TYPE_CHECKING:
    from fireline.adapters import quotas_dynamodb

TABLE_ENV = "FIRELINE_SLOTS_TABLE"
STACK_OUTPUT = "SlotsTableName"


def add_quota_commands(admin: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    quotas = admin.add_parser(
        "quotas",
        help="per-tenant count quotas: use and overrides",
        description="A tenant's count quotas (schedules, active jobs, workflows, versions, "
        "uploads a day): show its use and overrides, set overrides (0: no limit), or clear "
        "them back to the deployment's defaults. A change applies at the tenant's next create.",
    )
    actions = quotas.add_subparsers(dest="quota_action", metavar="ACTION", required=True)

    show = tenant_command(actions, "show", "a tenant's quota use and overrides")
    show.set_defaults(run=deployment.reported(_show))
    change = tenant_command(actions, "set", "override quotas for a tenant (0: no limit)")
    for name in quota.Quota:
        change.add_argument(
            f"--{_flag(name)}",
            dest=name.value,
            metavar="N",
            type=limit_up_to(quota.MAX_QUOTA),
            help=_help(name),
        )
    change.set_defaults(run=deployment.reported(_set))
    clear = tenant_command(actions, "clear", "back to the deployment's defaults")
    clear.add_argument(
        "--quota",
        dest="names",
        action="append",
        choices=[q.value for q in quota.Quota],
        help="only this quota (repeatable; default: every one)",
    )
    clear.set_defaults(run=deployment.reported(_clear))


def tenant_command(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str
) -> argparse.ArgumentParser:
    """A command on one tenant's items of the slots table (``TENANT``, the table's
    options)."""
    parser = actions.add_parser(name, help=help, description=help)
    parser.add_argument("tenant", metavar="TENANT", help="the tenant id")
    deployment.add_table_options(parser, output=STACK_OUTPUT, env=TABLE_ENV, what="slots")
    return parser


def _store(args: argparse.Namespace) -> quotas_dynamodb.DynamoQuotaStore:
    from fireline.adapters import quotas_dynamodb

    client, table = deployment.table(args, output=STACK_OUTPUT, env=TABLE_ENV, what="slots")
    return quotas_dynamodb.DynamoQuotaStore(client, table)


def _show(args: argparse.Namespace) -> int:
    usage = _store(args).usage(args.tenant)
    today = quota.day_of(_now())
    rows: dict[str, dict[str, Any]] = {
        name.value: {
            "limit": usage.overrides.get(name, "default"),
            "used": usage.count(name, today) if name is not quota.Quota.WORKFLOW_VERSIONS else None,
        }
        for name in quota.Quota
    }
    if args.json:
        print(json.dumps({"tenant": args.tenant, "quotas": rows}, indent=2))
        return 0
    table = Table(title=f"quotas of {args.tenant}")
    for column in ("quota", "limit", "used"):
        table.add_column(column)
    for name, row in rows.items():
        used = "per workflow" if row["used"] is None else str(row["used"])
        table.add_row(name, str(row["limit"]), used)
    Console().print(table)
    return 0


def _set(args: argparse.Namespace) -> int:
    chosen = {q: getattr(args, q.value) for q in quota.Quota if getattr(args, q.value) is not None}
    if not chosen:
        raise errors.ValidationError("give at least one quota to set", field="quota")
    store = _store(args)
    for name, limit in chosen.items():
        store.set_limit(args.tenant, name, limit)
    return _show(args)


def _clear(args: argparse.Namespace) -> int:
    store = _store(args)
    for name in args.names or [q.value for q in quota.Quota]:
        store.set_limit(args.tenant, quota.Quota(name), None)
    return _show(args)


def _flag(name: quota.Quota) -> str:
    return name.value.replace("_", "-")


def _help(name: quota.Quota) -> str:
    return f"{name.value.replace('_', ' ')} (default: the deployment's)"


def limit_up_to(maximum: int) -> Callable[[str], int]:
    """An argument's type: a limit, 0 (no limit) to ``maximum``."""

    def limit(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
        if not 0 <= number <= maximum:
            raise argparse.ArgumentTypeError(f"must be 0 (no limit) to {maximum}")
        return number

    return limit


def _now() -> datetime:
    return datetime.now(UTC)
