"""Audio payload codecs (PCM16, float32, G.711 mu-law/A-law) and exact-count streaming resampling.

Everything here is pure: no I/O and no mutable module state. The only module-level data are the
G.711 lookup tables, computed once at import and never modified.

Sample convention: decoded audio is always a 1-D ``float32`` array in ``[-1, 1]``. The int16 <-> float
scaling is the power-of-two one (decode divides by 32768, encode multiplies by 32768, rounds and clips
to ``[-32768, 32767]``), so that every int16 value survives pcm16 -> float -> pcm16 unchanged.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Final, Literal, get_args

import numpy as np
import numpy.typing as npt
import pybase64
import soxr

__all__ = [
    "BYTES_PER_SAMPLE",
    "AudioDecodeError",
    "AudioFormat",
    "EncodedAudio",
    "StreamingResampler",
    "UnsupportedAudioFormat",
    "decode_audio",
    "decode_base64_audio",
    "decode_base64_payload",
    "encode_audio",
    "encode_base64_audio",
    "normalize_audio_format",
    "resample",
]

AudioFormat = Literal["pcm16", "pcm_f32le", "g711_ulaw", "g711_alaw"]

_CANONICAL_FORMATS: Final[tuple[AudioFormat, ...]] = get_args(AudioFormat)

_FORMAT_ALIASES: Final[dict[str, AudioFormat]] = {
    "pcm16": "pcm16",
    "pcm_s16le": "pcm16",
    "s16le": "pcm16",
    "audio/pcm": "pcm16",
    "pcm_f32le": "pcm_f32le",
    "f32le": "pcm_f32le",
    "float32": "pcm_f32le",
    "g711_ulaw": "g711_ulaw",
    "ulaw": "g711_ulaw",
    "pcmu": "g711_ulaw",
    "audio/pcmu": "g711_ulaw",
    "g711_alaw": "g711_alaw",
    "alaw": "g711_alaw",
    "pcma": "g711_alaw",
    "audio/pcma": "g711_alaw",
}

_PCM16_SCALE: Final = 32768.0

Float32Array = npt.NDArray[np.float32]


class UnsupportedAudioFormat(ValueError):
    """An audio format name that is neither a canonical format nor a known alias."""

    def __init__(self, name: object) -> None:
        accepted = ", ".join(sorted(_FORMAT_ALIASES))
        super().__init__(
            f"unsupported audio format {name!r}; accepted names (case-insensitive): {accepted}",
        )
        self.name = name


class AudioDecodeError(ValueError):
    """A payload that cannot be decoded in its declared format (bad length, NaN/inf, bad base64)."""


def normalize_audio_format(name: str) -> AudioFormat:
    """Map a format name or alias (case-insensitive, surrounding whitespace ignored) to its canonical name.

    Raises UnsupportedAudioFormat, listing the accepted names, so a client sees what it could have sent.
    """
    if not isinstance(name, str):
        raise UnsupportedAudioFormat(name)
    try:
        return _FORMAT_ALIASES[name.strip().lower()]
    except KeyError:
        raise UnsupportedAudioFormat(name) from None


def _require_format(fmt: object) -> AudioFormat:
    """Return fmt if it is a canonical AudioFormat; codecs do not accept aliases, callers normalise first."""
    for candidate in _CANONICAL_FORMATS:
        if fmt == candidate:
            return candidate
    raise UnsupportedAudioFormat(fmt)


# --------------------------------------------------------------------------------------------------
# G.711 (ITU-T G.711), vectorised. Codes are the transmitted octets (mu-law: all bits inverted,
# A-law: even bits inverted). Linear values are in the int16 domain. Input is reduced to the
# standard's 14-bit (mu-law) or 13-bit (A-law) two's-complement range by an arithmetic right shift,
# as the widely used reference implementation does.
# --------------------------------------------------------------------------------------------------

_ULAW_BIAS: Final = 0x84  # 132 in the int16 domain, 33 in the 14-bit domain
_ULAW_CLIP_14: Final = 8159  # largest 14-bit magnitude before adding the bias
_ULAW_SEGMENT_END_14: Final = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], dtype=np.int32)
_ALAW_SEGMENT_END_13: Final = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], dtype=np.int32)


def _ulaw_decode_codes(codes: npt.NDArray[np.integer]) -> npt.NDArray[np.int16]:
    """Decode mu-law octets to int16 linear values (e.g. 0x00 -> -32124, 0x80 -> 32124, 0xFF -> 0)."""
    u = (~codes.astype(np.int32)) & 0xFF
    exponent = (u >> 4) & 0x07
    magnitude = ((((u & 0x0F) << 3) + _ULAW_BIAS) << exponent) - _ULAW_BIAS
    return np.where(u & 0x80, -magnitude, magnitude).astype(np.int16)


def _ulaw_encode_int16(linear: npt.NDArray[np.int16]) -> npt.NDArray[np.uint8]:
    """Encode int16 linear values as mu-law octets (0 -> 0xFF, full scale -> 0x80 / 0x00)."""
    x14 = linear.astype(np.int32) >> 2
    negative = x14 < 0
    magnitude = np.minimum(np.abs(x14), _ULAW_CLIP_14) + (_ULAW_BIAS >> 2)
    segment = np.searchsorted(_ULAW_SEGMENT_END_14, magnitude, side="left").astype(np.int32)
    mantissa = (magnitude >> (segment + 1)) & 0x0F
    code = (segment << 4) | mantissa
    code = np.where(segment >= 8, 0x7F, code)  # unreachable after clipping; kept for the standard's shape
    mask = np.where(negative, 0x7F, 0xFF)
    return (code ^ mask).astype(np.uint8)


def _alaw_decode_codes(codes: npt.NDArray[np.integer]) -> npt.NDArray[np.int16]:
    """Decode A-law octets to int16 linear values (e.g. 0xD5 -> 8, 0x55 -> -8, 0xAA -> 32256)."""
    a = codes.astype(np.int32) ^ 0x55
    segment = (a >> 4) & 0x07
    step = ((a & 0x0F) << 4) + np.where(segment == 0, 8, 0x108)
    magnitude = np.where(segment > 1, step << np.maximum(segment - 1, 0), step)
    return np.where(a & 0x80, magnitude, -magnitude).astype(np.int16)


def _alaw_encode_int16(linear: npt.NDArray[np.int16]) -> npt.NDArray[np.uint8]:
    """Encode int16 linear values as A-law octets (0 -> 0xD5, -1 -> 0x55)."""
    x13 = linear.astype(np.int32) >> 3
    negative = x13 < 0
    magnitude = np.where(negative, -x13 - 1, x13)  # one's-complement magnitude: symmetric about -1/2
    segment = np.searchsorted(_ALAW_SEGMENT_END_13, magnitude, side="left").astype(np.int32)
    shift = np.where(segment < 2, 1, segment)
    code = (segment << 4) | ((magnitude >> shift) & 0x0F)
    code = np.where(segment >= 8, 0x7F, code)
    mask = np.where(negative, 0x55, 0xD5)
    return (code ^ mask).astype(np.uint8)


_ALL_CODES: Final = np.arange(256, dtype=np.uint8)
_ALL_INT16: Final = np.arange(-32768, 32768, dtype=np.int32).astype(np.int16)

# Decode tables map an octet to a float sample; encode tables map (int16 + 32768) to an octet.
_ULAW_TO_FLOAT: Final = (_ulaw_decode_codes(_ALL_CODES).astype(np.float32) / np.float32(_PCM16_SCALE)).astype(
    np.float32
)
_ALAW_TO_FLOAT: Final = (_alaw_decode_codes(_ALL_CODES).astype(np.float32) / np.float32(_PCM16_SCALE)).astype(
    np.float32
)
_INT16_TO_ULAW: Final = _ulaw_encode_int16(_ALL_INT16)
_INT16_TO_ALAW: Final = _alaw_encode_int16(_ALL_INT16)
for _table in (_ULAW_TO_FLOAT, _ALAW_TO_FLOAT, _INT16_TO_ULAW, _INT16_TO_ALAW):
    _table.setflags(write=False)
del _table


# --------------------------------------------------------------------------------------------------
# Decode / encode
# --------------------------------------------------------------------------------------------------


BYTES_PER_SAMPLE: Final[dict[AudioFormat, int]] = {"pcm16": 2, "pcm_f32le": 4, "g711_ulaw": 1, "g711_alaw": 1}
"""Payload bytes per mono sample of each format."""


@dataclass(frozen=True, slots=True)
class EncodedAudio:
    """A mono payload that passed its format's checks (`EncodedAudio.checked`), still in its wire encoding.

    It is converted to float once, by whoever holds the buffer the samples belong in: `decode_into` writes
    them into a caller's array (the unit assembler's unit buffer), `decode` into a new one.
    """

    data: bytes
    format: AudioFormat

    @classmethod
    def checked(cls, data: bytes, fmt: AudioFormat) -> EncodedAudio:
        """`data` in `fmt`, or AudioDecodeError for an odd pcm16 byte count, a pcm_f32le byte count that is
        not a multiple of 4, or pcm_f32le NaN/inf (garbage must not reach a model). G.711 accepts any
        length (1 byte each)."""
        fmt = _require_format(fmt)
        if fmt == "pcm16":
            if len(data) % 2:
                raise AudioDecodeError(
                    f"pcm16 payload has an odd byte count ({len(data)}); expected 2 bytes/sample"
                )
        elif fmt == "pcm_f32le":
            if len(data) % 4:
                raise AudioDecodeError(
                    f"pcm_f32le payload byte count ({len(data)}) is not a multiple of 4; "
                    "expected 4 bytes/sample"
                )
            finite = np.isfinite(np.frombuffer(data, dtype="<f4"))
            if not finite.all():
                first_bad = int(np.argmin(finite))
                raise AudioDecodeError(
                    f"pcm_f32le payload contains NaN or infinity (first at sample {first_bad})"
                )
        return cls(data, fmt)

    def __len__(self) -> int:
        """Samples in the payload."""
        return len(self.data) // BYTES_PER_SAMPLE[self.format]

    @classmethod
    def of_samples(cls, samples: npt.ArrayLike, fmt: AudioFormat) -> EncodedAudio:
        """Float samples encoded in `fmt` (`encode_audio`'s rules: clipped, NaN refused with ValueError):
        what an in-process edge or the engine holds where a JSON socket would carry base64."""
        return cls(encode_audio(samples, fmt), _require_format(fmt))

    def to_base64(self) -> str:
        """The payload as a JSON socket carries it: standard (padded, non-URL-safe) base64."""
        return pybase64.b64encode(self.data).decode("ascii")

    def decode(self) -> Float32Array:
        """The samples as a new, writable float32 array in [-1, 1]."""
        out = np.empty(len(self), dtype=np.float32)
        self.decode_into(out)
        return out

    def decode_into(self, out: Float32Array) -> None:
        """Write the samples into `out` (float32, exactly `len(self)` long): pcm16 divided by 32768,
        pcm_f32le clipped to [-1, 1], G.711 through its table."""
        if self.format == "pcm16":
            np.multiply(np.frombuffer(self.data, dtype="<i2"), np.float32(1.0 / _PCM16_SCALE), out=out)
        elif self.format == "pcm_f32le":
            np.clip(np.frombuffer(self.data, dtype="<f4"), -1.0, 1.0, out=out)
        else:
            table = _ULAW_TO_FLOAT if self.format == "g711_ulaw" else _ALAW_TO_FLOAT
            np.take(table, np.frombuffer(self.data, dtype=np.uint8), out=out)


def decode_audio(data: bytes, fmt: AudioFormat) -> Float32Array:
    """Decode a mono payload to a new, writable float32 array in [-1, 1] (`EncodedAudio` holds the rules).

    pcm16 is little-endian int16 divided by 32768; pcm_f32le values outside [-1, 1] are clipped.
    Raises AudioDecodeError for a payload its format refuses.
    """
    return EncodedAudio.checked(data, fmt).decode()


def _as_mono_float32(samples: npt.ArrayLike, what: str) -> Float32Array:
    """Coerce to a contiguous 1-D float32 array; reject other shapes so channel mix-ups fail loudly."""
    array = np.ascontiguousarray(samples, dtype=np.float32)
    if array.ndim != 1:
        raise ValueError(f"{what} must be a 1-D (mono) array, got shape {array.shape}")
    return array


def _float_to_int16(samples: Float32Array) -> npt.NDArray[np.int16]:
    """Clip to [-1, 1], scale by 32768, round half to even, clip to the int16 range."""
    scaled: Float32Array = np.rint(np.clip(samples, -1.0, 1.0) * np.float32(_PCM16_SCALE))
    return np.clip(scaled, -32768.0, 32767.0).astype(np.int16)


def encode_audio(samples: npt.ArrayLike, fmt: AudioFormat) -> bytes:
    """Encode mono float samples (clipped to [-1, 1] first) as a payload in fmt.

    pcm16 multiplies by 32768, rounds and clips to [-32768, 32767]: the exact inverse of decode_audio,
    so pcm16 round-trips bit-exactly. G.711 goes through the same int16 conversion first.
    Raises ValueError for NaN/inf samples (there is no meaningful code for them) or a non-1-D array.
    """
    fmt = _require_format(fmt)
    array = _as_mono_float32(samples, "samples")
    if not np.isfinite(array).all():
        raise ValueError("samples contain NaN or infinity; refusing to encode")
    if fmt == "pcm_f32le":
        return np.clip(array, -1.0, 1.0).astype("<f4").tobytes()
    ints = _float_to_int16(array)
    if fmt == "pcm16":
        return ints.astype("<i2").tobytes()
    index = ints.astype(np.int32) + 32768
    table = _INT16_TO_ULAW if fmt == "g711_ulaw" else _INT16_TO_ALAW
    return table[index].tobytes()


def decode_base64_payload(b64: str, fmt: AudioFormat) -> EncodedAudio:
    """Strict base64 (no whitespace, correct padding), checked in `fmt`; bad base64 is AudioDecodeError.

    pybase64 (SIMD, about 20x faster: base64 was the largest single cost of an append on the server) goes
    first; what it refuses goes to the standard library's strict decoder, which has the last word (it
    also accepts excess padding after a whole quantum, which pybase64 refuses).
    """
    try:
        data = pybase64.b64decode(b64, validate=True)
    except (ValueError, TypeError):
        try:
            data = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError, TypeError) as exc:
            raise AudioDecodeError(f"audio payload is not valid base64: {exc}") from exc
    return EncodedAudio.checked(data, fmt)


def decode_base64_audio(b64: str, fmt: AudioFormat) -> Float32Array:
    """`decode_base64_payload` then `EncodedAudio.decode`."""
    return decode_base64_payload(b64, fmt).decode()


def encode_base64_audio(samples: npt.ArrayLike, fmt: AudioFormat) -> str:
    """encode_audio followed by standard (padded, non-URL-safe) base64."""
    return pybase64.b64encode(encode_audio(samples, fmt)).decode("ascii")


# --------------------------------------------------------------------------------------------------
# Resampling
# --------------------------------------------------------------------------------------------------


def _check_rate(rate: int, name: str) -> int:
    if isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0:
        raise ValueError(f"{name} must be a positive integer sample rate, got {rate!r}")
    return rate


class StreamingResampler:
    """Mono float32 streaming resampler (soxr HQ) with exact, chunking-independent sample counts.

    Let N be the cumulative input count and ``ideal(N) = floor(N * out_rate / in_rate)``.

    * ``process`` never runs ahead: the cumulative output is at most ``ideal(N)``. It lags behind by
      ``lag_samples = ideal(N) - total_out``, soxr's filter delay plus its block buffering. The lag is a
      deterministic function of N alone (the same whatever the chunking), is bounded for a given rate pair
      (HQ maxima in output samples: 16k->24k 878 (~37 ms), 24k->16k 585, 48k->16k 585 (~37 ms),
      22.05k->24k 1006 (~42 ms), 8k->16k 1852 (~116 ms)) and is paid back by ``flush``.
    * ``flush`` ends the stream: the total output becomes exactly
      ``round_half_up(N * out_rate / in_rate)`` (soxr's own rounding; any shortfall is zero-padded and
      any excess trimmed, so the count is exact even if soxr changes).
    * The concatenated output equals ``resample`` of the concatenated input, bit for bit.

    Identity (``in_rate == out_rate``) passes samples through unchanged with zero lag.
    """

    def __init__(self, in_rate: int, out_rate: int) -> None:
        self._in_rate = _check_rate(in_rate, "in_rate")
        self._out_rate = _check_rate(out_rate, "out_rate")
        self._stream: soxr.ResampleStream | None = None
        if in_rate != out_rate:
            self._stream = soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality="HQ")
        self._total_in = 0
        self._total_out = 0
        self._held = np.zeros(0, dtype=np.float32)  # soxr output not yet allowed out (normally empty)
        self._flushed = False

    @property
    def in_rate(self) -> int:
        return self._in_rate

    @property
    def out_rate(self) -> int:
        return self._out_rate

    @property
    def total_in(self) -> int:
        """Input samples accepted so far."""
        return self._total_in

    @property
    def total_out(self) -> int:
        """Output samples returned so far (by process and flush)."""
        return self._total_out

    @property
    def lag_samples(self) -> int:
        """Output samples owed: ``floor(total_in * out/in) - total_out`` (0 after flush or for identity)."""
        if self._flushed:
            return 0
        return self._ideal_floor() - self._total_out

    @property
    def flushed(self) -> bool:
        return self._flushed

    def _ideal_floor(self) -> int:
        return (self._total_in * self._out_rate) // self._in_rate

    def _ideal_round(self) -> int:
        return (2 * self._total_in * self._out_rate + self._in_rate) // (2 * self._in_rate)

    def process(self, chunk: npt.ArrayLike) -> Float32Array:
        """Feed a 1-D chunk (any length, including 0) and return the output now available."""
        if self._flushed:
            raise RuntimeError("StreamingResampler was flushed; call reset() to start a new stream")
        samples = _as_mono_float32(chunk, "chunk")
        self._total_in += samples.size
        if self._stream is None:
            self._total_out += samples.size
            return samples.copy() if samples is chunk else samples
        if samples.size == 0:
            produced = np.zeros(0, dtype=np.float32)
        else:
            produced = np.asarray(self._stream.resample_chunk(samples), dtype=np.float32)
        return self._release(produced, self._ideal_floor())

    def flush(self) -> Float32Array:
        """Drain the stream so the total output is exactly round_half_up(N * out/in). Idempotent."""
        if self._flushed:
            return np.zeros(0, dtype=np.float32)
        self._flushed = True
        if self._stream is None:
            return np.zeros(0, dtype=np.float32)
        tail = np.asarray(self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True), np.float32)
        target = self._ideal_round()
        out = self._release(tail, target)
        shortfall = target - self._total_out
        if shortfall > 0:
            out = np.concatenate([out, np.zeros(shortfall, dtype=np.float32)])
            self._total_out = target
        self._held = np.zeros(0, dtype=np.float32)  # anything beyond the target is trimmed
        return out

    def reset(self) -> None:
        """Forget all state (including a flush) and start a fresh stream with the same rates."""
        if self._stream is not None:
            self._stream.clear()
        self._total_in = 0
        self._total_out = 0
        self._held = np.zeros(0, dtype=np.float32)
        self._flushed = False

    def _release(self, produced: Float32Array, allowed_total: int) -> Float32Array:
        """Return at most allowed_total - total_out samples of held + produced; keep the rest held."""
        available = produced if self._held.size == 0 else np.concatenate([self._held, produced])
        allowed = max(0, allowed_total - self._total_out)
        out, self._held = available[:allowed], available[allowed:]
        self._total_out += out.size
        return out


def resample(samples: npt.ArrayLike, in_rate: int, out_rate: int) -> Float32Array:
    """One-shot resample of a mono clip; output length is exactly round_half_up(len * out_rate / in_rate)."""
    resampler = StreamingResampler(in_rate, out_rate)
    head = resampler.process(samples)
    tail = resampler.flush()
    return np.concatenate([head, tail]) if tail.size else head
