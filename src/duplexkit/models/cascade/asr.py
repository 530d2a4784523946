"""Streaming speech recognition with pocketsphinx (the en-us model ships inside its wheel).

A pocketsphinx `Decoder` holds the acoustic model, dictionary and language model (~90 MB, ~0.4 s to
build) plus mutable search state, so it cannot serve two streams at once. `DecoderPool` builds them once
per process and lends one to a session for the length of an utterance; a `Recognizer` is a session's
handle on it. A decoder the pool has to build for a session (all are lent out) costs that session
~0.4 s once. Decoding runs the first (tree) pass only, with at most 3000 active HMMs per frame: the flat
and best-path passes would make the end of an utterance cost 80-190 ms here, and the HMM cap cuts the
streaming cost to ~80 ms of CPU per second of speech (from 120-200) for at most a few words in fifty lost
in open vocabulary (none with a grammar). The transcript is the tree pass's best path, read the moment
speech ends; the decoder's own end of utterance (20-40 ms) runs later, off the reply's critical path. All
calls block and hold the GIL: run them off the event loop.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

MAX_SEARCHES_PER_DECODER = 16
MAX_HMMS_PER_FRAME = 3000
FEED_BLOCK_SAMPLES = 512
_KEYWORD_THRESHOLD = "1e-20"
_THRESHOLD_SUFFIX = re.compile(r"/[0-9.eE+-]+/\s*$")


@dataclass(frozen=True, slots=True)
class Word:
    """A recognised word and where it was said, in ms from the start of the audio recognised."""

    text: str
    start_ms: float
    end_ms: float
    probability: float


@dataclass(frozen=True, slots=True)
class Transcript:
    """What a recogniser heard in one utterance; `words` in ms from the start of the audio it was given."""

    text: str
    words: tuple[Word, ...] = ()
    ready_at: float = field(default_factory=time.perf_counter)
    """`time.perf_counter()` when the transcript was complete (to tell how long the end of a turn waited)."""


def finished(transcript: Transcript) -> Future[Transcript]:
    """A transcript known at once, for recognisers that decode as the audio comes (pocketsphinx)."""
    future: Future[Transcript] = Future()
    future.set_result(transcript)
    return future


@dataclass(frozen=True, slots=True)
class SearchSpec:
    """A per-session search replacing the open-vocabulary language model: a JSGF grammar or key phrases."""

    kind: Literal["jsgf", "keywords"]
    source: str
    """The JSGF text, or the key-phrase file (one phrase per line, each with its `/threshold/`)."""

    @classmethod
    def grammar(cls, jsgf: str) -> SearchSpec:
        if not isinstance(jsgf, str) or not jsgf.strip():
            raise ValueError("must be a non-empty JSGF grammar string")
        return cls("jsgf", jsgf)

    @classmethod
    def keywords(cls, phrases: object) -> SearchSpec:
        """Key phrases to spot; a phrase may carry its own detection threshold (`"hello there /1e-30/"`)."""
        if isinstance(phrases, str):
            phrases = [phrases]
        if not isinstance(phrases, list) or not phrases or not all(isinstance(p, str) for p in phrases):
            raise ValueError("must be a non-empty list of key phrases")
        lines = []
        for phrase in phrases:
            phrase = " ".join(phrase.lower().split())
            if not phrase:
                raise ValueError("key phrases must not be empty")
            lines.append(phrase if _THRESHOLD_SUFFIX.search(phrase) else f"{phrase} /{_KEYWORD_THRESHOLD}/")
        return cls("keywords", "\n".join(lines) + "\n")

    @property
    def name(self) -> str:
        return f"{self.kind}-{hashlib.sha1(self.source.encode()).hexdigest()[:16]}"


class PooledDecoder:
    """A decoder and the searches already built on it (least recently used first)."""

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder
        self._searches: OrderedDict[str, None] = OrderedDict()

    def activate(self, spec: SearchSpec | None) -> None:
        """Make `spec` (or the default language model) the active search; `ValueError` if it is invalid."""
        if spec is None:
            self.decoder.activate_search()
            return
        if spec.name not in self._searches:
            self._add(spec)
            if len(self._searches) >= MAX_SEARCHES_PER_DECODER:
                oldest, _ = self._searches.popitem(last=False)
                self.decoder.remove_search(oldest)
            self._searches[spec.name] = None
        self._searches.move_to_end(spec.name)
        self.decoder.activate_search(spec.name)

    def _add(self, spec: SearchSpec) -> None:
        try:
            if spec.kind == "jsgf":
                self.decoder.add_jsgf_string(spec.name, spec.source)
                return
            unknown = sorted({w for w in _keyword_words(spec.source) if self.decoder.lookup_word(w) is None})
            if unknown:
                raise ValueError(f"words not in the dictionary: {', '.join(unknown)}")
            fd, path = tempfile.mkstemp(suffix=".kws", text=True)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(spec.source)
                self.decoder.add_kws(spec.name, path)
            finally:
                os.unlink(path)
        except (RuntimeError, ValueError) as exc:
            raise ValueError(f"pocketsphinx rejected the {spec.kind} search: {exc}") from None


def _keyword_words(source: str) -> set[str]:
    return {word for line in source.splitlines() for word in _THRESHOLD_SUFFIX.sub("", line).split()}


class DecoderPool:
    """Decoders shared by the sessions of one process; thread-safe. Idle ones are kept for reuse."""

    def __init__(self, *, prewarm: int = 1) -> None:
        try:
            import pocketsphinx  # type: ignore[import-untyped]
        except ImportError as exc:
            raise ImportError(
                "speech recognition needs the 'pocketsphinx' package: pip install 'duplexkit[cascade]'"
            ) from exc
        self._decoder_type = pocketsphinx.Decoder
        self._idle: list[PooledDecoder] = []
        self._lock = threading.Lock()
        for _ in range(prewarm):
            self._idle.append(self._build())

    def _build(self) -> PooledDecoder:
        return PooledDecoder(
            self._decoder_type(loglevel="FATAL", fwdflat=False, bestpath=False, maxhmmpf=MAX_HMMS_PER_FRAME)
        )

    def acquire(self) -> PooledDecoder:
        """An idle decoder, or a new one (blocking ~0.4 s) when every decoder is lent out."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._build()

    def release(self, decoder: PooledDecoder) -> None:
        with self._lock:
            self._idle.append(decoder)

    def validate(self, spec: SearchSpec) -> None:
        """Build `spec` on a decoder now (it stays cached there); `ValueError` if pocketsphinx rejects it.
        Takes milliseconds, unless every decoder is lent out and one must be built."""
        decoder = self.acquire()
        try:
            decoder.activate(spec)
        finally:
            self.release(decoder)


