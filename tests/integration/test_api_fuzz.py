"""Schemathesis over the local cloud's API, as a client sees it: the document served at
/openapi.json turned into requests (its examples, the coverage of each parameter's edges,
random valid and invalid data, and sequences that follow the document's links: create a
schedule, then read, replace, pause, trigger and delete it), every answer held to every
check. The run is bounded (examples per operation, steps per sequence) and seeded, so it
stays short and repeatable; its figures are printed.

Every failure schemathesis reports is a defect of the document or of the API:
tests/integration/test_api_document.py reproduces those it found, one test each.
"""

from __future__ import annotations

import collections
import itertools
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from schemathesis import engine
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events
from schemathesis.engine.run import INTERNAL_PHASES, PhaseName

from fireline.api import document
from fireline.api.app import IDEMPOTENCY_KEY
from fireline.local.cloud import LocalCloud, LocalOptions
from helpers.local_cloud import KEY, TEST_KEYS, call

EXAMPLES_PER_OPERATION = 3
SEQUENCES = 20
STEPS_PER_SEQUENCE = 10
SEED = 20260501
# Statuses a request the document calls valid may still get. A JSON Schema cannot say
# everything the API checks: that a cursor is one this API returned, a schedule spec's
# grammar, a time zone's name, a workflow target that exists, and the rules across fields
# (exactly one of run_at and delay_seconds, of nodes and upload_id; cap_seconds at least
# base_seconds; start before end). Those are refused with a 400 or a 422 naming the field,
# which test_api_input.py and test_api.py assert; the check still fails on anything else
# (a 405, 413, 415, or a 5xx, which not_a_server_error fails on too).
VALID_BUT_REFUSED = ["2xx", "400", "401", "403", "404", "409", "422", "429"]
# The coverage phase (each parameter's and each body field's edges, valid and invalid) is
# left out for the four operations whose bodies are large: it would make over half of the
# run's requests, and so of its time. Their bodies are still sent as examples, fuzzed
# (valid and invalid) and used in sequences; the edges of their fields are asserted by
# test_api_input.py.
LARGE_BODIES = ["POST /schedules", "PUT /schedules/{schedule_id}", "POST /jobs"]
LARGE_BODIES += ["PUT /workflows/{workflow_id}"]


def _one_key_per_request() -> Callable[[Any, dict[str, str] | None], dict[str, str] | None]:
    """A hook that makes every valid generated Idempotency-Key a key of its own.

    A create sent again with the same key and body answers the first create for 24 hours
    (the document says so), even once a later step deleted what it made. Generation repeats
    key values across sequences, and how many sequences run varies with the machine's
    speed, so a replayed id's 404 after a delete read as a lost resource in some runs only.
    Keyed retries are asserted by test_api.py; here each valid key gets a unique suffix
    (invalid ones are left as drawn, to be refused)."""
    drawn = itertools.count()

    def fresh_key(context: Any, headers: dict[str, str] | None) -> dict[str, str] | None:
        key = (headers or {}).get("Idempotency-Key")
        if headers is not None and key is not None and IDEMPOTENCY_KEY.match(key):
            headers["Idempotency-Key"] = f"{key[:100]}-{next(drawn)}"
        return headers

    return fresh_key


@dataclass
class Outcome:
    operations: int = 0
    cases: collections.Counter[str] = field(default_factory=collections.Counter)
    scenarios: collections.Counter[str] = field(default_factory=collections.Counter)
    linked_steps: int = 0
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCloud]:
    options = LocalOptions(
        api_port=0,
        api_keys=dict(TEST_KEYS),
        log_path=tmp_path_factory.mktemp("fuzz") / "local.log",
        # The usage plan is not under test here: a limit reached would turn answers to 429.
        parameters={"UsagePlanRateLimit": "10000", "UsagePlanBurstLimit": "10000"},
    )
    with LocalCloud(options) as started:
        yield started


