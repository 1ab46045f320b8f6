"""``fireline``: the operator CLI over the HTTP API.

Each command is one route (listings follow cursors only with ``--all``), except
``schedules update``, which reads the schedule and writes it back changed. The answer is
shown as a table, or with ``--json`` as the exact response body. The commands live by
area: ``schedules``, ``jobs`` (with ``dead-letters``), ``workflows`` (with ``runs``);
``common`` holds what they share.

Exit codes: 0 done, 1 the API refused (an error answer, printed as ``error: ...``), 2 a
usage error (as argparse), 3 the API could not be reached, 130 interrupted. An error
names what it can: the field at fault and the option that sets it, what was not found,
and for a missing or refused key how to give one.

Other command groups (``fireline local``, ``fireline admin``) are added beside the operator
commands on the parser from ``build_parser()``: each leaf parser sets ``run``, a function
of the parsed arguments that returns the exit code.
"""

from __future__ import annotations

import argparse
import sys

from fireline.cli import admin, client, common, completion, jobs, schedules, workflows

API_REFUSED = 1
USAGE = 2
UNREACHABLE = 3
INTERRUPTED = 130


# --- entry point -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (2) and --help (0) are returned, not raised
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else USAGE)
    run: common.Run = args.run
    try:
        return run(args)
    except client.ApiError as exc:
        print(f"error: {explain(exc, args)}", file=sys.stderr)
        return API_REFUSED
    except client.ClientError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return UNREACHABLE
    except KeyboardInterrupt:
        return INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = common.Parser(
        prog="fireline",
        description="Operate a Fireline deployment through its HTTP API "
        "(schedules, jobs, dead letters, workflows, runs), run the local cloud (local) "
        "and administer a deployment with AWS credentials (admin).",
    )
    parser.add_argument("--version", action="version", version=f"fireline {version()}")
    common.add_global_options(parser, top_level=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_operator_commands(commands)
    add_local_command(commands)
    admin.add_admin_command(commands)
    completion.add_command(commands)
    parser.set_defaults(root_parser=parser)
    return parser


def version() -> str:
    """The installed package's version (a copy that is not installed has none)."""
    from importlib import metadata

    try:
        return metadata.version("fireline")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def add_local_command(subparsers: common.SubParsers[argparse.ArgumentParser]) -> None:
    """``fireline local``: the embedded local cloud (fireline.local)."""
    from fireline.local.command import add_local_command as add

    add(subparsers)


def add_operator_commands(subparsers: common.SubParsers[argparse.ArgumentParser]) -> None:
    """Register the API's commands on the top-level subparsers: ``schedules``, ``jobs``,
    ``dead-letters``, ``workflows`` and ``runs``."""
    schedules.add_commands(subparsers)
    jobs.add_commands(subparsers)
    workflows.add_commands(subparsers)


# --- errors ------------------------------------------------------------------------------


def explain(exc: client.ApiError, args: argparse.Namespace) -> str:
    """An error answer as the operator can act on it."""
    if exc.status == 401 or (
        exc.status == 403 and (exc.field == "x-api-key" or exc.type == "http")
    ):
        # 401 from the API's authorizer; 403 naming x-api-key from API Gateway's own key
        # check (a gateway without the stack's responses answers {"message": "Forbidden"}).
        return f"{_key_hint(args)} (HTTP {exc.status}: {exc.message})"
    if exc.status == 404:
        return f"{_not_found(exc, args)} (HTTP 404)"
    if exc.field:
        option = (getattr(args, "fields", None) or {}).get(exc.field)
        where = f"{exc.field} ({option})" if option else exc.field
        return f"{where}: {exc.message} (HTTP {exc.status})"
    return str(exc)


def _key_hint(args: argparse.Namespace) -> str:
    if not args.api_key:
        return (
            f"no API key: ${common.API_KEY_ENV} is unset. Set it "
            f"(export {common.API_KEY_ENV}=...) or pass --api-key; an operator makes keys "
            "with 'fireline admin keys create --tenant T'"
        )
    return (
        f"the API refused the key (from --api-key or ${common.API_KEY_ENV}): it is unknown, "
        f"revoked or for another deployment than {args.api}"
    )


def _not_found(exc: client.ApiError, args: argparse.Namespace) -> str:
    subject: str | None = getattr(args, "subject", None)
    wanted: str | None = getattr(args, "id", None)
    if exc.message == "no such route":
        return (
            f"{args.api} has no such route: is it a Fireline API of this version "
            "(a deployment without workflows has no workflow routes)?"
        )
    if subject is None or wanted is None or wanted in exc.message:
        return exc.message
    return f"{subject} {wanted!r} not found: {exc.message}"


if __name__ == "__main__":
    sys.exit(main())
