"""The local API gateway's answers when its authorizer refuses a key or does not answer."""

from __future__ import annotations

from typing import Any, cast

from fireline.local import runtime


class Host:
    """A function host that answers with ``outcome`` (raised when it is an exception)."""

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.events: list[Any] = []

    def invoke(self, event: Any, timeout: float | None = None) -> Any:
        self.events.append(event)
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


def gateway(authorizer: Host, api: Host) -> runtime.ApiGateway:
    return runtime.ApiGateway(
        api=cast(runtime.FunctionHost, api), authorizer=cast(runtime.FunctionHost, authorizer)
    )


def test_an_authorizer_without_an_answer_is_a_500_and_the_api_is_not_called() -> None:
    api = Host({"statusCode": 200, "body": "{}"})
    status, _, body = gateway(Host(TimeoutError()), api).handle(
        "GET", "/schedules", {"x-api-key": "k"}, b""
    )
    assert (status, body, api.events) == (500, b'{"message":null}', [])


def test_a_key_the_authorizer_refuses_is_a_401() -> None:
    api = Host({"statusCode": 200, "body": "{}"})
    refused = Host(
        runtime.FunctionError({"errorType": "Exception", "errorMessage": "Unauthorized"})
    )
    status, _, _ = gateway(refused, api).handle("GET", "/schedules", {"x-api-key": "k"}, b"")
    assert (status, api.events) == (401, [])
