"""One driver per real client: each runs the client's own code, unchanged, through one spoken turn at a
pacing, and returns what that client got (`checks.Turn`). Where a client is a stand-in, its module says
whose code it was written from."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

from openai import AsyncOpenAI
from openai.types.beta.realtime import RealtimeServerEvent as BetaServerEvent
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

from duplexkit.protocol.audio import resample
from duplexkit.server import EmbeddedServer
from tests.conformance.checks import Samples, Turn, from_pcm16, pcm16

DUPLEX_ONLY = frozenset({"response.speak", "response.listen", "playback.acknowledged"})
"""Duplex extensions a GA or beta session gets besides OpenAI's events (docs/protocol.md, "Extensions to
OpenAI"); every other event must validate strictly against the SDK's own types."""

_GA = TypeAdapter(RealtimeServerEvent)
_BETA = TypeAdapter(BetaServerEvent)
APPEND_S = 0.1


def _as_openai_reads(raw: dict[str, Any], api: str) -> dict[str, Any]:
    """The event as the SDK's strict types may take it: the beta session type lists only OpenAI's own
    model names (`session.model`), so a beta session names ours, a string, and is read with one of
    theirs in its place; every other field is as sent."""
    if api == "beta" and raw["type"] in ("session.created", "session.updated"):
        assert isinstance(raw["session"]["model"], str)
        return {**raw, "session": {**raw["session"], "model": "gpt-4o-realtime-preview"}}
    return raw


def _sdk(server: EmbeddedServer) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key="unused", base_url=f"{server.http_url}/v1", websocket_base_url=server.url[: -len("/realtime")]
    )


async def _paced(chunks: list[Any], seconds_each: float, send: Any, pacing: str) -> None:
    """Send `chunks` on their media clock (`realtime`) or all at once."""
    start = time.monotonic()
    for k, chunk in enumerate(chunks):
        await send(chunk)
        if pacing == "realtime":
            await asyncio.sleep(max(0.0, start + (k + 1) * seconds_each - time.monotonic()))


def _split(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


async def openai_websocket(server: EmbeddedServer, question: Samples, pacing: str, *, api: str) -> Turn:
    """The openai SDK's GA (`client.realtime`) or beta (`client.beta.realtime`) connection: the question in
    100 ms appends at OpenAI's 24 kHz, in real time under server VAD (OpenAI's default: the server ends
    the turn and asks for the answer) or at once, then `input_audio_buffer.commit` and `response.create`,
    as the SDK's examples do. Every event is read
    as the SDK's strict types read it; the turn is the first `response.done` after the question's commit
    (the client's, or the detector's), which must be `completed` at once; in real time the first
    completed one."""
    sdk = _sdk(server)
    manager = sdk.realtime.connect(model="duplexkit") if api == "ga" else sdk.beta.realtime.connect(model="x")
    adapter = _GA if api == "ga" else _BETA
    audio_delta = "response.output_audio.delta" if api == "ga" else "response.audio.delta"
    text_delta = (
        "response.output_audio_transcript.delta" if api == "ga" else "response.audio_transcript.delta"
    )
    data = pcm16(resample(question, 16_000, 24_000))
    chunks = _split(data, round(24_000 * APPEND_S) * 2)
    types: list[str] = []
    transcript: dict[str, list[str]] = {}
    audio: dict[str, bytearray] = {}
    async with manager as connection:
        if pacing == "realtime":  # OpenAI's default for a streamed turn: the server's VAD ends it
            vad = {"type": "server_vad", "silence_duration_ms": 500}
            update: Any = (
                {"type": "realtime", "audio": {"input": {"turn_detection": vad}}}
                if api == "ga"
                else {"turn_detection": vad}
            )
            await connection.session.update(session=update)

        async def send() -> None:
            async def append(chunk: bytes) -> None:
                await connection.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())

            await _paced(chunks, APPEND_S, append, pacing)
            if pacing == "at-once":
                await connection.input_audio_buffer.commit()
                await connection.response.create()

        sender = asyncio.create_task(send())
        try:
            async with asyncio.timeout(60):
                while True:
                    raw = json.loads(await connection.recv_bytes())
                    types.append(raw["type"])
                    if raw["type"] not in DUPLEX_ONLY:
                        adapter.validate_python(_as_openai_reads(raw, api), strict=True)
                    assert raw["type"] != "error", raw
                    if raw["type"] == audio_delta:
                        audio.setdefault(raw["response_id"], bytearray()).extend(
                            base64.b64decode(raw["delta"])
                        )
                    elif raw["type"] == text_delta:
                        transcript.setdefault(raw["response_id"], []).append(raw["delta"])
                    elif raw["type"] == "response.done" and (
                        sender.done() if pacing == "at-once" else "input_audio_buffer.committed" in types
                    ):
                        response = raw["response"]
                        if pacing == "at-once":
                            assert response["status"] == "completed", response
                        if response["status"] == "completed":
                            rid = response["id"]
                            return Turn(
                                "".join(transcript.get(rid, [])),
                                from_pcm16(bytes(audio.get(rid, b""))),
                                24_000,
                                types,
                            )
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
