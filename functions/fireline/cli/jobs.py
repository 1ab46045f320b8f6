"""``fireline jobs ...`` (one-off jobs) and ``fireline dead-letters ...`` (occurrences whose
attempts ran out)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from fireline.cli import client, common, schedules, spec
from fireline.services.schedules import JOB_STATES, MAX_BATCH

FIELDS = {**spec.FIELDS, "run_at": "--at", "delay_seconds": "--in"}


def add_commands(subparsers: common.SubParsers[argparse.ArgumentParser]) -> None:
    _add_job_commands(subparsers)
    _add_dead_letter_commands(subparsers)


def _add_job_commands(subparsers: common.SubParsers[argparse.ArgumentParser]) -> None:
    jobs = subparsers.add_parser(
        "jobs",
        help="one-off jobs",
        description="A tenant's one-off jobs: run once at a time or after a delay, through "
        "the same ticker, queues and workers as a schedule's fires. Create one or a batch, "
        "read, list by state, and cancel (a running long job is stopped).",
    )
    group = jobs.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = common.leaf(group, "create", _create, "create a one-off job")
    when = create.add_argument_group("when (exactly one)").add_mutually_exclusive_group(
        required=True
    )
    when.add_argument(
        "--in",
        dest="delay_seconds",
        type=common.seconds,
        metavar="SECONDS",
        help="run after a delay",
    )
    when.add_argument(
        "--at",
        dest="run_at",
        type=common.instant,
        metavar="ISO",
        help="run at 2026-12-01T09:00:00Z",
    )
    spec.add_options(create, target_required=True)
    common.add_idempotency(create, "create")
    common.name_fields(create, FIELDS)

    batch = common.leaf(
        group,
        "create-batch",
        _create_batch,
        f"create 1 to {MAX_BATCH} one-off jobs in one request, all or none",
    )
    batch.add_argument(
        "jobs",
        metavar="JOBS",
        type=_job_list,
        help='[{"delay_seconds": 60, "target": {...}}, ...] or {"jobs": [...]} as JSON, '
        "each job as the API's POST /jobs takes it, or @FILE (@- for standard input)",
    )
    common.add_idempotency(batch, "batch")

    listing = common.leaf(group, "list", _list, "list the tenant's one-off jobs by id")
    listing.add_argument("--state", choices=JOB_STATES, help="only those in this state")
    common.add_paging(listing)

    common.leaf(group, "get", _get, "show one job", subject="job")
    common.leaf(group, "cancel", _cancel, "cancel a job (stop a running long one)", subject="job")


def _create(args: argparse.Namespace) -> int:
    request = spec.fields(args)
    if args.delay_seconds is not None:
        request["delay_seconds"] = args.delay_seconds
    else:
        request["run_at"] = args.run_at
    body = common.call(args, "POST", "/jobs", request, headers=common.idempotency(args))
    return common.show(args, body, lambda out: _rows(out, {"items": [body]}))


def _job_list(value: str) -> list[Any]:
    parsed = common.json_document(value)
    if isinstance(parsed, dict) and set(parsed) == {"jobs"}:
        parsed = parsed["jobs"]
    if not isinstance(parsed, list):
        raise argparse.ArgumentTypeError('must be a JSON array of jobs, or {"jobs": [...]}')
    return parsed


def _create_batch(args: argparse.Namespace) -> int:
    request = {"jobs": args.jobs}
    body = common.call(args, "POST", "/jobs/batch", request, headers=common.idempotency(args))
    return common.show(args, body, lambda out: _rows(out, {"items": body["jobs"]}))


def _list(args: argparse.Namespace) -> int:
    body = common.page(args, "/jobs", {"state": args.state})
    return common.show(args, body, lambda out: _rows(out, body))


def _get(args: argparse.Namespace) -> int:
    body = common.call(args, "GET", client.route("jobs", args.id))
    return common.show(args, body, lambda out: _rows(out, {"items": [body]}))


def _cancel(args: argparse.Namespace) -> int:
    body = common.call(args, "POST", client.route("jobs", args.id, "cancel"))
    return common.show(args, body, lambda out: _rows(out, {"items": [body]}))


def _rows(out: Console, body: Any) -> None:
    def run(job: Any) -> Any:
        return job.get("occurrence") or {}

    common.rows(
        out,
        body,
        "jobs",
        {
            "id": lambda j: j["id"],
            "state": lambda j: j["state"],
            "run at": lambda j: j["run_at"],
            "class": lambda j: j.get("job_class"),
            "attempts": lambda j: run(j).get("attempts", 0),
            "exit reason": lambda j: run(j).get("exit_reason"),
        },
    )


# --- dead letters ------------------------------------------------------------------------


def _add_dead_letter_commands(subparsers: common.SubParsers[argparse.ArgumentParser]) -> None:
    dead = subparsers.add_parser(
        "dead-letters",
        help="occurrences whose attempts ran out",
        description="Occurrences whose attempts ran out (dead): list them newest first, "
        "and redrive one to run again, its attempts started over.",
    )
    group = dead.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = common.leaf(group, "list", _dead_list, "list dead occurrences, newest first")
    common.add_paging(listing)

    common.leaf(
        group,
        "redrive",
        _redrive,
        "queue a dead occurrence again (attempts start over); its id from 'dead-letters list'",
        subject="dead letter",
    )


def _dead_list(args: argparse.Namespace) -> int:
    body = common.page(args, "/dead-letters", {})
    return common.show(args, body, lambda out: _dead_rows(out, body))


def _redrive(args: argparse.Namespace) -> int:
    body = common.call(args, "POST", client.route("dead-letters", args.id, "redrive"))
    return common.show(args, body, lambda out: schedules.one_occurrence(out, body))


def _dead_rows(out: Console, body: Any) -> None:
    common.rows(
        out,
        body,
        "dead letters",
        {
            "id": lambda o: o["id"],
            "of": _dead_letter_of,
            "fire time": lambda o: o["fire_time"],
            "attempts": lambda o: o["attempts"],
            "exit reason": lambda o: o.get("exit_reason"),
            "finished": lambda o: o.get("finished_at"),
        },
    )


def _dead_letter_of(letter: dict[str, Any]) -> str:
    """What a dead letter is of: a node's names its run and generation, since a node
    retried ("retry failed") and dead again is one more row of the same node."""
    if letter.get("run_id"):
        return (
            f"node {letter['node_id']} of run {letter['run_id']} (generation {letter['version']})"
        )
    kind = "job" if str(letter["schedule_id"]).startswith("job_") else "schedule"
    return f"{kind} {letter['schedule_id']}"
