"""``fireline workflows ...`` (DAGs of jobs, by version) and ``fireline runs ...`` (their
runs and the runs' nodes)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console

from fireline.cli import client, common
from fireline.domain import dag
from fireline.services.workflows import RUN_STATES

NODE_STATES = tuple(s.value for s in dag.NodeState)
# The largest page of a run's nodes (the API's own maximum).
MAX_NODE_PAGE = 1000
RUN_COLUMNS = {
    "run id": lambda r: r["run_id"],
    "workflow": lambda r: r["workflow_id"],
    "version": lambda r: r["version"],
    "state": lambda r: r["state"],
    "nodes": lambda r: r["total"],
    "generation": lambda r: r["generation"],
    "created": lambda r: r.get("created_at"),
    "finished": lambda r: r.get("finished_at"),
}


def add_commands(subparsers: common.SubParsers[argparse.ArgumentParser]) -> None:
    workflows = subparsers.add_parser(
        "workflows",
        help="workflows: DAGs of jobs",
        description="A tenant's workflows: DAGs of jobs, each node run once its parents "
        "succeeded. Register a definition (a new version each time), read the latest "
        "version and list them; their runs are the runs commands'.",
    )
    group = workflows.add_subparsers(dest="action", metavar="ACTION", required=True)

    register = common.leaf(
        group,
        "register",
        _register,
        "register a workflow definition (a new version)",
        subject="workflow",
    )
    register.add_argument(
        "definition",
        metavar="DEFINITION",
        type=common.json_object,
        help='{"nodes": [...], "edges": [[parent, child], ...]} as JSON, or @FILE',
    )
    register.add_argument("--description", metavar="TEXT", help="replaces the document's")
    register.add_argument(
        "--upload",
        action="store_true",
        help="send the document through a presigned upload (done anyway when the API "
        "finds it too large for a request)",
    )
    common.add_idempotency(register, "registration")
    common.name_fields(register, {"description": "--description"})

    common.leaf(group, "get", _get, "show a workflow's latest version", subject="workflow")
    common.add_paging(common.leaf(group, "list", _list, "list the tenant's workflows by id"))

    runs = subparsers.add_parser(
        "runs",
        help="runs of workflows",
        description="Runs of a tenant's workflows: start one, read it and its nodes, list a "
        "workflow's runs, cancel one, retry its failed nodes, or reconcile it.",
    )
    group = runs.add_subparsers(dest="action", metavar="ACTION", required=True)

    start = common.leaf(group, "start", _start, "start a run of a workflow", subject="workflow")
    start.add_argument("--version", type=common.positive, metavar="N", help="default: the latest")
    common.add_idempotency(start, "start")
    common.name_fields(start, {"version": "--version"})

    common.leaf(group, "get", _run_get, "show a run: state, nodes per state", subject="run")

    listing = common.leaf(
        group, "list", _run_list, "a workflow's runs, newest first", subject="workflow"
    )
    listing.add_argument("--state", choices=RUN_STATES, help="only those in this state")
    common.add_paging(listing)

    nodes = common.leaf(
        group, "nodes", _run_nodes, "a run's nodes by id, with exit reasons", subject="run"
    )
    nodes.add_argument("--state", choices=NODE_STATES, help="only those in this state")
    common.add_paging(nodes, MAX_NODE_PAGE)

    common.leaf(group, "cancel", _run_action("cancel"), "cancel a run", subject="run")
    common.leaf(
        group,
        "retry",
        _run_action("retry"),
        "re-run a failed run's failed and blocked nodes",
        subject="run",
    )
    common.leaf(
        group,
        "reconcile",
        _run_action("reconcile"),
        "repair a run from its node states",
        subject="run",
    )


def _register(args: argparse.Namespace) -> int:
    document = dict(args.definition)
    if args.description is not None:
        document["description"] = args.description
    path = client.route("workflows", args.id)
    headers = common.idempotency(args)
    body = None
    if not args.upload:
        try:
            body = common.call(args, "PUT", path, document, headers=headers)
        except client.ApiError as exc:
            if exc.status != 413:
                raise
    if body is None:  # asked for, or the definition is too large to go inline
        body = common.call(
            args, "PUT", path, {"upload_id": _upload(args, document)}, headers=headers
        )
    return common.show(args, body, lambda out: _workflow_rows(out, {"items": [body]}))


def _upload(args: argparse.Namespace, document: dict[str, Any]) -> str:
    """Upload a definition through the API's presigned POST; its upload id."""
    form = common.call(args, "POST", "/workflow-uploads")
    raw = json.dumps(document, separators=(",", ":")).encode()
    client.post_form(form["upload_url"], form["upload_fields"], raw)
    return str(form["upload_id"])


def _get(args: argparse.Namespace) -> int:
    body = common.call(args, "GET", client.route("workflows", args.id))
    return common.show(args, body, lambda out: _workflow_rows(out, {"items": [body]}))


def _list(args: argparse.Namespace) -> int:
    body = common.page(args, "/workflows", {})
    return common.show(args, body, lambda out: _workflow_rows(out, body))


def _start(args: argparse.Namespace) -> int:
    request = {} if args.version is None else {"version": args.version}
    path = client.route("workflows", args.id, "runs")
    body = common.call(args, "POST", path, request, headers=common.idempotency(args))
    return common.show(args, body, lambda out: _run_rows(out, {"items": [body]}))


def _run_get(args: argparse.Namespace) -> int:
    body = common.call(args, "GET", client.route("runs", args.id))
    return common.show(args, body, lambda out: _run_view(out, body))


def _run_list(args: argparse.Namespace) -> int:
    body = common.page(args, client.route("workflows", args.id, "runs"), {"state": args.state})
    return common.show(args, body, lambda out: _run_rows(out, body))


def _run_nodes(args: argparse.Namespace) -> int:
    body = common.page(args, client.route("runs", args.id, "nodes"), {"state": args.state})
    return common.show(args, body, lambda out: _node_rows(out, body))


def _run_action(action: str) -> common.Run:
    def run(args: argparse.Namespace) -> int:
        body = common.call(args, "POST", client.route("runs", args.id, action))
        return common.show(args, body, lambda out: _run_rows(out, {"items": [body]}))

    return run


# --- output ------------------------------------------------------------------------------


def _workflow_rows(out: Console, body: Any) -> None:
    common.rows(
        out,
        body,
        "workflows",
        {
            "id": lambda w: w["workflow_id"],
            "version": lambda w: w["version"],
            "nodes": lambda w: w["nodes"],
            "edges": lambda w: w["edges"],
            "created": lambda w: w.get("created_at"),
        },
    )


def _run_rows(out: Console, body: Any) -> None:
    common.rows(out, body, "runs", RUN_COLUMNS)


def _run_view(out: Console, run: Any) -> None:
    _run_rows(out, {"items": [run]})
    counts = run.get("counts") or {}
    shown = ", ".join(f"{state} {n}" for state, n in counts.items() if n)
    out.print(f"nodes: {shown or 'none'}; progress {float(run.get('progress') or 0):.0%}")
    if run.get("failed_nodes"):
        out.print("failed: " + ", ".join(run["failed_nodes"]))


def _node_rows(out: Console, body: Any) -> None:
    common.rows(
        out,
        body,
        "nodes",
        {
            "node": lambda n: n["id"],
            "state": lambda n: n["state"],
            "generation": lambda n: n["generation"],
            "pending parents": lambda n: n["pending"],
            "exit reason": lambda n: n.get("exit_reason"),
        },
    )
