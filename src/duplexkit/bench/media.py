"""Shared media preparation: a sample's audio to mono 16 kHz PCM16, video frames to JPEG at a set rate.

Pure functions without shared state, safe to call from worker threads. Containers are decoded with PyAV from
memory, whatever their format (wav, mp3, m4a, flac; mp4, mkv, webm, ...).
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

import av
import numpy as np

from duplexkit.bench.sources import DatasetError
from duplexkit.protocol.audio import encode_audio, resample

__all__ = [
    "TARGET_RATE_HZ",
    "MediaError",
    "PreparedMedia",
    "decode_audio",
    "prepare_media",
    "video_duration_s",
]

TARGET_RATE_HZ = 16_000
_JPEG_QSCALE = 3  # MJPEG quantiser scale, 2 (best) .. 31; 3 is visually lossless for judge frames
_TIME_EPS_S = 1e-6


class MediaError(DatasetError):
    """Media that cannot be decoded (corrupt, unsupported container, no audio or video stream)."""


class AudioVisualSample(Protocol):
    """A sample with a spoken input and an optional video (an Omni-DuplexEval `Sample` is one)."""

    @property
    def key(self) -> str: ...
    def question_audio_bytes(self) -> bytes: ...
    def video_bytes(self) -> bytes | None: ...


@dataclass(frozen=True)
class PreparedMedia:
    """Streamable media: mono 16 kHz s16le audio and JPEG frames, frame k shown from ``frame_times_s[k]``.

    ``duration_ms`` is the audio's length (samples / 16). Frames cover the video from t = 0 at the requested
    rate, so ``frame_times_s[k] == k / fps`` and there are ``ceil(video duration * fps)`` of them.
    """

    pcm16: bytes
    duration_ms: float
    frames: tuple[bytes, ...]
    frame_times_s: tuple[float, ...]


def prepare_media(sample: AudioVisualSample, *, fps: float = 1.0, max_side: int = 640) -> PreparedMedia:
    """Decode the sample's question audio and sample its video at ``fps`` from t = 0, within ``max_side``.

    Frame k is the picture on screen at k / fps. A sample without video gives no frames. Undecodable media
    raise MediaError naming the sample; a non-positive ``fps`` or ``max_side`` raises ValueError.
    """
    if not (math.isfinite(fps) and fps > 0):
        raise ValueError(f"fps must be a positive number, got {fps!r}")
    if max_side < 1:
        raise ValueError(f"max_side must be positive, got {max_side!r}")
    samples = decode_audio(sample.question_audio_bytes(), f"question audio of {sample.key}")
    video = sample.video_bytes()
    sampled = [] if video is None else list(_sample_frames(video, f"video of {sample.key}", fps, max_side))
    return PreparedMedia(
        pcm16=encode_audio(samples, "pcm16"),
        duration_ms=samples.size * 1000 / TARGET_RATE_HZ,
        frames=tuple(jpeg for _, jpeg in sampled),
        frame_times_s=tuple(time_s for time_s, _ in sampled),
    )


def video_frames(
    data: bytes, *, fps: float = 1.0, max_side: int = 640, label: str = "video"
) -> tuple[bytes, ...]:
    """A video's frames as JPEGs, frame k being the picture on screen at k / fps (see `prepare_media`)."""
    if not (math.isfinite(fps) and fps > 0):
        raise ValueError(f"fps must be a positive number, got {fps!r}")
    return tuple(jpeg for _, jpeg in _sample_frames(data, label, fps, max_side))


def decode_audio(data: bytes, label: str) -> np.ndarray:
    """The first audio stream downmixed to mono float32 and resampled to 16 kHz (exact length)."""
    chunks: list[np.ndarray] = []
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise MediaError(f"{label}: the container has no audio stream")
            stream = container.streams.audio[0]
            rate = stream.rate
            mono = av.AudioResampler(format="flt", layout="mono", rate=rate)
            for frame in container.decode(stream):
                chunks.extend(out.to_ndarray().reshape(-1) for out in mono.resample(frame))
            chunks.extend(out.to_ndarray().reshape(-1) for out in mono.resample(None))
    except av.FFmpegError as exc:
        raise MediaError(f"{label}: cannot decode ({exc})") from exc
    if not chunks or not rate:
        raise MediaError(f"{label}: no audio samples")
    return resample(np.concatenate(chunks).astype(np.float32, copy=False), rate, TARGET_RATE_HZ)


