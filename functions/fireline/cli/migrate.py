"""``fireline admin migrate listings``: write the listing entries that items stored
before the listings existed lack, so ``GET /workflows`` and ``GET /workflows/{id}/runs``
show older workflows and runs too.

It scans the workflows table a page at a time (each page its own requests, so an
interrupted pass is resumed with ``--cursor``) and writes each definition's catalog entry
(only forward: a newer entry stays) and each run's entry among its workflow's runs. It is
idempotent: running it again writes the same entries and changes nothing. Cost: one read
unit per 4 KB scanned, and a write unit per run and per definition version.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fireline.cli import deployment
from fireline.domain import errors

TABLE_ENV = "FIRELINE_WORKFLOWS_TABLE"
STACK_OUTPUT = "WorkflowsTableName"


def add_migrate_commands(admin: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    migrate = admin.add_parser("migrate", help="bring older data up to this version's layout")
    actions = migrate.add_subparsers(dest="migrate_action", metavar="ACTION", required=True)
    listings = actions.add_parser(
        "listings",
        help="index older workflows and runs for the listings",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    deployment.add_table_options(listings, output=STACK_OUTPUT, env=TABLE_ENV, what="workflows")
    listings.add_argument("--cursor", help="resume an interrupted pass where it stopped")
    listings.set_defaults(run=_listings)


def _listings(args: argparse.Namespace) -> int:
    from fireline.adapters import workflows_dynamodb

    try:
        client, table = deployment.table(args, output=STACK_OUTPUT, env=TABLE_ENV, what="workflows")
        store = workflows_dynamodb.DynamoWorkflowStore(client, table)
        totals: dict[str, Any] = {"scanned": 0, "catalogued": 0, "runs": 0}
        cursor = args.cursor
        while True:
            page = store.backfill_listings(cursor=cursor)
            for name in ("scanned", "catalogued", "runs"):
                totals[name] += getattr(page, name)
            cursor = page.cursor
            if not args.json:
                # Where to resume from if the pass is interrupted after this page.
                print(f"{totals['scanned']} items scanned; resume with --cursor {cursor}")
            if cursor is None:
                break
    except errors.FirelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except deployment.aws_errors() as exc:
        print(f"error: AWS: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(totals))
    else:
        print(
            f"done: {totals['catalogued']} workflows catalogued, "
            f"{totals['runs']} runs indexed, {totals['scanned']} items scanned"
        )
    return 0
