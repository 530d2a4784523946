"""The retry policy, pure functions: the verdict table, failure reasons, timeout labels, capacity backoff."""

from __future__ import annotations

import random
from typing import Any

import pytest

from duplexkit.bench.retry import (
    INNER_TIMEOUT_MARGIN,
    MAX_ATTEMPTS,
    AttemptOutcome,
    Verdict,
    capacity_backoff_s,
    failure_reason,
    timeout_label,
    verdict,
)

PUBLISH, RETRY, FAIL = Verdict.PUBLISH, Verdict.RETRY, Verdict.FAIL


def outcome(**fields: Any) -> AttemptOutcome:
    """A completed attempt (the drain settled, every response done) with `fields` changed."""
    return AttemptOutcome(**{"response_done": True, "drain_settled": True, **fields})


# Each row: (name, outcome, verdict after attempt 1, verdict after attempt 2, failure reason).
TABLE = [
    ("clean", outcome(), PUBLISH, PUBLISH, "ok"),
    ("clean, no response created", outcome(response_done=False), PUBLISH, PUBLISH, "ok"),
    (
        "benign playback_ack_too_late",
        outcome(server_errors=["playback_ack_too_late"]),
        PUBLISH,
        PUBLISH,
        "ok",
    ),
    (
        "benign stale_function_call_output (a tool's output after a barge-in retired its call)",
        outcome(server_errors=["stale_function_call_output"]),
        PUBLISH,
        PUBLISH,
        "ok",
    ),
    (
        "a client's duplicate output",
        outcome(server_errors=["duplicate_function_call_output"]),
        FAIL,
        FAIL,
        "server_error: duplicate_function_call_output",
    ),
    (
        "server error",
        outcome(server_errors=["model_step_failed"]),
        FAIL,
        FAIL,
        "server_error: model_step_failed",
    ),
    (
        "server error beside a benign one",
        outcome(server_errors=["playback_ack_too_late", "invalid_value"]),
        FAIL,
        FAIL,
        "server_error: invalid_value",
    ),
    (
        "server error under a stall",
        outcome(server_errors=["internal_error"], drain_timeout=60.0),
        FAIL,
        FAIL,
        "server_error: internal_error",
    ),
    ("input stall, reply done", outcome(input_timeout=20.0), RETRY, FAIL, "input_timeout"),
    (
        "input stall, reply open",
        outcome(input_timeout=20.0, response_done=False),
        RETRY,
        FAIL,
        "input_timeout",
    ),
    ("commit stall, reply done", outcome(commit_timeout=5.0), RETRY, FAIL, "commit_timeout"),
    (
        "commit stall, reply open",
        outcome(commit_timeout=5.0, response_done=False),
        RETRY,
        FAIL,
        "commit_timeout",
    ),
    ("drain stall, reply done", outcome(drain_timeout=60.0), RETRY, FAIL, "drain_timeout"),
    (
        "drain stall, reply open",
        outcome(drain_timeout=60.0, response_done=False),
        RETRY,
        FAIL,
        "drain_timeout",
    ),
    (
        "stalls name the first in lifecycle order",
        outcome(drain_timeout=60.0, commit_timeout=5.0, input_timeout=20.0),
        RETRY,
        FAIL,
        "input_timeout",
    ),
    (
        "dropped connection",
        outcome(transport_error="ConnectionLost: connection closed (code 1006)", response_done=False),
        RETRY,
        FAIL,
        "transport_error: ConnectionLost: connection closed (code 1006)",
    ),
    (
        "close stall under a completed reply is advisory",
        outcome(close_timeout=5.0),
        PUBLISH,
        PUBLISH,
        "close_timeout",
    ),
    (
        "close stall after a settled drain with no reply (the model chose silence) is advisory",
        outcome(close_timeout=5.0, response_done=False),
        PUBLISH,
        PUBLISH,
        "close_timeout",
    ),
    (
        "close stall under an open reply (the drain did not settle)",
        outcome(close_timeout=5.0, response_done=False, drain_settled=False),
        RETRY,
        FAIL,
        "close_timeout",
    ),
    (
        "a final ack stall is recorded, never retried",
        outcome(ack_timeout=1.0),
        PUBLISH,
        PUBLISH,
        "ok",
    ),
    (
        "close stall does not excuse an input stall",
        outcome(close_timeout=5.0, input_timeout=20.0),
        RETRY,
        FAIL,
        "input_timeout",
    ),
    (
        "close stall does not excuse a commit stall",
        outcome(close_timeout=5.0, commit_timeout=5.0),
        RETRY,
        FAIL,
        "commit_timeout",
    ),
    (
        "runner (coding) error",
        outcome(runner_error="AttributeError: no append_audio"),
        FAIL,
        FAIL,
        "runner_error: AttributeError: no append_audio",
    ),
    (
        "runner error wins over everything",
        outcome(runner_error="KeyError: 'x'", server_errors=["internal_error"], drain_timeout=1.0),
        FAIL,
        FAIL,
        "runner_error: KeyError: 'x'",
    ),
]


