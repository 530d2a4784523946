"""The LLM judge: the Omni-DuplexEval rubric as chat calls to a judge model.

- RTD temporal: one call per sentence whose window is valid (see `windows`), with the window's frames at
  2 fps. The sample's `avg_temporal_score` is the mean `temporal_score` over the valid sentences the judge
  marks relevant (0 if none).
- RTD content: one call with every sentence, the question, the references and one frame per 3 s (at most
  16). When the judge answers that the request overflows its context, the frames are halved (evenly
  thinned) and the call retried, down to one frame. No sentences: `content_score` 0 without a call.
- PR: a correction sample, or one without reminder times, is one call on the whole response against
  `answer1` (an empty response scores 0 without a call). An event / post-event sample is one call per
  reminder time t on the sentences starting in [t, t + 10 s]; an empty window scores 0 without a call.
  `all_success` is 1 only if every event succeeds.
- A reply that does not parse gets exactly one follow-up quoting it and the parse error; both attempts go
  to the sample's trace. A second failure, a refused request or an unreadable video makes the sample a
  `ScoringError`; an unreachable judge (`JudgeUnreachable`) aborts the run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from duplexkit.bench.judge.base import JudgeInfo, SampleScore, ScoringError
from duplexkit.bench.judge.calls import JudgeCalls
from duplexkit.bench.judge.client import ChatClient, ContextOverflow, JudgeRequestError
from duplexkit.bench.judge.frames import VideoError, extract_jpegs
from duplexkit.bench.judge.parsing import Field, Verdict
from duplexkit.bench.judge.prompting import PromptSet
from duplexkit.bench.omni_duplex_eval.prompts import BUILTIN_PROMPTS
from duplexkit.bench.omni_duplex_eval.request import ScoreRequest
from duplexkit.bench.omni_duplex_eval.windows import (
    REMINDER_WINDOW_S,
    Window,
    content_frame_times,
    sentence_window,
    sentences_after,
    window_frame_times,
    window_is_valid,
)
from duplexkit.client.sentences import TimedSentence

_SUCCESS = (Field("success_score", 0, 1, whole=True),)
FIELDS: Mapping[str, tuple[Field, ...]] = {
    "rtd_temporal": (Field("temporal_score", 0, 3, whole=True), Field("is_relevant", 0, 1, whole=True)),
    "rtd_content": (Field("content_score", 0, 3, whole=False),),
    "pr_correction": _SUCCESS,
    "pr_event_reminder": _SUCCESS,
    "pr_post_event_reminder": _SUCCESS,
}
"""The fields each prompt's reply must carry."""


class LLMJudge:
    """Scores samples by asking a judge model through `chat`, with `prompts` (ours unless a protocol dir)."""

    def __init__(
        self,
        chat: ChatClient,
        prompts: PromptSet = BUILTIN_PROMPTS,
        *,
        reminder_window_s: float = REMINDER_WINDOW_S,
    ) -> None:
        self._chat = chat
        self._prompts = prompts
        self._reminder_window_s = reminder_window_s
        self.info = JudgeInfo(
            kind="llm",
            model=chat.model,
            url=chat.base_url,
            prompt_version=prompts.version,
            prompt_source=prompts.source,
            reminder_window_s=reminder_window_s,
        )

    async def aclose(self) -> None:
        await self._chat.aclose()

    async def score(self, request: ScoreRequest) -> SampleScore:
        calls = JudgeCalls(self._chat, self._prompts, FIELDS)
        try:
            if request.family == "rtd":
                scores, details = await _score_rtd(request, calls)
            else:
                scores, details = await _score_pr(request, calls, self._reminder_window_s)
        except ScoringError as exc:
            raise ScoringError(str(exc), calls.trace()) from exc
        except JudgeRequestError as exc:
            raise ScoringError(f"judge refused a request: {exc}", calls.trace()) from exc
        return SampleScore(scores=scores, details=details, trace=calls.trace())


async def _score_rtd(request: ScoreRequest, calls: JudgeCalls) -> tuple[dict[str, float], dict[str, Any]]:
    duration = request.video_duration
    if duration is None or duration <= 0:
        raise ScoringError("the sample has no video_duration")
    windows = [sentence_window(s.start, s.end) for s in request.sentences]
    judged = [i for i, w in enumerate(windows) if window_is_valid(w, duration)]
    window_times = {i: window_frame_times(windows[i]) for i in judged}
    overview_times = content_frame_times(duration) if request.sentences else []
    frames = await _frames(request, [t for times in window_times.values() for t in times] + overview_times)

    outcomes = await asyncio.gather(
        _content(request, calls, [frames[t] for t in overview_times]),
        *(_temporal(request, calls, i, windows[i], [frames[t] for t in window_times[i]]) for i in judged),
        return_exceptions=True,
    )
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    content, *verdicts = outcomes
    assert isinstance(content, dict)
    by_sentence = dict(zip(judged, verdicts, strict=True))
    sentences: list[dict[str, Any]] = []
    relevant: list[float] = []
    for i, (sentence, window) in enumerate(zip(request.sentences, windows, strict=True)):
        record: dict[str, Any] = {**sentence.to_json(), "window": [window.start, window.end]}
        verdict = by_sentence.get(i)
        if isinstance(verdict, Verdict):
            record |= {"valid": True, **verdict.values, "reasoning": verdict.reasoning}
            if verdict.values["is_relevant"] == 1:
                relevant.append(verdict.values["temporal_score"])
        else:
            record["valid"] = False
        sentences.append(record)
    average = round(sum(relevant) / len(relevant), 4) if relevant else 0.0
    scores = {"content_score": content["content_score"], "avg_temporal_score": average}
    return scores, {"content": content, "temporal": {"relevant_valid": len(relevant), "sentences": sentences}}


