"""Client-side session resume, Sans-I/O: the policy (how often, how long) and the state that makes a resume
exact (what to ask the server for, which replayed events are duplicates, which frames to send again).

The server's contract is `docs/protocol.md`, "Session resume". Every server event is delivered once, in seq
order: a replayed event the client already holds is dropped here. Every client frame reaches the session
once: frames are numbered as they are written, and after a resume the server's `client_events_received`
says which of them to send again (a server that does not report it leaves the client unable to know, and
the resume is refused as unsafe rather than risking lost or doubled input).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from duplexkit.client.events import as_str, dig, error_code_of
from duplexkit.client.protocols.base import Wire
from duplexkit.protocol.errors import RESUME_FINAL_CODES

CONTROL_EVENTS = frozenset(
    {"session.resumed", "session.replaced", "session.resync_required", "session.expired"}
)
"""Attachment-level events: not part of the session's event log, never deduplicated by seq."""
FINAL_RESUME_CODES = frozenset(code.value for code in RESUME_FINAL_CODES)


@dataclass(frozen=True, slots=True)
class ResumePolicy:
    """How a `DuplexClient` reconnects after an unexpected disconnect (opt-in; `bench` turns it on)."""

    max_attempts: int = 6
    backoff_s: float = 0.1
    """The first pause before reconnecting; each further attempt doubles it (with jitter), up to the max."""
    backoff_max_s: float = 3.0
    attempt_timeout_s: float = 5.0
    """For one attempt: connect, send `session.resume`, receive `session.resumed`."""
    resend_buffer_bytes: int = 32 * 1024 * 1024
    """Client frames kept for resending; a resume that needs an older one fails instead."""

    def delays(self, rng: random.Random) -> Iterator[float]:
        """The pause before each attempt: exponential, full jitter in its upper half."""
        for attempt in range(self.max_attempts):
            ceiling = min(self.backoff_max_s, self.backoff_s * 2**attempt)
            yield rng.uniform(ceiling / 2, ceiling)


class ResumeState:
    """What one client knows about resuming its session, fed every frame written and every event read."""

    def __init__(self, buffer_bytes: int) -> None:
        self.buffer_bytes = buffer_bytes
        self.session_id: str | None = None
        self.token: str | None = None
        self.generation: int | None = None
        self.supported = False
        self.last_seq = 0
        self.acked_seq = 0
        self.duplicates = 0
        """Replayed events dropped because the client already held them."""
        self.frames_written = 0
        self._frames: deque[tuple[int, Wire]] = deque()
        self._bytes = 0
        self.ended: str | None = None
        """Why the session can no longer be resumed (`session.closed`, replaced, expired, a final code)."""

    @property
    def resumable(self) -> bool:
        return self.supported and self.ended is None and None not in (self.session_id, self.token)

    def deliver(self, data: dict[str, Any]) -> bool:
        """Whether an event read from the server belongs in the session's log (a replayed duplicate does not);
        learns the token and what ends the session's resumability."""
        kind = data.get("type")
        if kind in CONTROL_EVENTS:
            if kind in ("session.replaced", "session.expired"):
                self.ended = str(kind)
            return False
        seq = data.get("server_event_seq")
        if type(seq) is int:
            if seq <= self.last_seq:
                self.duplicates += 1
                return False
            self.last_seq = seq
        if kind == "session.created":
            self.session_id = as_str(dig(data, "session", "id"))
            self.token = as_str(data.get("resume_token")) or as_str(dig(data, "session", "resume_token"))
            generation = data.get("attachment_generation")
            self.generation = generation if type(generation) is int else None
            self.supported = dig(data, "session", "capabilities", "supports_session_resume") is True
        elif kind == "session.closed":
            self.ended = "session.closed"
        elif kind == "error" and error_code_of(data) in FINAL_RESUME_CODES:
            self.ended = str(error_code_of(data))
        return True

    def written(self, text: Wire) -> int:
        """A frame is about to be written: its number (1-based) in the session's frame order."""
        self.frames_written += 1
        self._frames.append((self.frames_written, text))
        self._bytes += len(text)
        while self._bytes > self.buffer_bytes and self._frames:
            _, dropped = self._frames.popleft()
            self._bytes -= len(dropped)
        return self.frames_written

    def resume_request(self) -> dict[str, Any]:
        return {
            "type": "session.resume",
            "session_id": self.session_id,
            "resume_token": self.token,
            "last_received_server_event_seq": self.last_seq,
        }

    def ack_due(self) -> int | None:
        """The seq to acknowledge now (`session.event_ack`), if it moved since the last ack."""
        if not self.supported or self.last_seq <= self.acked_seq:
            return None
        self.acked_seq = self.last_seq
        return self.last_seq

    def resumed(self, data: dict[str, Any]) -> list[tuple[int, Wire]] | None:
        """Apply `session.resumed`: the frames to send again, in order, or `None` when that cannot be known
        (the server did not say how many it read, or the frames it lacks are no longer kept)."""
        self.token = as_str(data.get("resume_token")) or self.token
        generation = data.get("attachment_generation")
        self.generation = generation if type(generation) is int else self.generation
        received = data.get("client_events_received")
        if type(received) is not int or received > self.frames_written:
            return None
        oldest = self._frames[0][0] if self._frames else self.frames_written + 1
        if received + 1 < oldest:
            return None
        return [(index, text) for index, text in self._frames if index > received]
