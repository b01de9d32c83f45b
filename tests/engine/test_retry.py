"""Pure policy: backoff with cap and full jitter, the finite budget, and error classification."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.errors import ErrorKind, PermanentError, TransientError, UnclearError, classify, error_class_name
from jobs.retry import RetryPolicy


def test_the_ceiling_doubles_per_attempt_until_the_cap():
    policy = RetryPolicy(base_seconds=2, cap_seconds=30)
    assert [policy.ceiling(n) for n in range(1, 7)] == [2, 4, 8, 16, 30, 30]


@given(attempt=st.integers(1, 10_000), seed=st.integers(0, 2**32))
def test_full_jitter_stays_within_zero_and_the_ceiling(attempt, seed):
    policy = RetryPolicy(base_seconds=5, cap_seconds=3600)
    delay = policy.delay(attempt, random.Random(seed))
    assert 0 <= delay <= policy.ceiling(attempt) <= 3600


def test_jitter_spreads_retries_of_jobs_that_failed_together():
    policy = RetryPolicy(base_seconds=10, cap_seconds=100)
    rng = random.Random(1)
    delays = [policy.delay(4, rng) for _ in range(1000)]
    # Uniform over [0, 80]: the quartiles sit near 20, 40, 60 rather than on one instant.
    delays.sort()
    assert 15 < delays[250] < 25 and 35 < delays[500] < 45 and 55 < delays[750] < 65


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"base_seconds": 0}, "base_seconds must be positive"),
        ({"base_seconds": 10, "cap_seconds": 5}, "must be at least base_seconds"),
        ({"max_attempts": 0}, "max_attempts must be at least 1"),
    ],
)
def test_a_policy_that_cannot_work_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)


def test_attempt_numbers_start_at_one():
    with pytest.raises(ValueError, match="start at 1"):
        RetryPolicy().ceiling(0)


def test_the_sql_statements_get_the_same_numbers():
    assert RetryPolicy(base_seconds=2, cap_seconds=30).sql_params() == {"base": 2.0, "cap": 30.0}


@pytest.mark.parametrize(
    "exc,kind",
    [
        (TransientError("503"), ErrorKind.TRANSIENT),
        (PermanentError("404"), ErrorKind.PERMANENT),
        (UnclearError("score 0.7"), ErrorKind.UNCLEAR),
        (ValueError("bad payload"), ErrorKind.PERMANENT),
        (KeyError("url"), ErrorKind.PERMANENT),
        (TimeoutError(), ErrorKind.TRANSIENT),
        (ConnectionResetError(), ErrorKind.TRANSIENT),
        (RuntimeError("surprise"), ErrorKind.TRANSIENT),
    ],
)
def test_errors_are_classified(exc, kind):
    assert classify(exc) is kind


def test_error_class_names_are_qualified_outside_builtins():
    assert error_class_name(ValueError()) == "ValueError"
    assert error_class_name(PermanentError()) == "jobs.errors.PermanentError"
