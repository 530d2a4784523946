"""The unit assembler: cuts the appended input stream into model units on the unit grid.

Input arrives in appends of any size and rate; it is resampled to the model's input rate and cut at the
boundaries of the `UnitGrid`, so unit k always covers the same span of the media clock however the client
chunked its audio. Video frames ride with the unit that the append carrying them closes (or fills).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from duplexkit.protocol.audio import StreamingResampler
from duplexkit.protocol.units import UnitGrid, ms_to_samples, samples_to_ms

Samples = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class AssembledUnit:
    samples: Samples
    start_ms: float
    end_ms: float
    frames: tuple[bytes, ...]
    final: bool


class UnitAssembler:
    def __init__(self, grid: UnitGrid, model_rate_hz: int) -> None:
        self.grid = grid
        self.model_rate_hz = model_rate_hz
        self._resampler: StreamingResampler | None = None
        self._pending: list[Samples] = []
        self._pending_len = 0
        self._frames: dict[int, list[bytes]] = {}
        self._input_ms = 0.0  # the media clock of the input as sent, before resampling
        self._emitted = 0  # samples (model rate) already handed out in units
        self._next_unit = 0

    @property
    def buffered_samples(self) -> int:
        """Samples received but not yet part of a unit (input backpressure is measured on this)."""
        return self._pending_len

    @property
    def media_ms(self) -> float:
        """The media clock: total input received so far, in ms."""
        return samples_to_ms(self._emitted + self._pending_len, self.model_rate_hz)

    def push(self, samples: Samples, rate_hz: int, frames: tuple[bytes, ...] = ()) -> list[AssembledUnit]:
        """Append audio at `rate_hz`; return the units it completed (possibly none).

        Frames ride the append that closes their unit (the client's rule): they belong to the last unit
        this append closes on the input's media clock, or, when it closes none, to the unit it ends in.
        This holds whatever the resampler's delay does to the cut.
        """
        before_ms = self._input_ms
        self._input_ms += samples_to_ms(len(samples), rate_hz)
        if frames:
            closed = self.grid.units_closed_between(before_ms, self._input_ms)
            unit = closed[-1] if closed else len(self.grid.units_closed_between(0.0, self._input_ms))
            self._frames.setdefault(max(unit, self._next_unit), []).extend(frames)
        self._add(self._resample(samples, rate_hz))
        units: list[AssembledUnit] = []
        while True:
            boundary = ms_to_samples(self.grid.unit_end_ms(self._next_unit), self.model_rate_hz)
            if self._emitted + self._pending_len < boundary:
                return units
            units.append(self._cut(boundary - self._emitted, final=False))
            self._next_unit += 1

    def flush(self) -> AssembledUnit:
        """Commit: emit the residual as a final unit (possibly empty) and end the resampler's stream.

        The grid stays anchored to the media clock: after a residual flushed at 2.4 s on a 1 s grid, the
        next unit covers 2.4-3.0 s.
        """
        if self._resampler is not None:
            self._add(self._resampler.flush())
            self._resampler = None
        unit = self._cut(self._pending_len, final=True)
        self._input_ms = self.media_ms
        return unit

    def clear(self) -> None:
        """Drop buffered input that is not yet a unit; the media clock keeps its position."""
        self._emitted += self._pending_len
        self._pending.clear()
        self._pending_len = 0
        self._frames.clear()
        self._resampler = None
        self._input_ms = self.media_ms

    def _resample(self, samples: Samples, rate_hz: int) -> Samples:
        if rate_hz == self.model_rate_hz and self._resampler is None:
            return samples
        if self._resampler is not None and self._resampler.in_rate != rate_hz:
            self._add(self._resampler.flush())
            self._resampler = None
        if rate_hz == self.model_rate_hz:
            return samples
        if self._resampler is None:
            self._resampler = StreamingResampler(rate_hz, self.model_rate_hz)
        return self._resampler.process(samples)

    def _add(self, samples: Samples) -> None:
        if len(samples):
            self._pending.append(samples)
            self._pending_len += len(samples)

    def _cut(self, count: int, *, final: bool) -> AssembledUnit:
        joined = np.concatenate(self._pending) if self._pending else np.zeros(0, dtype=np.float32)
        head, tail = joined[:count], joined[count:]
        self._pending = [tail] if len(tail) else []
        self._pending_len = len(tail)
        start = self._emitted
        self._emitted += len(head)
        due = [k for k in self._frames if k <= self._next_unit or final]
        frames = tuple(frame for k in sorted(due) for frame in self._frames.pop(k))
        return AssembledUnit(
            samples=head,
            start_ms=samples_to_ms(start, self.model_rate_hz),
            end_ms=samples_to_ms(self._emitted, self.model_rate_hz),
            frames=frames,
            final=final,
        )
