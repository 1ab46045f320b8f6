"""How a record waits for another record's call (a gathered read, a shared view of
slots): on an event, or, in the simulator, whose threads may wait only on its clock, by
looking again on the clock's sleeps (``poll``)."""

from __future__ import annotations

import threading

from fireline import ports

# The longest a record waits for another's call (a request that slow has been retried by
# the SDK already): then it makes its own.
WAIT_LIMIT_SECONDS = 10.0
# Polling: a record looks after this long, then twice as long, up to the most: a handful
# of wake-ups while the request is out.
FIRST_LOOK_SECONDS = 0.001
LONGEST_LOOK_SECONDS = 0.005


def wait_for(done: threading.Event, clock: ports.Clock, *, poll: bool) -> bool:
    """Wait until ``done`` is set: True once it is, False past WAIT_LIMIT_SECONDS."""
    if not poll:
        return done.wait(WAIT_LIMIT_SECONDS)
    wait, waited = FIRST_LOOK_SECONDS, 0.0
    while not done.is_set():
        if waited >= WAIT_LIMIT_SECONDS:
            return False
        clock.sleep(wait)
        waited += wait
        wait = min(LONGEST_LOOK_SECONDS, wait * 2)
    return True
