"""Media preparation: any audio container to 16 kHz mono PCM16, video frames sampled at k / fps as JPEGs."""

from __future__ import annotations

import io
import math
from collections.abc import Callable

import av
import numpy as np
import numpy.typing as npt
import pytest

from duplexkit.bench.media import MediaError, prepare_media
from duplexkit.bench.omni_duplex_eval.dataset import DatasetError, Media, Sample

Rgb = tuple[int, int, int]


def encode_audio(container: str, codec: str, rate: int, layout: str, seconds: float, tone_hz: float) -> bytes:
    """A sine tone in the given container and codec."""
    channels = 2 if layout == "stereo" else 1
    t = np.arange(round(seconds * rate)) / rate
    tone = (0.5 * np.sin(2 * np.pi * tone_hz * t)).astype(np.float32)
    out = io.BytesIO()
    with av.open(out, mode="w", format=container) as muxer:
        stream = muxer.add_stream(codec, rate=rate, layout=layout)
        assert isinstance(stream, av.AudioStream) and stream.codec_context.codec.audio_formats
        fmt = stream.codec_context.codec.audio_formats[0].name
        step = 1024
        for start in range(0, tone.size, step):
            chunk = np.tile(tone[start : start + step], (channels, 1))
            frame = av.AudioFrame.from_ndarray(chunk, format="fltp", layout=layout)
            frame.rate, frame.pts = rate, start
            if fmt != "fltp":
                frame = av.AudioResampler(format=fmt, layout=layout, rate=rate).resample(frame)[0]
                frame.pts = start
            muxer.mux(stream.encode(frame))
        muxer.mux(stream.encode(None))
    return out.getvalue()


def index_colour(i: int) -> Rgb:
    """A colour that identifies video frame i (i < 100) even after lossy coding."""
    return (25 * (i % 10), 25 * (i // 10), 200)


def encode_video(
    seconds: float,
    fps: int = 10,
    size: tuple[int, int] = (320, 240),
    colour: Callable[[int], Rgb] = index_colour,
) -> bytes:
    out = io.BytesIO()
    with av.open(out, mode="w", format="mp4") as muxer:
        stream = muxer.add_stream("libx264", rate=fps, options={"crf": "8", "preset": "ultrafast"})
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(round(seconds * fps)):
            image = np.empty((size[1], size[0], 3), dtype=np.uint8)
            image[:] = colour(i)
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts = i
            muxer.mux(stream.encode(frame))
        muxer.mux(stream.encode(None))
    return out.getvalue()


def decode_jpeg(data: bytes) -> npt.NDArray[np.uint8]:
    assert data[:2] == b"\xff\xd8" and data[-2:] == b"\xff\xd9"
    with av.open(io.BytesIO(data), mode="r", format="jpeg_pipe") as container:
        (frame,) = list(container.decode(video=0))
        return np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8)


def sample_with(audio: bytes, video: bytes | None = None) -> Sample:
    return Sample(
        split="RTD_counting",
        id="s1",
        question_text="q",
        question_audio=Media.from_bytes(audio, "audio"),
        video=Media.from_bytes(video, "video") if video is not None else None,
    )


WAV_1S = encode_audio("wav", "pcm_s16le", 16_000, "mono", 1.0, 440.0)


@pytest.mark.parametrize(
    ("container", "codec", "rate", "layout", "tolerance_ms"),
    [
        ("wav", "pcm_s16le", 16_000, "mono", 0.0),
        ("flac", "flac", 44_100, "stereo", 0.0),
        ("mp3", "libmp3lame", 22_050, "stereo", 80.0),
        ("ipod", "aac", 48_000, "mono", 80.0),
    ],
)
def test_question_audio_becomes_16k_mono_pcm16_of_the_same_duration(
    container: str, codec: str, rate: int, layout: str, tolerance_ms: float
) -> None:
    prepared = prepare_media(sample_with(encode_audio(container, codec, rate, layout, 2.0, 440.0)))
    assert abs(prepared.duration_ms - 2000.0) <= tolerance_ms
    assert len(prepared.pcm16) == round(prepared.duration_ms * 16) * 2
    samples = np.frombuffer(prepared.pcm16, dtype="<i2").astype(np.float64)
    spectrum = np.abs(np.fft.rfft(samples))
    peak_hz = np.argmax(spectrum) * 16_000 / samples.size
    assert abs(peak_hz - 440.0) < 3.0  # the rate really is 16 kHz
    assert 0.3 < np.abs(samples).max() / 32768 < 0.95  # a downmix, neither a clipped sum nor silence
    assert prepared.frames == () and prepared.frame_times_s == ()


@pytest.mark.parametrize("fps", [1.0, 2.0, 3.0])
def test_frames_are_the_pictures_on_screen_at_k_over_fps(fps: float) -> None:
    prepared = prepare_media(sample_with(WAV_1S, encode_video(5.0)), fps=fps)
    count = math.ceil(5.0 * fps)
    assert len(prepared.frames) == count
    assert prepared.frame_times_s == pytest.approx([k / fps for k in range(count)])
    for time_s, jpeg in zip(prepared.frame_times_s, prepared.frames, strict=True):
        image = decode_jpeg(jpeg)
        assert image.shape == (240, 320, 3)
        expected = index_colour(math.floor(time_s * 10 + 1e-6))
        assert np.abs(image[120, 160].astype(int) - expected).max() < 12, time_s


def test_frames_are_fitted_within_max_side_keeping_the_aspect_ratio() -> None:
    wide = prepare_media(sample_with(WAV_1S, encode_video(1.0, size=(640, 360))), max_side=320)
    assert decode_jpeg(wide.frames[0]).shape == (180, 320, 3)
    small = prepare_media(sample_with(WAV_1S, encode_video(1.0, size=(200, 100))), max_side=640)
    assert decode_jpeg(small.frames[0]).shape == (100, 200, 3)


def test_a_short_clip_at_a_high_rate_repeats_the_picture_on_screen() -> None:
    prepared = prepare_media(sample_with(WAV_1S, encode_video(0.5, fps=2)), fps=8.0)
    assert len(prepared.frames) == 4
    assert prepared.frames[0] == prepared.frames[3]  # one video frame covers 0 to 0.5 s


def test_undecodable_media_raise_a_media_error_naming_the_sample() -> None:
    with pytest.raises(MediaError, match=r"question audio of RTD_counting/s1: cannot decode"):
        prepare_media(sample_with(b"not audio at all" * 64))
    with pytest.raises(MediaError, match=r"video of RTD_counting/s1: cannot decode"):
        prepare_media(sample_with(WAV_1S, b"\x00\x00\x00\x18ftypmp42" + b"junk" * 256))
    with pytest.raises(MediaError, match="no audio stream"):
        prepare_media(sample_with(encode_video(0.5)))
    assert issubclass(MediaError, DatasetError)


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="fps"):
        prepare_media(sample_with(WAV_1S), fps=0.0)
    with pytest.raises(ValueError, match="max_side"):
        prepare_media(sample_with(WAV_1S), max_side=0)


def test_an_odd_input_rate_resamples_to_the_exact_length() -> None:
    prepared = prepare_media(sample_with(encode_audio("wav", "pcm_s16le", 11_025, "mono", 2.0, 300.0)))
    assert prepared.duration_ms == 2000.0
    assert len(prepared.pcm16) == 2 * 32_000
