"""The local runtime's hygiene: bytes and methods the API cannot take get its JSON errors
over the real HTTP server, a client hanging up costs nothing, a killed function process
is replaced, and the log is one JSON object per line with metrics summed up."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from fireline.local import runtime


class ApiHost:
    """Stands for the API function: answers 200 with the event's body."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def invoke(self, event: Any, timeout: float | None = None) -> Any:
        self.events.append(event)
        return {"statusCode": 200, "headers": {}, "body": json.dumps({"body": event["body"]})}


@pytest.fixture
def served() -> Iterator[tuple[Any, ApiHost]]:
    api = ApiHost()
    gateway = runtime.ApiGateway(
        api=cast(runtime.FunctionHost, api), authorizer=None, public_paths=("/open",)
    )
    server = gateway.serve("127.0.0.1", 0)
    yield server, api
    server.shutdown()
    server.server_close()


def request(server: Any, method: str, body: bytes = b"") -> tuple[int, dict[str, str], Any]:
    connection = http.client.HTTPConnection(*server.server_address[:2], timeout=10)
    connection.request(method, "/open", body=body or None)
    response = connection.getresponse()
    text = response.read()
    connection.close()
    return response.status, dict(response.getheaders()), json.loads(text) if text else None


def test_a_body_that_is_not_utf8_is_a_400_in_the_apis_shape(served: Any) -> None:
    server, api = served
    status, headers, body = request(server, "POST", b'{"spec": "\xff\xfe"}')
    assert (status, headers["Content-Type"]) == (400, "application/json")
    assert body == {
        "error": {"type": "validation", "message": "the body is not UTF-8 text", "field": "body"}
    }
    assert api.events == []  # refused before the API


@pytest.mark.parametrize("method", ["TRACE", "CONNECT", "PROPFIND"])
def test_a_method_the_api_has_not_is_a_405_in_the_apis_shape(served: Any, method: str) -> None:
    server, api = served
    status, headers, body = request(server, method)
    assert status == 405
    assert "GET" in headers["Allow"]
    assert body["error"]["type"] == "method_not_allowed"
    assert body["error"]["field"] == "method"
    assert api.events == []


