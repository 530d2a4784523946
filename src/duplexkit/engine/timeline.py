"""The session's input on its media clock: audio cut into numbered units, the final units that end the
turns the client declared, and what rides the next unit to the model.

Every client event takes effect at its place on this timeline: a unit's index orders it against the
commits and requests around it, whatever the pacing of the client. A final unit (a commit's, a
`response.create`'s) not yet stepped ends a turn the client has already declared: the model's output for
the units before it belongs inside that turn (`turn_continues`). Sans-I/O: handed `now`, never reads a
clock.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from duplexkit.engine.assembler import AssembledUnit, UnitAssembler
from duplexkit.engine.fence import Fence
from duplexkit.engine.settings import EngineConfig
from duplexkit.engine.tools import FunctionOutput
from duplexkit.engine.units import Unit
from duplexkit.protocol.audio import EncodedAudio
from duplexkit.protocol.units import UnitGrid, ms_to_samples


class InputTimeline:
    """Units cut from the input on the grid, numbered in order, and counted until the model is done with
    each; the final units still queued; the function outputs and typed user texts for the next unit."""

    def __init__(self, config: EngineConfig) -> None:
        self._config = config
        self.grid = UnitGrid(config.chunk_period_ms, config.first_unit_ms)
        self._assembler = UnitAssembler(self.grid, config.input_sample_rate_hz)
        self.next_index = 0
        """The index the next unit gets (every unit before it has been handed to the model)."""
        self.outstanding = 0
        """Units handed to the model and not finished yet."""
        self.last_unit_at = 0.0
        """When a unit was last handed to the model or finished (continuations run one period after)."""
        self._final_units: list[int] = []
        self._outputs: list[FunctionOutput] = []
        self._texts: list[str] = []

    @property
    def media_ms(self) -> float:
        """The media clock: all input received so far, in ms."""
        return self._assembler.media_ms

    @property
    def buffered_samples(self) -> int:
        return self._assembler.buffered_samples

    @property
    def latest_final_unit(self) -> int | None:
        """The last final unit queued and not stepped yet (the one a request made now is answered on)."""
        return self._final_units[-1] if self._final_units else None

    @property
    def carries(self) -> bool:
        """Function outputs or user texts wait for the next unit."""
        return bool(self._outputs or self._texts)

    def turn_continues(self, unit: Unit) -> bool:
        """The client has ended its turn after `unit`: a final unit is queued behind it."""
        return any(index > unit.index for index in self._final_units)

    def carry(self, output: FunctionOutput | None = None, text: str | None = None) -> None:
        """A function output or a typed user text for the model, with the next unit it steps."""
        if output is not None:
            self._outputs.append(output)
        if text:
            self._texts.append(text)

    def push(
        self,
        audio: EncodedAudio,
        rate_hz: int,
        frames: tuple[bytes, ...],
        fence: Fence,
        now: float,
        *,
        is_speech: bool | None,
        force_listen: bool,
    ) -> list[Unit]:
        """An append: the units it completed."""
        assembled = self._assembler.push(audio, rate_hz, frames)
        return self._units(assembled, fence, now, is_speech=is_speech, force_listen=force_listen)

    def flush(self, fence: Fence, now: float, *, is_speech: bool | None = None) -> Unit:
        """A commit or a request: what is buffered becomes a final unit (possibly empty), queued."""
        [unit] = self._units([self._assembler.flush()], fence, now, is_speech=is_speech)
        return unit

    def continuation(self, fence: Fence, now: float) -> Unit:
        """A unit of silence past the input, for a reply that goes on (not on the media clock)."""
        media_ms = self._assembler.media_ms
        silence = np.zeros(
            ms_to_samples(self._config.chunk_period_ms, self._config.input_sample_rate_hz), np.float32
        )
        [unit] = self._units(
            [AssembledUnit(silence, media_ms, media_ms, (), final=False)], fence, now, continuation=True
        )
        return unit

    def clear(self) -> None:
        """Drop buffered input that is not a unit yet (the media clock keeps its place)."""
        self._assembler.clear()

    def finished(self, unit: Unit, now: float) -> None:
        """The model is done with `unit`."""
        self.outstanding = max(0, self.outstanding - 1)
        self.last_unit_at = max(self.last_unit_at, now)
        if unit.index in self._final_units:
            self._final_units.remove(unit.index)

    def drop_final_units_before(self, first_unit: int) -> None:
        """The final units a barge-in or cancel made stale end no turn any more."""
        self._final_units = [index for index in self._final_units if index >= first_unit]

    def _units(
        self,
        assembled: list[AssembledUnit],
        fence: Fence,
        now: float,
        *,
        is_speech: bool | None = None,
        force_listen: bool = False,
        continuation: bool = False,
    ) -> list[Unit]:
        units = [
            Unit(
                index=self.next_index + i,
                fence=fence,
                samples=a.samples,
                sample_rate_hz=self._config.input_sample_rate_hz,
                start_ms=a.start_ms,
                end_ms=a.end_ms,
                frames=a.frames,
                final=a.final,
                is_speech=is_speech,
                force_listen=force_listen,
                continuation=continuation,
            )
            for i, a in enumerate(assembled)
        ]
        if units and self.carries:  # the model receives them with the next unit it steps
            units[0] = dataclasses.replace(
                units[0], tool_outputs=tuple(self._outputs), user_texts=tuple(self._texts)
            )
            self._outputs, self._texts = [], []
        self._final_units += [unit.index for unit in units if unit.final]
        self.next_index += len(units)
        self.outstanding += len(units)
        if units:
            self.last_unit_at = now
        return units
