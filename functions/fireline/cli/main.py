"""``fireline``: the operator CLI over the HTTP API.

Each command is one route (``schedules list`` follows cursors only with ``--all``). The
answer is shown as a table, or with ``--json`` as the exact response body. API errors are
printed as ``error: <field>: <message> (HTTP <status>)`` with exit code 1; usage errors exit
with 2, as argparse does.

Other command groups (``fireline local``) are added beside the operator commands on the
parser from ``build_parser()``: each leaf parser sets ``run``, a function of the parsed
arguments that returns the exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from fireline.cli import client

DEFAULT_API_URL = "http://127.0.0.1:8080"
API_URL_ENV = "FIRELINE_API_URL"
API_KEY_ENV = "FIRELINE_API_KEY"
JOB_CLASSES = ("default", "short", "long")
# Piped output is not wrapped at 80 columns: a row stays one line for grep and awk.
PIPE_WIDTH = 1000

Run = Callable[[argparse.Namespace], int]
# argparse's type for what add_subparsers() returns (the handle `fireline local` is added to).
SubParsers = argparse._SubParsersAction


# --- entry point -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (2) and --help (0) are returned, not raised
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    run: Run = args.run
    try:
        return run(args)
    except client.ClientError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fireline",
        description="Operate a Fireline deployment through its HTTP API.",
    )
    _add_global_options(parser, top_level=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_operator_commands(commands)
    add_local_command(commands)
    add_admin_commands(commands)
    return parser


def add_admin_commands(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    """``fireline admin``: a deployment's operator, with AWS credentials, not an API key."""
    from fireline.cli.quotas import add_quota_commands

    admin = subparsers.add_parser("admin", help="operate a deployment (AWS credentials)")
    group = admin.add_subparsers(dest="admin_command", metavar="COMMAND", required=True)
    add_quota_commands(group)


