"""What better means for each Full-Duplex-Bench number, and the published numbers docs/fdb.md cites: the one
home of both, for the terminal table (`scoring.format_table`) and the report (`report`)."""

from __future__ import annotations

from dataclasses import dataclass

LOWER, HIGHER = "↓", "↑"


def direction(task: str, metric: str) -> str:
    """↑ or ↓: which way `metric` is better on `task`. TOR is the model taking the turn: wanted after the
    user's turn and at an interruption, not at a pause or under a backchannel."""
    if metric == "tor":
        return LOWER if task in ("pause", "backchannel") else HIGHER
    return HIGHER if metric in ("frequency", "relevance") else LOWER


@dataclass(frozen=True)
class Reference:
    """A published number: system, task, metric, value, and where it was published."""

    system: str
    task: str
    metric: str
    value: float
    source: str


REFERENCES: tuple[Reference, ...] = (
    Reference("PersonaPlex", "turn_taking", "latency_s", 0.070, "FDB v1 README"),
    Reference("Moshi", "turn_taking", "latency_s", 0.265, "FDB v1 README"),
    Reference("GPT-Realtime", "turn_taking", "latency_s", 1.470, "FDB v1 README"),
    Reference("GPT-Realtime", "pause", "tor", 0.010, "FDB v1 README (synthetic pauses)"),
    Reference("Moshi", "interruption", "latency_s", 0.257, "FDB v1 README"),
)
"""Only numbers the FDB v1 README states (see docs/fdb.md); nothing here is ours."""


def closest_reference(task: str, metric: str, value: float | None) -> Reference | None:
    """The published number on `task` and `metric` nearest to `value` (`None` when none is published, or
    there is no value to compare)."""
    rows = [r for r in REFERENCES if r.task == task and r.metric == metric]
    if value is None or not rows:
        return None
    return min(rows, key=lambda r: abs(r.value - value))
