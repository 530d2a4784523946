"""Specification tests for duplexkit.protocol.audio: codecs, G.711 references, exact-count resampling."""

from __future__ import annotations

import base64
import warnings
from types import ModuleType

import numpy as np
import numpy.typing as npt
import pytest
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st

from duplexkit.protocol.audio import (
    AudioDecodeError,
    AudioFormat,
    StreamingResampler,
    UnsupportedAudioFormat,
    decode_audio,
    decode_base64_audio,
    encode_audio,
    encode_base64_audio,
    normalize_audio_format,
    resample,
)

ALL_FORMATS: tuple[AudioFormat, ...] = ("pcm16", "pcm_f32le", "g711_ulaw", "g711_alaw")
RATE_PAIRS = [(16000, 24000), (24000, 16000), (22050, 24000), (48000, 16000), (8000, 16000)]
# Documented worst-case lag of StreamingResampler.process (output samples) for soxr HQ.
DOCUMENTED_MAX_LAG = {
    (16000, 24000): 878,
    (24000, 16000): 585,
    (22050, 24000): 1006,
    (48000, 16000): 585,
    (8000, 16000): 1852,
}
ALL_INT16 = np.arange(-32768, 32768, dtype=np.int32).astype(np.int16)


@pytest.fixture(scope="module")
def audioop() -> ModuleType:
    """The stdlib G.711 implementation (deprecated, gone in 3.13) as an independent oracle."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module: ModuleType = pytest.importorskip("audioop")
    return module


def int16_as_float(values: npt.NDArray[np.int16]) -> npt.NDArray[np.float32]:
    return values.astype(np.float32) / np.float32(32768.0)


def decode_to_int16(data: bytes, fmt: AudioFormat) -> npt.NDArray[np.int32]:
    return np.rint(decode_audio(data, fmt).astype(np.float64) * 32768.0).astype(np.int32)


def round_half_up_ratio(n: int, in_rate: int, out_rate: int) -> int:
    return (2 * n * out_rate + in_rate) // (2 * in_rate)


# --- format names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("pcm16", "pcm16"),
        ("PCM_S16LE", "pcm16"),
        ("s16le", "pcm16"),
        ("audio/pcm", "pcm16"),
        ("pcm_f32le", "pcm_f32le"),
        ("F32LE", "pcm_f32le"),
        ("float32", "pcm_f32le"),
        ("g711_ulaw", "g711_ulaw"),
        ("ulaw", "g711_ulaw"),
        ("PCMU", "g711_ulaw"),
        ("audio/PCMU", "g711_ulaw"),
        ("G711_ALAW", "g711_alaw"),
        ("alaw", "g711_alaw"),
        ("pcma", "g711_alaw"),
        ("audio/pcma", "g711_alaw"),
        (" ulaw ", "g711_ulaw"),
    ],
)
def test_format_aliases_normalise_case_insensitively_to_the_canonical_name(
    alias: str, canonical: str
) -> None:
    assert normalize_audio_format(alias) == canonical


@pytest.mark.parametrize("name", ["mp3", "", "pcm24", "audio/opus", "g711"])
def test_unknown_format_is_rejected_with_a_message_listing_accepted_names(name: str) -> None:
    with pytest.raises(UnsupportedAudioFormat) as info:
        normalize_audio_format(name)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    for accepted in ("pcm16", "pcm_f32le", "g711_ulaw", "g711_alaw", "pcmu", "audio/pcma"):
        assert accepted in message


def test_non_string_format_name_is_rejected_as_unsupported() -> None:
    with pytest.raises(UnsupportedAudioFormat):
        normalize_audio_format(None)  # type: ignore[arg-type]


def test_codecs_require_canonical_names_not_aliases() -> None:
    with pytest.raises(UnsupportedAudioFormat):
        decode_audio(b"\x00\x00", "s16le")  # type: ignore[arg-type]
    with pytest.raises(UnsupportedAudioFormat):
        encode_audio(np.zeros(2, np.float32), "ulaw")  # type: ignore[arg-type]


# --- PCM ---------------------------------------------------------------------------------------


def test_pcm16_round_trips_every_int16_value_exactly() -> None:
    data = ALL_INT16.astype("<i2").tobytes()
    decoded = decode_audio(data, "pcm16")
    assert decoded.dtype == np.float32
    assert decoded.min() == -1.0
    assert decoded.max() == np.float32(32767 / 32768)
    assert encode_audio(decoded, "pcm16") == data


def test_pcm16_scaling_divides_by_32768_and_encoding_clips_to_int16_range() -> None:
    data = np.array([-32768, -16384, 0, 16384, 32767], dtype="<i2").tobytes()
    np.testing.assert_array_equal(decode_audio(data, "pcm16"), [-1.0, -0.5, 0.0, 0.5, 32767 / 32768])
    encoded = encode_audio(np.array([-3.0, -1.0, 1.0, 1.0001, 7.0], np.float32), "pcm16")
    np.testing.assert_array_equal(np.frombuffer(encoded, "<i2"), [-32768, -32768, 32767, 32767, 32767])


def test_pcm16_with_odd_byte_count_is_rejected() -> None:
    with pytest.raises(AudioDecodeError, match="odd byte count"):
        decode_audio(b"\x00\x01\x02", "pcm16")


def test_pcm_f32le_round_trips_in_range_values_exactly_and_clips_out_of_range() -> None:
    values = np.array([-1.0, -0.123456789, 0.0, 1e-30, 0.5, 1.0], dtype=np.float32)
    assert np.array_equal(decode_audio(encode_audio(values, "pcm_f32le"), "pcm_f32le"), values)
    wild = np.array([-2.5, 3.0], dtype="<f4").tobytes()
    np.testing.assert_array_equal(decode_audio(wild, "pcm_f32le"), [-1.0, 1.0])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_pcm_f32le_containing_nan_or_infinity_is_rejected(bad: float) -> None:
    data = np.array([0.0, 0.25, bad], dtype="<f4").tobytes()
    with pytest.raises(AudioDecodeError, match="NaN or infinity"):
        decode_audio(data, "pcm_f32le")


@pytest.mark.parametrize("length", [1, 2, 3, 5, 7])
def test_pcm_f32le_with_byte_count_not_a_multiple_of_four_is_rejected(length: int) -> None:
    with pytest.raises(AudioDecodeError, match="multiple of 4"):
        decode_audio(b"\x00" * length, "pcm_f32le")


@pytest.mark.parametrize("fmt", ["g711_ulaw", "g711_alaw"])
@pytest.mark.parametrize("length", [0, 1, 3, 161])
def test_g711_accepts_any_byte_count(fmt: AudioFormat, length: int) -> None:
    assert decode_audio(b"\x55" * length, fmt).shape == (length,)


@pytest.mark.parametrize("fmt", ALL_FORMATS)
def test_decoded_audio_is_a_writable_1d_float32_array_in_unit_range(fmt: AudioFormat) -> None:
    rng = np.random.default_rng(7)
    decoded = decode_audio(encode_audio(rng.uniform(-1, 1, 999).astype(np.float32), fmt), fmt)
    assert decoded.dtype == np.float32
    assert decoded.ndim == 1
    assert decoded.shape == (999,)
    assert decoded.flags.writeable
    assert float(np.abs(decoded).max()) <= 1.0


@pytest.mark.parametrize("fmt", ALL_FORMATS)
def test_encoding_rejects_nan_and_multichannel_input(fmt: AudioFormat) -> None:
    with pytest.raises(ValueError, match="NaN"):
        encode_audio(np.array([0.0, np.nan], np.float32), fmt)
    with pytest.raises(ValueError, match="1-D"):
        encode_audio(np.zeros((4, 2), np.float32), fmt)


@pytest.mark.parametrize("fmt", ALL_FORMATS)
def test_empty_payload_decodes_to_empty_array_and_back(fmt: AudioFormat) -> None:
    assert decode_audio(b"", fmt).shape == (0,)
    assert encode_audio(np.zeros(0, np.float32), fmt) == b""


# --- G.711 -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "linear"),
    [
        (0x00, -32124),
        (0x80, 32124),
        (0xFF, 0),
        (0x7F, 0),
        (0xFE, 8),
        (0x7E, -8),
        (0xF0, 120),
        (0x70, -120),
        (0xEF, 132),
    ],
)
def test_ulaw_decodes_reference_codes_to_g711_values(code: int, linear: int) -> None:
    assert decode_to_int16(bytes([code]), "g711_ulaw")[0] == linear


@pytest.mark.parametrize(
    ("code", "linear"),
    [(0xD5, 8), (0x55, -8), (0x2A, -32256), (0xAA, 32256), (0xD4, 24), (0xC5, 264), (0xE5, 1056)],
)
def test_alaw_decodes_reference_codes_to_g711_values(code: int, linear: int) -> None:
    assert decode_to_int16(bytes([code]), "g711_alaw")[0] == linear


@pytest.mark.parametrize(
    ("fmt", "linear", "code"),
    [
        ("g711_ulaw", 0, 0xFF),
        ("g711_ulaw", 32767, 0x80),
        ("g711_ulaw", -32768, 0x00),
        ("g711_alaw", 0, 0xD5),
        ("g711_alaw", -1, 0x55),
        ("g711_alaw", 32767, 0xAA),
        ("g711_alaw", -32768, 0x2A),
    ],
)
def test_g711_encodes_reference_values(fmt: AudioFormat, linear: int, code: int) -> None:
    assert encode_audio(int16_as_float(np.array([linear], np.int16)), fmt) == bytes([code])


def _itu_g711_tables() -> dict[str, dict[int, int]]:
    """Every code's decoder output, from ITU-T G.711 Tables 1a/2a (segment s, interval q within it), in the
    int16 domain. mu-law: output (2q + 33) * 2^s - 33 on the 8159 scale (x4), character = (sign, s, q) with
    every bit inverted, positive with the sign bit set. A-law: output 2q + 1 in segment 0, else
    (2q + 33) * 2^(s - 1), on the 4096 scale (x8), character = (sign, s, q) with the even bits inverted
    (XOR 0x55), positive with the sign bit set. Written from the standard's tables, not from the codec."""
    ulaw: dict[int, int] = {}
    alaw: dict[int, int] = {}
    for s in range(8):
        for q in range(16):
            mu = 4 * (((2 * q + 33) << s) - 33)
            ulaw[0xFF ^ (0x80 | s << 4 | q) ^ 0x80] = mu  # positive: sign bit 1 before inversion
            ulaw[0xFF ^ (s << 4 | q) ^ 0x80] = -mu
            a = 8 * (2 * q + 1 if s == 0 else (2 * q + 33) << (s - 1))
            alaw[(0x80 | s << 4 | q) ^ 0x55] = a
            alaw[(s << 4 | q) ^ 0x55] = -a
    return {"g711_ulaw": ulaw, "g711_alaw": alaw}


