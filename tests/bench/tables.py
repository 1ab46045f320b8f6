"""The figures the README and the docs quote, written from .bench/report.json.

``make bench`` ends with ``python -m bench.tables``: each block between
``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` in the files of :data:`BLOCKS` is
written again from the report of that run, every figure beside the report key it comes
from and the calibration it ran under (the SDK's client CPU per call measured on the
machine, the scale). So a figure the docs quote is always the latest run's on the code it
describes; a key the run did not measure reads "not measured", never an older value.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import report as bench_report

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / ".bench" / "report.json"
NOT_MEASURED = "not measured"

Report = Mapping[str, Any]


def get(report: Report, key: str, *path: str) -> Any:
    """``report[key][path...]``, or None where any part is missing."""
    node: Any = report.get(key)
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


# The largest tenant's starts a second while at its limit (bench_e2e.test_the_largest_tenant).
AT_ITS_LIMIT = "started_per_second_in_the_minute_after_due"


def num(value: Any, digits: int = 2, suffix: str = "") -> str:
    if value is None:
        return NOT_MEASURED
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or float(value).is_integer():
        text = f"{int(value):,}"
    else:
        text = f"{value:,.{digits}f}"
    return text + suffix


def share(value: Any) -> str:
    return NOT_MEASURED if value is None else f"{value * 100:.2f}%"


def spread(report: Report, key: str, *path: str) -> str:
    """A p50 / p99 / max spread, in seconds."""
    found = get(report, key, *path)
    if not isinstance(found, Mapping) or found.get("p50") is None or found.get("count") == 0:
        return NOT_MEASURED
    return " / ".join(num(found.get(q), 2) for q in ("p50", "p99", "max")) + " s"


def calibration(report: Report, key: str) -> str:
    """The run's calibration: the SDK's client CPU per call (the median of the
    operations measured), the scale and the day written."""
    calibrated = get(report, key, "calibration", "sdk_client_cpu_us_per_call")
    scale = get(report, key, "scale")
    if not isinstance(calibrated, Mapping) or not calibrated:
        return NOT_MEASURED
    values = sorted(calibrated.values())
    median_ms = values[len(values) // 2] / 1000
    at = f"scale {num(scale, 2)}" if scale not in (None, 1, 1.0) else "full size"
    commit = get(report, "stamps", key, "commit")
    on = f", on code {commit}" if commit else ""
    return (
        f"SDK client CPU {median_ms:.2f} ms a call (median of {len(values)} operations), {at}{on}"
    )


def table(rows: list[tuple[str, str, str]]) -> str:
    lines = ["| figure | `.bench/report.json` key | result |", "| --- | --- | --- |"]
    lines += [f"| {what} | `{key}` | {value} |" for what, key, value in rows]
    return "\n".join(lines)


def headline(report: Report) -> str:
    """The README's: what a user of the defaults sees, end to end, and what it costs."""
    burst = "e2e.burst_50k.defaults"
    doubled = "e2e.burst_50k.defaults_cpu_x2"
    rows = [
        (
            "50,000 one-second HTTP jobs due in one second, on top of 580 a second: started "
            "within 2 s of due (goal: 99%)",
            burst,
            share(get(report, burst, "started_within_2s_share")),
        ),
        (
            "the same: start lag p50 / p99 / max (goal: p99 2 s)",
            burst,
            spread(report, burst, "start_lag_seconds"),
        ),
        (
            "the same: lost, started twice",
            burst,
            f"{num(get(report, burst, 'lost'))}, {num(get(report, burst, 'started_twice'))}",
        ),
        (
            "the same at twice the SDK's CPU per call: visible by their second (goal: 99%); "
            "start lag p50 / p99 / max",
            doubled,
            f"{share(get(report, doubled, 'visible_by_due_share'))}; "
            f"{spread(report, doubled, 'start_lag_seconds')}",
        ),
        (
            "one tenant with 500 jobs a second and a 10,000 burst of its own: lateness "
            "p50 / p99 / max (goal: p99 1 s); throttled writes; jobs it started a second "
            "in the minute after due, at its limit of 800 (goal: 500)",
            "e2e.big_tenant",
            f"{spread(report, 'e2e.big_tenant', 'lateness_seconds')}; "
            f"{num(get(report, 'e2e.big_tenant', 'throttled_writes'))}; "
            f"{num(get(report, 'e2e.big_tenant', AT_ITS_LIMIT), 1)}",
        ),
    ]
    for path, what in (
        ("http_1s", "an HTTP target answering in 1 s"),
        ("http_3s", "an HTTP target answering in 3 s (goal: $2.50)"),
        ("lambda_3s", "a tenant's Lambda answering in 3 s (goal: $2.50)"),
        ("minutely", "an every-minute schedule's fire (no-op Python target)"),
    ):
        rows.append(
            (
                f"$ per million jobs, all in, at the design load: {what}",
                f"cost.{path}",
                num(get(report, f"cost.{path}", "usd_per_million"), 2),
            )
        )
    return (
        table(rows)
        + f"\n\nCalibration: {calibration(report, burst)}; written "
        + f"{get(report, 'machine', 'written_at') or NOT_MEASURED}."
    )


