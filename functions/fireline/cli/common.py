"""What every operator command shares: the global options, argument types, the call to the
API (one page, or every page with ``--all``) and the output (a table, or ``--json``).

A leaf parser (``leaf``) sets ``run``, a function of the parsed arguments returning the exit
code, and may name what its positional id is (``subject``): an error answer is then
reported with it (``schedule 'x' not found``), and API field names with the options that
set them (``fields``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.table import Table

from fireline.cli import client

DEFAULT_API_URL = "http://127.0.0.1:8080"
API_URL_ENV = "FIRELINE_API_URL"
API_KEY_ENV = "FIRELINE_API_KEY"
# Piped output is not wrapped at 80 columns: a row stays one line for grep and awk.
PIPE_WIDTH = 1000
# The largest page a listing asks for with --all (the API's own maximum).
MAX_PAGE = 100

Run = Callable[[argparse.Namespace], int]
# argparse's type for what add_subparsers() returns.
SubParsers = argparse._SubParsersAction


# --- parsers -----------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is the error first, then one line of usage and
    where the whole help is (argparse prints the whole usage, dozens of lines for a
    command with many options, before a one-line error at the bottom). Its subcommands
    are parsers of the same kind, whose help page is described by their help line when
    they name no description of their own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Subcommands)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n{self.short_usage()}\n")

    def short_usage(self) -> str:
        """One line: the command, [options], its positional arguments, and --help."""
        words = [self.prog, "[options]"]
        for action in self._actions:
            if action.option_strings or action.help == argparse.SUPPRESS:
                continue
            if isinstance(action, argparse._SubParsersAction):
                words.append(action.metavar or "COMMAND")  # type: ignore[arg-type]
                words.append("...")
            else:
                words.append(str(action.metavar or action.dest.upper()))
        return f"usage: {' '.join(words)}   ({self.prog} --help: every option)"


class _Subcommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if "help" in kwargs and "description" not in kwargs:
            kwargs["description"] = kwargs["help"]
        return super().add_parser(name, **kwargs)


def add_global_options(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
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
        type=api_url,
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


def leaf(
    group: SubParsers[argparse.ArgumentParser],
    name: str,
    run: Run,
    help: str,
    *,
    subject: str | None = None,
) -> argparse.ArgumentParser:
    """A command; with ``subject`` it takes an ``id`` naming one (a schedule, a run)."""
    parser = group.add_parser(name, help=help, description=help)
    add_global_options(parser, top_level=False)
    parser.set_defaults(run=run, subject=subject, fields={})
    if subject is not None:
        parser.add_argument("id", metavar=f"{subject.upper().replace(' ', '_')}_ID")
    return parser


def add_paging(parser: argparse.ArgumentParser, largest: int = MAX_PAGE) -> None:
    parser.add_argument("--limit", type=positive, metavar="N", help=f"page size (API: 1-{largest})")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--cursor", metavar="C", help="the next_cursor of the page before")
    where.add_argument("--all", action="store_true", help="follow cursors to the last page")


def name_fields(parser: argparse.ArgumentParser, fields: Mapping[str, str]) -> None:
    """Which option sets which API field, for the errors that name a field."""
    parser.set_defaults(fields=dict(fields))


# --- argument types ----------------------------------------------------------------------


def api_url(value: str) -> str:
    try:
        client.ApiClient(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (from --api or ${API_URL_ENV})") from None
    return value


def json_document(value: str) -> Any:
    """JSON as written, or ``@path`` for a file's (``@-``: standard input)."""
    text = value
    if value.startswith("@"):
        where = value[1:]
        try:
            text = sys.stdin.read() if where == "-" else Path(where).read_text()
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {where}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None


def json_object(value: str) -> dict[str, Any]:
    parsed = json_document(value)
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, such as '{\"n\": 1}'")
    return parsed


def positive(value: str) -> int:
    number = whole(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def seconds(value: str) -> int:
    number = whole(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {number}")
    return number


def whole(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None


def number(value: str) -> float:
    try:
        parsed = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if parsed != parsed or parsed in (float("inf"), float("-inf")) or parsed < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number, 0 or more, got {value!r}")
    return parsed


def instant(value: str) -> str:
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


def idempotency(args: argparse.Namespace) -> dict[str, str]:
    key: str | None = args.idempotency_key
    return {} if key is None else {"Idempotency-Key": key}


def add_idempotency(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--idempotency-key", metavar="K", help=f"makes a retried {what} safe")


# --- calls -------------------------------------------------------------------------------


def api(args: argparse.Namespace) -> client.ApiClient:
    return client.ApiClient(args.api, args.api_key)


def call(
    args: argparse.Namespace,
    method: str,
    path: str,
    body: Any = None,
    *,
    query: Mapping[str, object | None] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Any:
    """One request; the decoded answer (None for a 204)."""
    return api(args).request(method, path, body, query=query, headers=headers)[1]


def page(args: argparse.Namespace, path: str, filters: Mapping[str, object | None]) -> Any:
    """One page (``--limit``, ``--cursor``), or with ``--all`` every page merged into one
    (its ``next_cursor`` null). ``filters`` go with every page's request."""
    client_ = api(args)
    if not args.all:
        query = {**filters, "limit": args.limit, "cursor": args.cursor}
        return client_.request("GET", path, query=query)[1]
    items: list[Any] = []
    cursor: str | None = None
    seen: set[str] = set()
    while True:
        query = {**filters, "limit": args.limit or MAX_PAGE, "cursor": cursor}
        answer = client_.request("GET", path, query=query)[1]
        items.extend(answer.get("items") or [])
        cursor = answer.get("next_cursor")
        # A cursor seen before would loop forever: stop rather than trust the server.
        if not cursor or cursor in seen:
            return {"items": items, "next_cursor": None}
        seen.add(cursor)


# --- output ------------------------------------------------------------------------------


def show(args: argparse.Namespace, body: Any, render: Callable[[Console], None]) -> int:
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


def table(*columns: str) -> Table:
    # Columns and a header, no rules: reads like `kubectl get`, and greps and awks cleanly.
    found = Table(box=None, pad_edge=False, padding=(0, 3, 0, 0), header_style="bold")
    for column in columns:
        found.add_column(column, overflow="fold")
    return found


def rows(
    out: Console,
    body: Any,
    what: str,
    columns: Mapping[str, Callable[[Any], Any]],
    hint: str = "use --all or --cursor",
) -> None:
    """A listing's items as a table, one column per entry of ``columns`` (its heading and
    how a cell is read from an item), or ``no <what>``; a note on stderr when more pages
    are left."""
    items = body.get("items") or []
    if not items:
        out.print(f"no {what}")
    else:
        found = table(*columns)
        for item in items:
            found.add_row(*(cell(read(item)) for read in columns.values()))
        out.print(found)
    if body.get("next_cursor"):
        print(
            f"more {what} than shown: {hint} (next cursor {body['next_cursor']})", file=sys.stderr
        )


def detail(out: Console, item: Any, labels: Mapping[str, str]) -> None:
    """One item as label / value lines."""
    found = Table(box=None, show_header=False, pad_edge=False, padding=(0, 3, 0, 0))
    found.add_column(style="bold")
    found.add_column(overflow="fold")
    for label, key in labels.items():
        found.add_row(label, cell(item.get(key)))
    out.print(found)


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def duration(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2f}s"
