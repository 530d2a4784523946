"""The VAD segmenter on known frames (an energy scorer stands in for Silero), and Silero itself on silence."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from duplexkit.bench.fdb.segments import speech_segments


class EnergyScorer:
    frame_samples = 512

    def __call__(self, frame: npt.NDArray[np.float32]) -> float:
        return 1.0 if float(np.sqrt(np.mean(frame**2))) > 0.01 else 0.0

    def reset(self) -> None:
        pass


def tone(seconds: float) -> npt.NDArray[np.float32]:
    t = np.arange(round(seconds * 16_000)) / 16_000
    return (0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)


def silence(seconds: float) -> npt.NDArray[np.float32]:
    return np.zeros(round(seconds * 16_000), dtype=np.float32)


def test_segments_follow_silero_defaults() -> None:
    clip = np.concatenate(
        [silence(1.024), tone(1.024), silence(1.024), tone(0.128), silence(0.512), tone(0.512)]
    )
    segs = speech_segments(clip, 16_000, scorer=EnergyScorer)
    # speech 1.024-2.048 padded by 30 ms each side; the 128 ms burst is under the 250 ms minimum;
    # the last burst runs to the end of the clip, where the padding is clipped.
    # the last burst starts at 3.712 s (3.682 padded) and runs to the clip's end at 4.224 s.
    assert segs == [(0.994, 2.078), (3.682, 4.224)]


def test_other_rates_are_resampled_and_silence_has_no_segments() -> None:
    assert speech_segments(np.zeros(24_000, dtype=np.float32), 24_000) == []
    clip = np.concatenate([silence(0.5), tone(1.0)])
    clip24 = np.interp(np.arange(36_000) / 24_000, np.arange(len(clip)) / 16_000, clip).astype(np.float32)
    segs = speech_segments(clip24, 24_000, scorer=EnergyScorer)
    assert len(segs) == 1 and abs(segs[0][0] - 0.47) < 0.04
