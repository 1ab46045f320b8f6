"""The console's views a newcomer found wrong, in a real browser (headless Chromium,
driven by Playwright) against a local cloud of their own: a workflow node's dead letters,
the overview's counts, the icon, an unknown route, the operator's first page and a chart
with nothing to plot. Each test leaves a screenshot of its view in .test-output/console/
(the documentation's, docs/console/, are copied from there)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fireline.local.cloud import LocalCloud, LocalOptions
from helpers import browser
from helpers.browser import CHROMIUM, SHOTS, WAIT_MS
from helpers.local_cloud import KEY, OTHER_KEY, TEST_KEYS, call, wait_for

OPERATOR_KEY = "test-operator-key-0002"
# A tenant with a key and nothing else: nothing has fired for it.
EMPTY_KEY = "test-key-tenant-empty"

sync_api = browser.playwright()
expect = sync_api.expect


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    options = LocalOptions(
        api_port=0,
        api_keys={**TEST_KEYS, EMPTY_KEY: "tenant-empty"},
        log_path=tmp_path_factory.mktemp("console-views") / "local.log",
    )
    with LocalCloud(options) as started:
        started.key_admin().create("operators", api_key=OPERATOR_KEY, operator=True)
        yield started


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    playwright = sync_api.sync_playwright().start()
    try:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield launched
        launched.close()
    finally:
        playwright.stop()


class Watched:
    """A page with what went wrong on it: script errors, and messages the browser logged
    as errors (a failed request for the icon is one)."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.script_errors: list[str] = []
        self.logged_errors: list[str] = []
        page.on("pageerror", lambda error: self.script_errors.append(str(error)))
        page.on(
            "console",
            lambda message: (
                self.logged_errors.append(f"{message.text} {message.location}")
                if message.type == "error"
                else None
            ),
        )


@pytest.fixture
def watched(browser: Any) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(WAIT_MS)
    seen = Watched(context.new_page())
    yield seen
    context.close()
    assert not seen.script_errors, seen.script_errors


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def sign_in(page: Any, cloud: LocalCloud, key: str, route: str = "") -> None:
    page.goto(f"{cloud.api_url}/console{route}")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()


@pytest.fixture(scope="module")
def node_died_twice(cloud: LocalCloud) -> dict[str, Any]:
    """A run of tenant A whose node "validate" failed its only attempt, then again when
    the run's failed nodes were retried: two dead letters of one node."""
    status, _ = call(
        cloud,
        "PUT",
        "/workflows/console-dead-node",
        {
            "nodes": [
                {"id": "extract", "target": {"type": "python", "handler": "echo"}},
                {
                    "id": "validate",
                    "target": {"type": "python", "handler": "fail"},
                    "retry": {"max_attempts": 1},
                },
            ],
            "edges": [["extract", "validate"]],
        },
    )
    assert status == 201
    status, run = call(cloud, "POST", "/workflows/console-dead-node/runs")
    assert status == 202, run
    run_id = run["run_id"]
    state = lambda: call(cloud, "GET", f"/runs/{run_id}")[1]["state"]  # noqa: E731
    wait_for(lambda: state() == "failed")
    assert call(cloud, "POST", f"/runs/{run_id}/retry")[0] == 202
    dead = lambda: [  # noqa: E731
        d for d in call(cloud, "GET", "/dead-letters")[1]["items"] if d["run_id"] == run_id
    ]
    letters = wait_for(lambda: len(dead()) == 2 and dead())
    wait_for(lambda: state() == "failed")
    return {"run_id": run_id, "letters": letters}


