"""Keeping the local cloud's state across restarts (``--state-dir``).

moto keeps everything in memory, so on stop the local cloud exports the items of the
tables whose contents matter (schedules, occurrences, idempotency records, API keys,
tenant limit overrides and quota use) to ``state.json``, and on start imports them into the freshly
deployed tables. Queue messages are not exported: instead every occurrence still queued,
waiting for a retry or caught running gets its message sent again on start, which the
claim makes harmless if it was already delivered. Leases and held slots are not kept:
they expire anyway.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from fireline.domain import occurrence
from fireline.local import deploy
from fireline.services import dispatch


class LocalCloud(Protocol):
    """What keeping the state needs of a running local cloud (fireline.local.cloud, which
    calls this module): its deployed stack's names and a client on its emulator."""

    @property
    def deployed(self) -> deploy.Deployed | None: ...

    def client(self, service: str) -> Any: ...


KEPT_TABLES = (
    "SchedulesTable",
    "OccurrencesTable",
    "IdempotencyTable",
    "ApiKeysTable",
    "SlotsTable",
)
STATE_FILE = "state.json"


def save(cloud: LocalCloud, directory: Path) -> Path:
    assert cloud.deployed is not None
    ddb = cloud.client("dynamodb")
    exported: dict[str, list[dict[str, Any]]] = {}
    for logical in KEPT_TABLES:
        items: list[dict[str, Any]] = []
        for page in ddb.get_paginator("scan").paginate(TableName=cloud.deployed.physical(logical)):
            items += page["Items"]
        if logical == "SlotsTable":
            # The tenants' overrides and quota use (slots below 0), which the schedules
            # and jobs kept beside them hold units of; not the held slots, which expire.
            items = [i for i in items if int(i["slot"]["N"]) < 0]
        exported[logical] = items
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / STATE_FILE
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"version": 1, "tables": exported}))
    temporary.replace(path)  # a crash mid-write never leaves half a state file
    return path


def restore(cloud: LocalCloud, directory: Path) -> int:
    """Import a saved state into the fresh tables; the number of items imported."""
    path = directory / STATE_FILE
    if not path.exists():
        return 0
    assert cloud.deployed is not None
    saved = json.loads(path.read_text())
    ddb = cloud.client("dynamodb")
    count = 0
    for logical, items in saved.get("tables", {}).items():
        if logical not in KEPT_TABLES:
            continue
        table = cloud.deployed.physical(logical)
        for start in range(0, len(items), 25):
            chunk = items[start : start + 25]
            ddb.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": i}} for i in chunk]})
            count += len(chunk)
    _resend_queued(cloud, saved.get("tables", {}).get("OccurrencesTable", []))
    return count


def _resend_queued(cloud: LocalCloud, items: list[dict[str, Any]]) -> None:
    """Messages do not survive a restart: every occurrence that still needs one (queued,
    waiting for a retry, or caught running by the stop) gets it again. The claim is
    conditional and a running row's claim expires, so a repeat is harmless."""
    assert cloud.deployed is not None
    sqs = cloud.client("sqs")
    for item in items:
        if item.get("state", {}).get("S") not in ("queued", "failed", "running"):
            continue
        job_class = item["job_class"]["S"]
        body = {
            "v": dispatch.MESSAGE_VERSION,
            "occurrence_key": item["occurrence_key"]["S"],
            "tenant_id": item["tenant_id"]["S"],
            "schedule_id": item["schedule_id"]["S"],
            "version": int(item["version"]["N"]),
            "fire_time": occurrence.format_fire_time(
                datetime.fromtimestamp(int(item["fire_time_ms"]["N"]) / 1000, UTC), exact=True
            ),
            "job_class": job_class,
        }
        url = cloud.deployed.physical(f"{job_class.capitalize()}Queue")
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps(body))
