"""When have the replies to a commit settled? A Sans-I/O tracker fed with events and asked with `now`.

Settled means: the commit was acknowledged (`input_audio_buffer.committed`), the model decided on the unit
that holds the commit (or a later one), every response created before or after the commit is done, and a
quiet window passed without the model speaking.

The quiet window is counted in decided units, not wall seconds (`QuietRule`): `units` needs the model to
have decided ⌈settle_window / unit⌉ units after the committed one (and after the last unit it spoke on)
without speaking. A server slower than real time decides them late, so its backlog never runs a wall clock
out before its reply. A speaking answer (an output delta, `response.created`) restarts the count. A server
that does not answer every unit cannot be counted: for a protocol without per-unit answers (OpenAI
Realtime) and for a server that has not sent a single `response.listen` in the session, the window stays
`wall_clock` seconds since the last reply activity (the first listen switches it to units). The caller's
wall-clock bound on the whole drain stays the outer limit.

Which decision answers the committed unit (`DecisionRule`). A model that lags behind real time answers the
backlog of earlier units *after* the acknowledgement, so "the first decision after the commit" is not
enough. `server_unit_end`: the server says which unit each decision belongs to (`unit_end_ms` on
`response.listen`, `response.created` and the output deltas, on the input media clock; ours does), and a
decision counts when its unit ends at or after the commit's media time. `unit_count`, for servers that do
not say (vLLM-Omni): every stepped unit is answered by one `response.listen` or one output delta, so the
commit's unit is answered by the `units_due`-th answer, `units_due` counted on the advertised unit grid
(`chunk_period_ms`, `first_unit_ms`) up to the commit, residual included.

Which units count as decided in the window: with unit marks, every distinct `unit_end_ms` of a listen past
the committed unit (and past the last unit spoken on); by count, every unit answer after the one that
decided the committed unit, a listen adding one, a speaking answer resetting the count to zero.

For the `wall_clock` window, acknowledgements are not activity: the `response.listen` a server sends for
every padded unit, and the answers to the client's own housekeeping (`playback.acknowledged`,
`session.heartbeat_ack`, `rate_limits.updated`, a benign `error`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from duplexkit.client.events import ReceivedEvent, as_ms, is_failure, response_id_of
from duplexkit.protocol.units import UnitGrid

NOT_ACTIVITY = frozenset(
    {"response.listen", "playback.acknowledged", "session.heartbeat_ack", "rate_limits.updated"}
)
UNIT_ANSWERS = frozenset(
    {
        "response.listen",
        "response.output_audio.delta",
        "response.audio.delta",  # OpenAI Realtime beta names (vLLM-Omni)
        "response.output_text.delta",
        "response.text.delta",
    }
)
"""Events that answer one stepped unit each: a listen, or the output the unit produced."""
DECISIONS = UNIT_ANSWERS | {"response.created"}
"""Events that may carry the `unit_end_ms` of the unit they decide."""
UNIT_END_TOLERANCE_MS = 0.5
"""Media times are rounded on the wire; a unit ending this close before the commit holds it."""

SPEAKING = DECISIONS - {"response.listen"}
"""Decisions in which the model speaks: they restart the quiet window."""

DecisionRule = Literal["server_unit_end", "unit_count"]
QuietRule = Literal["units", "wall_clock"]


@dataclass(frozen=True, slots=True)
class CommitPoint:
    """Where a commit fell: its media time and, for servers that do not mark units, the unit count."""

    media_ms: float = 0.0
    """The client's media clock at the commit (`audio_end_ms` of the last queued append)."""
    units_due: int = 0
    """Units the server steps up to and including the one that holds the commit."""
    units_answered: int = 0
    """Unit answers (`UNIT_ANSWERS`) received before the commit."""
    unit_ms: int = 1000
    """The server's unit (`chunk_period_ms`): the quiet window is counted in these."""
    listened: bool = False
    """The server sent a `response.listen` before the commit (it answers the units it listens to)."""

    @classmethod
    def at(cls, media_ms: float, grid: UnitGrid, earlier: Iterable[ReceivedEvent]) -> CommitPoint:
        """A commit at media time `media_ms` on the server's unit `grid`, after the events `earlier`."""
        return cls(
            media_ms=media_ms,
            units_due=grid.unit_count(media_ms, include_residual=True),
            units_answered=sum(1 for e in earlier if e.type in UNIT_ANSWERS),
            unit_ms=grid.chunk_period_ms,
            listened=any(e.type == "response.listen" for e in earlier),
        )

    def quiet_units(self, settle_s: float) -> int:
        """The units a quiet window of `settle_s` seconds spans: ⌈settle_s / unit⌉."""
        return max(0, math.ceil(settle_s * 1000.0 / self.unit_ms - 1e-9))


