"""Media-clock and unit arithmetic shared by server, client and benchmark (the single source of truth).

All conversions are pure functions. Rounding rules are fixed here so every component agrees on which
sample a millisecond timestamp refers to and on which unit an append closes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from .audio import BYTES_PER_SAMPLE, AudioFormat, UnsupportedAudioFormat

__all__ = [
    "MediaClock",
    "UnitGrid",
    "bytes_per_sample",
    "chunk_samples",
    "ms_to_samples",
    "samples_to_ms",
]


def _check_rate(rate: int) -> None:
    if isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0:
        raise ValueError(f"rate must be a positive integer sample rate, got {rate!r}")


def _check_finite(value: float, name: str) -> None:
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")


def ms_to_samples(ms: float, rate: int) -> int:
    """Samples in ms milliseconds at rate: ``floor(ms * rate / 1000 + 0.5)``, i.e. nearest with ties up.

    Computed in float64, which is exact for whole-millisecond inputs at the usual rates.
    """
    _check_rate(rate)
    _check_finite(ms, "ms")
    return math.floor(ms * rate / 1000.0 + 0.5)


def samples_to_ms(n: int, rate: int) -> float:
    """Milliseconds spanned by n samples at rate, as the correctly rounded float of ``n * 1000 / rate``.

    The integer product is formed exactly before the single division, so no error accumulates with n.
    """
    _check_rate(rate)
    return (n * 1000) / rate


def bytes_per_sample(fmt: AudioFormat) -> int:
    """Payload bytes per mono sample: pcm16 2, pcm_f32le 4, G.711 1."""
    try:
        return BYTES_PER_SAMPLE[fmt]
    except (KeyError, TypeError):
        raise UnsupportedAudioFormat(fmt) from None


@dataclass(frozen=True)
class UnitGrid:
    """Unit boundaries on the media clock: unit k (0-based) ends at ``first_unit_ms + k * chunk_period_ms``.

    ``first_unit_ms`` defaults to ``chunk_period_ms``; a model may close its first unit late to cover a
    lookahead (vLLM-Omni's MiniCPM-o: ``UnitGrid(1000, 1030)`` closes units at 1030, 2030, 3030 ms ...).
    After construction ``first_unit_ms`` is always an int, so ``UnitGrid(1000) == UnitGrid(1000, 1000)``.
    """

    chunk_period_ms: int
    first_unit_ms: int | None = None

    def __post_init__(self) -> None:
        period = self.chunk_period_ms
        if isinstance(period, bool) or not isinstance(period, int) or period <= 0:
            raise ValueError(f"chunk_period_ms must be a positive integer, got {period!r}")
        first = self.first_unit_ms
        if first is None:
            object.__setattr__(self, "first_unit_ms", period)
        elif isinstance(first, bool) or not isinstance(first, int) or first <= 0:
            raise ValueError(f"first_unit_ms must be a positive integer or None, got {first!r}")

    @property
    def first_end_ms(self) -> int:
        """End of unit 0 (first_unit_ms with the default applied)."""
        return self.chunk_period_ms if self.first_unit_ms is None else self.first_unit_ms

    def unit_end_ms(self, k: int) -> int:
        """Media time (ms) at which unit k closes."""
        if k < 0:
            raise ValueError(f"unit index must be >= 0, got {k}")
        return self.first_end_ms + k * self.chunk_period_ms

    def _last_closed(self, t_ms: float) -> int:
        """Largest k with unit_end_ms(k) <= t_ms, or -1 if none; exact despite float t_ms."""
        _check_finite(t_ms, "time")
        first, period = self.first_end_ms, self.chunk_period_ms
        if t_ms < first:
            return -1
        k = math.floor((t_ms - first) / period)
        # Correct any off-by-one from float division using exact int/float comparisons.
        while k >= 0 and first + k * period > t_ms:
            k -= 1
        while first + (k + 1) * period <= t_ms:
            k += 1
        return k

    def units_closed_between(self, prev_end_ms: float, new_end_ms: float) -> range:
        """Indices k whose boundary lies in ``(prev_end_ms, new_end_ms]``.

        A client uses this to decide that frame k rides on the append that moves the clock across the end
        of unit k. Raises ValueError if the clock would go backwards.
        """
        if new_end_ms < prev_end_ms:
            raise ValueError(f"new_end_ms ({new_end_ms}) is before prev_end_ms ({prev_end_ms})")
        return range(self._last_closed(prev_end_ms) + 1, self._last_closed(new_end_ms) + 1)

    def unit_count(self, total_ms: float, include_residual: bool) -> int:
        """Whole units closed within total_ms, plus one for a non-empty partial remainder if requested."""
        if total_ms < 0:
            raise ValueError(f"total_ms must be >= 0, got {total_ms}")
        whole = self._last_closed(total_ms) + 1
        if include_residual and self.residual_ms(total_ms) > 0:
            return whole + 1
        return whole

    def residual_ms(self, total_ms: float) -> float:
        """Media time after the last closed boundary (all of total_ms if no unit has closed)."""
        if total_ms < 0:
            raise ValueError(f"total_ms must be >= 0, got {total_ms}")
        last = self._last_closed(total_ms)
        return float(total_ms) if last < 0 else float(total_ms - self.unit_end_ms(last))


class MediaClock:
    """Cumulative media clock a sender advances as it appends audio; ``audio_end_ms`` never drifts.

    With a rate the clock counts whole samples and derives ``audio_end_ms`` with ``samples_to_ms``, so
    10_000 appends of 320 samples at 16 kHz end at exactly 200000.0 ms. ``advance_ms`` converts with
    ``ms_to_samples`` (nearest sample), so prefer ``advance_samples`` with the real slice length when a
    duration is not a whole number of samples. Without a rate the clock sums the exact values of the
    given floats (as Fractions) and rounds once when read; ``advance_samples`` then needs a rate.
    """

    def __init__(self, rate: int | None = None) -> None:
        if rate is not None:
            _check_rate(rate)
        self._rate = rate
        self._samples = 0
        self._ms = Fraction(0)

    @property
    def rate(self) -> int | None:
        return self._rate

    @property
    def total_samples(self) -> int:
        """Samples appended so far (requires a rate)."""
        if self._rate is None:
            raise ValueError("MediaClock was created without a rate; it does not count samples")
        return self._samples

    @property
    def audio_end_ms(self) -> float:
        """Cumulative media time appended so far."""
        if self._rate is not None:
            return samples_to_ms(self._samples, self._rate)
        return float(self._ms)

    def advance_samples(self, n: int) -> float:
        """Append n samples (n >= 0) and return the new audio_end_ms."""
        if self._rate is None:
            raise ValueError("advance_samples needs a MediaClock created with a rate")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"sample count must be a non-negative integer, got {n!r}")
        self._samples += n
        return self.audio_end_ms

    def advance_ms(self, duration_ms: float) -> float:
        """Append duration_ms (>= 0) of media and return the new audio_end_ms."""
        _check_finite(duration_ms, "duration_ms")
        if duration_ms < 0:
            raise ValueError(f"duration_ms must be >= 0, got {duration_ms}")
        if self._rate is not None:
            return self.advance_samples(ms_to_samples(duration_ms, self._rate))
        self._ms += Fraction(duration_ms)
        return self.audio_end_ms

    def advance(self, duration_ms: float) -> float:
        """Alias of advance_ms."""
        return self.advance_ms(duration_ms)


def chunk_samples(total: int, rate: int, chunk_ms: int) -> list[tuple[int, int]]:
    """Half-open ``[start, stop)`` slices that cut total samples into chunk_ms pieces, the last one shorter.

    Boundary i sits at ``round_half_up(i * chunk_ms * rate / 1000)`` computed in integers, so when a chunk is
    not a whole number of samples (10 ms at 22.05 kHz) piece lengths alternate (220/221) instead of
    drifting. The slices are contiguous, non-empty and cover ``[0, total)`` exactly.
    """
    _check_rate(rate)
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise ValueError(f"total must be a non-negative integer, got {total!r}")
    if isinstance(chunk_ms, bool) or not isinstance(chunk_ms, int) or chunk_ms <= 0:
        raise ValueError(f"chunk_ms must be a positive integer, got {chunk_ms!r}")
    if chunk_ms * rate < 1000:
        raise ValueError(f"chunk_ms={chunk_ms} is shorter than one sample at {rate} Hz")
    slices: list[tuple[int, int]] = []
    start = 0
    i = 1
    while start < total:
        stop = min(total, (2 * i * chunk_ms * rate + 1000) // 2000)
        slices.append((start, stop))
        start = stop
        i += 1
    return slices
