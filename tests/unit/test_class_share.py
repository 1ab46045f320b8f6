"""A tenant's share of a job class: at most half of the class's maximum concurrency at
once, so the rest is always left to other tenants (see fireline.domain.quota)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from cfnlint.decode import decode_str

from fireline import wiring
from fireline.domain import occurrence, quota
from fireline.services import targets
from fireline.services.worker import Result, Worker
from helpers.memory_system import REMAINING_MS, MemorySystem
from helpers.supervisors import RecordingSupervisor
from integration.test_template import TEMPLATE


def remaining() -> int:
    return REMAINING_MS


@pytest.mark.parametrize(
    ("max_concurrency", "share"),
    [(0, 0), (1, 1), (2, 1), (3, 1), (10, 5), (20, 10), (50, 25), (100, 50)],
)
def test_a_tenants_share_is_half_the_class_and_always_leaves_room(
    max_concurrency: int, share: int
) -> None:
    assert quota.class_limit(max_concurrency) == share
    assert max_concurrency <= 1 or share < max_concurrency


def test_class_bands_are_apart_from_each_other_and_from_the_limits_numbers() -> None:
    bands = [set(quota.class_band(index, 10_000)) for index in range(3)]
    assert not bands[0] & bands[1] and not bands[1] & bands[2]
    assert min(min(band) for band in bands) > 10_000  # the highest tenant limit allowed


class Gate:
    """A Python handler that holds its job running until the test opens the gate."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.entered = threading.Semaphore(0)
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, context: targets.JobContext) -> dict[str, Any]:
        self.entered.release()
        assert self.opened.wait(60)
        return {"ok": True}


@contextlib.contextmanager
def gated(system: MemorySystem, worker: Worker, tenant_id: str, count: int) -> Iterator[Gate]:
    """``count`` jobs of ``tenant_id`` running in ``worker``, held running (each in its
    thread) until the block ends."""
    gate = Gate()
    system.registry.register("gate")(gate)
    bodies = [
        system.due_job(tenant_id, target={"type": "python", "handler": "gate"})
        for _ in range(count)
    ]
    threads = [
        threading.Thread(target=worker.handle, args=(body,), kwargs={"remaining_ms": remaining})
        for body in bodies
    ]
    for thread in threads:
        thread.start()
    try:
        for _ in bodies:
            assert gate.entered.acquire(timeout=60)
        gate.bodies = bodies
        yield gate
    finally:
        gate.opened.set()
        for thread in threads:
            thread.join(60)


def test_a_tenant_at_its_share_of_a_class_waits_while_another_tenant_runs() -> None:
    # GIVEN a default class of 4 invocations (a tenant's share: 2) and tenant A's two
    # jobs running in it
    system = MemorySystem()
    worker = system.worker(tenant_limit=50, class_max_concurrency=4)
    with gated(system, worker, "A", 2) as gate:
        running = gate.bodies
        # WHEN A's third job and B's first arrive
        third = system.due_job("A")
        other = system.due_job("B")
        # THEN A's waits (deferred, still queued, no attempt spent) and B's runs
        assert worker.handle(third, remaining_ms=remaining) is Result.DEFERRED
        assert system.row(third).state is occurrence.State.QUEUED
        assert system.row(third).attempts == 0
        assert worker.handle(other, remaining_ms=remaining) is Result.SUCCEEDED
    # AND once A's jobs end, their slots are held only by finished runs (handed on, not
    # given back): the third one runs, on one of them
    held, _ = system.slots.held("A")
    assert {s.holder for s in held} == {b["occurrence_key"] for b in running}
    assert all(system.row(b).state is occurrence.State.SUCCEEDED for b in running)
    assert worker.handle(third, remaining_ms=remaining) is Result.SUCCEEDED
    held, _ = system.slots.held("A")
    band = [s for s in held if s.number >= quota.CLASS_BAND]
    assert third["occurrence_key"] in {s.holder for s in band} and len(band) == 2
    print(
        f"\na class of 4, a share of {quota.class_limit(4)}: A's third job deferred, "
        f"B's job succeeded, then A's third ran on a slot handed on ({len(band)} class slots)"
    )


def test_a_tenants_share_counts_the_jobs_its_class_keeps_in_flight() -> None:
    # GIVEN a default class of 4 invocations, each keeping 8 remote jobs in flight (32 at
    # once, a tenant's share 16), and a tenant whose limit override is 10
    system = MemorySystem()
    system.slots.set_limit("big", 10)
    worker = system.worker(tenant_limit=2, class_max_concurrency=4, in_flight=8)
    # WHEN 10 of its jobs run at once
    with gated(system, worker, "big", 10):
        # THEN all 10 run (not the 2 that half of 4 invocations would allow), and the 11th
        # waits for its limit
        eleventh = system.due_job("big")
        assert worker.handle(eleventh, remaining_ms=remaining) is Result.DEFERRED
        held, _ = system.slots.held("big")
        assert len([s for s in held if s.number < quota.CLASS_BAND]) == 10