def scale(report: Report) -> str:
    """docs/scale.md's: the end-to-end runs and the ticker's."""
    burst, doubled = "e2e.burst_50k.defaults", "e2e.burst_50k.defaults_cpu_x2"
    python, big = "e2e.python_jobs", "e2e.big_tenant"
    rows = []
    for key, what in ((burst, "as measured"), (doubled, "at twice the SDK's CPU per call")):
        rows += [
            (
                f"50,000 one-second HTTP jobs due in one second over 10,000 tenants, on top "
                f"of 580 a second, {what}: started within 2 s; start lag p50 / p99 / max",
                key,
                f"{share(get(report, key, 'started_within_2s_share'))}; "
                f"{spread(report, key, 'start_lag_seconds')}",
            ),
            (
                "the same: visible by their second; finished by their second + 10 s; lost; "
                "started twice",
                key,
                f"{share(get(report, key, 'visible_by_due_share'))}; "
                f"{share(get(report, key, 'finished_by_due_plus_10s_share'))}; "
                f"{num(get(report, key, 'lost'))}; {num(get(report, key, 'started_twice'))}",
            ),
            (
                "the same: the steady load's start lag p50 / p99 / max; worker invocations; "
                "cold starts; GB-s a job",
                key,
                f"{spread(report, key, 'steady_load_start_lag_seconds')}; "
                f"{num(get(report, key, 'worker_invocations'))}; "
                f"{num(get(report, key, 'worker_cold_starts'))}; "
                f"{num(get(report, key, 'worker_gb_seconds_per_job_started'), 4)}",
            ),
        ]
    rows += [
        (
            "the largest tenant (30,000 every-minute schedules of 4 KB, its own 10,000 "
            "burst, its limit override): lateness p50 / p99 / max; throttled writes; lost; "
            "its burst started within 2 s",
            big,
            f"{spread(report, big, 'lateness_seconds')}; "
            f"{num(get(report, big, 'throttled_writes'))}; {num(get(report, big, 'lost'))}; "
            f"{share(get(report, big, 'started_within_2s_share'))}",
        ),
        (
            "the largest tenant: jobs started a second in the minute after due (at its "
            "limit); its every-minute jobs' start lag p50 / p99 / max before its burst, and "
            "over the whole run; messages sent again (deferrals); of its burst, not started "
            "60 s after due",
            big,
            f"{num(get(report, big, AT_ITS_LIMIT), 1)}; "
            f"{spread(report, big, 'steady_start_lag_before_the_burst_seconds')}, "
            f"{spread(report, big, 'steady_load_start_lag_seconds')}; "
            f"{num(get(report, big, 'messages_sent_again'))}; "
            f"{num((get(report, big, 'not_started_by_due_plus_seconds') or {}).get('60'))}",
        ),
        (
            "one-second Python jobs (a second of CPU each, a child process an attempt): "
            "started a second at the defaults",
            python,
            num(get(report, python, "jobs_started_per_second"), 1),
        ),
        (
            "Python jobs: invocations to start 50,000 within 10 s, by memory",
            python,
            ", ".join(
                f"{mb}: {num(n)}"
                for mb, n in (
                    get(report, python, "derived_invocations_for_50k_within_10s") or {}
                ).items()
            )
            or NOT_MEASURED,
        ),
    ]
    ticker_rows: list[tuple[str, str, Callable[[str], str]]] = [
        (
            "steady 580 fires a second, one ticker group: lost, duplicates, lateness p99",
            "scale.steady_580",
            lambda k: (
                f"{num(get(report, k, 'lost'))}, "
                f"{num(get(report, k, 'duplicate_messages'))}, "
                f"{num(get(report, k, 'lateness_seconds', 'p99'), 2)} s"
            ),
        ),
        (
            "50,000 due in one second on the steady load, one group: visible by their second",
            "scale.burst_50k.groups_1",
            lambda k: share(get(report, k, "enqueued_visible_by_due_share")),
        ),
        (
            "the same, two groups",
            "scale.burst_50k",
            lambda k: share(get(report, k, "enqueued_visible_by_due_share")),
        ),
    ]
    rows += [(what, key, render(key)) for what, key, render in ticker_rows]
    return table(rows) + f"\n\nCalibration: {calibration(report, burst)}."


