"""The local API gateway's answers when its authorizer refuses a key or does not answer."""

from __future__ import annotations

import json
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


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limited(plan: runtime.UsagePlan, clock: Clock, usage_key: str | None = "usage-a") -> Any:
    decision = {
        "principalId": "tenant-a",
        "policyDocument": {"Statement": [{"Effect": "Allow"}]},
        "context": {"tenant_id": "tenant-a"},
    }
    if usage_key is not None:
        decision["usageIdentifierKey"] = usage_key
    api = Host({"statusCode": 200, "body": "{}"})
    built = runtime.ApiGateway(
        api=cast(runtime.FunctionHost, api),
        authorizer=cast(runtime.FunctionHost, Host(decision)),
        usage_plan=plan,
        monotonic=clock,
        wall=clock,
    )
    return built, api


def test_the_usage_plan_admits_a_burst_then_the_rate_and_answers_429_naming_the_limit() -> None:
    clock = Clock()
    gateway_, api = limited(runtime.UsagePlan(rate=2, burst=3), clock)
    # GIVEN a full bucket: the burst is admitted, the next request is a 429
    answers = [gateway_.handle("GET", "/schedules", {"x-api-key": "k"}, b"") for _ in range(4)]
    assert [status for status, _, _ in answers] == [200, 200, 200, 429]
    body = json.loads(answers[-1][2])
    assert body["error"]["type"] == "rate_limited"
    assert "UsagePlanRateLimit" in body["error"]["message"]
    # AND the refused request never reached the API
    assert len(api.events) == 3
    # WHEN half a second passes, one more token (rate 2/s) admits one request
    clock.now += 0.5
    statuses = [gateway_.handle("GET", "/s", {"x-api-key": "k"}, b"")[0] for _ in range(2)]
    assert statuses == [200, 429]
    assert gateway_.throttled == 2


def test_the_daily_quota_counts_admitted_requests_and_resets_the_next_utc_day() -> None:
    clock = Clock()
    gateway_, _ = limited(runtime.UsagePlan(rate=100, burst=100, daily_quota=2), clock)
    statuses = [gateway_.handle("GET", "/s", {"x-api-key": "k"}, b"")[0] for _ in range(3)]
    assert statuses == [200, 200, 429]
    refused = gateway_.handle("GET", "/s", {"x-api-key": "k"}, b"")[2]
    assert json.loads(refused)["error"]["type"] == "quota_exceeded"
    clock.now += 86_400
    assert gateway_.handle("GET", "/s", {"x-api-key": "k"}, b"")[0] == 200


def test_with_a_usage_plan_a_key_without_a_usage_identifier_is_forbidden() -> None:
    gateway_, api = limited(runtime.UsagePlan(rate=1, burst=1), Clock(), usage_key=None)
    assert gateway_.handle("GET", "/s", {"x-api-key": "k"}, b"")[0] == 403
    assert api.events == []


def test_the_authorizers_decision_is_cached_for_the_ttl_only() -> None:
    clock = Clock()
    gateway_, _ = limited(runtime.UsagePlan(rate=100, burst=100), clock)
    gateway_.cache_seconds = 5
    authorizer = cast(Host, gateway_.authorizer)
    for _ in range(3):
        gateway_.handle("GET", "/s", {"x-api-key": "k"}, b"")
    assert len(authorizer.events) == 1
    clock.now += 5
    gateway_.handle("GET", "/s", {"x-api-key": "k"}, b"")
    assert len(authorizer.events) == 2


def test_the_root_is_public_for_get_only_as_the_templates_methods_say() -> None:
    # GIVEN a gateway whose authorizer refuses every key
    api = Host({"statusCode": 200, "body": "{}"})
    refused = Host(
        runtime.FunctionError({"errorType": "Exception", "errorMessage": "Unauthorized"})
    )
    served = gateway(refused, api)
    # WHEN the root is asked for without a key THEN GET reaches the API (its index)
    status, _, _ = served.handle("GET", "/", {}, b"")
    assert (status, len(api.events), refused.events) == (200, 1, [])
    # AND another method on the root, or a GET of another route, needs the key
    assert served.handle("POST", "/", {}, b"")[0] == 401
    assert served.handle("POST", "/openapi.json", {}, b"")[0] == 401
    assert served.handle("GET", "/schedules", {}, b"")[0] == 401
    assert len(api.events) == 1
