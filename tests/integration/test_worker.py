"""The worker on moto: effects once in effect, however often a message is delivered."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from fireline import webhooks
from fireline.domain import errors, occurrence, retry
from fireline.services import claims, targets
from fireline.services.schedules import JobDraft
from fireline.services.worker import Busy, Result
from helpers.flows import SIGNING_KEY
from helpers.system import START, System

REMAINING = 60_000
# How long a held job waits for its test to release it. The test always releases it; the
# bound only ends a failed test's thread. It must outlast the test's own steps on a loaded
# machine (each tick is a few moto calls): a job that let go by itself while the test was
# still asserting it runs would make the test fail on timing alone.
HOLD_SECONDS = 600


class Killed(BaseException):
    """The Lambda is killed mid-job (timeout, OOM): nothing after this line runs."""


class Ledger:
    """What the test's job did: every invocation, and effects keyed by occurrence key
    (an idempotent handler, as the delivery contract asks of them)."""

    def __init__(self) -> None:
        self.invocations: Counter[str] = Counter()
        self.effects: Counter[str] = Counter()
        self._lock = threading.Lock()

    def record(self, context: targets.JobContext) -> None:
        with self._lock:
            self.invocations[context.occurrence_key] += 1
            if (
                self.invocations[context.occurrence_key] == 1
                or context.occurrence_key not in self.effects
            ):
                self.effects[context.occurrence_key] += 1


MINUTE = timedelta(minutes=1)


def job(system: System, handler: str, *, tenant: str = "tenant-a", **fields: Any) -> str:
    """A one-off job due now, sent by its create; its occurrence key."""
    view = system.service.create_job(
        tenant, JobDraft(delay_seconds=0, target={"type": "python", "handler": handler}, **fields)
    )
    system.ticker(use_lease=False).tick()
    key = occurrence.occurrence_key(view.job.schedule_id, view.job.version, view.fire_time)
    assert system.log.sent[key] >= 1  # its message is on its way (its row comes with the run)
    return key


def body_of(system: System, key: str) -> dict[str, Any]:
    (message,) = [m for m in system.receive() if m.body["occurrence_key"] == key]
    return message.body


def remaining() -> int:
    return REMAINING


# --- duplicates ----------------------------------------------------------------------------


def test_redelivery_after_the_outcome_was_recorded_does_not_run_again(system: System) -> None:
    ledger = Ledger()
    system.registry.register("effect")(ledger.record)
    key = job(system, "effect")
    body = body_of(system, key)
    worker = system.worker()
    assert worker.handle(body, remaining_ms=remaining) is Result.SUCCEEDED
    # WHEN the acknowledgement was lost and SQS delivers the message again
    again = worker.handle(body, remaining_ms=remaining)
    # THEN the job is not run again: one invocation, one effect
    assert again is Result.SETTLED
    assert ledger.invocations[key] == 1 and ledger.effects[key] == 1


def test_kill_after_the_side_effect_before_the_ack_redelivers_and_the_effect_stays_once(
    system: System,
) -> None:
    ledger = Ledger()
    calls = Counter[str]()

    def effect_then_die(context: targets.JobContext) -> None:
        ledger.record(context)
        calls["n"] += 1
        if calls["n"] == 1:
            raise Killed  # after the side effect, before anything is recorded

    system.registry.register("effect")(effect_then_die)
    key = job(system, "effect")
    body = body_of(system, key)
    worker = system.worker()
    # GIVEN the first invocation dies after the side effect (its claim lasts 12 s more)
    with pytest.raises(Killed):
        worker.handle(body, remaining_ms=lambda: 12_000)
    assert system.occurrences.get(key).state is occurrence.State.RUNNING
    # WHEN SQS redelivers after the dead invocation's time is up
    system.clock.advance(13)
    result = worker.handle(body, remaining_ms=remaining)
    # THEN the handler ran again (at-least-once) but the effect happened once
    assert result is Result.SUCCEEDED
    assert ledger.invocations[key] == 2
    assert ledger.effects[key] == 1
    row = system.occurrences.get(key)
    assert row.state is occurrence.State.SUCCEEDED and row.attempts == 2
    print(f"\nkilled after the effect: ran {ledger.invocations[key]} times, effect once")


def test_the_same_message_to_two_concurrent_invocations_has_one_effect(system: System) -> None:
    ledger = Ledger()
    started, release = threading.Event(), threading.Event()

    def slow(context: targets.JobContext) -> None:
        started.set()
        release.wait(timeout=30)
        ledger.record(context)

    system.registry.register("slow")(slow)
    key = job(system, "slow")
    body = body_of(system, key)
    results: dict[str, Any] = {}
    first = threading.Thread(
        target=lambda: results.update(a=system.worker().handle(body, remaining_ms=remaining))
    )
    first.start()
    assert started.wait(timeout=30)
    holding = system.occurrences.get(key)
    # WHEN a second invocation gets the same message while the first runs it
    with pytest.raises(Busy):
        system.worker().handle(body, remaining_ms=remaining)
    # THEN the first's in-progress record is untouched
    during = system.occurrences.get(key)
    assert during.state is occurrence.State.RUNNING
    assert during.in_progress_until == holding.in_progress_until
    assert during.attempts == holding.attempts == 1
    release.set()
    first.join(timeout=30)
    # AND there was one run, one effect
    assert results["a"] is Result.SUCCEEDED
    assert ledger.invocations[key] == 1 and ledger.effects[key] == 1


def test_a_message_without_an_occurrence_key_fails_loudly_and_runs_nothing(
    system: System,
) -> None:
    ledger = Ledger()
    system.registry.register("effect")(ledger.record)
    worker = system.worker()
    with pytest.raises(errors.MissingIdempotencyKey):
        worker.handle({"tenant_id": "tenant-a", "schedule_id": "x"}, remaining_ms=remaining)
    with pytest.raises(errors.MissingIdempotencyKey):
        worker.handle({"occurrence_key": ""}, remaining_ms=remaining)
    assert ledger.invocations == Counter()


# --- retries and dead letters ----------------------------------------------------------------


def test_poison_job_backs_off_to_the_cap_then_dead_then_redriven_succeeds(system: System) -> None:
    healed = threading.Event()

    def poison(context: targets.JobContext) -> str:
        if not healed.is_set():
            raise targets.TargetFailed("bad input")
        return "fixed"

    system.registry.register("poison")(poison)
    policy = retry.RetryPolicy(
        max_attempts=4, base_seconds=2, factor=2, cap_seconds=6, jitter=retry.Jitter.NONE
    )
    key = job(system, "poison", retry=policy)
    worker = system.worker()
    body = body_of(system, key)
    delays = []
    # WHEN it fails attempt after attempt
    for attempt in range(1, 5):
        result = worker.handle(body, remaining_ms=remaining)
        if attempt < 4:
            assert result is Result.RETRYING
            # the retry is a new message, invisible for the backoff delay
            waited = 0
            while not (messages := system.receive()):
                system.clock.advance(1)
                waited += 1
            (message,) = messages
            body = message.body
            delays.append(waited)
    # THEN it waited 2, 4, then the cap of 6 s, and the fourth attempt made it dead
    assert delays == [2, 4, 6]
    assert result is Result.DEAD
    row = system.occurrences.get(key)
    assert row.state is occurrence.State.DEAD and row.attempts == 4
    assert row.exit_reason == "error: bad input"
    assert system.receive() == []  # nothing retries forever
    assert system.metrics.total("DeadLettered") == 1
    # AND it is listed as a dead letter through the API
    status, page = system.call("GET", "/dead-letters")
    assert status == 200
    assert [item["key"] for item in page["items"]] == [key]
    # WHEN it is redriven once (after the fix)
    healed.set()
    status, redriven = system.call("POST", f"/dead-letters/{page['items'][0]['id']}/redrive")
    assert status == 202 and redriven["state"] == "queued"
    # a retried redrive request sends the message again (harmless: the claim decides)
    status, again = system.call("POST", f"/dead-letters/{page['items'][0]['id']}/redrive")
    assert status == 202 and again["state"] == "queued"
    first, second = system.receive()
    # THEN it runs and succeeds once, and leaves the dead-letter list
    assert worker.handle(first.body, remaining_ms=remaining) is Result.SUCCEEDED
    assert worker.handle(second.body, remaining_ms=remaining) is Result.SETTLED
    row = system.occurrences.get(key)
    assert row.state is occurrence.State.SUCCEEDED and row.attempts == 1
    assert system.call("GET", "/dead-letters")[1]["items"] == []


def test_another_tenant_cannot_see_or_redrive_a_dead_letter(system: System) -> None:
    system.registry.register("fail")(lambda c: (_ for _ in ()).throw(targets.TargetFailed("no")))
    key = job(system, "fail", retry=retry.RetryPolicy(max_attempts=1))
    assert system.worker().handle(body_of(system, key), remaining_ms=remaining) is Result.DEAD
    _, mine = system.call("GET", "/dead-letters")
    assert system.call("GET", "/dead-letters", tenant="tenant-b")[1]["items"] == []
    status, _ = system.call(
        "POST", f"/dead-letters/{mine['items'][0]['id']}/redrive", tenant="tenant-b"
    )
    assert status == 404
    assert system.occurrences.get(key).state is occurrence.State.DEAD


def test_a_job_past_its_deadline_fails_with_reason_deadline(system: System) -> None:
    system.registry.register("stuck")(lambda context: time.sleep(3))
    key = job(system, "stuck", deadline_seconds=1, retry=retry.RetryPolicy(max_attempts=1))
    result = system.worker().handle(body_of(system, key), remaining_ms=remaining)
    assert result is Result.DEAD
    row = system.occurrences.get(key)
    assert row.exit_reason == "deadline"


# --- what the worker checks before running -------------------------------------------------


def test_an_unknown_python_handler_is_refused_at_registration(system: System) -> None:
    system.service.handlers = system.registry
    status, body = system.call(
        "POST", "/jobs", {"delay_seconds": 5, "target": {"type": "python", "handler": "nope"}}
    )
    assert (status, body["error"]["field"]) == (400, "target.handler")


# --- tenant limits ---------------------------------------------------------------------------


def test_tenant_over_its_limit_is_deferred_then_run_while_other_tenants_run(system: System) -> None:
    running: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    lock = threading.Lock()
    gate = threading.Event()

    def tracked(context: targets.JobContext) -> None:
        with lock:
            running[context.tenant_id] += 1
            peak[context.tenant_id] = max(peak[context.tenant_id], running[context.tenant_id])
        if context.payload.get("hold"):
            gate.wait(timeout=HOLD_SECONDS)
        with lock:
            running[context.tenant_id] -= 1

    system.registry.register("tracked")(tracked)
    system.slots.set_limit("tenant-a", 1)
    first = job(system, "tracked", payload={"hold": True})
    second = job(system, "tracked")
    other = job(system, "tracked", tenant="tenant-b")
    bodies = {m.body["occurrence_key"]: m.body for m in system.receive()}
    results: dict[str, Result] = {}
    holder = threading.Thread(
        target=lambda: results.update(
            first=system.worker().handle(bodies[first], remaining_ms=remaining)
        ),
        daemon=True,
    )
    holder.start()
    while not running["tenant-a"]:
        time.sleep(0.01)
    # WHEN tenant-a's second job arrives while its first holds the only slot
    assert system.worker().handle(bodies[second], remaining_ms=remaining) is Result.DEFERRED
    assert system.occurrences.get(second).state is occurrence.State.QUEUED
    # THEN another tenant's job runs meanwhile
    assert system.worker().handle(bodies[other], remaining_ms=remaining) is Result.SUCCEEDED
    gate.set()
    holder.join(timeout=30)
    # AND after the first finishes, the deferred one comes back and runs
    system.clock.advance(30)
    (deferred,) = [m for m in system.receive() if m.body["occurrence_key"] == second]
    assert system.worker().handle(deferred.body, remaining_ms=remaining) is Result.SUCCEEDED
    assert peak["tenant-a"] == 1
    assert system.occurrences.get(second).attempts == 1  # deferral is not an attempt


def test_a_slot_held_by_a_crashed_worker_frees_itself(system: System) -> None:
    # GIVEN tenant-a (limit 1) whose only slot a killed worker left behind: a killed
    # Lambda runs no finally block, so the slot stays until its expiry
    system.slots.set_limit("tenant-a", 1)
    now_ms = int(system.clock.now().timestamp() * 1000)
    assert system.slots.take(
        "tenant-a", 0, "gone#1#2026-05-01T11:59:00Z", now_ms=now_ms, expires_at_ms=now_ms + 70_000
    )
    system.registry.register("n")(lambda c: None)
    later = job(system, "n")
    # WHEN a new job arrives while the dead holder's slot is live, it is deferred...
    assert system.worker().handle(body_of(system, later), remaining_ms=remaining) is Result.DEFERRED
    # ...and it runs once the slot expired
    system.clock.advance(71)
    (message,) = [m for m in system.receive() if m.body["occurrence_key"] == later]
    assert system.worker().handle(message.body, remaining_ms=remaining) is Result.SUCCEEDED
    # (its slot stays with it, finished, to be handed on to the tenant's next job)
    assert [s.holder for s in system.slots.held("tenant-a")[0]] == [later]


def test_a_finished_runs_slot_is_handed_on_and_a_running_ones_is_not(system: System) -> None:
    # GIVEN tenant-a (limit 1) whose one slot is held by a job that finished
    system.slots.set_limit("tenant-a", 1)
    system.registry.register("n")(lambda c: None)
    first, second, busy, third = (job(system, "n") for _ in range(4))
    bodies = {m.body["occurrence_key"]: m.body for m in system.receive()}
    worker = system.worker()
    assert worker.handle(bodies[first], remaining_ms=remaining) is Result.SUCCEEDED
    system.log.reset()
    # WHEN the next job arrives, it takes the slot over in one write, nothing given back
    assert worker.handle(bodies[second], remaining_ms=remaining) is Result.SUCCEEDED
    assert system.log.writes[system.stack.tables["SlotsTable"]] == 1
    assert system.log.requests["DeleteItem"] == 0
    assert [s.holder for s in system.slots.held("tenant-a")[0]] == [second]
    # AND a slot whose holder is running is never handed on: the next job waits
    now = system.clock.now()
    intent = claims.intent_of(bodies[busy], busy)
    assert system.occurrences.claim(busy, now=now, until=now + MINUTE, intent=intent)[0]
    now_ms = int(now.timestamp() * 1000)
    assert system.slots.take(
        "tenant-a", 0, busy, now_ms=now_ms, expires_at_ms=now_ms + 60_000, replacing=second
    )
    assert worker.handle(bodies[third], remaining_ms=remaining) is Result.DEFERRED
    assert [s.holder for s in system.slots.held("tenant-a")[0]] == [busy]


# --- an HTTP target --------------------------------------------------------------------------


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"headers": dict(self.headers), "body": body})
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    server.shutdown()


def test_http_target_gets_the_idempotency_key_and_a_valid_signature(
    system: System, webhook: tuple[str, list[dict[str, Any]]]
) -> None:
    url, received = webhook
    system.allow_local_webhooks()
    view = system.service.create_job(
        "tenant-a",
        JobDraft(
            delay_seconds=0,
            target={"type": "http", "url": url, "timeout_seconds": 5},
            payload={"n": 1},
        ),
    )
    system.ticker(use_lease=False).tick()
    (message,) = system.receive()
    assert system.worker().handle(message.body, remaining_ms=remaining) is Result.SUCCEEDED
    (request,) = received
    key = message.body["occurrence_key"]
    assert request["headers"]["Idempotency-Key"] == key
    # the signature verifies with the tenant's key, over method, URL and body
    signed = {"headers": request["headers"], "method": "POST", "url": url, "body": request["body"]}
    assert webhooks.verify({SIGNING_KEY.key_id: SIGNING_KEY.secret}, **signed) == "sig_test"
    with pytest.raises(webhooks.SignatureMismatch):
        webhooks.verify({SIGNING_KEY.key_id: "another-secret-000000"}, **signed)
    sent = json.loads(request["body"])
    assert sent["occurrence_key"] == key and sent["payload"] == {"n": 1}
    assert sent["schedule_id"] == view.job.schedule_id


def test_http_target_error_status_is_a_failed_attempt(
    system: System, webhook: tuple[str, list[dict[str, Any]]]
) -> None:
    system.allow_local_webhooks()
    system.service.create_job(
        "tenant-a",
        JobDraft(
            delay_seconds=0,
            target={
                "type": "http",
                "url": "http://127.0.0.1:9/nothing-listens",
                "timeout_seconds": 2,
            },
            retry=retry.RetryPolicy(max_attempts=2, base_seconds=1),
        ),
    )
    system.ticker(use_lease=False).tick()
    (message,) = system.receive()
    assert system.worker().handle(message.body, remaining_ms=remaining) is Result.RETRYING
    row = system.occurrences.get(message.body["occurrence_key"])
    assert row.state is occurrence.State.FAILED and row.exit_reason.startswith("error: ")


def test_sqs_target_sends_to_the_tenant_queue_with_the_key(system: System) -> None:
    url = system.sqs_client.create_queue(QueueName="tenant-inbox")["QueueUrl"]
    system.service.create_job(
        "tenant-a",
        JobDraft(
            delay_seconds=0,
            target={
                "type": "sqs",
                "queue_url": url,
                "role_arn": "arn:aws:iam::123456789012:role/fireline-target/tenant-a-jobs",
            },
        ),
    )
    system.ticker(use_lease=False).tick()
    (message,) = system.receive()
    assert system.worker().handle(message.body, remaining_ms=remaining) is Result.SUCCEEDED
    got = system.sqs_client.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"]
    assert json.loads(got[0]["Body"])["occurrence_key"] == message.body["occurrence_key"]
    assert (
        got[0]["MessageAttributes"]["IdempotencyKey"]["StringValue"]
        == message.body["occurrence_key"]
    )


def test_start_is_before_the_worker_clock(system: System) -> None:
    # The fake clock starts at START; workers record timestamps on it.
    system.registry.register("n")(lambda c: None)
    key = job(system, "n")
    system.clock.advance(2)
    system.worker().handle(body_of(system, key), remaining_ms=remaining)
    row = system.occurrences.get(key)
    assert row.started_at == START + timedelta(seconds=2)
    assert row.duration_seconds == 0


def test_forbid_runs_every_fire_of_a_job_that_finishes_in_time(system: System) -> None:
    # GIVEN a schedule every 5 s that forbids overlap, whose job finishes at once
    from fireline.domain import policies
    from fireline.services.schedules import ScheduleDraft

    item = system.service.create(
        "tenant-a",
        ScheduleDraft(
            spec="rate(5 seconds)",
            target={"type": "python", "handler": "noop"},
            overlap=policies.OverlapPolicy.FORBID,
        ),
    )
    tk, worker = system.ticker(use_lease=False), system.worker()
    # WHEN it runs for a minute, each message handled as soon as it is delivered
    for _ in range(60):
        tk.tick()
        for message in system.receive():
            worker.handle(message.body, remaining_ms=remaining)
            system.queue.delete("default", message.receipt)
        system.clock.advance(1)
    # THEN no fire was skipped for overlap: a fire waiting for its delivery is not a run
    states = Counter(
        o.state for o in system.occurrences.history("tenant-a", item.schedule_id, limit=100).items
    )
    assert states[occurrence.State.SKIPPED] == 0
    assert states[occurrence.State.SUCCEEDED] >= 11


def test_a_pending_retry_of_a_paused_schedule_is_skipped_not_poison(system: System) -> None:
    from fireline.services.schedules import ScheduleDraft

    system.registry.register("fail")(lambda c: (_ for _ in ()).throw(targets.TargetFailed("no")))
    item = system.service.create(
        "tenant-a",
        ScheduleDraft(spec="rate(1 hour)", target={"type": "python", "handler": "fail"}),
    )
    system.service.trigger("tenant-a", item.schedule_id)
    (message,) = system.receive()
    assert system.worker().handle(message.body, remaining_ms=remaining) is Result.RETRYING
    # WHEN the schedule is paused before the retry arrives
    system.service.pause("tenant-a", item.schedule_id)
    # THEN the pending retry is recorded as skipped by the time the pause returns
    row = system.occurrences.get(message.body["occurrence_key"])
    assert row.state is occurrence.State.SKIPPED
    # AND its message, when it arrives, runs nothing (not a crash SQS would redeliver)
    system.clock.advance(10)
    (retry_message,) = system.receive()
    assert system.worker().handle(retry_message.body, remaining_ms=remaining) is Result.SETTLED
    row = system.occurrences.get(message.body["occurrence_key"])
    assert row.state is occurrence.State.SKIPPED and row.exit_reason == "skipped: schedule paused"


def overlap_schedule(system: System, policy: str) -> tuple[Any, threading.Event]:
    """A schedule every minute whose job holds until released, its first fire running."""
    from fireline.domain import policies
    from fireline.services.schedules import ScheduleDraft

    gate = threading.Event()
    system.registry.register("holds")(lambda context: gate.wait(timeout=HOLD_SECONDS))
    item = system.service.create(
        "tenant-a",
        ScheduleDraft(
            spec="rate(1 minute)",
            target={"type": "python", "handler": "holds"},
            overlap=policies.OverlapPolicy(policy),
        ),
    )
    return item, gate


def run_in_thread(system: System, body: dict[str, Any]) -> threading.Thread:
    """Run ``body`` in a worker of its own, as an invocation with 15 minutes left: the job's
    own deadline (100 s), not the invocation's, is what could end it while it is held."""
    thread = threading.Thread(
        target=lambda: system.worker().handle(body, remaining_ms=lambda: 900_000), daemon=True
    )
    thread.start()
    return thread


