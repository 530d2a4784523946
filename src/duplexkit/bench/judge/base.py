"""What every judge shares: who it is (`JudgeInfo`), what it answers (`SampleScore`), and the `Judge`
protocol that `score_run` drives. What a judge is asked about a sample is its benchmark's request type
(`JudgeScoring.score_request`).

A judge scores one published sample at a time. It raises `ScoringError` when that sample cannot be scored
(the sample is then recorded as an error and retried on the next run); any other exception aborts the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

_UNRECORDED_REMINDER_WINDOW_S = 10.0
"""The reminder window of Omni-DuplexEval score files written before the window was recorded."""


class ScoringError(RuntimeError):
    """One sample could not be scored; the message says why, `trace` keeps any parse-failure trace so far."""

    def __init__(self, message: str, trace: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.trace = trace or []


@dataclass(frozen=True)
class JudgeInfo:
    """Recorded in every score file: scores are only comparable under the same model, URL and prompts."""

    kind: Literal["llm", "builtin"]
    model: str
    url: str | None
    prompt_version: str
    prompt_source: str
    reminder_window_s: float | None = None
    """Omni-DuplexEval: PR reminders are judged on the sentences starting in [t, t + this]; None for a
    benchmark without reminders (then not recorded)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "model": self.model,
            "url": self.url,
            "prompt_version": self.prompt_version,
            "prompt_source": self.prompt_source,
        }
        if self.reminder_window_s is not None:
            out["reminder_window_s"] = self.reminder_window_s
        return out

    def same_scores_as(self, recorded: Mapping[str, Any]) -> bool:
        """Whether a score recorded under `recorded` (a `to_json` dict) would be reproduced by this judge."""
        unrecorded = None if self.reminder_window_s is None else _UNRECORDED_REMINDER_WINDOW_S
        window = recorded.get("reminder_window_s", unrecorded)
        return (recorded.get("model"), recorded.get("url"), recorded.get("prompt_version"), window) == (
            self.model,
            self.url,
            self.prompt_version,
            self.reminder_window_s,
        )


@dataclass
class SampleScore:
    """A judge's scores for one sample.

    `scores`: the benchmark's numbers by name (Omni-DuplexEval: RTD `content_score`, `avg_temporal_score`;
    PR `all_success`). `details`: the per-sentence / per-event / per-slot record. `trace`: for each judge
    call whose reply failed to parse, both attempts (the first names the parse error); empty when every
    reply parsed.
    """

    scores: dict[str, float]
    details: dict[str, Any]
    trace: list[dict[str, Any]] = field(default_factory=list)


class Judge(Protocol):
    info: JudgeInfo

    async def score(self, request: Any) -> SampleScore:
        """Score one sample; raise ScoringError when it cannot be scored."""
        ...

    async def aclose(self) -> None:
        """Release connections; the caller that made the judge closes it after the last `score`."""
        ...
