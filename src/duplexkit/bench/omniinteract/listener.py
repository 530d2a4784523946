"""The simulated listener and the completion rule of an OmniInteract case: Sans-I/O, fed events and times.

**Listener.** Reply audio plays on one serialized clock (seconds since the stream's start): a segment that
arrives at `a` starts at max(a, end of the previous segment) and lasts its sample count at the output rate.
A clear at `t` (a `response.done` whose status is `cancelled`, or an `output_audio_buffer.cleared`) cuts
every segment at `t`: what had not played by then is never heard, and the clock restarts from `t`. Acks go
out as playback advances (every `ACK_STEP_MS` of a response's played audio) and once more, exact, at the
end; `played_ms` counts only audio the clock has played.

**Completion.** A case is complete when the commit was acknowledged, every created response is done, a
decision arrived after the commit was sent (a `response.done` with status `completed`, or a
`response.listen` whose `metadata.model_listen` is true; we also take a listen whose reason is
`silence_or_noise` or `continuation_limit`, since a model that gates silence itself, like our cascade, labels
its decision on a silent unit so and would otherwise never complete), that decision being on the unit that
holds the commit or a later one (`client.drain.CommittedUnit`: a model lagging behind real time answers a
backlog of earlier units after the commit, and those answers are not the decision), and `quiet_s` passed
without server events. The events that do not break the quiet are the answers to our own housekeeping
(`playback.acknowledged`, `session.heartbeat_ack`, `rate_limits.updated`) and the tolerated errors
`playback_ack_too_late` and `playback_item_not_found`; any other `error` fails the case.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from duplexkit.client.drain import CommitPoint, CommittedUnit
from duplexkit.client.events import (
    ReceivedEvent,
    dig,
    error_code_of,
    failed_response_error,
    response_id_of,
)

OUTPUT_RATE_HZ = 24_000
ACK_STEP_MS = 200.0
TOLERATED_ERRORS = frozenset({"playback_ack_too_late", "playback_item_not_found"})
HOUSEKEEPING = frozenset({"playback.acknowledged", "session.heartbeat_ack", "rate_limits.updated"})
SETTLING_LISTENS = frozenset({"silence_or_noise", "continuation_limit"})


@dataclass
class Segment:
    """One audio delta on the playback clock; `kept` samples play (fewer than `samples` after a clear)."""

    response_id: str
    offset: int
    """Where the segment starts within its response's audio, in samples."""
    samples: int
    start_s: float
    kept: int
    index: int
    """The delta's position in its response (0-based)."""
    pcm: bytes = field(repr=False, default=b"")

    @property
    def end_s(self) -> float:
        return self.start_s + self.kept / OUTPUT_RATE_HZ


class SimulatedListener:
    """Plays reply audio on one serialized clock; see the module docstring."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.clock_s = 0.0
        self.clears: list[float] = []
        self.truncated: set[str] = set()
        self._received: dict[str, int] = {}
        self._items: dict[str, str | None] = {}
        self._acked: dict[str, float] = {}

    def audio(self, response_id: str, item_id: str | None, pcm: bytes, arrival_s: float) -> Segment:
        """Queue one delta's PCM16 audio, received at `arrival_s`; return where it plays."""
        samples = len(pcm) // 2
        start = max(arrival_s, self.clock_s)
        offset = self._received.get(response_id, 0)
        index = sum(s.response_id == response_id for s in self.segments)
        segment = Segment(response_id, offset, samples, start, samples, index, pcm)
        self.segments.append(segment)
        self._received[response_id] = offset + samples
        self._items.setdefault(response_id, item_id)
        self.clock_s = segment.end_s
        return segment

    def clear(self, at_s: float) -> None:
        """Cut everything not yet played at `at_s`."""
        self.clears.append(at_s)
        for segment in self.segments:
            if segment.end_s > at_s:
                kept = max(0, round((at_s - segment.start_s) * OUTPUT_RATE_HZ))
                if kept < segment.kept:
                    segment.kept = min(segment.kept, kept)
                    self.truncated.add(segment.response_id)
        self.clock_s = min(self.clock_s, at_s) if self.segments else self.clock_s

    def played_ms(self, response_id: str, now_s: float) -> float:
        """Milliseconds of the response's audio played by `now_s`."""
        played = 0
        for s in self.segments:
            if s.response_id == response_id and now_s > s.start_s:
                played += min(s.kept, round((now_s - s.start_s) * OUTPUT_RATE_HZ))
        return played * 1000 / OUTPUT_RATE_HZ

    def acks_due(self, now_s: float) -> list[tuple[str, str | None, float]]:
        """`(response_id, item_id, played_ms)` for each response whose playback advanced a step since its
        last ack."""
        due = []
        for response_id in self._received:
            played = self.played_ms(response_id, now_s)
            if played - self._acked.get(response_id, 0.0) >= ACK_STEP_MS:
                self._acked[response_id] = played
                due.append((response_id, self._items.get(response_id), round(played, 3)))
        return due

    def final_acks(self, now_s: float) -> list[tuple[str, str | None, float]]:
        """The exact played total of every response not acked at that total yet."""
        due = []
        for response_id in self._received:
            played = round(self.played_ms(response_id, now_s), 3)
            if played != self._acked.get(response_id):
                self._acked[response_id] = played
                due.append((response_id, self._items.get(response_id), played))
        return due


