"""Each word-timing source: the server's marks (hand-built events), pocketsphinx on spoken words, and an
OpenAI-compatible transcription endpoint on a loopback fake."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest

from duplexkit.bench.fdb import words as w
from duplexkit.client import ReceivedEvent
from duplexkit.client.collector import PlacedAudio
from duplexkit.client.wavfile import write_wav
from tests.bench.fdb.conftest import FakeOpenAI


def ev(data: dict, media_ms: float = 0.0) -> ReceivedEvent:
    return ReceivedEvent(data=data, received_at=0.0, media_ms=media_ms)


def audio_delta(rid: str, chars: int, end_ms: float) -> ReceivedEvent:
    return ev(
        {
            "type": "response.output_audio.delta",
            "response_id": rid,
            "delta": base64.b64encode(b"\0\0").decode(),
            "metadata": {
                "audio_duration_ms": end_ms,
                "audio_text_marks": [{"text_chars": chars, "audio_end_ms": end_ms}],
            },
        }
    )


def text_delta(rid: str, text: str) -> ReceivedEvent:
    return ev({"type": "response.output_audio_transcript.delta", "response_id": rid, "delta": text})


def placed(rid: str, start_s: float, seconds: float) -> PlacedAudio:
    return PlacedAudio(rid, round(start_s * 24_000), np.zeros(round(seconds * 24_000), dtype=np.float32))


def test_server_marks_place_words_on_the_playback_timeline() -> None:
    # Two segments: "hello there " (12 chars) over 1.2 s of audio, then "friend" (6 chars) over 0.6 s.
    # The first chunk plays from 2.0 s; the second arrived late and plays from 5.0 s.
    events = [
        text_delta("r1", "hello there "),
        audio_delta("r1", 12, 1200.0),
        text_delta("r1", "friend"),
        audio_delta("r1", 18, 1800.0),
    ]
    timed = w.server_words(events, [placed("r1", 2.0, 1.2), placed("r1", 5.0, 0.6)])
    # "hello" = chars 0-5 → 0.0-0.5 s of reply audio → 2.0-2.5 s; "there" chars 6-11 → 0.6-1.1 s → 2.6-3.1
    # "friend" chars 12-18 → 1.2-1.8 s of reply audio, i.e. the second chunk → 5.0-5.6 s
    assert [(x.text, x.start, x.end) for x in timed.words] == [
        ("hello", 2.0, 2.5),
        ("there", 2.6, 3.1),
        ("friend", 5.0, 5.6),
    ]
    assert timed.source == {"source": "server", "marks": True, "responses": 1}


def test_unvoiced_text_and_words_after_the_input_are_dropped() -> None:
    events = [text_delta("r1", "one two three"), audio_delta("r1", 3, 300.0)]
    timed = w.server_words(events, [placed("r1", 1.0, 0.3)])
    assert [x.text for x in timed.words] == ["one"]
    events = [text_delta("r2", "late words"), audio_delta("r2", 10, 1000.0)]
    cut = w.server_words(events, [placed("r2", 3.8, 1.0)], until_s=4.0)
    assert [(x.text, x.start, x.end) for x in cut.words] == [("late", 3.8, 4.0)]


def test_a_response_without_marks_spreads_its_text_and_says_so() -> None:
    events = [text_delta("r1", "ab cd"), ev({"type": "response.output_audio.delta", "response_id": "r1"})]
    timed = w.server_words(events, [placed("r1", 0.0, 1.0)])
    assert [(x.text, x.start, x.end) for x in timed.words] == [("ab", 0.0, 0.4), ("cd", 0.6, 1.0)]
    assert timed.source["marks"] is False


@pytest.mark.parametrize("backend", ["pocketsphinx", "faster-whisper"])
def test_offline_asr_times_spoken_words(tmp_path: Path, backend: str) -> None:
    tts = pytest.importorskip("duplexkit.models.cascade.tts")
    if backend == "faster-whisper" and w.asr_backend() != backend:
        pytest.skip("faster-whisper or its packaged weights are not installed")
    try:
        synth = tts.load_synthesizer()
    except tts.TtsUnavailable:
        pytest.skip("no speech synthesizer on this machine")
    speech = synth.synthesize("hello world")
    rate = synth.sample_rate_hz
    clip = np.concatenate([np.zeros(2 * rate, dtype=np.float32), speech, np.zeros(rate, dtype=np.float32)])
    write_wav(tmp_path / "output.wav", clip, rate)
    timed = w.asr_words(tmp_path / "output.wav", backend=backend)
    assert timed.source["backend"] == backend
    assert timed.words, f"{backend} heard nothing"
    speech_end = 2.0 + len(speech) / rate
    # every word lies where the speech is (0.4 s of slack: Whisper's word edges are that loose)
    assert all(x.start >= 1.6 and (x.end or x.start) <= speech_end + 0.4 for x in timed.words), timed.words
    if backend == "faster-whisper":
        assert "hello" in " ".join(x.text.lower() for x in timed.words)


async def test_transcription_endpoint(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.transcribe = lambda form: {
        "task": "transcribe",
        "language": "english",
        "duration": 4.0,
        "text": "Hi there.",
        "words": [{"word": "Hi", "start": 1.0, "end": 1.2}, {"word": " there.", "start": 1.3, "end": 1.7}],
    }
    write_wav(tmp_path / "output.wav", np.zeros(24_000, dtype=np.float32), 24_000)
    endpoint = w.TranscriptionEndpoint(base_url=fake_openai.url, model="whisper-x")
    timed = await w.transcription_words(tmp_path / "output.wav", endpoint)
    assert [(x.text, x.start, x.end) for x in timed.words] == [("Hi", 1.0, 1.2), ("there.", 1.3, 1.7)]
    assert timed.source == {"source": "transcription", "url": fake_openai.url, "model": "whisper-x"}
    (form,) = fake_openai.transcription_requests
    assert form["model"] == "whisper-x" and form["response_format"] == "verbose_json"
    assert form["timestamp_granularities[]"] == "word"
    assert form["file"][:4] == b"RIFF"


async def test_transcription_without_word_times_is_an_error(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.transcribe = lambda form: {"text": "words but no times", "segments": []}
    write_wav(tmp_path / "output.wav", np.zeros(2400, dtype=np.float32), 24_000)
    with pytest.raises(w.WordTimingError) as caught:
        await w.transcription_words(tmp_path / "output.wav", w.TranscriptionEndpoint(fake_openai.url, "m"))
    assert caught.value.code == "no_word_timestamps"