def test_the_share_is_per_class() -> None:
    # GIVEN tenant A at its share of the default class
    system = MemorySystem()
    default = system.worker(tenant_limit=50, class_max_concurrency=2)
    short = system.worker(job_class="short", tenant_limit=50, class_max_concurrency=2)
    key = "held#1#2026-05-01T12:00:00Z"
    (number,) = quota.class_band(0, 1)
    assert system.slots.take("A", number, key, now_ms=0, expires_at_ms=2**62)
    # WHEN a job of A's arrives in each class
    in_default = system.due_job("A")
    in_short = system.due_job("A", job_class="short")
    # THEN only the default class makes it wait
    assert default.handle(in_default, remaining_ms=remaining) is Result.DEFERRED
    assert short.handle(in_short, remaining_ms=remaining) is Result.SUCCEEDED


@pytest.mark.parametrize(
    ("tenant_limit", "slots"),
    [(2, 1), (5, 1), (6, 2), (quota.DEFAULT_LIMIT, 1)],
    ids=["below-share", "at-share", "above-share", "deployed-default"],
)
def test_a_limit_within_the_share_is_the_runs_only_slot(tenant_limit: int, slots: int) -> None:
    # GIVEN a class whose share is 5 (10 invocations), or the deployed default class (50
    # invocations, share 25) for the deployed default limit
    system = MemorySystem()
    size = 50 if tenant_limit == quota.DEFAULT_LIMIT else 10
    worker = system.worker(tenant_limit=tenant_limit, class_max_concurrency=size)
    # WHEN a job of the tenant runs
    with gated(system, worker, "A", 1):
        # THEN it holds one slot (one write) when the limit is within the share, which
        # then bounds the share too, and two (the class band's as well) above it
        held, _ = system.slots.held("A")
        assert len(held) == slots
        assert (len([s for s in held if s.number >= quota.CLASS_BAND]) == 1) is (slots == 2)


def test_a_limit_within_the_share_still_caps_the_class() -> None:
    # GIVEN a tenant limited to 2 in a class of 4 invocations (share 2), running 2 jobs
    system = MemorySystem()
    worker = system.worker(tenant_limit=2, class_max_concurrency=4)
    with gated(system, worker, "A", 2):
        # WHEN its third job arrives THEN it waits: never more than the share in the class
        third = system.due_job("A")
        assert worker.handle(third, remaining_ms=remaining) is Result.DEFERRED
        assert system.row(third).attempts == 0


def test_a_long_jobs_slots_both_come_back_with_its_outcome() -> None:
    # GIVEN a long job started under its tenant's limit and its share of the long class
    system = MemorySystem()
    jobs = system.long_jobs(RecordingSupervisor())
    worker = system.worker(job_class="long", tenant_limit=50, class_max_concurrency=20, long=jobs)
    body = system.due_job("A", job_class="long")
    assert worker.handle(body, remaining_ms=remaining) is Result.STARTED
    held, _ = system.slots.held("A")
    assert len(held) == 2
    # WHEN its outcome arrives
    outcome = {**body, "type": "outcome", "state": "succeeded", "attempt": 1}
    assert worker.handle(outcome, remaining_ms=remaining) is Result.SUCCEEDED
    # THEN the tenant holds no slot any more
    assert system.slots.held("A") == ([], None)


def test_every_worker_is_told_the_concurrency_of_the_class_it_runs() -> None:
    # The template sets each class's maximum concurrency on its event source mapping; the
    # class's worker must count the share from the same figure (long jobs: the runner's).
    template, errors = decode_str(TEMPLATE.read_text())
    assert not errors
    resources = json.loads(json.dumps(template))["Resources"]

    def mapping_concurrency(name: str) -> int:
        # The mapping on the class's own queue: a burst's (DefaultBurstQueue) runs a
        # burst's fires, held to their tenants' limits, and is not counted in the share.
        (event,) = [
            e
            for e in resources[name]["Properties"]["Events"].values()
            if "BurstQueue" not in json.dumps(e["Properties"]["Queue"])
        ]
        return int(event["Properties"]["ScalingConfig"]["MaximumConcurrency"])

    runs_on = {
        "DefaultWorkerFunction": "DefaultWorkerFunction",
        "ShortWorkerFunction": "ShortWorkerFunction",
        "LongWorkerFunction": "LongRunnerFunction",
    }
    for worker_name, runner_name in runs_on.items():
        env = resources[worker_name]["Properties"]["Environment"]["Variables"]
        settings = wiring.Settings.from_env(
            {**_required_env(), **{k: str(v) for k, v in env.items() if isinstance(v, str)}}
        )
        assert settings.class_max_concurrency == mapping_concurrency(runner_name), worker_name
        assert (
            0 < quota.class_limit(settings.class_max_concurrency) < mapping_concurrency(runner_name)
        )


def _required_env() -> dict[str, str]:
    names = ["SCHEDULES_TABLE", "OCCURRENCES_TABLE", "LEASES_TABLE", "IDEMPOTENCY_TABLE"]
    queues = {f"QUEUE_URL_{c.upper()}": f"https://queue/{c}" for c in ("default", "short", "long")}
    return {**{name: name.lower() for name in names}, **queues}
