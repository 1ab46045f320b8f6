"""`fireline local`: run the whole scheduler on the embedded emulator, with a live screen."""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the heavy imports wait for `fireline local` itself
    from rich.console import Console, Group

    from fireline.local.cloud import LocalCloud, LocalOptions


def add_local_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "local",
        help="run Fireline on the embedded local cloud (moto), with example schedules",
        description=(
            "Deploys infra/template.yaml into an embedded emulator and plays the AWS side "
            "(the ticker's rule, the queues' event source mappings, API Gateway) with the "
            "real handlers. Ctrl-C stops everything."
        ),
    )
    parser.add_argument("--port", type=int, default=8080, help="API port on 127.0.0.1 (0: any)")
    parser.add_argument("--emulator-port", type=int, default=0, help="moto's port (0: any)")
    parser.add_argument(
        "--endpoint-url",
        help="use this emulator (e.g. LocalStack, http://localhost:4566) instead of moto",
    )
    parser.add_argument(
        "--tick-period",
        type=float,
        help="seconds between ticker invocations (the rule says 60; each ticks for ~55 s)",
    )
    parser.add_argument("--state-dir", type=Path, help="keep state here across restarts")
    parser.add_argument(
        "--template",
        type=Path,
        help=(
            "deploy this template instead of infra/template.yaml: another SAM template, or "
            "one the CDK synthesized (cdk.out/<stack>.template.json, assets beside it)"
        ),
    )
    parser.add_argument(
        "--stack-name",
        help="the stack's name (default fireline-local), e.g. for two stacks in one emulator",
    )
    parser.add_argument(
        "--key",
        dest="keys",
        action="append",
        default=[],
        metavar="KEY=TENANT",
        help="an API key and the tenant it authenticates (repeatable)",
    )
    parser.add_argument("--keys-file", type=Path, help='JSON {"key": "tenant", ...}')
    parser.add_argument("--no-examples", action="store_true", help="register no examples")
    parser.add_argument("--log-file", type=Path, default=Path(".fireline/local.log"))
    parser.add_argument(
        "--duration", type=float, help="stop after this many seconds (default: until Ctrl-C)"
    )
    parser.add_argument("--plain", action="store_true", help="print status lines, no screen")
    parser.set_defaults(run=run)


def keys_from(args: argparse.Namespace) -> dict[str, str]:
    from fireline.local.cloud import DEFAULT_KEYS

    keys: dict[str, str] = {}
    if args.keys_file:
        keys.update(json.loads(args.keys_file.read_text()))
    for pair in args.keys:
        key, sep, tenant = pair.partition("=")
        if not sep or not key or not tenant:
            raise SystemExit(f"--key takes KEY=TENANT, got {pair!r}")
        keys[key] = tenant
    return keys or dict(DEFAULT_KEYS)


def options_from(args: argparse.Namespace) -> LocalOptions:
    """What `fireline local ARGS` starts: the local cloud's options from its flags."""
    from fireline.local.cloud import LocalOptions

    options = LocalOptions(
        api_port=args.port,
        emulator_port=args.emulator_port,
        endpoint_url=args.endpoint_url,
        tick_period=args.tick_period,
        api_keys=keys_from(args),
        state_dir=args.state_dir,
        log_path=args.log_file,
    )
    if args.stack_name:
        options.stack_name = args.stack_name
    if args.template:
        options.template_path = args.template
    return options


def run(args: argparse.Namespace) -> int:
    from rich.live import Live

    from fireline.local import deploy, examples, runtime
    from fireline.local.cloud import LocalCloud

    console = status_console()
    args.log_file.parent.mkdir(parents=True, exist_ok=True)
    options = options_from(args)
    shown = args.template or "infra/template.yaml"
    console.print(f"[bold]Fireline local cloud[/bold]: deploying {shown} ...")
    cloud = LocalCloud(options)
    started = time.monotonic()
    try:
        cloud.start()
    except runtime.ApiPortInUse as exc:
        console.print(
            f"[bold red]error[/bold red]: the API's {exc.strerror} (another local cloud?). "
            "Stop it, or choose another port: make run ARGS='--port 8081' "
            "(--port 0: any free port)",
            soft_wrap=True,
        )
        return 2
    except deploy.DeployFailed as exc:
        console.print(f"[bold red]error[/bold red]: {exc}", soft_wrap=True)
        return 2
    key = next(iter(options.api_keys))
    console.print(
        f"deployed in {time.monotonic() - started:.1f} s into {cloud.endpoint_url}; "
        f"API on {cloud.api_url} (x-api-key: {key} -> {options.api_keys[key]})"
    )
    console.print(try_hint(cloud.api_url, key))
    console.print(admin_hint(cloud.endpoint_url, options.stack_name))
    console.print(f"API reference (Swagger UI, offline): {cloud.api_url}/docs")
    console.print(
        f"[bold]console[/bold]: {cloud.api_url}/console (sign in with the API key {key})",
        soft_wrap=True,
    )
    if cloud.deployed is not None:
        console.print(f"played locally: {', '.join(sorted(cloud.deployed.set_aside))}")
    if not args.no_examples:
        made = examples.register(cloud.api_url, key)
        count = sum("id" in m or "workflow_id" in m for m in made)
        console.print(f"registered {count} example schedules, jobs and workflows")
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = time.monotonic() + args.duration if args.duration else None
    try:
        if args.plain or not sys.stdout.isatty():
            while not stop.wait(5) and not (deadline and time.monotonic() > deadline):
                console.print(plain_line(cloud.status()))
        else:
            with Live(screen(cloud, args), console=console, refresh_per_second=2) as live:
                while not stop.wait(1) and not (deadline and time.monotonic() > deadline):
                    live.update(screen(cloud, args))
    finally:
        console.print("stopping ...")
        cloud.stop()
        if options.state_dir:
            console.print(f"state saved in {options.state_dir}")
    return 0


