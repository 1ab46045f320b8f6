"""The console's next fires: once the ticker has sent a schedule's fires ahead, and of a
schedule with an excluded day, with its skip and unskip buttons. Headless Chromium against
a local cloud of its own, as tests/browser/test_console.py drives it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fireline.local.cloud import LocalCloud, LocalOptions
from helpers import browser
from helpers.browser import CHROMIUM, SHOTS, WAIT_MS
from helpers.local_cloud import KEY, TEST_KEYS, call, wait_for

sync_api = browser.playwright()
expect = sync_api.expect


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    options = LocalOptions(
        api_port=0,
        api_keys=dict(TEST_KEYS),
        log_path=tmp_path_factory.mktemp("console-next-fire") / "local.log",
    )
    with LocalCloud(options) as started:
        yield started


@pytest.fixture
def page(cloud: LocalCloud) -> Iterator[Any]:
    playwright = sync_api.sync_playwright().start()
    try:
        # As root (CI) Chromium's sandbox cannot start: the pages are this test's own.
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        context = browser.new_context(viewport={"width": 1366, "height": 860})
        context.set_default_timeout(WAIT_MS)
        opened = context.new_page()
        problems: list[str] = []
        opened.on("pageerror", lambda error: problems.append(str(error)))
        yield opened
        browser.close()
        assert not problems, problems
    finally:
        playwright.stop()


def sent_ahead_every_10_seconds(cloud: LocalCloud) -> str:
    """An every-10-second schedule whose next 20 fires the ticker has sent ahead."""
    target = {"type": "python", "handler": "noop"}
    status, made = call(cloud, "POST", "/schedules", {"spec": "rate(10 seconds)", "target": target})
    assert status == 201, made
    path = f"/schedules/{made['id']}/preview?count=20"

    def all_sent() -> bool:
        status, preview = call(cloud, "GET", path)
        return status == 200 and all(f["queued"] and f["sent_at"] for f in preview["fires"])

    wait_for(all_sent)
    return str(made["id"])


def shown_instant(text: str) -> datetime:
    """An instant as the console writes it: 2026-05-01 12:00:10Z."""
    return datetime.fromisoformat(text.strip().split(" (")[0].replace(" ", "T").replace("Z", ""))


def test_the_console_shows_the_next_fire_of_a_schedule_sent_ahead(
    cloud: LocalCloud, page: Any
) -> None:
    # GIVEN an every-10-second schedule whose fires the ticker sent minutes ahead
    schedule_id = sent_ahead_every_10_seconds(cloud)
    # WHEN its page is opened in the console
    page.goto(f"{cloud.api_url}/console")
    page.get_by_label("API key").fill(KEY)
    page.get_by_role("button", name="Sign in").click()
    opened = datetime.now(UTC).replace(tzinfo=None)
    page.goto(f"{cloud.api_url}/console#/schedules/{schedule_id}")
    next_fire = page.locator("dt:text-is('Next fire') + dd")
    expect(next_fire).to_contain_text("Z")
    drawn = datetime.now(UTC).replace(tzinfo=None)
    # THEN its next fire is within 10 seconds
    shown = shown_instant(next_fire.inner_text())
    assert opened - timedelta(seconds=1) < shown <= drawn + timedelta(seconds=10), shown
    # AND the preview marks the fires sent ahead as queued, with their send time
    queued = page.locator("td", has_text="sent ")
    expect(queued.first).to_be_visible()
    assert queued.count() == 20
    # AND the schedules list shows the same next fire first
    page.get_by_role("link", name="Schedules", exact=True).click()
    first = page.locator(f"tr[data-id='{schedule_id}'] td.next div").first
    expect(first).to_contain_text("Z")
    listed = shown_instant(first.inner_text())
    assert (
        opened - timedelta(seconds=1)
        < listed
        <= datetime.now(UTC).replace(tzinfo=None) + timedelta(seconds=10)
    ), listed
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "schedules-next-fire.png"), full_page=True)


def test_the_preview_marks_excluded_fires_and_skips_and_unskips_one(
    cloud: LocalCloud, page: Any
) -> None:
    # GIVEN a daily 09:00 UTC schedule excluding the day after tomorrow
    excluded = (datetime.now(UTC) + timedelta(days=2)).date().isoformat()
    body = {
        "spec": "cron(0 9 * * *)",
        "target": {"type": "python", "handler": "noop"},
        "exclude": [excluded],
    }
    status, made = call(cloud, "POST", "/schedules", body)
    assert status == 201, made
    # WHEN its page is opened in the console
    page.goto(f"{cloud.api_url}/console")
    page.get_by_label("API key").fill(KEY)
    page.get_by_role("button", name="Sign in").click()
    page.goto(f"{cloud.api_url}/console#/schedules/{made['id']}")
    # THEN the excluded fire is listed among the next fires, marked excluded
    marked = page.locator("tr[data-excluded='excluded']")
    expect(marked).to_have_count(1)
    expect(marked).to_contain_text(excluded)
    # WHEN the first upcoming fire's Skip button is clicked
    rows = page.locator("tr:has(button.skip)")
    first = rows.first
    fire = first.locator("td").nth(1).inner_text().strip()
    first.get_by_role("button", name="Skip").dispatch_event("click")
    # THEN the row is marked skipped, and the API holds the skip in a new version
    skipped = page.locator("tr[data-excluded='skipped']")
    expect(skipped).to_have_count(1)
    status, now_held = call(cloud, "GET", f"/schedules/{made['id']}")
    assert status == 200 and len(now_held["skipped_fires"]) == 1
    assert now_held["version"] == made["version"] + 1
    assert now_held["skipped_fires"][0][:16] == fire.replace(" ", "T")[:16]
    # WHEN its Unskip button is clicked
    skipped.get_by_role("button", name="Unskip").dispatch_event("click")
    # THEN no fire is skipped any more
    expect(page.locator("tr[data-excluded='skipped']")).to_have_count(0)
    status, back = call(cloud, "GET", f"/schedules/{made['id']}")
    assert status == 200 and back["skipped_fires"] == []
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "schedule-exclusions.png"), full_page=True)
