"""What a Moshi client's connection means to the session behind `/api/chat`: its query parameters become
the session's settings, and its end-turn control (kind 3, payload 1; kyutai-labs/moshi's protocol) ends the
user's turn as a commit does. Clients write frames by that protocol, not through our own encoder's view."""

from __future__ import annotations

import asyncio
import urllib.parse

import numpy as np
import sphn
import websockets

from duplexkit.models import load_model
from duplexkit.server import EmbeddedServer, ServerConfig
from duplexkit.server.runner import SessionRunner

RATE = 24_000
FRAME = 1_920


def _chat_url(server: EmbeddedServer, query: str = "") -> str:
    return server.url.replace("/v1/realtime", "/api/chat") + query


def _only_runner(server: EmbeddedServer) -> SessionRunner:
    """The live session's runner (each slot's shutdown hook is its runner's)."""
    (slot,) = server.duplex.manager._slots
    runner = getattr(slot.shutdown, "__self__", None)
    assert isinstance(runner, SessionRunner)
    return runner


async def test_query_parameters_become_the_session_settings() -> None:
    query = urllib.parse.urlencode(
        {"text_temperature": "0.7", "text_prompt": "Answer in one word.", "voice_prompt": "NATF2.pt"}
        | {"text_topk": "25", "audio_temperature": "0.8", "pad_mult": "0"}  # Moshi decoder knobs
    )
    async with (
        EmbeddedServer(load_model("scripted", {}), ServerConfig()) as server,
        websockets.connect(_chat_url(server, f"?{query}")) as ws,
    ):
        handshake = await asyncio.wait_for(ws.recv(), 5)
        assert isinstance(handshake, bytes) and handshake[0] == 0
        runner = _only_runner(server)
        assert runner.model.sampling.temperature == 0.7
        assert runner.model.sampling.instructions == "Answer in one word."
        settings = runner.engine.settings
        # Moshi's decoder knobs and PersonaPlex's voice ride `extra_body`, for the `moshi` model, which
        # honours or refuses them (the scripted one ignores them).
        assert settings.extra_body == {"top_k_text": 25, "temp": 0.8, "voice_prompt": "NATF2.pt"}
        assert settings.input_audio_format == "pcm_f32le" and settings.input_sample_rate_hz == RATE
        assert settings.turn_detection is None  # the model's own turns, or the client's end-turn


async def _speak_then(server: EmbeddedServer, *, end_turn: bool) -> int:
    """Speech only (no trailing silence, which the scripted model would answer by itself), then the
    end-turn control or nothing; returns the responses the server completed."""
    writer = sphn.OpusStreamWriter(RATE)
    t = np.arange(RATE) / RATE
    speech = (0.2 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
    async with websockets.connect(_chat_url(server)) as ws:
        await asyncio.wait_for(ws.recv(), 5)  # the handshake
        for i in range(0, len(speech) - FRAME + 1, FRAME):
            ogg = writer.append_pcm(speech[i : i + FRAME])
            if len(ogg) > 0:
                await ws.send(b"\x01" + ogg)
        if end_turn:
            await ws.send(b"\x03\x01")
        for _ in range(100):  # a reply takes ~0.1 s; 2 s of nothing means none is coming
            await asyncio.sleep(0.02)
            if _replies(server):
                break
    return _replies(server)


def _replies(server: EmbeddedServer) -> int:
    """Responses the server completed with a first token (its TTFT histogram's count)."""
    (family,) = server.duplex.metrics.ttft_seconds.collect()
    return int(next(s.value for s in family.samples if s.name.endswith("_count")))


async def test_the_end_turn_control_commits_the_turn() -> None:
    plugin = load_model("scripted", {"first_output_ms": "30", "token_ms": "2"})
    async with EmbeddedServer(plugin, ServerConfig()) as server:
        assert await _speak_then(server, end_turn=False) == 0  # speech alone: the turn is not over
    async with EmbeddedServer(plugin, ServerConfig()) as server:
        assert await _speak_then(server, end_turn=True) == 1  # the control ends it: one reply
