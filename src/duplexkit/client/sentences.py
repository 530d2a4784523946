"""Timed sentences from text deltas, by the Omni-DuplexEval response-format rules.

A sentence ends at `. ! ? 。 ！ ？` (a run of them stays with the sentence it ends); its `start` is the time
of the delta that gave its first character, its `end` the time of the delta that completed it. Whitespace
never opens a sentence. Text left without a terminator is flushed as a sentence of its own, ending at the
delta that gave its last non-whitespace character. Times are media-clock seconds, 3 decimals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TERMINATORS = frozenset(".!?。！？")


@dataclass(frozen=True, slots=True)
class TimedSentence:
    sentence: str
    start: float
    end: float

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

    def add(self, text: str, media_ms: float) -> None:
        """Add one delta that arrived when the media clock read `media_ms`."""
        at = media_seconds(media_ms)
        for char in text:
            if self._terminated and char not in TERMINATORS:
                self.flush()
            if self._start is None:
                if char.isspace():
                    continue
                self._start = at
            self._chars.append(char)
            if not char.isspace():
                self._end = at
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
        return [*self.sentences, TimedSentence("".join(self._chars).rstrip(), self._start, self._end)]