@pytest.mark.parametrize("fmt", ["g711_ulaw", "g711_alaw"])
def test_g711_decodes_every_code_to_the_itu_table_and_encodes_each_output_back_to_its_code(
    fmt: AudioFormat,
) -> None:
    table = _itu_g711_tables()[fmt]
    assert len(table) == 256
    codes = bytes(sorted(table))
    np.testing.assert_array_equal(decode_to_int16(codes, fmt), [table[c] for c in codes])
    for code, linear in table.items():
        if linear == 0 and fmt == "g711_ulaw":
            continue  # mu-law has two zeros (0xFF, 0x7F); the encoder sends +0 (0xFF), tested above
        assert encode_audio(int16_as_float(np.array([linear], np.int16)), fmt) == bytes([code])


@pytest.mark.parametrize("fmt", ["g711_ulaw", "g711_alaw"])
def test_g711_codes_differing_only_in_the_sign_bit_decode_to_opposite_values(fmt: AudioFormat) -> None:
    decoded = decode_to_int16(bytes(range(256)), fmt)
    flipped = decode_to_int16(bytes(c ^ 0x80 for c in range(256)), fmt)
    np.testing.assert_array_equal(decoded, -flipped)


@pytest.mark.parametrize("fmt", ["g711_ulaw", "g711_alaw"])
def test_g711_encoding_is_monotonic_and_reencoding_a_decoded_value_is_stable(fmt: AudioFormat) -> None:
    sweep = decode_to_int16(encode_audio(int16_as_float(ALL_INT16), fmt), fmt)
    assert np.all(np.diff(sweep) >= 0)
    levels = decode_audio(bytes(range(256)), fmt)
    assert np.array_equal(decode_audio(encode_audio(levels, fmt), fmt), levels)


