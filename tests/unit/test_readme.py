"""The README as a front door, and the figures the documentation states that the code
decides: they must be the code's."""

from __future__ import annotations

import re

from samtranslator.yaml_helper import yaml_parse

from fireline import webhooks
from fireline.api import models
from fireline.domain import model, signing
from fireline.services import keys
from fireline_cdk import PROP_PARAMETERS
from helpers import docs

README = docs.README
# The README is the front door: what Fireline is, the two commands, the quick start and the
# documentation's contents; everything else lives in docs/.
README_MOST_LINES = 300


def number(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_default_deadlines_in_the_readme_are_the_ones_the_worker_uses() -> None:
    # GIVEN the Workers page's sentence on default deadlines
    found = re.search(
        r"its `deadline_seconds`, else ([\d,]+) s \(`short`\), ([\d,]+) s \(`default`\) or\s+"
        r"([\d,]+) s \(`long`\)",
        docs.page("workers.md"),
    )
    assert found is not None, "docs/workers.md no longer states the default deadlines"
    # THEN each figure is the class's default deadline in the code
    stated = dict(zip(("short", "default", "long"), map(number, found.groups()), strict=True))
    assert stated == {c: model.deadline_for(c, None) for c in model.JOB_CLASSES}


def test_the_deploy_tables_defaults_and_props_are_the_templates_and_the_constructs() -> None:
    # GIVEN the Deploy page's rows that name template parameters and their defaults
    template = docs.ROOT / "infra" / "template.yaml"
    declared = yaml_parse(template.read_text())["Parameters"]
    rows = re.findall(
        r"^\| (`[A-Z]\w*`(?:, `\w+`)*) \| (.+?) \| (.+?) \|", docs.page("deploy.md"), re.M
    )
    stated: dict[str, str] = {}
    props: set[str] = set()
    for names, prop_cell, defaults in rows:
        parameters = re.findall(r"`(\w+)`", names)
        props.update(re.findall(r"`(\w+)[`=(]", prop_cell))
        figures = re.findall(r"[\d,]+", defaults)
        if len(figures) == len(parameters):
            stated.update(zip(parameters, (number(f) for f in figures), strict=True))
    assert {"TickerGroups", "TickerMemorySize", "LookaheadSeconds"} <= set(stated)

    # THEN each stated default is the template's, and every prop of the construct is listed
    assert stated == {name: number(str(declared[name]["Default"])) for name in stated}
    top_level_props = {prop.split(".")[0] for prop in PROP_PARAMETERS}
    assert top_level_props - props == set()


def test_the_json_depth_limit_in_the_readme_is_the_one_the_api_applies() -> None:
    found = re.search(r"nested at most \*\*(\d+) levels\*\*", docs.page("api.md"))
    assert found is not None, "docs/api.md no longer states the nesting limit"
    assert int(found.group(1)) == models.MAX_JSON_DEPTH


def test_the_signing_figures_in_the_readme_are_the_codes() -> None:
    text = " ".join(docs.page("quotas-and-keys.md").split())
    found = re.search(
        r"The \*\*replay window\*\* is (\d+) s either side.*?the overlap, \*\*(\d+) h by "
        r"default\*\* and never less than the workers' (\d+) s cache",
        text,
    )
    assert found is not None, "docs/quotas-and-keys.md no longer states the signing figures"
    window, overlap_hours, cache = map(int, found.groups())
    assert window == webhooks.DEFAULT_TOLERANCE_SECONDS
    assert overlap_hours * 3600 == signing.DEFAULT_OVERLAP_SECONDS
    assert cache == keys.DEFAULT_CACHE_SECONDS
    stated = re.search(r"keep a tenant's keys cached for (\d+) s", text)
    assert stated is not None and int(stated.group(1)) == keys.DEFAULT_CACHE_SECONDS


# --- the README as a front door --------------------------------------------------------------


def test_the_readme_is_a_front_door_of_at_most_300_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MOST_LINES, f"the README has {len(lines)} lines"


def test_the_readme_opens_with_the_contract_then_the_two_commands() -> None:
    # GIVEN the README's text before its quick start
    text = README.read_text()
    opening = text.split("## Quick start", 1)[0]
    # THEN it states the delivery contract, never exactly-once execution as a promise
    flat = " ".join(opening.split())
    assert "At-least-once execution, exactly-once claim, idempotent handlers." in flat
    assert flat.count("exactly-once execution") == flat.count(
        "never promises exactly-once execution"
    )
    # AND its first example is the two commands, make run first
    first = docs.fenced(text, "sh")[0].splitlines()
    assert [line.split()[:2] for line in first] == [["make", "run"], ["make", "test"]]


def test_the_readme_states_the_measured_first_make_run() -> None:
    flat = " ".join(README.read_text().split())
    found = re.search(r"The first `make run` on a fresh clone took \*\*(\d+) s\*\*", flat)
    assert found is not None, "the README no longer states the first make run's time"
    assert "2 cores" in flat[found.start() : found.start() + 600]


def test_the_readmes_contents_list_every_page_and_each_link_is_a_page() -> None:
    # GIVEN the README's links into docs/
    linked = set(re.findall(r"\]\(docs/([\w/.-]+\.md)\)", README.read_text()))
    # THEN each is a page of the site, and every written page but the quick start (the
    # README's own section) is listed
    written = {str(p.relative_to(docs.DOCS)) for p in docs.written_pages()}
    assert linked - written == set()
    assert written - linked == {"quick-start.md"}
