"""The judge's chat client against a fake OpenAI-compatible server on loopback."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from duplexkit.bench.judge import ChatClient, ContextOverflow, JudgeRequestError, JudgeUnreachable
from tests.bench.judge.conftest import FakeJudge, Reply, completion, error

MESSAGES: list[Any] = [{"role": "user", "content": "grade this"}]


def _client(fake: FakeJudge, *, retries: int = 4, concurrency: int = 4) -> ChatClient:
    return ChatClient(
        base_url=fake.url,
        model="fake-judge",
        api_key="k",
        concurrency=concurrency,
        retries=retries,
        backoff_s=0.01,
    )


def _sequence(*replies: Reply) -> Any:
    queue = list(replies)
    return lambda _request: queue.pop(0) if len(queue) > 1 else queue[0]


async def test_a_reply_is_the_text_of_the_choice_that_has_text(fake_judge: FakeJudge) -> None:
    fake_judge.script = lambda _r: completion(None, "", '{"success_score": 1}', "second text")
    client = _client(fake_judge)
    assert await client.complete(MESSAGES) == '{"success_score": 1}'
    (request,) = fake_judge.requests
    assert request["temperature"] == 0.1 and request["model"] == "fake-judge"
    await client.aclose()


async def test_429_and_5xx_are_retried_with_backoff(fake_judge: FakeJudge) -> None:
    fake_judge.script = _sequence(error(429, "slow down"), error(503, "busy"), completion("ok"))
    client = _client(fake_judge)
    assert await client.complete(MESSAGES) == "ok"
    assert len(fake_judge.requests) == 3
    await client.aclose()


async def test_retries_run_out(fake_judge: FakeJudge) -> None:
    fake_judge.script = lambda _r: error(429, "slow down")
    client = _client(fake_judge, retries=2)
    with pytest.raises(JudgeRequestError, match="HTTP 429: slow down"):
        await client.complete(MESSAGES)
    assert len(fake_judge.requests) == 3
    await client.aclose()


async def test_context_overflow_is_not_retried(fake_judge: FakeJudge) -> None:
    fake_judge.script = lambda _r: error(400, "This model's maximum context length is 32768 tokens.")
    client = _client(fake_judge)
    with pytest.raises(ContextOverflow):
        await client.complete(MESSAGES)
    assert len(fake_judge.requests) == 1
    await client.aclose()


async def test_other_client_errors_fail_at_once(fake_judge: FakeJudge) -> None:
    fake_judge.script = lambda _r: error(404, "no such model")
    client = _client(fake_judge)
    with pytest.raises(JudgeRequestError, match="HTTP 404: no such model") as caught:
        await client.complete(MESSAGES)
    assert not isinstance(caught.value, ContextOverflow)
    assert len(fake_judge.requests) == 1
    await client.aclose()


async def test_an_unreachable_judge_after_retries() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = ChatClient(
        base_url=f"http://127.0.0.1:{port}/v1",
        model="m",
        api_key="k",
        concurrency=1,
        retries=1,
        backoff_s=0.01,
    )
    with pytest.raises(JudgeUnreachable, match="unreachable"):
        await client.complete(MESSAGES)
    await client.aclose()


async def test_a_request_that_times_out_fails_without_aborting(fake_judge: FakeJudge) -> None:
    fake_judge.delay_s = 0.5
    client = ChatClient(
        base_url=fake_judge.url,
        model="m",
        api_key="k",
        concurrency=1,
        timeout_s=0.05,
        retries=1,
        backoff_s=0.01,
    )
    with pytest.raises(JudgeRequestError, match="no reply within the timeout, 2 attempts"):
        await client.complete(MESSAGES)
    await client.aclose()


async def test_concurrency_is_bounded(fake_judge: FakeJudge) -> None:
    fake_judge.delay_s = 0.05
    client = _client(fake_judge, concurrency=2)
    await asyncio.gather(*(client.complete(MESSAGES) for _ in range(6)))
    assert len(fake_judge.requests) == 6
    assert fake_judge.max_in_flight == 2
    await client.aclose()