@pytest.mark.parametrize(("fmt", "oracle_name"), [("g711_ulaw", "ulaw2lin"), ("g711_alaw", "alaw2lin")])
def test_g711_decoding_matches_stdlib_audioop_for_all_256_codes(
    audioop: ModuleType, fmt: AudioFormat, oracle_name: str
) -> None:
    codes = bytes(range(256))
    expected = np.frombuffer(getattr(audioop, oracle_name)(codes, 2), "<i2").astype(np.int32)
    np.testing.assert_array_equal(decode_to_int16(codes, fmt), expected)


def test_g711_encoding_matches_stdlib_audioop_for_every_int16_value(audioop: ModuleType) -> None:
    pcm = ALL_INT16.astype("<i2").tobytes()
    floats = int16_as_float(ALL_INT16)
    assert encode_audio(floats, "g711_ulaw") == audioop.lin2ulaw(pcm, 2)
    assert encode_audio(floats, "g711_alaw") == audioop.lin2alaw(pcm, 2)


# --- base64 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ALL_FORMATS)
def test_base64_round_trip_preserves_codec_output(fmt: AudioFormat) -> None:
    samples = np.linspace(-1, 1, 321, dtype=np.float32)
    b64 = encode_base64_audio(samples, fmt)
    assert base64.b64decode(b64, validate=True) == encode_audio(samples, fmt)
    np.testing.assert_array_equal(
        decode_base64_audio(b64, fmt), decode_audio(encode_audio(samples, fmt), fmt)
    )


