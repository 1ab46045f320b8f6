"""`fireline admin keys|signing` against a deployment's resources on moto.

The keys table is the template's, the usage plan an API Gateway plan on a REST API's
stage, the signing secrets Secrets Manager's; the deployed authorizer's handler decides
with what the command wrote.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fireline import webhooks, wiring
from fireline.cli import main
from helpers import events
from helpers.aws import REGION, Stack

PREFIX = "fireline/test/signing/"


@pytest.fixture
def deployment(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    with mock_aws():
        stack = Stack.create()
        for name, value in stack.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
        wiring.reset()
        apigateway = boto3.client("apigateway", region_name=REGION)
        api = apigateway.create_rest_api(name="fireline")["id"]
        root = apigateway.get_resources(restApiId=api)["items"][0]["id"]
        apigateway.put_method(
            restApiId=api, resourceId=root, httpMethod="GET", authorizationType="NONE"
        )
        apigateway.put_integration(restApiId=api, resourceId=root, httpMethod="GET", type="MOCK")
        deployment_id = apigateway.create_deployment(restApiId=api, stageName="prod")["id"]
        plan = apigateway.create_usage_plan(
            name="fireline-tenants",
            apiStages=[{"apiId": api, "stage": "prod"}],
            throttle={"rateLimit": 50, "burstLimit": 100},
        )["id"]
        flags = [
            "--region",
            REGION,
            "--stack",
            "fireline-test",
            "--keys-table",
            stack.tables["ApiKeysTable"],
            "--signing-prefix",
            PREFIX,
            "--usage-plan-id",
            plan,
        ]
        yield {"flags": flags, "plan": plan, "apigateway": apigateway, "deployment": deployment_id}
        wiring.reset()


def admin(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, Any]:
    # What ran before (the authorizer logs its refusals as JSON lines) is not the
    # command's output: only what the command prints is read.
    capsys.readouterr()
    code = main.main(["admin", *args, *deployment["flags"], "--json"])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if out.out.strip() else out.err)


def authorize(api_key: str) -> dict[str, Any] | None:
    from fireline.handlers import authorizer

    event = events.load("authorizer", "request")
    event["headers"]["x-api-key"] = api_key
    try:
        return authorizer.handler(event, events.LambdaContext())
    except Exception as exc:
        assert str(exc) == "Unauthorized"
        return None


def test_create_shows_the_key_once_stores_its_hash_and_registers_the_tenant_in_the_plan(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # WHEN the operator creates a key for tenant acme
    code, created = admin(deployment, capsys, "keys", "create", "--tenant", "acme")
    assert code == 0
    api_key = created["api_key"]
    assert (created["tenant"], created["state"]) == ("acme", "active")
    # THEN the authorizer accepts it for acme, naming the tenant's usage identifier...
    decision = authorize(api_key)
    assert decision is not None and decision["context"]["tenant_id"] == "acme"
    # ...which is the value of an API Gateway key in the stack's usage plan
    gateway = deployment["apigateway"]
    in_plan = gateway.get_usage_plan_keys(usagePlanId=deployment["plan"])["items"]
    assert [k["value"] for k in in_plan] == [decision["usageIdentifierKey"]]
    # AND the table holds the hash only, never the key
    raw = wiring.dynamodb_client().scan(TableName=wiring.settings().api_keys_table)["Items"]
    assert len(raw) == 1 and api_key not in json.dumps(raw)
    # AND list shows id, tenant, created and state, never the key
    code, listed = admin(deployment, capsys, "keys", "list")
    assert code == 0 and listed == [{k: v for k, v in created.items() if k != "api_key"}]
    assert api_key not in json.dumps(listed)
    # AND the tenant got its signing secret, under the prefix the workers may read
    code, ring = admin(deployment, capsys, "signing", "show", "--tenant", "acme")
    assert code == 0 and len(ring["keys"]) == 1
    secrets = boto3.client("secretsmanager", region_name=REGION)
    assert [s["Name"] for s in secrets.list_secrets()["SecretList"]] == [f"{PREFIX}acme"]


def test_an_operator_key_is_marked_so_and_stays_one_when_rotated(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # WHEN the operator creates an operator's key and a tenant's key
    _, operator = admin(deployment, capsys, "keys", "create", "--tenant", "ops", "--operator")
    _, tenant = admin(deployment, capsys, "keys", "create", "--tenant", "acme")

    # THEN the authorizer tells the API each key's role, and list shows it
    one, two = authorize(operator["api_key"]), authorize(tenant["api_key"])
    assert one is not None and one["context"]["role"] == "operator"
    assert two is not None and two["context"]["role"] == "tenant"
    _, listed = admin(deployment, capsys, "keys", "list")
    assert {k["tenant"]: k["role"] for k in listed} == {"ops": "operator", "acme": "tenant"}
    # AND a rotated operator's key is an operator's key still
    _, rotated = admin(deployment, capsys, "keys", "rotate", operator["key_id"])
    renewed = authorize(rotated["new"]["api_key"])
    assert renewed is not None and renewed["context"]["role"] == "operator"


def test_a_second_key_of_a_tenant_shares_its_usage_identifier_and_signing_keys(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    _, first = admin(deployment, capsys, "keys", "create", "--tenant", "acme")
    _, ring = admin(deployment, capsys, "signing", "show", "--tenant", "acme")
    _, second = admin(deployment, capsys, "keys", "create", "--tenant", "acme")
    one, two = authorize(first["api_key"]), authorize(second["api_key"])
    assert one is not None and two is not None
    # one throttle per tenant, however many keys it holds
    assert one["usageIdentifierKey"] == two["usageIdentifierKey"]
    assert (
        len(deployment["apigateway"].get_usage_plan_keys(usagePlanId=deployment["plan"])["items"])
        == 1
    )
    assert admin(deployment, capsys, "signing", "show", "--tenant", "acme")[1] == ring


def test_revoke_makes_the_authorizer_refuse_the_key_and_leaves_others_alone(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    _, acme = admin(deployment, capsys, "keys", "create", "--tenant", "acme")
    _, other = admin(deployment, capsys, "keys", "create", "--tenant", "globex")
    code, revoked = admin(deployment, capsys, "keys", "revoke", acme["key_id"])
    assert code == 0 and revoked["state"] == "revoked"
    assert authorize(acme["api_key"]) is None
    assert authorize(other["api_key"]) is not None
    _, listed = admin(deployment, capsys, "keys", "list", "--tenant", "acme")
    assert [(k["key_id"], k["state"]) for k in listed] == [(acme["key_id"], "revoked")]


def test_rotate_creates_a_new_key_and_ends_the_old_one_after_the_grace(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    _, old = admin(deployment, capsys, "keys", "create", "--tenant", "acme")
    # WHEN rotated with an hour's grace, the old key still works and is "expiring"
    code, rotated = admin(deployment, capsys, "keys", "rotate", old["key_id"], "--grace", "3600")
    assert code == 0
    assert rotated["old"]["state"] == "expiring" and rotated["old"]["ends"] is not None
    assert authorize(old["api_key"]) is not None
    assert authorize(rotated["new"]["api_key"]) is not None
    # WHEN rotated without grace, the previous key is refused at once
    code, again = admin(deployment, capsys, "keys", "rotate", rotated["new"]["key_id"])
    assert code == 0 and again["old"]["state"] == "revoked"
    assert authorize(rotated["new"]["api_key"]) is None
    assert authorize(again["new"]["api_key"]) is not None


def test_signing_rotate_keeps_the_previous_key_for_the_overlap(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    admin(deployment, capsys, "keys", "create", "--tenant", "acme")
    _, before = admin(deployment, capsys, "signing", "show", "--tenant", "acme")
    code, after = admin(
        deployment, capsys, "signing", "rotate", "--tenant", "acme", "--overlap", "3600"
    )
    assert code == 0
    old_id = before["keys"][0]["key_id"]
    assert [k["key_id"] for k in after["keys"]][:1] == [old_id] and len(after["keys"]) == 2
    assert after["keys"][0]["not_after_ms"] is not None
    # what a receiver loads from the document: both keys, until the overlap ends
    valid_now = webhooks.keys_from_document(after, now=after["keys"][1]["created_ms"] / 1000)
    assert len(valid_now) == 2
    later = webhooks.keys_from_document(after, now=after["keys"][0]["not_after_ms"] / 1000)
    assert list(later) == [after["keys"][1]["key_id"]]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["keys", "create", "--tenant", "a:b"], "tenant"),
        (["keys", "revoke", "ak_missing"], None),
        (["signing", "rotate", "--tenant", "acme", "--overlap", "5"], "overlap_seconds"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_writes_nothing(
    deployment: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    field: str | None,
) -> None:
    code, error = admin(deployment, capsys, *args)
    assert code == 1 and error.startswith("error: ")
    if field:
        assert f"{field}:" in error
    assert admin(deployment, capsys, "keys", "list")[1] == []
    secrets = boto3.client("secretsmanager", region_name=REGION)
    assert secrets.list_secrets()["SecretList"] == []


def test_a_usage_plan_given_at_creation_moves_the_tenant_to_that_tier(
    deployment: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    gateway = deployment["apigateway"]
    api = gateway.get_rest_apis()["items"][0]["id"]
    premium = gateway.create_usage_plan(
        name="fireline-premium",
        apiStages=[{"apiId": api, "stage": "prod"}],
        throttle={"rateLimit": 500, "burstLimit": 1000},
    )["id"]
    # GIVEN a tenant in the stack's plan
    _, first = admin(deployment, capsys, "keys", "create", "--tenant", "acme")
    usage = authorize(first["api_key"])
    assert usage is not None

    def members(plan: str) -> list[str]:
        return [k["value"] for k in gateway.get_usage_plan_keys(usagePlanId=plan)["items"]]

    assert (members(deployment["plan"]), members(premium)) == ([usage["usageIdentifierKey"]], [])
    # WHEN a key is created for it in the premium plan
    admin(deployment, capsys, "keys", "create", "--tenant", "acme", "--usage-plan", premium)
    # THEN the tenant (all its keys) moved: out of the stack's plan, into the premium one
    assert (members(deployment["plan"]), members(premium)) == ([], [usage["usageIdentifierKey"]])
    # AND a later key without a plan keeps the tenant's tier
    admin(deployment, capsys, "keys", "create", "--tenant", "acme")
    assert members(premium) == [usage["usageIdentifierKey"]]
