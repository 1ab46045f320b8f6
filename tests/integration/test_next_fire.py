"""Next fire and preview once the ticker has sent fires ahead of their time.

The ticker sends a schedule's fires up to 15 minutes ahead and moves the schedule's due
entry past them; those fires have no row until a worker claims them. What a tenant reads
as "next fire" is still the earliest fire that has not run, whatever was sent ahead.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from helpers.system import System, moto_system

PYTHON = {"type": "python", "handler": "noop"}

pytestmark = pytest.mark.filterwarnings(
    "ignore:Couldn't determine the remaining time left:UserWarning"
)


@pytest.fixture
def system() -> Iterator[System]:
    with moto_system() as built:
        yield built


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def ten_second_schedule_sent_ahead(system: System) -> tuple[str, datetime]:
    """An every-10-second schedule whose fires the ticker has sent 15 minutes ahead; its
    id and when the ticker ran."""
    status, created = system.call(
        "POST", "/schedules", {"spec": "rate(10 seconds)", "target": PYTHON}
    )
    assert status == 201, created
    ticked_at = system.clock.now()
    report = system.ticker(use_lease=False).tick()
    assert report.dispatched.sent > 10, report
    stored = system.schedules.get("tenant-a", created["id"])
    assert stored is not None and stored.next_fire is not None
    # the due entry moved past what was sent: minutes out
    assert stored.next_fire - ticked_at > timedelta(minutes=5)
    return created["id"], ticked_at


def test_the_next_fire_of_a_schedule_sent_ahead_is_within_its_period(system: System) -> None:
    # GIVEN an every-10-second schedule whose fires the ticker sent ahead
    schedule_id, _ = ten_second_schedule_sent_ahead(system)
    system.clock.advance(3)
    now = system.clock.now()
    # WHEN it is read, alone and in the listing
    status, item = system.call("GET", f"/schedules/{schedule_id}")
    assert status == 200, item
    status, page = system.call("GET", "/schedules")
    assert status == 200, page
    (listed,) = [s for s in page["items"] if s["id"] == schedule_id]
    # THEN its next fire is within the next 10 seconds, in both
    for shown in (item, listed):
        assert now < parse(shown["next_fire"]) <= now + timedelta(seconds=10), shown


def test_the_preview_of_a_schedule_sent_ahead_shows_the_sent_fires_queued(
    system: System,
) -> None:
    # GIVEN an every-10-second schedule whose fires the ticker sent ahead
    schedule_id, ticked_at = ten_second_schedule_sent_ahead(system)
    system.clock.advance(3)
    now = system.clock.now()
    # WHEN its next five fires are previewed
    status, preview = system.call("GET", f"/schedules/{schedule_id}/preview", query={"count": "5"})
    assert status == 200, preview
    fires = preview["fires"]
    # THEN they are the next five, 10 s apart, the first within 10 s
    times = [parse(f["fire_time"]) for f in fires]
    assert now < times[0] <= now + timedelta(seconds=10)
    assert [b - a for a, b in itertools.pairwise(times)] == [timedelta(seconds=10)] * 4
    # AND each is queued, with the time the ticker sent it
    assert all(f["queued"] for f in fires), fires
    assert {parse(f["sent_at"]) for f in fires} == {ticked_at}
