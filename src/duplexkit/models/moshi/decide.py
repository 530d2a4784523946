"""Listen or speak, per 80 ms frame, from what the frame's raw tokens say (Sans-I/O, no torch).

Moshi emits a text token and audio codes every frame, silence included, so "listening" is not a token of
its own: a frame speaks when its text token is a word piece (not one of the padding ids) or when its
decoded audio carries energy. The decision for a frame comes from that frame's token id and audio only,
never from detokenized text or an output-level history. The one piece of state is the response itself:
it runs from the first speaking frame until `end_silence_frames` quiet frames in a row (the last of which
ends the turn), or until the response reaches its frame budget. A speaking frame is always a `Speak`,
except past a budget: the model goes on talking (Moshi never stops by itself), but its frames are muted
(`Listen("response_budget")`, their audio not sent) until the user speaks again, so a budget bounds speech,
not just one response.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from duplexkit.engine import Listen, Speak

UNGENERATED_TOKEN_ID = -2
"""What `LMGen.step` yields for a slot that is still warming up after its reset (no output yet)."""


@dataclass(frozen=True, slots=True)
class FrameOutput:
    """One slot's output for one frame: the raw text token id, the piece it stands for (for display
    only, `""` for padding) and the agent's decoded audio (empty while the slot warms up)."""

    text_id: int
    piece: str
    audio: npt.NDArray[np.float32]


def is_speaking(frame: FrameOutput, pad_ids: Collection[int], speech_rms: float) -> bool:
    """Whether this frame, on its own, is speech: a word piece, or audio at `speech_rms` or above."""
    if frame.text_id == UNGENERATED_TOKEN_ID:
        return False
    if frame.text_id not in pad_ids:
        return True
    if len(frame.audio) == 0:
        return False
    return float(np.sqrt(np.mean(np.square(frame.audio, dtype=np.float64)))) >= speech_rms


class SpeechTracker:
    """One session's responses: which frames open, continue and end one.

    `max_frames` bounds one response (the server's budget, lowered per session, never raised): the frame
    that reaches it ends the turn, and the model's frames after it are muted until the user speaks again
    (`decide(..., user_speaking=True)`) or the response is interrupted.
    """

    def __init__(
        self, pad_ids: Collection[int], *, speech_rms: float, end_silence_frames: int, max_frames: int
    ) -> None:
        if end_silence_frames < 1 or max_frames < 1:
            raise ValueError("end_silence_frames and max_frames must be at least 1")
        self.pad_ids = frozenset(pad_ids)
        self.speech_rms = speech_rms
        self.end_silence_frames = end_silence_frames
        self.max_frames = max_frames
        self._in_response = False
        self._quiet = 0
        self._frames = 0
        self._muted = False
        """Past a budget: the model's frames are not output until the user speaks again."""

    @property
    def in_response(self) -> bool:
        return self._in_response

    def decide(self, frame: FrameOutput, *, user_speaking: bool = False) -> Listen | Speak:
        """This frame's decision; `user_speaking`: the user's input in this frame is speech."""
        if user_speaking:
            self._muted = False
        if self._muted:
            return Listen("response_budget")
        speaking = is_speaking(frame, self.pad_ids, self.speech_rms)
        if not self._in_response:
            if not speaking:
                return Listen("buffering" if frame.text_id == UNGENERATED_TOKEN_ID else "model_listen")
            self._in_response, self._quiet, self._frames = True, 0, 0
        self._frames += 1
        self._quiet = 0 if speaking else self._quiet + 1
        exhausted = self._frames >= self.max_frames
        end = self._quiet >= self.end_silence_frames or exhausted
        if end:
            self._in_response = False
            self._muted = exhausted
        tokens = (frame.piece,) if speaking and frame.piece else ()
        return Speak(tokens=tokens, audio=frame.audio, end_of_turn=end)

    def interrupt(self) -> None:
        """The response was cut off (barge-in, cancel): the next speaking frame opens a new one."""
        self._in_response = False
        self._muted = False
