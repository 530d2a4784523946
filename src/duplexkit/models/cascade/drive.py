"""Synthetic input for driving a cascade session directly (tests, benchmarks): the project's own TTS
speaks, a noise floor is added, and the audio is cut into units on a media clock."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from duplexkit.engine import Fence, Unit
from duplexkit.models.cascade.tts import Synthesizer
from duplexkit.protocol.audio import resample
from duplexkit.vad import SAMPLE_RATE_HZ

NOISE_FLOOR_DBFS = -60.0
_END_FRAME_MS = 10
_END_RANGE_DB = 40.0


def spoken(synthesizer: Synthesizer, text: str, *, peak: float = 0.5) -> npt.NDArray[np.float32]:
    """`text` spoken by `synthesizer`, at 16 kHz, scaled to `peak`."""
    audio = resample(synthesizer.synthesize(text), synthesizer.sample_rate_hz, SAMPLE_RATE_HZ)
    top = float(np.max(np.abs(audio))) if len(audio) else 0.0
    return (audio * (peak / top) if top else audio).astype(np.float32)


def silence(ms: float) -> npt.NDArray[np.float32]:
    return np.zeros(round(ms * SAMPLE_RATE_HZ / 1000), dtype=np.float32)


def with_noise_floor(
    samples: npt.NDArray[np.float32], *, dbfs: float = NOISE_FLOOR_DBFS, seed: int = 0
) -> npt.NDArray[np.float32]:
    """`samples` plus white noise of RMS `dbfs` (full scale 1.0), like a quiet room's microphone."""
    noise = np.random.default_rng(seed).normal(0.0, 10 ** (dbfs / 20), len(samples))
    return (samples + noise).astype(np.float32)


def speech_end_ms(samples: npt.NDArray[np.float32]) -> float:
    """Ground-truth end of speech in a clean clip: the end of the last 10 ms frame whose RMS is within
    40 dB of the loudest frame's."""
    frame = SAMPLE_RATE_HZ * _END_FRAME_MS // 1000
    count = len(samples) // frame
    rms = np.sqrt(
        np.mean(np.square(samples[: count * frame].reshape(count, frame), dtype=np.float64), axis=1)
    )
    loud = np.flatnonzero(rms >= rms.max() * 10 ** (-_END_RANGE_DB / 20))
    return float((loud[-1] + 1) * _END_FRAME_MS) if len(loud) else 0.0


def units(
    samples: npt.NDArray[np.float32],
    period_ms: int,
    *,
    start_ms: float = 0.0,
    first_index: int = 0,
    fence: Fence | None = None,
) -> Iterator[Unit]:
    """Consecutive units of `period_ms` (the last one may be shorter) starting at media time `start_ms`."""
    fence = fence or Fence("synthetic")
    size = period_ms * SAMPLE_RATE_HZ // 1000
    for k, offset in enumerate(range(0, len(samples), size)):
        chunk = samples[offset : offset + size]
        begin = start_ms + 1000.0 * offset / SAMPLE_RATE_HZ
        yield Unit(
            index=first_index + k,
            fence=fence,
            samples=chunk,
            sample_rate_hz=SAMPLE_RATE_HZ,
            start_ms=begin,
            end_ms=begin + 1000.0 * len(chunk) / SAMPLE_RATE_HZ,
        )
