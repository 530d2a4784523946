"""Where a case's words fall on the simulated listener's playback timeline. Pure functions.

Each response becomes one output chunk: its words that were heard, their times, and the span they cover.

- **`audio_text_marks`** (the server sends them on audio deltas: after `text_chars` characters of the
  response's transcript, its audio had reached `audio_end_ms`): a word's first and last characters are placed
  in the response's audio by linear interpolation between the marks (and (0, 0)), then on the timeline
  through the segment that plays that audio. A word whose audio was cut by a clear was not heard.
- **`delta_chunks`** (no marks): the words of the k-th transcript delta take the span of the k-th audio
  delta it is paired with (a server sends them in pairs); a delta without a partner takes the last one.
- **`text_arrival`** (a response without audio): the chunk spans the arrival of its first and last text
  delta, without word times.

Times are seconds on the playback clock (the client's monotonic clock since the stream's start).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from duplexkit.bench.omniinteract.listener import OUTPUT_RATE_HZ, Segment
from duplexkit.bench.omniinteract.metrics import Chunk, Word

_WORD = re.compile(r"\S+")


@dataclass
class ResponseText:
    """What one response said: transcript deltas in order with their arrival, and the audio-text marks."""

    response_id: str
    deltas: list[tuple[str, float]] = field(default_factory=list)
    marks: list[tuple[int, float]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.deltas)


def response_chunk(response: ResponseText, segments: Sequence[Segment]) -> tuple[Chunk | None, str]:
    """The response's heard output as one chunk (None when nothing of it was heard) and the timing source."""
    audio = sorted((s for s in segments if s.response_id == response.response_id), key=lambda s: s.index)
    text = response.text
    if not audio:
        if not text.strip():
            return None, "text_arrival"
        times = [at for piece, at in response.deltas if piece]
        return Chunk(text.strip(), round(min(times), 3), round(max(times), 3)), "text_arrival"
    if response.marks:
        words, source = _words_from_marks(text, response.marks, audio), "audio_text_marks"
    else:
        words, source = _words_from_deltas(response.deltas, audio), "delta_chunks"
    if not words:
        return None, source
    return Chunk(
        " ".join(w.text for w in words), words[0].start, max(w.end for w in words), tuple(words)
    ), source


def _words_from_marks(text: str, marks: list[tuple[int, float]], audio: Sequence[Segment]) -> list[Word]:
    points = sorted({(0, 0.0), *marks})
    chars = [c for c, _ in points]
    millis = [ms for _, ms in points]

    def audio_ms(char: int) -> float:
        k = bisect.bisect_left(chars, char)
        if k < len(chars) and chars[k] == char:
            return millis[k]
        if k == 0:
            return millis[0]
        if k >= len(chars):
            return millis[-1]
        c0, c1, m0, m1 = chars[k - 1], chars[k], millis[k - 1], millis[k]
        return m0 + (m1 - m0) * (char - c0) / (c1 - c0)

    words = []
    for match in _WORD.finditer(text):
        start = _timeline(audio_ms(match.start()) * OUTPUT_RATE_HZ / 1000, audio, at_end=False)
        end = _timeline(audio_ms(match.end()) * OUTPUT_RATE_HZ / 1000, audio, at_end=True)
        if start is not None and end is not None:
            words.append(Word(match.group(), round(start, 3), round(max(start, end), 3)))
    return words


def _timeline(position: float, audio: Sequence[Segment], *, at_end: bool) -> float | None:
    """The playback time of a sample position in the response's audio; None when that audio was not heard."""
    for segment in audio:
        lo, hi = segment.offset, segment.offset + segment.samples
        if lo <= position < hi or (at_end and lo < position <= hi):
            within = position - lo
            if within > segment.kept or (not at_end and within == segment.kept):
                return None
            return segment.start_s + within / OUTPUT_RATE_HZ
    last = audio[-1]
    if position >= last.offset + last.samples and last.kept == last.samples:
        return last.end_s
    return None


def _words_from_deltas(deltas: Sequence[tuple[str, float]], audio: Sequence[Segment]) -> list[Word]:
    words = []
    for k, (piece, _) in enumerate(deltas):
        segment = audio[min(k, len(audio) - 1)]
        if segment.kept == 0:
            continue
        for match in _WORD.finditer(piece):
            words.append(Word(match.group(), round(segment.start_s, 3), round(segment.end_s, 3)))
    return words


def chunk_to_json(chunk: Chunk, response_id: str, status: str | None) -> dict[str, Any]:
    """A chunk as `wav_transcript.json`'s `chunks` and `<id>.json` hold it: the official scorer's `text` /
    `timestamp` / `aligned_words` (each word `{"text", "start", "end"}`, the keys its reader takes at
    de304ce), and the same text and span as a timed sentence (`sentence`, `start`, `end`), the shape the
    shared report reads."""
    out: dict[str, Any] = {
        "response_id": response_id,
        "status": status,
        "text": chunk.text,
        "timestamp": [chunk.start, chunk.end],
        "sentence": chunk.text,
        "start": chunk.start,
        "end": chunk.end,
    }
    if chunk.words is not None:
        out["aligned_words"] = [{"text": w.text, "start": w.start, "end": w.end} for w in chunk.words]
    return out
