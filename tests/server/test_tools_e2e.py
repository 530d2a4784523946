"""Function calls over a real socket with clients nobody here wrote: the `openai` SDK's GA and beta realtime
connections declare a tool, hear the scripted model call it, send the output and hear the spoken answer;
a stale output gets its code and the session goes on, and a model that cannot call tools takes them."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from openai import AsyncOpenAI

from duplexkit.models import ModelPlugin
from duplexkit.models.scripted import ScriptedModel, ScriptedParams
from duplexkit.server import EmbeddedServer
from tests.server.conftest import connect, spoken_turn, weather_tool_plugin

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def plugin() -> ModelPlugin:
    return weather_tool_plugin()


def _speech(rate: int, seconds: float = 1.0) -> str:
    t = np.arange(round(rate * seconds)) / rate
    return base64.b64encode((0.2 * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2").tobytes()).decode()


def _sdk(server: EmbeddedServer) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key="unused", base_url=f"{server.http_url}/v1", websocket_base_url=server.url[: -len("/realtime")]
    )


async def _until(connection: Any, wanted: str, seen: list[Any]) -> Any:
    async with asyncio.timeout(10):
        async for event in connection:
            seen.append(event)
            if event.type == "error" and wanted != "error":
                raise AssertionError(event.error)
            if event.type == wanted:
                return event
    raise AssertionError(f"connection ended before {wanted}")


@pytest.mark.parametrize("api", ["ga", "beta"])
async def test_the_openai_sdk_calls_a_tool_and_hears_the_answer(server: EmbeddedServer, api: str) -> None:
    sdk = _sdk(server)
    connect = sdk.realtime.connect if api == "ga" else sdk.beta.realtime.connect
    seen: list[Any] = []
    async with connect(model="scripted") as connection:
        session: dict[str, Any] = {"tools": [WEATHER], "tool_choice": "auto"}
        if api == "ga":
            session["type"] = "realtime"
        await connection.session.update(session=session)  # type: ignore[arg-type]
        updated = await _until(connection, "session.updated", seen)
        tools = updated.session.tools
        assert [(t.name, t.parameters) for t in tools] == [("get_weather", WEATHER["parameters"])]
        await connection.input_audio_buffer.append(audio=_speech(24_000))  # OpenAI's PCM rate, in both APIs
        await connection.input_audio_buffer.commit()
        args_done = await _until(connection, "response.function_call_arguments.done", seen)
        # GA names the function on this event; the beta event has no such field
        assert getattr(args_done, "name", None) == ("get_weather" if api == "ga" else None)
        assert json.loads(args_done.arguments) == {"city": "Paris"}
        done = await _until(connection, "response.done", seen)
        [call] = done.response.output
        assert (call.type, call.call_id, call.name) == ("function_call", args_done.call_id, "get_weather")
        added = "conversation.item.added" if api == "ga" else "conversation.item.created"
        assert any(e.type == added and e.item.type == "function_call" for e in seen)
        await connection.conversation.item.create(
            item={"type": "function_call_output", "call_id": call.call_id, "output": "21 degrees"}
        )
        await connection.response.create()
        answer = await _until(connection, "response.done", seen)
        assert answer.response.status == "completed"
        transcript = (
            "response.output_audio_transcript.done" if api == "ga" else "response.audio_transcript.done"
        )
        assert [e.transcript for e in seen if e.type == transcript] == ["It is 21 degrees."]


async def test_a_stale_output_joins_the_conversation_and_the_session_goes_on(server: EmbeddedServer) -> None:
    """OpenAI takes the output of any call in the conversation: one a barge-in retired is an item
    (`conversation.item.added`/`done`), never an `error` (Pipecat ends its connection on one), and the
    model is not asked to answer it."""
    seen: list[Any] = []
    async with _sdk(server).realtime.connect(model="scripted") as connection:
        await connection.session.update(session={"type": "realtime", "tools": [WEATHER]})  # type: ignore[list-item]
        await connection.input_audio_buffer.append(audio=_speech(24_000))
        await connection.input_audio_buffer.commit()
        done = await _until(connection, "response.done", seen)
        call_id = done.response.output[0].call_id
        await connection.send({"type": "barge_in"})  # type: ignore[arg-type]  # the user cut in
        await connection.conversation.item.create(
            item={"type": "function_call_output", "call_id": call_id, "output": "late"}
        )
        added = await _until(connection, "conversation.item.done", seen)
        assert (added.item.type, added.item.call_id) == ("function_call_output", call_id)
        await connection.conversation.item.create(
            item={"type": "function_call_output", "call_id": "call_never_made", "output": "x"}
        )
        assert (await _until(connection, "error", seen)).error.code == "unknown_function_call"
        assert [e.type for e in seen].count("error") == 1  # the stale output's was none
        assert "response.created" not in [e.type for e in seen[seen.index(added) :]]
        await connection.input_audio_buffer.append(audio=_speech(24_000))
        await connection.input_audio_buffer.commit()
        assert (await _until(connection, "response.function_call_arguments.done", seen)).call_id != call_id


class _NoToolsModel(ScriptedModel):
    """A model that cannot call tools (as the cascade's `echo` and `local` responders and Moshi)."""

    def __init__(self) -> None:
        super().__init__(ScriptedParams(first_output_ms=50, token_ms=5))
        self.capabilities = replace(self.capabilities, function_calling=False)


async def test_a_model_that_cannot_call_tools_takes_a_session_that_declares_them() -> None:
    """τ-Voice declares its domain's tools on every session and fails on any `error`: the session opens,
    the tools are echoed, the capabilities say they are never called, and the model answers in speech."""
    async with EmbeddedServer(_NoToolsModel()) as server:
        client = await connect(server.url)
        await client.until("session.created")
        await client.send({"type": "session.update", "session": {"tools": [WEATHER], "instructions": "Hi."}})
        updated = (await client.until("session.updated"))["session"]
        assert updated["tools"] == [WEATHER] and updated["instructions"] == "Hi."
        assert updated["capabilities"]["supports_function_calling"] is False
        done = await spoken_turn(client)
        assert [item["type"] for item in done["response"]["output"]] == ["message"]
        assert client.of_type("error") == []


async def test_a_model_that_calls_tools_says_so(server: EmbeddedServer) -> None:
    client = await connect(server.url)
    created = (await client.until("session.created"))["session"]
    assert created["capabilities"]["supports_function_calling"] is True


async def test_the_example_agent_runs_its_tool_and_saves_the_spoken_answer(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    spec = importlib.util.spec_from_file_location("weather_agent", ROOT / "examples" / "weather_agent.py")
    assert spec is not None and spec.loader is not None
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    question = base64.b64decode(_speech(24_000))
    result = await agent.converse(server.url, question, tmp_path / "answer.wav")
    [call] = result["calls"]
    assert (call["name"], json.loads(call["arguments"])) == ("get_weather", {"city": "Paris"})
    assert result["transcript"] == f"It is {json.dumps(agent.get_weather('Paris'))}."
    assert result["answer_seconds"] > 0 and (tmp_path / "answer.wav").stat().st_size > 44
