"""Voice prompts read as NVIDIA's PersonaPlex server reads them (NVIDIA/personaplex, `moshi/models/lm.py`:
`load_audio`, `normalize_audio`, `LMGen.load_voice_prompt`, `load_voice_prompt_embeddings`).

An audio voice gives the codec the same samples as NVIDIA's:
the file decoded by `sphn.read`, resampled to 24 kHz by `sphn.resample` (always, as NVIDIA does), its
single channel normalised to -24 LUFS by pyloudnorm (the library NVIDIA calls), then cast to float32 (what
NVIDIA's `torch.tensor(..., dtype=float32)` does to each frame). Blocking file and DSP work: callers run it
off the event loop. What NVIDIA's loader cannot read (more than one channel, under pyloudnorm's 0.4 s
block, digital silence: its gain is infinite) is refused with a `ValueError` that says why.

A `.pt` voice is what NVIDIA's server saves (`save_voice_prompt_embeddings`): the transformer's input
embedding at each voice-prompt step that ran the transformer, and its `LMGen` token cache after the last.
"""

from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True, eq=False)
class SavedVoice:
    """A voice prompt as NVIDIA's server saves it. Its `LMGen` skips the transformer on a prompt's first
    frame (the step only writes tokens), so `embeddings` has one row fewer than the voice has frames."""

    embeddings: npt.NDArray[np.float32]
    """[frames - 1, dim]: the transformer's input at each voice step after the first."""
    cache: npt.NDArray[np.int64]
    """[codebooks, positions]: NVIDIA's token cache (a ring of `max_delay + 3` positions) after the last
    voice frame, its offset then being `frames`."""

    @property
    def frames(self) -> int:
        return len(self.embeddings) + 1


def read_saved_voice(path: Path) -> SavedVoice:
    """A `.pt` voice saved by NVIDIA's server: `{"embeddings": [N-1, 1, 1, dim], "cache": [1, K, C]}`,
    loaded without unpickling code (`weights_only`)."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # not a torch file, or one holding more than tensors
        raise ValueError(f"voice_prompt: {path.name} is not a voice saved by PersonaPlex: {exc}") from None
    embeddings = state.get("embeddings") if isinstance(state, dict) else None
    cache = state.get("cache") if isinstance(state, dict) else None
    if not (isinstance(embeddings, torch.Tensor) and isinstance(cache, torch.Tensor)):
        raise ValueError(f"voice_prompt: {path.name} has no embeddings and cache tensors")
    if embeddings.dim() != 4 or embeddings.shape[1:3] != (1, 1) or cache.dim() != 3 or cache.shape[0] != 1:
        raise ValueError(
            f"voice_prompt: {path.name}: embeddings {tuple(embeddings.shape)} and cache "
            f"{tuple(cache.shape)} are not the shapes PersonaPlex saves ([N, 1, 1, dim], [1, K, C])"
        )
    return SavedVoice(embeddings.reshape(embeddings.shape[0], -1).float().numpy(), cache[0].long().numpy())


def check_saved_voice(saved: SavedVoice, name: str, *, dim: int, codebooks: int, max_delay: int) -> None:
    """A saved voice must come from a model of this one's shape (its embedding width and codebooks) and
    NVIDIA's cache layout (`max_delay + 3` positions; ours keeps `max_delay + 2`, so its tokens are
    carried over position by position, not copied). `ValueError` names what differs."""
    positions = max_delay + 3
    if saved.embeddings.shape[1] != dim or saved.cache.shape != (codebooks, positions):
        raise ValueError(
            f"voice_prompt: {name} was saved by another model: embeddings of width "
            f"{saved.embeddings.shape[1]} and a cache of {tuple(saved.cache.shape)}, where this model has "
            f"width {dim} and NVIDIA's cache here would be {(codebooks, positions)}"
        )
    if saved.frames < 2:
        raise ValueError(f"voice_prompt: {name} holds no voice frames")
