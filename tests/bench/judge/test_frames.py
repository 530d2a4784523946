"""Frames for the judge, decoded with PyAV and encoded as JPEG."""

from __future__ import annotations

import av
import numpy as np
import pytest

from duplexkit.bench.judge.frames import VideoError, data_url, extract_jpegs
from tests.bench.judge.conftest import SECOND_COLOURS, make_video


def _decode(jpeg: bytes) -> np.ndarray:
    decoder = av.CodecContext.create("mjpeg", "r")
    (frame,) = decoder.decode(av.Packet(jpeg))
    assert isinstance(frame, av.VideoFrame)
    return frame.to_ndarray(format="rgb24")


def test_each_time_gets_the_frame_shown_then(video12: bytes) -> None:
    times = [0.1, 1.5, 2.6, 11.9, 30.0]
    jpegs = extract_jpegs(video12, times)
    assert sorted(jpegs) == times
    for t in times:
        pixel = _decode(jpegs[t])[10, 10].astype(int)
        expected = np.array(SECOND_COLOURS[min(int(t), 11) % 3])
        assert np.abs(pixel - expected).max() < 40, (t, pixel)
        assert jpegs[t][:2] == b"\xff\xd8"


def test_frames_fit_within_max_side() -> None:
    video = make_video(1, size=(320, 240))
    (jpeg,) = extract_jpegs(video, [0.5], max_side=100).values()
    assert _decode(jpeg).shape == (74, 100, 3)


def test_garbage_is_a_video_error() -> None:
    with pytest.raises(VideoError):
        extract_jpegs(b"not a video at all", [1.0])


def test_data_url() -> None:
    assert data_url(b"\xff\xd8") == "data:image/jpeg;base64,/9g="
