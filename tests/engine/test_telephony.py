"""G.711 in the engine: 8 kHz in, 8 kHz out, whatever the model's rates; a rate a G.711 format does not
have is refused with `unsupported_sample_rate` and changes nothing.

A tone keeps its pitch and its duration both ways: 8 kHz mu-law/A-law input reaches the model at its input
rate as the same tone for the same time, and the model's 24 kHz reply leaves as 8 kHz G.711 of the reply's
length (not the 24 kHz stream under an 8 kHz label: 3x too long and a third of the pitch).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from duplexkit.engine import Listen, Speak, Step
from duplexkit.protocol.audio import AudioFormat, decode_audio, encode_audio
from duplexkit.protocol.errors import ErrorCode
from duplexkit.protocol.wire import parse_client_event
from tests.engine.test_session import Harness, only, types

PHONE = 8_000
MODEL_IN = 16_000
MODEL_OUT = 24_000


def _tone(hz: float, seconds: float, rate: int) -> npt.NDArray[np.float32]:
    t = np.arange(round(seconds * rate)) / rate
    return (0.4 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def _peak_hz(samples: npt.NDArray[np.float32], rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[int(np.argmax(spectrum))])


@pytest.mark.parametrize(("ga", "fmt"), [("audio/pcmu", "g711_ulaw"), ("audio/pcma", "g711_alaw")])
def test_g711_input_reaches_the_model_as_the_same_tone_for_the_same_time(ga: str, fmt: AudioFormat) -> None:
    h = Harness(chunk_period_ms=1000)
    [updated] = h.send("session.update", session={"audio": {"input": {"format": {"type": ga}}}}).events
    assert updated.session.input_audio_format == fmt
    assert updated.session.capabilities.input_sample_rate_hz == PHONE
    payload = encode_audio(_tone(440.0, 2.0, PHONE), fmt)
    units = []
    for offset in range(0, len(payload), 160):  # 20 ms frames, as a phone bridge sends them
        units += _append(h, payload[offset : offset + 160]).units
    commit = h.send("input_audio_buffer.commit")
    units += commit.units
    heard = np.concatenate([u.samples for u in units])
    assert {u.sample_rate_hz for u in units} == {MODEL_IN}
    assert len(heard) == 2 * MODEL_IN  # 2 s in, 2 s to the model: no slow motion, no fast forward
    assert abs(_peak_hz(heard, MODEL_IN) - 440.0) <= 2.0
    # the media clock counts 8 kHz input (the resampler holds back at most ~116 ms when the commit is stamped)
    assert 1880 <= only(commit.events, "input_audio_buffer.committed").audio_end_ms <= 2000


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _append(h: Harness, payload: bytes) -> Step:
    """An append as the runner parses it: in the session's input format."""
    text = json.dumps({"type": "input_audio_buffer.append", "audio": _b64(payload)})
    return h.engine.handle(
        parse_client_event(text, input_audio_format=h.engine.settings.input_audio_format), 0.0
    )


def _reply(h: Harness, tone: npt.NDArray[np.float32], pieces: int) -> list[Any]:
    """The model speaks `tone` (24 kHz) in `pieces` segments, the last ending its turn."""
    unit = h.unit()
    chunks = np.array_split(tone, pieces)
    segments = [
        Speak(tokens=("Hi ",) if i == 0 else (), audio=chunk, end_of_turn=i == pieces - 1)
        for i, chunk in enumerate(chunks)
    ]
    return h.step(unit, *segments, at=1.0)


