"""The SSRF guard resolves a webhook's name within the job's deadline: a resolver that
hangs ends the attempt at the deadline (no connection, a category for the tenant), and
resolvers stuck for good never make the worker start more threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from fireline.services import targets, webhook
from integration.test_ssrf import PUBLIC, Network, Receiver, context, receiver, runner

__all__ = ["receiver"]  # the fixture, shared with the other SSRF tests


class HangingNetwork(Network):
    """Names resolve only when the test lets them (a DNS server that never answers)."""

    def __init__(self, port: int) -> None:
        super().__init__(port, {"hooks.tenant.test": [PUBLIC]})
        self.answer = threading.Event()
        self.asked = threading.Semaphore(0)

    def resolve(self, host: str, port: int) -> list[str]:
        self.asked.release()
        self.answer.wait(120)
        return super().resolve(host, port)


@pytest.fixture
def hanging(receiver: Receiver) -> Iterator[HangingNetwork]:
    network = HangingNetwork(receiver.port)
    yield network
    network.answer.set()  # the stuck resolver threads end with the test


def call(network: HangingNetwork, timeout: float) -> object:
    target = {"type": "http", "url": "http://hooks.tenant.test/fire", "timeout_seconds": 30}
    return runner(network.egress()).run(target, context(), timeout=timeout)


def test_a_name_not_resolved_by_the_deadline_ends_the_attempt(
    hanging: HangingNetwork, receiver: Receiver
) -> None:
    # WHEN a webhook whose name never resolves is called with half a second left
    with pytest.raises(targets.DeadlineExceeded) as failed:
        call(hanging, 0.5)
    # THEN the resolver was asked, nothing was connected to, the receiver saw nothing
    assert hanging.asked.acquire(timeout=0)
    assert hanging.connected == [] and receiver.requests == []
    # AND the tenant reads that no answer came in time, naming no address or server
    assert str(failed.value).startswith("no answer in")
    assert "hooks.tenant.test" not in str(failed.value)


def test_stuck_resolutions_take_no_more_than_the_resolver_threads(
    hanging: HangingNetwork,
) -> None:
    # GIVEN every resolver thread stuck on a name that never resolves
    for _ in range(webhook.RESOLVER_THREADS):
        with pytest.raises(targets.DeadlineExceeded):
            call(hanging, 0.2)
    started = threading.active_count()
    # WHEN more sends come while they are stuck
    for _ in range(3 * webhook.RESOLVER_THREADS):
        with pytest.raises(targets.DeadlineExceeded):
            call(hanging, 0.05)
    # THEN each timed out, and no thread was added for them
    assert threading.active_count() <= started
    assert hanging.connected == []


def test_a_name_resolved_in_time_is_sent_as_before(hanging: HangingNetwork) -> None:
    # GIVEN a resolver that answers
    hanging.answer.set()
    # WHEN the target is called with time enough
    answer = call(hanging, 30)
    # THEN it reached the checked address
    assert answer == {"status": 200, "body": "secret detail"}
    assert hanging.connected == [(PUBLIC, 80)]
