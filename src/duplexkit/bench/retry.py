"""The retry policy: what to do with a sample after one attempt. Pure functions, no I/O.

- A retryable capacity refusal when opening the session is not an attempt: the runner backs off and
  reopens (see `capacity_backoff_s`).
- A server-reported error (other than the benign ones, `BENIGN_CODES`: `playback_ack_too_late`,
  `stale_function_call_output`) is deterministic: the sample fails after one attempt.
- A transport stall (`configure_timeout`, `input_timeout`, `commit_timeout`, `drain_timeout`) or a dropped
  connection is retried once, also under a completed reply: a completed reply does not prove the whole
  input arrived.
- `close_timeout` after a drain that settled with nothing open is advisory: recorded, the sample is
  published, not retried, whether the model replied or chose silence (a stalled close says nothing about
  what the model decided). Without a settled drain it is retried like a stall.
- A final playback ack that could not reach the wire in time (`ack_timeout`) is recorded, never retried:
  the reply it acknowledges was already received in full.
- An unexpected exception in the runner (a coding error, e.g. in the padding) fails the sample visibly.

What a failed retry does with the first attempt's artifacts: nothing is published until the sample's final
outcome is known; if the retry fails too, the sample is recorded as failed and each attempt's diagnostics
(including the first attempt's timed sentences) are kept in its metadata under `attempts`, never published.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import StrEnum

from duplexkit.protocol.errors import BENIGN_CODES

MAX_ATTEMPTS = 2
INNER_TIMEOUT_MARGIN = 0.9
"""A TimeoutError raised before this fraction of the per-request deadline is an inner wait leaking."""


class Verdict(StrEnum):
    PUBLISH = "publish"
    RETRY = "retry"
    FAIL = "fail"


STALLS = ("configure_timeout", "input_timeout", "commit_timeout", "drain_timeout")


@dataclass(slots=True)
class AttemptOutcome:
    """What one attempt observed; timeouts hold the bound (s) that expired, or None."""

    response_done: bool = False
    drain_settled: bool = False
    """The drain settled: the model decided on the committed unit and every response was done."""
    server_errors: list[str] = field(default_factory=list)
    configure_timeout: float | None = None
    """No `session.created` within its bound (a server that admits by handshake waits for capacity first)."""
    input_timeout: float | None = None
    commit_timeout: float | None = None
    drain_timeout: float | None = None
    close_timeout: float | None = None
    ack_timeout: float | None = None
    """The final playback ack's bound, when it ran out (advisory)."""
    transport_error: str | None = None
    runner_error: str | None = None
    capacity_exhausted: bool = False
    """No session slot came free within the capacity wait bound: final, not retried."""

    @property
    def deterministic_errors(self) -> list[str]:
        benign = {code.value for code in BENIGN_CODES}
        return [code for code in self.server_errors if code not in benign]

    @property
    def stall(self) -> str | None:
        """The first transport stall this attempt hit, in lifecycle order."""
        return next((name for name in STALLS if getattr(self, name) is not None), None)


def verdict(outcome: AttemptOutcome, attempt: int) -> Verdict:
    """Decide after attempt number `attempt` (1-based)."""
    if outcome.runner_error is not None or outcome.deterministic_errors or outcome.capacity_exhausted:
        return Verdict.FAIL
    retryable = outcome.stall is not None or outcome.transport_error is not None
    if not retryable and outcome.close_timeout is not None and not outcome.drain_settled:
        retryable = True
    if retryable:
        return Verdict.RETRY if attempt < MAX_ATTEMPTS else Verdict.FAIL
    return Verdict.PUBLISH


def failure_reason(outcome: AttemptOutcome) -> str:
    """One line naming why an attempt failed (the sample's `error`)."""
    if outcome.runner_error is not None:
        return f"runner_error: {outcome.runner_error}"
    if outcome.capacity_exhausted:
        return "capacity_exhausted: no session slot within the capacity wait bound"
    if outcome.deterministic_errors:
        return f"server_error: {', '.join(outcome.deterministic_errors)}"
    if outcome.stall is not None:
        return outcome.stall
    if outcome.transport_error is not None:
        return f"transport_error: {outcome.transport_error}"
    if outcome.close_timeout is not None:
        return "close_timeout"
    return "ok"


def capacity_backoff_s(
    refusals: int, *, base_s: float = 0.5, cap_s: float = 10.0, rng: random.Random
) -> float:
    """Full-jitter exponential backoff after the n-th consecutive capacity refusal (bounded by `cap_s`)."""
    return rng.uniform(0.0, min(cap_s, base_s * 2 ** max(0, refusals - 1)))


def timeout_label(elapsed_s: float, deadline_s: float | None) -> str:
    """Name a TimeoutError: the per-request deadline itself, or an inner wait that leaked before it."""
    if deadline_s is None or elapsed_s < INNER_TIMEOUT_MARGIN * deadline_s:
        return "inner_timeout_leaked"
    return "request_deadline"
