"""Video frames for the judge: decode a clip once with PyAV, encode the frames shown at given times as JPEG.

The frame shown at time t is the last decoded frame whose timestamp is at or before t (the first frame for
a t before it, the last frame for a t past the end). Frames are scaled to fit within `max_side` pixels.
Synchronous and CPU-bound: call it from a worker thread.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from fractions import Fraction

import av

MAX_SIDE = 640


class VideoError(ValueError):
    """The video cannot be decoded (corrupt, unsupported, or without a video stream)."""


def extract_jpegs(video: bytes, times: Sequence[float], *, max_side: int = MAX_SIDE) -> dict[float, bytes]:
    """JPEG bytes of the frame shown at each of `times`, keyed by the time; decodes only as far as needed."""
    targets = sorted(set(times))
    found: dict[float, bytes] = {}
    if not targets:
        return found
    try:
        with av.open(io.BytesIO(video), mode="r") as container:
            if not container.streams.video:
                raise VideoError("the container has no video stream")
            previous: av.VideoFrame | None = None
            for frame in container.decode(container.streams.video[0]):
                at = float(frame.time) if frame.time is not None else 0.0
                while len(found) < len(targets) and at > targets[len(found)]:
                    found[targets[len(found)]] = _jpeg(frame if previous is None else previous, max_side)
                if len(found) == len(targets):
                    break
                previous = frame
            if previous is None:
                raise VideoError("the video has no frames")
            for t in targets[len(found) :]:
                found[t] = _jpeg(previous, max_side)
    except av.FFmpegError as exc:
        raise VideoError(f"cannot decode the video: {exc}") from exc
    return found


def data_url(jpeg: bytes) -> str:
    """A `data:` URL carrying a JPEG, as an OpenAI `image_url` part accepts it."""
    return "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")


def _jpeg(frame: av.VideoFrame, max_side: int) -> bytes:
    scale = min(1.0, max_side / max(frame.width, frame.height))
    width, height = _even(frame.width * scale), _even(frame.height * scale)
    encoder = av.CodecContext.create("mjpeg", "w")
    assert isinstance(encoder, av.VideoCodecContext)
    encoder.width, encoder.height, encoder.pix_fmt = width, height, "yuvj420p"
    encoder.time_base = Fraction(1, 1)
    image = frame.reformat(width=width, height=height, format="yuvj420p")
    packets = [*encoder.encode(image), *encoder.encode(None)]
    return b"".join(bytes(p) for p in packets)


def _even(size: float) -> int:
    return max(2, int(size) // 2 * 2)
