"""Voice prompts read as NVIDIA's PersonaPlex server reads them (NVIDIA/personaplex, `moshi/models/lm.py`:
`load_audio`, `normalize_audio`, `LMGen.load_voice_prompt`), so a voice gives the codec the same samples:
the file decoded by `sphn.read`, resampled to 24 kHz by `sphn.resample` (always, as NVIDIA does), its
single channel normalised to -24 LUFS by pyloudnorm (the library NVIDIA calls), then cast to float32 (what
NVIDIA's `torch.tensor(..., dtype=float32)` does to each frame). Blocking file and DSP work: callers run it
off the event loop. What NVIDIA's loader cannot read (more than one channel, under pyloudnorm's 0.4 s
block, digital silence: its gain is infinite) is refused with a `ValueError` that says why."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
import numpy.typing as npt

SAMPLE_RATE_HZ = 24_000
TARGET_LUFS = -24.0
"""NVIDIA's `load_voice_prompt` normalises every WAV voice to this integrated loudness."""


def read_voice_file(path: Path) -> npt.NDArray[np.float32]:
    """A voice file's samples at 24 kHz, normalised as NVIDIA's `load_voice_prompt` does."""
    import sphn

    try:
        pcm, rate = sphn.read(str(path))
    except Exception as exc:  # sphn raises its decoders' errors as plain exceptions
        raise ValueError(f"voice_prompt: {path.name} is not an audio file sphn can read: {exc}") from None
    pcm = sphn.resample(pcm, src_sample_rate=rate, dst_sample_rate=SAMPLE_RATE_HZ)
    if pcm.shape[0] != 1:
        raise ValueError(
            f"voice_prompt: {path.name} has {pcm.shape[0]} channels; a voice is mono (NVIDIA's loudness "
            "normalisation takes one channel)"
        )
    return _normalised(pcm[0], path.name)


def read_voice_bytes(data: bytes) -> npt.NDArray[np.float32]:
    """A WAV voice given as bytes (a data URI's payload), read the same way through a temporary file."""
    with tempfile.NamedTemporaryFile(suffix=".wav") as file:
        file.write(data)
        file.flush()
        return read_voice_file(Path(file.name))


def _normalised(wav: npt.NDArray[np.float32], name: str) -> npt.NDArray[np.float32]:
    import pyloudnorm

    try:
        loudness = pyloudnorm.Meter(SAMPLE_RATE_HZ).integrated_loudness(wav)
    except ValueError:  # shorter than its gating block
        raise ValueError(
            f"voice_prompt: {name} lasts {len(wav) / SAMPLE_RATE_HZ:.2f} s; a voice needs more than 0.4 s "
            "(the loudness meter's block, as in NVIDIA's loader)"
        ) from None
    if not np.isfinite(loudness):
        raise ValueError(f"voice_prompt: {name} is silent: it cannot be normalised to {TARGET_LUFS:g} LUFS")
    with warnings.catch_warnings():  # "possible clipped samples": NVIDIA keeps them as they are
        warnings.simplefilter("ignore", UserWarning)
        normalised = pyloudnorm.normalize.loudness(wav, loudness, TARGET_LUFS)
    return np.asarray(normalised, dtype=np.float32)
