"""HTTP target headers: names are tokens, values hold no line break or control character,
both within length bounds; checked at registration and again before any send (a target
stored before a rule existed is never sent with a header that breaks the request)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fireline.domain import errors, occurrence, retry
from fireline.domain import target as target_rules
from fireline.services.worker import Result
from helpers.memory_system import REMAINING_MS, MemorySystem

LONG_NAME = "X-" + "a" * target_rules.MAX_HEADER_NAME
LONG_VALUE = "v" * (target_rules.MAX_HEADER_VALUE + 1)


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({"X-A": "1\r\nX-B: 2"}, "line break"),
        ({"X-A": "1\rX-B: 2"}, "line break"),
        ({"X-A": "\n"}, "line break"),
        ({"X-A": "a\x00b"}, "control character"),
        ({"X-A": "a\x7fb"}, "control character"),
        ({"X-A\r\nX-B": "2"}, "not a header name"),
        ({"X A": "1"}, "not a header name"),
        ({"X-A:": "1"}, "not a header name"),
        ({"": "1"}, "not a header name"),
        ({"X-Ä": "1"}, "not a header name"),
        ({LONG_NAME: "1"}, "at most 128"),
        ({"X-A": LONG_VALUE}, "at most 2048"),
        ({"X-A": 7}, "not a string"),
        ({"Idempotency-Key": "mine"}, "set by Fireline"),
        ({"x-fireline-signature": "forged"}, "set by Fireline"),
        ({"Host": "internal"}, "set by Fireline"),
        ({"Traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"}, "set by Fireline"),
    ],
)
def test_a_header_that_cannot_be_sent_as_given_is_refused_naming_the_field(
    headers: dict[str, object], says: str
) -> None:
    with pytest.raises(errors.ValidationError, match=says) as refused:
        target_rules.check_headers(headers)
    assert refused.value.field == "target.headers"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer abc.def"},
        {"X-Trace": "a\tb c"},
        {"X-Name": "Zoë"},
        {"X-" + "a" * (target_rules.MAX_HEADER_NAME - 2): "v" * target_rules.MAX_HEADER_VALUE},
        {"!#$%&'*+-.^_`|~": ""},
    ],
)
def test_ordinary_headers_pass(headers: dict[str, object]) -> None:
    target_rules.check_headers(headers)


def test_a_stored_target_with_a_line_break_in_a_header_is_never_sent() -> None:
    # GIVEN a job whose stored target (written before headers were checked) carries CR/LF
    system = MemorySystem()
    body = system.due_job(retry=retry.RetryPolicy(max_attempts=1))
    item = system.schedules.get("tenant-a", system.row(body).schedule_id)
    assert item is not None
    hostile = {
        "type": "http",
        "url": "https://hooks.example.com/x",
        "headers": {"X-A": "1\r\nX-Injected: yes"},
    }
    system.schedules.replace(
        replace(item, target=hostile, version=item.version), expected_version=item.version
    )
    # WHEN a worker runs it
    result = system.worker().handle(body, remaining_ms=lambda: REMAINING_MS)
    # THEN the attempt fails naming the header rule; nothing was sent (no address is
    # even resolved before the check)
    assert result is Result.DEAD
    row = system.row(body)
    assert row.state is occurrence.State.DEAD
    assert row.exit_reason.startswith("error: a header cannot be sent")