def add_local_command(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    """``fireline local``: the embedded local cloud (fireline.local)."""
    from fireline.local.command import add_local_command as add

    add(subparsers)


def add_operator_commands(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    """Register ``schedules``, ``jobs`` and ``dead-letters`` on the top-level subparsers."""
    _add_schedule_commands(subparsers)
    _add_job_commands(subparsers)
    _add_dead_letter_commands(subparsers)


# --- options -----------------------------------------------------------------------------


def _add_global_options(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    """``--api``, ``--api-key`` and ``--json``, before or after the command.

    The top-level parser holds the defaults; leaf parsers repeat the options with
    ``SUPPRESS`` defaults, so ``fireline schedules list --json`` works and a leaf that is
    not given an option leaves the top-level value alone.
    """

    def default(value: object) -> object:
        return value if top_level else argparse.SUPPRESS

    parser.add_argument(
        "--api",
        metavar="URL",
        type=_api_url,
        default=default(os.environ.get(API_URL_ENV) or DEFAULT_API_URL),
        help=f"API base URL (default: ${API_URL_ENV}, else {DEFAULT_API_URL})",
    )
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        default=default(os.environ.get(API_KEY_ENV) or None),
        help=f"tenant API key, sent as x-api-key (default: ${API_KEY_ENV})",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="print the raw JSON response instead of a table",
    )


def _leaf(
    group: SubParsers[argparse.ArgumentParser], name: str, run: Run, help: str
) -> argparse.ArgumentParser:
    parser = group.add_parser(name, help=help, description=help)
    _add_global_options(parser, top_level=False)
    parser.set_defaults(run=run)
    return parser


def _add_target_options(parser: argparse.ArgumentParser) -> None:
    target = parser.add_argument_group("target (exactly one)")
    choice = target.add_mutually_exclusive_group(required=True)
    choice.add_argument(
        "--target-python", metavar="NAME", help="a registered handler (noop, echo, sleep, fail)"
    )
    choice.add_argument("--target-http", metavar="URL", help="a webhook to POST to")
    choice.add_argument("--target-lambda", metavar="ARN", help="a Lambda function to invoke")
    choice.add_argument("--target-sqs", metavar="URL", help="an SQS queue to send to")
    parser.add_argument("--class", dest="job_class", choices=JOB_CLASSES, help="job class")
    parser.add_argument(
        "--payload", metavar="JSON", type=_json_object, help="a JSON object given to the job"
    )


def _target(args: argparse.Namespace) -> dict[str, str]:
    if args.target_python is not None:
        return {"type": "python", "handler": args.target_python}
    if args.target_http is not None:
        return {"type": "http", "url": args.target_http}
    if args.target_lambda is not None:
        return {"type": "lambda", "function_arn": args.target_lambda}
    return {"type": "sqs", "queue_url": args.target_sqs}


def _job_fields(args: argparse.Namespace) -> dict[str, Any]:
    """Target, class and payload; options left out are left to the API's defaults."""
    body: dict[str, Any] = {"target": _target(args)}
    if args.job_class is not None:
        body["job_class"] = args.job_class
    if args.payload is not None:
        body["payload"] = args.payload
    return body


def _idempotency(args: argparse.Namespace) -> dict[str, str]:
    key: str | None = args.idempotency_key
    return {} if key is None else {"Idempotency-Key": key}


def _api_url(value: str) -> str:
    try:
        client.ApiClient(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (from --api or ${API_URL_ENV})") from None
    return value


def _json_object(value: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, such as '{\"n\": 1}'")
    return parsed


def _positive(value: str) -> int:
    number = _whole(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def _seconds(value: str) -> int:
    number = _whole(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {number}")
    return number


def _whole(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None


def _instant(value: str) -> str:
    """An ISO 8601 instant with its offset; sent as written."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time: {value!r} (e.g. 2026-12-01T09:00:00Z)"
        ) from None
    if parsed.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{value!r} needs a UTC offset, e.g. {value}Z or {value}+02:00"
        )
    return value


# --- schedules ---------------------------------------------------------------------------


def _add_schedule_commands(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    schedules = subparsers.add_parser("schedules", help="recurring schedules")
    group = schedules.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = _leaf(group, "list", _schedules_list, "list the tenant's schedules")
    listing.add_argument("--limit", type=_positive, metavar="N", help="page size (API: 1-100)")
    listing.add_argument("--all", action="store_true", help="follow cursors to the last page")

    _leaf(group, "get", _schedules_get, "show one schedule").add_argument("id")

    create = _leaf(group, "create", _schedules_create, "create a schedule")
    create.add_argument(
        "spec", metavar="SPEC", help="cron(...), rate(...), at(...) or e.g. 'every day at 09:30'"
    )
    _add_target_options(create)
    create.add_argument("--timezone", metavar="TZ", help="IANA time zone (API default: UTC)")
    create.add_argument("--idempotency-key", metavar="K", help="makes a retried create safe")

    _leaf(group, "pause", _schedules_action("pause"), "pause a schedule").add_argument("id")
    _leaf(group, "resume", _schedules_action("resume"), "resume a schedule").add_argument("id")

    trigger = _leaf(group, "trigger", _schedules_trigger, "fire a schedule now")
    trigger.add_argument("id")
    trigger.add_argument("--idempotency-key", metavar="K", help="makes a retried trigger safe")

    _leaf(group, "delete", _schedules_delete, "delete a schedule").add_argument("id")

    preview = _leaf(group, "preview", _schedules_preview, "show the next fire times")
    preview.add_argument("id")
    preview.add_argument("--count", type=_positive, metavar="N", help="how many (API: 1-100)")

    history = _leaf(group, "history", _schedules_history, "occurrences, newest first")
    history.add_argument("id")
    history.add_argument("--limit", type=_positive, metavar="N", help="how many (API: 1-100)")


def _schedules_list(args: argparse.Namespace) -> int:
    body = _page(args, "/schedules")
    return _show(args, body, lambda out: _schedule_rows(out, body))


def _schedules_get(args: argparse.Namespace) -> int:
    _, body = _api(args).request("GET", client.route("schedules", args.id))
    return _show(args, body, lambda out: _schedule_detail(out, body))


def _schedules_create(args: argparse.Namespace) -> int:
    request: dict[str, Any] = {"spec": args.spec, **_job_fields(args)}
    if args.timezone is not None:
        request["timezone"] = args.timezone
    _, body = _api(args).request("POST", "/schedules", request, headers=_idempotency(args))
    return _show(args, body, lambda out: _schedule_detail(out, body))


def _schedules_action(action: str) -> Run:
    def run(args: argparse.Namespace) -> int:
        _, body = _api(args).request("POST", client.route("schedules", args.id, action))
        return _show(args, body, lambda out: _schedule_detail(out, body))

    return run


def _schedules_trigger(args: argparse.Namespace) -> int:
    path = client.route("schedules", args.id, "trigger")
    _, body = _api(args).request("POST", path, headers=_idempotency(args))
    return _show(args, body, lambda out: _one_occurrence(out, body))


def _schedules_delete(args: argparse.Namespace) -> int:
    _, body = _api(args).request("DELETE", client.route("schedules", args.id))
    return _show(args, body, lambda out: out.print(f"deleted schedule {args.id}"))


def _schedules_preview(args: argparse.Namespace) -> int:
    path = client.route("schedules", args.id, "preview")
    _, body = _api(args).request("GET", path, query={"count": args.count})
    return _show(args, body, lambda out: _preview(out, body))


def _schedules_history(args: argparse.Namespace) -> int:
    path = client.route("schedules", args.id, "occurrences")
    _, body = _api(args).request("GET", path, query={"limit": args.limit})
    return _show(args, body, lambda out: _occurrence_rows(out, body))


# --- jobs --------------------------------------------------------------------------------


def _add_job_commands(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    jobs = subparsers.add_parser("jobs", help="one-off jobs")
    group = jobs.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = _leaf(group, "create", _jobs_create, "create a one-off job")
    when = create.add_argument_group("when (exactly one)").add_mutually_exclusive_group(
        required=True
    )
    when.add_argument(
        "--in", dest="delay_seconds", type=_seconds, metavar="SECONDS", help="run after a delay"
    )
    when.add_argument(
        "--at", dest="run_at", type=_instant, metavar="ISO", help="run at 2026-12-01T09:00:00Z"
    )
    _add_target_options(create)
    create.add_argument("--idempotency-key", metavar="K", help="makes a retried create safe")

    _leaf(group, "get", _jobs_get, "show one job").add_argument("id")
    _leaf(group, "cancel", _jobs_cancel, "cancel a job").add_argument("id")


def _jobs_create(args: argparse.Namespace) -> int:
    request = _job_fields(args)
    if args.delay_seconds is not None:
        request["delay_seconds"] = args.delay_seconds
    else:
        request["run_at"] = args.run_at
    _, body = _api(args).request("POST", "/jobs", request, headers=_idempotency(args))
    return _show(args, body, lambda out: _job_rows(out, [body]))


def _jobs_get(args: argparse.Namespace) -> int:
    _, body = _api(args).request("GET", client.route("jobs", args.id))
    return _show(args, body, lambda out: _job_rows(out, [body]))


def _jobs_cancel(args: argparse.Namespace) -> int:
    _, body = _api(args).request("POST", client.route("jobs", args.id, "cancel"))
    return _show(args, body, lambda out: _job_rows(out, [body]))


# --- dead letters ------------------------------------------------------------------------


def _add_dead_letter_commands(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    dead = subparsers.add_parser("dead-letters", help="occurrences whose attempts ran out")
    group = dead.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = _leaf(group, "list", _dead_letters_list, "list dead occurrences, newest first")
    listing.add_argument("--limit", type=_positive, metavar="N", help="page size (API: 1-100)")
    listing.add_argument("--all", action="store_true", help="follow cursors to the last page")

    redrive = _leaf(group, "redrive", _dead_letters_redrive, "queue a dead occurrence again")
    redrive.add_argument("id", help="the id from 'dead-letters list'")


def _dead_letters_list(args: argparse.Namespace) -> int:
    body = _page(args, "/dead-letters")
    return _show(args, body, lambda out: _dead_letter_rows(out, body))


def _dead_letters_redrive(args: argparse.Namespace) -> int:
    path = client.route("dead-letters", args.id, "redrive")
    _, body = _api(args).request("POST", path)
    return _show(args, body, lambda out: _one_occurrence(out, body))


# --- calls -------------------------------------------------------------------------------


def _api(args: argparse.Namespace) -> client.ApiClient:
    return client.ApiClient(args.api, args.api_key)


def _page(args: argparse.Namespace, path: str) -> Any:
    """One page, or with ``--all`` every page merged into one (its ``next_cursor`` null)."""
    api = _api(args)
    if not args.all:
        return api.request("GET", path, query={"limit": args.limit})[1]
    items: list[Any] = []
    cursor: str | None = None
    seen: set[str] = set()
    while True:
        _, page = api.request("GET", path, query={"limit": args.limit or 100, "cursor": cursor})
        items.extend(page.get("items") or [])
        cursor = page.get("next_cursor")
        # A cursor seen before would loop forever: stop rather than trust the server.
        if not cursor or cursor in seen:
            return {"items": items, "next_cursor": None}
        seen.add(cursor)


# --- output ------------------------------------------------------------------------------


def _show(args: argparse.Namespace, body: Any, render: Callable[[Console], None]) -> int:
    if args.json:
        if body is not None:  # a 204 has no body to print
            print(json.dumps(body, indent=2, ensure_ascii=False))
        return 0
    # Server text is printed as text: no markup, emoji codes or highlighting read into it.
    render(
        Console(
            markup=False,
            emoji=False,
            highlight=False,
            width=None if sys.stdout.isatty() else PIPE_WIDTH,
        )
    )
    return 0


def _table(*columns: str) -> Table:
    # Columns and a header, no rules: reads like `kubectl get`, and greps and awks cleanly.
    table = Table(box=None, pad_edge=False, padding=(0, 3, 0, 0), header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _duration(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2f}s"


def _more(body: Any, what: str, hint: str = "use --all") -> None:
    if body.get("next_cursor"):
        print(f"more {what} than shown: {hint}", file=sys.stderr)


def _schedule_rows(out: Console, body: Any) -> None:
    items = body.get("items") or []
    if not items:
        out.print("no schedules")
        return
    table = _table("id", "spec", "description", "state", "next fire")
    for s in items:
        table.add_row(
            *map(_cell, (s["id"], s["spec"], s["description"], s["state"])),
            _cell(s.get("next_fire")),
        )
    out.print(table)
    _more(body, "schedules")


def _schedule_detail(out: Console, s: Any) -> None:
    table = Table(box=None, show_header=False, pad_edge=False, padding=(0, 3, 0, 0))
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for label, key in (
        ("id", "id"),
        ("spec", "spec"),
        ("description", "description"),
        ("timezone", "timezone"),
        ("state", "state"),
        ("version", "version"),
        ("next fire", "next_fire"),
        ("class", "job_class"),
        ("target", "target"),
        ("payload", "payload"),
        ("overlap", "overlap"),
        ("updated", "updated_at"),
    ):
        table.add_row(label, _cell(s.get(key)))
    out.print(table)


def _occurrence_rows(out: Console, body: Any) -> None:
    items = body.get("items") or []
    if not items:
        out.print("no occurrences")
        return
    table = _table("fire time", "state", "attempts", "duration", "exit reason")
    for o in items:
        table.add_row(
            _cell(o["fire_time"]),
            _cell(o["state"]),
            _cell(o["attempts"]),
            _duration(o.get("duration_seconds")),
            _cell(o.get("exit_reason")),
        )
    out.print(table)
    _more(body, "occurrences", "raise --limit (up to 100)")


def _one_occurrence(out: Console, o: Any) -> None:
    out.print(f"occurrence {o['key']} (id {o['id']})")
    _occurrence_rows(out, {"items": [o]})


def _job_rows(out: Console, jobs: list[Any]) -> None:
    table = _table("id", "state", "run_at", "attempts", "exit reason")
    for j in jobs:
        run = j.get("occurrence") or {}
        table.add_row(
            _cell(j["id"]),
            _cell(j["state"]),
            _cell(j["run_at"]),
            _cell(run.get("attempts", 0)),
            _cell(run.get("exit_reason")),
        )
    out.print(table)


def _dead_letter_rows(out: Console, body: Any) -> None:
    items = body.get("items") or []
    if not items:
        out.print("no dead letters")
        return
    table = _table("id", "key", "exit reason", "finished")
    for o in items:
        table.add_row(
            _cell(o["id"]),
            _cell(o["key"]),
            _cell(o.get("exit_reason")),
            _cell(o.get("finished_at")),
        )
    out.print(table)
    _more(body, "dead letters")


def _preview(out: Console, body: Any) -> None:
    out.print(f"{body['schedule_id']}: {body['description']} ({body['timezone']})")
    table = _table("fire time")
    for when in body.get("fire_times") or []:
        table.add_row(_cell(when))
    out.print(table)


if __name__ == "__main__":
    sys.exit(main())
