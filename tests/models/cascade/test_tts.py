"""Speech synthesis: piper with the packaged voice, espeak-ng as the fallback, a clear error with neither."""

from __future__ import annotations

import shutil
import struct
import sys

import numpy as np
import pytest

from duplexkit.models.cascade.plugin import CascadeModel
from duplexkit.models.cascade.tts import (
    EspeakSynthesizer,
    PiperSynthesizer,
    TtsUnavailable,
    load_synthesizer,
    parse_wav_pcm16,
)

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs the espeak-ng program")


def _wav(samples: list[int], rate: int = 22_050, declared: int = 0x7FFFF000) -> bytes:
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    data = struct.pack(f"<{len(samples)}h", *samples)
    return (
        b"RIFF"
        + struct.pack("<I", declared)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", 16)
        + fmt
        + b"data"
        + struct.pack("<I", declared)
        + data
    )


def test_a_wav_with_bogus_streaming_sizes_reads_to_the_end_of_its_bytes() -> None:
    rate, samples = parse_wav_pcm16(_wav([0, 16384, -32768]))
    assert rate == 22_050
    assert samples.dtype == np.float32 and samples.tolist() == [0.0, 0.5, -1.0]


@pytest.mark.parametrize("data", [b"", b"RIFF\0\0\0\0WAVX", _wav([1])[:36]])
def test_a_broken_wav_is_rejected(data: bytes) -> None:
    with pytest.raises(ValueError):
        parse_wav_pcm16(data)


def test_piper_speaks_deterministically_at_its_voice_rate(piper: PiperSynthesizer) -> None:
    audio = piper.synthesize("Hello there.")
    assert piper.sample_rate_hz == 22_050 and audio.dtype == np.float32
    assert 0.3 < len(audio) / 22_050 < 2.0 and 0.5 < np.max(np.abs(audio)) <= 0.81
    assert np.array_equal(audio, piper.synthesize("Hello there."))
    # The urgent session (a reply's first piece, on more threads) is the same voice: the same audio.
    assert np.allclose(audio, piper.synthesize("Hello there.", urgent=True), atol=1e-4)


@needs_espeak
def test_espeak_speaks_through_a_subprocess() -> None:
    espeak = EspeakSynthesizer()
    audio = espeak.synthesize("-v hello")  # stdin: never read as an option
    assert espeak.sample_rate_hz == 22_050 and len(audio) > 0.2 * 22_050


@needs_espeak
def test_auto_falls_back_to_espeak_when_piper_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "piper", None)
    assert load_synthesizer("auto").name == "espeak-ng"


def test_with_no_synthesizer_the_cascade_refuses_to_start_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "piper", None)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(TtsUnavailable, match=r"duplexkit\[tts\]"):
        load_synthesizer("auto")
    with pytest.raises(ValueError, match=r"duplexkit\[tts\]"):
        CascadeModel.from_args({"tts": "piper"})