async def _frames(request: ScoreRequest, times: list[float]) -> dict[float, bytes]:
    if not times:
        return {}
    try:
        video = await asyncio.to_thread(request.load_video)
    except (OSError, ValueError) as exc:
        raise ScoringError(f"cannot read the sample's video: {exc}") from exc
    if video is None:
        raise ScoringError("the run's dataset has no video for this sample")
    try:
        return await asyncio.to_thread(extract_jpegs, video, times)
    except VideoError as exc:
        raise ScoringError(str(exc)) from exc


async def _temporal(
    request: ScoreRequest, calls: JudgeCalls, index: int, window: Window, jpegs: list[bytes]
) -> Verdict:
    sentence = request.sentences[index]
    values = {
        "question": request.question,
        "sentence": sentence.sentence,
        "window_start": _seconds(window.start),
        "window_end": _seconds(window.end),
    }
    return await calls.ask("rtd_temporal", index + 1, f"rtd_temporal[{index}]", values, jpegs)


async def _content(request: ScoreRequest, calls: JudgeCalls, jpegs: list[bytes]) -> dict[str, Any]:
    if not request.sentences:
        return {"content_score": 0.0, "judged": False, "reasoning": "no response"}
    references = [a for a in (request.answer1, request.answer2) if a]
    values = {
        "question": request.question,
        "references": "\n".join(f"- {a}" for a in references) or "(none)",
        "sentences": _timed_lines(request.sentences),
    }
    shown, overflows = jpegs, 0
    while True:
        try:
            verdict = await calls.ask("rtd_content", 0, "rtd_content", values, shown)
        except ContextOverflow as exc:
            if len(shown) <= 1:
                raise ScoringError(
                    f"rtd_content overflows the judge's context even with one frame: {exc}"
                ) from exc
            shown, overflows = _halve(shown), overflows + 1
            continue
        return {
            "content_score": verdict.values["content_score"],
            "judged": True,
            "reasoning": verdict.reasoning,
            "frames": len(shown),
            "context_overflows": overflows,
        }


def _halve(frames: Sequence[bytes]) -> list[bytes]:
    """Half the frames (rounded down, at least one), evenly thinned across the video."""
    keep = max(1, len(frames) // 2)
    return [frames[int((i + 0.5) * len(frames) / keep)] for i in range(keep)]


async def _score_pr(
    request: ScoreRequest, calls: JudgeCalls, window_s: float
) -> tuple[dict[str, float], dict[str, Any]]:
    if request.task == "correction" or not request.reminders:
        response = _joined(request.sentences)
        values = {"question": request.question, "reference": request.answer1 or "", "response": response}
        event = await _success(calls, "pr_correction", 0, "pr_correction", values)
        events = [{"event_time": None, "response": response, **event}]
    else:
        name = "pr_post_event_reminder" if request.task == "post_event_reminder" else "pr_event_reminder"
        outcomes = await asyncio.gather(
            *(_reminder(request, calls, name, i, t, window_s) for i, t in enumerate(request.reminders)),
            return_exceptions=True,
        )
        events = []
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            events.append(outcome)
    all_success = int(all(e["success_score"] == 1 for e in events))
    return {"all_success": all_success}, {"events": events}


async def _reminder(
    request: ScoreRequest, calls: JudgeCalls, name: str, index: int, t: float, window_s: float
) -> dict[str, Any]:
    end = t + window_s
    response = _joined(sentences_after(request.sentences, t, window_s))
    values = {
        "question": request.question,
        "event_time": _seconds(t),
        "window_end": _seconds(end),
        "response": response,
    }
    event = await _success(calls, name, index, f"{name}[{index}]", values)
    return {"event_time": t, "window": [t, end], "response": response, **event}


async def _success(
    calls: JudgeCalls, name: str, order: int, label: str, values: Mapping[str, str]
) -> dict[str, Any]:
    if not values["response"]:
        return {"judged": False, "success_score": 0, "reasoning": "nothing said in the window"}
    verdict = await calls.ask(name, order, label, values)
    return {"judged": True, "success_score": verdict.values["success_score"], "reasoning": verdict.reasoning}


def _joined(sentences: Sequence[TimedSentence]) -> str:
    return " ".join(s.sentence.strip() for s in sentences).strip()


def _timed_lines(sentences: Sequence[TimedSentence]) -> str:
    return "\n".join(f"[{_seconds(s.start)} s] {s.sentence.strip()}" for s in sentences)


def _seconds(t: float) -> str:
    return f"{t:.2f}"
