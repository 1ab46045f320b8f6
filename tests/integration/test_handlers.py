"""The Lambda entry points, wired from the environment the template gives them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from fireline import wiring
from fireline.domain import api_keys, dag
from fireline.domain.model import Schedule, ScheduleState
from fireline.services.schedules import JobDraft, ScheduleDraft
from helpers import events
from helpers.aws import Stack


@pytest.fixture
def deployed(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    """The template's tables and queues on moto, and the functions' environment set."""
    with mock_aws():
        stack = Stack.create()
        for name, value in stack.env().items():
            monkeypatch.setenv(name, value)
        wiring.reset()
        yield stack
        wiring.reset()


def emf_records(output: str) -> list[dict[str, object]]:
    """The CloudWatch embedded-metric records among the lines a function printed."""
    records = []
    for line in output.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            records.append(json.loads(line))
    return records


def once(run_at: datetime) -> Schedule:
    """A schedule that fires once, at ``run_at``: it waits in the due index."""
    return wiring.schedule_service().create(
        "tenant-a",
        ScheduleDraft(
            spec=f"at({run_at.strftime('%Y-%m-%dT%H:%M:%S')}Z)",
            target={"type": "python", "handler": "noop"},
        ),
    )


def test_ticker_handler_fires_due_work_and_emits_lag_and_backlog_as_emf(
    deployed: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a one-off schedule due two seconds ago (in the due index: a one-off job due
    # that soon is sent by its create, and never reaches the ticker)
    from fireline.domain import model
    from fireline.handlers import ticker as handler

    # ...in a shard of group 0, the group the rule's event names (of the template's
    # default groups: a job in another group's shard is that group's to send)
    groups = wiring.settings().ticker_groups
    run_at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=2)
    job = once(run_at)
    while model.due_shard(job.schedule_id) % groups != 0:
        wiring.schedule_service().delete("tenant-a", job.schedule_id)
        job = once(run_at)
    # WHEN the rule invokes the ticker with time for its first pass before its 5 s margin
    # (time counted per call: a cold ticker reads two shards a round, so its first pass
    # over the 16 is 8 rounds, each asking the time once before it starts, and a round is
    # started only with room for 1.5 of the slowest so far; with 20 s the pass stopped
    # after 7 rounds, and a job in shard 14 or 15 was not sent)
    result = handler.handler(
        events.load("ticker", "scheduled"),
        events.CountdownContext(timeout_ms=30_000, per_call_ms=2_000),
    )
    # THEN it held the lease, ticked, and sent the job
    assert result["acquired"] is True
    assert result["ticks"] >= 1
    assert result["sent"] == 1
    item = wiring.schedule_service().get("tenant-a", job.schedule_id)
    assert item.state is ScheduleState.COMPLETED
    # AND the metrics went out as EMF: lag (about 2 s), backlog, ticks completed
    records = emf_records(capsys.readouterr().out)
    names = {
        m["Name"] for r in records for d in r["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]
    }
    assert {"ScheduleLag", "Backlog", "TicksCompleted", "Fired"} <= names
    lag = [r["ScheduleLag"] for r in records if "ScheduleLag" in r]
    lags = [v for value in lag for v in (value if isinstance(value, list) else [value])]
    assert any(2_000 <= v < 30_000 for v in lags)
    assert all(r["service"] == "fireline" for r in records)


def test_second_ticker_invocation_while_the_first_holds_the_lease_does_nothing(
    deployed: Stack,
) -> None:
    from fireline.handlers import ticker as handler

    # GIVEN someone else holds the lease of the group the rule's event names (group 0 of
    # the template's default groups)
    config = wiring.ticker_for("x").config
    held = wiring.lease_store().acquire(
        config.lease_name,
        "someone-else",
        int(datetime.now(UTC).timestamp() * 1000),
        config.lease_terms,
    )
    assert held is not None
    result = handler.handler(
        events.load("ticker", "scheduled"), events.CountdownContext(timeout_ms=6_000)
    )
    assert result == {
        "acquired": False,
        "stopped": "not_acquired",
        "ticks": 0,
        "token": None,
        "sent": 0,
        "skipped": 0,
        "duplicates": 0,
    }


def test_a_ticker_group_serves_only_its_shards_under_its_own_lease(
    deployed: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fireline.domain import model
    from fireline.handlers import ticker as handler

    # GIVEN two ticker groups, and one due job in a shard of each
    monkeypatch.setenv("TICKER_GROUPS", "2")
    wiring.reset()
    run_at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=2)
    jobs = {}
    while set(jobs) != {0, 1}:
        item = once(run_at)
        jobs.setdefault(model.due_shard(item.schedule_id) % 2, item.schedule_id)
    # WHEN group 1's rule invokes the ticker (its event fixture names the group)
    result = handler.handler(
        events.load("ticker", "group"),
        events.CountdownContext(timeout_ms=20_000, per_call_ms=2_000),
    )
    # THEN it held group 1's lease and sent group 1's job only
    assert result["acquired"] is True and result["sent"] >= 1
    assert wiring.lease_store().get("ticker-1-of-2") is not None
    assert wiring.lease_store().get("ticker-0-of-2") is None
    service = wiring.schedule_service()
    assert service.get("tenant-a", jobs[1]).state is ScheduleState.COMPLETED
    assert service.get("tenant-a", jobs[0]).state is ScheduleState.ACTIVE


@pytest.mark.parametrize("event", [{"group": -1}, {"group": "1"}, {"group": True}])
def test_a_ticker_event_naming_no_group_is_refused(event: dict[str, object]) -> None:
    from fireline.domain import errors
    from fireline.handlers import ticker as handler

    with pytest.raises(errors.ValidationError) as refused:
        handler.group_of(event)
    assert refused.value.field == "group"


def test_api_handler_serves_the_fixture_event(deployed: Stack) -> None:
    from fireline.handlers import api as handler

    response = handler.handler(events.load("api", "create_schedule"), events.LambdaContext())
    assert response["statusCode"] == 201
    body = json.loads(response["body"])
    assert body["spec"] == "cron(30 9 * * *)"
    listed = handler.handler(events.load("api", "list_schedules"), events.LambdaContext())
    assert [s["id"] for s in json.loads(listed["body"])["items"]] == [body["id"]]
    # the same Idempotency-Key again converges on the first schedule (DynamoDB records)
    again = handler.handler(events.load("api", "create_schedule"), events.LambdaContext())
    assert json.loads(again["body"])["id"] == body["id"]


def test_authorizer_maps_an_api_key_to_its_tenant_and_refuses_others(deployed: Stack) -> None:
    from fireline.handlers import authorizer as handler

    store = wiring.api_key_store()
    record = api_keys.ApiKey(
        key_hash=api_keys.key_hash("local-key-tenant-a"),
        key_id="ak_1",
        tenant_id="tenant-a",
        created_ms=0,
        usage_key="usage-tenant-a",
    )
    store.add(record)
    allowed = handler.handler(events.load("authorizer", "request"), events.LambdaContext())
    assert allowed["principalId"] == "tenant-a"
    assert allowed["context"] == {"tenant_id": "tenant-a", "key_id": "ak_1", "role": "tenant"}
    # the usage plan throttles by the tenant's usage identifier
    assert allowed["usageIdentifierKey"] == "usage-tenant-a"
    assert allowed["policyDocument"]["Statement"][0]["Effect"] == "Allow"
    assert allowed["policyDocument"]["Statement"][0]["Resource"].endswith("abcdef1234/*")
    # the table holds only the key's hash
    raw = wiring.dynamodb_client().scan(TableName=deployed.tables["ApiKeysTable"])["Items"]
    assert all("local-key-tenant-a" not in json.dumps(item) for item in raw)
    unknown = events.load("authorizer", "request")
    unknown["headers"]["x-api-key"] = "not-a-key"
    with pytest.raises(Exception, match="Unauthorized"):
        handler.handler(unknown, events.LambdaContext())
    missing = events.load("authorizer", "request")
    del missing["headers"]["x-api-key"]
    with pytest.raises(Exception, match="Unauthorized"):
        handler.handler(missing, events.LambdaContext())
    # a revoked key is refused from then on
    store.end("ak_1", at_ms=1)
    with pytest.raises(Exception, match="Unauthorized"):
        handler.handler(events.load("authorizer", "request"), events.LambdaContext())


def test_missing_configuration_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCHEDULES_TABLE", raising=False)
    wiring.reset()
    from fireline.domain import errors

    with pytest.raises(errors.ValidationError) as caught:
        wiring.settings()
    assert caught.value.field == "SCHEDULES_TABLE"
    wiring.reset()


def sqs_event(stack: Stack, queue: str, messages: list[dict[str, object]]) -> dict[str, object]:
    """An SQS event as the event source mapping delivers it."""
    arn = f"arn:aws:sqs:us-east-1:123456789012:{stack.queues[queue].rsplit('/', 1)[1]}"
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "0"},
                "messageAttributes": {},
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": "us-east-1",
            }
            for m in messages
        ]
    }


def test_worker_handler_reports_only_the_failed_record(
    deployed: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from fireline import jobs
    from fireline.handlers import worker as handler

    monkeypatch.setenv("SIGNING_SECRET_PREFIX", "fireline/test/signing/")
    wiring.reset()
    # Each attempt runs in a process of its own: the job leaves its mark in a file.
    marks = tmp_path / "runs"
    marks.touch()

    def count(context: Any) -> None:
        with marks.open("a") as runs_file:
            runs_file.write(context.occurrence_key + "\n")

    jobs.registry.register("count")(count)
    # GIVEN two jobs due now, materialized, and a third message with no occurrence key
    service = wiring.schedule_service()
    for _ in range(2):
        service.create_job(
            "tenant-a", JobDraft(delay_seconds=0, target={"type": "python", "handler": "count"})
        )
    ticker = wiring.ticker_for("t")
    ticker.use_lease = False
    ticker.tick()
    sqs = wiring.sqs_client()
    url = deployed.queues["DefaultQueue"]
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"tenant_id": "tenant-a"}))
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert len(messages) == 3
    bad = next(m["MessageId"] for m in messages if "occurrence_key" not in m["Body"])
    event = sqs_event(deployed, "DefaultQueue", messages)
    # WHEN the batch is handled
    response = handler.handler(event, events.LambdaContext(timeout_ms=120_000))
    # THEN only the keyless record is reported failed; the two jobs ran once each
    assert response == {"batchItemFailures": [{"itemIdentifier": bad}]}
    runs = marks.read_text().split()
    assert len(runs) == 2 and len(set(runs)) == 2
    # AND delivering the whole batch again re-runs neither of them
    again = handler.handler(event, events.LambdaContext(timeout_ms=120_000))
    assert again == {"batchItemFailures": [{"itemIdentifier": bad}]}
    assert len(marks.read_text().split()) == 2


def test_worker_handler_fixture_batch_reports_the_keyless_record(
    deployed: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fireline.handlers import worker as handler

    monkeypatch.setenv("SIGNING_SECRET_PREFIX", "fireline/test/signing/")
    wiring.reset()
    event = events.load("sqs", "worker_batch")
    response = handler.handler(event, events.LambdaContext(timeout_ms=120_000))
    # the first names an occurrence that does not exist (expired): acknowledged, nothing run;
    # the second has no key: reported failed, so SQS redelivers it and redrive catches it
    assert response == {"batchItemFailures": [{"itemIdentifier": event["Records"][1]["messageId"]}]}


def test_workflow_handler_applies_events_and_reports_bad_ones(deployed: Stack) -> None:
    # GIVEN a registered diamond and a started run (its "start" event is in the batch)
    from fireline.domain import workflow
    from fireline.handlers import workflow as handler

    service = wiring.workflow_service()
    spec = {"type": "python", "handler": "noop"}
    service.register(
        "tenant-a",
        "diamond",
        [workflow.NodeSpec(n, spec) for n in "abcd"],
        [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
    )
    run = service.start("tenant-a", "diamond")
    event = events.load("workflow", "events_batch")
    event["Records"][0]["body"] = event["Records"][0]["body"].replace("RUN_ID", run.run_id)
    # WHEN the controller function gets it with a malformed second record
    result = handler.handler(event, events.LambdaContext())
    # THEN the run's rows exist and its root went to the default queue; the bad record is
    # reported for redelivery, the good one is not
    assert result == {"batchItemFailures": [{"itemIdentifier": event["Records"][1]["messageId"]}]}
    view = service.view("tenant-a", run.run_id)
    assert view.counts[dag.NodeState.DISPATCHED] == 1 and view.counts[dag.NodeState.WAITING] == 3
    sent = wiring.work_queue().receive("default", max_messages=10)
    assert [m.body["schedule_id"] for m in sent] == [workflow.node_schedule_id(run.run_id, "a")]


def test_workflow_handler_reconciles_running_runs_on_its_schedule(deployed: Stack) -> None:
    # GIVEN a run whose start event was lost (never delivered)
    from fireline.domain import workflow
    from fireline.handlers import workflow as handler

    service = wiring.workflow_service()
    spec = {"type": "python", "handler": "noop"}
    service.register("tenant-a", "pair", [workflow.NodeSpec(n, spec) for n in "ab"], [("a", "b")])
    run = service.start("tenant-a", "pair")
    # WHEN the periodic rule invokes the function
    result = handler.handler(
        events.load("workflow", "reconcile_scheduled"), events.LambdaContext(timeout_ms=300_000)
    )
    # THEN it reconciled the running run: the rows are written and the root dispatched
    # (and no backfill was in progress to pace)
    assert result == {"reconciled": 1, "backfills_paced": 0}
    view = service.view("tenant-a", run.run_id)
    assert view.counts[dag.NodeState.DISPATCHED] == 1


def test_sweep_handler_sends_a_job_its_create_never_sent(deployed: Stack) -> None:
    # GIVEN a one-off job written 20 minutes before now, with its unit of quota, whose
    # create died before sending it (due at its creation: it never entered the due index)
    from fireline.domain import quota, schedule
    from fireline.domain.model import Kind
    from fireline.handlers import sweep as handler

    due = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=20)
    spec = schedule.AtSpec(when=due)
    job = Schedule(
        tenant_id="tenant-a",
        schedule_id="job_never_sent",
        timing=schedule.Timing(spec=spec),
        spec_text=str(spec),
        kind=Kind.JOB,
        target={"type": "python", "handler": "noop"},
        state=ScheduleState.COMPLETED,
        created_at=due,
        updated_at=due,
    )
    wiring.schedule_store().create(job, charge=quota.Charge(quota.Quota.ACTIVE_JOBS, 10))
    # WHEN the sweep's rule invokes the function
    result = handler.handler(
        events.load("sweep", "scheduled"), events.LambdaContext(timeout_ms=120_000)
    )
    # THEN it found the tenant and sent the job's one fire to its class's queue
    assert (result["tenants"], result["resent"], result["forgiven"]) == (1, 1, 0)
    sent = wiring.work_queue().receive("default", max_messages=10)
    assert [m.body["occurrence_key"].split("#")[0] for m in sent] == ["job_never_sent"]
