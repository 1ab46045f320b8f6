"""``fireline admin``: tenants' API keys and webhook signing keys, on a deployment.

Unlike the operator commands (the HTTP API, as a tenant), these act on the deployment's
resources with the operator's AWS credentials (boto3's usual chain): the API keys table,
the tenants' secrets in Secrets Manager and API Gateway's usage plan, found from the
CloudFormation stack's outputs (``--stack``), or named one by one. ``--endpoint-url``
points them at an emulator (the local cloud prints its URL); every admin command reaches
a deployment the same way (fireline.cli.deployment).

    fireline admin keys create --tenant acme     # the key is shown once, here
    fireline admin keys list [--tenant acme]
    fireline admin keys revoke ak_...
    fireline admin keys rotate ak_... [--grace 3600]
    fireline admin signing show --tenant acme    # the keys a receiver verifies with
    fireline admin signing rotate --tenant acme [--overlap 86400]
    fireline admin quotas show|set|clear acme    # count quotas (fireline.cli.quotas)
    fireline admin limits show|set|clear acme    # concurrency limit (fireline.cli.limits)
    fireline admin migrate listings               # older workflows and runs, listed
    fireline admin migrate overrides              # the register of limit overrides
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from fireline.cli import deployment
from fireline.cli import limits as limits_cli
from fireline.cli import migrate as migrate_cli
from fireline.cli import quotas as quotas_cli
from fireline.domain import api_keys, errors, signing
from fireline.services import keys


def add_admin_command(subparsers: Any) -> None:
    admin = subparsers.add_parser(
        "admin",
        help="tenants' API keys, signing keys and quotas (AWS credentials, not an API key)",
        description="Administer a deployment with the operator's AWS credentials, not an "
        "API key: tenants' API keys and webhook signing keys, their quotas and concurrency "
        "limits, and data migrations. Every command finds the deployment the same way: "
        "--stack (default $FIRELINE_STACK, else fireline), --endpoint-url for an emulator "
        "(the local cloud: --stack fireline-local --endpoint-url URL it prints) and --region.",
    )
    groups = admin.add_subparsers(dest="area", metavar="AREA", required=True)

    keys_parser = groups.add_parser(
        "keys",
        help="tenants' API keys",
        description="Tenants' API keys: create one (shown once, only its hash is stored), "
        "list them, revoke one, or rotate one with a grace period for the old key.",
    )
    key_actions = keys_parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = _leaf(key_actions, "create", _keys_create, "create an API key (shown once)")
    create.add_argument("--tenant", required=True, help="the tenant the key authenticates")
    create.add_argument("--usage-plan", metavar="ID", help="a usage plan other than the stack's")
    create.add_argument(
        "--operator",
        action="store_true",
        help="an operator's key: reads every tenant (the console's tenant picker), writes nothing",
    )
    listing = _leaf(key_actions, "list", _keys_list, "list keys (never the keys themselves)")
    listing.add_argument("--tenant", help="only this tenant's")
    revoke = _leaf(key_actions, "revoke", _keys_revoke, "refuse a key from now on")
    revoke.add_argument("key_id", metavar="KEY_ID")
    rotate = _leaf(key_actions, "rotate", _keys_rotate, "a new key; the old one revoked")
    rotate.add_argument("key_id", metavar="KEY_ID")
    rotate.add_argument(
        "--grace",
        type=_seconds,
        default=0,
        metavar="SECONDS",
        help="keep the old key working this long (default: 0, revoked at once)",
    )

    signing_parser = groups.add_parser(
        "signing",
        help="tenants' webhook signing keys",
        description="Tenants' webhook signing keys: show the keys a receiver verifies "
        "deliveries with, or rotate to a new key, the previous ones valid for an overlap.",
    )
    signing_actions = signing_parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = _leaf(signing_actions, "show", _signing_show, "the keys a receiver verifies with")
    show.add_argument("--tenant", required=True)
    turn = _leaf(signing_actions, "rotate", _signing_rotate, "a new signing key")
    turn.add_argument("--tenant", required=True)
    turn.add_argument(
        "--overlap",
        type=_seconds,
        default=signing.DEFAULT_OVERLAP_SECONDS,
        metavar="SECONDS",
        help=(
            "how long the previous keys stay valid (default: "
            f"{signing.DEFAULT_OVERLAP_SECONDS}; at least the workers' cache TTL, "
            f"{keys.DEFAULT_CACHE_SECONDS})"
        ),
    )

    # Per-tenant count quotas: use and overrides (fireline.cli.quotas).
    quotas_cli.add_quota_commands(groups)
    # Per-tenant concurrency limit overrides (fireline.cli.limits).
    limits_cli.add_limit_commands(groups)
    # Older data brought up to this version's layout (fireline.cli.migrate).
    migrate_cli.add_migrate_commands(groups)


def _leaf(group: Any, name: str, run: Any, help: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = group.add_parser(name, help=help, description=help)
    where = deployment.add_deployment_options(parser)
    where.add_argument("--keys-table", help="ApiKeysTable's name, instead of the stack output")
    where.add_argument("--signing-prefix", help="the signing secrets' name prefix, likewise")
    where.add_argument("--usage-plan-id", help="the usage plan's id, likewise")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(run=lambda args: _guarded(run, args))
    return parser


def _seconds(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {number}")
    return number


def _guarded(run: Any, args: argparse.Namespace) -> int:
    try:
        code: int = run(args)
        return code
    except errors.FirelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except deployment.aws_errors() as exc:
        print(f"error: AWS: {exc}", file=sys.stderr)
        return 1


# --- the deployment ------------------------------------------------------------------------


def admin_for(args: argparse.Namespace) -> keys.KeyAdmin:
    from fireline.adapters import api_keys_dynamodb, apigateway, memory_keys, secretsmanager

    session = deployment.session(args)

    def client(service: str) -> Any:
        return deployment.client(args, session, service)

    needed = (args.keys_table, args.signing_prefix)
    outputs: dict[str, str] = {}
    if not all(needed) or args.usage_plan_id is None:
        try:
            outputs = deployment.stack_outputs(args, session)
        except errors.ValidationError as exc:
            if not all(needed):
                raise errors.ValidationError(
                    f"{exc.detail}, or give --keys-table and --signing-prefix", field="stack"
                ) from exc
    table = args.keys_table or outputs.get("ApiKeysTableName")
    prefix = args.signing_prefix or outputs.get("SigningSecretPrefix")
    if not table or not prefix:
        raise errors.ValidationError(
            f"stack {args.stack!r} has no ApiKeysTableName or SigningSecretPrefix output",
            field="stack",
        )
    plan_id = args.usage_plan_id or outputs.get("UsagePlanId")
    # Without a usage plan (the local cloud plays API Gateway itself) the usage
    # identifiers are the tenants' own and the local gateway applies the plan's limits.
    usage: Any = (
        apigateway.ApiGatewayUsagePlans(
            client("apigateway"), plan_id, name_prefix=f"{args.stack}-tenant-"
        )
        if plan_id
        else memory_keys.MemoryUsagePlans()
    )
    return keys.KeyAdmin(
        keys=api_keys_dynamodb.DynamoApiKeyStore(client("dynamodb"), table),
        signing_keys=secretsmanager.SecretsManagerSigningKeys(client("secretsmanager"), prefix),
        usage=usage,
        now_ms=lambda: int(time.time() * 1000),
    )


# --- commands ------------------------------------------------------------------------------


def _keys_create(args: argparse.Namespace) -> int:
    created = admin_for(args).create(
        args.tenant, usage_plan_id=args.usage_plan, operator=args.operator
    )
    shown = {**_key_view(created.record), "api_key": created.api_key}
    if args.json:
        print(json.dumps(shown, indent=2))
    else:
        role = "operator key (read-only, every tenant)" if args.operator else "API key"
        print(f"{role} of tenant {created.record.tenant_id} (shown once, store it now):")
        print(created.api_key)
        print(f"key id {created.record.key_id}")
        if created.signing_ring_created:
            print(
                "webhook signing key created for the tenant: "
                f"fireline admin signing show --tenant {created.record.tenant_id}"
            )
    return 0


def _keys_list(args: argparse.Namespace) -> int:
    records = admin_for(args).list(args.tenant)
    views = [_key_view(r) for r in records]
    if args.json:
        print(json.dumps(views, indent=2))
        return 0
    if not views:
        print("no keys")
        return 0
    table = _table("key id", "tenant", "role", "created", "state", "ends")
    for view in views:
        table.add_row(
            view["key_id"],
            view["tenant"],
            view["role"],
            view["created"],
            view["state"],
            view["ends"] or "-",
        )
    _console().print(table)
    return 0


def _keys_revoke(args: argparse.Namespace) -> int:
    ended = admin_for(args).revoke(args.key_id)
    return _print_key(args, ended, f"revoked {ended.key_id} of tenant {ended.tenant_id}")


def _keys_rotate(args: argparse.Namespace) -> int:
    created, old = admin_for(args).rotate(args.key_id, grace_seconds=args.grace)
    if args.json:
        print(
            json.dumps(
                {
                    "new": {**_key_view(created.record), "api_key": created.api_key},
                    "old": _key_view(old),
                },
                indent=2,
            )
        )
        return 0
    print(f"new API key of tenant {created.record.tenant_id} (shown once, store it now):")
    print(created.api_key)
    print(f"key id {created.record.key_id}; {old.key_id} is refused from {_when(old.ends_ms)}")
    return 0


def _signing_show(args: argparse.Namespace) -> int:
    ring = admin_for(args).signing_ring(args.tenant)
    return _print_ring(args, ring)


def _signing_rotate(args: argparse.Namespace) -> int:
    ring = admin_for(args).rotate_signing(args.tenant, overlap_seconds=args.overlap)
    return _print_ring(args, ring)


# --- output --------------------------------------------------------------------------------


def _when(ms: int | None) -> str | None:
    if ms is None:
        return None
    return (
        datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


def _key_view(record: api_keys.ApiKey) -> dict[str, Any]:
    now = int(time.time() * 1000)
    return {
        "key_id": record.key_id,
        "tenant": record.tenant_id,
        "created": _when(record.created_ms),
        "state": record.state_at(now).value,
        "ends": _when(record.ends_ms),
        "role": "operator" if record.operator else "tenant",
    }


def _print_key(args: argparse.Namespace, record: api_keys.ApiKey, text: str) -> int:
    print(json.dumps(_key_view(record), indent=2) if args.json else text)
    return 0


def _print_ring(args: argparse.Namespace, ring: signing.KeyRing) -> int:
    # The JSON is what fireline.webhooks.keys_from_document reads on the receiver's side.
    if args.json:
        print(json.dumps(ring.to_document(), indent=2))
        return 0
    table = _table("key id", "secret", "created", "valid until")
    for key in ring.keys:
        table.add_row(key.key_id, key.secret, _when(key.created_ms), _when(key.not_after_ms) or "-")
    _console().print(table)
    print(f"deliveries are signed with {ring.current.key_id}")
    return 0


def _console() -> Console:
    return Console(
        markup=False, emoji=False, highlight=False, width=None if sys.stdout.isatty() else 1000
    )


def _table(*columns: str) -> Table:
    table = Table(box=None, pad_edge=False, padding=(0, 3, 0, 0), header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table