def ticker(report: Report) -> str:
    """docs/scale.md's second table: the ticker alone (its groups, bursts, CPU per fire)."""
    groups = "scale.groups"
    steady = "scale.steady_580"
    per_call = get(report, "scale.sdk_client_cpu_us_per_call") or {}
    further = get(report, "scale.sdk_client_cpu_us_per_further_item", "dynamodb.BatchGetItem")
    rows = [
        (
            "fires a second that need an advance each (hourly schedules, one-off jobs), "
            "a backlog drained by 1 / 2 / 4 groups",
            groups,
            " / ".join(
                num(get(report, groups, f"groups_{n}", "fires_per_second")) for n in (1, 2, 4)
            ),
        ),
        (
            "steady 580 fires a second, one group: its vCPU busy (mean); fires visible "
            "before their second p50 / p99 / max",
            steady,
            f"{share(get(report, steady, 'ticker_vcpu_busy', 'mean'))}; "
            f"{spread(report, steady, 'early_seconds')}",
        ),
    ]
    for key, what in (
        ("scale.burst_50k.groups_1", "50,000 due in one second on the steady load, one group"),
        ("scale.burst_50k", "the same, two groups"),
        ("scale.burst_100k", "100,000 due in one second on the steady load, two groups"),
    ):
        last = get(report, key, "last_enqueued_seconds_after_due")
        rows.append(
            (
                f"{what}: visible by their second; lateness max; the last sent, seconds "
                "before its second",
                key,
                f"{share(get(report, key, 'enqueued_visible_by_due_share'))}; "
                f"{num(get(report, key, 'lateness_seconds', 'max'), 2, ' s')}; "
                f"{num(None if last is None else -last, 1, ' s')}",
            )
        )
    for zone in ("utc", "new_york"):
        key = f"scale.ticker_cpu_us_per_fire.{zone}"
        rows.append(
            (
                f"the ticker's own CPU per fire ({zone.replace('_', ' ')} schedules), µs: "
                "compiled timing / croniter",
                key,
                f"{num(get(report, key, 'after_compiled'), 1)} / "
                f"{num(get(report, key, 'before_croniter'), 1)}",
            )
        )
    rows.append(
        (
            "the SDK's client CPU per call on this machine, µs (each further item of a "
            f"BatchGetItem: {num(further)})",
            "scale.sdk_client_cpu_us_per_call",
            ", ".join(f"{op} {num(us)}" for op, us in sorted(per_call.items())) or NOT_MEASURED,
        )
    )
    scaled = get(report, steady, "scale")
    at = NOT_MEASURED if scaled is None else ("full size" if scaled == 1 else f"scale {scaled}")
    return (
        table(rows)
        + f"\n\nRun at {at}; written {get(report, 'machine', 'written_at') or NOT_MEASURED}."
    )


