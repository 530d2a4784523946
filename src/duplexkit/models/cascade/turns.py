"""Turn-taking over what the listener heard: who has the floor, barge-in, backchannels. Sans-I/O.

Rules:
- speech that ends while the model is silent is a user turn: the model answers it;
- speech that *starts* while the model's reply is audible overlaps it. Once it has been voiced for
  `min_barge_in_ms` (its trailing silence does not count) while the reply is still audible, the user
  barged in: the reply is cut and the speech becomes the next user turn. Overlapping speech that ends
  sooner is a backchannel ("uh-huh", "right"): it is dropped and the reply goes on. Overlapping speech
  that outlasts the reply without barging in is an ordinary turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from duplexkit.models.cascade.listener import Heard, SpeechEnded


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    interrupt: bool = False
    """Cut the audible reply now."""
    turn: SpeechEnded | None = None
    """A user turn that ended and wants an answer (several in one unit are merged)."""
    dropped: tuple[SpeechEnded, ...] = ()
    """Backchannels, heard and ignored."""


@dataclass(slots=True)
class _Segment:
    start_ms: float
    overlapped: bool
    barged_in: bool = False


class TurnPolicy:
    def __init__(self, min_barge_in_ms: float = 600.0) -> None:
        self.min_barge_in_ms = min_barge_in_ms
        self._segment: _Segment | None = None

    def observe(self, heard: Heard, *, model_audible: bool) -> TurnOutcome:
        """Judge one unit's events; `model_audible` says whether a reply is playing during it."""
        turns: list[SpeechEnded] = []
        dropped: list[SpeechEnded] = []
        interrupt = False
        for event in heard.events:
            if not isinstance(event, SpeechEnded):
                self._segment = _Segment(start_ms=event.speech_start_ms, overlapped=model_audible)
                continue
            segment, self._segment = self._segment, None
            overlapped = segment is not None and segment.overlapped and not segment.barged_in
            if overlapped and event.duration_ms < self.min_barge_in_ms:
                dropped.append(event)
                continue
            turns.append(event)
            interrupt = interrupt or (overlapped and model_audible)
        segment, voiced_until = self._segment, heard.voiced_until_ms
        if (
            segment is not None
            and segment.overlapped
            and not segment.barged_in
            and model_audible
            and voiced_until is not None
            and voiced_until - segment.start_ms >= self.min_barge_in_ms
        ):
            segment.barged_in = True
            interrupt = True
        turn = SpeechEnded.merged(turns) if turns else None
        return TurnOutcome(interrupt=interrupt, turn=turn, dropped=tuple(dropped))

    def reply_cut(self) -> None:
        """The reply was cut from outside (the engine's barge-in, a cancel): speech in progress no longer
        overlaps anything, so it is an ordinary turn even if short."""
        if self._segment is not None:
            self._segment.overlapped = False
