"""Shared builders for the runner tests: short speech-like clips, tiny videos, samples and JSONL datasets.

Everything is generated in memory or under the test's temp dir; nothing is downloaded.
"""

from __future__ import annotations

import io
import json
import wave
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt

from duplexkit.bench.omni_duplex_eval.dataset import Media, Sample

RATE_HZ = 16_000


def speech_like(seconds: float, *, rate_hz: int = RATE_HZ, seed: int = 0) -> npt.NDArray[np.float32]:
    """A voiced buzz (120-200 Hz fundamental, a few harmonics) gated into ~4 syllables a second."""
    rng = np.random.default_rng(seed)
    n = round(seconds * rate_hz)
    t = np.arange(n) / rate_hz
    f0 = 150 + 30 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, np.pi))
    phase = 2 * np.pi * np.cumsum(f0) / rate_hz
    voiced = sum(np.sin(k * phase) / k for k in range(1, 6))
    syllables = np.clip(np.sin(2 * np.pi * 4.0 * t), 0.0, None) ** 0.5
    return (0.25 * voiced * syllables / 2.3).astype(np.float32)


def wav_bytes(samples: npt.NDArray[np.float32], rate_hz: int = RATE_HZ) -> bytes:
    """Mono PCM16 WAV file bytes."""
    pcm = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate_hz)
        wav.writeframes(pcm)
    return out.getvalue()


def tiny_mp4(seconds: float, *, fps: int = 5, width: int = 64, height: int = 48) -> bytes:
    """An H.264 clip whose grey level changes every frame (so every frame differs)."""
    out = io.BytesIO()
    with av.open(out, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.time_base = Fraction(1, fps)
        for i in range(max(1, round(seconds * fps))):
            level = (40 + 9 * i) % 256
            picture = np.full((height, width, 3), level, dtype=np.uint8)
            frame = av.VideoFrame.from_ndarray(picture, format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()


def clip_sample(
    sample_id: str, seconds: float = 1.5, *, split: str = "RTD_counting", video: bool = False
) -> Sample:
    """A sample whose question audio is `seconds` of speech-like sound (and optionally a tiny video)."""
    return Sample(
        split=split,
        id=sample_id,
        question_text=f"What happens in {sample_id}?",
        answer1=f"reference answer for {sample_id}",
        video_type="synthetic",
        video_duration=seconds,
        video=Media.from_bytes(tiny_mp4(seconds), f"{sample_id}.mp4") if video else None,
        question_audio=Media.from_bytes(wav_bytes(speech_like(seconds)), f"{sample_id}.wav"),
    )


def write_jsonl_dataset(
    root: Path,
    count: int,
    *,
    seconds: float = 2.0,
    splits: tuple[str, ...] = ("RTD_counting", "PR_correction"),
) -> Path:
    """`count` rows (splits alternating) with a WAV question and a tiny MP4 each; returns the manifest."""
    root.mkdir(parents=True, exist_ok=True)
    video = tiny_mp4(seconds)
    rows = []
    for i in range(count):
        split, sample_id = splits[i % len(splits)], f"clip_{i:03d}"
        (root / f"{sample_id}.wav").write_bytes(wav_bytes(speech_like(seconds, seed=i)))
        (root / f"{sample_id}.mp4").write_bytes(video)
        rows.append(
            {
                "id": sample_id,
                "split": split,
                "question_text": f"What happens in {sample_id}?",
                "answer1": "a reference answer",
                "answer2": None,
                "reminder1": 1.0 if split.startswith("PR_") else None,
                "reminder2": None,
                "video_type": "synthetic",
                "video_duration": seconds,
                "video": f"{sample_id}.mp4",
                "question_audio": f"{sample_id}.wav",
            }
        )
    manifest = root / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return manifest
