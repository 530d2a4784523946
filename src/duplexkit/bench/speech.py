"""Where the input speaks: energy-based speech segments of a clip, for the report's timeline."""

from __future__ import annotations

import numpy as np

FRAME_MS = 20
SPEECH_RMS = 0.003
"""The scripted model's speech threshold (int16 full scale = 1.0), so the timeline agrees with it."""


def speech_segments(pcm16: bytes, rate_hz: int = 16_000, *, min_gap_ms: int = 300) -> list[list[float]]:
    """`[[start_s, end_s], ...]` where 20 ms frames have RMS ≥ `SPEECH_RMS`; gaps shorter than
    `min_gap_ms` are bridged so a sentence reads as one segment."""
    samples = np.frombuffer(pcm16, dtype="<i2").astype(np.float32) / 32768.0
    frame = rate_hz * FRAME_MS // 1000
    count = len(samples) // frame
    if count == 0:
        return []
    rms = np.sqrt(np.mean(np.square(samples[: count * frame].reshape(count, frame)), axis=1))
    segments: list[list[float]] = []
    for index in np.flatnonzero(rms >= SPEECH_RMS):
        start, end = index * FRAME_MS / 1000, (index + 1) * FRAME_MS / 1000
        if segments and start - segments[-1][1] <= min_gap_ms / 1000:
            segments[-1][1] = end
        else:
            segments.append([start, end])
    return [[round(a, 3), round(b, 3)] for a, b in segments]
