"""Deadline pacing of a stream of appends, Sans-I/O: the caller passes `now` and does the waiting.

Append i, whose audio ends at media offset `e_i` ms from the stream's start, is due at `anchor + e_i / 1000`:
like a microphone's, it goes out once the audio it carries has happened, so the media clock on the wire
never runs ahead of the wall clock. Due times derive from the anchor, never from the previous send, so
send latency and sleep overshoot do not accumulate into drift. After a stall the pacer never bursts to
catch up: an append already late by at least its own duration (so the next one would be due at once)
moves the anchor to now, and the lateness is recorded as lag that is never made up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from duplexkit.client.stats import Distribution


@dataclass(frozen=True, slots=True)
class Slot:
    """When one append should go out: `due` on the caller's clock, `wait_s` from the `now` it was asked at."""

    end_ms: float
    due: float
    wait_s: float
    lag_ms: float
    """Lateness this append absorbed by re-anchoring the schedule (0.0 when it was not a stall)."""


@dataclass(frozen=True, slots=True)
class PacingReport:
    """How well a paced stream kept its schedule (all in ms).

    `errors_ms`: per append, sent time minus due time (after any re-anchor). `drift_ms`: the last append's
    sent time minus its due time on the original anchor, so it includes every stall's lag.
    """

    errors_ms: tuple[float, ...]
    drift_ms: float | None
    stalls: tuple[tuple[float, float], ...]
    """(media end offset ms, lag ms) of the append that re-anchored, for each stall."""

    @property
    def appends(self) -> int:
        return len(self.errors_ms)

    @property
    def schedule_error_ms(self) -> Distribution | None:
        return Distribution.of(self.errors_ms)

    @property
    def lag_ms(self) -> float:
        return sum(lag for _, lag in self.stalls)

    def to_json(self) -> dict[str, object]:
        return {
            "appends": self.appends,
            "schedule_error_ms": None if (errors := self.schedule_error_ms) is None else errors.to_json(),
            "drift_ms": None if self.drift_ms is None else round(self.drift_ms, 3),
            "lag_ms": round(self.lag_ms, 3),
            "stalls": [{"end_ms": round(end, 3), "lag_ms": round(lag, 3)} for end, lag in self.stalls],
        }


@dataclass(slots=True)
class _Sent:
    end_ms: float
    due: float
    sent_at: float


@dataclass(slots=True)
class DeadlinePacer:
    """The schedule of one stream, anchored at `start` (the wall time of its media offset 0)."""

    start: float
    _anchor: float = field(init=False)
    _sent: list[_Sent] = field(init=False, default_factory=list)
    _stalls: list[tuple[float, float]] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self._anchor = self.start

    def slot(self, end_ms: float, duration_ms: float, now: float) -> Slot:
        """When the append covering `[end_ms - duration_ms, end_ms)` is due, asked at `now`.

        Late by less than `duration_ms`: due at once, schedule unchanged (the error does not carry over).
        Late by `duration_ms` or more: a stall; the schedule re-anchors so this append is due now.
        """
        due = self._anchor + end_ms / 1000.0
        late_ms = (now - due) * 1000.0
        if late_ms >= duration_ms:
            self._anchor += now - due
            self._stalls.append((end_ms, late_ms))
            return Slot(end_ms, now, 0.0, late_ms)
        return Slot(end_ms, due, max(0.0, due - now), 0.0)

    def sent(self, slot: Slot, sent_at: float) -> float:
        """Record that the slot's append reached the socket at `sent_at`; return its schedule error in ms."""
        self._sent.append(_Sent(slot.end_ms, slot.due, sent_at))
        return (sent_at - slot.due) * 1000.0

    def report(self) -> PacingReport:
        errors = tuple((s.sent_at - s.due) * 1000.0 for s in self._sent)
        last = self._sent[-1] if self._sent else None
        drift = None if last is None else (last.sent_at - self.start) * 1000.0 - last.end_ms
        return PacingReport(errors, drift, tuple(self._stalls))
