"""Clients nobody here wrote, each in its own dialect, against one server: the official `openai` SDK's GA
and beta realtime connections, and a raw `websockets` client written from vLLM-Omni's duplex contract
(`?duplex=1`: beta names, its metric placements, `rate_limits.updated`, its input aliases)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import wave
from typing import Any

import numpy as np
import websockets
from openai import AsyncOpenAI

from duplexkit.models import ModelPlugin
from duplexkit.server import EmbeddedServer, ServerConfig

REPLY = "This is a scripted reply."


def _speech_pcm16(rate: int, seconds: float = 1.5) -> bytes:
    t = np.arange(round(rate * seconds)) / rate
    return (0.2 * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2").tobytes()


def _sdk(server: EmbeddedServer) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key="unused", base_url=f"{server.http_url}/v1", websocket_base_url=server.url[: -len("/realtime")]
    )


async def test_the_openai_sdk_ga_connection_reads_ga_session_fields(server: EmbeddedServer) -> None:
    async with _sdk(server).realtime.connect(model="scripted") as connection:
        created = await asyncio.wait_for(connection.recv(), 5)
        assert created.type == "session.created"
        session: Any = created.session
        assert session.output_modalities == ["audio", "text"]
        assert session.audio.input.format.type == "audio/pcm"
        assert session.audio.input.format.rate == 24_000  # OpenAI's `audio/pcm` (the SDK's `AudioPCM`)
        assert session.audio.output.format.type == "audio/pcm" and session.audio.output.format.rate == 24_000
        for named, rate in (({"type": "audio/pcm", "rate": 16_000}, 16_000), ({"type": "audio/pcm"}, 24_000)):
            await connection.session.update(
                session={"type": "realtime", "audio": {"input": {"format": named}}}  # type: ignore[typeddict-item]
            )
            updated = await asyncio.wait_for(connection.recv(), 5)
            assert updated.type == "session.updated"
            assert updated.session.audio.input.format.rate == rate  # a named rate; else GA's 24 kHz


async def test_the_openai_sdk_beta_connection_completes_a_spoken_turn(server: EmbeddedServer) -> None:
    audio = bytearray()
    transcript: list[str] = []
    done_transcript = None
    async with _sdk(server).beta.realtime.connect(model="scripted") as connection:
        created = await asyncio.wait_for(connection.recv(), 5)
        assert created.type == "session.created"
        assert created.session.modalities == ["audio", "text"]
        assert created.session.input_audio_format == "pcm16"
        await connection.session.update(
            session={"modalities": ["audio", "text"], "input_audio_format": "pcm16"}
        )
        # The beta API's pcm16 is 24 kHz (it has no field to say otherwise).
        await connection.input_audio_buffer.append(audio=base64.b64encode(_speech_pcm16(24_000)).decode())
        await connection.input_audio_buffer.commit()
        async with asyncio.timeout(10):
            async for event in connection:
                if event.type == "input_audio_buffer.committed":
                    assert event.model_extra is not None
                    # 1.5 s read at 24 kHz (at 16 kHz it would be 2.25 s); the resampler holds back a
                    # few ms of filter tail until more input arrives.
                    assert 1400 <= event.model_extra["audio_end_ms"] <= 1500
                elif event.type == "response.audio.delta":
                    audio += base64.b64decode(event.delta)
                elif event.type == "response.audio_transcript.delta":
                    transcript.append(event.delta)
                elif event.type == "response.audio_transcript.done":
                    done_transcript = event.transcript
                elif event.type == "response.done":
                    assert event.response.status == "completed"
                    break
                elif event.type == "error":
                    raise AssertionError(event.error)
                else:
                    assert not event.type.startswith(("response.output_audio", "response.output_text"))
    assert "".join(transcript) == done_transcript == REPLY
    assert len(audio) == 2 * round(len(REPLY) * 0.060 * 24_000)


class VllmOmniProbe:
    """A probe client as vLLM-Omni users have them: `?duplex=1`, reads only the beta names and vLLM-Omni's
    metric placements (`response.metadata.duplex_event`, `<audio delta>.metadata.vllm_omni`)."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.audio = bytearray()
        self.transcript: list[str] = []
        self.metrics: list[dict[str, Any]] = []
        self.types: list[str] = []

    async def send(self, event: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(event))

    async def read_until(self, wanted: str, timeout: float = 10.0) -> dict[str, Any]:  # noqa: ASYNC109
        async with asyncio.timeout(timeout):
            while True:
                event = json.loads(await self.ws.recv())
                self.types.append(event["type"])
                if event["type"] == "response.created":
                    found = event["response"].get("metadata", {}).get("duplex_event", {})
                    self.metrics += [found["response_request_metrics"]] if found else []
                elif event["type"] == "response.audio.delta":
                    self.audio += base64.b64decode(event["delta"])
                    found = event.get("metadata", {}).get("vllm_omni", {})
                    self.metrics += [found["response_request_metrics"]] if found else []
                elif event["type"] == "response.audio_transcript.delta":
                    self.transcript.append(event["delta"])
                if event["type"] == wanted:
                    return event


def _wav_b64(pcm: bytes, rate: int) -> str:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm)
    return base64.b64encode(buffer.getvalue()).decode()


