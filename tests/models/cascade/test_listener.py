"""The listener: which audio reaches the recognizer, and when the transcript so far is reported."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np

from duplexkit.models.cascade.asr import Transcript, Word, finished
from duplexkit.models.cascade.listener import (
    CATCH_UP_RATE,
    HISTORY_MS,
    AudioHistory,
    Heard,
    Listener,
    SpeechEnded,
)
from duplexkit.vad import VoiceActivityDetector
from tests.models.cascade.test_vad import ScriptedScorer


def ramp(start: int, count: int) -> np.ndarray:
    return np.arange(start, start + count, dtype=np.float32)


def test_between_returns_the_audio_of_a_media_time_span() -> None:
    history = AudioHistory()
    history.append(ramp(0, 1600), 0.0)
    history.append(ramp(1600, 1600), 100.0)
    assert np.array_equal(history.between(50.0, 150.0), ramp(800, 1600))
    assert np.array_equal(history.between(-10.0, 1e9), ramp(0, 3200))
    assert len(history.between(200.0, 300.0)) == 0
    halves = np.concatenate([history.between(0.0, 62.5), history.between(62.5, 200.0)])
    assert np.array_equal(halves, ramp(0, 3200))  # adjacent spans neither overlap nor leave a gap


def test_only_the_last_history_ms_is_kept() -> None:
    history = AudioHistory()
    for k in range(50):
        history.append(ramp(k * 1600, 1600), k * 100.0)
    held = history.between(0.0, 1e9)
    assert HISTORY_MS * 16 <= len(held) <= (HISTORY_MS + 100) * 16
    assert held[-1] == 50 * 1600 - 1


ASR_TAIL_MS = 200.0


class RecordingRecognizer:
    """Records what it is fed (in samples) and reports that count as its transcript."""

    def __init__(self) -> None:
        self.active = False
        self.fed = 0
        self.search = None
        self.tail_ms = ASR_TAIL_MS

    def begin(self) -> None:
        self.active, self.fed = True, 0

    def feed(self, samples: np.ndarray) -> None:
        self.fed += len(samples)

    def guess(self) -> Future[Transcript]:
        return finished(Transcript(str(self.fed)))

    def finish(self) -> Future[Transcript]:
        self.active = False
        return finished(Transcript(str(self.fed)))

    def settle(self) -> None:
        pass

    def abort(self) -> None:
        self.active = False


def listener(probabilities: list[float], preempt_ms: float = 0.0) -> tuple[Listener, RecordingRecognizer]:
    recognizer = RecordingRecognizer()
    vad = VoiceActivityDetector(ScriptedScorer(probabilities))
    return Listener(vad, recognizer, preempt_ms=preempt_ms), recognizer  # type: ignore[arg-type]


def feed(ears: Listener, units: int, period_ms: int = 96) -> list[Heard]:
    size = period_ms * 16
    return [ears.hear(np.zeros(size, dtype=np.float32), k * float(period_ms)) for k in range(units)]


def test_the_recognizer_hears_the_prefix_the_speech_and_only_the_start_of_the_pause() -> None:
    # 10 frames of silence, 20 of speech (32 ms each), then silence; 96 ms chunks are 3 frames.
    ears, _ = listener([0.0] * 10 + [0.9] * 20 + [0.0] * 30)
    heard = feed(ears, 20)
    (ended,) = [e for h in heard for e in h.events if isinstance(e, SpeechEnded)]
    utterance = ended.utterance()
    assert utterance is not None
    prefix, speech = 300.0, 20 * 32.0
    assert utterance.text == str(int((prefix + speech + ASR_TAIL_MS) * 16))  # not the rest of the pause
    assert utterance.speech_start_ms == 320.0 and utterance.speech_end_ms == 960.0
    assert utterance.stopped_at_ms == 960.0 + 512.0


def test_the_backlog_at_a_speech_start_is_caught_up_a_little_at_a_time() -> None:
    ears, recognizer = listener([0.0] * 10 + [0.9] * 40)
    fed = []
    for k in range(14):
        ears.hear(np.zeros(96 * 16, dtype=np.float32), k * 96.0)
        fed.append(recognizer.fed)
    budget = CATCH_UP_RATE * 96 * 16
    assert fed[4] == budget and max(np.diff(fed)) <= budget  # the 396 ms backlog is not fed at once
    assert fed[-1] == (300 + (14 * 3 - 10) * 32) * 16  # caught up by the end


def test_the_transcript_so_far_is_reported_once_a_pause_reaches_preempt_ms_and_caught_up() -> None:
    ears, _ = listener([0.0] * 3 + [0.9] * 10 + [0.0] * 30, preempt_ms=200.0)
    heard = feed(ears, 14)
    paused = [h for h in heard if h.partial is not None]
    assert paused and all(h.speech_start_ms is not None for h in paused)
    assert len({h.partial for h in paused}) == 1  # nothing more is fed during the pause: it is final
    first = heard.index(paused[0])
    assert heard[first].end_ms - (3 + 10) * 32 >= 200.0


def test_the_end_of_speech_is_reported_before_its_transcript_is_decoded() -> None:
    ears, recognizer = listener([0.0] * 10 + [0.9] * 20 + [0.0] * 30)
    decoding: Future[Transcript] = Future()
    recognizer.finish = lambda: decoding  # type: ignore[method-assign]
    (ended,) = [e for h in feed(ears, 20) for e in h.events if isinstance(e, SpeechEnded)]
    assert ended.utterance() is None and ended.stopped_at_ms == 960.0 + 512.0
    decoding.set_result(Transcript("hello there", (Word("hello", 10.0, 200.0, 0.9),)))
    utterance = ended.utterance()
    assert utterance is not None and utterance.text == "hello there"
    assert utterance.words[0].start_ms == ended.audio_start_ms + 10.0  # on the media clock


class CountingAsr:
    """Stands for `WhisperAsr`: each decode is done at once and says how many samples it was given."""

    def submit(self, audio: np.ndarray, *, words: bool = True) -> Future[Transcript]:
        return finished(Transcript(str(len(audio))))


def test_whisper_s_pause_decode_starts_at_the_first_silent_frame() -> None:
    # 3 silent frames, 11 voiced (the last ends at 448 ms), then silence; 100 ms units. The unit ending at
    # 500 ms has scored frames to 480 ms: one silent frame past the voice, and the decode starts there (at
    # a two-frame tail it would wait for the unit ending at 600 ms).
    from duplexkit.models.cascade.whisper import WhisperRecognizer

    vad = VoiceActivityDetector(ScriptedScorer([0.0] * 3 + [0.9] * 11 + [0.0] * 30))
    ears = Listener(vad, WhisperRecognizer(CountingAsr()), preempt_ms=None)  # type: ignore[arg-type]
    heard = [ears.hear(np.zeros(1600, dtype=np.float32), k * 100.0) for k in range(8)]
    first = next(h for h in heard if h.guess is not None)
    assert first.end_ms == 500.0 and first.voiced_until_ms == 448.0
    assert first.partial == str(int((448.0 + WhisperRecognizer.tail_ms) * 16))  # the voice and one frame
