"""Cutting a streamed reply into the pieces speech synthesis takes, and those pieces into word tokens."""

from __future__ import annotations

import re

MAX_PIECE_CHARS = 240
MIN_CLAUSE_CHARS = 30
_BOUNDARY = re.compile(r"[.!?;:]+[\"')\]]*\s+")
_CLAUSE = re.compile(r",\s+")


class PhraseSplitter:
    """Streamed text in, speakable pieces out: sentences, also cut after `:` and `;`, and after a comma
    that ends a clause of at least `MIN_CLAUSE_CHARS`.

    A piece keeps its trailing whitespace, so the pieces joined give back the text exactly. Cutting after
    a colon as well lets the first audio of "You said: ..." leave after one short phrase; cutting long
    clauses at commas does the same for an LLM's long first sentence (synthesis waits for a whole piece).
    A run longer than `MAX_PIECE_CHARS` without a boundary is cut at its last space within that length.
    """

    def __init__(self) -> None:
        self._buffer = ""

    def feed(self, delta: str) -> list[str]:
        self._buffer += delta
        pieces: list[str] = []
        while True:
            match = _BOUNDARY.search(self._buffer)
            clause = _CLAUSE.search(self._buffer, MIN_CLAUSE_CHARS - 1)
            if match is not None and (clause is None or match.end() <= clause.end()):
                cut = match.end()
            elif clause is not None:
                cut = clause.end()
            elif len(self._buffer) > MAX_PIECE_CHARS:
                cut = self._buffer.rfind(" ", 0, MAX_PIECE_CHARS) + 1 or MAX_PIECE_CHARS
            else:
                return pieces
            pieces.append(self._buffer[:cut])
            self._buffer = self._buffer[cut:]

    def flush(self) -> list[str]:
        piece, self._buffer = self._buffer, ""
        return [piece] if piece else []


def word_tokens(text: str) -> tuple[str, ...]:
    """Words each with the whitespace that follows it; joined they give back `text` (leading space kept)."""
    return tuple(re.findall(r"\s*\S+\s*", text)) if text.strip() else ((text,) if text else ())
