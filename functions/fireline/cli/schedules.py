"""``fireline schedules ...``: recurring schedules, their fires and their history.

``create`` takes every field of the API's schedule body as an option; ``update`` reads the
schedule and sends it back with the options given changed (the API's PUT replaces the
whole definition, as a new version, and takes no expected version: a change another
client makes between the read and the write is replaced). The description is the
API's, read from the spec.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from fireline.cli import backfills, client, common, spec
from fireline.services.schedules import OCCURRENCE_STATES, SCHEDULE_STATES

GAPS = ("shift", "skip")
REPEATS = ("first", "last", "both")
MISFIRES = ("fire_all", "fire_once", "skip")
OVERLAPS = ("allow", "forbid", "buffer_one")
# What an update sends back of a stored schedule (the API's ScheduleIn fields).
DEFINITION = (
    "spec",
    "timezone",
    "dst",
    "start",
    "end",
    "job_class",
    "target",
    "payload",
    "retry",
    "misfire",
    "overlap",
    "jitter_seconds",
    "deadline_seconds",
    "exclude",
)
FIELDS = {
    **spec.FIELDS,
    "timezone": "--timezone",
    "exclude": "--exclude",
    "dst.gap": "--dst-gap",
    "dst.repeat": "--dst-repeat",
    "start": "--start",
    "end": "--end",
    "misfire.policy": "--misfire",
    "misfire.grace_seconds": "--misfire-grace",
    "misfire.catch_up_window_seconds": "--catch-up-window",
    "misfire.catch_up_max": "--catch-up-max",
    "overlap": "--overlap",
    "jitter_seconds": "--jitter",
    "after": "--after",
    "from": "--from",
    "to": "--to",
    "q": "--q",
}
DETAIL = {
    "id": "id",
    "spec": "spec",
    "description": "description",
    "timezone": "timezone",
    "dst": "dst",
    "window": "window",
    "state": "state",
    "version": "version",
    "next fire": "next_fire",
    "class": "job_class",
    "target": "target",
    "payload": "payload",
    "retry": "retry",
    "misfire": "misfire",
    "overlap": "overlap",
    "jitter": "jitter_seconds",
    "deadline": "deadline_seconds",
    "updated": "updated_at",
}
OCCURRENCE_COLUMNS = {
    "fire time": lambda o: o["fire_time"],
    "state": lambda o: o["state"],
    "attempts": lambda o: o["attempts"],
    "duration": lambda o: common.duration(o.get("duration_seconds")),
    "exit reason": lambda o: o.get("exit_reason"),
}
NONE = "none"


def add_commands(subparsers: common.SubParsers[argparse.ArgumentParser]) -> None:
    schedules = subparsers.add_parser(
        "schedules",
        help="recurring schedules",
        description="A tenant's recurring schedules (cron with seconds, rate, at, or plain "
        "words such as 'every 10 seconds'): create, read, change, pause, resume, trigger, "
        "backfill, preview their next fires and read their occurrences. Through the HTTP API, "
        "as the tenant whose key is --api-key or $FIRELINE_API_KEY.",
    )
    group = schedules.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = common.leaf(group, "list", _list, "list the tenant's schedules by id")
    listing.add_argument("--state", choices=SCHEDULE_STATES, help="only those in this state")
    listing.add_argument(
        "--q", metavar="TEXT", help="only those whose id, description or spec holds TEXT"
    )
    common.add_paging(listing)
    common.name_fields(listing, FIELDS)

    common.leaf(group, "get", _get, "show one schedule", subject="schedule")

    create = common.leaf(group, "create", _create, "create a schedule")
    create.add_argument(
        "spec", metavar="SPEC", help="cron(...), rate(...), at(...) or e.g. 'every day at 09:30'"
    )
    _add_definition_options(create, target_required=True)
    common.add_idempotency(create, "create")

    update = common.leaf(
        group,
        "update",
        _update,
        "change a schedule: the options given, the rest as stored (a new version)",
        subject="schedule",
    )
    update.add_argument("--spec", metavar="SPEC", help="a new spec")
    _add_definition_options(update, target_required=False)

    common.leaf(group, "pause", _action("pause"), "pause a schedule", subject="schedule")
    common.leaf(group, "resume", _action("resume"), "resume a schedule", subject="schedule")

    trigger = common.leaf(group, "trigger", _trigger, "fire a schedule now", subject="schedule")
    common.add_idempotency(trigger, "trigger")

    common.leaf(group, "delete", _delete, "delete a schedule", subject="schedule")

    for name, run, what in (
        ("skip", _skip, "skip one upcoming fire (a new version)"),
        ("unskip", _unskip, "take back the skip of one upcoming fire (a new version)"),
    ):
        skipping = common.leaf(group, name, run, what, subject="schedule")
        skipping.add_argument(
            "--at", type=common.instant, metavar="ISO", required=True, help="the fire time"
        )
        common.name_fields(skipping, {"fire_time": "--at"})

    preview = common.leaf(
        group, "preview", _preview, "show the next fire times", subject="schedule"
    )
    preview.add_argument("--count", type=common.positive, metavar="N", help="how many (1-100)")
    preview.add_argument(
        "--after", type=common.instant, metavar="ISO", help="fires after this instant"
    )
    common.name_fields(preview, FIELDS)

    history = common.leaf(
        group, "history", _history, "the schedule's occurrences, newest first", subject="schedule"
    )
    history.add_argument("--state", choices=OCCURRENCE_STATES, help="only those in this state")
    history.add_argument(
        "--from", dest="since", type=common.instant, metavar="ISO", help="fired at or after"
    )
    history.add_argument(
        "--to", dest="until", type=common.instant, metavar="ISO", help="fired before"
    )
    common.add_paging(history)
    common.name_fields(history, FIELDS)

    backfills.add_commands(group)


def _add_definition_options(parser: argparse.ArgumentParser, *, target_required: bool) -> None:
    clear = f" ('{NONE}' on update: none)" if not target_required else ""
    when = parser.add_argument_group("when")
    when.add_argument("--timezone", metavar="TZ", help="IANA time zone (default: UTC)")
    when.add_argument(
        "--start", type=_instant_or_none, metavar="ISO", help=f"no fire before this{clear}"
    )
    when.add_argument(
        "--end", type=_instant_or_none, metavar="ISO", help=f"no fire at or after this{clear}"
    )
    when.add_argument(
        "--dst-gap", choices=GAPS, help="a local time the clocks skip: shift it or skip it"
    )
    when.add_argument(
        "--dst-repeat", choices=REPEATS, help="a local time that comes twice: which to fire"
    )
    when.add_argument(
        "--exclude",
        action="append",
        type=_exclusion,
        metavar="DAY",
        help="a day it does not fire on, in its zone: 2026-12-25, 2026-12-21..2026-12-31 or a "
        "pattern '* * 1 1 *' (repeat for more; on update, the list replaces the stored one, "
        f"'{NONE}' clears it)",
    )
    when.add_argument(
        "--jitter", type=common.seconds, metavar="SECONDS", help="spread each fire (0-900)"
    )
    missed = parser.add_argument_group("missed fires and overlap")
    missed.add_argument("--misfire", choices=MISFIRES, help="what to do with missed fires")
    missed.add_argument(
        "--misfire-grace", type=common.seconds, metavar="SECONDS", help="late, yet not missed"
    )
    missed.add_argument(
        "--catch-up-window", type=common.seconds, metavar="SECONDS", help="how far back to fire"
    )
    missed.add_argument(
        "--catch-up-max", type=common.seconds, metavar="N", help="fire at most N missed ones"
    )
    missed.add_argument("--overlap", choices=OVERLAPS, help="a fire while the last one runs")
    spec.add_options(parser, target_required=target_required)
    common.name_fields(parser, FIELDS)


def _exclusion(value: str) -> str | dict[str, str]:
    """One --exclude: a date range written FROM..TO is the API's {from, to}."""
    first, dots, last = value.partition("..")
    return {"from": first.strip(), "to": last.strip()} if dots else value