def test_the_server_still_answers_after_a_client_hung_up(
    served: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    server, _ = served
    # GIVEN a client that sends a request and closes without reading its answer
    for _ in range(20):
        with socket.create_connection(server.server_address[:2]) as raw:
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            raw.sendall(b"POST /open HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
    # THEN the next request is answered, and nothing was printed about the others
    assert request(server, "GET")[0] == 200
    assert "Traceback" not in capfd.readouterr().err


@pytest.fixture
def host(tmp_path: Path) -> Iterator[runtime.FunctionHost]:
    collector = runtime.Collector(str(tmp_path / "local.log"), lambda name, value: None)
    collector.start()
    spec = runtime.FunctionSpec(
        logical_id="Echo",
        name="echo",
        handler="helpers.echo_function.handler",
        timeout_seconds=30,
        environment={},  # the process gets sys.path from its parent (spawn)
        concurrency=2,
    )
    started = runtime.FunctionHost(spec, collector.lines)
    started.start()
    yield started
    started.stop()


def test_a_killed_function_process_is_replaced_and_the_next_invocation_runs(
    host: runtime.FunctionHost,
) -> None:
    # GIVEN a function whose processes answer
    first = host.invoke("hello", timeout=60)
    assert first["event"] == "hello"
    # WHEN every one of its processes is killed
    killed = host.pids()
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    # THEN the next invocations run, in new processes
    answers = [host.invoke(n, timeout=60) for n in range(4)]
    assert [a["event"] for a in answers] == [0, 1, 2, 3]
    assert not {a["pid"] for a in answers} & set(killed)
    assert host.replaced == len(killed)


def test_an_invocation_whose_process_is_killed_fails_as_a_runtime_exit(
    host: runtime.FunctionHost, tmp_path: Path
) -> None:
    # GIVEN an invocation running in one of the function's processes
    marker = tmp_path / "started"
    running = host.invoke_async({"started": str(marker)})
    deadline = time.monotonic() + 60
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    # WHEN that process is killed
    os.kill(int(marker.read_text()), signal.SIGKILL)
    # THEN the invocation fails as Lambda reports a runtime exit, and the next one runs
    with pytest.raises(runtime.FunctionError) as failed:
        running.result(timeout=60)
    assert failed.value.payload["errorType"] == "Runtime.ExitError"
    assert host.invoke("after", timeout=60)["event"] == "after"


def test_the_log_is_one_json_object_per_line_with_metrics_summed_up(tmp_path: Path) -> None:
    log = tmp_path / "local.log"
    seen: list[tuple[str, float]] = []
    collector = runtime.Collector(str(log), lambda n, v: seen.append((n, v)), summary_seconds=3600)
    metric = {
        "_aws": {"CloudWatchMetrics": [{"Metrics": [{"Name": "TicksCompleted"}]}]},
        "TicksCompleted": 1,
    }
    # GIVEN a structured log line, plain output, a failure and many metric lines
    collector.lines.put(("Ticker", json.dumps({"level": "INFO", "action": "ticker.tick"})))
    collector.lines.put(("Api", "plain words"))
    try:
        raise ValueError("boom")
    except ValueError as exc:
        collector.lines.put(("Api", runtime._failure_line(exc)))
    try:
        raise Exception("Unauthorized")
    except Exception as exc:
        collector.lines.put(("Authorizer", runtime._failure_line(exc)))
    for _ in range(50):
        collector.lines.put(("Ticker", json.dumps(metric)))
    # WHEN the collector has read them
    collector.start()
    deadline = time.monotonic() + 30
    while len(seen) < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    # AND the local cloud stops (the summary period, an hour here, is cut short)
    # (one reader, in order: the four log lines were written before the first value)
    collector.close()
    # THEN every line of the log is a JSON object naming its function
    assert len(seen) == 50  # the status screen saw each value
    written = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(isinstance(r, dict) and "function" in r for r in written)
    assert written[0] == {"function": "Ticker", "level": "INFO", "action": "ticker.tick"}
    assert written[1] == {"function": "Api", "message": "plain words"}
    # a traceback lives inside its object; a refused key is one line without one
    assert "ValueError: boom" in written[2]["traceback"]
    assert written[3] == {
        "function": "Authorizer",
        "level": "INFO",
        "message": "invocation answered Unauthorized",
    }
    # and fifty metric lines became summaries, not fifty lines
    summaries = [r for r in written if r.get("message") == "metrics"]
    assert sum(r["metrics"]["TicksCompleted"]["count"] for r in summaries) == 50
    assert len(written) == 5 and len(summaries) == 1


class ListQueue:
    """An SQS client's receive_message on a list of messages: at most ten a receive, as
    SQS answers, each receive counted."""

    def __init__(self, count: int, body_bytes: int = 100) -> None:
        self.waiting = [
            {"MessageId": f"m{n}", "ReceiptHandle": f"r{n}", "Body": "x" * body_bytes}
            for n in range(count)
        ]
        self.receives: list[int] = []

    def receive_message(self, **request: Any) -> dict[str, Any]:
        most = request["MaxNumberOfMessages"]
        assert 1 <= most <= 10  # SQS refuses more
        taken, self.waiting = self.waiting[:most], self.waiting[most:]
        self.receives.append(len(taken))
        return {"Messages": taken} if taken else {}


def mapping(queue: ListQueue, *, batch_size: int, window: float) -> runtime.SqsMapping:
    return runtime.SqsMapping(
        queue,
        # No function behind it: only the gathering is played.
        cast(Any, types.SimpleNamespace(spec=types.SimpleNamespace(logical_id="Worker"))),
        queue_url="http://queue",
        queue_arn="arn:aws:sqs:us-east-1:123456789012:q",
        batch_size=batch_size,
        max_concurrency=1,
        partial_failures=True,
        batching_window=window,
    )


def test_a_batch_larger_than_ten_is_gathered_from_several_receives_within_its_window() -> None:
    # GIVEN 300 messages waiting and a mapping of batch size 256 with a 1 s window
    queue = ListQueue(300)
    # WHEN it gathers a batch
    batch = mapping(queue, batch_size=256, window=1.0)._gather()
    # THEN it holds 256 records, taken ten a receive, the last receive asking for six
    assert [m["MessageId"] for m in batch] == [f"m{n}" for n in range(256)]
    assert queue.receives == [10] * 25 + [6]


def test_without_a_window_a_batch_is_what_one_receive_returns() -> None:
    queue = ListQueue(30)
    batch = mapping(queue, batch_size=10, window=0)._gather()
    assert len(batch) == 10 and queue.receives == [10]


def test_a_window_that_closes_invokes_with_what_it_gathered() -> None:
    # GIVEN fewer messages than the batch size
    queue = ListQueue(13)
    # WHEN the window closes
    batch = mapping(queue, batch_size=256, window=0.2)._gather()
    # THEN the batch holds them all, and no one twice
    assert sorted(m["MessageId"] for m in batch) == sorted(f"m{n}" for n in range(13))


def test_a_gathered_batch_stays_within_lambdas_payload_limit() -> None:
    # GIVEN 100 messages of 200 KB (20 MB), and a batch size of 100
    queue = ListQueue(100, body_bytes=200 * 1024)
    # WHEN a batch is gathered
    batch = mapping(queue, batch_size=100, window=1.0)._gather()
    # THEN it stops below Lambda's 6 MB payload limit
    assert sum(len(m["Body"]) for m in batch) <= runtime.PAYLOAD_LIMIT_BYTES
    assert len(batch) < 100
