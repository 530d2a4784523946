"""A conversation's files: both voices on one timeline, as WAVs and a transcript (`conversation.json`).

FDB v2's orchestrator records each role at 48 kHz mono PCM16 and mixes `combined.wav` with the examiner (A)
on the left and the examinee (B) on the right; `write_recordings` writes the same three files from the
bridge's timeline (24 kHz, resampled to `rate_hz`), all of one length, so sample `n` of each is the same
moment.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt

from duplexkit.bench.bridge.core import BridgeCore
from duplexkit.client.wavfile import write_wav
from duplexkit.protocol.audio import encode_audio, resample

RECORDING_RATE_HZ = 48_000
"""FDB v2's wire and recording rate."""


def write_stereo_wav(path: Path, left: npt.ArrayLike, right: npt.ArrayLike, rate: int) -> None:
    """A 16-bit PCM stereo WAV of two equally long channels."""
    a, b = np.asarray(left, dtype=np.float32), np.asarray(right, dtype=np.float32)
    if a.shape != b.shape:
        raise ValueError("both channels must be of one length")
    interleaved = np.stack([a, b], axis=1).reshape(-1)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(2)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(encode_audio(interleaved, "pcm16"))


def recordings(core: BridgeCore, rate_hz: int = RECORDING_RATE_HZ) -> dict[str, npt.NDArray[np.float32]]:
    """Both sides' recordings at `rate_hz`: `examiner`, `examinee`."""
    return {
        speaker: resample(core.recording(speaker), core.rate_hz, rate_hz)
        for speaker in ("examiner", "examinee")
    }


def write_recordings(
    folder: Path,
    examiner: npt.ArrayLike,
    examinee: npt.ArrayLike,
    rate_hz: int = RECORDING_RATE_HZ,
    *,
    names: tuple[str, str, str] = ("A.wav", "B.wav", "combined.wav"),
) -> None:
    """`A.wav` (the examiner), `B.wav` (the examinee) and `combined.wav` (A left, B right)."""
    a, b = np.asarray(examiner, dtype=np.float32), np.asarray(examinee, dtype=np.float32)
    write_wav(folder / names[0], a, rate_hz)
    write_wav(folder / names[1], b, rate_hz)
    write_stereo_wav(folder / names[2], a, b, rate_hz)