@dataclass(frozen=True)
class CompletionStatus:
    complete: bool
    failure: dict[str, Any] | None
    wake_at: float | None


class CompletionTracker:
    """The completion rule (module docstring), on the client's monotonic clock."""

    def __init__(self) -> None:
        self.commit_sent_at: float | None = None
        self.commit_acknowledged = False
        self.unit: CommittedUnit | None = None
        self._decision_seen = False
        self.open: set[str] = set()
        self.created = 0
        self.last_event_at: float | None = None
        self.failure: dict[str, Any] | None = None

    @property
    def decided(self) -> bool:
        """A decision arrived after the commit, and the model has decided on the commit's unit."""
        return self._decision_seen and (self.unit is None or self.unit.decided)

    def expect_commit(self, commit: CommitPoint) -> None:
        """The commit is about to be queued at `commit`: from here on, events say whether its unit is
        decided (the count rule needs every answer after `commit` was taken)."""
        self.unit = CommittedUnit(commit)

    def commit_sent(self, at: float) -> None:
        self.commit_sent_at = at
        self.last_event_at = max(self.last_event_at or at, at)

    def observe(self, event: ReceivedEvent) -> None:
        data, kind = event.data, event.type
        if self.unit is not None:
            self.unit.observe(kind, data)
        after_commit = self.commit_sent_at is not None and event.received_at >= self.commit_sent_at
        if kind == "error":
            code = error_code_of(data) or ""
            if code in TOLERATED_ERRORS:
                return
            self.failure = self.failure or data
        elif kind == "input_audio_buffer.committed":
            self.commit_acknowledged = True
        elif kind == "response.created":
            self.created += 1
            self.open.add(response_id_of(data) or f"#{self.created}")
        elif kind == "response.done":
            self.open.discard(response_id_of(data) or "")
            if failed_response_error(data) is not None:
                self.failure = self.failure or data
            if after_commit and dig(data, "response", "status") == "completed":
                self._decision_seen = True
        elif kind == "response.listen" and after_commit:
            metadata = dig(data, "response", "metadata")
            self._decision_seen = self._decision_seen or _listen_decides(
                metadata if isinstance(metadata, dict) else {}
            )
        if kind not in HOUSEKEEPING:
            self.last_event_at = max(self.last_event_at or event.received_at, event.received_at)

    def poll(self, now: float, quiet_s: float) -> CompletionStatus:
        if self.failure is not None:
            return CompletionStatus(False, self.failure, None)
        if not (self.commit_acknowledged and self.decided and not self.open) or self.last_event_at is None:
            return CompletionStatus(False, None, None)
        quiet_until = self.last_event_at + quiet_s
        if now >= quiet_until:
            return CompletionStatus(True, None, None)
        return CompletionStatus(False, None, quiet_until)


def _listen_decides(metadata: dict[str, Any]) -> bool:
    """A listen that settles a unit: the model's own (`model_listen`), or one for a unit it found silent or
    was no longer stepped on (`silence_or_noise`, `continuation_limit`); not `buffering` (not stepped yet)."""
    return metadata.get("model_listen") is True or metadata.get("reason") in SETTLING_LISTENS


def is_clear(event: ReceivedEvent) -> bool:
    """Whether the event tells the listener to drop what it has not played."""
    if event.type == "output_audio_buffer.cleared":
        return True
    return event.type == "response.done" and dig(event.data, "response", "status") == "cancelled"


def responses_of(events: Iterable[ReceivedEvent]) -> dict[str, str]:
    """Each response's final status (`response.done`), by id."""
    out = {}
    for event in events:
        if event.type == "response.done":
            rid = response_id_of(event.data)
            status = dig(event.data, "response", "status")
            if rid is not None and isinstance(status, str):
                out[rid] = status
    return out