class CommittedUnit:
    """Whether the model has decided on the unit that holds a commit (or a later one), by the first rule
    that applies (module docstring): the server's unit marks, else the count of unit answers. Fed every
    event received after the commit was queued; the acknowledgement is told apart (`acknowledge`)."""

    def __init__(self, commit: CommitPoint) -> None:
        self.commit = commit
        self.acknowledged = False
        self._answers = commit.units_answered
        self._marked = False
        self._marked_decision = False
        self._counted_decision = False
        self._quiet_counted = 0
        self._quiet_after_ms = commit.media_ms
        """With marks: listens on units ending after this (the commit, or the last unit spoken on) count."""
        self._quiet_marked: set[float] = set()

    @property
    def quiet_units(self) -> int:
        """Units decided without speaking after the committed unit and after the last unit spoken on."""
        return len(self._quiet_marked) if self._marked else self._quiet_counted

    @property
    def rule(self) -> DecisionRule:
        return "server_unit_end" if self._marked else "unit_count"

    @property
    def decided(self) -> bool:
        return self._marked_decision if self._marked else self._counted_decision

    def assume(self, *, decided: bool) -> None:
        """No commit on the wire (Moshi, server VAD): the input's end stands for an acknowledged commit;
        `decided` when a reply has already answered it."""
        self.acknowledged = True
        if decided:
            self._marked_decision = self._counted_decision = True

    def observe(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "input_audio_buffer.committed":
            self.acknowledged = True
        if kind not in DECISIONS:
            return
        speaking = kind in SPEAKING
        unit_end_ms = as_ms(data.get("unit_end_ms"))
        if unit_end_ms is not None:
            self._marked = True
            if unit_end_ms >= self.commit.media_ms - UNIT_END_TOLERANCE_MS:
                self._marked_decision = True
            self._count_marked(unit_end_ms, speaking=speaking)
        elif speaking:  # an unmarked output: the window restarts after every unit marked so far
            self._count_marked(max(self._quiet_marked, default=self._quiet_after_ms), speaking=True)
        was_decided = self._counted_decision
        if kind in UNIT_ANSWERS:
            self._answers += 1
        # A `response.created` opens on the unit its first delta (the next answer) answers. Answers before
        # the acknowledgement belong to earlier units: the server steps the commit's unit after the commit.
        answered = self._answers + (kind == "response.created")
        if self.acknowledged and answered >= self.commit.units_due:
            self._counted_decision = True
        if speaking:
            self._quiet_counted = 0
        elif was_decided:  # a listen on a unit after the one that decided the commit
            self._quiet_counted += 1

    def _count_marked(self, unit_end_ms: float, *, speaking: bool) -> None:
        if speaking:
            self._quiet_after_ms = max(self._quiet_after_ms, unit_end_ms)
            self._quiet_marked = {end for end in self._quiet_marked if end > self._quiet_after_ms}
        elif unit_end_ms > self._quiet_after_ms + UNIT_END_TOLERANCE_MS:
            self._quiet_marked.add(unit_end_ms)


def is_activity(data: dict[str, Any]) -> bool:
    """Whether an event is reply activity that restarts the quiet window."""
    kind = data.get("type")
    if kind in NOT_ACTIVITY:
        return False
    return kind != "error" or is_failure(data)


@dataclass(frozen=True, slots=True)
class DrainStatus:
    settled: bool
    failure: dict[str, Any] | None
    """The first `error` event that failed the session, if one arrived."""
    wake_at: float | None
    """When the answer changes if no event arrives first (`None`: only an event can change it)."""


class DrainTracker:
    """Tracks one commit: created when the commit is queued, fed every event received after that."""

    def __init__(
        self,
        committed_at: float,
        open_responses: Iterable[str],
        commit: CommitPoint | None = None,
        *,
        answers_units: bool = True,
    ) -> None:
        self.unit = CommittedUnit(commit or CommitPoint())
        self.answers_units = answers_units
        """The protocol has per-unit answers (`ProtocolAdapter.answers_every_unit`)."""
        self.open_responses = set(open_responses)
        self.last_activity = committed_at
        self.listens = 0
        self.failure: dict[str, Any] | None = None

    @property
    def commit_acknowledged(self) -> bool:
        return self.unit.acknowledged

    @property
    def rule(self) -> DecisionRule:
        """The rule that decides which decision answers the commit (see the module docstring)."""
        return self.unit.rule

    @property
    def quiet(self) -> QuietRule:
        """How the quiet window is measured (module docstring)."""
        listened = self.unit.commit.listened or self.listens > 0
        return "units" if self.answers_units and listened else "wall_clock"

    @property
    def decided(self) -> bool:
        """The model decided on the unit that holds the commit (or a later one)."""
        return self.unit.decided

    def assume_committed(self, *, decided: bool) -> None:
        """For protocols with no commit on the wire (see `CommittedUnit.assume`)."""
        self.unit.assume(decided=decided)

    def observe(self, event: ReceivedEvent) -> None:
        data, kind = event.data, event.type
        self.unit.observe(kind, data)
        if kind == "response.created":
            response_id = response_id_of(data)
            if response_id is not None:
                self.open_responses.add(response_id)
        elif kind == "response.listen":
            self.listens += 1
        elif kind == "response.done":
            self.open_responses.discard(response_id_of(data) or "")
        elif self.failure is None and is_failure(data):
            self.failure = data
        if is_activity(data):
            self.last_activity = max(self.last_activity, event.received_at)

    def poll(self, now: float, settle_s: float) -> DrainStatus:
        """Whether the replies have settled at `now` with a quiet window of `settle_s` seconds (in units
        of the server's grid, or on the wall clock: `quiet`)."""
        if self.failure is not None:
            return DrainStatus(False, self.failure, None)
        if not (self.commit_acknowledged and self.decided and not self.open_responses):
            return DrainStatus(False, None, None)
        if self.quiet == "units":
            settled = self.unit.quiet_units >= self.unit.commit.quiet_units(settle_s)
            return DrainStatus(settled, None, None)
        quiet_until = self.last_activity + settle_s
        if now >= quiet_until:
            return DrainStatus(True, None, None)
        return DrainStatus(False, None, quiet_until)
