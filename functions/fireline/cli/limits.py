"""``fireline admin limits``: a tenant's concurrency limit override (jobs run at once).

An operator command, as ``fireline admin quotas``: it writes the deployment's slots table
with the operator's AWS credentials, found by ``--table``, ``--stack`` (output
``SlotsTableName``) or ``$FIRELINE_SLOTS_TABLE``.

- ``show TENANT``: the tenant's override (or ``default``), and whether the deployment's
  register of overrides is built;
- ``set TENANT N``: at most N jobs of the tenant at once (0: no limit);
- ``clear TENANT``: back to the deployment's ``TenantConcurrencyLimit``.

Each change writes the tenant's override and its entry in the register of overrides
together (one transaction). Set overrides only this way: an item written by hand is not
in the register, and a worker that trusts the register would not see it. A limit set on
a tenant that ran without one applies to the runs that start up to 10 s after the change
(the workers' copy of the register); a limit lifted or changed otherwise applies at once.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from fireline.cli import deployment, quotas
from fireline.domain import quota

if TYPE_CHECKING:
    from fireline.adapters import slots_dynamodb


def add_limit_commands(admin: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    limits = admin.add_parser(
        "limits",
        help="per-tenant concurrency limit overrides",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = limits.add_subparsers(dest="limit_action", metavar="ACTION", required=True)
    show = quotas.tenant_command(actions, "show", "a tenant's concurrency limit override")
    show.set_defaults(run=deployment.reported(_show))
    change = quotas.tenant_command(
        actions, "set", "at most N jobs of the tenant at once (0: no limit)"
    )
    change.add_argument("limit", metavar="N", type=quotas.limit_up_to(quota.MAX_LIMIT))
    change.set_defaults(run=deployment.reported(_set))
    clear = quotas.tenant_command(actions, "clear", "back to the deployment's default limit")
    clear.set_defaults(run=deployment.reported(_clear))


def store(args: argparse.Namespace) -> slots_dynamodb.DynamoSlotStore:
    from fireline.adapters import slots_dynamodb

    client, table = deployment.table(
        args, output=quotas.STACK_OUTPUT, env=quotas.TABLE_ENV, what="slots"
    )
    return slots_dynamodb.DynamoSlotStore(client, table)


def _show(args: argparse.Namespace) -> int:
    slots = store(args)
    _, override = slots.held(args.tenant)
    registered = slots.overrides() is not None
    if args.json:
        shown = {"tenant": args.tenant, "limit": override, "register_built": registered}
        print(json.dumps(shown, indent=2))
        return 0
    limit = "default" if override is None else ("no limit" if override == 0 else str(override))
    print(f"{args.tenant}: {limit}")
    if not registered:
        print("the register of overrides is not built yet: fireline admin migrate overrides")
    return 0


def _set(args: argparse.Namespace) -> int:
    store(args).set_limit(args.tenant, args.limit)
    return _show(args)


def _clear(args: argparse.Namespace) -> int:
    store(args).set_limit(args.tenant, None)
    return _show(args)
