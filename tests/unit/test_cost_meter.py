"""The request meter counts what AWS bills, to the unit: DynamoDB's rounding, transactions
at twice the units, index writes on a key's change, eventually consistent reads at half,
SQS requests per 64 KB chunk; and the model prices them from the one price file."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fireline.cost import meter, model, prices
from fireline.services import dispatch, ticker

REGION = "us-east-1"
TABLE = "items"


@pytest.fixture
def aws() -> Iterator[tuple[meter.Meter, Any, Any]]:
    """A table keyed by pk with a KEYS_ONLY index on `due`, a queue, and a meter reading
    items through a second, unmetered client."""
    with mock_aws():
        probe = boto3.client("dynamodb", region_name=REGION)
        probe.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "due", "AttributeType": "S"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "due",
                    "KeySchema": [{"AttributeName": "due", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        log = meter.Meter(
            indexes={TABLE: [meter.Index("due", ["due"])]},
            reader=lambda table, key: probe.get_item(
                TableName=table, Key=key, ConsistentRead=True
            ).get("Item"),
            key_schema=lambda table: ["pk"],
        )
        ddb = boto3.client("dynamodb", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        log.attach(ddb)
        log.attach(sqs)
        yield log, ddb, sqs


def item(pk: str, size: int, **extra: str) -> dict[str, Any]:
    """An item of exactly ``size`` bytes (names and values counted as DynamoDB does)."""
    base = {"pk": {"S": pk}, **{k: {"S": v} for k, v in extra.items()}}
    filler = size - meter.item_size(base) - len("data")
    assert filler >= 0
    found = {**base, "data": {"S": "x" * filler}}
    assert meter.item_size(found) == size
    return found


def set_n(ddb: Any, pk: str, value: int) -> None:
    """A small update of one attribute, no index key among it."""
    ddb.update_item(
        TableName=TABLE,
        Key={"pk": {"S": pk}},
        UpdateExpression="SET n = :n",
        ExpressionAttributeValues={":n": {"N": str(value)}},
    )


def test_sizes_follow_dynamodbs_rules() -> None:
    # A name's bytes plus its value's: strings by UTF-8 bytes, numbers by digit pairs plus one
    assert meter.item_size({"ab": {"S": "héllo"}}) == 2 + 6
    assert meter.attribute_size({"N": "123.45"}) == 4
    assert meter.attribute_size({"N": "-7"}) == 2
    assert meter.attribute_size({"BOOL": True}) == 1
    # Maps and lists: 3 bytes plus 1 per element, beside the elements themselves
    assert meter.attribute_size({"M": {"a": {"S": "xy"}}}) == 3 + 1 + 2 + 1
    assert meter.attribute_size({"L": [{"S": "xy"}, {"N": "1"}]}) == 3 + (2 + 1) + (2 + 1)


def test_a_write_costs_one_unit_per_started_kilobyte_of_the_larger_item(
    aws: tuple[meter.Meter, Any, Any],
) -> None:
    log, ddb, _ = aws
    # GIVEN items of exactly 1 KB and of 1 KB and a byte
    ddb.put_item(TableName=TABLE, Item=item("a", 1024))
    assert log.write_units == 1
    ddb.put_item(TableName=TABLE, Item=item("b", 1025))
    assert log.write_units == 1 + 2
    # WHEN one grows from 1,025 bytes to 2,100 (the larger of before and after counts)
    log.reset()
    ddb.put_item(TableName=TABLE, Item=item("b", 2100))
    # THEN 3 units; and its delete costs what it weighed: 3 again
    assert log.write_units == 3
    ddb.delete_item(TableName=TABLE, Key={"pk": {"S": "b"}})
    assert log.write_units == 6
    # AND a small update of a 1 KB item costs 1; deleting an absent item costs 1 all the same
    log.reset()
    set_n(ddb, "a", 1)
    ddb.delete_item(TableName=TABLE, Key={"pk": {"S": "absent"}})
    assert (log.write_units, log.index_write_units) == (2 + 1, 0)
    assert log.billed == {"dynamodb.UpdateItem": 1, "dynamodb.DeleteItem": 1}


def test_a_refused_conditional_write_is_charged_and_writes_nothing(
    aws: tuple[meter.Meter, Any, Any],
) -> None:
    log, ddb, _ = aws
    ddb.put_item(TableName=TABLE, Item=item("a", 2500, due="t1"))
    log.reset()
    # WHEN a conditional put on the 2.5 KB item is refused
    with pytest.raises(ddb.exceptions.ConditionalCheckFailedException):
        ddb.put_item(
            TableName=TABLE,
            Item=item("a", 100, due="t2"),
            ConditionExpression="attribute_not_exists(pk)",
        )
    # THEN it costs the units of the item it checked, and writes neither item nor index
    assert log.write_units == 3
    assert log.index_write_units == 0
    assert log.conditional_failures == 1
    assert log.item_writes[TABLE] == 0


def test_a_transaction_costs_twice_each_item_condition_checks_included(
    aws: tuple[meter.Meter, Any, Any],
) -> None:
    log, ddb, _ = aws
    ddb.put_item(TableName=TABLE, Item=item("big", 1500))
    ddb.put_item(TableName=TABLE, Item=item("count", 50))
    log.reset()
    # WHEN one transaction puts a small item, updates a 1.5 KB one and checks a third
    ddb.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": TABLE, "Item": item("new", 200)}},
            {
                "Update": {
                    "TableName": TABLE,
                    "Key": {"pk": {"S": "big"}},
                    "UpdateExpression": "SET n = :n",
                    "ExpressionAttributeValues": {":n": {"N": "1"}},
                }
            },
            {
                "ConditionCheck": {
                    "TableName": TABLE,
                    "Key": {"pk": {"S": "count"}},
                    "ConditionExpression": "attribute_exists(pk)",
                }
            },
        ]
    )
    # THEN 2 x (1 + 2 + 1) units, one request, two items written
    assert log.write_units == 8
    assert log.billed["dynamodb.TransactWriteItems"] == 1
    assert log.item_writes[TABLE] == 2


def test_an_index_is_written_when_an_items_key_there_changes(
    aws: tuple[meter.Meter, Any, Any],
) -> None:
    log, ddb, _ = aws

    def set_due(value: str | None) -> None:
        if value is None:
            expression, values = "REMOVE due", {}
        else:
            expression, values = "SET due = :d", {":d": {"S": value}}
        ddb.update_item(
            TableName=TABLE,
            Key={"pk": {"S": "a"}},
            UpdateExpression=expression,
            **({"ExpressionAttributeValues": values} if values else {}),
        )

    # GIVEN an item put with an index key: one index item written
    ddb.put_item(TableName=TABLE, Item=item("a", 300, due="t1"))
    assert log.index_write_units == 1
    # WHEN its key there changes: a delete and a put in the index
    log.reset()
    set_due("t2")
    assert log.index_write_units == 2
    # AND an update that leaves the key alone writes nothing there (KEYS_ONLY)
    log.reset()
    set_n(ddb, "a", 2)
    assert log.index_write_units == 0
    # AND losing the key deletes the index item; gaining it back puts one
    set_due(None)
    assert log.index_write_units == 1
    set_due("t3")
    assert log.index_write_units == 2
    assert log.write_units == 3  # each of the three updates: 1 unit on the table


def test_reads_cost_per_started_4kb_and_half_when_eventually_consistent(
    aws: tuple[meter.Meter, Any, Any],
) -> None:
    log, ddb, _ = aws
    ddb.put_item(TableName=TABLE, Item=item("five", 5000))
    ddb.put_item(TableName=TABLE, Item=item("small", 100))
    log.reset()
    key = {"pk": {"S": "five"}}
    # A 5 KB item: 2 units strongly consistent, 1 eventually consistent
    ddb.get_item(TableName=TABLE, Key=key, ConsistentRead=True)
    assert log.read_units == 2
    ddb.get_item(TableName=TABLE, Key=key)
    assert log.read_units == 3
    # An absent item still costs the minimum: 1 strongly consistent, 0.5 otherwise
    ddb.get_item(TableName=TABLE, Key={"pk": {"S": "absent"}}, ConsistentRead=True)
    ddb.get_item(TableName=TABLE, Key={"pk": {"S": "absent"}})
    assert log.read_units == 4.5
    # A batch: each item on its own (5 KB: 2, small: 1, absent: 1), consistent as asked
    log.reset()
    ddb.batch_get_item(
        RequestItems={
            TABLE: {
                "Keys": [key, {"pk": {"S": "small"}}, {"pk": {"S": "absent"}}],
                "ConsistentRead": True,
            }
        }
    )
    assert log.read_units == 4
    # A scan reads 5,100-odd bytes in all: 2 units consistent, 1 not
    log.reset()
    ddb.scan(TableName=TABLE, ConsistentRead=True)
    ddb.scan(TableName=TABLE)
    assert log.read_units == 3
    assert log.scanned == 4


def test_sqs_bills_each_started_64kb_of_a_payload_as_one_request(
    aws: tuple[meter.Meter, Any, Any],
) -> None:
    log, _, sqs = aws
    url = sqs.create_queue(QueueName="work")["QueueUrl"]
    log.reset()
    # WHEN ten 10 KB messages go in one batch (100 KB), then one small message alone
    sqs.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "MessageBody": "x" * 10 * 1024} for i in range(10)],
    )
    sqs.send_message(QueueUrl=url, MessageBody="small")
    # THEN 2 requests billed for the batch, 1 for the message
    assert log.billed["sqs.SendMessageBatch"] == 2
    assert log.billed["sqs.SendMessage"] == 1
    assert log.calls["sqs.SendMessageBatch"] == 1
    # AND receiving ten of them (100 KB) is 2 requests; an empty receive is 1
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sum(len(m["Body"]) for m in received) >= 65 * 1024
    assert log.billed["sqs.ReceiveMessage"] == 2


def test_sns_and_eventbridge_bill_each_started_64kb_as_one_request() -> None:
    with mock_aws():
        log = meter.Meter()
        sns = boto3.client("sns", region_name=REGION)
        events = boto3.client("events", region_name=REGION)
        log.attach(sns)
        log.attach(events)
        topic = sns.create_topic(Name="t")["TopicArn"]
        # WHEN a 100 KB message is published, then a small one
        sns.publish(TopicArn=topic, Message="x" * 100 * 1024)
        sns.publish(
            TopicArn=topic,
            Message="small",
            MessageAttributes={"IdempotencyKey": {"DataType": "String", "StringValue": "k"}},
        )
        # AND two entries go in one PutEvents, one of 70 KB of detail, one small
        big = '{"a": "' + "x" * 70 * 1024 + '"}'
        events.put_events(
            Entries=[
                {"Source": "acme", "DetailType": "d", "Detail": big},
                {"Source": "acme", "DetailType": "d", "Detail": "{}"},
            ]
        )
    # THEN the big message is 2 requests and the small 1; the big entry 2 events, the
    # small 1
    assert (log.calls["sns.Publish"], log.billed["sns.Publish"]) == (2, 3)
    assert (log.calls["events.PutEvents"], log.billed["events.PutEvents"]) == (1, 3)


def test_dispatch_targets_calls_are_priced_from_the_price_file() -> None:
    # GIVEN a job of each dispatch target's call, and half an AssumeRole
    usage = model.Usage(
        billed={
            "stepfunctions.StartExecution": 1.0,
            "events.PutEvents": 1.0,
            "sns.Publish": 1.0,
            "sts.AssumeRole": 0.5,
        }
    )
    lines = model.per_million(usage)["usd_by_service"]
    # THEN each is its request's price, per million, and STS costs nothing
    assert lines == {
        "stepfunctions.requests": pytest.approx(1.00),
        "events": pytest.approx(1.00),
        "sns": pytest.approx(0.50),
    }


def test_the_model_prices_units_and_requests_from_the_price_file() -> None:
    # GIVEN a job of 2 write units, 1 index write, 1 read, one SQS request, a tenth of a
    # 512 MB invocation making 3 calls with 1 ms of CPU, and 100 bytes logged
    usage = model.Usage(
        billed={"sqs.SendMessageBatch": 1.0},
        write_units=2.0,
        index_write_units=1.0,
        read_units=1.0,
        invocations={"target": 0.1},
        aws_calls={"target": 3.0},
        cpu_seconds={"target": 0.001},
        log_bytes=100.0,
    )
    assert model.FUNCTIONS["target"].memory_mb == 512
    lines = model.per_million(usage)["usd_by_service"]
    # THEN each line is its count times its price, per million
    assert lines["dynamodb.writes"] == pytest.approx(1.25)
    assert lines["dynamodb.index_writes"] == pytest.approx(0.625)
    assert lines["dynamodb.reads"] == pytest.approx(0.125)
    assert lines["sqs"] == pytest.approx(0.40)
    assert lines["lambda.requests"] == pytest.approx(0.02)
    # 15 ms waiting plus 1 ms of a vCPU at 512/1769 of one, at 0.5 GB on arm64
    gb_s = (0.015 + 0.001 * 1769 / 512) * 0.5
    assert lines["lambda.duration"] == pytest.approx(
        gb_s * prices.LAMBDA_GB_SECOND_ARM.usd * 1e6, abs=1e-4
    )
    logged = 100 + 0.1 * model.PLATFORM_LOG_BYTES
    assert lines["logs"] == pytest.approx(logged * 0.5 / 1024**3 * 1e6, abs=1e-4)


def test_an_invocation_that_lasts_its_minute_is_billed_the_minute_and_api_requests_priced() -> None:
    # GIVEN a ticker invocation of 2 s of calls and CPU that lasts 60 s of wall time (it
    # ticks until its minute is up), and one request through the REST API
    def ticker(**extra: Any) -> model.Usage:
        return model.Usage(
            invocations={"ticker": 1.0},
            aws_calls={"ticker": 100.0},
            cpu_seconds={"ticker": 1.5},
            **extra,
        )

    usage = ticker(billed={"apigateway.Request": 1.0}, wall_seconds={"ticker": 60.0})
    # THEN Lambda bills the wall time, at 1,769 MB, not the 2 s of work
    assert usage.lambda_gb_seconds()["ticker"] == pytest.approx(60.0 * 1769 / 1024)
    short = ticker(billed={})
    assert short.lambda_gb_seconds()["ticker"] == pytest.approx(2.0 * 1769 / 1024)
    # AND the API request is API Gateway's REST price
    lines = model.per_million(usage)["usd_by_service"]
    assert lines["apigateway"] == pytest.approx(3.50)
    # AND spread over a minute's jobs, the wall time is spread with the rest
    spread = model.Usage(billed={}).plus(usage, 1 / 600)
    assert spread.lambda_gb_seconds()["ticker"] == pytest.approx(0.1 * 1769 / 1024)


def test_eventbridge_scheduler_alternatives_add_idempotencys_two_writes() -> None:
    found = model.alternatives()
    plain = found["eventbridge_scheduler_lambda"]["usd_by_service"]
    kept = found["eventbridge_scheduler_lambda_idempotency"]["usd_by_service"]
    assert plain["scheduler"] == pytest.approx(1.00)
    assert plain["lambda.requests"] == pytest.approx(0.20)
    assert kept["dynamodb.writes"] == pytest.approx(1.25)
    assert "dynamodb.writes" not in plain


def test_the_expected_wait_before_a_fire_time_follows_the_rounded_down_delay() -> None:
    # GIVEN messages whose delays were worked out on a whole second, as the emulator's
    # clock reads it (deployed, the sender's clock stands at any phase of the second)
    sent = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    fire = sent + timedelta(seconds=60)
    # THEN a fire on a whole second, sent ahead, is visible up to a second early: half
    # a second's wait expected
    assert model.expected_wait(fire, fire, sent) == pytest.approx(0.5)
    # AND with 400 ms of jitter it is visible up to 600 ms before its fire time, as
    # often as the phase passes 400 ms: (1 - 0.4)^2 / 2 expected
    jittered = fire + timedelta(milliseconds=400)
    assert model.expected_wait(fire, jittered, sent) == pytest.approx(0.18, abs=1e-3)
    # AND jitter of a second or more, or a message sent at or after its fire time (a
    # trigger, a retry), is never early
    assert model.expected_wait(fire, fire + timedelta(seconds=1), sent) == 0.0
    assert model.expected_wait(sent, sent, sent) == 0.0
    assert model.expected_wait(sent - timedelta(seconds=30), sent, sent) == 0.0


def test_the_tickers_margin_on_its_delays_is_a_longer_wait() -> None:
    # GIVEN a fire the ticker sends, its delay counted from dispatch.IN_FLIGHT (100 ms)
    # past its clock's reading, so that a slow send never lands after the fire time
    sent = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    fire = sent + timedelta(seconds=60)
    # THEN over every phase it is visible a tenth of a second earlier than a send
    # counted from the reading: 0.6 s expected, where the API's sends (no margin) wait 0.5 s
    ticker = model.expected_wait(fire, fire, sent, counted_from=dispatch.IN_FLIGHT)
    assert timedelta(milliseconds=100) == dispatch.IN_FLIGHT
    assert ticker == pytest.approx(0.6)
    assert ticker - model.expected_wait(fire, fire, sent) == pytest.approx(0.1)
    # AND a fire already due when sent still waits for nothing
    assert model.expected_wait(sent, sent, sent, counted_from=dispatch.IN_FLIGHT) == 0.0


def test_a_sender_that_chooses_its_phase_is_billed_the_wait_at_that_phase() -> None:
    # GIVEN the ticker's sends ahead of their fires, at its send phase (0.85 into a second)
    phase = ticker.TickerConfig().send_phase
    sent = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC) + timedelta(seconds=phase)
    fire = datetime(2026, 1, 1, 12, 1, 0, tzinfo=UTC)

    def wait(at: datetime) -> float:
        return model.expected_wait(
            fire, fire, at, counted_from=dispatch.IN_FLIGHT, at_its_phase=True
        )

    # THEN a fire on a whole second waits what is left of the second: 0.15 s
    assert wait(sent) == pytest.approx(1 - phase)
    # AND a send earlier in the second waits longer; one later waits less, until its
    # delay, counted from 0.1 s on, crosses into the next second: then it waits longest
    # (never arrives late)
    assert wait(sent - timedelta(milliseconds=250)) == pytest.approx(0.4)
    assert wait(sent + timedelta(milliseconds=40)) == pytest.approx(0.11)
    assert wait(sent + timedelta(milliseconds=60)) == pytest.approx(1.09)


def test_tracing_is_priced_per_trace_recorded_and_retrieved_from_the_price_file() -> None:
    # GIVEN a fire that takes a tenth of a worker invocation, at the default fire rate
    usage = model.Usage(billed={}, invocations={"worker": 0.1}).traced()
    # WHEN it is priced per million fires
    lines = model.per_million(usage)["usd_by_service"]
    # THEN it records its own trace 1 time in 1,000 and Lambda's of its invocation share
    # (5% of 0.1), each retrieved once, at X-Ray's prices
    traces = model.DEFAULT_FIRE_TRACE_RATE + 0.1 * model.LAMBDA_TRACE_RATE
    assert usage.traces_recorded == pytest.approx(0.006)
    assert lines["xray.recorded"] == pytest.approx(traces * prices.XRAY_TRACE_RECORDED.usd * 1e6)
    assert lines["xray.retrieved"] == pytest.approx(traces * prices.XRAY_TRACE_RETRIEVED.usd * 1e6)
    # AND the two stay under $0.05 per million fires
    assert lines["xray.recorded"] + lines["xray.retrieved"] < 0.05
    # AND a usage without tracing has no X-Ray line at all
    assert "xray.recorded" not in model.per_million(model.Usage(billed={}))["usd_by_service"]
