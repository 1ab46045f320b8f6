"""The local cloud keeps its state across a restart when given a state directory."""

from __future__ import annotations

import itertools
from pathlib import Path

from fireline.adapters import quotas_dynamodb, slots_dynamodb
from fireline.domain import quota
from fireline.local.cloud import LocalCloud, LocalOptions
from helpers.local_cloud import KEY, call

_runs = itertools.count()


def quota_use(cloud: LocalCloud) -> dict[quota.Quota, int]:
    assert cloud.deployed is not None
    counts = quotas_dynamodb.DynamoQuotaStore(
        cloud.client("dynamodb"), cloud.deployed.physical("SlotsTable")
    )
    return dict(counts.usage("tenant-a").used)


def slots(cloud: LocalCloud) -> slots_dynamodb.DynamoSlotStore:
    assert cloud.deployed is not None
    return slots_dynamodb.DynamoSlotStore(
        cloud.client("dynamodb"), cloud.deployed.physical("SlotsTable")
    )


def options(state_dir: Path) -> LocalOptions:
    # A stack name per start: the emulator of a finished run may still hold the last one.
    return LocalOptions(
        api_port=0,
        api_keys={KEY: "tenant-a"},
        state_dir=state_dir,
        stack_name=f"state-{next(_runs)}",
    )


def test_schedules_jobs_and_history_survive_a_restart(tmp_path: Path) -> None:
    # GIVEN a schedule and a job created in a first run, which then stops
    with LocalCloud(options(tmp_path)) as first:
        _, schedule = call(
            first,
            "POST",
            "/schedules",
            # Noon on 29 February: the ticker works 10 to 15 minutes ahead, so an hourly
            # schedule's next fire moved on whenever this ran in an hour's last minutes.
            {"spec": "cron(0 0 12 29 2 *)", "target": {"type": "python", "handler": "noop"}},
        )
        _, job = call(
            first,
            "POST",
            "/jobs",
            {"delay_seconds": 3600, "target": {"type": "python", "handler": "echo"}},
        )
        used_before = quota_use(first)
        # (and a concurrency limit override, in the register of overrides too)
        slots(first).build_overrides()
        slots(first).set_limit("tenant-a", 3)
    assert (tmp_path / "state.json").exists()
    # WHEN a second run starts on new tables with the same state directory
    with LocalCloud(options(tmp_path)) as second:
        status, again = call(second, "GET", f"/schedules/{schedule['id']}")
        # THEN the schedule and the job are there as they were
        assert status == 200
        assert {k: again[k] for k in ("id", "spec", "next_fire", "version")} == {
            k: schedule[k] for k in ("id", "spec", "next_fire", "version")
        }
        status, job_again = call(second, "GET", f"/jobs/{job['id']}")
        assert status == 200 and job_again["state"] == "scheduled"
        assert second.deployed is not None and second.deployed.stack_name != "state-0"
        # AND so is the quota use they hold, which their deletes and ends give back
        assert quota_use(second) == used_before
        # AND the limit override, in the tenant's own item and in the register
        assert slots(second).held("tenant-a") == ([], 3)
        assert slots(second).overrides() == {"tenant-a": 3}
        assert used_before[quota.Quota.SCHEDULES] >= 1
        assert used_before[quota.Quota.ACTIVE_JOBS] >= 1
