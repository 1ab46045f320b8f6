"""One contract suite for every implementation of the ports.

Each test asks for a port (``schedule_store``, ``occurrence_store``, ``work_queue``,
``lease_store``) and runs once per backend in BACKENDS. The tests speak only through the
Protocols in fireline.ports, so a backend passes by behaving like the others, not by
sharing their internals. To hold another implementation to the same behaviour (DynamoDB
and SQS on moto), add a Backend to BACKENDS; its factories honour the settings in support.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fireline import ports
from fireline.adapters import memory
from fireline.domain import model

from .support import MAX_RECEIVE_COUNT, SHARDS, START, VISIBILITY_TIMEOUT, Backend


def _memory_queue(clock: memory.FakeClock) -> ports.WorkQueue:
    config = memory.QueueConfig(
        visibility_timeout=VISIBILITY_TIMEOUT, max_receive_count=MAX_RECEIVE_COUNT
    )
    return memory.MemoryWorkQueue(clock, {name: config for name in model.JOB_CLASSES})


BACKENDS: dict[str, Backend] = {
    "memory": Backend(
        schedule_store=lambda: memory.MemoryScheduleStore(shards=SHARDS),
        occurrence_store=memory.MemoryOccurrenceStore,
        work_queue=_memory_queue,
        lease_store=memory.MemoryLeaseStore,
    ),
}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    chosen = BACKENDS[request.param]
    with chosen.session():
        yield chosen


@pytest.fixture
def clock() -> memory.FakeClock:
    return memory.FakeClock(START)


@pytest.fixture
def schedule_store(backend: Backend) -> ports.ScheduleStore:
    return backend.schedule_store()


@pytest.fixture
def occurrence_store(backend: Backend) -> ports.OccurrenceStore:
    return backend.occurrence_store()


@pytest.fixture
def work_queue(backend: Backend, clock: memory.FakeClock) -> ports.WorkQueue:
    return backend.work_queue(clock)


@pytest.fixture
def lease_store(backend: Backend) -> ports.LeaseStore:
    return backend.lease_store()
