"""Session resume, Sans-I/O: the replay journal, the lease and the resume ticket, each driven with `now`.

The server's runner owns one of each per resumable session (vLLM-Omni's contract, `docs/protocol.md`,
"Session resume"). The journal keeps the encoded server events a detached client may not have received,
keyed by `server_event_seq`, bounded in bytes and in age, trimmed by the client's `session.event_ack`. The
lease says when a session must be reaped: past its disconnect grace while detached, or past its idle TTL.
The ticket holds the resume token (rotated on every resume) and the attachment generation.
"""

from __future__ import annotations

import hmac
import secrets
from collections import deque
from dataclasses import dataclass
from typing import Literal

ExpiryReason = Literal["disconnect_grace_expired", "idle_ttl_expired"]
ResyncReason = Literal["journal_gap", "journal_overflow"]


@dataclass(frozen=True, slots=True)
class ResumeConfig:
    """Resume settings (upstream defaults); `disconnect_grace_s = 0` turns resume off."""

    disconnect_grace_s: float = 30.0
    idle_ttl_s: float = 300.0
    reap_interval_s: float = 5.0
    journal_max_bytes: int = 8 * 1024 * 1024
    replay_ttl_s: float = 60.0

    @property
    def enabled(self) -> bool:
        return self.disconnect_grace_s > 0


@dataclass(frozen=True, slots=True)
class JournalEntry:
    seq: int
    text: str
    recorded_at: float


@dataclass(frozen=True, slots=True)
class Replay:
    """Every journaled event after the client's seq, in order."""

    entries: tuple[JournalEntry, ...]


@dataclass(frozen=True, slots=True)
class Resync:
    """The journal cannot fill the gap: events after the client's seq were trimmed."""

    reason: ResyncReason
    first_available_seq: int


class ReplayJournal:
    """The encoded server events of one session, oldest first, for replay after a resume.

    Entries leave when the client acknowledges them (`ack`), when the journal would exceed `max_bytes`
    (the oldest go first) or when they are older than `ttl_s` (`expire`). An entry that left unacknowledged
    makes a later replay from before it a `journal_overflow`; asking for events the client acknowledged is
    a `journal_gap`.
    """

    def __init__(self, max_bytes: int, ttl_s: float) -> None:
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self.head = 0
        """The highest seq recorded (0 before the first event)."""
        self.acked = 0
        """The highest seq the client acknowledged."""
        self.bytes = 0
        self._entries: deque[JournalEntry] = deque()
        self._dropped_unacked_through = 0

    def __len__(self) -> int:
        return len(self._entries)

    def record(self, seq: int, text: str, now: float) -> None:
        """Keep event `seq` (seqs must increase); the oldest entries go if the bound is exceeded."""
        if seq <= self.head:
            raise ValueError(f"journal seqs must increase: {seq} after {self.head}")
        self.head = seq
        self._entries.append(JournalEntry(seq, text, now))
        self.bytes += len(text)
        while self.bytes > self.max_bytes and self._entries:
            self._drop_oldest()

    def ack(self, seq: int) -> None:
        """The client holds every event through `seq` (clamped to the head)."""
        self.acked = max(self.acked, min(seq, self.head))
        while self._entries and self._entries[0].seq <= self.acked:
            self._drop_oldest()

    def expire(self, now: float) -> None:
        """Drop entries older than the replay TTL."""
        while self._entries and now - self._entries[0].recorded_at > self.ttl_s:
            self._drop_oldest()

    def replay_after(self, seq: int) -> Replay | Resync:
        """What to send a client that received everything through `seq` (`0 <= seq <= head`)."""
        if not 0 <= seq <= self.head:
            raise ValueError(f"seq {seq} is outside 0..{self.head}")
        first = self._entries[0].seq if self._entries else self.head + 1
        if first <= seq + 1:
            return Replay(tuple(e for e in self._entries if e.seq > seq))
        reason: ResyncReason = "journal_overflow" if self._dropped_unacked_through > seq else "journal_gap"
        return Resync(reason, first)

    def _drop_oldest(self) -> None:
        entry = self._entries.popleft()
        self.bytes -= len(entry.text)
        if entry.seq > self.acked:
            self._dropped_unacked_through = entry.seq


class Lease:
    """When a session may be reaped: detached past the grace, or without renewal past the idle TTL.

    Client frames, model output and attach/detach renew it (upstream: appends, acks, heartbeats,
    attach/detach and model output).
    """

    def __init__(self, grace_s: float, idle_ttl_s: float, now: float) -> None:
        self.grace_s = grace_s
        self.idle_ttl_s = idle_ttl_s
        self.renewed_at = now
        self.detached_at: float | None = None

    @property
    def attached(self) -> bool:
        return self.detached_at is None

    def renew(self, now: float) -> None:
        self.renewed_at = max(self.renewed_at, now)

    def detach(self, now: float) -> None:
        self.detached_at = now
        self.renew(now)

    def attach(self, now: float) -> None:
        self.detached_at = None
        self.renew(now)

    def expiry(self, now: float) -> ExpiryReason | None:
        """Why the session must end at `now`, or `None` while the lease holds."""
        if self.detached_at is not None and now - self.detached_at >= self.grace_s:
            return "disconnect_grace_expired"
        if now - self.renewed_at >= self.idle_ttl_s:
            return "idle_ttl_expired"
        return None


class ResumeTicket:
    """The secret a client presents to resume, and which attachment is current; both change per resume."""

    def __init__(self) -> None:
        self.token = secrets.token_urlsafe(24)
        self.generation = 1

    def matches(self, token: str) -> bool:
        return hmac.compare_digest(self.token.encode(), token.encode())

    def rotate(self) -> None:
        self.token = secrets.token_urlsafe(24)
        self.generation += 1
