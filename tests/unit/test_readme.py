"""Figures the README states that the code decides: they must be the code's."""

from __future__ import annotations

import re
from pathlib import Path

from samtranslator.yaml_helper import yaml_parse

from fireline import webhooks
from fireline.api import models
from fireline.domain import model, signing
from fireline.services import keys
from fireline_cdk import PROP_PARAMETERS

README = Path(__file__).resolve().parents[2] / "README.md"


def number(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_default_deadlines_in_the_readme_are_the_ones_the_worker_uses() -> None:
    # GIVEN the README's sentence on default deadlines
    found = re.search(
        r"its `deadline_seconds`, else ([\d,]+) s \(`short`\), ([\d,]+) s \(`default`\) or\s+"
        r"([\d,]+) s \(`long`\)",
        README.read_text(),
    )
    assert found is not None, "the README no longer states the default deadlines"
    # THEN each figure is the class's default deadline in the code
    stated = dict(zip(("short", "default", "long"), map(number, found.groups()), strict=True))
    assert stated == {c: model.deadline_for(c, None) for c in model.JOB_CLASSES}


def test_the_deploy_tables_defaults_and_props_are_the_templates_and_the_constructs() -> None:
    # GIVEN the Deploy section's rows that name template parameters and their defaults
    template = README.parent / "infra" / "template.yaml"
    declared = yaml_parse(template.read_text())["Parameters"]
    rows = re.findall(
        r"^\| (`[A-Z]\w*`(?:, `\w+`)*) \| (.+?) \| (.+?) \|", README.read_text(), re.M
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
    found = re.search(r"nested at most \*\*(\d+) levels\*\*", README.read_text())
    assert found is not None, "the README no longer states the nesting limit"
    assert int(found.group(1)) == models.MAX_JSON_DEPTH


def test_the_signing_figures_in_the_readme_are_the_codes() -> None:
    text = " ".join(README.read_text().split())
    found = re.search(
        r"The \*\*replay window\*\* is (\d+) s either side.*?the overlap, \*\*(\d+) h by "
        r"default\*\* and never less than the workers' (\d+) s cache",
        text,
    )
    assert found is not None, "the README no longer states the signing figures"
    window, overlap_hours, cache = map(int, found.groups())
    assert window == webhooks.DEFAULT_TOLERANCE_SECONDS
    assert overlap_hours * 3600 == signing.DEFAULT_OVERLAP_SECONDS
    assert cache == keys.DEFAULT_CACHE_SECONDS
    stated = re.search(r"keep a tenant's keys cached for (\d+) s", text)
    assert stated is not None and int(stated.group(1)) == keys.DEFAULT_CACHE_SECONDS
