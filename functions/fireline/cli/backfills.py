"""``fireline schedules backfill ...``: a schedule's past fires over a range, run again at a
bounded pace, its progress, and its cancel (through the HTTP API's backfill routes)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from fireline.cli import client, common

OVERLAPS = ("allow", "buffer_all")
FIELDS = {"from": "--from", "to": "--to", "overlap": "--overlap"}
PROGRESS = {
    "backfill": "id",
    "schedule": "schedule_id",
    "from": "from",
    "to": "to",
    "state": "state",
    "overlap": "overlap",
    "window": "window",
    "fires": "fires",
    "created": "created",
    "existed": "existed",
    "released": "released",
    "in flight": "in_flight",
    "run": "run",
    "left": "left",
    "cancelled": "cancelled",
}


def add_commands(group: common.SubParsers[argparse.ArgumentParser]) -> None:
    start = common.leaf(
        group,
        "backfill",
        _start,
        "run a schedule's fires in [--from, --to) that have no occurrence yet, a few at a time",
        subject="schedule",
    )
    start.add_argument(
        "--from", dest="since", type=common.instant, metavar="ISO", required=True,
        help="the first fire time included",
    )  # fmt: skip
    start.add_argument(
        "--to", dest="until", type=common.instant, metavar="ISO", required=True,
        help="the end, excluded (not after now)",
    )  # fmt: skip
    start.add_argument(
        "--overlap", choices=OVERLAPS,
        help="allow: up to 10 side by side; buffer_all: one at a time (default: from the "
        "schedule's overlap)",
    )  # fmt: skip
    common.name_fields(start, FIELDS)

    status = common.leaf(
        group, "backfill-status", _status, "a backfill's progress", subject="schedule"
    )
    status.add_argument("backfill_id", metavar="BACKFILL_ID")
    cancel = common.leaf(
        group,
        "backfill-cancel",
        _cancel,
        "cancel a backfill's fires not started (those running finish)",
        subject="schedule",
    )
    cancel.add_argument("backfill_id", metavar="BACKFILL_ID")


def _path(args: argparse.Namespace, *rest: str) -> str:
    return client.route("schedules", args.id, "backfill", *rest)


def _start(args: argparse.Namespace) -> int:
    request = {"from": args.since, "to": args.until}
    if args.overlap is not None:
        request["overlap"] = args.overlap
    body = common.call(args, "POST", _path(args), request)
    return common.show(args, body, lambda out: progress(out, body))


def _status(args: argparse.Namespace) -> int:
    body = common.call(args, "GET", _path(args, args.backfill_id))
    return common.show(args, body, lambda out: progress(out, body))


def _cancel(args: argparse.Namespace) -> int:
    body = common.call(args, "DELETE", _path(args, args.backfill_id))
    return common.show(args, body, lambda out: progress(out, body))


def progress(out: Console, item: Any) -> None:
    common.detail(out, item, PROGRESS)
