"""A minimal raw-`websockets` test client and server fixtures for end-to-end tests over a real socket."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
import websockets

from duplexkit.engine import Decision, Unit
from duplexkit.models import ModelPlugin, load_model
from duplexkit.models.scripted import ScriptedModel, ScriptedParams, ScriptedSession
from duplexkit.server import EDGES, EmbeddedServer, RunnerLimits, ServerConfig
from duplexkit.server.serve import Edge

RATE = 16_000


def tone_pcm16(seconds: float, amplitude: float = 0.2, hz: float = 300.0) -> bytes:
    t = np.arange(round(seconds * RATE)) / RATE
    return (amplitude * np.sin(2 * np.pi * hz * t) * 32767).astype("<i2").tobytes()


def append(pcm: bytes, **fields: Any) -> str:
    """An append of `pcm` (16 kHz, as `tone_pcm16` makes it), naming its rate: a GA or beta session's own
    PCM rate is OpenAI's 24 kHz."""
    return json.dumps(
        {
            "type": "input_audio_buffer.append",
            "audio": base64.b64encode(pcm).decode(),
            "sample_rate_hz": RATE,
            **fields,
        }
    )


class RawClient:
    """Sends JSON frames and reads events with a bounded wait; nothing clever, on purpose."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []

    async def send(self, event: dict[str, Any] | str) -> None:
        await self.ws.send(event if isinstance(event, str) else json.dumps(event))

    async def recv(self, timeout: float = 5.0) -> dict[str, Any]:  # noqa: ASYNC109
        event: dict[str, Any] = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        self.events.append(event)
        return event

    async def until(self, event_type: str, timeout: float = 5.0) -> dict[str, Any]:  # noqa: ASYNC109
        """Read until an event of `event_type` arrives (returning it); everything read is kept in `events`."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            event = await self.recv(max(0.01, deadline - asyncio.get_running_loop().time()))
            if event["type"] == event_type:
                return event

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == event_type]


async def connect(url: str, query: str = "", **kwargs: Any) -> RawClient:
    ws = await websockets.connect(url + query, max_size=None, **kwargs)
    return RawClient(ws)


async def spoken_turn(client: RawClient, seconds: float = 1.5) -> dict[str, Any]:
    """Speech then a commit; returns the `response.done` of the scripted reply."""
    await client.send(append(tone_pcm16(seconds)))
    await client.send({"type": "input_audio_buffer.commit"})
    return await client.until("response.done", timeout=10)


@pytest.fixture
def plugin() -> ModelPlugin:
    return load_model("scripted", {"first_output_ms": "50", "token_ms": "5"})


WEATHER_CALLS = json.dumps([{"name": "get_weather", "arguments": {"city": "Paris"}}])
"""The scripted model's tool call in the tool-call tests: `get_weather` for Paris, then `It is {output}.`"""


def weather_tool_plugin() -> ModelPlugin:
    """The scripted model that calls `get_weather` once per turn and speaks the tool's output after it."""
    return load_model(
        "scripted",
        {
            "first_output_ms": "50",
            "token_ms": "5",
            "ms_per_char": "10",
            "chunk_period_ms": "200",
            "tool_calls": WEATHER_CALLS,
            "reply": "It is {output}.",
        },
    )


@pytest.fixture(params=EDGES)
def edge(request: pytest.FixtureRequest) -> Edge:
    """Each I/O edge in turn, for the few tests that hold both to the same behaviour (the rest run on the
    default edge)."""
    edge: Edge = request.param
    return edge


@pytest.fixture
async def server(plugin: ModelPlugin) -> AsyncIterator[EmbeddedServer]:
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=64)) as srv:
        yield srv


def small_limits(**overrides: Any) -> RunnerLimits:
    return RunnerLimits(**{"config_timeout_s": 0.5, **overrides})


class _FailsOnceSession(ScriptedSession):
    def __init__(self, plugin: FailsOnceModel) -> None:
        super().__init__(plugin)
        self.fail_at = plugin.fail_at
        self.steps = 0

    async def step(self, unit: Unit, request_started_at: float) -> AsyncIterator[Decision]:
        self.steps += 1
        if self.steps == self.fail_at:
            raise RuntimeError("boom")
        async for decision in super().step(unit, request_started_at):
            yield decision


class FailsOnceModel(ScriptedModel):
    """The scripted model whose sessions each raise `RuntimeError("boom")` on their `fail_at`-th step (from
    1) and step as scripted otherwise."""

    def __init__(self, params: ScriptedParams, fail_at: int) -> None:
        super().__init__(params)
        self.fail_at = fail_at

    def new_session(self) -> ScriptedSession:
        return _FailsOnceSession(self)