COST_PATHS = (
    ("minutely", "every-minute schedule"),
    ("every_second", "every-second schedule"),
    ("one_off", "one-off job, one per request"),
    ("one_off_batched", "one-off jobs, 100 per request"),
    ("tenant_limited", "every-minute schedule, its tenant limited"),
    ("http_1s", "HTTP target answering in 1 s"),
    ("http_3s", "HTTP target answering in 3 s"),
    ("lambda_3s", "tenant's Lambda answering in 3 s"),
    ("workflow_node", "workflow node"),
)


def cost(report: Report) -> str:
    """docs/cost.md's: each path's dollars per million and its worker's billed time."""
    lines = [
        "| path | key | $ per million at the design load | marginal | Lambda GB-s a job "
        "(worker) | worker invocations per 1,000 jobs |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for path, what in COST_PATHS:
        key = f"cost.{path}"

        def figure(*field: str, digits: int = 2, key: str = key) -> str:
            # A path measured without this figure (a workflow node has no worker of its
            # own to bill) says so, rather than "not measured".
            if key in report and get(report, key, *field) is None:
                return "does not apply"
            return num(get(report, key, *field), digits)

        lines.append(
            f"| {what} | `{key}` | {figure('usd_per_million')} | "
            f"{figure('marginal_usd_per_million')} | "
            f"{figure('lambda_gb_seconds_per_fire', 'worker', digits=4)} | "
            f"{figure('worker_invocations_per_1000_fires', digits=1)} |"
        )
    lines.append("")
    simulated = "cost.simulated_workers.remote_3s"
    if get(report, simulated, "calibration") is None and get(report, simulated, "scale"):
        # A run whose simulated workers did not record their calibration: the end-to-end
        # runs of the same make bench measured it on the same machine, and say so.
        own = (
            "not recorded by the simulated workers; the same run's end-to-end burst measured "
            + calibration(report, "e2e.burst_50k.defaults")
        )
    else:
        own = calibration(report, simulated)
    lines.append(
        "Calibration of the workers' simulated wall time: "
        + own
        + f"; written {get(report, 'machine', 'written_at') or NOT_MEASURED}."
    )
    return "\n".join(lines)


def fixed(report: Report) -> str:
    """docs/cost.md's second table: the ticker's fixed cost, the break-even against
    EventBridge Scheduler, and the wait a fire visible early costs."""
    key, minutely = "cost.fixed_per_minute", "cost.minutely"
    requests = get(report, key, "requests_per_fire") or {}
    rows = [
        (
            "a ticker group's minute: Queries, lease writes",
            key,
            f"{num(requests.get('dynamodb.Query'))}, {num(requests.get('dynamodb.UpdateItem'))}",
        ),
        (
            "a ticker group's minute: $ per million minutes; $ a day",
            key,
            f"{num(get(report, key, 'usd_per_million'))}; {num(get(report, key, 'usd_per_day'))}",
        ),
        (
            "every-minute fires a minute from which Fireline costs less per fire than the "
            "idempotent EventBridge Scheduler alternative (one group)",
            minutely,
            num(get(report, minutely, "break_even_fires_per_minute")),
        ),
        (
            "an every-minute fire's wait for its time, as the metered tick sends ($ per "
            "million, `lambda.wait`)",
            minutely,
            num(get(report, minutely, "usd_by_service", "lambda.wait"), 3),
        ),
        (
            "fires visible before their second in the latency model, 580 a second on one "
            "group: p50 / p99 / max",
            "scale.steady_580",
            spread(report, "scale.steady_580", "early_seconds"),
        ),
    ]
    return table(rows) + f"\n\nWritten {get(report, 'machine', 'written_at') or NOT_MEASURED}."


def isolation(report: Report) -> str:
    """docs/isolation.md's: what a process per Python job costs beside a thread."""
    key = "isolation.python_job_overhead"

    def p50_ms(part: str) -> str:
        us = get(report, key, part, "p50_us")
        return NOT_MEASURED if us is None else f"{us / 1000:.2f} ms"

    rows = [
        ("a job that returns at once, in a child process: p50", key, p50_ms("child_process")),
        ("the same on a thread of the worker's: p50", key, p50_ms("own_thread")),
        (
            "a bare fork, exit and reap of the same process: p50",
            key,
            p50_ms("bare_fork_exit_wait"),
        ),
        (
            "the worker process forked (its peak resident memory, MB)",
            key,
            num(get(report, key, "parent_max_rss_mb")),
        ),
    ]
    return table(rows) + f"\n\nWritten {get(report, 'machine', 'written_at') or NOT_MEASURED}."


def workflows(report: Report) -> str:
    """docs/workflows.md's: a 100,000-node run on the memory adapters, a 2,000-node one on
    moto, and a node's cost."""
    memory, moto, cost_key = "workflow.memory_100k", "workflow.moto_2000", "cost.workflow_node"
    walk = "workflow.walk_against_levels"
    requests = get(report, moto, "requests_per_node") or {}
    rows = [
        (
            "100,000 nodes on the memory adapters: registering, s; the controller's and the "
            "workers' CPU per node, µs",
            memory,
            f"{num(get(report, memory, 'registered_seconds'), 1)}; "
            f"{num(get(report, memory, 'controller_us_per_node'))}, "
            f"{num(get(report, memory, 'worker_us_per_node'))}",
        ),
        (
            "the same, per node: node-row item writes, occurrence writes, SQS send requests",
            memory,
            f"{num(get(report, memory, 'node_row_writes_per_node'))}, "
            f"{num(get(report, memory, 'occurrence_writes_per_node'))}, "
            f"{num(get(report, memory, 'sqs_send_requests_per_node'))}",
        ),
        (
            "2,000 nodes on moto, per node: node-row item writes; requests by operation",
            moto,
            f"{num(get(report, moto, 'node_row_writes_per_node'))}; "
            + (", ".join(f"{op} {num(n)}" for op, n in sorted(requests.items())) or NOT_MEASURED),
        ),
        (
            "a 20,000-node wide DAG, durations seeded, 1% of nodes slow: the walk's "
            "makespan against level by level, simulated s",
            walk,
            f"{num(get(report, walk, 'walk_makespan_seconds'))} "
            f"against {num(get(report, walk, 'levels_makespan_seconds'))}",
        ),
        (
            "a node's cost: write units, index write units, $ per million",
            cost_key,
            f"{num(get(report, cost_key, 'write_units_per_fire'))}, "
            f"{num(get(report, cost_key, 'index_write_units_per_fire'))}, "
            f"{num(get(report, cost_key, 'usd_per_million'))}",
        ),
    ]
    return table(rows) + f"\n\nWritten {get(report, 'machine', 'written_at') or NOT_MEASURED}."


def dispatch(report: Report) -> str:
    """docs/workers.md's: the worker's threads against asyncio for remote targets."""
    rows = []
    for seconds in (1, 3):
        key = f"dispatch.compared.http_{seconds}s"
        rows += [
            (
                f"targets answering in {seconds} s: CPU per fire, ms, threads (warm) / "
                "threads (cold) / asyncio",
                key,
                " / ".join(
                    num(get(report, key, f"cpu_ms_per_fire_{lane}"), 3)
                    for lane in ("threads", "threads_cold", "asyncio")
                ),
            ),
            (
                f"targets answering in {seconds} s: the first wave's start lateness p99, s, "
                "threads (warm) / threads (cold) / asyncio",
                key,
                " / ".join(
                    num(get(report, key, f"first_wave_p99_lateness_s_{lane}"), 3)
                    for lane in ("threads", "threads_cold", "asyncio")
                ),
            ),
        ]
    return table(rows) + f"\n\nWritten {get(report, 'machine', 'written_at') or NOT_MEASURED}."


PEER_CONTENDERS = (
    ("peer.apscheduler.memory", "APScheduler 3, memory job store"),
    ("peer.apscheduler.sqlite", "APScheduler 3, SQLAlchemy job store on SQLite"),
    ("peer.fireline.memory", "Fireline, memory adapters"),
)


def peer(report: Report) -> str:
    """docs/apscheduler.md's: the same load on each contender, and Fireline's CPU with
    its AWS calls' client CPU."""
    lines = [
        "| contender | key | CPU s per 1,000 fires | lateness p50 / p99 / max | fires run of "
        "those due | lost (misfires) | duplicated |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key, what in PEER_CONTENDERS:
        misfires = get(report, key, "misfires")
        lost = num(get(report, key, "lost"))
        lines.append(
            f"| {what} | `{key}` | {num(get(report, key, 'cpu_seconds_per_1k_fires'), 3)} | "
            f"{spread(report, key, 'lateness_seconds')} | "
            f"{num(get(report, key, 'fires_run'))} of {num(get(report, key, 'fires_due'))} | "
            f"{lost if misfires is None else f'{lost} ({num(misfires)})'} | "
            f"{num(get(report, key, 'duplicates'))} |"
        )
    fireline = "peer.fireline.memory"
    lines.append(
        "| Fireline with the SDK's client CPU of its AWS calls (what a deployed ticker and "
        f"worker spend) | `{fireline}` | "
        f"{num(get(report, fireline, 'cpu_seconds_per_1k_fires_with_sdk_client_cpu'), 3)} | "
        "(the same run) | | | |"
    )
    lines.append("")
    requests = num(get(report, fireline, "aws_requests_per_fire"), 3)
    lines.append(
        f"Fireline's AWS requests per fire: {requests} (`aws_requests_per_fire`); SDK client "
        "CPU per call: "
        + (
            ", ".join(
                f"{op} {us / 1000:.2f} ms"
                for op, us in (get(report, fireline, "sdk_client_cpu_us_per_call") or {}).items()
            )
            or NOT_MEASURED
        )
        + f"; each contender's window {num(get(report, fireline, 'window_seconds'))} s"
        + f"; written {get(report, 'machine', 'written_at') or NOT_MEASURED}."
    )
    return "\n".join(lines)


BLOCKS: dict[str, tuple[Path, Callable[[Report], str]]] = {
    "headline": (ROOT / "README.md", headline),
    "scale": (ROOT / "docs" / "scale.md", scale),
    "ticker": (ROOT / "docs" / "scale.md", ticker),
    "cost": (ROOT / "docs" / "cost.md", cost),
    "fixed": (ROOT / "docs" / "cost.md", fixed),
    "peer": (ROOT / "docs" / "apscheduler.md", peer),
    "isolation": (ROOT / "docs" / "isolation.md", isolation),
    "dispatch": (ROOT / "docs" / "workers.md", dispatch),
    "workflows": (ROOT / "docs" / "workflows.md", workflows),
}


def rewrite(text: str, name: str, body: str) -> str:
    """``text`` with the block ``name`` holding ``body``; an error where it has none."""
    pattern = re.compile(
        rf"(<!-- bench:{re.escape(name)} -->\n).*?(\n<!-- /bench:{re.escape(name)} -->)",
        re.DOTALL,
    )
    if not pattern.search(text):
        raise ValueError(f"no <!-- bench:{name} --> block")
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text, count=1)


def main(report_path: Path = REPORT) -> int:
    if not report_path.exists():
        print(f"{report_path} is missing: run make bench first", file=sys.stderr)
        return 2
    report = json.loads(report_path.read_text())
    stale = sorted(
        key
        for key, stamp in (report.get("stamps") or {}).items()
        if stamp.get("tree") != bench_report.code_stamp()["tree"]
    )
    if stale:
        # Written all the same (the report is what was measured), but said: a figure from
        # other code than this is to be measured again before it is quoted.
        print(f"keys measured on other code than this: {', '.join(stale)}", file=sys.stderr)
    for name, (path, render) in BLOCKS.items():
        path.write_text(rewrite(path.read_text(), name, render(report)))
        print(f"{path.relative_to(ROOT)}: {name} written from {report_path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
