"""The argument judge: were a call's arguments right, given the expected ones? Through any OpenAI-compatible
endpoint (`bench.judge.client.ChatClient`), temperature 0, `seed: 0`, at most 200 tokens, one request per
(expected, actual) pair.

It also rates response quality as FDB-v3's `llm_judge_response` does (`response_quality`).

FDB-v3's judge (`llm_judge_argument`, gpt-4o) is told five rules: a `$`-reference (`$RESULT_0...`) accepts
any plausible value from an earlier call; formatting differences are fine ("August 20" = "2026-08-20",
case); common aliases and abbreviations are fine ("Vegas" = "Las Vegas"); numbers within ±5 %; `_` and a
space are the same in a document type. It answers `{"correct": true/false, "explanation": ...}`, possibly in
a ```json fence. The prompt below is duplexkit's own wording of those rules, versioned: any change to it
bumps `PROMPT_VERSION` (a test pins its sha256). As upstream, a reply that cannot be read falls back to the
exact-match rule (`metrics.exact_match`), and the verdict says so; a judge that cannot be reached is an
error, never a silent fallback.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from duplexkit.bench.fdb3.metrics import Verdict, exact_match
from duplexkit.bench.judge.base import JudgeInfo
from duplexkit.bench.judge.client import ChatClient

PROMPT_VERSION = "duplexkit-fdb3-2"
SEED = 0
TEMPERATURE = 0.0
MAX_TOKENS = 200

PROMPT = """You check whether a voice agent called a function with the right arguments.

Function: {function}
Expected arguments: {expected}
Arguments the agent sent: {actual}

Judge by these rules:
1. An expected value beginning with "$" (for example "$RESULT_0.flights[0].flight_id") refers to the result
   of an earlier call: any real value that such a result could plausibly hold is correct.
2. Formatting does not matter: "August 20" and "2026-08-20" are the same date; letter case does not matter.
3. Common aliases and abbreviations are correct ("Vegas" for "Las Vegas").
4. Numbers within 5 percent of the expected value are correct.
5. An underscore and a space are the same ("driver_license" is "driver license").

Reply with a JSON object and nothing else: {{"correct": true or false, "explanation": "<short reason>"}}"""

RESPONSE_PROMPT = """You check whether a voice agent completed what the user asked for.

What the agent should have done: "{expected}"
What the agent said: "{said}"

Judge by these criteria:
1. It took the right actions (the right tools with the right values).
2. What it said shows the task was done or is being handled.
3. Saying more than expected (results, prices, confirmation numbers) is fine, never a fault.
4. Saying it cannot do it, has no tool for it, or refusing is incorrect.
5. Doing something else (another destination, another document type) is incorrect.
6. Finishing only part of a task of several steps is incorrect.

Reply with a JSON object and nothing else: {{"correct": true or false, "explanation": "<short reason>"}}"""

PROMPT_SHA256 = "984af9c067928ce06daa9d99a979544eea1af7ef397f2f17fafb0023583869ad"
"""sha256 of the prompts of `PROMPT_VERSION` (recorded with every score; a test keeps the two together)."""
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def prompt_digest() -> str:
    """sha256 over the argument prompt and the response-quality prompt."""
    digest = hashlib.sha256()
    for text in (PROMPT, RESPONSE_PROMPT):
        digest.update(text.encode("utf-8") + b"\0")
    return digest.hexdigest()


def parse_verdict(text: str) -> Verdict:
    """`(correct, explanation)` from a judge reply (a JSON object, fenced or not, with a boolean `correct`);
    `ValueError` when there is none."""
    body = text.strip()
    if body.startswith("```"):
        lines = body.splitlines()[1:]
        if lines and lines[-1].strip().startswith("```"):
            lines = lines[:-1]
        body = "\n".join(lines).strip()
    match = _OBJECT.search(body)
    if match is None:
        raise ValueError("no JSON object in the reply")
    data = json.loads(match.group(0))
    if not isinstance(data, dict) or not isinstance(data.get("correct"), bool):
        raise ValueError('the reply has no boolean "correct"')
    return data["correct"], str(data.get("explanation", ""))


@dataclass
class ArgumentJudge:
    """Judges argument pairs through `chat` (built with temperature 0, seed 0, 200 tokens)."""

    chat: ChatClient

    @classmethod
    def over(
        cls, *, base_url: str, model: str, api_key: str, concurrency: int, timeout_s: float
    ) -> ArgumentJudge:
        return cls(
            ChatClient(
                base_url=base_url,
                model=model,
                api_key=api_key,
                concurrency=concurrency,
                timeout_s=timeout_s,
                temperature=TEMPERATURE,
                max_tokens=MAX_TOKENS,
                seed=SEED,
            )
        )

    @property
    def info(self) -> JudgeInfo:
        return JudgeInfo(
            kind="llm",
            model=self.chat.model,
            url=self.chat.base_url,
            prompt_version=PROMPT_VERSION,
            prompt_source=f"duplexkit sha256:{PROMPT_SHA256}",
        )

    async def judge(self, function: str, expected: Mapping[str, Any], actual: Mapping[str, Any]) -> Verdict:
        """The verdict on one pair; an unreadable reply falls back to the exact-match rule (said in the
        explanation). Raises the chat client's errors when the judge cannot be reached."""
        prompt = PROMPT.format(function=function, expected=json.dumps(expected), actual=json.dumps(actual))
        reply = await self.chat.complete([{"role": "user", "content": prompt}])
        try:
            return parse_verdict(reply)
        except ValueError as exc:
            correct, why = exact_match(expected, actual)
            return correct, f"judge reply unreadable ({exc}); exact match: {why}"

    async def response_quality(self, expected: str, said: str) -> tuple[float | None, str]:
        """FDB-v3's response quality: 1.0 when the whole answer completes the scenario's last expected `ai`
        turn, else 0.0; 0.0 without asking when nothing was said; `None` (no evidence, left out of the mean)
        when the reply cannot be read, as upstream."""
        if not said.strip():
            return 0.0, "No transcript available."
        reply = await self.chat.complete(
            [{"role": "user", "content": RESPONSE_PROMPT.format(expected=expected, said=said)}]
        )
        try:
            correct, why = parse_verdict(reply)
        except ValueError as exc:
            return None, f"judge reply unreadable ({exc})"
        return (1.0 if correct else 0.0), why

    async def aclose(self) -> None:
        await self.chat.aclose()
