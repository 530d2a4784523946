"""One driver per real client: each runs the client's own code, unchanged, through one spoken turn at a
pacing, and returns what that client got (`checks.Turn`). Where a client is a stand-in, its module says
whose code it was written from."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import numpy as np
import websockets
from aiortc import RTCSessionDescription
from openai import AsyncOpenAI
from openai.types.beta.realtime import RealtimeServerEvent as BetaServerEvent
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

from duplexkit.protocol.audio import decode_audio, encode_audio, resample
from duplexkit.server import EmbeddedServer
from tests.conformance.checks import Samples, Turn, from_pcm16, pcm16
from tests.server.moshi_peer import FRAME, FdbMoshiClient
from tests.server.twilio_peer import TwilioPeer
from tests.server.webrtc_peer import RATE as PEER_RATE
from tests.server.webrtc_peer import CallPeer

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


async def vllm_omni(server: EmbeddedServer, question: Samples, pacing: str) -> Turn:
    """A client as vLLM-Omni's users have them (`?duplex=1`, its beta names, 16 kHz PCM appends): in real
    time the duplex model takes the turn by itself; at once, `input_audio_buffer.commit` and
    `response.create`. The turn is the first completed `response.done` after the question (at once, the
    first one, which must be completed)."""
    chunks = _split(pcm16(question), round(16_000 * APPEND_S) * 2)
    types: list[str] = []
    transcript: list[str] = []
    audio = bytearray()
    async with websockets.connect(server.url + "?duplex=1", max_size=None) as ws:

        async def append(chunk: bytes) -> None:
            await ws.send(
                json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()})
            )

        async def send() -> None:
            await _paced(chunks, APPEND_S, append, pacing)
            if pacing == "at-once":
                await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
                await ws.send(json.dumps({"type": "response.create"}))

        sender = asyncio.create_task(send())
        try:
            async with asyncio.timeout(60):
                while True:
                    event = json.loads(await ws.recv())
                    types.append(event["type"])
                    assert event["type"] != "error", event
                    if event["type"] == "response.created":
                        transcript, audio = [], bytearray()  # the turn's answer is the last response
                    elif event["type"] == "response.audio.delta":
                        audio += base64.b64decode(event["delta"])
                    elif event["type"] == "response.audio_transcript.delta":
                        transcript.append(event["delta"])
                    elif event["type"] == "response.done" and (pacing == "realtime" or sender.done()):
                        if pacing == "at-once":
                            assert event["response"]["status"] == "completed", event
                        if event["response"]["status"] == "completed":
                            return Turn("".join(transcript), from_pcm16(bytes(audio)), 24_000, types)
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)


async def fdb_moshi(server: EmbeddedServer, question: Samples, pacing: str) -> Turn:
    """Full-Duplex-Bench's Moshi client (`tests/server/moshi_peer.py`): the question at 24 kHz in 80 ms Opus
    frames in real time, then a few seconds of silence, as its inference loop streams a whole file; the
    reply is what it decodes after the question, with the text pieces that came with it."""
    clip = resample(question, 16_000, 24_000)
    clip = np.concatenate([clip, np.zeros(24_000 * 4, np.float32)])
    async with websockets.connect(server.url.replace("/v1/realtime", "/api/chat"), max_size=None) as ws:
        client = FdbMoshiClient(ws)
        await client.handshake()
        receiving = asyncio.create_task(client.receive())
        try:
            await client.send_realtime(clip)
            async with asyncio.timeout(30):  # a frame out per frame in: a slow first step catches up
                while True:  # (polled: the client's reader keeps no event to await)
                    if len(client.output()) >= len(clip) - 3 * FRAME:
                        break
                    await asyncio.sleep(0.05)
        finally:
            receiving.cancel()
            await asyncio.gather(receiving, return_exceptions=True)
    assert client.errors == []
    out = client.output()
    spoken_from = len(question) * 24_000 // 16_000 // 2  # after the first half of the question
    return Turn("".join(text for _, text in client.texts), out[spoken_from:], 24_000, ["kind 1", "kind 2"])


async def twilio(server: EmbeddedServer, question: Samples, pacing: str) -> Turn:
    """A Twilio Media Streams call (`tests/server/twilio_peer.py`): the question on the line as 20 ms
    mu-law frames in real time; the reply is what plays at the caller's end until the line is quiet
    (every mark echoed). Twilio carries no text: the turn's transcript is empty."""
    line = encode_audio(resample(question, 16_000, 8_000), "g711_ulaw")
    peer = await TwilioPeer.connect(server.url.removesuffix("/v1/realtime") + "/v1/twilio/stream")
    await peer.open()
    try:
        await peer.say(line)
        await peer.wait_for(lambda r: len(r.played) >= 8_000 * 0.4, timeout=40)
        async with asyncio.timeout(40):
            quiet_since, seen = time.monotonic(), -1
            while time.monotonic() - quiet_since < 1.5:
                count = len(peer.result.sequence)
                if count != seen or peer.pending:
                    quiet_since, seen = time.monotonic(), count
                await asyncio.sleep(0.05)
        assert peer.result.violations == []
        assert len(peer.result.echoed) == peer.result.sequence.count("mark")  # all of it played
        audio = decode_audio(bytes(peer.result.played), "g711_ulaw")
    finally:
        await peer.stop()
    return Turn("", audio, 8_000, peer.result.sequence)


async def openai_webrtc(server: EmbeddedServer, question: Samples, pacing: str) -> Turn:
    """A WebRTC call as the openai SDK sets it up: `client.realtime.calls.create` posts the offer of an
    aiortc peer (`tests/server/webrtc_peer.py`) with the session (server VAD, OpenAI's default), the
    question plays on its microphone track in real time, events come on the `oai-events` channel (each
    read by the SDK's strict types), and the reply is what the server's track played."""
    peer = CallPeer(resample(question, 16_000, PEER_RATE))  # (then silence)
    try:
        session: Any = {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "server_vad"}}}}
        answer = await _sdk(server).realtime.calls.with_raw_response.create(
            sdp=await peer.offer(), session=session
        )
        assert answer.status_code == 201
        await peer.pc.setRemoteDescription(RTCSessionDescription(answer.http_response.text, "answer"))
        done = await peer.until("response.done", timeout=60)
        assert done["response"]["status"] == "completed", done
        for event in peer.events:
            if event["type"] not in DUPLEX_ONLY:
                _GA.validate_python(event, strict=True)
        rid = done["response"]["id"]
        text = "".join(
            e["delta"]
            for e in peer.of_type("response.output_audio_transcript.delta")
            if e["response_id"] == rid
        )
        await asyncio.sleep(1.0)  # the track plays the reply's tail
        heard = [pcm for _, pcm in peer.heard]  # (the server's track is silent but for the reply)
        audio = np.concatenate(heard) if heard else np.zeros(0, np.float32)
        return Turn(text, audio, PEER_RATE, [e["type"] for e in peer.events])
    finally:
        await peer.close()
