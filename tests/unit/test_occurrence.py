"""Occurrence keys and the occurrence state machine."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fireline.domain import errors, occurrence
from fireline.domain.occurrence import State

FIRE = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
CREATED = datetime(2026, 3, 1, 9, 29, 58, tzinfo=UTC)

# The legal moves, written out here rather than read from the module: a change to the
# table must be a deliberate change to this test too.
LEGAL = {
    (State.QUEUED, State.RUNNING),
    (State.QUEUED, State.CANCELLED),
    (State.QUEUED, State.SKIPPED),
    (State.RUNNING, State.RUNNING),  # a new claim after the previous claim expired
    (State.RUNNING, State.SUCCEEDED),
    (State.RUNNING, State.FAILED),
    (State.RUNNING, State.DEAD),
    (State.RUNNING, State.CANCELLED),
    (State.RUNNING, State.SKIPPED),  # a dead holder's schedule was paused meanwhile
    (State.FAILED, State.RUNNING),
    (State.FAILED, State.DEAD),
    (State.FAILED, State.CANCELLED),
    (State.FAILED, State.SKIPPED),  # a pending retry whose schedule was paused meanwhile
    (State.DEAD, State.QUEUED),  # redrive
}
ILLEGAL = sorted(set(itertools.product(State, State)) - LEGAL)

schedule_ids = st.text(min_size=1, max_size=40).filter(lambda s: "#" not in s)
versions = st.integers(min_value=1, max_value=10**12)
# Years before 1000 have no four-digit %Y; no schedule fires then.
fire_times = st.datetimes(
    min_value=datetime(1970, 1, 2),
    max_value=datetime(9000, 1, 1),
    timezones=st.timezones(),
)


def make(**changes: object) -> occurrence.Occurrence:
    fields: dict[str, object] = {
        "tenant_id": "tenant-a",
        "schedule_id": "nightly",
        "version": 3,
        "fire_time": FIRE,
        "job_class": "default",
        "created_at": CREATED,
    }
    fields.update(changes)
    return occurrence.new(**fields)  # type: ignore[arg-type]


def in_state(state: State) -> occurrence.Occurrence:
    return occurrence.Occurrence(
        key="nightly#3#2026-03-01T09:30:00Z",
        tenant_id="tenant-a",
        schedule_id="nightly",
        version=3,
        fire_time=FIRE,
        job_class="default",
        state=state,
    )


# --- keys ---------------------------------------------------------------------------------


def test_given_a_fire_time_with_an_offset_when_keyed_then_the_key_names_it_in_utc() -> None:
    # GIVEN 11:30 at +02:00, which is 09:30 UTC
    fire_time = datetime(2026, 3, 1, 11, 30, tzinfo=timezone(timedelta(hours=2)))
    # WHEN / THEN
    assert occurrence.occurrence_key("nightly", 3, fire_time) == "nightly#3#2026-03-01T09:30:00Z"


def test_given_two_tickers_seeing_the_same_fire_at_different_instants_then_keys_agree() -> None:
    # GIVEN the same nominal fire seen with sub-second noise and in another zone
    noisy = FIRE + timedelta(microseconds=999_999)
    elsewhere = FIRE.astimezone(timezone(timedelta(hours=-5)))
    # THEN every ticker computes one key, so the conditional put lets one row exist
    keys = {occurrence.occurrence_key("nightly", 3, t) for t in (FIRE, noisy, elsewhere)}
    assert keys == {"nightly#3#2026-03-01T09:30:00Z"}


def test_an_exact_key_names_the_millisecond_and_parses_back_to_it() -> None:
    # GIVEN a trigger at 09:30:00.250 (and sub-millisecond noise)
    instant = FIRE + timedelta(microseconds=250_400)
    # WHEN it is keyed exactly
    key = occurrence.occurrence_key("nightly", 3, instant, exact=True)
    # THEN the key names the millisecond, differs from the whole second's, and parses back
    assert key == "nightly#3#2026-03-01T09:30:00.250Z"
    assert key != occurrence.occurrence_key("nightly", 3, FIRE)
    parsed = occurrence.parse_key(key)
    assert parsed.fire_time == FIRE + timedelta(milliseconds=250)
    assert str(parsed) == key
    # AND a whole second spelled with milliseconds is not a key (it is the plain one's)
    with pytest.raises(errors.ValidationError):
        occurrence.parse_key("nightly#3#2026-03-01T09:30:00.000Z")


def test_given_a_new_version_then_the_same_fire_gets_a_different_key() -> None:
    assert occurrence.occurrence_key("nightly", 3, FIRE) != occurrence.occurrence_key(
        "nightly", 4, FIRE
    )


@pytest.mark.parametrize(
    ("schedule_id", "version", "fire_time", "field"),
    [
        ("", 1, FIRE, "schedule_id"),
        ("a#b", 1, FIRE, "schedule_id"),
        ("nightly", 0, FIRE, "version"),
        ("nightly", -1, FIRE, "version"),
        ("nightly", 1, FIRE.replace(tzinfo=None), "fire_time"),
    ],
)
def test_given_bad_parts_when_keyed_then_the_field_at_fault_is_named(
    schedule_id: str, version: int, fire_time: datetime, field: str
) -> None:
    with pytest.raises(errors.ValidationError) as caught:
        occurrence.occurrence_key(schedule_id, version, fire_time)
    assert caught.value.field == field


@given(schedule_id=schedule_ids, version=versions, fire_time=fire_times)
def test_given_any_valid_parts_when_keyed_and_parsed_then_the_parts_come_back(
    schedule_id: str, version: int, fire_time: datetime
) -> None:
    # WHEN
    key = occurrence.occurrence_key(schedule_id, version, fire_time)
    parsed = occurrence.parse_key(key)
    # THEN the parts come back (the fire time in UTC, at whole seconds) and print as the key
    assert parsed == occurrence.OccurrenceKey(
        schedule_id, version, fire_time.astimezone(UTC).replace(microsecond=0)
    )
    assert parsed.fire_time.tzinfo is UTC
    assert str(parsed) == key


near_keys = st.builds(
    "#".join,
    st.lists(
        st.one_of(
            st.text(max_size=6),
            st.from_regex(r"\A[0-9]{1,3}\Z"),
            st.just("2026-03-01T09:30:00Z"),
        ),
        min_size=1,
        max_size=4,
    ),
)


@given(key=st.one_of(st.text(), near_keys))
@example(key="nightly#0#2026-03-01T09:30:00Z")
@example(key="nightly#03#2026-03-01T09:30:00Z")
@example(key="nightly#\N{SUPERSCRIPT TWO}#2026-03-01T09:30:00Z")
@example(key="nightly#\N{ARABIC-INDIC DIGIT THREE}#2026-03-01T09:30:00Z")
@example(key="nightly#3#2026-3-1T9:30:0Z")
def test_given_any_string_when_parsed_then_it_is_refused_or_exactly_the_canonical_key(
    key: str,
) -> None:
    # WHEN
    try:
        parsed = occurrence.parse_key(key)
    except errors.ValidationError as exc:
        # THEN a refusal is typed (handlers map by type) and names the key
        assert exc.field == "occurrence_key"
        return
    # THEN an accepted string is the one key of those parts: another spelling of the same
    # fire would be a different row in the store.
    assert str(parsed) == key


@pytest.mark.parametrize(
    "key",
    [
        "",
        "nightly",
        "nightly#3",
        "#3#2026-03-01T09:30:00Z",
        "nightly##2026-03-01T09:30:00Z",
        "nightly#three#2026-03-01T09:30:00Z",
        "nightly#-3#2026-03-01T09:30:00Z",
        "nightly#3#2026-03-01T09:30:00",
        "nightly#3#2026-03-01 09:30:00Z",
        "nightly#3#2026-02-30T09:30:00Z",
        "nightly#3#2026-03-01T09:30:00Z#extra",
    ],
)
def test_given_a_malformed_key_when_parsed_then_it_is_a_validation_error(key: str) -> None:
    with pytest.raises(errors.ValidationError) as caught:
        occurrence.parse_key(key)
    assert caught.value.field == "occurrence_key"


# --- state machine ------------------------------------------------------------------------


def test_the_table_covers_every_state_and_the_terminal_ones_are_final() -> None:
    assert set(occurrence.TRANSITIONS) == set(State)
    assert set(occurrence.TERMINAL) == {State.SUCCEEDED, State.CANCELLED, State.SKIPPED}
    assert set(occurrence.UNFINISHED) == {State.QUEUED, State.RUNNING, State.FAILED}


@pytest.mark.parametrize("terminal", [State.SUCCEEDED, State.CANCELLED, State.SKIPPED])
def test_given_a_terminal_state_then_no_move_is_allowed(terminal: State) -> None:
    assert [s for s in State if occurrence.can_transition(terminal, s)] == []
    assert occurrence.TRANSITIONS[terminal] == frozenset()


@pytest.mark.parametrize(("current", "requested"), sorted(LEGAL))
def test_given_a_legal_move_then_it_is_allowed(current: State, requested: State) -> None:
    # GIVEN an occurrence in `current`
    item = in_state(current)
    # WHEN
    moved = item.moved(requested, attempts=2)
    # THEN
    assert occurrence.can_transition(current, requested)
    occurrence.check_transition(current, requested)  # returns quietly for a legal move
    assert (moved.state, moved.attempts) == (requested, 2)


@pytest.mark.parametrize(("current", "requested"), ILLEGAL)
def test_given_any_other_move_then_it_is_refused(current: State, requested: State) -> None:
    # GIVEN an occurrence in `current`
    item = in_state(current)
    # WHEN / THEN
    assert not occurrence.can_transition(current, requested)
    with pytest.raises(errors.IllegalTransition) as caught:
        occurrence.check_transition(current, requested)
    assert (caught.value.current, caught.value.requested) == (current, requested)
    with pytest.raises(errors.IllegalTransition):
        item.moved(requested)
    assert item.state is current


def test_given_a_move_then_other_fields_are_kept_and_the_original_is_untouched() -> None:
    # GIVEN
    queued = make(payload={"n": 1})
    started = CREATED + timedelta(seconds=5)
    # WHEN
    running = queued.moved(State.RUNNING, attempts=1, started_at=started)
    # THEN
    assert (running.state, running.attempts, running.started_at) == (State.RUNNING, 1, started)
    assert (running.key, running.payload, running.created_at) == (
        queued.key,
        {"n": 1},
        CREATED,
    )
    assert (queued.state, queued.attempts, queued.started_at) == (State.QUEUED, 0, None)


def test_given_start_and_finish_then_duration_is_their_difference() -> None:
    # GIVEN
    item = make()
    started = CREATED + timedelta(seconds=2)
    # THEN unknown until both ends are known
    assert item.duration_seconds is None
    assert item.moved(State.RUNNING, started_at=started).duration_seconds is None
    # WHEN it finishes
    done = item.moved(State.RUNNING, started_at=started).moved(
        State.SUCCEEDED, finished_at=started + timedelta(seconds=90, milliseconds=500)
    )
    assert done.duration_seconds == 90.5


# --- new() --------------------------------------------------------------------------------


def test_given_a_fire_when_new_then_it_is_queued_under_its_key() -> None:
    # GIVEN a fire time read in a local zone
    local = FIRE.astimezone(timezone(timedelta(hours=9)))
    # WHEN
    item = make(fire_time=local, payload={"report": "daily"})
    # THEN
    assert item.key == "nightly#3#2026-03-01T09:30:00Z"
    assert (item.tenant_id, item.schedule_id, item.version) == ("tenant-a", "nightly", 3)
    assert item.fire_time == FIRE and item.fire_time.tzinfo is UTC
    assert (item.state, item.attempts, item.job_class) == (State.QUEUED, 0, "default")
    assert (item.created_at, item.started_at, item.finished_at) == (CREATED, None, None)
    assert item.payload == {"report": "daily"}
    assert item.exit_reason is None


def test_given_a_skipped_fire_when_new_then_it_is_finished_at_creation_with_its_reason() -> None:
    item = make(state=State.SKIPPED, exit_reason="skipped: misfire")
    assert item.state is State.SKIPPED
    assert item.finished_at == CREATED
    assert item.exit_reason == "skipped: misfire"


@pytest.mark.parametrize("state", sorted(set(State) - {State.QUEUED, State.SKIPPED}))
def test_given_any_other_initial_state_when_new_then_it_is_refused(state: State) -> None:
    with pytest.raises(errors.ValidationError) as caught:
        make(state=state)
    assert caught.value.field == "state"


def test_given_a_payload_when_new_then_later_changes_to_the_caller_dict_do_not_leak_in() -> None:
    # GIVEN
    payload = {"n": 1}
    item = make(payload=payload)
    # WHEN the caller reuses its dict
    payload["n"] = 2
    # THEN
    assert item.payload == {"n": 1}


def test_given_no_payload_when_new_then_each_occurrence_has_its_own_empty_payload() -> None:
    first, second = make(), make(version=4)
    first.payload["x"] = 1
    assert second.payload == {}


def test_given_a_naive_fire_time_when_new_then_it_is_refused() -> None:
    with pytest.raises(errors.ValidationError) as caught:
        make(fire_time=FIRE.replace(tzinfo=None))
    assert caught.value.field == "fire_time"
