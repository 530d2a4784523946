"""The interruption relevance judge over a OpenAI-compatible server: prompt, parsing, follow-up."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from duplexkit.bench.fdb import judge as j
from duplexkit.bench.fdb.scoring import ScoreOptions, score_dir, score_folder
from duplexkit.bench.judge import ChatClient
from duplexkit.bench.judge.base import ScoringError
from duplexkit.bench.judge.parsing import ParseError
from duplexkit.bench.judge.settings import JudgeSettings
from tests.bench.fdb.conftest import FakeOpenAI
from tests.bench.fdb.helpers import sample_folder


def test_the_prompt_texts_are_pinned_to_their_version() -> None:
    # Changing a prompt text must bump PROMPT_VERSION and this digest together.
    assert (j.PROMPT_VERSION, j.prompt_digest()) == (
        "duplexkit-fdb-relevance-1",
        "7fdde8e932ff5796adf8dc373271ab928e8b3f8ca7e4ed7815f6010a1cbd1d12",
    )
    assert j.prompt_digest() == j.PROMPT_SHA256


@pytest.mark.parametrize(
    ("reply", "rating"),
    [
        ('{"analysis": "answers the new question", "relevance": 5}', 5),
        ('Sure! ```json\n{"analysis": "partly", "relevance": "3",}\n```', 3),
        ("analysis: drifts off. relevance: 1", 1),
        ("Analysis: it ignores the question.\nI would rate the AI's response as 0.", 0),
    ],
)
def test_lenient_parsing(reply: str, rating: int) -> None:
    assert j.parse_relevance(reply)[0] == rating


@pytest.mark.parametrize("reply", ["", "no idea", '{"relevance": 7}', '{"relevance": 2.5}'])
def test_unparseable_replies(reply: str) -> None:
    with pytest.raises(ParseError):
        j.parse_relevance(reply)


def _judge(fake: FakeOpenAI) -> j.RelevanceJudge:
    return j.RelevanceJudge(
        ChatClient(base_url=fake.url, model="judge-x", api_key="k", concurrency=2, backoff_s=0.01)
    )


async def test_a_rating_and_what_was_asked(fake_openai: FakeOpenAI) -> None:
    judge = _judge(fake_openai)
    try:
        rated = await judge.rate("Tell me about cats.", "What about dogs?", "dogs are loyal")
    finally:
        await judge.aclose()
    assert rated["relevance"] == 4 and rated["analysis"] == "on topic" and rated["trace"] == []
    (body,) = fake_openai.chat_requests
    assert body["model"] == "judge-x"
    assert body["messages"][0]["content"] == j.SYSTEM
    assert "What about dogs?" in body["messages"][1]["content"]
    assert "dogs are loyal" in body["messages"][1]["content"]


async def test_one_follow_up_then_an_error(fake_openai: FakeOpenAI) -> None:
    replies = iter(["I think it is fine", '{"relevance": 2}'])
    fake_openai.chat = lambda body: next(replies)
    judge = _judge(fake_openai)
    try:
        rated = await judge.rate("a", "b", "c")
        assert rated["relevance"] == 2 and len(rated["trace"]) == 2
        follow_up = fake_openai.chat_requests[1]["messages"]
        assert follow_up[2] == {"role": "assistant", "content": "I think it is fine"}
        assert "could not be read" in follow_up[3]["content"]
        fake_openai.chat = lambda body: "still nothing"
        with pytest.raises(ScoringError) as caught:
            await judge.rate("a", "b", "c")
        assert len(caught.value.trace) == 2 and len(fake_openai.chat_requests) == 4
    finally:
        await judge.aclose()


def test_scoring_rates_only_take_overs_and_records_the_judge(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    task = [{"context": "cats?", "interrupt": "dogs?", "timestamp": [2.0, 3.0]}]
    root = tmp_path / "interrupt"
    sample_folder(
        root / "i1", task_file="interrupt.json", task=task, words=[("dogs", 3.2, 3.6), ("bark", 3.7, 4.4)]
    )
    sample_folder(root / "i2", task_file="interrupt.json", task=task, words=[("hm", 3.2, 3.4)])

    async def go() -> dict:
        judge = _judge(fake_openai)
        try:
            return await score_dir(root, judge=judge, segmenter=lambda p: ([], 4.0))
        finally:
            await judge.aclose()

    scores = asyncio.run(go())
    entry = scores["tasks"]["interrupt"]
    assert entry["relevance"] == 4.0 and len(fake_openai.chat_requests) == 1
    assert {r["id"]: r["relevance"] for r in entry["per_sample"]} == {"i1": 4, "i2": None}
    assert scores["judge"]["prompt_version"] == j.PROMPT_VERSION and scores["judge"]["model"] == "judge-x"


def test_the_relevance_judge_sends_seed_0_as_upstream(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    task = [{"context": "cats?", "interrupt": "dogs?", "timestamp": [2.0, 3.0]}]
    root = tmp_path / "interrupt"
    sample_folder(
        root / "1", task_file="interrupt.json", task=task, words=[("dogs", 3.2, 3.6), ("bark", 3.7, 4.4)]
    )
    settings = JudgeSettings(url=fake_openai.url, model="judge-x", api_key="k")
    asyncio.run(score_folder(root, settings, ScoreOptions(), allow_invalid_clock=False, warn=print))
    (body,) = fake_openai.chat_requests
    assert body["seed"] == 0
