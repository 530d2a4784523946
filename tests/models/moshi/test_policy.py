"""The listen/speak rules of the Moshi family, named as the seeds name a token model's plugin-policy tests:
a decision is made from the unit's raw snapshot (its token id and its audio), history at output level is
ignored, a speak segment is never a listen, and per-session sampling overrides leave the defaults alone."""

from __future__ import annotations

import numpy as np
import pytest

from duplexkit.engine import Listen, Speak
from duplexkit.models.moshi.decide import UNGENERATED_TOKEN_ID, FrameOutput, SpeechTracker

PADS = frozenset({0, 3})
QUIET = np.zeros(1920, dtype=np.float32)
LOUD = (0.2 * np.sin(np.arange(1920) / 10)).astype(np.float32)


def frame(text_id: int, audio: np.ndarray = QUIET, piece: str = "") -> FrameOutput:
    return FrameOutput(text_id, piece, audio)


def tracker(**kw: int) -> SpeechTracker:
    return SpeechTracker(PADS, speech_rms=0.01, **{"end_silence_frames": 3, "max_frames": 100, **kw})


def test_listen_decision_uses_the_raw_streaming_token_snapshot() -> None:
    t = tracker()
    assert isinstance(t.decide(frame(3)), Listen)  # padding id, silent audio
    spoken = t.decide(frame(17, piece=" hello"))  # a word piece: speech, even over silent audio
    assert isinstance(spoken, Speak) and spoken.tokens == (" hello",)
    loud = tracker().decide(frame(0, LOUD))  # padding text but audio with energy: speech
    assert isinstance(loud, Speak) and loud.tokens == ()
    assert isinstance(tracker().decide(frame(UNGENERATED_TOKEN_ID)), Listen)


def test_listen_decision_ignores_the_piece_text() -> None:
    """The decision reads the id, not the detokenized text: a pad id whose piece looks like a word is
    still padding, and a word id whose piece is empty is still speech."""
    assert isinstance(tracker().decide(frame(3, piece="word")), Listen)
    assert isinstance(tracker().decide(frame(9, piece="")), Speak)


@pytest.mark.parametrize("history", [[], [17, 18, 3, 3, 3], [3] * 20, [UNGENERATED_TOKEN_ID, 17, 3, 3, 3]])
def test_listen_decision_ignores_output_level_token_history(history: list[int]) -> None:
    t = tracker()
    for text_id in history:
        t.decide(frame(text_id, piece="x" if text_id not in PADS else ""))
    assert not t.in_response
    assert isinstance(t.decide(frame(3)), Listen)
    word = t.decide(frame(21, piece=" yes"))
    assert isinstance(word, Speak) and word.tokens == (" yes",)


def test_a_speak_segment_is_not_a_listen_decision() -> None:
    """Inside a response, the quiet frames between words are part of the reply (Speak, with their audio)
    until `end_silence_frames` of them end it; a word piece is never reported as a listen."""
    t = tracker(end_silence_frames=3)
    decisions = [t.decide(f) for f in [frame(5, piece="a"), frame(3), frame(3), frame(6, piece="b")]]
    assert all(isinstance(d, Speak) for d in decisions)
    assert [d.end_of_turn for d in decisions if isinstance(d, Speak)] == [False] * 4
    tail = [t.decide(frame(3)) for _ in range(3)]
    assert all(isinstance(d, Speak) for d in tail)
    assert [d.end_of_turn for d in tail if isinstance(d, Speak)] == [False, False, True]
    assert isinstance(t.decide(frame(3)), Listen)


def test_a_budget_bounds_speech_until_the_user_speaks_again() -> None:
    """The frame that reaches the budget ends the response; the model talks on (Moshi never stops by
    itself) but is muted, reported as listening, until the user speaks; then its next word opens a reply."""
    t = tracker(max_frames=2)
    first = [t.decide(frame(5, piece="a")), t.decide(frame(6, piece="b"))]
    assert [d.end_of_turn for d in first if isinstance(d, Speak)] == [False, True]
    muted = [t.decide(frame(7, LOUD, piece="c")) for _ in range(5)]
    assert all(isinstance(d, Listen) and d.reason == "response_budget" for d in muted)
    assert not t.in_response
    again = t.decide(frame(7, piece="c"), user_speaking=True)
    assert isinstance(again, Speak) and not again.end_of_turn and t.in_response
    t.decide(frame(8, piece="d"))  # the budget again: muted again, until an interruption
    assert isinstance(t.decide(frame(9, piece="e")), Listen)
    t.interrupt()
    assert isinstance(t.decide(frame(9, piece="e")), Speak)


def test_an_interrupted_response_starts_afresh() -> None:
    t = tracker()
    t.decide(frame(5, piece="a"))
    t.interrupt()
    assert not t.in_response
    assert isinstance(t.decide(frame(3)), Listen)
