"""Cutting a streamed reply into the pieces speech synthesis takes, and those pieces into word tokens."""

from __future__ import annotations

import re

MAX_PIECE_CHARS = 240
MIN_CLAUSE_CHARS = 30
FIRST_PIECE_WORDS = 3
"""The first piece of a reply ends after this many words at most (or at its first comma)."""
_BOUNDARY = re.compile(r"[.!?;:]+[\"')\]]*\s+")
_CLAUSE = re.compile(r",\s+")
_FIRST_WORDS = re.compile(rf"\s*(?:\S+\s+){{{FIRST_PIECE_WORDS}}}")


class PhraseSplitter:
    """Streamed text in, speakable pieces out: sentences, also cut after `:` and `;`, and after a comma
    that ends a clause of at least `MIN_CLAUSE_CHARS`.

    A piece keeps its trailing whitespace, so the pieces joined give back the text exactly. Cutting after
    a colon as well lets the first audio of "You said: ..." leave after one short phrase; cutting long
    clauses at commas does the same for an LLM's long first sentence (synthesis waits for a whole piece).
    A run longer than `MAX_PIECE_CHARS` without a boundary is cut at its last space within that length.
    The first piece is cut sooner, after `FIRST_PIECE_WORDS` words or at its first comma: the reply's first
    audio waits for its whole synthesis (~75 ms per second of speech with piper here), and once it plays
    the rest is synthesised well ahead of playback.
    """

    def __init__(self) -> None:
        self._buffer = ""
        self._first = True

    def feed(self, delta: str) -> list[str]:
        self._buffer += delta
        pieces: list[str] = []
        while True:
            cut = self._cut()
            if cut is None:
                return pieces
            pieces.append(self._buffer[:cut])
            self._buffer = self._buffer[cut:]
            self._first = False

    def _cut(self) -> int | None:
        """Where the next piece ends in the buffer, or `None` while it has not ended yet."""
        buffer = self._buffer
        ends = [m.end() for m in (_BOUNDARY.search(buffer),) if m is not None]
        clause = _CLAUSE.search(buffer, 0 if self._first else MIN_CLAUSE_CHARS - 1)
        if clause is not None:
            ends.append(clause.end())
        words = _FIRST_WORDS.match(buffer) if self._first else None
        if words is not None:
            ends.append(words.end())
        if ends:
            return min(ends)
        if len(buffer) > MAX_PIECE_CHARS:
            return buffer.rfind(" ", 0, MAX_PIECE_CHARS) + 1 or MAX_PIECE_CHARS
        return None

    def flush(self) -> list[str]:
        piece, self._buffer = self._buffer, ""
        self._first = True
        return [piece] if piece else []


def word_tokens(text: str) -> tuple[str, ...]:
    """Words each with the whitespace that follows it; joined they give back `text` (leading space kept)."""
    return tuple(re.findall(r"\s*\S+\s*", text)) if text.strip() else ((text,) if text else ())
