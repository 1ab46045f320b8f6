"""The console in a real browser: headless Chromium (Debian's package) driven by
Playwright, against one local cloud with the examples registered, as an operator would
use it. Each test leaves a screenshot of its page in .test-output/console/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from fireline.local import examples
from fireline.local.cloud import LocalCloud, LocalOptions
from helpers import browser
from helpers.browser import CHROMIUM, SHOTS, WAIT_MS
from helpers.local_cloud import KEY, OTHER_KEY, TEST_KEYS, call, wait_for

OPERATOR_KEY = "test-operator-key-0001"

sync_api = browser.playwright()
expect = sync_api.expect


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    options = LocalOptions(
        api_port=0,
        api_keys=dict(TEST_KEYS),
        log_path=tmp_path_factory.mktemp("console") / "local.log",
    )
    with LocalCloud(options) as started:
        started.key_admin().create("operators", api_key=OPERATOR_KEY, operator=True)
        made = examples.register(started.api_url, KEY)
        assert not [m for m in made if "error" in m], made
        yield started


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    playwright = sync_api.sync_playwright().start()
    try:
        # As root (CI) Chromium's sandbox cannot start: the pages are this test's own.
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield launched
        launched.close()
    finally:
        playwright.stop()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    # A context per test: its own sessionStorage, so each test signs in afresh.
    context = browser.new_context(viewport={"width": 1366, "height": 860})
    context.set_default_timeout(WAIT_MS)
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(str(error)))
    yield opened
    context.close()
    assert not problems, problems  # no script error on any page the test went through


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def sign_in(page: Any, cloud: LocalCloud, key: str) -> None:
    page.goto(f"{cloud.api_url}/console")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()


def confirm(page: Any, name: str) -> None:
    page.locator("dialog[open]").get_by_role("button", name=name).click()


def schedule_with(
    cloud: LocalCloud, handler: str, key: str = KEY, spec: str = "rate(1 hour)", **extra: Any
) -> str:
    target = {"type": "python", "handler": handler}
    status, made = call(
        cloud, "POST", "/schedules", {"spec": spec, "target": target, **extra}, key=key
    )
    assert status == 201, made
    return str(made["id"])


def test_a_wrong_key_shows_the_sign_in_error(cloud: LocalCloud, page: Any) -> None:
    # GIVEN the console, served by the API with no key
    # WHEN someone signs in with a key the API does not know
    sign_in(page, cloud, "not-a-key-of-anyone")

    # THEN the sign-in form says so, and no page of the console is shown
    expect(page.get_by_role("alert")).to_contain_text("refused this key")
    expect(page.get_by_label("API key")).to_be_visible()
    expect(page.locator("#top")).to_be_hidden()
    shot(page, "sign-in-error")


def test_signing_in_shows_the_overview_and_the_examples(cloud: LocalCloud, page: Any) -> None:
    # WHEN tenant A signs in
    sign_in(page, cloud, KEY)

    # THEN the overview shows its figures, its lag plotted
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    expect(page.locator("#tenant-name")).to_have_text("tenant-a")
    expect(page.get_by_role("heading", name="This tenant's work by class")).to_be_visible()
    # (the deployment's queues, every tenant's, are an operator's to see)
    expect(page.get_by_role("heading", name="Deployment queues", exact=False)).to_have_count(0)
    expect(page.get_by_role("img", name="Lag per minute", exact=False)).to_be_visible()
    expect(page.get_by_role("heading", name="Ticker groups and lease holders")).to_be_visible()
    shot(page, "overview")

    # AND the schedules page lists the local cloud's examples, described, with the last
    # outcome of the one every 10 seconds once it has fired (beside them, the schedules
    # the file's other tests made for tenant A, when they ran first)
    listed = call(cloud, "GET", "/schedules")[1]["items"]
    examples = [s["id"] for s in listed if "example" in s["payload"]]
    assert len(examples) == 4
    (every_ten,) = [s for s in listed if s["spec"].startswith("cron(*/10")]
    wait_for(
        lambda: call(cloud, "GET", f"/schedules/{every_ten['id']}/occurrences?state=succeeded")[1][
            "items"
        ]
    )
    page.get_by_role("link", name="Schedules").click()
    expect(page.get_by_text("every 10 seconds", exact=False).first).to_be_visible()
    expect(page.get_by_text("At 09:30", exact=False).first).to_be_visible()
    rows = page.locator("tbody tr")
    expect(rows).to_have_count(len(listed))
    for example in examples:
        expect(page.locator(f"tr[data-id='{example}']")).to_be_visible()
    # filtering by target type narrows it to the workflow's schedule (an example's)
    page.get_by_label("Target type").select_option("workflow")
    expect(rows).to_have_count(1)
    one_of_examples = re.compile(f"^({'|'.join(map(re.escape, examples))})$")
    expect(rows.first).to_have_attribute("data-id", one_of_examples)
    page.get_by_label("Target type").select_option("")
    expect(rows).to_have_count(len(listed))
    # (its newest fire may be running at that moment: any state of a fire that was)
    last = page.locator(f"tr[data-id='{every_ten['id']}'] td.last .badge")
    expect(last).to_have_text(re.compile("^(succeeded|running|queued)$"))
    shot(page, "schedules")


def test_pause_resume_and_trigger_a_schedule(cloud: LocalCloud, page: Any) -> None:
    # GIVEN a schedule of tenant A that fires hourly
    schedule_id = schedule_with(cloud, "echo", timezone="Europe/Paris")
    sign_in(page, cloud, KEY)
    page.goto(f"{cloud.api_url}/console#/schedules/{schedule_id}")
    heading = page.get_by_role("heading", level=1)
    expect(heading).to_contain_text("active")

    # WHEN it is paused, after a confirmation
    page.get_by_role("button", name="Pause").click()
    confirm(page, "Pause")
    # THEN the API holds it paused
    expect(heading).to_contain_text("paused")
    assert call(cloud, "GET", f"/schedules/{schedule_id}")[1]["state"] == "paused"

    # WHEN it is resumed from the keyboard alone: the confirmation takes the focus
    page.get_by_role("button", name="Resume").focus()
    page.keyboard.press("Enter")
    expect(page.locator("dialog[open]").get_by_role("button", name="Resume")).to_be_focused()
    page.keyboard.press("Enter")
    expect(heading).to_contain_text("active")
    assert call(cloud, "GET", f"/schedules/{schedule_id}")[1]["state"] == "active"

    # WHEN it is edited to fire every two hours
    version = call(cloud, "GET", f"/schedules/{schedule_id}")[1]["version"]
    page.get_by_role("button", name="Edit").click()
    page.get_by_label("Spec").fill("rate(2 hours)")
    page.get_by_role("button", name="Save").click()
    # THEN it is a new version with the new spec
    expect(page.get_by_role("status")).to_contain_text(f"as version {version + 1}")
    edited = call(cloud, "GET", f"/schedules/{schedule_id}")[1]
    assert (edited["spec"], edited["version"]) == ("rate(2 hours)", version + 1)

    # WHEN it is triggered now
    page.get_by_role("button", name="Trigger now").click()
    confirm(page, "Trigger")

    # THEN its occurrence appears in the ledger, and runs to success (the page polls)
    ledger = page.locator("tbody tr[data-state]")
    expect(ledger).to_have_count(1)
    expect(page.locator("tbody tr[data-state='succeeded']")).to_have_count(1)
    expect(page.get_by_role("img", name="Timeline of 1 occurrences", exact=False)).to_be_visible()
    # the preview shows the next fires in the schedule's zone, its offset beside each
    expect(page.get_by_role("columnheader", name="In Europe/Paris")).to_be_visible()
    shot(page, "schedule")


def test_the_preview_marks_a_dst_transition(cloud: LocalCloud, page: Any) -> None:
    # GIVEN a daily schedule in Paris, previewed across the end of summer time
    schedule_id = schedule_with(cloud, "noop", spec="every day at 09:30", timezone="Europe/Paris")
    sign_in(page, cloud, KEY)
    page.goto(f"{cloud.api_url}/console#/schedules/{schedule_id}")

    # WHEN the preview starts a few days before the last Sunday of October 2027
    page.get_by_label("Preview after (UTC)").fill("2027-10-28T00:00")
    page.get_by_label("Preview after (UTC)").dispatch_event("change")

    # THEN the first fire at the new offset is marked
    expect(page.locator(".dst")).to_have_text("DST +02:00 → +01:00")
    shot(page, "schedule-dst")


def test_redrive_one_dead_letter_then_the_selected_ones(cloud: LocalCloud, page: Any) -> None:
    # GIVEN two jobs of tenant A that fail their only attempt: two dead letters
    jobs = []
    for _ in range(2):
        status, job = call(
            cloud,
            "POST",
            "/jobs",
            {
                "delay_seconds": 0,
                "target": {"type": "python", "handler": "fail"},
                "retry": {"max_attempts": 1},
            },
        )
        assert status == 201, job
        jobs.append(job["id"])

    def dead() -> Any:
        found = {o["schedule_id"]: o for o in call(cloud, "GET", "/dead-letters")[1]["items"]}
        return [found[j] for j in jobs] if all(j in found for j in jobs) else None

    first, second = wait_for(dead)
    sign_in(page, cloud, KEY)
    page.get_by_role("link", name="Dead letters").click()
    expect(page.locator(f"tr[data-id='{first['id']}']")).to_contain_text("error")
    shot(page, "dead-letters")

    # WHEN the first is redriven from its row, after a confirmation
    page.locator(f"tr[data-id='{first['id']}']").get_by_role("button", name="Redrive").click()
    confirm(page, "Redrive")
    expect(page.get_by_role("status")).to_contain_text("Redrove")

    # AND the second is selected and the selection redriven
    page.locator(f"tr[data-id='{second['id']}']").get_by_role("checkbox").check()
    page.get_by_role("button", name="Redrive selected (1)").click()
    confirm(page, "Redrive 1")
    expect(page.get_by_role("status")).to_contain_text("Redrove 1 of 1")
    # the jobs page lists them with their attempts and exit reasons
    page.get_by_role("link", name="Jobs").click()
    expect(page.locator("tbody tr").filter(has_text=first["schedule_id"])).to_be_visible()
    shot(page, "jobs")

    # THEN each was queued again and ran again (a new start), its attempts from zero
    def ran_again(letter: dict[str, Any]) -> Any:
        occurrence = call(cloud, "GET", f"/jobs/{letter['schedule_id']}")[1]["occurrence"]
        again = occurrence["exit_reason"] == "redriven" or (
            occurrence["started_at"] != letter["started_at"]
        )
        return again and occurrence["attempts"] <= 1

    assert wait_for(lambda: ran_again(first)) and wait_for(lambda: ran_again(second))


def test_a_workflow_run_is_drawn_as_a_graph_with_its_states(cloud: LocalCloud, page: Any) -> None:
    # GIVEN a workflow whose middle node fails: its descendants are blocked
    fail = {"type": "python", "handler": "fail"}
    echo = {"type": "python", "handler": "echo"}
    status, _ = call(
        cloud,
        "PUT",
        "/workflows/console-fails",
        {
            "nodes": [
                {"id": "fetch", "target": echo, "job_class": "short"},
                {
                    "id": "parse",
                    "target": fail,
                    "job_class": "short",
                    "retry": {"max_attempts": 1},
                },
                {"id": "store", "target": echo, "job_class": "short"},
                {"id": "report", "target": echo, "job_class": "short"},
            ],
            "edges": [["fetch", "parse"], ["parse", "store"], ["fetch", "report"]],
        },
    )
    assert status == 201
    status, run = call(cloud, "POST", "/workflows/console-fails/runs")
    assert status == 202, run
    wait_for(lambda: call(cloud, "GET", f"/runs/{run['run_id']}")[1]["state"] == "failed")

    # WHEN tenant A opens the run from the workflow's page
    sign_in(page, cloud, KEY)
    page.get_by_role("link", name="Workflows").click()
    page.get_by_role("link", name="console-fails").click()
    expect(page.get_by_role("link", name=run["run_id"])).to_be_visible()
    shot(page, "workflow")
    page.get_by_role("link", name=run["run_id"]).click()

    # THEN the graph shows each node in its state, laid out in layers
    graph = page.locator("#dag")
    expect(graph).to_be_visible()
    states = {"fetch": "succeeded", "parse": "failed", "store": "blocked", "report": "succeeded"}
    for node, state in states.items():
        expect(graph.locator(f"g[data-node='{node}']")).to_have_attribute("data-state", state)
    x = {
        n: float(graph.locator(f"g[data-node='{n}']").get_attribute("transform")[10:].split(",")[0])
        for n in states
    }
    assert x["fetch"] < x["parse"] < x["store"] and x["report"] == x["parse"]
    # AND the failed node with its error, and "retry failed" offered
    expect(page.locator("#h-failed + div")).to_contain_text("parse")
    expect(page.get_by_role("button", name="Retry failed")).to_be_visible()
    shot(page, "run")


def test_tenant_b_never_sees_tenant_a(cloud: LocalCloud, page: Any) -> None:
    # GIVEN a schedule of tenant A
    schedule_id = schedule_with(cloud, "noop")

    # WHEN tenant B signs in
    sign_in(page, cloud, OTHER_KEY)
    expect(page.locator("#tenant-name")).to_have_text("tenant-b")
    page.get_by_role("link", name="Schedules").click()

    # THEN none of tenant A's schedules are listed, nor its workflows, nor its schedule page
    expect(page.get_by_text("No schedule matches.")).to_be_visible()
    page.get_by_role("link", name="Workflows").click()
    expect(page.get_by_text("No workflow registered.")).to_be_visible()
    page.goto(f"{cloud.api_url}/console#/schedules/{schedule_id}")
    expect(page.get_by_role("alert")).to_contain_text("Could not load this page")
    # and naming tenant A in the request changes nothing for a tenant's key
    status, listed = call(cloud, "GET", "/schedules?tenant=tenant-a", key=OTHER_KEY)
    assert status == 200 and listed["items"] == []
    shot(page, "tenant-b")


def test_an_operator_reads_every_tenant_and_writes_nothing(cloud: LocalCloud, page: Any) -> None:
    # GIVEN a schedule of tenant A
    schedule_id = schedule_with(cloud, "noop")

    # WHEN an operator signs in and picks tenant A
    sign_in(page, cloud, OPERATOR_KEY)
    picker = page.get_by_label("Tenant", exact=True)
    expect(picker).to_be_visible()
    picker.select_option("tenant-a")
    # (its overview shows the deployment's class queues, every tenant's messages)
    queues = page.get_by_role("heading", name="Deployment queues (every tenant)")
    expect(queues).to_be_visible()
    page.get_by_role("link", name="Schedules").click()

    # THEN tenant A's schedules are there, read-only: no action is offered
    expect(page.locator(f"tr[data-id='{schedule_id}']")).to_be_visible()
    page.goto(f"{cloud.api_url}/console#/schedules/{schedule_id}")
    expect(page.get_by_role("heading", level=1)).to_contain_text(schedule_id)
    expect(page.get_by_role("columnheader", name="In UTC")).to_be_visible()
    expect(page.get_by_text("No occurrence yet.")).to_be_visible()
    expect(page.get_by_role("button", name="Pause")).to_have_count(0)
    shot(page, "operator")

    # AND its key cannot write, whatever the request names
    for method, path in [
        ("POST", f"/schedules/{schedule_id}/pause"),
        ("POST", f"/schedules/{schedule_id}/pause?tenant=tenant-a"),
        ("DELETE", f"/schedules/{schedule_id}?tenant=tenant-a"),
        ("POST", "/schedules"),
    ]:
        status, body = call(cloud, method, path, key=OPERATOR_KEY)
        assert status == 403 and body["error"]["type"] == "forbidden", (method, path, body)
    assert call(cloud, "GET", f"/schedules/{schedule_id}")[1]["state"] == "active"
    # a tenant's key is not an operator's: it lists no tenants
    assert call(cloud, "GET", "/tenants", key=KEY)[0] == 403
    assert set(call(cloud, "GET", "/tenants", key=OPERATOR_KEY)[1]["items"]) >= {
        "tenant-a",
        "tenant-b",
    }


def test_a_large_run_is_counted_by_state_and_drawn_around_its_failure(
    cloud: LocalCloud, page: Any
) -> None:
    # GIVEN a run of 201 nodes whose root fails: its 200 children are blocked
    leaves = [f"leaf{i:03d}" for i in range(200)]
    echo = {"type": "python", "handler": "echo"}
    status, _ = call(
        cloud,
        "PUT",
        "/workflows/console-wide",
        {
            "nodes": [
                {
                    "id": "root",
                    "target": {"type": "python", "handler": "fail"},
                    "job_class": "short",
                    "retry": {"max_attempts": 1},
                },
                *({"id": leaf, "target": echo, "job_class": "short"} for leaf in leaves),
            ],
            "edges": [["root", leaf] for leaf in leaves],
        },
    )
    assert status == 201
    status, run = call(cloud, "POST", "/workflows/console-wide/runs")
    assert status == 202, run
    wait_for(lambda: call(cloud, "GET", f"/runs/{run['run_id']}")[1]["state"] == "failed")

    # WHEN tenant A opens it
    sign_in(page, cloud, KEY)
    page.goto(f"{cloud.api_url}/console#/runs/{run['run_id']}")

    # THEN every node is counted by state, and 150 are drawn, the failure first
    expect(
        page.get_by_role("list", name="nodes by state").locator("[data-state='blocked']")
    ).to_have_text("200")
    expect(page.get_by_text("A large run: 150 of 201 nodes drawn", exact=False)).to_be_visible()
    graph = page.locator("#dag")
    expect(graph.locator("g[data-node]")).to_have_count(150)
    expect(graph.locator("g[data-node='root']")).to_have_attribute("data-state", "failed")
    expect(graph.locator("g[data-state='blocked']")).to_have_count(149)
    shot(page, "run-large")