def test_a_nodes_dead_letters_link_to_its_run_and_node(
    cloud: LocalCloud, watched: Watched, node_died_twice: dict[str, Any]
) -> None:
    page, run_id = watched.page, node_died_twice["run_id"]
    # WHEN tenant A opens its dead letters
    sign_in(page, cloud, KEY, "#/dead-letters")

    # THEN each of the node's two rows names the node, its run and its generation
    rows = page.locator("tbody tr").filter(has_text="validate")
    expect(rows).to_have_count(2)
    for generation in (1, 2):
        row = rows.filter(has_text=f"generation {generation}")
        expect(row).to_have_count(1)
        expect(row).to_contain_text(run_id)
        link = row.get_by_role("link", name="validate")
        expect(link).to_have_attribute("href", f"#/runs/{run_id}/nodes/validate")
    shot(page, "dead-letters-of-a-node")

    # WHEN the link of one is followed
    rows.first.get_by_role("link", name="validate").click()

    # THEN the run's page opens on the node: its state, both dead letters, drawn picked
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Run {run_id}")
    node = page.get_by_role("region", name="Node validate")
    expect(node).to_contain_text("failed")
    expect(node.locator("tbody tr")).to_have_count(2)
    expect(node).to_contain_text("generation 2")
    picked = page.locator("#dag g[data-node='validate']")
    expect(picked).to_have_class(re.compile(r"\bpicked\b"))
    expect(page.locator("#dag g.picked")).to_have_count(1)
    shot(page, "run-on-a-node")


def test_the_overviews_counts_say_what_each_counts(
    cloud: LocalCloud, watched: Watched, node_died_twice: dict[str, Any]
) -> None:
    page = watched.page
    # GIVEN tenant A's dead letters: the node's two, of no schedule or job
    by_source = call(cloud, "GET", "/overview")[1]["dead_letters_by_source"]
    assert by_source["workflow nodes"] >= 2

    # WHEN tenant A reads the overview
    sign_in(page, cloud, KEY)

    # THEN the occurrence counts say they are schedules' and jobs' of the last hour
    expect(page.get_by_role("heading", name="Occurrences of schedules and jobs")).to_be_visible()
    # AND the dead letters say what they are of, adding up to the figure shown
    total = page.locator("#dead-count")
    expect(total).to_have_text(re.compile(r"^\d+$"))
    sources = page.get_by_role("list", name="dead letters by source")
    expect(sources).to_contain_text(f"{by_source['workflow nodes']} of workflow nodes")
    counted = [int(n) for n in sources.locator("[data-count]").all_inner_texts()]
    assert sum(counted) == int(total.inner_text())
    shot(page, "overview-counts")


def test_the_icon_is_served_without_a_key_and_no_page_logs_an_error(
    cloud: LocalCloud, watched: Watched
) -> None:
    page = watched.page
    # WHEN the console is opened, signed in and out of
    sign_in(page, cloud, KEY)
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    page.get_by_role("link", name="Jobs").click()
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()

    # THEN the icon the page names, and the one browsers ask the origin for, are served
    # without a key, and the browser logged no error on the way
    assert page.locator("link[rel='icon']").get_attribute("href") == "console/favicon.svg"
    for path in ("/console/favicon.svg", "/favicon.ico"):
        answer = page.request.get(f"{cloud.api_url}{path}")
        assert (answer.status, answer.headers["content-type"]) == (200, "image/svg+xml"), path
    assert not watched.logged_errors, watched.logged_errors


@pytest.mark.parametrize("route", ["#/nowhere", "#/schedules/wf.run_1.validate", "#/jobs/x/y"])
def test_an_unknown_route_gets_a_not_found_page(
    cloud: LocalCloud, watched: Watched, route: str
) -> None:
    page = watched.page
    # WHEN a signed-in tenant opens a route the console has no page for
    sign_in(page, cloud, KEY, route)

    # THEN it says so, with the way back, instead of showing another page
    expect(page.get_by_role("heading", level=1)).to_have_text("Page not found")
    expect(page.get_by_role("heading", name="Overview")).to_have_count(0)
    page.get_by_role("link", name="Go to the overview").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    if route == "#/nowhere":
        page.goto(f"{cloud.api_url}/console{route}")
        expect(page.get_by_role("heading", level=1)).to_have_text("Page not found")
        shot(page, "not-found")


