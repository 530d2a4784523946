"""Speech segments of a channel by Silero VAD, the detector the repo already runs (`duplexkit.vad`).

FDB's scorers call Silero's `get_speech_timestamps` with its defaults; the detector here is set to the same
rules (probability ≥ 0.5, speech of at least 250 ms, ended by 100 ms of silence, 30 ms of padding on each
side), fed the channel at 16 kHz. The scorer is injectable so tests can drive the rules with known frames.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from duplexkit.protocol.audio import resample
from duplexkit.vad import SAMPLE_RATE_HZ, FrameScorer, SpeechStarted, VadParams, VoiceActivityDetector

SILERO_DEFAULTS = VadParams(
    threshold=0.5, min_speech_ms=250.0, silence_duration_ms=100.0, prefix_padding_ms=30.0
)
"""`get_speech_timestamps`' defaults, in `VadParams`' terms."""
PAD_S = 0.030


def speech_segments(
    samples: npt.NDArray[np.float32],
    rate_hz: int,
    *,
    scorer: Callable[[], FrameScorer] | None = None,
) -> list[tuple[float, float]]:
    """`[(start_s, end_s), ...]` of speech in `samples` (mono, any rate; resampled to 16 kHz)."""
    if rate_hz != SAMPLE_RATE_HZ:
        samples = resample(samples, rate_hz, SAMPLE_RATE_HZ)
    if scorer is None:
        from duplexkit.vad import SileroScorer

        scorer = SileroScorer
    detector = VoiceActivityDetector(scorer(), SILERO_DEFAULTS)
    end_s = len(samples) / SAMPLE_RATE_HZ
    out: list[tuple[float, float]] = []
    start: float | None = None
    for event in [*detector.feed(samples, 0.0), *detector.flush()]:
        if isinstance(event, SpeechStarted):
            start = event.audio_start_ms / 1000
        elif start is not None:
            out.append((round(start, 3), round(min(end_s, event.speech_end_ms / 1000 + PAD_S), 3)))
            start = None
    return out
