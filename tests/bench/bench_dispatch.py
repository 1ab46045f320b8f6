"""One worker invocation waiting on many remote targets at once: threads with a bounded
pool (services.worker.dispatcher, the worker's own dispatcher, each request through the
worker's own webhook client; its threads kept warm from an earlier batch, as a warm
container's are, and made for the batch, as a cold one's) against asyncio (aiohttp, a
semaphore for the same bound).

A local HTTP server on 127.0.0.1, in a process of its own (its CPU is not the client's),
answers each POST after 1 s or 3 s; it serves a bounded number of requests and stops
after a bounded time whatever happens. Every fire is due at the run's start; a fire's
start lateness is when its request went out, less that. CPU per fire is the client
process's user + system time over the run, divided by the fires. Both contenders open a
connection per request (the deployed worker calls a different tenant's endpoint each
time, so a kept-alive connection would flatter one of them).

Also here: what a Python handler job costs and how many start per second at the
defaults (a child process per attempt, one at a time at 512 MB: see worker_dispatch), and
the worker's AWS requests per fire on moto for 100 fires due together, in ten batches of
ten (the old mapping) and in one batch through the dispatcher.

Prints the figures and writes them under ``dispatch.*``; never fails on them. The machine
the figures come from is shared: they are comparisons, not capacity claims.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bench.report import record
from fireline.adapters import threads
from fireline.domain import egress
from fireline.services import dispatch, isolation, schedules, targets, webhook
from fireline.services import worker as worker_service
from fireline.services.worker import dispatcher as worker_dispatch
from helpers.cost_paths import deployed_worker
from helpers.memory_system import job_context
from helpers.system import moto_system

IN_FLIGHT = worker_dispatch.DEFAULT_IN_FLIGHT
# Two waves of the bound: the first shows the dispatch's own lateness, the second the
# wait for a place (one target's delay, whichever way it is waited on).
FIRES = 2 * IN_FLIGHT
DELAYS = (1.0, 3.0)
# The server stops after this many requests or seconds, whichever comes first.
SERVER_MAX_REQUESTS = 4 * FIRES * len(DELAYS) + IN_FLIGHT
SERVER_LIFETIME_SECONDS = 120
PYTHON_RUNS = 200
# The template's defaults the Python figures are worked out for.
WORKER_MEMORY_MB = 512
CLASS_MAX_CONCURRENCY = 50
# Lambda's CPU at a memory size, as a share of one vCPU (a full one at 1,769 MB).
LAMBDA_CPU_SHARE = WORKER_MEMORY_MB / worker_dispatch.ONE_VCPU_MB

SERVER = r"""
import asyncio, sys, time
max_requests, lifetime = int(sys.argv[1]), float(sys.argv[2])
served = 0
done = asyncio.Event()

async def answer(reader, writer):
    global served
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1]
        length = 0
        for line in lines[1:]:
            if line.lower().startswith("content-length:"):
                length = int(line.split(":", 1)[1])
        if length:
            await reader.readexactly(length)
        served += 1
        if served >= max_requests:
            done.set()
        await asyncio.sleep(float(path.rsplit("/", 1)[1]))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
    except Exception:
        pass
    finally:
        writer.close()