@pytest.mark.parametrize(("beta", "fmt"), [("g711_ulaw", "g711_ulaw"), ("g711_alaw", "g711_alaw")])
def test_a_g711_reply_is_8khz_of_the_replys_own_length_and_pitch(beta: str, fmt: AudioFormat) -> None:
    h = Harness(chunk_period_ms=1000)
    [updated] = h.send("session.update", session={"output_audio_format": beta}).events
    assert updated.session.capabilities.output_sample_rate_hz == PHONE
    events = _reply(h, _tone(1000.0, 1.5, MODEL_OUT), pieces=5)
    deltas = [e for e in events if e.type == "response.output_audio.delta"]
    assert {d.sample_rate_hz for d in deltas} == {PHONE}
    audio = b"".join(d.audio.data for d in deltas)
    assert len(audio) == round(1.5 * PHONE)  # 1 byte a sample: exactly the reply's 1.5 s at 8 kHz
    samples = decode_audio(audio, fmt)
    assert abs(_peak_hz(samples, PHONE) - 1000.0) <= 2.0
    assert deltas[-1].metadata.audio_duration_ms == pytest.approx(1500.0)
    done = only(events, "response.done")
    assert done.response_request_metrics.output_audio_ms == pytest.approx(1500.0)


def test_a_reply_ended_by_listening_still_sends_the_resamplers_last_samples() -> None:
    h = Harness(chunk_period_ms=1000)
    h.send("session.update", session={"output_audio_format": "g711_ulaw"})
    unit = h.unit()
    events = h.step(unit, Speak(tokens=("Hi",), audio=_tone(500.0, 0.5, MODEL_OUT)), at=1.0)
    events += h.step(h.unit(1.0), Listen(), at=2.0)
    audio = b"".join(e.audio.data for e in events if e.type == "response.output_audio.delta")
    assert len(audio) == round(0.5 * PHONE)
    assert only(events, "response.done").response.status == "completed"


def test_pcm_output_at_a_named_rate_is_resampled_to_it() -> None:
    h = Harness(chunk_period_ms=1000)
    session = {"audio": {"output": {"format": {"type": "audio/pcm", "rate": 16_000}}}}
    [updated] = h.send("session.update", session=session).events
    assert updated.session.capabilities.output_sample_rate_hz == 16_000
    events = _reply(h, _tone(1000.0, 1.0, MODEL_OUT), pieces=3)
    deltas = [e for e in events if e.type == "response.output_audio.delta"]
    assert {d.sample_rate_hz for d in deltas} == {16_000}
    assert sum(len(d.audio.data) for d in deltas) == 2 * 16_000


@pytest.mark.parametrize(
    ("session", "param"),
    [
        (
            {"audio": {"input": {"format": {"type": "audio/pcmu", "rate": 16_000}}}},
            "session.audio.input.format.rate",
        ),
        (
            {"audio": {"output": {"format": {"type": "audio/pcma", "rate": 24_000}}}},
            "session.audio.output.format.rate",
        ),
        (
            {"input_audio_format": "g711_ulaw", "input_sample_rate_hz": 16_000},
            "session.audio.input.format.rate",
        ),
    ],
)
def test_a_g711_format_at_another_rate_is_refused_and_nothing_changes(
    session: dict[str, Any], param: str
) -> None:
    h = Harness()
    [error] = h.send("session.update", session={**session, "instructions": "x"}).events
    assert error.error.code == ErrorCode.UNSUPPORTED_SAMPLE_RATE and error.error.param == param
    assert h.engine.settings.instructions is None
    assert (h.engine.settings.input_audio_format, h.engine.settings.output_audio_format) == ("pcm16", "pcm16")


def test_a_g711_append_naming_another_rate_is_refused_and_buffers_nothing() -> None:
    h = Harness()
    payload = _b64(encode_audio(_tone(440.0, 0.5, PHONE), "g711_ulaw"))
    step = h.send(
        "input_audio_buffer.append", audio=payload, input_audio_format="g711_ulaw", sample_rate_hz=16_000
    )
    assert types(step.events) == ["error"] and step.units == []
    assert step.events[0].error.code == ErrorCode.UNSUPPORTED_SAMPLE_RATE
    assert h.send("input_audio_buffer.append", audio=payload, input_audio_format="g711_ulaw").events == []
    committed = only(h.send("input_audio_buffer.commit").events, "input_audio_buffer.committed")
    assert 380 <= committed.audio_end_ms <= 500  # only the accepted append (less the resampler's hold)