async def test_a_vllm_omni_probe_client_hears_the_reply_with_its_metric_placements(
    server: EmbeddedServer,
) -> None:
    async with websockets.connect(server.url + "?duplex=1&autostart=0", max_size=None) as ws:
        probe = VllmOmniProbe(ws)
        await probe.send({"type": "session.update", "session": {"modalities": ["audio", "text"]}})
        await probe.read_until("session.updated", 5)
        await probe.send(
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(_speech_pcm16(16_000)).decode()}
        )
        await probe.send({"type": "input_audio_buffer.commit"})
        done = await probe.read_until("response.done")
        assert done["response"]["status"] == "completed"
        await probe.read_until("rate_limits.updated", 5)
    assert "".join(probe.transcript) == REPLY
    assert len(probe.audio) == 2 * round(len(REPLY) * 0.060 * 24_000)
    assert probe.types.index("rate_limits.updated") == probe.types.index("response.done") + 1
    assert "response.output_audio.delta" not in probe.types
    assert [m["source"] for m in probe.metrics] == ["server_monotonic_request_start"] * len(probe.metrics)
    assert probe.metrics, "no request-start metrics at vLLM-Omni's placements"
    assert any(m.get("ttfp_ms") is not None for m in probe.metrics)


async def test_vllm_omni_input_aliases_append_wav_ack_and_close(server: EmbeddedServer) -> None:
    async with websockets.connect(server.url + "?duplex=1", max_size=None) as ws:
        probe = VllmOmniProbe(ws)
        await probe.read_until("session.created", 5)
        # `push_chunk` carries WAV by default; a 24 kHz file is read at its own rate (1.5 s, not 2.25 s).
        await probe.send({"type": "push_chunk", "audio": _wav_b64(_speech_pcm16(24_000), 24_000)})
        await probe.send(
            {"type": "input.audio.append", "audio": _wav_b64(_speech_pcm16(16_000, 0.5), 16_000)}
        )
        await probe.send({"type": "input_audio_buffer.commit"})
        committed = await probe.read_until("input_audio_buffer.committed")
        assert round(committed["audio_end_ms"]) == 2000
        done = await probe.read_until("response.done")
        response_id = done["response"]["id"]
        await probe.send({"type": "audio.playback_ack", "response_id": response_id, "played_ms": 500.0})
        acked = await probe.read_until("playback.acknowledged")
        assert acked["response_id"] == response_id and acked["played_ms"] == 500.0
        await probe.send({"type": "push_chunk", "audio": base64.b64encode(b"RIFF-not-a-wav").decode()})
        error = await probe.read_until("error")
        assert error["error"]["code"] == "invalid_audio"
        await probe.send({"type": "close_session", "reason": "bye"})
        closed = await probe.read_until("session.closed")
        assert closed["reason"] == "bye"
    assert probe.transcript and "".join(probe.transcript) == REPLY


async def test_an_explicit_dialect_query_wins_and_an_unknown_one_is_refused(server: EmbeddedServer) -> None:
    async with websockets.connect(
        server.url + "?duplex=1&dialect=ga", additional_headers={"OpenAI-Beta": "realtime=v1"}
    ) as ws:
        created = json.loads(await ws.recv())
        assert "output_modalities" in created["session"] and "modalities" not in created["session"]
    async with websockets.connect(server.url + "?dialect=klingon") as ws:
        error = json.loads(await ws.recv())
        assert error["error"]["code"] == "invalid_value" and error["error"]["param"] == "dialect"
        await asyncio.wait_for(ws.wait_closed(), 5)
        assert ws.close_code == 1008


async def test_vllm_omni_handshake_errors_are_flat_and_later_ones_nested(plugin: ModelPlugin) -> None:
    async with (
        EmbeddedServer(plugin, ServerConfig(max_sessions=1)) as server,
        websockets.connect(server.url + "?duplex=1&autostart=0") as ws,
    ):
        await ws.send(json.dumps({"type": "input_audio_buffer.commit", "event_id": "c1"}))
        early = json.loads(await ws.recv())
        assert early["type"] == "error" and early["code"] == "session_not_configured"
        assert isinstance(early["error"], str) and "session.update" in early["error"]
        await ws.send(json.dumps({"type": "session.update", "session": {}}))
        assert json.loads(await ws.recv())["type"] == "session.created"
        async with websockets.connect(server.url + "?duplex=1") as refused:
            capacity = json.loads(await refused.recv())
            assert capacity == {**capacity, "type": "error", "code": "resource_exhausted"}
            assert isinstance(capacity["error"], str)
        await ws.send(json.dumps({"type": "no.such.event"}))
        late = json.loads(await ws.recv())
        while late["type"] != "error":
            late = json.loads(await ws.recv())
        assert late["error"]["code"] == "unknown_event"  # once the session is open: the nested shape


async def test_the_minicpm_o_clients_query_and_extra_body_do_not_break_a_session(
    server: EmbeddedServer,
) -> None:
    query = "?duplex=1&model=minicpm-o-4.5&minicpmo45_native_duplex=1&autostart=0&session_id=mine"
    async with websockets.connect(server.url + query, max_size=None) as ws:
        probe = VllmOmniProbe(ws)
        extra = {"auto_response": True, "minicpmo45_native_duplex": True, "force_listen_count": 2}
        await probe.send({"type": "session.update", "session": {"extra_body": extra}})
        created = await probe.read_until("session.created", 5)
        assert created["session"]["id"]
        await probe.send(
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(_speech_pcm16(16_000)).decode()}
        )
        await probe.send({"type": "input_audio_buffer.commit"})
        assert (await probe.read_until("response.done"))["response"]["status"] == "completed"
    assert "error" not in probe.types and "".join(probe.transcript) == REPLY
