"""Responders: echo, and a streamed chat completion from an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai import APIStatusError, AsyncOpenAI

from duplexkit.models.base import SamplingParams
from duplexkit.models.cascade.responders import (
    DEFAULT_INSTRUCTIONS,
    EchoResponder,
    LocalResponder,
    Message,
    OpenAIResponder,
    ToolCallRequest,
)
from duplexkit.protocol.client_events import FunctionTool


async def collect(
    responder: EchoResponder | OpenAIResponder, history: list[Message], sampling: SamplingParams
) -> list[str]:
    return [delta async for delta in responder.reply(history, sampling)]


async def test_echo_says_back_the_last_user_message() -> None:
    history = [
        Message("user", "hello"),
        Message("assistant", "You said: hello."),
        Message("user", "what time is it?"),
    ]
    assert await collect(EchoResponder(), history, SamplingParams()) == ["You said: what time is it."]


def _sse(*deltas: str) -> bytes:
    chunks = [
        {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": delta}, "finish_reason": None}],
        }
        for delta in deltas
    ]
    lines = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
    return ("".join(lines) + "data: [DONE]\n\n").encode()


async def test_openai_streams_deltas_and_sends_the_history_with_the_session_settings() -> None:
    requests: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(json.loads(request.content))
        return httpx.Response(
            200, content=_sse("It is ", "noon."), headers={"content-type": "text/event-stream"}
        )

    client = AsyncOpenAI(
        base_url="http://llm.test/v1",
        api_key="k",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
    )
    history = [Message("user", "hi"), Message("assistant", "Hello th"), Message("user", "what time is it")]
    sampling = SamplingParams(temperature=0.2, max_tokens=64)
    assert await collect(OpenAIResponder(client, "tiny"), history, sampling) == ["It is ", "noon."]
    (sent,) = requests
    assert sent["model"] == "tiny" and sent["stream"] is True
    assert sent["temperature"] == 0.2 and sent["max_tokens"] == 64
    assert sent["messages"] == [
        {"role": "system", "content": DEFAULT_INSTRUCTIONS},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello th"},
        {"role": "user", "content": "what time is it"},
    ]


async def test_openai_uses_the_session_instructions_and_surfaces_http_errors() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["messages"][0] == {"role": "system", "content": "Be terse."}
        return httpx.Response(503, json={"error": {"message": "overloaded"}})

    client = AsyncOpenAI(
        base_url="http://llm.test/v1",
        api_key="k",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
    )
    with pytest.raises(APIStatusError, match="overloaded"):
        await collect(
            OpenAIResponder(client, "tiny"), [Message("user", "hi")], SamplingParams(instructions="Be terse.")
        )


def test_connect_builds_a_client_for_the_url() -> None:
    responder = OpenAIResponder.connect("http://127.0.0.1:9/v1", "tiny", api_key="k")
    assert responder.name == "openai"


async def test_the_local_llm_streams_a_short_spoken_answer_token_by_token(local: LocalResponder) -> None:
    history = [Message("user", "Hello! How are you today?")]
    deltas = [d async for d in local.reply(history, SamplingParams(temperature=0.0, max_tokens=40))]
    assert len(deltas) > 3 and all(isinstance(d, str) for d in deltas)
    text = "".join(deltas)
    assert len(text.split()) >= 3 and "<|" not in text  # words, not template markup


async def test_dropping_a_local_reply_stops_its_generation(local: LocalResponder) -> None:
    stream = local.reply([Message("user", "Tell me a long story.")], SamplingParams(max_tokens=200))
    first = await anext(stream)
    await stream.aclose()  # a prepared reply the user talked over
    assert first
    again = [d async for d in local.reply([Message("user", "Say hi.")], SamplingParams(max_tokens=10))]
    assert again  # the model is free again: the dropped generation gave it back


async def test_a_prompt_sharing_the_conversation_so_far_evaluates_only_what_follows_it(
    local: LocalResponder,
) -> None:
    greedy = SamplingParams(temperature=0.0, max_tokens=12)
    first = [Message("user", "What is the capital of France?")]
    said = "".join([d async for d in local.reply(first, greedy)])
    history = [*first, Message("assistant", said), Message("user", "And of Italy?")]
    reused = "".join([d async for d in local.reply(history, greedy)])
    llm = local._llm
    assert 0 < llm.evaluated < 20  # the new turn only: system prompt, question and answer were held
    assert len(reused.split()) >= 1 and "<|" not in reused
    assert llm._ctx.memory_seq_pos_max(0) == len(llm.held) - 1  # the context holds exactly those tokens
    other = [Message("user", "Name a colour.")]  # shares only the system prompt
    assert "".join([d async for d in local.reply(other, greedy)])
    assert 5 < llm.evaluated < len(llm.held)
    assert llm._ctx.memory_seq_pos_max(0) == len(llm.held) - 1


def _sse_chunks(*deltas: dict[str, object], finish: str) -> bytes:
    chunks = [{"index": 0, "delta": delta, "finish_reason": None} for delta in deltas]
    chunks.append({"index": 0, "delta": {}, "finish_reason": finish})
    body = [
        {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [choice]}
        for choice in chunks
    ]
    return ("".join(f"data: {json.dumps(chunk)}\n\n" for chunk in body) + "data: [DONE]\n\n").encode()


async def test_openai_offers_the_session_tools_and_yields_streamed_calls_after_the_text() -> None:
    requests: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(json.loads(request.content))
        body = _sse_chunks(
            {"role": "assistant", "content": "One moment. "},
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "x1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            },
            {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]},
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "x2",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": "{}"},
                    }
                ]
            },
            {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]},
            finish="tool_calls",
        )
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    client = AsyncOpenAI(
        base_url="http://llm.test/v1",
        api_key="k",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
    )
    weather = FunctionTool(name="get_weather", description="Weather.", parameters={"type": "object"})
    sampling = SamplingParams(tools=(weather, FunctionTool(name="get_time")), tool_choice="required")
    earlier = ToolCallRequest("call_0", "get_time", "{}")
    history = [
        Message("user", "time?"),
        Message("assistant", "", calls=(earlier,)),
        Message("tool", "noon", call_id="call_0"),
        Message("assistant", "It is noon."),
        Message("user", "weather in Paris and the time?"),
    ]
    out = [d async for d in OpenAIResponder(client, "m").reply(history, sampling)]
    assert out[0] == "One moment. "
    calls = out[1:]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {}),
    ]
    assert len({c.call_id for c in calls}) == 2
    (sent,) = requests
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {"name": "get_weather", "description": "Weather.", "parameters": {"type": "object"}},
        },
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
    ]
    assert sent["tool_choice"] == "required"
    assert sent["messages"][2:4] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_0", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "noon"},
    ]


async def test_openai_sends_no_tools_when_the_session_offers_none() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert "tools" not in json.loads(request.content)
        return httpx.Response(200, content=_sse("ok"), headers={"content-type": "text/event-stream"})

    client = AsyncOpenAI(
        base_url="http://llm.test/v1",
        api_key="k",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
    )
    assert await collect(OpenAIResponder(client, "m"), [Message("user", "hi")], SamplingParams()) == ["ok"]