def video_duration_s(data: bytes, label: str) -> float:
    """How long a container's first video stream lasts (the container's duration when the stream has none)."""
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.video:
                raise MediaError(f"{label}: the container has no video stream")
            stream = container.streams.video[0]
            if stream.duration is not None and stream.time_base is not None:
                return float(stream.duration * stream.time_base)
            if container.duration is not None:
                return container.duration / 1_000_000
    except av.FFmpegError as exc:
        raise MediaError(f"{label}: cannot decode ({exc})") from exc
    raise MediaError(f"{label}: the video's duration is unknown")


def _fitted_size(width: int, height: int, max_side: int) -> tuple[int, int]:
    scale = min(1.0, max_side / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


def _sample_frames(data: bytes, label: str, fps: float, max_side: int) -> Iterator[tuple[float, bytes]]:
    """(k / fps, JPEG of the picture on screen then) for every k with k / fps inside the video.

    Times are relative to the first decoded frame. The picture at time t is the last frame starting at or
    before t; the video ends one frame duration after its last frame starts.
    """
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.video:
                raise MediaError(f"{label}: the container has no video stream")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            default_step = 1 / float(stream.average_rate) if stream.average_rate else 1 / 25
            encoder: av.video.codeccontext.VideoCodecContext | None = None
            origin: float | None = None
            shown: av.VideoFrame | None = None
            shown_jpeg: bytes | None = None
            shown_end = 0.0
            k = 0
            for index, frame in enumerate(container.decode(stream)):
                start = frame.time if frame.time is not None else index * default_step
                if origin is None:
                    origin = start
                    encoder = _jpeg_encoder(*_fitted_size(frame.width, frame.height, max_side))
                start -= origin
                if shown is not None and encoder is not None:
                    while k / fps < start - _TIME_EPS_S:
                        shown_jpeg = shown_jpeg or _encode_jpeg(encoder, shown, k)
                        yield k / fps, shown_jpeg
                        k += 1
                shown, shown_jpeg = frame, None
                step = float(frame.duration * frame.time_base) if frame.duration and frame.time_base else 0.0
                shown_end = start + (step or default_step)
            if shown is not None and encoder is not None:
                while k / fps < shown_end - _TIME_EPS_S:
                    shown_jpeg = shown_jpeg or _encode_jpeg(encoder, shown, k)
                    yield k / fps, shown_jpeg
                    k += 1
    except av.FFmpegError as exc:
        raise MediaError(f"{label}: cannot decode ({exc})") from exc
    if k == 0:
        raise MediaError(f"{label}: no video frames")


def _jpeg_encoder(width: int, height: int) -> av.video.codeccontext.VideoCodecContext:
    encoder = av.CodecContext.create("mjpeg", "w")
    assert isinstance(encoder, av.video.codeccontext.VideoCodecContext)
    encoder.width, encoder.height, encoder.pix_fmt = width, height, "yuvj420p"
    encoder.time_base = Fraction(1, 1)
    encoder.qmin = encoder.qmax = _JPEG_QSCALE
    return encoder


def _encode_jpeg(encoder: av.video.codeccontext.VideoCodecContext, frame: av.VideoFrame, index: int) -> bytes:
    """One standalone JPEG of ``frame`` scaled to the encoder's size (MJPEG packets are whole JPEG images).

    ``index`` must increase from call to call: the encoder rejects timestamps that do not.
    """
    scaled = frame.reformat(
        width=encoder.width, height=encoder.height, format="yuvj420p", interpolation="AREA"
    )
    scaled.pts, scaled.time_base = index, encoder.time_base
    return b"".join(bytes(packet) for packet in encoder.encode(scaled))