@pytest.mark.parametrize(
    ("attempt_outcome", "first", "second", "reason"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_the_verdict_table(
    attempt_outcome: AttemptOutcome, first: Verdict, second: Verdict, reason: str
) -> None:
    assert verdict(attempt_outcome, 1) is first
    assert verdict(attempt_outcome, 2) is second
    assert failure_reason(attempt_outcome) == reason


def test_a_sample_gets_at_most_two_attempts() -> None:
    assert MAX_ATTEMPTS == 2
    stalled = outcome(drain_timeout=60.0)
    assert [verdict(stalled, n) for n in (1, 2, 3)] == [RETRY, FAIL, FAIL]


def test_a_benign_code_is_not_a_deterministic_error() -> None:
    mixed = outcome(server_errors=["playback_ack_too_late", "model_step_failed", "playback_ack_too_late"])
    assert mixed.deterministic_errors == ["model_step_failed"]
    assert outcome(server_errors=["playback_ack_too_late"]).deterministic_errors == []


# --- timeout labels -------------------------------------------------------------------------------


def test_a_timeout_without_a_deadline_is_an_inner_wait_leaking_and_does_not_raise() -> None:
    assert timeout_label(0.0, None) == "inner_timeout_leaked"
    assert timeout_label(10_000.0, None) == "inner_timeout_leaked"


@pytest.mark.parametrize(
    ("elapsed_s", "deadline_s", "label"),
    [
        (1.0, 100.0, "inner_timeout_leaked"),  # a configure handshake timing out early
        (89.9, 100.0, "inner_timeout_leaked"),
        (90.0, 100.0, "request_deadline"),
        (99.5, 100.0, "request_deadline"),  # scheduling jitter under the deadline: still the deadline
        (100.0, 100.0, "request_deadline"),
        (100.3, 100.0, "request_deadline"),  # timers fire late
        (0.95, 1.0, "request_deadline"),
        (899.0, 1000.0, "inner_timeout_leaked"),
        (950.0, 1000.0, "request_deadline"),
    ],
)
def test_timeout_label_uses_a_margin_relative_to_the_deadline(
    elapsed_s: float, deadline_s: float, label: str
) -> None:
    assert timeout_label(elapsed_s, deadline_s) == label


def test_the_timeout_label_margin_scales_with_the_deadline() -> None:
    """A fixed 1 ms margin would call a timeout 5 ms early on a 100 s deadline a leak; the margin is a
    fraction of the deadline instead, so the boundary moves with it."""
    assert 0 < INNER_TIMEOUT_MARGIN < 1
    for deadline in (0.5, 10.0, 100.0, 3600.0):
        boundary = INNER_TIMEOUT_MARGIN * deadline
        assert timeout_label(boundary * 0.999, deadline) == "inner_timeout_leaked"
        assert timeout_label(boundary, deadline) == "request_deadline"
        assert timeout_label(deadline - 0.005, deadline) == "request_deadline"


# --- capacity backoff -----------------------------------------------------------------------------


@pytest.mark.parametrize("refusals", range(0, 12))
def test_capacity_backoff_stays_within_its_exponential_bound(refusals: int) -> None:
    rng = random.Random(1234)
    ceiling = min(10.0, 0.5 * 2 ** max(0, refusals - 1))
    pauses = [capacity_backoff_s(refusals, rng=rng) for _ in range(200)]
    assert all(0.0 <= p <= ceiling for p in pauses)
    assert max(pauses) > 0.8 * ceiling and min(pauses) < 0.2 * ceiling  # full jitter: spread over the range


def test_capacity_backoff_is_capped() -> None:
    rng = random.Random(5)
    assert all(capacity_backoff_s(n, rng=rng) <= 10.0 for n in range(1, 200))
    assert all(capacity_backoff_s(50, base_s=1.0, cap_s=2.0, rng=rng) <= 2.0 for _ in range(100))


def test_capacity_backoff_is_reproducible_with_a_seeded_rng() -> None:
    first = [capacity_backoff_s(n, rng=random.Random(42)) for n in range(1, 8)]
    again = [capacity_backoff_s(n, rng=random.Random(42)) for n in range(1, 8)]
    assert first == again
    rng_a, rng_b = random.Random(7), random.Random(7)
    assert [capacity_backoff_s(n, rng=rng_a) for n in range(1, 8)] == [
        capacity_backoff_s(n, rng=rng_b) for n in range(1, 8)
    ]


def test_capacity_backoff_grows_with_consecutive_refusals() -> None:
    def mean(refusals: int) -> float:
        rng = random.Random(99)
        return sum(capacity_backoff_s(refusals, rng=rng) for _ in range(400)) / 400

    means = [mean(n) for n in (1, 2, 3, 4)]
    assert means == sorted(means)
    assert means[3] > 3 * means[0]