class Recognizer:
    """One session's recognizer: an utterance at a time, on a decoder borrowed from the pool.

    Audio is converted to 16-bit PCM with triangular dither of +-1 LSB, so digital silence (exact zeros,
    which derails pocketsphinx's feature normalisation) never reaches the decoder.
    """

    def __init__(self, pool: DecoderPool, *, seed: int = 0) -> None:
        self._pool = pool
        self._rng = np.random.default_rng(seed)
        self._decoder: PooledDecoder | None = None
        self._ending: PooledDecoder | None = None
        self.search: SearchSpec | None = None
        self.tail_ms = 200.0
        """Silence fed past the last voiced frame: the search needs a little to settle on the last word."""

    @property
    def active(self) -> bool:
        return self._decoder is not None

    def begin(self) -> None:
        """Start an utterance with the current search (ending any utterance still open)."""
        self.abort()
        decoder = self._pool.acquire()
        try:
            decoder.activate(self.search)
            decoder.decoder.start_utt()
        except BaseException:
            self._pool.release(decoder)
            raise
        self._decoder = decoder

    def feed(self, samples: npt.NDArray[np.float32]) -> None:
        """Decode more audio, in 32 ms blocks: each call holds the GIL, so other sessions' threads get
        their turn between blocks instead of waiting for a whole unit."""
        if self._decoder is None:
            return
        pcm = self._pcm16(samples)
        for offset in range(0, len(pcm), FEED_BLOCK_SAMPLES):
            self._decoder.decoder.process_raw(pcm[offset : offset + FEED_BLOCK_SAMPLES].tobytes())

    def partial(self) -> str:
        """The best transcript of the utterance so far (cheap); empty outside an utterance."""
        if self._decoder is None:
            return ""
        hyp = self._decoder.decoder.hyp()
        return " ".join(hyp.hypstr.split()) if hyp is not None else ""

    def guess(self) -> Future[Transcript]:
        """The transcript so far, known at once (the tree pass's best path)."""
        return finished(Transcript(self.partial()))

    def finish(self) -> Future[Transcript]:
        """End the utterance: its transcript, known at once (lower case words, empty if nothing was found;
        pocketsphinx's first pass gives no word timestamps).

        The decoder's own end of utterance is left to `settle` (or the next `begin`)."""
        text = self.partial()
        self.settle()
        self._ending, self._decoder = self._decoder, None
        return finished(Transcript(text))

    def settle(self) -> None:
        """Complete the end of the utterance `finish` returned, and give its decoder back."""
        decoder, self._ending = self._ending, None
        if decoder is not None:
            try:
                decoder.decoder.end_utt()
            finally:
                self._pool.release(decoder)

    def abort(self) -> None:
        """Drop the utterance in progress, if any, and give every decoder back."""
        self.finish()
        self.settle()

    def _pcm16(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.int16]:
        dither = self._rng.random(len(samples)) - self._rng.random(len(samples))
        scaled = np.asarray(samples, dtype=np.float64) * 32767.0 + dither
        return np.clip(np.rint(scaled), -32768, 32767).astype("<i2")