@pytest.fixture(scope="module")
def outcome(cloud: LocalCloud) -> Outcome:
    status, described = call(cloud, "GET", "/openapi.json", key=None)
    assert status == 200
    config = SchemathesisConfig.from_dict(
        {
            "seed": SEED,
            "base-url": cloud.api_url,
            "request-timeout": 30,
            "auth": {"openapi": {document.SECURITY_SCHEME: {"api_key": KEY}}},
            "generation": {
                "max-examples": EXAMPLES_PER_OPERATION,
                "deterministic": True,
                "database": "none",
            },
            "phases": {
                "stateful": {
                    "max-steps": STEPS_PER_SEQUENCE,
                    "generation": {"max-examples": SEQUENCES},
                }
            },
            "operations": [
                {"include-name": LARGE_BODIES, "phases": {"coverage": {"enabled": False}}}
            ],
            "checks": {
                "enabled": True,
                "positive_data_acceptance": {"expected-statuses": VALID_BUT_REFUSED},
                # A create sent again with the same Idempotency-Key and body answers the
                # first create for 24 hours (the document says so), even once a later step
                # deleted what it made; deterministic generation repeats key values across
                # sequences, and this check reads that replayed id's 404 as a lost resource.
                "ensure_resource_availability": {"enabled": True},
            },
        }
    )
    schema = schemathesis.openapi.from_dict(described, config=config)
    schema.hook("map_headers")(_one_key_per_request())
    found = Outcome(operations=sum(1 for _ in schema.get_all_operations()))
    started = 0.0
    for event in engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            found.scenarios[event.phase.value] += 1
            found.cases[event.phase.value] += len(event.recorder.cases)
            if event.phase is PhaseName.STATEFUL_TESTING:
                found.linked_steps += sum(
                    1 for node in event.recorder.cases.values() if node.transition is not None
                )
            for checks in event.recorder.checks.values():
                for check in checks:
                    if check.failure_info is not None:
                        failure = check.failure_info.failure
                        found.failures.append(
                            f"{check.name} {event.recorder.label}: {failure.title}\n"
                            f"{failure.message}\n{check.failure_info.code_sample}"
                        )
        elif isinstance(event, events.PhaseStarted):
            started = event.timestamp
        elif isinstance(event, events.PhaseFinished) and event.phase.name not in INTERNAL_PHASES:
            found.seconds[event.phase.name.value] = round(event.timestamp - started, 1)
        elif isinstance(event, events.NonFatalError):
            found.errors.append(f"{event.label}: {event.value}")
        elif isinstance(event, events.FatalError):
            raise event.exception
    print(
        f"\nschemathesis: {found.operations} operations, "
        f"{sum(found.cases.values())} cases {dict(found.cases)}, "
        f"{sum(found.scenarios.values())} scenarios {dict(found.scenarios)} "
        f"({found.scenarios['stateful']} stateful, {found.linked_steps} steps by a link), "
        f"{len(found.failures)} failures, {len(found.errors)} errors; seconds {found.seconds}"
    )
    return found


def test_every_check_passes_on_every_operation(outcome: Outcome) -> None:
    assert outcome.errors == []
    assert outcome.failures == [], "\n\n".join(outcome.failures[:10])


def test_every_operation_of_the_document_was_called(outcome: Outcome) -> None:
    assert outcome.operations >= 25
    assert outcome.scenarios["examples"] == outcome.operations
    assert outcome.scenarios["fuzzing"] == outcome.operations


def test_sequences_follow_the_documents_links(outcome: Outcome) -> None:
    # a created schedule, job, workflow or run was then used by the operations it links to
    assert outcome.scenarios["stateful"] > 0
    assert outcome.linked_steps > 0


def test_the_swagger_page_is_served_without_a_key_and_without_a_cdn(cloud: LocalCloud) -> None:
    # WHEN the page is asked for without a key
    with urllib.request.urlopen(cloud.api_url + "/docs", timeout=30) as response:
        status, kind, page = response.status, response.headers["Content-Type"], response.read()
    # THEN it is Swagger UI with its script, styles and the document inline: it needs
    # nothing from the internet
    assert (status, kind) == (200, "text/html")
    assert b"SwaggerUIBundle" in page and b'"/schedules/{schedule_id}"' in page
    assert b"<script src=" not in page and b"<link rel=" not in page