@pytest.mark.parametrize("bad", ["AAA", "AA=A", "AA AA", "AAAA\n", "AA*A", "ÄÄÄÄ", "A==="])
def test_invalid_base64_is_rejected_as_a_decode_error(bad: str) -> None:
    with pytest.raises(AudioDecodeError, match="base64"):
        decode_base64_audio(bad, "g711_ulaw")


def test_valid_base64_with_a_malformed_payload_reports_the_payload_problem() -> None:
    with pytest.raises(AudioDecodeError, match="odd byte count"):
        decode_base64_audio(base64.b64encode(b"\x00\x00\x00").decode(), "pcm16")


# --- resampling --------------------------------------------------------------------------------


def feed(resampler: StreamingResampler, signal: npt.NDArray[np.float32], sizes: list[int]) -> list[int]:
    """Feed signal in chunks of the given sizes (cycled), checking the never-ahead rule; return lags."""
    produced = 0
    lags: list[int] = []
    pos = 0
    i = 0
    while pos < signal.size:
        size = sizes[i % len(sizes)]
        i += 1
        out = resampler.process(signal[pos : pos + size])
        pos = min(signal.size, pos + size)
        produced += out.size
        assert out.dtype == np.float32
        ideal = pos * resampler.out_rate // resampler.in_rate
        assert resampler.total_in == pos
        assert resampler.total_out == produced <= ideal
        assert resampler.lag_samples == ideal - resampler.total_out
        lags.append(resampler.lag_samples)
    return lags


def stream(
    in_rate: int, out_rate: int, signal: npt.NDArray[np.float32], sizes: list[int]
) -> npt.NDArray[np.float32]:
    resampler = StreamingResampler(in_rate, out_rate)
    parts: list[npt.NDArray[np.float32]] = []
    pos = 0
    i = 0
    while pos < signal.size:
        size = sizes[i % len(sizes)]
        i += 1
        parts.append(resampler.process(signal[pos : pos + size]))
        pos += size
    parts.append(resampler.flush())
    return np.concatenate(parts)


