"""Timed sentences from text deltas, by the Omni-DuplexEval response-format rules.

A sentence ends at `. ! ? 。 ！ ？` (a run of them stays with the sentence it ends). Whitespace never opens a
sentence. Text left without a terminator is flushed as a sentence of its own. Each sentence remembers its
response and the span of that response's characters it covers (`response_id`, `chars`), so the collector
times it by the span of its own audio (`client.voicing`); what the builder itself gives, the arrival of the
delta that gave its first character and of the one that completed it, is kept only for text never voiced
(a text-only response). Times are seconds on the playback timeline, 3 decimals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TERMINATORS = frozenset(".!?。！？")


@dataclass(frozen=True, slots=True)
class TimedSentence:
    sentence: str
    start: float
    end: float
    response_id: str | None = field(default=None, compare=False)
    chars: tuple[int, int] | None = field(default=None, compare=False)
    """Its first and past-the-last non-whitespace character in its response's text."""

    def to_json(self) -> dict[str, str | float]:
        return {"sentence": self.sentence, "start": self.start, "end": self.end}


def media_seconds(media_ms: float) -> float:
    """A delta's time: the media clock in ms divided by 1000 (always), to 3 decimals."""
    return round(media_ms / 1000.0, 3)


@dataclass(slots=True)
class SentenceBuilder:
    """Feed text deltas in arrival order with `add`; `flush` ends the text (e.g. at the end of a response)."""

    sentences: list[TimedSentence] = field(default_factory=list)
    _chars: list[str] = field(default_factory=list)
    _start: float | None = None
    _end: float = 0.0
    _terminated: bool = False
    _response_id: str | None = None
    _first: int = 0
    _last: int = 0

    def add(self, text: str, media_ms: float, *, response_id: str | None = None, offset: int = 0) -> None:
        """Add one delta of `response_id` that arrived when the timeline read `media_ms`; `offset` is where
        it starts in that response's text."""
        at = media_seconds(media_ms)
        for position, char in enumerate(text, start=offset):
            if self._terminated and char not in TERMINATORS:
                self.flush()
            if self._start is None:
                if char.isspace():
                    continue
                self._start, self._response_id, self._first = at, response_id, position
            self._chars.append(char)
            if not char.isspace():
                self._end, self._last = at, position + 1
            if char in TERMINATORS:
                self._terminated = True

    def flush(self) -> None:
        """Close the open sentence, if any."""
        self.sentences = self.finished()
        self._chars.clear()
        self._start = None
        self._terminated = False

    def finished(self) -> list[TimedSentence]:
        """The sentences so far plus the open one as `flush` would close it; the builder is unchanged."""
        if self._start is None:
            return list(self.sentences)
        text = "".join(self._chars).rstrip()
        chars = (self._first, self._last)
        return [*self.sentences, TimedSentence(text, self._start, self._end, self._response_id, chars)]