def _instant_or_none(value: str) -> str:
    return value if value == NONE else common.instant(value)


def _definition(args: argparse.Namespace, current: dict[str, Any] | None) -> dict[str, Any]:
    """The schedule body: the options given, over ``current`` (the stored fields) if any."""
    body: dict[str, Any] = dict(current or {})
    body.update(spec.fields(args, current))
    for key, value in (
        ("timezone", args.timezone),
        ("start", args.start),
        ("end", args.end),
        ("overlap", args.overlap),
        ("jitter_seconds", args.jitter),
    ):
        if value is not None:
            body[key] = None if value == NONE else value
    if args.exclude is not None:
        body["exclude"] = [e for e in args.exclude if e != NONE]
    _nested(body, "dst", {"gap": args.dst_gap, "repeat": args.dst_repeat})
    _nested(
        body,
        "misfire",
        {
            "policy": args.misfire,
            "grace_seconds": args.misfire_grace,
            "catch_up_window_seconds": args.catch_up_window,
            "catch_up_max": args.catch_up_max,
        },
    )
    return body


def _nested(body: dict[str, Any], key: str, given: dict[str, Any]) -> None:
    changed = {k: v for k, v in given.items() if v is not None}
    if changed:
        body[key] = {**(body.get(key) or {}), **changed}


