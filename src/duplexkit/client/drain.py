"""When have the replies to a commit settled? A Sans-I/O tracker fed with events and asked with `now`.

Settled means: the commit was acknowledged (`input_audio_buffer.committed`), the model decided on the unit
that holds the commit (or a later one), every response created before or after the commit is done, and a
quiet window passed with no reply activity.

Which decision answers the committed unit (`DecisionRule`). A model that lags behind real time answers the
backlog of earlier units *after* the acknowledgement, so "the first decision after the commit" is not
enough. `server_unit_end`: the server says which unit each decision belongs to (`unit_end_ms` on
`response.listen`, `response.created` and the output deltas, on the input media clock; ours does), and a
decision counts when its unit ends at or after the commit's media time. `unit_count`, for servers that do
not say (vLLM-Omni): every stepped unit is answered by one `response.listen` or one output delta, so the
commit's unit is answered by the `units_due`-th answer, `units_due` counted on the advertised unit grid
(`chunk_period_ms`, `first_unit_ms`) up to the commit, residual included.

Acknowledgements are not activity: the `response.listen` a server sends for every padded unit, and the
answers to the client's own housekeeping (`playback.acknowledged`, `session.heartbeat_ack`,
`rate_limits.updated`, a benign `error`). So a committed clip answered only by a model listen on its unit
settles once that listen has arrived and the window after the commit has passed.
"""

from __future__ import annotations

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

DecisionRule = Literal["server_unit_end", "unit_count"]


@dataclass(frozen=True, slots=True)
class CommitPoint:
    """Where a commit fell: its media time and, for servers that do not mark units, the unit count."""

    media_ms: float = 0.0
    """The client's media clock at the commit (`audio_end_ms` of the last queued append)."""
    units_due: int = 0
    """Units the server steps up to and including the one that holds the commit."""
    units_answered: int = 0
    """Unit answers (`UNIT_ANSWERS`) received before the commit."""

    @classmethod
    def at(cls, media_ms: float, grid: UnitGrid, earlier: Iterable[ReceivedEvent]) -> CommitPoint:
        """A commit at media time `media_ms` on the server's unit `grid`, after the events `earlier`."""
        return cls(
            media_ms=media_ms,
            units_due=grid.unit_count(media_ms, include_residual=True),
            units_answered=sum(1 for e in earlier if e.type in UNIT_ANSWERS),
        )


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
        unit_end_ms = as_ms(data.get("unit_end_ms"))
        if unit_end_ms is not None:
            self._marked = True
            if unit_end_ms >= self.commit.media_ms - UNIT_END_TOLERANCE_MS:
                self._marked_decision = True
        if kind in UNIT_ANSWERS:
            self._answers += 1
        # A `response.created` opens on the unit its first delta (the next answer) answers. Answers before
        # the acknowledgement belong to earlier units: the server steps the commit's unit after the commit.
        answered = self._answers + (kind == "response.created")
        if self.acknowledged and answered >= self.commit.units_due:
            self._counted_decision = True


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
        self, committed_at: float, open_responses: Iterable[str], commit: CommitPoint | None = None
    ) -> None:
        self.unit = CommittedUnit(commit or CommitPoint())
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
        """Whether the replies have settled at `now` with a quiet window of `settle_s` seconds."""
        if self.failure is not None:
            return DrainStatus(False, self.failure, None)
        if not (self.commit_acknowledged and self.decided and not self.open_responses):
            return DrainStatus(False, None, None)
        quiet_until = self.last_activity + settle_s
        if now >= quiet_until:
            return DrainStatus(True, None, None)
        return DrainStatus(False, None, quiet_until)
