"""The interruption relevance judge: how well the model's reply after an interruption answers it, 0 to 5.

FDB asks an LLM (upstream `gpt-4-turbo`, seed 0) to rate the reply given the user's context turn and the
interrupting turn. The prompt below is duplexkit's own wording of that rubric, versioned: any change to the
texts must bump `PROMPT_VERSION` (a test pins their sha256 to the version). The judge runs over any
OpenAI-compatible endpoint through the harness's `ChatClient`; its reply is read leniently
(`judge.parsing`: a JSON object, or `relevance: N` anywhere, or the sentence "I rate the reply N"); a reply
that does not parse gets exactly one follow-up naming the problem, then the sample is a `ScoringError`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from openai.types.chat import ChatCompletionMessageParam

from duplexkit.bench.judge.base import JudgeInfo, ScoringError
from duplexkit.bench.judge.client import ChatClient
from duplexkit.bench.judge.parsing import Field, ParseError, parse_reply

PROMPT_VERSION = "duplexkit-fdb-relevance-1"
RELEVANCE_SEED = 0
"""The sampling seed every relevance request sends, as upstream's scorer does."""

SYSTEM = """You judge spoken conversations between a user and a voice assistant.
The user spoke a first turn; the assistant began to answer; while it was talking, the user cut in with a
new turn. You read what the assistant said after being cut in on, and rate how well it responds to the
user's interrupting turn (not to the first turn), on a scale of whole numbers from 0 to 5:
0 it has nothing to do with the interrupting turn; 1 it barely touches it; 2 it is loosely connected;
3 it addresses it; 4 it addresses it well; 5 it addresses it fully and directly.
Think briefly about what the user wanted when cutting in and whether the reply gives it.
Answer with one JSON object and nothing else: {"analysis": "<one or two sentences>", "relevance": <0-5>}"""

USER = """First user turn: {context}
Interrupting user turn: {interrupt}
Assistant's reply after the interruption: {reply}"""

FOLLOW_UP = """Your answer could not be read: {error}. Reply again with only the JSON object
{{"analysis": "<one or two sentences>", "relevance": <a whole number from 0 to 5>}}."""

_TEXTS = (SYSTEM, USER, FOLLOW_UP)
PROMPT_SHA256 = "7fdde8e932ff5796adf8dc373271ab928e8b3f8ca7e4ed7815f6010a1cbd1d12"
"""sha256 of the texts of `PROMPT_VERSION` (recorded with every score; a test keeps the two together)."""
_RELEVANCE = Field("relevance", 0, 5, whole=True)
_SENTENCE = re.compile(r"\brat(?:e|ing)\b[^0-9\n]{0,40}?\b([0-5])\b", re.IGNORECASE)


def prompt_digest() -> str:
    """sha256 over the system prompt, the user template and the follow-up."""
    digest = hashlib.sha256()
    for text in _TEXTS:
        digest.update(text.encode("utf-8") + b"\0")
    return digest.hexdigest()


def parse_relevance(text: str) -> tuple[int, str]:
    """The 0-5 rating and the analysis in a judge reply; `ParseError` when there is no rating in it."""
    try:
        verdict = parse_reply(text, [_RELEVANCE])
    except ParseError:
        match = _SENTENCE.search(text)
        if match is None:
            raise
        return int(match.group(1)), text.strip()[:500]
    obj_analysis = re.search(r'"analysis"\s*:\s*"((?:[^"\\]|\\.)*)"', text)
    return int(verdict.values["relevance"]), obj_analysis.group(1) if obj_analysis else verdict.reasoning


@dataclass
class RelevanceJudge:
    """Rates interruption replies through `chat`."""

    chat: ChatClient

    @property
    def info(self) -> JudgeInfo:
        return JudgeInfo(
            kind="llm",
            model=self.chat.model,
            url=self.chat.base_url,
            prompt_version=PROMPT_VERSION,
            prompt_source=f"duplexkit sha256:{PROMPT_SHA256}",
        )

    async def rate(self, context: str, interrupt: str, reply: str) -> dict[str, Any]:
        """`{"relevance", "analysis", "trace"}`; `ScoringError` when the follow-up does not parse either."""
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": USER.format(context=context, interrupt=interrupt, reply=reply)},
        ]
        first = await self.chat.complete(messages)
        try:
            rating, analysis = parse_relevance(first)
            return {"relevance": rating, "analysis": analysis, "trace": []}
        except ParseError as exc:
            error = str(exc)
        follow_up = FOLLOW_UP.format(error=error)
        messages += [{"role": "assistant", "content": first}, {"role": "user", "content": follow_up}]
        second = await self.chat.complete(messages)
        trace = [{"attempt": 1, "reply": first, "parse_error": error}, {"attempt": 2, "reply": second}]
        try:
            rating, analysis = parse_relevance(second)
        except ParseError as exc:
            raise ScoringError(f"relevance: the reply did not parse after a follow-up: {exc}", trace) from exc
        return {"relevance": rating, "analysis": analysis, "trace": trace}

    async def aclose(self) -> None:
        await self.chat.aclose()
