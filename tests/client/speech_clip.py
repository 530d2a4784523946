"""A short speech-like clip for the talk tests, synthesised deterministically (no downloads, no randomness).

A voiced signal (a gliding fundamental around 125 Hz with ten harmonics falling off as 1/h) shaped into
syllables of about 250 ms, followed by silence: loud enough to pass a speech RMS threshold in every unit
it covers, then quiet so a duplex model sees the end of the turn.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

DEMO_RATE_HZ = 16_000
VOICED_S = 2.4
SILENCE_S = 1.6


def speech_like(rate: int = DEMO_RATE_HZ) -> npt.NDArray[np.float32]:
    """`VOICED_S` of voiced syllables then `SILENCE_S` of silence, peak 0.3, mono float32."""
    t = np.arange(round(VOICED_S * rate), dtype=np.float64) / rate
    f0 = 125.0 + 20.0 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voice = sum(np.sin(h * phase) / h for h in range(1, 11))
    syllables = 0.5 * (1 - np.cos(2 * np.pi * 4.0 * t))  # four syllables a second
    fade = np.minimum(1.0, np.minimum(t, VOICED_S - t) / 0.02)
    voiced = voice * syllables * fade
    voiced *= 0.3 / np.max(np.abs(voiced))
    return np.concatenate([voiced, np.zeros(round(SILENCE_S * rate))]).astype(np.float32)
