"""The OmniInteract LLM judge against a fake OpenAI-compatible endpoint (real socket, real openai SDK): the
calls it makes, lenient parsing with one follow-up, the trigger phrase's timing, and the pinned prompts."""

from __future__ import annotations

from typing import Any

import pytest

from duplexkit.bench.judge import ChatClient, ScoringError
from duplexkit.bench.omniinteract.judge import MAX_TOKENS, TEMPERATURE, LLMJudge
from duplexkit.bench.omniinteract.metrics import Chunk, Word
from duplexkit.bench.omniinteract.prompts import PROMPT_VERSION, PROMPTS, prompt_digest
from duplexkit.bench.omniinteract.scoring import CaseRequest
from duplexkit.bench.omniinteract.slots import Slot
from tests.bench.judge.conftest import FakeJudge, completion, is_follow_up, user_text

SLOT = Slot(0, 10.0, 14.0, 20.0, True, "realtime", False, "What is on the table?", "A red cup.")
WORDS = (("it", 15.0, 15.3), ("is", 15.3, 15.6), ("a", 15.6, 16.0), ("red", 16.0, 16.4), ("cup", 16.4, 17.0))
REQUEST = CaseRequest(
    split="1q1a",
    id="0001",
    slots=(SLOT,),
    chunks=(
        Chunk("hmm let me look", 11.0, 12.0),
        Chunk("it is a red cup", 15.0, 17.0, tuple(Word(*w) for w in WORDS)),
    ),
    ground_truth=None,
)


def judge(fake: FakeJudge) -> LLMJudge:
    chat = ChatClient(
        base_url=fake.url,
        model="fake-judge",
        api_key="test",
        concurrency=2,
        backoff_s=0.01,
        temperature=TEMPERATURE,
        max_tokens=MAX_TOKENS,
    )
    return LLMJudge(chat)


def replies(core_first: str | None = None) -> Any:
    def script(request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        text = user_text(request)
        if "has not come yet" in text:
            return completion('{"hallucination": 0, "ack_score": 0.5, "reasoning": "holding remark"}')
        if core_first is not None and not is_follow_up(request):
            return completion(core_first)
        return completion(
            'Sure. {"core_score": 0.9, "trigger_phrase": "Red cup", "spoiler": 0, "reasoning": "ok",}'
        )

    return script


async def test_a_slot_is_judged_early_and_core_and_scored_by_the_rules(fake_judge: FakeJudge) -> None:
    fake_judge.script = replies()
    the_judge = judge(fake_judge)
    try:
        result = await the_judge.score(REQUEST)
    finally:
        await the_judge.aclose()
    assert len(fake_judge.requests) == 2
    assert {r["temperature"] for r in fake_judge.requests} == {0.0}
    assert {r["max_tokens"] for r in fake_judge.requests} == {512}
    # the hand-computed case of test_metrics: TP_ack 0.075 + TP_core 0.48 (trigger "red cup" at 16.0 s)
    (slot,) = result.details["slots"]
    assert slot["tp"] == pytest.approx(0.555) and slot["core_start"] == 16.0
    assert result.scores["all_global/tp"] == pytest.approx(0.555)
    assert the_judge.info.prompt_version == PROMPT_VERSION and result.trace == []
    core = next(r for r in fake_judge.requests if "it is a red cup" in user_text(r))
    assert "A red cup." in user_text(core) and "What is on the table?" in user_text(core)


async def test_an_unparseable_reply_gets_one_follow_up_saying_why(fake_judge: FakeJudge) -> None:
    fake_judge.script = replies(core_first="It answers well, I would say.")
    the_judge = judge(fake_judge)
    try:
        result = await the_judge.score(REQUEST)
    finally:
        await the_judge.aclose()
    follow_ups = [r for r in fake_judge.requests if is_follow_up(r)]
    assert len(follow_ups) == 1
    assert "(the reply contains no JSON object)" in user_text(follow_ups[0], 1)
    assert [line["attempt"] for line in result.trace] == [1, 2]
    assert result.details["slots"][0]["tp"] == pytest.approx(0.555)


async def test_a_second_unparseable_reply_makes_the_case_an_error(fake_judge: FakeJudge) -> None:
    def never(request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if "has not come yet" in user_text(request):
            return completion('{"hallucination": 0, "ack_score": 1}')
        return completion("no idea")

    fake_judge.script = never
    the_judge = judge(fake_judge)
    try:
        with pytest.raises(ScoringError, match="did not parse after a follow-up") as failure:
            await the_judge.score(REQUEST)
    finally:
        await the_judge.aclose()
    assert len(failure.value.trace) == 2


def test_the_prompts_are_pinned_to_their_version() -> None:
    # changing any prompt text, reply format or the follow-up must bump PROMPT_VERSION and this digest
    assert PROMPT_VERSION == "duplexkit-omniinteract-judge-2"
    assert prompt_digest(PROMPTS.texts) == "e66f8d7958104e8ac1fd0eb166d4efd8d37baf2a13ee3ce4f9f015a53ee786dd"