def test_an_operator_picks_the_tenant_before_any_page(cloud: LocalCloud, watched: Watched) -> None:
    page = watched.page
    # GIVEN a schedule of tenant A
    status, made = call(
        cloud,
        "POST",
        "/schedules",
        {"spec": "every day at 9am", "target": {"type": "python", "handler": "noop"}},
    )
    assert status == 201, made

    # WHEN an operator signs in
    sign_in(page, cloud, OPERATOR_KEY, "#/schedules")

    # THEN it is asked which tenant to read, every tenant offered; no tenant's page yet
    expect(page.get_by_role("heading", level=1)).to_have_text("Pick a tenant")
    choices = page.get_by_role("list", name="tenants")
    for tenant in ("tenant-a", "tenant-b", "tenant-empty"):
        expect(choices.get_by_role("button", name=tenant, exact=True)).to_be_visible()
    expect(page.get_by_label("Tenant", exact=True)).to_have_value("")
    shot(page, "operator-picks-a-tenant")

    # WHEN it picks tenant A THEN the page it asked for opens on tenant A's schedules
    choices.get_by_role("button", name="tenant-a", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Schedules")
    expect(page.locator(f"tr[data-id='{made['id']}']")).to_be_visible()
    expect(page.get_by_label("Tenant", exact=True)).to_have_value("tenant-a")


def test_a_chart_with_nothing_to_plot_says_no_data(cloud: LocalCloud, watched: Watched) -> None:
    page = watched.page
    # WHEN a tenant that never fired anything reads its overview
    sign_in(page, cloud, EMPTY_KEY)

    # THEN the lag chart says it has no data, with no made-up scale on its axis
    chart = page.get_by_role("img", name="Lag per minute", exact=False)
    expect(chart).to_contain_text("no data")
    labels = chart.locator("text").all_text_contents()
    assert not [t for t in labels if t.endswith(" ms") or t.endswith(" s")], labels
    shot(page, "overview-no-data")


def test_tenant_b_is_not_shown_tenant_as_node_letters(
    cloud: LocalCloud, watched: Watched, node_died_twice: dict[str, Any]
) -> None:
    page = watched.page
    # WHEN tenant B follows a link to tenant A's node
    sign_in(page, cloud, OTHER_KEY, f"#/runs/{node_died_twice['run_id']}/nodes/validate")
    # THEN the page cannot be read, and names nothing of tenant A's
    expect(page.get_by_role("alert")).to_contain_text("Could not load this page")
    expect(page.get_by_text("generation 1")).to_have_count(0)


def test_a_backfill_started_from_a_schedules_page_runs_its_fires_and_shows_progress(
    cloud: LocalCloud, watched: Watched
) -> None:
    # GIVEN an hourly schedule and the three whole hours before now
    status, created = call(
        cloud,
        "POST",
        "/schedules",
        {"spec": "rate(1 hour)", "target": {"type": "python", "handler": "echo"}},
    )
    assert status == 201, created
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = hour - timedelta(hours=3)
    page = watched.page
    sign_in(page, cloud, KEY, f"#/schedules/{created['id']}")
    # WHEN the tenant backfills them with the schedule page's button
    page.get_by_role("button", name="Backfill…").click()
    page.get_by_label("From (UTC)").fill(start.strftime("%Y-%m-%dT%H:%M:%S"))
    page.get_by_label("To (UTC)").fill(hour.strftime("%Y-%m-%dT%H:%M:%S"))
    page.get_by_role("button", name="Start backfill").click()
    # THEN the dialog says three were created, and the three fires run, each once
    progress = page.get_by_role("dialog", name="Backfill").get_by_role("status")
    expect(progress).to_contain_text("3: 3 created, 0 existed")

    def ran() -> Any:
        path = f"/schedules/{created['id']}/occurrences?state=succeeded"
        items = call(cloud, "GET", path)[1]["items"]
        return items if len(items) == 3 else None

    done = wait_for(ran, timeout=90)
    assert {(o["origin"], o["attempts"]) for o in done} == {("backfill", 1)}
    assert min(o["fire_time"] for o in done).startswith(start.strftime("%Y-%m-%dT%H"))
    # AND its progress, refreshed, shows them run
    page.get_by_role("button", name="Refresh").click()
    expect(progress).to_contain_text(re.compile(r"3 run, 0 in flight, 0 left"))
    shot(page, "schedule-backfill")
