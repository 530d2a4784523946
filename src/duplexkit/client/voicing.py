"""Where a response's text was voiced on the playback timeline. Pure functions, no I/O.

A response's characters map to positions in its own audio (reply ms) through the server's
`audio_text_marks` ("after `text_chars` characters, the reply's audio had reached `audio_end_ms`"), linear
between marks and from (0, 0); a response without marks spreads its text evenly over all of its audio.
Reply ms map to the timeline through the response's placed audio chunks (`PlacedAudio`), so a piece of
text sits where its audio played. Text past the last mark was never voiced. This is the one home of the
rule: timed sentences (`collector`) and FDB's word times (`bench.fdb.words`) both use it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

TIMELINE_RATE_HZ = 24_000
"""The rate of the placed audio (`collector.WAV_RATE_HZ`)."""


@dataclass(frozen=True, slots=True)
class Span:
    """One placed chunk of a response's audio: reply ms `[reply_start, reply_end)` at `timeline_start` ms."""

    reply_start: float
    reply_end: float
    timeline_start: float


@dataclass(frozen=True, slots=True)
class Voicing:
    """One response's text → timeline mapping (module docstring)."""

    spans: tuple[Span, ...]
    points: tuple[tuple[int, float], ...]
    """`(characters, reply ms)`, starting at (0, 0), ending at the last voiced character."""
    marked: bool
    """The server's marks placed the text (else it was spread over the audio)."""

    @property
    def voiced_chars(self) -> int:
        return self.points[-1][0]

    def timeline_ms(self, chars: int, *, opening: bool) -> float:
        """The timeline ms where character position `chars` was voiced; a position on the boundary of two
        chunks belongs to the later one when it opens a piece of text, to the earlier one when it closes
        it."""
        reply_ms = _reply_ms(self.points, min(chars, self.voiced_chars))
        for span in self.spans:
            if reply_ms < span.reply_end or (reply_ms == span.reply_end and not opening):
                return span.timeline_start + max(0.0, reply_ms - span.reply_start)
        last = self.spans[-1]
        return last.timeline_start + (last.reply_end - last.reply_start)


def voicings(
    chunks: Iterable[tuple[str, int, int]],
    texts: Mapping[str, str],
    marks: Mapping[str, Sequence[tuple[int, float]]],
) -> dict[str, Voicing]:
    """Each voiced response's mapping, from its placed chunks `(response_id, start sample, samples)` in
    arrival order, its full text and its marks; a response without audio has none."""
    spans: dict[str, list[Span]] = {}
    for response_id, start, samples in chunks:
        placed = spans.setdefault(response_id, [])
        reply_start = placed[-1].reply_end if placed else 0.0
        reply_end = reply_start + 1000.0 * samples / TIMELINE_RATE_HZ
        placed.append(Span(reply_start, reply_end, 1000.0 * start / TIMELINE_RATE_HZ))
    out = {}
    for response_id, placed in spans.items():
        points = sorted(marks.get(response_id, ()))
        marked = bool(points)
        if not marked:
            points = [(len(texts.get(response_id, "")), placed[-1].reply_end)]
        out[response_id] = Voicing(tuple(placed), ((0, 0.0), *points), marked)
    return out


def _reply_ms(points: Sequence[tuple[int, float]], chars: int) -> float:
    """Reply-audio ms at character `chars`, linear between the marks."""
    for (c0, a0), (c1, a1) in itertools.pairwise(points):
        if chars <= c1:
            return a0 if c1 == c0 else a0 + (chars - c0) / (c1 - c0) * (a1 - a0)
    return points[-1][1]
