"""``fireline admin migrate listings`` against the template's workflows table on moto:
workflows and runs stored before the listings existed (no catalog entry, no entry among
their workflow's runs) are listed after it, and a second pass changes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto import mock_aws

from fireline.adapters import workflows_dynamodb
from fireline.cli import main as cli
from fireline.domain import workflow
from helpers.aws import REGION, Stack

TENANT = "tenant-a"
START = datetime(2026, 3, 1, 9, tzinfo=UTC)


@pytest.fixture
def table() -> Iterator[str]:
    with mock_aws():
        yield Stack.create(prefix="migrate").tables["WorkflowsTable"]


def store(table: str) -> workflows_dynamodb.DynamoWorkflowStore:
    client = boto3.client("dynamodb", region_name=REGION)
    return workflows_dynamodb.DynamoWorkflowStore(client, table, sleep=lambda _: None)


def a_definition(workflow_id: str, version: int) -> workflow.DefinitionMeta:
    return workflow.DefinitionMeta(
        tenant_id=TENANT,
        workflow_id=workflow_id,
        version=version,
        nodes=3,
        edges=2,
        created_at=START + timedelta(minutes=version),
    )


def a_run(run_id: str, workflow_id: str, minutes: int) -> workflow.Run:
    created = START + timedelta(minutes=minutes)
    return workflow.Run(
        tenant_id=TENANT,
        run_id=run_id,
        workflow_id=workflow_id,
        version=1,
        total=3,
        created_at=created,
    )


def forget_listings(table: str) -> int:
    """Delete every listing entry, as items written before the listings had none."""
    client = boto3.client("dynamodb", region_name=REGION)
    deleted = 0
    for item in client.scan(TableName=table)["Items"]:
        if item["pk"]["S"].startswith(("C#", "WR#")):
            client.delete_item(TableName=table, Key={"pk": item["pk"], "sk": item["sk"]})
            deleted += 1
    return deleted


def migrate(table: str, *extra: str) -> int:
    return cli.main(["admin", "migrate", "listings", "--table", table, "--region", REGION, *extra])


def test_older_workflows_and_runs_are_listed_after_the_migration_and_a_rerun_changes_nothing(
    table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN two workflows (one with three versions) and three runs, stored without their
    # listing entries
    workflows = store(table)
    for workflow_id, version in (("etl", 1), ("etl", 2), ("etl", 3), ("report", 1)):
        assert workflows.put_definition(a_definition(workflow_id, version))
    runs = [a_run("r1", "etl", 1), a_run("r2", "etl", 2), a_run("r3", "report", 3)]
    for run in runs:
        assert workflows.create_run(run)
    assert forget_listings(table) == 2 + 3
    assert workflows.workflows(TENANT, limit=10).items == []
    # WHEN the migration runs
    code = migrate(table, "--json")
    # THEN each workflow is listed at its latest version, each run under its workflow
    assert code == 0
    totals = json.loads(capsys.readouterr().out)
    assert (totals["scanned"], totals["runs"]) == (7, 3)
    # (a workflow's entry moves once per version scanned in rising order: 1 to 3 moves)
    assert 2 <= totals["catalogued"] <= 4
    listed = workflows.workflows(TENANT, limit=10).items
    assert [(w.workflow_id, w.version) for w in listed] == [("etl", 3), ("report", 1)]
    assert [r.run_id for r in workflows.runs_of(TENANT, "etl", limit=10).items] == ["r2", "r1"]
    assert [r.run_id for r in workflows.runs_of(TENANT, "report", limit=10).items] == ["r3"]
    # AND a second pass writes no catalog entry and leaves the listings as they are
    assert migrate(table, "--json") == 0
    assert json.loads(capsys.readouterr().out)["catalogued"] == 0
    assert [(w.workflow_id, w.version) for w in workflows.workflows(TENANT, limit=10).items] == [
        ("etl", 3),
        ("report", 1),
    ]
    assert [r.run_id for r in workflows.runs_of(TENANT, "etl", limit=10).items] == ["r2", "r1"]


def test_a_pass_resumes_from_its_cursor_and_pages_through_the_table(table: str) -> None:
    # GIVEN 12 runs without their entries
    workflows = store(table)
    for i in range(12):
        assert workflows.create_run(a_run(f"r{i:02d}", "etl", i))
    forget_listings(table)
    # WHEN the table is walked 5 items a page, from cursor to cursor
    cursor, pages, indexed = None, 0, 0
    while True:
        page = workflows.backfill_listings(cursor=cursor, limit=5)
        pages, indexed, cursor = pages + 1, indexed + page.runs, page.cursor
        if cursor is None:
            break
    # THEN every run was indexed once, over three pages or more
    assert indexed == 12 and pages >= 3
    listed = workflows.runs_of(TENANT, "etl", limit=20).items
    assert [r.run_id for r in listed] == [f"r{i:02d}" for i in reversed(range(12))]


def test_a_missing_table_name_is_refused_naming_the_option(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a stack without the workflows table's output
    monkeypatch.delenv("FIRELINE_WORKFLOWS_TABLE", raising=False)
    with mock_aws():
        boto3.client("cloudformation", region_name=REGION).create_stack(
            StackName="bare",
            TemplateBody='{"Resources": {"Q": {"Type": "AWS::SQS::Queue"}}}',
        )
        # WHEN the listings are migrated on it
        code = cli.main(["admin", "migrate", "listings", "--stack", "bare", "--region", REGION])
    # THEN it is refused, naming the output it lacks and how to name the table
    assert code == 1
    err = capsys.readouterr().err
    assert "no WorkflowsTableName output: name the workflows table with --table" in err
