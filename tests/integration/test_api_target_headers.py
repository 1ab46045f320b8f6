"""HTTP target headers on the API (moto): over-long names and values are refused like
line breaks are, 422 naming target.headers, with nothing written."""

from __future__ import annotations

import pytest

from fireline.domain import target as target_rules
from integration.test_api_input import VALID, Api, api, refused

__all__ = ["api"]  # the fixture, shared with the other hostile-input tests


@pytest.mark.parametrize(
    "headers",
    [
        {"X-" + "a" * target_rules.MAX_HEADER_NAME: "1"},
        {"X-A": "v" * (target_rules.MAX_HEADER_VALUE + 1)},
        {"X A": "1"},
        {"X-A": "1\r\nX-B: 2"},
    ],
    ids=["long name", "long value", "space in a name", "CR/LF in a value"],
)
@pytest.mark.parametrize("path", ["/schedules", "/jobs"])
def test_a_header_that_cannot_be_sent_is_refused_and_nothing_written(
    api: Api, path: str, headers: dict[str, str]
) -> None:
    target = {"type": "http", "url": "https://hooks.example.com/x", "headers": headers}
    body = {**VALID, "target": target} if path == "/schedules" else {"target": target}
    if path == "/jobs":
        body["delay_seconds"] = 60
    assert refused(api, "POST", path, body) == (422, "target.headers")
