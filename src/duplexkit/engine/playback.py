"""The playback ledger: how much of each response was generated, played and committed to history.

History keeps only what the listener heard. Under `ack_only` the client's `playback.ack`s move the
committed point; under `commit_all_on_done` a response that finishes is committed whole. A response that is
interrupted is trimmed to what had been played. Once an entry is settled, further acks are too late.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from duplexkit.protocol.errors import ErrorCode, ProtocolError

CommitPolicy = Literal["commit_all_on_done", "ack_only"]


@dataclass(slots=True)
class PlaybackEntry:
    response_id: str
    item_id: str
    generated_ms: float = 0.0
    played_ms: float = 0.0
    committed_ms: float = 0.0
    text: str = ""
    marks: list[tuple[int, float]] = field(default_factory=list)
    settled: bool = False

    def heard_text(self) -> str:
        """The transcript up to the last text mark whose audio was committed (all of it for text-only)."""
        if not self.marks or self.generated_ms == 0.0:
            return self.text
        chars = max((c for c, end_ms in self.marks if end_ms <= self.committed_ms + 1e-6), default=0)
        return self.text[:chars]


class PlaybackLedger:
    def __init__(self, policy: CommitPolicy) -> None:
        self.policy: CommitPolicy = policy
        self._entries: dict[str, PlaybackEntry] = {}

    def open(self, response_id: str, item_id: str) -> PlaybackEntry:
        """Start tracking a response; an unsettled earlier one is settled: the conversation moved on."""
        for entry in self._entries.values():
            if not entry.settled:
                self._settle(entry, self.policy == "commit_all_on_done")
        entry = self._entries[response_id] = PlaybackEntry(response_id, item_id)
        return entry

    def generated(self, response_id: str, text: str, audio_ms: float) -> tuple[int, float]:
        """Record output sent for the response; return the new `(text_chars, audio_end_ms)` mark."""
        entry = self._entries[response_id]
        entry.text += text
        entry.generated_ms += audio_ms
        mark = (len(entry.text), entry.generated_ms)
        entry.marks.append(mark)
        return mark

    def ack(self, response_id: str, played_ms: float, committed_ms: float | None) -> PlaybackEntry:
        """Apply a client's playback report; raises `ProtocolError` for unknown or settled responses."""
        entry = self._entries.get(response_id)
        if entry is None:
            raise ProtocolError(ErrorCode.UNKNOWN_RESPONSE, f"no response {response_id!r} in this session")
        if entry.settled:
            raise ProtocolError(
                ErrorCode.PLAYBACK_ACK_TOO_LATE,
                f"response {response_id!r} is already settled at {entry.committed_ms:.0f} ms",
            )
        entry.played_ms = min(max(entry.played_ms, played_ms), entry.generated_ms)
        target = entry.played_ms if committed_ms is None else min(committed_ms, entry.played_ms)
        entry.committed_ms = max(entry.committed_ms, target)
        return entry

    def finish(self, response_id: str, *, interrupted: bool) -> PlaybackEntry:
        """The response ended. Interrupted: trim to what was played. Otherwise settle per the policy."""
        entry = self._entries[response_id]
        if interrupted:
            entry.committed_ms = entry.played_ms
            entry.settled = True
        elif self.policy == "commit_all_on_done":
            self._settle(entry, commit_all=True)
        return entry

    def get(self, response_id: str) -> PlaybackEntry | None:
        return self._entries.get(response_id)

    def by_item(self, item_id: str) -> PlaybackEntry | None:
        return next((entry for entry in self._entries.values() if entry.item_id == item_id), None)

    @staticmethod
    def _settle(entry: PlaybackEntry, commit_all: bool) -> None:
        if commit_all:
            entry.played_ms = entry.committed_ms = entry.generated_ms
        entry.settled = True
