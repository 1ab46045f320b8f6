"""Retry backoff: exponential growth, cap, full jitter, attempt cap."""

from __future__ import annotations

import random

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fireline.domain import errors, retry


class FixedRandom:
    """A random source that always returns one value."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.calls = 0

    def random(self) -> float:
        self.calls += 1
        return self.value


class NoRandom:
    def random(self) -> float:
        raise AssertionError("the random source must not be consulted")


policies = st.builds(
    retry.RetryPolicy,
    max_attempts=st.integers(min_value=1, max_value=100),
    base_seconds=st.floats(min_value=0, max_value=60),
    factor=st.floats(min_value=1, max_value=10),
    cap_seconds=st.floats(min_value=60, max_value=retry.MAX_DELAY_SECONDS),
    jitter=st.sampled_from(retry.Jitter),
)
attempts = st.integers(min_value=1, max_value=10_000)


# --- ceiling ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "ceiling"),
    [(1, 2), (2, 4), (3, 8), (4, 16), (5, 32), (6, 64), (7, 128), (8, 256), (9, 300), (10, 300)],
)
def test_given_the_defaults_then_the_ceiling_doubles_from_two_seconds_up_to_the_cap(
    attempt: int, ceiling: float
) -> None:
    assert retry.RetryPolicy().ceiling(attempt) == ceiling


def test_given_another_factor_then_the_ceiling_grows_by_it() -> None:
    policy = retry.RetryPolicy(base_seconds=1, factor=3, cap_seconds=100)
    assert [policy.ceiling(n) for n in range(1, 8)] == [1, 3, 9, 27, 81, 100, 100]


@given(policy=policies, attempt=attempts)
def test_given_any_policy_then_the_ceiling_never_shrinks_and_never_passes_the_cap(
    policy: retry.RetryPolicy, attempt: int
) -> None:
    # WHEN
    here, later = policy.ceiling(attempt), policy.ceiling(attempt + 1)
    # THEN
    assert policy.base_seconds <= here or here == policy.cap_seconds
    assert here <= later <= policy.cap_seconds


@pytest.mark.parametrize(
    ("policy", "ceiling"),
    [
        (retry.RetryPolicy(), 300),
        (retry.RetryPolicy(base_seconds=900, factor=10, cap_seconds=900), 900),
        (retry.RetryPolicy(base_seconds=5, factor=1, cap_seconds=900), 5),
        (retry.RetryPolicy(base_seconds=0, factor=10, cap_seconds=900), 0),
        (retry.RetryPolicy(base_seconds=1e-300, factor=10, cap_seconds=900), 900),
    ],
)
def test_given_attempt_ten_thousand_then_the_ceiling_is_finite_and_capped(
    policy: retry.RetryPolicy, ceiling: float
) -> None:
    # WHEN / THEN: no OverflowError and no inf, even though factor**9999 is not a float
    assert policy.ceiling(10_000) == ceiling
    assert policy.delay(10_000, random.Random(1)) <= ceiling


@pytest.mark.parametrize("attempt", [0, -1])
def test_given_an_attempt_below_one_then_it_is_refused(attempt: int) -> None:
    with pytest.raises(errors.ValidationError) as caught:
        retry.RetryPolicy().ceiling(attempt)
    assert caught.value.field == "attempt"


# --- delay and jitter ---------------------------------------------------------------------


@given(policy=policies, attempt=attempts, seed=st.integers())
# The smallest ceiling a float holds: any draw times it rounds to the ceiling itself.
@example(policy=retry.RetryPolicy(base_seconds=5e-324, factor=1.0), attempt=1, seed=0)
def test_given_full_jitter_then_the_delay_lies_in_zero_to_the_ceiling(
    policy: retry.RetryPolicy, attempt: int, seed: int
) -> None:
    # GIVEN
    full = retry.RetryPolicy(
        max_attempts=policy.max_attempts,
        base_seconds=policy.base_seconds,
        factor=policy.factor,
        cap_seconds=policy.cap_seconds,
        jitter=retry.Jitter.FULL,
    )
    ceiling = full.ceiling(attempt)
    # WHEN
    delay = full.delay(attempt, random.Random(seed))
    # THEN
    assert 0 <= delay <= retry.MAX_DELAY_SECONDS
    assert delay < ceiling or delay == ceiling == 0


@pytest.mark.parametrize("value", [0.0, 0.25, 0.5, 1 - 2**-53])
def test_given_full_jitter_then_the_delay_is_the_injected_draw_times_the_ceiling(
    value: float,
) -> None:
    # GIVEN attempt 3 of the defaults: ceiling 8 s
    rng = FixedRandom(value)
    # WHEN
    delay = retry.RetryPolicy().delay(3, rng)
    # THEN
    assert delay == value * 8
    assert delay < 8
    assert rng.calls == 1


def test_given_one_seed_then_the_delays_repeat_exactly() -> None:
    policy = retry.RetryPolicy()
    first = [policy.delay(n, random.Random(42)) for n in range(1, 10)]
    again = [policy.delay(n, random.Random(42)) for n in range(1, 10)]
    assert first == again


def test_given_a_burst_of_failures_together_then_full_jitter_spreads_their_retries() -> None:
    # GIVEN 1,000 jobs that failed at once, all on their third attempt (ceiling 8 s)
    rng = random.Random(7)
    # WHEN
    delays = [retry.RetryPolicy().delay(3, rng) for _ in range(1_000)]
    # THEN they are not in lockstep: spread over the whole range
    assert len(set(delays)) == 1_000
    assert min(delays) < 0.1
    assert max(delays) > 7.9
    assert 3.5 < sum(delays) / len(delays) < 4.5


@given(attempt=attempts)
def test_given_no_jitter_then_the_delay_is_the_ceiling_and_no_draw_is_made(attempt: int) -> None:
    policy = retry.RetryPolicy(jitter=retry.Jitter.NONE)
    assert policy.delay(attempt, NoRandom()) == policy.ceiling(attempt)


# --- attempt cap --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_attempts", "expected"),
    [
        (1, [False, False]),
        (3, [True, True, False, False]),
        (5, [True, True, True, True, False, False]),
    ],
)
def test_given_max_attempts_then_retries_stop_once_that_many_attempts_were_made(
    max_attempts: int, expected: list[bool]
) -> None:
    policy = retry.RetryPolicy(max_attempts=max_attempts)
    made = range(1, len(expected) + 1)
    assert [policy.should_retry(n) for n in made] == expected


# --- validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_attempts": 0}, "retry.max_attempts"),
        ({"max_attempts": 101}, "retry.max_attempts"),
        ({"base_seconds": -1}, "retry.base_seconds"),
        ({"base_seconds": 901, "cap_seconds": 900}, "retry.base_seconds"),
        ({"base_seconds": float("nan")}, "retry.base_seconds"),
        ({"factor": 0.5}, "retry.factor"),
        ({"factor": 11}, "retry.factor"),
        ({"base_seconds": 10, "cap_seconds": 5}, "retry.cap_seconds"),
        ({"cap_seconds": 901}, "retry.cap_seconds"),
    ],
)
def test_given_an_out_of_range_setting_then_the_error_names_the_field(
    kwargs: dict[str, float], field: str
) -> None:
    with pytest.raises(errors.ValidationError) as caught:
        retry.RetryPolicy(**kwargs)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")


def test_given_settings_at_their_bounds_then_they_are_accepted() -> None:
    low = retry.RetryPolicy(max_attempts=1, base_seconds=0, factor=1, cap_seconds=0)
    high = retry.RetryPolicy(max_attempts=100, base_seconds=900, factor=10, cap_seconds=900)
    assert (low.ceiling(5), high.ceiling(5)) == (0, 900)