@settings(max_examples=50, deadline=None)
@given(
    pair=st.sampled_from(RATE_PAIRS),
    sizes=st.lists(st.integers(min_value=0, max_value=2500), min_size=1, max_size=25),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_resampler_output_count_is_exact_for_any_chunking(
    pair: tuple[int, int], sizes: list[int], seed: int
) -> None:
    in_rate, out_rate = pair
    total = sum(sizes)
    signal = np.random.default_rng(seed).uniform(-1, 1, total).astype(np.float32)
    resampler = StreamingResampler(in_rate, out_rate)
    lags = feed(resampler, signal, sizes)
    assert max(lags, default=0) <= DOCUMENTED_MAX_LAG[pair]
    resampler.flush()
    assert resampler.total_out == round_half_up_ratio(total, in_rate, out_rate)
    assert resampler.lag_samples == 0


@pytest.mark.parametrize("pair", RATE_PAIRS)
def test_resampler_lag_never_exceeds_the_documented_bound_at_any_input_count(pair: tuple[int, int]) -> None:
    resampler = StreamingResampler(*pair)
    lags = feed(resampler, np.zeros(3 * pair[0] // 8, np.float32), [1])  # every N up to 375 ms
    assert max(lags) <= DOCUMENTED_MAX_LAG[pair]
    assert min(lags) >= 0


@settings(max_examples=30, deadline=None)
@given(pair=st.sampled_from(RATE_PAIRS), sizes=st.lists(st.integers(1, 4000), min_size=1, max_size=10))
def test_resampler_output_depends_only_on_the_input_not_on_its_chunking(
    pair: tuple[int, int], sizes: list[int]
) -> None:
    signal = np.random.default_rng(3).uniform(-1, 1, 9000).astype(np.float32)
    assert np.array_equal(stream(*pair, signal, sizes), resample(signal, *pair))


@pytest.mark.parametrize("pair", RATE_PAIRS)
def test_streaming_output_is_bit_identical_to_one_shot_and_matches_soxr(pair: tuple[int, int]) -> None:
    in_rate, out_rate = pair
    signal = np.random.default_rng(11).uniform(-0.9, 0.9, in_rate // 2).astype(np.float32)
    streamed = stream(in_rate, out_rate, signal, [1, 317, 20, 4096, 3, 160])
    one_shot = resample(signal, in_rate, out_rate)
    assert np.array_equal(streamed, one_shot)
    reference = soxr.resample(signal, in_rate, out_rate, quality="HQ")
    common = min(reference.size, one_shot.size)
    assert abs(reference.size - one_shot.size) <= 1
    np.testing.assert_allclose(one_shot[:common], reference[:common], rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("n", "in_rate", "out_rate", "expected"),
    [
        (0, 16000, 24000, 0),
        (1, 16000, 24000, 2),  # 1.5 rounds half up
        (3, 16000, 24000, 5),  # 4.5 rounds half up
        (1, 48000, 16000, 0),  # 0.333 rounds down
        (2, 48000, 16000, 1),  # 0.667 rounds up
        (22050, 22050, 24000, 24000),
        (1000, 22050, 24000, 1088),  # 1088.435...
        (16000, 24000, 16000, 10667),  # 10666.67
        (12345, 8000, 16000, 24690),
    ],
)
def test_one_shot_resample_length_is_round_half_up_of_the_exact_ratio(
    n: int, in_rate: int, out_rate: int, expected: int
) -> None:
    out = resample(np.zeros(n, np.float32), in_rate, out_rate)
    assert out.dtype == np.float32
    assert out.shape == (expected,)


@pytest.mark.parametrize(("in_rate", "out_rate"), [(16000, 24000), (22050, 24000)])
def test_sine_keeps_its_frequency_and_level_when_resampled_in_irregular_chunks(
    in_rate: int, out_rate: int
) -> None:
    t = np.arange(2 * in_rate) / in_rate
    sine = (0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    out = stream(in_rate, out_rate, sine, [7, 1021, 160, 1, 333, 2048, 50])
    assert out.size == 2 * out_rate
    spectrum = np.abs(np.fft.rfft(out * np.hanning(out.size)))
    peak_hz = float(np.argmax(spectrum)) * out_rate / out.size
    assert abs(peak_hz - 440.0) <= 2.0
    steady = out[out_rate // 4 : -out_rate // 4]
    assert float(np.max(np.abs(steady))) == pytest.approx(0.5, rel=0.01)


def test_identity_resampler_passes_samples_through_unchanged_with_no_lag() -> None:
    signal = np.random.default_rng(5).uniform(-1.5, 1.5, 1000).astype(np.float32)
    resampler = StreamingResampler(16000, 16000)
    first = resampler.process(signal[:123])
    assert resampler.lag_samples == 0
    rest = resampler.process(signal[123:])
    assert np.array_equal(np.concatenate([first, rest, resampler.flush()]), signal)
    assert resampler.total_out == resampler.total_in == 1000
    assert np.array_equal(resample(signal, 24000, 24000), signal)


def test_identity_resampler_output_does_not_alias_the_callers_buffer() -> None:
    signal = np.ones(10, np.float32)
    out = StreamingResampler(8000, 8000).process(signal)
    out[:] = 0
    assert signal.sum() == 10


def test_flush_is_idempotent_and_process_after_flush_is_an_error_until_reset() -> None:
    signal = np.random.default_rng(9).uniform(-1, 1, 5000).astype(np.float32)
    resampler = StreamingResampler(24000, 16000)
    first = np.concatenate([resampler.process(signal), resampler.flush()])
    assert resampler.flushed
    assert resampler.flush().size == 0
    with pytest.raises(RuntimeError, match="flushed"):
        resampler.process(signal)
    resampler.reset()
    assert (resampler.total_in, resampler.total_out, resampler.flushed) == (0, 0, False)
    second = np.concatenate([resampler.process(signal), resampler.flush()])
    assert np.array_equal(first, second)


def test_empty_chunks_are_accepted_and_produce_nothing() -> None:
    resampler = StreamingResampler(16000, 24000)
    assert resampler.process(np.zeros(0, np.float32)).size == 0
    assert resampler.flush().size == 0
    assert resampler.total_out == 0


@pytest.mark.parametrize(("in_rate", "out_rate"), [(0, 16000), (16000, -1), (16000.0, 24000), (True, 16000)])
def test_resampler_rejects_non_positive_or_non_integer_rates(in_rate: object, out_rate: object) -> None:
    with pytest.raises(ValueError, match="rate"):
        StreamingResampler(in_rate, out_rate)  # type: ignore[arg-type]


def test_resampler_rejects_multichannel_chunks() -> None:
    with pytest.raises(ValueError, match="1-D"):
        StreamingResampler(16000, 24000).process(np.zeros((10, 2), np.float32))
