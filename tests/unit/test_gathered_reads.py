"""The consistent schedule reads records make after their claims, gathered into one batch
read a moment (services.worker.gathered), run on the simulator's kernel: its threads take
turns in virtual time, so which records share a round is decided, not raced."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from fireline.adapters import memory
from fireline.domain import errors, model, schedule
from fireline.services.worker import gathered
from fireline.sim import kernel as sim_kernel

START = datetime(2026, 5, 1, 12, tzinfo=UTC)


class CountedSchedules(memory.MemoryScheduleStore):
    """The memory store, its reads recorded (a batch read's keys, a single read's key)."""

    def __init__(self) -> None:
        super().__init__()
        self.batch_reads: list[list[tuple[str, str]]] = []
        self.single_reads: list[tuple[str, str]] = []
        self.fail_batches = False

    def get_many(
        self, keys: Sequence[tuple[str, str]], *, consistent: bool = True
    ) -> list[model.Schedule]:
        assert consistent  # the reads after a claim are consistent ones
        self.batch_reads.append(list(keys))
        if self.fail_batches:
            raise errors.Unavailable("throttled")
        return super().get_many(keys, consistent=consistent)

    def get(
        self, tenant_id: str, schedule_id: str, *, consistent: bool = True
    ) -> model.Schedule | None:
        self.single_reads.append((tenant_id, schedule_id))
        return super().get(tenant_id, schedule_id, consistent=consistent)


def stored(store: CountedSchedules, count: int) -> list[tuple[str, str]]:
    timing = schedule.Timing(spec=schedule.parse_spec("rate(1 minute)"))
    keys = []
    for n in range(count):
        item = model.Schedule(
            tenant_id=f"tenant-{n % 3}",
            schedule_id=f"sch{n:04d}",
            timing=timing,
            spec_text="rate(1 minute)",
            target={"type": "python", "handler": "noop"},
            next_fire=START,
        )
        store.create(item)
        keys.append((item.tenant_id, item.schedule_id))
    return keys


def read_at(
    store: CountedSchedules, asks: Sequence[tuple[float, tuple[str, str]]]
) -> dict[tuple[str, str], Any]:
    """Each (virtual second, key) read through one GatheredReads on its own thread; what
    each got."""
    kernel = sim_kernel.Kernel(START)
    reads = gathered.GatheredReads(sim_kernel.SimClock(kernel), poll=True)
    got: dict[tuple[str, str], Any] = {}

    def reader(key: tuple[str, str]) -> Any:
        def run() -> None:
            found = reads.get(store, *key)
            got[key] = None if found is None else found.schedule_id

        return run

    for at, key in asks:
        kernel.spawn(reader(key), at=at)
    kernel.run_all()
    kernel.close()
    return got


def test_records_claimed_in_the_same_moment_share_one_batch_read() -> None:
    # GIVEN 150 records asking within a millisecond of each other
    store = CountedSchedules()
    keys = stored(store, 150)
    # WHEN each reads its schedule after its claim
    got = read_at(store, [(n * 0.00001, key) for n, key in enumerate(keys)])
    # THEN every one got its own schedule, from two batch reads (a request takes 100
    # keys at most) and no single read
    assert got == {key: key[1] for key in keys}
    assert [len(keys) for keys in store.batch_reads] == [100, 50]
    assert store.single_reads == []


def test_a_record_asking_after_a_rounds_request_went_out_waits_for_a_round_of_its_own() -> None:
    # GIVEN two records, the second asking once the first's round has sent its request
    store = CountedSchedules()
    first, second = stored(store, 2)
    # WHEN each reads
    got = read_at(store, [(0.0, first), (gathered.GATHER_SECONDS + 0.0005, second)])
    # THEN the second's read is a request made after it asked, not the first's
    assert got == {first: first[1], second: second[1]}
    assert store.batch_reads == [[first], [second]]


def test_a_key_the_batch_read_did_not_answer_is_read_on_its_own() -> None:
    # GIVEN a record whose schedule is gone, beside one whose schedule is there
    store = CountedSchedules()
    (present,) = stored(store, 1)
    gone = ("tenant-0", "deleted")
    # WHEN both read
    got = read_at(store, [(0.0, present), (0.0, gone)])
    # THEN the missing one is confirmed by a read of its own, and found gone
    assert got == {present: present[1], gone: None}
    assert store.single_reads == [gone]


def test_a_failed_batch_read_leaves_each_record_to_read_on_its_own() -> None:
    # GIVEN a batch read that fails (throttled)
    store = CountedSchedules()
    keys = stored(store, 3)
    store.fail_batches = True
    # WHEN three records read together
    got = read_at(store, [(0.0, key) for key in keys])
    # THEN each got its schedule by a read of its own: the gathering never fails a record
    assert got == {key: key[1] for key in keys}
    assert len(store.batch_reads) == 1
    assert sorted(store.single_reads) == sorted(keys)