async def main():
    server = await asyncio.start_server(answer, "127.0.0.1", 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    try:
        await asyncio.wait_for(done.wait(), lifetime)
        await asyncio.sleep(5)  # the last answers go out
    except asyncio.TimeoutError:
        pass
    server.close()

asyncio.run(main())
"""


@contextlib.contextmanager
def slow_server() -> Iterator[int]:
    """The port of a local server that answers /sleep/<seconds> after that long."""
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(SERVER_MAX_REQUESTS), str(SERVER_LIFETIME_SECONDS)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield int(process.stdout.readline())
    finally:
        process.kill()
        process.wait()


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def lateness(starts: list[float], due: float) -> dict[str, float]:
    late = sorted(s - due for s in starts)
    return {
        "p50": round(statistics.median(late), 3),
        "p99": round(late[int(len(late) * 0.99) - 1], 3),
        "max": round(late[-1], 3),
    }


def run_threads(
    port: int, delay: float, pools: worker_dispatch.Pools | None = None
) -> tuple[list[float], float, int]:
    """The worker's way: the dispatcher's remote lane, the webhook client per request;
    on ``pools`` kept from an earlier batch (a warm container), else on threads made for
    this batch (a cold one)."""
    network = webhook.Egress(policy=egress.EgressPolicy.parse("*", "127.0.0.0/8"))
    url = f"http://127.0.0.1:{port}/sleep/{delay}"
    starts: list[float] = []
    lock = threading.Lock()
    body = json.dumps({"fire": "x" * 200}).encode()

    def fire() -> int:
        with lock:
            starts.append(time.monotonic())
        answer = webhook.post(
            network, url, body, {"Content-Type": "application/json"}, tenant_id="t", timeout=30
        )
        return answer.status

    limits = worker_dispatch.Limits(in_flight=IN_FLIGHT)
    dispatcher = worker_dispatch.Dispatcher(limits, lambda: 600_000, pools=pools)
    jobs = [worker_dispatch.Job(fire, order=float(n)) for n in range(FIRES)]
    due = time.monotonic()
    results = dispatcher.run(jobs)
    return [s - due for s in starts], due, sum(1 for r in results if r == 200)


def run_asyncio(port: int, delay: float) -> tuple[list[float], float, int]:
    """asyncio: one task per fire, a semaphore for the bound, aiohttp for the request."""
    import aiohttp

    url = f"http://127.0.0.1:{port}/sleep/{delay}"
    starts: list[float] = []
    body = json.dumps({"fire": "x" * 200}).encode()

    async def main() -> list[int]:
        bound = asyncio.Semaphore(IN_FLIGHT)
        connector = aiohttp.TCPConnector(limit=IN_FLIGHT, force_close=True)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

            async def fire() -> int:
                async with bound:
                    starts.append(time.monotonic())
                    async with session.post(
                        url, data=body, headers={"Content-Type": "application/json"}
                    ) as answer:
                        await answer.read()
                        return answer.status

            return list(await asyncio.gather(*(fire() for _ in range(FIRES))))

    due = time.monotonic()
    statuses = asyncio.run(main())
    return [s - due for s in starts], due, sum(1 for s in statuses if s == 200)


def measure(
    contender: Callable[[int, float], tuple[list[float], float, int]], port: int, delay: float
) -> dict[str, Any]:
    cpu = cpu_seconds()
    wall = time.monotonic()
    starts, _, answered = contender(port, delay)
    spent = cpu_seconds() - cpu
    wall = time.monotonic() - wall
    return {
        "fires": FIRES,
        "in_flight": IN_FLIGHT,
        "target_delay_s": delay,
        "answered_200": answered,
        "cpu_ms_per_fire": round(spent * 1000 / FIRES, 3),
        "start_lateness_s": lateness(starts, 0.0),
        "first_wave_start_lateness_s": lateness(sorted(starts)[:IN_FLIGHT], 0.0),
        "wall_s": round(wall, 2),
    }


@pytest.mark.skipif(
    not hasattr(os, "fork"), reason="the Python job figures need os.fork, as Lambda has"
)
def test_threads_against_asyncio_for_remote_targets_and_what_python_jobs_cost() -> None:
    figures: dict[str, Any] = {}
    warm = worker_dispatch.Pools(worker_dispatch.Limits(in_flight=IN_FLIGHT))
    with slow_server() as port:
        run_threads(port, 0.0, warm)  # the container's first batch makes the threads
        for delay in DELAYS:
            name = f"http_{delay:.0f}s"
            figures[f"threads_cold.{name}"] = measure(run_threads, port, delay)
            figures[f"threads.{name}"] = measure(
                lambda port, delay: run_threads(port, delay, warm), port, delay
            )
            figures[f"asyncio.{name}"] = measure(run_asyncio, port, delay)
    warm.close()
    for key, value in figures.items():
        record(f"dispatch.{key}", {**value, "machine": "shared, 2 cores"})
    for delay in DELAYS:
        name = f"http_{delay:.0f}s"
        threads, aio = figures[f"threads.{name}"], figures[f"asyncio.{name}"]
        record(
            f"dispatch.compared.{name}",
            {
                "cpu_ms_per_fire_threads": threads["cpu_ms_per_fire"],
                "cpu_ms_per_fire_threads_cold": figures[f"threads_cold.{name}"]["cpu_ms_per_fire"],
                "cpu_ms_per_fire_asyncio": aio["cpu_ms_per_fire"],
                "first_wave_p99_lateness_s_threads": threads["first_wave_start_lateness_s"]["p99"],
                "first_wave_p99_lateness_s_threads_cold": figures[f"threads_cold.{name}"][
                    "first_wave_start_lateness_s"
                ]["p99"],
                "first_wave_p99_lateness_s_asyncio": aio["first_wave_start_lateness_s"]["p99"],
            },
        )
    record("dispatch.python_jobs", python_jobs())
    record(
        "dispatch.worker_requests_per_fire",
        {
            "fires": REQUEST_FIRES,
            "ten_batches_of_ten": worker_requests(batch=10),
            "one_batch_through_the_dispatcher": worker_requests(batch=REQUEST_FIRES),
        },
    )


def python_jobs() -> dict[str, Any]:
    """A trivial Python handler's attempt (fork, run, answer, reap) measured here, and
    what it makes of the defaults: one such attempt at a time per 512 MB invocation."""

    def trivial(context: Any) -> dict[str, Any]:
        return {"ok": True}

    context = job_context({"n": 1})
    isolation.run_in_child_process(trivial, context, 30)  # warm
    spent = []
    cpu = cpu_seconds()
    for _ in range(PYTHON_RUNS):
        started = time.perf_counter()
        isolation.run_in_child_process(trivial, context, 30)
        spent.append(time.perf_counter() - started)
    parent_cpu = (cpu_seconds() - cpu) / PYTHON_RUNS
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    p50 = statistics.median(spent)
    slots = worker_dispatch.compute_slots(WORKER_MEMORY_MB, os.cpu_count())
    # At 512 MB Lambda gives the function about 29% of a vCPU: the attempt's CPU takes
    # that much longer there than on this machine's full core.
    on_lambda_s = p50 / LAMBDA_CPU_SHARE
    return {
        "runs": PYTHON_RUNS,
        "fork_run_reap_p50_ms_here": round(p50 * 1000, 3),
        "parent_cpu_ms_per_attempt_here": round(parent_cpu * 1000, 3),
        "children_cpu_s_total_so_far": round(children.ru_utime + children.ru_stime, 3),
        "compute_slots_at_512_mb": slots,
        "class_max_concurrency": CLASS_MAX_CONCURRENCY,
        "trivial_attempt_at_512_mb_s_estimated": round(on_lambda_s, 4),
        "trivial_jobs_started_per_second_at_defaults": round(
            CLASS_MAX_CONCURRENCY * slots / on_lambda_s
        ),
        "one_second_jobs_started_per_second_at_defaults": round(
            CLASS_MAX_CONCURRENCY * slots / (1.0 + on_lambda_s), 1
        ),
        "machine": "shared, 2 cores",
    }


REQUEST_FIRES = 100


class _Answers(targets.TargetRunner):
    """Targets that answer at once: only the worker's own requests are counted."""

    def run(self, target: dict[str, Any], context: Any, *, timeout: float) -> Any:
        return None


def worker_requests(*, batch: int) -> dict[str, float]:
    """The worker's billed AWS requests per fire, on moto, for REQUEST_FIRES first
    deliveries of ticker-sent fires of as many schedules (ten tenants, no limit), handled
    ``batch`` to an invocation: batches of ten side by side on a pool as the old handler
    did, or larger ones through the dispatcher as the handler does now."""
    with moto_system() as system:
        bodies = []
        now = system.clock.now()
        for n in range(REQUEST_FIRES):
            item = system.service.create(
                f"tenant-{n % 10}",
                schedules.ScheduleDraft(
                    spec="rate(1 hour)", target={"type": "http", "url": "https://example.com/x"}
                ),
            )
            bodies.append(dispatch.outbound(item, now, now).message.body)
        worker = deployed_worker(system, tenant_limit=0)
        worker.runner = _Answers(
            registry=system.registry,
            signing_key=lambda tenant_id: None,  # type: ignore[arg-type,return-value]
            lambda_client=lambda timeout, credentials: None,
            sqs_client=lambda credentials: None,
        )
        system.log.reset()
        limits = worker_dispatch.Limits(in_flight=IN_FLIGHT)
        for start in range(0, REQUEST_FIRES, batch):
            part = bodies[start : start + batch]
            with system.log.within("worker"), threads.ThreadPool(len(part)) as pool:
                outcomes = worker.handle_batch(
                    part,
                    remaining_ms=lambda: 120_000,
                    parallel=pool,
                    receive_counts=[1] * len(part),
                    dispatcher=(
                        worker_dispatch.Dispatcher(limits, lambda: 120_000) if batch > 10 else None
                    ),
                )
            assert all(o is worker_service.Result.SUCCEEDED for o in outcomes), outcomes
        figures = {op: round(n / REQUEST_FIRES, 4) for op, n in sorted(system.log.billed.items())}
        figures["worker_invocations"] = round(system.log.invocations["worker"] / REQUEST_FIRES, 4)
        return figures
