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

from fireline.cli import common, deployment, limits, quotas
from fireline.domain import errors

OVERRIDES_DOC = """``fireline admin migrate overrides``: build the deployment's register of tenant
limit overrides from the overrides themselves (one item per tenant in the slots table),
so workers learn which tenants run without a limit from one read every 10 s instead of
reading each tenant's slots on every run.

Until the register is built (a deployment whose overrides were set before it existed),
every run reads its tenant's slots and override as before: nothing is lost, only the
saving waits. The sweep builds it within five minutes of a deploy by itself; this
command does it now. It is idempotent (a built register is left as it is) and safe
beside ``fireline admin limits`` (a change made while it runs makes it start again).
Cost: one read unit per 4 KB of the slots table scanned, once.
"""

SCHEDULE_KEYS_DOC = """``fireline admin migrate schedule-keys``: move each schedule written before a
tenant's schedules were spread over partition keys (all on the tenant id) to its key
(fireline.domain.model.tenant_key), so a large tenant's writes are not capped by one key.

Run it once, right after deploying the version that spreads them. Until a schedule is
moved, the API does not find it and the ticker cannot advance it: its fires wait, and its
misfire policy settles them (late, or skipped with a record) once it is moved. Shard 0's
key is the tenant id itself, so about an eighth of the items stay where they are.

It scans the schedules table a page at a time (each page its own requests: resume an
interrupted pass with ``--cursor``, and a whole pass follows the resumed one) and moves
each item in one transaction (a put on its key, the delete as read), so an item advanced
or updated meanwhile is left for the next pass, which the command runs until a pass finds
nothing changed under it, at most ``--max-passes`` (10) passes: items still changing then
(an older version still writing them) are counted, and the command exits 1 for a later
run to finish. Idempotent.
Cost: one read unit per 4 KB scanned, and two write units per KB of each item moved,
twice (a transaction).
"""

# Passes a schedule-keys run makes at most: a pass is cancelled only by a write landing on
# an item between its read and its move, which only a version still writing the old keys
# keeps doing.
MAX_KEY_PASSES = 10

TABLE_ENV = "FIRELINE_WORKFLOWS_TABLE"
STACK_OUTPUT = "WorkflowsTableName"
SCHEDULES_TABLE_ENV = "FIRELINE_SCHEDULES_TABLE"
SCHEDULES_STACK_OUTPUT = "SchedulesTableName"


def add_migrate_commands(admin: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    migrate = admin.add_parser(
        "migrate",
        help="bring older data up to this version's layout",
        description="Bring data written by an older version up to this one's layout: the "
        "workflows' listings (listings), the register of limit overrides (overrides) and "
        "the schedules' spread keys (schedule-keys). Each is idempotent.",
    )
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
    overrides = actions.add_parser(
        "overrides",
        help="build the register of tenant limit overrides",
        description=OVERRIDES_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    deployment.add_table_options(
        overrides, output=quotas.STACK_OUTPUT, env=quotas.TABLE_ENV, what="slots"
    )
    overrides.set_defaults(run=deployment.reported(_overrides))
    keys = actions.add_parser(
        "schedule-keys",
        help="move older schedules onto their tenant's spread keys",
        description=SCHEDULE_KEYS_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    deployment.add_table_options(
        keys, output=SCHEDULES_STACK_OUTPUT, env=SCHEDULES_TABLE_ENV, what="schedules"
    )
    keys.add_argument("--cursor", help="resume an interrupted pass where it stopped")
    keys.add_argument(
        "--max-passes",
        type=common.positive,
        default=MAX_KEY_PASSES,
        help=f"passes to make at most while items change under them (default {MAX_KEY_PASSES})",
    )
    keys.set_defaults(run=deployment.reported(_schedule_keys))


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


def _overrides(args: argparse.Namespace) -> int:
    count = limits.store(args).build_overrides()
    if args.json:
        print(json.dumps({"overrides": count}))
    else:
        print(f"done: the register holds {count} limit overrides")
    return 0


def _schedule_keys(args: argparse.Namespace) -> int:
    from fireline.adapters import schedules_dynamodb

    client, table = deployment.table(
        args, output=SCHEDULES_STACK_OUTPUT, env=SCHEDULES_TABLE_ENV, what="schedules"
    )
    store = schedules_dynamodb.DynamoScheduleStore(client, table)
    totals = {"scanned": 0, "moved": 0, "passes": 0, "still_changing": 0}
    cursor = args.cursor
    while totals["passes"] < args.max_passes:
        # Passes until one finds nothing changed under it: an item advanced while it was
        # being moved is taken up again by the next. A pass resumed from --cursor saw only
        # the rest of the table, so a whole pass follows it whatever it found.
        partial = cursor is not None
        totals["passes"] += 1
        changed = 0
        while True:
            page = store.move_to_tenant_keys(cursor=cursor)
            totals["scanned"] += page.scanned
            totals["moved"] += page.moved
            changed += page.changed
            cursor = page.cursor
            if not args.json:
                print(f"{totals['scanned']} items scanned; resume with --cursor {cursor}")
            if cursor is None:
                break
        totals["still_changing"] = changed
        if not changed and not partial:
            break
    if args.json:
        print(json.dumps(totals))
    else:
        print(
            f"{'stopped' if totals['still_changing'] else 'done'}: {totals['moved']} schedules "
            f"moved to their keys, {totals['scanned']} items scanned in {totals['passes']} passes"
        )
    if totals["still_changing"]:
        print(
            f"error: {totals['still_changing']} schedules changed while being moved in the "
            f"last of {totals['passes']} passes (--max-passes); run the command again once "
            "no older version writes them",
            file=sys.stderr,
        )
        return 1
    return 0