def _path(args: argparse.Namespace, *rest: str) -> str:
    return client.route("schedules", args.id, *rest)


def _list(args: argparse.Namespace) -> int:
    body = common.page(args, "/schedules", {"state": args.state, "q": args.q})
    return common.show(args, body, lambda out: _rows(out, body))


def _get(args: argparse.Namespace) -> int:
    body = common.call(args, "GET", _path(args))
    return common.show(args, body, lambda out: _detail(out, body))


def _create(args: argparse.Namespace) -> int:
    request = {"spec": args.spec, **_definition(args, None)}
    body = common.call(args, "POST", "/schedules", request, headers=common.idempotency(args))
    return common.show(args, body, lambda out: _detail(out, body))


def _update(args: argparse.Namespace) -> int:
    stored = common.call(args, "GET", _path(args))
    current = {key: stored[key] for key in DEFINITION if key in stored}
    request = _definition(args, current)
    if args.spec is not None:
        request["spec"] = args.spec
    body = common.call(args, "PUT", _path(args), request)
    return common.show(args, body, lambda out: _detail(out, body))


def _action(action: str) -> common.Run:
    def run(args: argparse.Namespace) -> int:
        body = common.call(args, "POST", _path(args, action))
        return common.show(args, body, lambda out: _detail(out, body))

    return run


def _trigger(args: argparse.Namespace) -> int:
    body = common.call(args, "POST", _path(args, "trigger"), headers=common.idempotency(args))
    return common.show(args, body, lambda out: one_occurrence(out, body))


def _delete(args: argparse.Namespace) -> int:
    body = common.call(args, "DELETE", _path(args))
    return common.show(args, body, lambda out: out.print(f"deleted schedule {args.id}"))


def _skip(args: argparse.Namespace) -> int:
    body = common.call(args, "POST", _path(args, "skip"), {"fire_time": args.at})
    return common.show(args, body, lambda out: _detail(out, body))


def _unskip(args: argparse.Namespace) -> int:
    body = common.call(args, "DELETE", _path(args, "skip"), query={"fire_time": args.at})
    return common.show(args, body, lambda out: _detail(out, body))


def _preview(args: argparse.Namespace) -> int:
    query = {"count": args.count, "after": args.after}
    body = common.call(args, "GET", _path(args, "preview"), query=query)
    return common.show(args, body, lambda out: _fires(out, body))


def _history(args: argparse.Namespace) -> int:
    filters = {"state": args.state, "from": args.since, "to": args.until}
    body = common.page(args, _path(args, "occurrences"), filters)
    return common.show(args, body, lambda out: occurrence_rows(out, body))


# --- output ------------------------------------------------------------------------------


def _rows(out: Console, body: Any) -> None:
    common.rows(
        out,
        body,
        "schedules",
        {
            "id": lambda s: s["id"],
            "spec": lambda s: s["spec"],
            "description": lambda s: s["description"],
            "state": lambda s: s["state"],
            "next fire": lambda s: s.get("next_fire"),
        },
    )


def _detail(out: Console, item: Any) -> None:
    window = None
    if item.get("start") or item.get("end"):
        window = f"{item.get('start') or '-'} to {item.get('end') or '-'}"
    common.detail(out, {**item, "window": window}, DETAIL)


def occurrence_rows(out: Console, body: Any) -> None:
    common.rows(out, body, "occurrences", OCCURRENCE_COLUMNS)


def one_occurrence(out: Console, item: Any) -> None:
    out.print(f"occurrence {item['key']}")
    occurrence_rows(out, {"items": [item]})


def _fires(out: Console, body: Any) -> None:
    out.print(f"{body['schedule_id']}: {body['description']} ({body['timezone']})")
    fires = body.get("fires") or [{"fire_time": t} for t in body.get("fire_times") or []]
    found = common.table("fire time", "queued")
    for fire in fires:
        queued = ""
        if fire.get("queued"):
            queued = f"sent {common.cell(fire['sent_at'])}" if fire.get("sent_at") else "yes"
        if fire.get("excluded"):
            queued = f"{fire['excluded']}: does not run"
        found.add_row(common.cell(fire["fire_time"]), queued)
    out.print(found)
