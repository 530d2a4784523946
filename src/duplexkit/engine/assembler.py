"""The unit assembler: cuts the appended input stream into model units on the unit grid.

Input arrives in appends of any size and rate; it is resampled to the model's input rate and cut at the
boundaries of the `UnitGrid`, so unit k always covers the same span of the media clock however the client
chunked its audio. Video frames ride with the unit that the append carrying them closes (or fills).

Input waits in a buffer where the units are cut, and an append that needs no resampling is converted from
its wire encoding straight into it (`EncodedAudio.decode_into`): no float array per append, no joining or
copying at the cut. A unit's samples are a view of the buffer, which is never written behind a cut; a new
block is allocated (with what is pending) when the buffer is full: about once a second of input, or once
per unit when units are longer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from duplexkit.protocol.audio import EncodedAudio, StreamingResampler
from duplexkit.protocol.units import UnitGrid, ms_to_samples, samples_to_ms

Samples = npt.NDArray[np.float32]

_BLOCK_MS = 1000
"""Input a new buffer block holds at least: one allocation per second for short units (12.5 at 80 ms),
while a session's live block stays the size one 1 s unit took before."""


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
        self._block = ms_to_samples(max(grid.chunk_period_ms, _BLOCK_MS), model_rate_hz)
        self._buffer: Samples = np.empty(0, dtype=np.float32)
        self._pending_len = 0  # the buffer's first samples: input received, not yet part of a unit
        self._frames: dict[int, list[bytes]] = {}
        self._input_ms = 0.0  # the media clock of the input as sent, before resampling
        self._emitted = 0  # samples (model rate) already handed out in units
        self._next_unit = 0
        self._boundary = ms_to_samples(grid.first_end_ms, model_rate_hz)  # where `_next_unit` ends

    @property
    def buffered_samples(self) -> int:
        """Samples received but not yet part of a unit (input backpressure is measured on this)."""
        return self._pending_len

    @property
    def media_ms(self) -> float:
        """The media clock: total input received so far, in ms."""
        return samples_to_ms(self._emitted + self._pending_len, self.model_rate_hz)

    def push(
        self, audio: Samples | EncodedAudio, rate_hz: int, frames: tuple[bytes, ...] = ()
    ) -> list[AssembledUnit]:
        """Append audio at `rate_hz` (float samples, or a payload still in its wire encoding); return the
        units it completed (possibly none).

        Frames ride the append that closes their unit (the client's rule): they belong to the last unit
        this append closes on the input's media clock, or, when it closes none, to the unit it ends in.
        This holds whatever the resampler's delay does to the cut.
        """
        before_ms = self._input_ms
        self._input_ms += samples_to_ms(len(audio), rate_hz)
        if frames:
            closed = self.grid.units_closed_between(before_ms, self._input_ms)
            unit = closed[-1] if closed else len(self.grid.units_closed_between(0.0, self._input_ms))
            self._frames.setdefault(max(unit, self._next_unit), []).extend(frames)
        self._add(self._resample(audio, rate_hz))
        units: list[AssembledUnit] = []
        while self._emitted + self._pending_len >= self._boundary:
            units.append(self._cut(self._boundary - self._emitted, final=False))
            self._next_unit += 1
            self._boundary = ms_to_samples(self.grid.unit_end_ms(self._next_unit), self.model_rate_hz)
        return units

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
        # The residual may end on a unit's end, or past it (the resampler's tail, or a stream at another
        # rate flushed before it): the next unit is the one that ends after it. A unit that ends where the
        # residual did would be empty; one that ended before it, a negative cut that corrupts the buffer.
        while self._boundary <= self._emitted:
            self._next_unit += 1
            self._boundary = ms_to_samples(self.grid.unit_end_ms(self._next_unit), self.model_rate_hz)
        return unit

    def clear(self) -> None:
        """Drop buffered input that is not yet a unit; the media clock keeps its position."""
        self._emitted += self._pending_len
        self._pending_len = 0
        self._frames.clear()
        self._resampler = None
        self._input_ms = self.media_ms

    def _resample(self, audio: Samples | EncodedAudio, rate_hz: int) -> Samples | EncodedAudio:
        if self._resampler is not None and self._resampler.in_rate != rate_hz:
            self._add(self._resampler.flush())
            self._resampler = None
        if rate_hz == self.model_rate_hz:
            return audio
        if self._resampler is None:
            self._resampler = StreamingResampler(rate_hz, self.model_rate_hz)
        return self._resampler.process(audio.decode() if isinstance(audio, EncodedAudio) else audio)

    def _add(self, audio: Samples | EncodedAudio) -> None:
        count = len(audio)
        if not count:
            return
        end = self._pending_len + count
        if end > len(self._buffer):
            grown = np.empty(max(end, self._block), dtype=np.float32)
            grown[: self._pending_len] = self._buffer[: self._pending_len]
            self._buffer = grown
        into = self._buffer[self._pending_len : end]
        if isinstance(audio, EncodedAudio):
            audio.decode_into(into)
        else:
            into[:] = audio
        self._pending_len = end

    def _cut(self, count: int, *, final: bool) -> AssembledUnit:
        """The next `count` buffered samples as a unit (a view); the buffer goes on after them."""
        head, self._buffer = self._buffer[:count], self._buffer[count:]
        self._pending_len -= count
        start = self._emitted
        self._emitted += count
        frames: tuple[bytes, ...] = ()
        if self._frames:
            due = [k for k in self._frames if k <= self._next_unit or final]
            frames = tuple(frame for k in sorted(due) for frame in self._frames.pop(k))
        return AssembledUnit(
            samples=head,
            start_ms=samples_to_ms(start, self.model_rate_hz),
            end_ms=samples_to_ms(self._emitted, self.model_rate_hz),
            frames=frames,
            final=final,
        )
