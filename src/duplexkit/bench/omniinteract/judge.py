"""The OmniInteract LLM judge: each slot's early, core and partial verdicts as chat calls (text only).

Replies are parsed leniently with exactly one follow-up (`duplexkit.bench.judge.calls`); a second bad reply
or a refused request makes the case a `ScoringError`, an unreachable judge aborts the run. The reference
judge runs at temperature 0 with at most 512 reply tokens; `ChatClient` is built that way by the CLI.
"""

from __future__ import annotations

from typing import Literal

from duplexkit.bench.judge.base import JudgeInfo, SampleScore, ScoringError
from duplexkit.bench.judge.calls import JudgeCalls
from duplexkit.bench.judge.client import ChatClient, JudgeRequestError
from duplexkit.bench.judge.prompting import PromptSet
from duplexkit.bench.omniinteract import metrics as m
from duplexkit.bench.omniinteract.prompts import FIELDS, PROMPTS, TEXT_FIELDS
from duplexkit.bench.omniinteract.scoring import CaseRequest, score_case
from duplexkit.bench.omniinteract.slots import Slot

TEMPERATURE = 0.0
MAX_TOKENS = 512


class LLMJudge:
    """Scores OmniInteract cases by asking a judge model through `chat`."""

    def __init__(self, chat: ChatClient, prompts: PromptSet = PROMPTS) -> None:
        self._chat = chat
        self._prompts = prompts
        self.info = JudgeInfo(
            kind="llm",
            model=chat.model,
            url=chat.base_url,
            prompt_version=prompts.version,
            prompt_source=prompts.source,
        )

    async def aclose(self) -> None:
        await self._chat.aclose()

    async def score(self, request: CaseRequest) -> SampleScore:
        calls = JudgeCalls(self._chat, self._prompts, FIELDS, TEXT_FIELDS)
        try:
            result = await score_case(request, _LLMVerdicts(calls))
        except ScoringError as exc:
            raise ScoringError(str(exc), calls.trace()) from exc
        except JudgeRequestError as exc:
            raise ScoringError(f"judge refused a request: {exc}", calls.trace()) from exc
        result.trace = calls.trace()
        return result


class _LLMVerdicts:
    def __init__(self, calls: JudgeCalls) -> None:
        self._calls = calls

    async def early(self, slot: Slot, text: str, order: int) -> m.EarlyVerdict:
        values = {"question": slot.question, "reference": slot.reference, "response": text}
        verdict = await self._calls.ask("early", order, f"early[{slot.index}]", values)
        label: Literal["neutral", "hallucination"] = (
            "hallucination" if verdict.values["hallucination"] == 1 else "neutral"
        )
        return m.EarlyVerdict(label, verdict.values["ack_score"])

    async def core(self, slot: Slot, text: str, order: int) -> m.CoreVerdict:
        values = {
            "question": slot.question,
            "reference": slot.reference,
            "later_references": "; ".join(slot.later_references) or "(none)",
            "response": text,
        }
        verdict = await self._calls.ask("core", order, f"core[{slot.index}]", values)
        phrase = verdict.texts.get("trigger_phrase") or None
        return m.CoreVerdict(verdict.values["core_score"], phrase, verdict.values["spoiler"] == 1)

    async def partial(self, slot: Slot, text: str, order: int) -> m.PartialVerdict:
        values = {"question": slot.question, "reference": slot.reference, "response": text}
        verdict = await self._calls.ask("partial", order, f"partial[{slot.index}]", values)
        return m.PartialVerdict(verdict.values["quality"], verdict.values["hallucination"] == 1)
