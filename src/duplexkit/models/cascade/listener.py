"""A session's ears: VAD finds the user's speech, the recognizer transcribes exactly that speech.

Blocking (both models hold the GIL): the plugin calls `Listener.hear` in a worker thread, one call at a
time per session. The recognizer gets the audio from `SpeechStarted.audio_start_ms` (prefix padding
included, taken from a short history of recent audio) up to its `tail_ms` past the latest voiced frame:
the rest of a pause is held back, and fed only if the speech goes on. Decoding the silence window would
cost CPU and let the recognizer hallucinate words into the noise floor. The end of speech (`SpeechStopped`
or a commit) is reported at once as `SpeechEnded`, whose transcript may still be decoding: a turn's end
never waits for the recogniser. Once the speech in progress has paused for `preempt_ms`, each chunk also
reports the recogniser's guess at the transcript so far (a decode, possibly still running; final unless
the user goes on: with `preempt_ms >= tail_ms`, the default, the recognizer has already heard all of the
pause it will, and the turn's `SpeechEnded.transcript` is then that same decode), so the plugin can
prepare the reply before the end of the turn is confirmed.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from duplexkit.models.cascade.asr import SearchSpec, Transcript, Word
from duplexkit.vad import SAMPLE_RATE_HZ, SpeechStarted, VoiceActivityDetector

HISTORY_MS = 2000.0
CATCH_UP_RATE = 1.5
"""While speech goes on, each chunk feeds the recognizer at most this many times its own duration: the
backlog a speech start brings (prefix padding, the VAD's confirmation) is decoded over a few chunks
rather than in one ~100 ms call that would delay every other session."""


class SpeechRecognizer(Protocol):
    """What the listener needs of a recogniser (pocketsphinx's `Recognizer`, `WhisperRecognizer`)."""

    search: SearchSpec | None
    tail_ms: float
    """Audio past the latest voiced frame that the recogniser is given."""

    @property
    def active(self) -> bool: ...

    def begin(self) -> None: ...

    def feed(self, samples: npt.NDArray[np.float32]) -> None: ...

    def guess(self) -> Future[Transcript]:
        """The transcript so far: a decode started once per length of audio fed (the same future while no
        audio is added), or known at once."""
        ...

    def finish(self) -> Future[Transcript]:
        """End the utterance; its transcript, possibly still being decoded."""
        ...

    def settle(self) -> None: ...

    def abort(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Utterance:
    """One stretch of user speech and its transcript, on the media clock."""

    text: str
    speech_start_ms: float
    speech_end_ms: float
    stopped_at_ms: float
    """When the end of speech was established (the VAD's silence window, or a commit)."""
    asr_final_ms: float
    """Wall time from the end of speech being established to its transcript being complete (0 when the
    decode started during the pause was already done)."""
    words: tuple[Word, ...] = ()
    """Word timestamps, on the media clock, when the recogniser gives them."""
    turn_probabilities: tuple[float, ...] = ()
    """The semantic turn model's answers at this speech's pauses (empty without one)."""

    @property
    def duration_ms(self) -> float:
        return self.speech_end_ms - self.speech_start_ms


@dataclass(frozen=True, slots=True)
class SpeechEnded:
    """The end of one stretch of user speech, reported the moment it is established; its transcript
    (`transcript`, a future completed by the recogniser, words in ms from `audio_start_ms`) may follow."""

    speech_start_ms: float
    speech_end_ms: float
    stopped_at_ms: float
    audio_start_ms: float
    """Media time of the first sample the recogniser was given."""
    transcript: Future[Transcript]
    ended_at: float
    """`time.perf_counter()` when the end was established."""
    turn_probabilities: tuple[float, ...] = ()

    @property
    def duration_ms(self) -> float:
        return self.speech_end_ms - self.speech_start_ms

    def utterance(self) -> Utterance | None:
        """The utterance once its transcript is complete (`None` before); re-raises a failed decode."""
        if not self.transcript.done():
            return None
        heard = self.transcript.result()
        return Utterance(
            text=heard.text,
            speech_start_ms=self.speech_start_ms,
            speech_end_ms=self.speech_end_ms,
            stopped_at_ms=self.stopped_at_ms,
            asr_final_ms=max(0.0, 1000.0 * (heard.ready_at - self.ended_at)),
            words=tuple(
                Word(w.text, w.start_ms + self.audio_start_ms, w.end_ms + self.audio_start_ms, w.probability)
                for w in heard.words
            ),
            turn_probabilities=self.turn_probabilities,
        )

    @staticmethod
    def merged(ends: Sequence[SpeechEnded]) -> SpeechEnded:
        """Several stretches that ended in one unit, as one (texts joined, words on the media clock)."""
        if len(ends) == 1:
            return ends[0]
        joined: Future[Transcript] = Future()
        lock = threading.Lock()

        def join(_: Future[Transcript]) -> None:
            with lock:
                if joined.done() or not all(end.transcript.done() for end in ends):
                    return
                try:
                    parts = [end.utterance() for end in ends]
                except BaseException as exc:
                    joined.set_exception(exc)
                    return
                heard = [p for p in parts if p is not None]
                joined.set_result(
                    Transcript(
                        " ".join(p.text for p in heard if p.text),
                        tuple(w for p in heard for w in p.words),
                        max(end.transcript.result().ready_at for end in ends),
                    )
                )

        for end in ends:
            end.transcript.add_done_callback(join)
        first, last = ends[0], ends[-1]
        return SpeechEnded(
            speech_start_ms=first.speech_start_ms,
            speech_end_ms=last.speech_end_ms,
            stopped_at_ms=last.stopped_at_ms,
            audio_start_ms=0.0,  # the joined words are on the media clock already
            transcript=joined,
            ended_at=last.ended_at,
        )


@dataclass(frozen=True, slots=True)
class Heard:
    """What one chunk of audio told the listener, in order, and the state at its end."""

    events: tuple[SpeechStarted | SpeechEnded, ...]
    end_ms: float
    speech_start_ms: float | None
    """Start of the speech still in progress at `end_ms`, if any."""
    voiced_until_ms: float | None = None
    """End of the latest speech frame of that speech (its trailing silence does not count)."""
    guess: Future[Transcript] | None = None
    """The recogniser's transcript so far, when that speech has paused for at least `Listener.preempt_ms`
    (a decode that may still be running)."""

    @property
    def partial(self) -> str | None:
        """The guess's text once decoded (`None` before, or when it failed)."""
        guess = self.guess
        if guess is None or not guess.done() or guess.cancelled() or guess.exception() is not None:
            return None
        return guess.result().text


class AudioHistory:
    """The last `HISTORY_MS` of audio, addressable by media time."""

    def __init__(self) -> None:
        self._chunks: deque[tuple[float, npt.NDArray[np.float32]]] = deque()

    def append(self, samples: npt.NDArray[np.float32], start_ms: float) -> None:
        self._chunks.append((start_ms, samples))
        horizon = start_ms + _duration_ms(samples) - HISTORY_MS
        while self._chunks[0][0] + _duration_ms(self._chunks[0][1]) <= horizon:
            self._chunks.popleft()

    def between(self, start_ms: float, end_ms: float) -> npt.NDArray[np.float32]:
        """The audio held in `[start_ms, end_ms)` (less if part of it is no longer, or not yet, held)."""
        parts = []
        for chunk_start, samples in self._chunks:
            first = max(0, round((start_ms - chunk_start) * SAMPLE_RATE_HZ / 1000.0))
            stop = min(len(samples), round((end_ms - chunk_start) * SAMPLE_RATE_HZ / 1000.0))
            if first < stop:
                parts.append(samples[first:stop])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    def clear(self) -> None:
        self._chunks.clear()


class Listener:
    def __init__(
        self, vad: VoiceActivityDetector, recognizer: SpeechRecognizer, *, preempt_ms: float | None = 0.0
    ) -> None:
        self.vad = vad
        self.recognizer = recognizer
        self.preempt_ms = preempt_ms
        """Pause after which the transcript so far is reported (0: never; `None`: the recogniser's tail)."""
        self._history = AudioHistory()
        self._speech_start_ms: float | None = None
        self._fed_until_ms = 0.0
        self._audio_start_ms = 0.0

    def hear(self, samples: npt.NDArray[np.float32], start_ms: float, *, final: bool = False) -> Heard:
        """Take one chunk of 16 kHz input; `final` (a commit) ends the speech in progress after it."""
        end_ms = start_ms + _duration_ms(samples)
        self.recognizer.settle()
        self._history.append(samples, start_ms)
        transitions = self.vad.feed(samples, start_ms)
        if final:
            transitions += self.vad.flush()
        events: list[SpeechStarted | SpeechEnded] = []
        for event in transitions:
            if isinstance(event, SpeechStarted):
                self._speech_start_ms = event.speech_start_ms
                self.recognizer.begin()
                self._fed_until_ms = self._audio_start_ms = event.audio_start_ms
                events.append(event)
                continue
            self._feed_until(min(event.speech_end_ms + self.recognizer.tail_ms, end_ms))
            speech_start_ms = self._speech_start_ms if self._speech_start_ms is not None else 0.0
            self._speech_start_ms = None
            events.append(
                SpeechEnded(
                    speech_start_ms=speech_start_ms,
                    speech_end_ms=event.speech_end_ms,
                    stopped_at_ms=min(event.audio_end_ms, end_ms),
                    audio_start_ms=self._audio_start_ms,
                    transcript=self.recognizer.finish(),
                    ended_at=time.perf_counter(),
                    turn_probabilities=tuple(self.vad.turn_probabilities),
                )
            )
        voiced_until = self.vad.voiced_until_ms
        caught_up = False
        if voiced_until is not None and self.recognizer.active:
            horizon = min(voiced_until + self.recognizer.tail_ms, end_ms)
            self._feed_until(min(horizon, self._fed_until_ms + CATCH_UP_RATE * (end_ms - start_ms)))
            caught_up = self._fed_until_ms >= horizon
        preempt = self.recognizer.tail_ms if self.preempt_ms is None else self.preempt_ms
        paused = caught_up and 0 < preempt <= self.vad.trailing_silence_ms
        return Heard(
            events=tuple(events),
            end_ms=end_ms,
            speech_start_ms=self._speech_start_ms,
            voiced_until_ms=voiced_until,
            guess=self.recognizer.guess() if paused else None,
        )

    def _feed_until(self, until_ms: float) -> None:
        if until_ms > self._fed_until_ms:
            self.recognizer.feed(self._history.between(self._fed_until_ms, until_ms))
            self._fed_until_ms = until_ms

    def close(self) -> None:
        """Give back the recognizer's decoder and forget the stream."""
        self.recognizer.abort()
        self.vad.reset()
        self._history.clear()
        self._speech_start_ms = None


def _duration_ms(samples: npt.NDArray[np.float32]) -> float:
    return 1000.0 * len(samples) / SAMPLE_RATE_HZ
