"""LiveKit Agents' OpenAI realtime model (livekit-agents / livekit-plugins-openai 1.8.9, unchanged, with
`base_url` pointed at our server) makes a tool call and hears the spoken answer.

What it needs from a server (read in its `livekit/agents/llm/_realtime/openai.py`): `response.created`
echoing the `response.metadata.client_event_id` of its `response.create` (else `generate_reply` times
out after 10 s), function calls from `response.output_item.done`, `conversation.item.added` echoing the
id of each item it creates (else `update_chat_ctx` times out after 5 s), and `previous_item_id`s that name
items it was told about (else it warns "placed a chat history item after an unknown item").
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import numpy as np
import pytest

from duplexkit.models import ModelPlugin
from duplexkit.server import EmbeddedServer
from tests.server.conftest import weather_tool_plugin

lk_openai = pytest.importorskip("livekit.plugins.openai", reason="needs livekit-plugins-openai (dev extra)")
from livekit import rtc  # noqa: E402
from livekit.agents import llm  # noqa: E402


@pytest.fixture
def plugin() -> ModelPlugin:
    return weather_tool_plugin()


@llm.function_tool
async def get_weather(city: str) -> str:
    """The current weather in a city."""
    return "21 degrees"


def _speech_frame(seconds: float = 1.0, rate: int = 24_000) -> rtc.AudioFrame:
    t = np.arange(round(rate * seconds)) / rate
    pcm = (0.2 * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2")
    return rtc.AudioFrame(pcm.tobytes(), rate, 1, len(pcm))


async def _spoken(generation: llm.GenerationCreatedEvent) -> tuple[str, int]:
    """The text and the number of audio samples of a generation's messages."""
    text, samples = [], 0
    async for message in generation.message_stream:
        async for chunk in message.text_stream:
            text.append(chunk)
        async for frame in message.audio_stream:
            samples += frame.samples_per_channel
    return "".join(text), samples


async def test_livekit_realtime_model_calls_a_tool_and_hears_the_answer(
    server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    model = lk_openai.realtime.RealtimeModel(
        base_url=f"{server.http_url}/v1", api_key="unused", model="scripted", turn_detection=None
    )
    session = model.session()
    generations: asyncio.Queue[llm.GenerationCreatedEvent] = asyncio.Queue()
    session.on("generation_created", generations.put_nowait)
    try:
        await session.update_tools([get_weather])
        session.push_audio(_speech_frame())
        session.commit_audio()  # a duplex model answers the committed turn by itself
        asked = await asyncio.wait_for(generations.get(), 15)
        calls: list[Any] = []
        async with asyncio.timeout(15):
            async for call in asked.function_stream:
                calls.append(call)
        [call] = calls
        assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
        context = session.chat_ctx.copy()
        context.items.append(
            llm.FunctionCallOutput(call_id=call.call_id, name=call.name, output="21 degrees", is_error=False)
        )
        await session.update_chat_ctx(context)  # waits for our echo of its item id
        answered = await asyncio.wait_for(session.generate_reply(), 15)  # waits for the metadata echo
        assert answered.user_initiated
        text, samples = await asyncio.wait_for(_spoken(answered), 15)
        assert text == "It is 21 degrees." and samples > 0
    finally:
        await session.aclose()
        await model.aclose()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [w for w in warnings if "unknown item" in w or "timed out" in w], warnings
