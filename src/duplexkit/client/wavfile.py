"""WAV files in and out with the stdlib `wave` module: integer PCM in, mono PCM16 out."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt

from duplexkit.protocol.audio import encode_audio

Samples = npt.NDArray[np.float32]


def read_wav(path: str | Path) -> tuple[Samples, int]:
    """Mono float32 samples in [-1, 1] and the sample rate of an integer-PCM WAV (8/16/24/32-bit, channels
    averaged). Raises `ValueError` for a file that is not such a WAV."""
    try:
        with wave.open(str(path), "rb") as wav:
            channels, width, rate = wav.getnchannels(), wav.getsampwidth(), wav.getframerate()
            raw = wav.readframes(wav.getnframes())
    except (wave.Error, EOFError) as exc:
        raise ValueError(f"{path}: not a PCM WAV file ({exc})") from None
    if width == 1:
        ints = np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0
    elif width == 2:
        ints = np.frombuffer(raw, dtype="<i2").astype(np.float32)
    elif width == 3:
        triplets = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        ints = ((triplets[:, 0] | (triplets[:, 1] << 8) | (triplets[:, 2] << 16)) << 8 >> 8).astype(
            np.float32
        )
    elif width == 4:
        ints = np.frombuffer(raw, dtype="<i4").astype(np.float32)
    else:
        raise ValueError(f"{path}: unsupported sample width of {width} bytes")
    scale = float(2 ** (8 * width - 1))
    frames = ints.reshape(-1, channels) / scale
    return frames.mean(axis=1).astype(np.float32), rate


def write_wav(path: str | Path, samples: npt.ArrayLike, rate: int) -> None:
    """Write mono samples (clipped to [-1, 1]) as a 16-bit PCM WAV."""
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(encode_audio(samples, "pcm16"))
