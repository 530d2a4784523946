"""The offline judge for the built-in dataset: deterministic scores from the generated ground truth.

It reads no model and calls nothing; it matches the response's words and times against `ground_truth`, so its
numbers only say whether the pipeline runs end to end. Everything it writes is labelled `kind: builtin` and
is not comparable to published Omni-DuplexEval numbers (those come from an LLM judge).

Facts. Each ground-truth event `{time, colour?, text?, count?, description}` is a fact holding from its time
until the next event (the last one until the clip ends), named by its keywords: its colour, its text, its
count (digits or words), or, lacking all three, the words of its description longer than three letters.
Each `segments` entry `{start, end, direction}` is a fact named by its direction; `final_count` is a fact
over the whole clip. A sentence mentions a fact when it contains one of its keywords as a whole word.

- RTD temporal, per sentence with a valid window (same window math as the LLM judge): relevant iff it
  mentions any fact; `temporal_score` 3 if a mentioned fact overlaps the window, 2 if one lies within 2 s of
  it, else 1. `avg_temporal_score` = mean over relevant valid sentences (0 if none).
- RTD content: 3 * the share of facts the whole response mentions, to 2 decimals.
- PR correction (or no reminder times): success iff the response names the ground truth's `colour` (the
  correct value of the claim).
- PR event / post-event: for each reminder time t, the sentences starting in [t, t + 10 s] succeed iff they
  mention the ground-truth event at t (the event within 0.5 s of t); `all_success` needs every event.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from duplexkit.bench.judge.base import JudgeInfo, SampleScore, ScoringError
from duplexkit.bench.omni_duplex_eval.request import ScoreRequest
from duplexkit.bench.omni_duplex_eval.windows import (
    LEAD_S,
    REMINDER_WINDOW_S,
    sentence_window,
    sentences_after,
    window_is_valid,
)
from duplexkit.client.sentences import TimedSentence

BUILTIN_JUDGE_VERSION = "builtin-judge-1"
NOT_COMPARABLE = (
    "offline ground-truth judge (judge: builtin) for smoke tests and demos; "
    "not comparable to published Omni-DuplexEval numbers"
)
_EVENT_MATCH_S = 0.5
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


@dataclass(frozen=True)
class _Fact:
    start: float
    end: float
    keywords: frozenset[str]

    def mentioned_in(self, text: str) -> bool:
        return any(re.search(rf"\b{re.escape(k)}\b", text, re.IGNORECASE) for k in self.keywords)


class BuiltinJudge:
    """Scores samples of the built-in dataset from their `ground_truth`; deterministic, offline."""

    def __init__(self, *, reminder_window_s: float = REMINDER_WINDOW_S) -> None:
        self._reminder_window_s = reminder_window_s
        self.info = JudgeInfo(
            kind="builtin",
            model="builtin",
            url=None,
            prompt_version=BUILTIN_JUDGE_VERSION,
            prompt_source="ground truth",
            reminder_window_s=reminder_window_s,
        )

    async def aclose(self) -> None:
        return None

    async def score(self, request: ScoreRequest) -> SampleScore:
        truth = request.ground_truth
        if truth is None:
            raise ScoringError(
                "the builtin judge needs the built-in dataset's ground_truth; this sample has none"
            )
        if request.family == "rtd":
            return _score_rtd(request, truth)
        return _score_pr(request, truth, self._reminder_window_s)


def _score_rtd(request: ScoreRequest, truth: Mapping[str, Any]) -> SampleScore:
    duration = request.video_duration or 0.0
    facts = _facts(truth, duration)
    sentences: list[dict[str, Any]] = []
    relevant: list[int] = []
    for sentence in request.sentences:
        window = sentence_window(sentence.start, sentence.end)
        record: dict[str, Any] = {**sentence.to_json(), "window": [window.start, window.end]}
        valid = window_is_valid(window, duration)
        record["valid"] = valid
        if valid:
            mentioned = [f for f in facts if f.mentioned_in(sentence.sentence)]
            gap = min((_gap(f, window.start, window.end) for f in mentioned), default=None)
            score = 0 if gap is None else 3 if gap == 0 else 2 if gap <= LEAD_S else 1
            record |= {"temporal_score": score, "is_relevant": int(bool(mentioned))}
            if mentioned:
                relevant.append(score)
        sentences.append(record)
    text = _joined(request.sentences)
    hits = sum(f.mentioned_in(text) for f in facts)
    content = round(3 * hits / len(facts), 2) if facts else 0.0
    average = round(sum(relevant) / len(relevant), 4) if relevant else 0.0
    return SampleScore(
        scores={"content_score": content, "avg_temporal_score": average},
        details={
            "content": {"content_score": content, "facts": len(facts), "facts_mentioned": hits},
            "temporal": {"relevant_valid": len(relevant), "sentences": sentences},
        },
    )


def _score_pr(request: ScoreRequest, truth: Mapping[str, Any], window_s: float) -> SampleScore:
    events: list[dict[str, Any]] = []
    if request.task == "correction" or not request.reminders:
        colour = truth.get("colour")
        if not isinstance(colour, str) or not colour:
            raise ScoringError("the ground truth has no colour to check a correction against")
        response = _joined(request.sentences)
        success = int(_Fact(0.0, 0.0, frozenset({colour})).mentioned_in(response))
        events.append({"event_time": None, "expected": [colour], "success_score": success})
    else:
        truth_events = _events(truth)
        for t in request.reminders:
            event = min(truth_events, key=lambda e: abs(float(e["time"]) - t), default=None)
            if event is None or abs(float(event["time"]) - t) > _EVENT_MATCH_S:
                raise ScoringError(f"the ground truth has no event at the reminder time {t}")
            fact = _Fact(t, t, _keywords(event))
            response = _joined(sentences_after(request.sentences, t, window_s))
            success = int(bool(response) and fact.mentioned_in(response))
            events.append(
                {
                    "event_time": t,
                    "window": [t, t + window_s],
                    "expected": sorted(fact.keywords),
                    "success_score": success,
                }
            )
    all_success = int(all(e["success_score"] == 1 for e in events))
    return SampleScore(scores={"all_success": all_success}, details={"events": events})


def _events(truth: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    events = truth.get("events") or []
    return sorted(
        (e for e in events if isinstance(e, Mapping) and "time" in e), key=lambda e: float(e["time"])
    )


def _facts(truth: Mapping[str, Any], duration: float) -> list[_Fact]:
    events = _events(truth)
    facts: list[_Fact] = []
    for i, event in enumerate(events):
        end = float(events[i + 1]["time"]) if i + 1 < len(events) else duration
        facts.append(_Fact(float(event["time"]), end, _keywords(event)))
    for segment in truth.get("segments") or []:
        if isinstance(segment, Mapping) and segment.get("direction"):
            facts.append(
                _Fact(float(segment["start"]), float(segment["end"]), frozenset({segment["direction"]}))
            )
    if isinstance(truth.get("final_count"), int):
        facts.append(_Fact(0.0, duration, _number(truth["final_count"])))
    return [f for f in facts if f.keywords]


def _keywords(event: Mapping[str, Any]) -> frozenset[str]:
    words: set[str] = set()
    for key in ("colour", "text"):
        if isinstance(event.get(key), str) and event[key]:
            words.add(event[key].lower())
    if isinstance(event.get("count"), int):
        words |= _number(event["count"])
    if not words and isinstance(event.get("description"), str):
        words = {w for w in re.findall(r"[a-z]+", event["description"].lower()) if len(w) > 3}
    return frozenset(words)


def _number(n: int) -> frozenset[str]:
    return frozenset({str(n), _NUMBER_WORDS[n]} if 0 <= n < len(_NUMBER_WORDS) else {str(n)})


def _gap(fact: _Fact, start: float, end: float) -> float:
    """Seconds between the fact's span and the window (0 when they overlap)."""
    return max(0.0, fact.start - end, start - fact.end)


def _joined(sentences: Sequence[TimedSentence]) -> str:
    return " ".join(s.sentence for s in sentences)
