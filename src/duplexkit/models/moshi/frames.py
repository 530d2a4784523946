"""What crosses between the plugin and its torch edge (`slots`), per slot and frame: plain numpy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FRAME_SAMPLES = 1920
"""One 80 ms frame at 24 kHz."""


@dataclass(frozen=True, slots=True)
class ForcedFrame:
    """A prompt frame stepped with its inputs and outputs forced (persona prefill), as NVIDIA's PersonaPlex
    server steps its system prompts: the agent's audio (a voice prompt's frame, or `None`: the silence
    codes), the text token; the user's channel always carries the sine codes. A frame of a voice NVIDIA's
    server saved (`.pt`) comes as codes instead of audio (`agent_codes`) and with the transformer input
    it saved for that step (`embedding`, [dim]), which replaces the one the slot's cache would give."""

    agent_pcm: npt.NDArray[np.float32] | None
    text_id: int
    agent_codes: tuple[int, ...] | None = None
    embedding: npt.NDArray[np.float32] | None = None


@dataclass(frozen=True, slots=True)
class SlotFrame:
    """What one step produced for one slot: the text token id (`-2`: still warming up), the agent's
    decoded audio and the audio codes it was decoded from (both empty while warming up)."""

    text_id: int
    audio: npt.NDArray[np.float32]
    codes: tuple[int, ...] = ()