def next_message(system: System, tk: Any, *, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """The next fire's message (deferred repeats of fires in ``seen`` are passed over)."""
    for _ in range(180):
        tk.tick()
        system.clock.advance(1)
        fresh = [m for m in system.receive() if m.body["occurrence_key"] not in seen]
        if fresh:
            (message,) = fresh
            return message.body
    raise AssertionError("no message")


def is_running(system: System, key: str) -> bool:
    row = system.occurrences.get(key)  # None until the delivery's claim writes it
    return row is not None and row.state is occurrence.State.RUNNING


def wait_until_running(system: System, key: str) -> None:
    """Until the fire's run has claimed it: a run that ended another way (deferred,
    failed) fails the test here rather than leave it waiting for ever."""
    for _ in range(3000):
        if is_running(system, key):
            return
        time.sleep(0.01)
    raise AssertionError(f"{key} never ran")


def test_forbid_skips_a_fire_while_the_previous_run_is_running(system: System) -> None:
    _, gate = overlap_schedule(system, "forbid")
    tk = system.ticker(use_lease=False)
    first = next_message(system, tk)
    holder = run_in_thread(system, first)
    wait_until_running(system, first["occurrence_key"])
    # WHEN the next fire arrives while the first still runs
    second = next_message(system, tk)
    result = system.worker().handle(second, remaining_ms=remaining)
    # THEN it is recorded as skipped for overlap
    assert result is Result.SKIPPED
    assert system.occurrences.get(second["occurrence_key"]).exit_reason == "skipped: overlap"
    gate.set()
    holder.join(timeout=30)
    assert system.occurrences.get(first["occurrence_key"]).state is occurrence.State.SUCCEEDED


def test_buffer_one_holds_one_fire_and_skips_the_next(system: System) -> None:
    _, gate = overlap_schedule(system, "buffer_one")
    tk = system.ticker(use_lease=False)
    first = next_message(system, tk)
    holder = run_in_thread(system, first)
    wait_until_running(system, first["occurrence_key"])
    second = next_message(system, tk)
    # the second waits (deferred, still queued) behind the running one...
    assert system.worker().handle(second, remaining_ms=remaining) is Result.DEFERRED
    assert system.occurrences.get(second["occurrence_key"]).state is occurrence.State.QUEUED
    # ...and the third, with the buffer taken, is skipped
    third = next_message(system, tk, seen=(first["occurrence_key"], second["occurrence_key"]))
    assert system.worker().handle(third, remaining_ms=remaining) is Result.SKIPPED
    gate.set()
    holder.join(timeout=30)
