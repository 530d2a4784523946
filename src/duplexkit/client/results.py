"""What the client's long operations report: a stream, a drain, a close."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from duplexkit.client.pacing import PacingReport

Pace = Literal["realtime", "as-fast-as-possible"]


@dataclass(slots=True)
class StreamReport:
    """What one `stream` call put on the wire, filled in as the stream runs (see `DuplexClient.streams`)."""

    pace: Pace
    chunk_ms: int
    appends_planned: int
    audio_start_ms: float
    audio_end_ms: float
    """Media clock after the last queued append."""
    appends_queued: int = 0
    appends_written: int = 0
    frames_sent: int = 0
    frames_dropped: int = 0
    timed_out: bool = False
    pacing: PacingReport | None = None
    """Schedule error and drift (realtime pace only)."""

    @property
    def completed(self) -> bool:
        return not self.timed_out and self.appends_written == self.appends_planned

    def to_json(self) -> dict[str, Any]:
        return {
            "pace": self.pace,
            "clock": "media_realtime" if self.pace == "realtime" else "invalid",
            "chunk_ms": self.chunk_ms,
            "appends_planned": self.appends_planned,
            "appends_queued": self.appends_queued,
            "appends_written": self.appends_written,
            "audio_start_ms": round(self.audio_start_ms, 3),
            "audio_end_ms": round(self.audio_end_ms, 3),
            "frames_sent": self.frames_sent,
            "frames_dropped": self.frames_dropped,
            "completed": self.completed,
            "input_timeout": self.timed_out,
            "pacing": self.pacing.to_json() if self.pacing else None,
        }


@dataclass(frozen=True, slots=True)
class DrainResult:
    outcome: Literal["settled", "timeout", "error", "connection_closed"]
    waited_s: float
    listens: int
    """`response.listen` events received since the commit."""
    error: dict[str, Any] | None = None
    decision_rule: Literal["server_unit_end", "unit_count"] = "unit_count"
    """How the drain told the decision on the committed unit from a backlog's (`client.drain`)."""
    quiet_rule: Literal["units", "wall_clock"] | None = None
    """Which quiet window settled it: its units decided quiet, or (a server that stopped answering units)
    a window of seconds without hearing from the server (`client.drain`); `None` when it did not settle."""

    @property
    def settled(self) -> bool:
        return self.outcome == "settled"


@dataclass(frozen=True, slots=True)
class CloseResult:
    clean: bool
    """The server answered `session.close` with `session.closed` within the timeout."""
    reason: str | None
    """`session.closed.reason`, when it came."""
    outcome: Literal["closed", "timeout", "connection_closed"]
    elapsed_s: float
    bound_s: float
    """The bound that applied: the wait for `session.closed`, or for a protocol that closes with the
    socket, the socket's closing handshake (`SOCKET_CLOSE_GRACE_S`)."""
