"""A unit of input audio (plus the video frames that rode on it), as the model steps it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from duplexkit.engine.fence import Fence
from duplexkit.engine.tools import FunctionOutput
from duplexkit.protocol.units import samples_to_ms


@dataclass(frozen=True, slots=True)
class Unit:
    """One model step's input: `samples` (float32 mono at the model's input rate) covering
    `[start_ms, end_ms)` of the client's media clock.

    `final` marks the residual flushed by a commit (or a `response.create`: answer now); `continuation`
    marks silence the server synthesised while input paused (it is not on the client's media clock).
    `tool_outputs` are the outputs of the model's function calls that the client sent since the last unit;
    `user_texts` the text of the user messages it created since (`input_text` content, in order): the
    user's turn, typed; a model answers it on a final unit (the client's `response.create`).
    """

    index: int
    fence: Fence
    samples: npt.NDArray[np.float32]
    sample_rate_hz: int
    start_ms: float
    end_ms: float
    frames: tuple[bytes, ...] = ()
    final: bool = False
    continuation: bool = False
    force_listen: bool = False
    is_speech: bool | None = None
    tool_outputs: tuple[FunctionOutput, ...] = ()
    user_texts: tuple[str, ...] = ()

    @property
    def duration_ms(self) -> float:
        return samples_to_ms(len(self.samples), self.sample_rate_hz)