def status_console(**options: Any) -> Console:
    """Where the status lines go: a line is never wrapped (piped, a terminal's width is
    80 columns, and a command split over two lines cannot be pasted)."""
    from rich.console import Console

    return Console(soft_wrap=True, **options)


def try_hint(api_url: str, key: str, argv0: str | None = None) -> str:
    """A command to paste that lists the tenant's schedules, naming the CLI as it can be
    run from here: ``fireline`` when that is this one on PATH, else this one's path (as
    ``make run`` names it: .venv/bin/fireline), else through this Python."""
    shown = cli_command(sys.argv[0] if argv0 is None else argv0)
    return f"try: export FIRELINE_API_URL={api_url} FIRELINE_API_KEY={key}; {shown} schedules list"


def admin_hint(endpoint_url: str, stack: str, argv0: str | None = None) -> str:
    """The same for the admin commands: where they find this stack (no AWS setting)."""
    from fireline.cli import deployment

    shown = cli_command(sys.argv[0] if argv0 is None else argv0)
    return (
        f"admin: export {deployment.STACK_ENV}={stack} {deployment.ENDPOINT_ENV}={endpoint_url}; "
        f"{shown} admin keys list"
    )


def cli_command(argv0: str) -> str:
    program = Path(argv0)
    on_path = shutil.which("fireline")
    if program.name == "fireline" and program.is_file():
        if on_path and Path(on_path).resolve() == program.resolve():
            return "fireline"
        return shlex.quote(str(program))
    return f"{shlex.quote(sys.executable)} -m fireline.cli.main"


def plain_line(status: dict[str, Any]) -> str:
    counts = status["occurrences"]
    classes = " ".join(
        f"{name}={c['backlog']}/{c['in_flight']}" for name, c in status["classes"].items()
    )
    return (
        f"queues(backlog/in-flight) {classes} | "
        + " ".join(f"{state}={n}" for state, n in sorted(counts.items()))
        + f" | {_lags(status, '=')}"
        + f" | lease {status['lease'] or '-'}"
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value / 1000:.1f}s"


def _lags(status: dict[str, Any], equals: str = " ") -> str:
    """``start lag p50 0.4s p99 1.2s  enqueue lag p50 0.0s p99 0.0s``."""
    lags = status["lags_ms"]
    return "  ".join(
        f"{label} lag p50{equals}{_ms(lags[name][0])} p99{equals}{_ms(lags[name][1])}"
        for label, name in (("start", "StartLag"), ("enqueue", "EnqueueLag"))
    )


def screen(cloud: LocalCloud, args: argparse.Namespace) -> Group:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    status = cloud.status()
    queues = Table(title="queues", expand=False)
    queues.add_column("class")
    queues.add_column("backlog", justify="right")
    queues.add_column("in flight", justify="right")
    for name, figures in status["classes"].items():
        queues.add_row(name, str(figures["backlog"]), str(figures["in_flight"]))
    counts = status["occurrences"]
    outcomes = Table(title="occurrences", expand=False)
    for state in ("queued", "running", "succeeded", "failed", "dead", "skipped", "cancelled"):
        outcomes.add_column(state, justify="right")
    outcomes.add_row(
        *(
            str(counts.get(s, 0))
            for s in ("queued", "running", "succeeded", "failed", "dead", "skipped", "cancelled")
        )
    )
    header = Text.assemble(
        ("Fireline local cloud  ", "bold"),
        f"API {cloud.api_url}   console {cloud.api_url}/console   log {args.log_file}\n",
        f"emulator {cloud.endpoint_url}\n",
        f"{_lags(status)}   ",
        f"ticker lease {status['lease'] or '-'}   API requests {status['api_requests']}\n",
        ("Ctrl-C stops everything.", "dim"),
    )
    return Group(header, queues, outcomes)
