"""When have the replies to a commit settled? A Sans-I/O tracker fed with events and asked with `now`.

Settled means: the commit was acknowledged (`input_audio_buffer.committed`), the model decided on the unit
that holds the commit (or a later one), every response created before or after the commit is done, and a
quiet window passed without the model speaking.

The quiet window is measured in decided units, not wall seconds (`QuietRule`). `units`: the model decided
⌈settle_window / unit⌉ units after the committed one (and after the last unit it spoke on) without
speaking; a speaking answer (an output delta, `response.created`) restarts the count. A server slower than
real time decides those units late, so its backlog never runs the window out before its reply. Only a
server that does not answer units (a protocol without per-unit answers such as OpenAI Realtime, one that
steps only on input) or has stopped answering them altogether settles on the `wall_clock`: a window of
seconds with no event from it at all but the answers to the client's own housekeeping
(`playback.acknowledged`, `session.heartbeat_ack`, `rate_limits.updated`, a benign `error`). For a server
that answers units (it sent a `response.listen` or a unit-marked decision in this session) that window is
the settle window *plus* the longest interval it took between two unit answers it sent after the commit:
silence it has shown it needs for one unit is its lag, not the end of its reply. Its pace before the
commit says nothing of its pace after: a server that listened at 1 s a unit may take 3.5 s for the unit it
answers (a cascade's recogniser, LLM and voice run after the commit). So until it has shown a pace after
the commit (two unit answers after it), a server that answered units before the commit has its quiet
counted in units only: a server answering a 1 s unit every 2.5 s, or slowing after the commit, is waited
for in units, up to the caller's wall-clock bound on the whole drain (`drain_timeout`, recorded as such
when it runs out), never taken for silence; one that stops answering altogether settles once it stays
silent past the pace it showed after the commit, and one that stops right after deciding the committed
unit runs to that bound (it was stepping every unit it was sent, then stopped: a stall, not silence). A
server whose first unit answer came after the commit (it answered no append: it answers the commit, not
units) has shown no pace at all, so the settle window alone applies until it shows one.

Which decision answers the committed unit (`DecisionRule`). A model that lags behind real time answers the
backlog of earlier units *after* the acknowledgement, so "the first decision after the commit" is not
enough. `server_unit_end`: the server says which unit each decision belongs to (`unit_end_ms` on
`response.listen`, `response.created` and the output deltas, on the input media clock; ours does), and a
decision counts when its unit ends at or after the commit's media time. `unit_count`, for servers that do
not say (vLLM-Omni): every stepped unit is answered by one `response.listen` or one output delta, so the
commit's unit is answered by the `units_due`-th answer, `units_due` counted on the advertised unit grid
(`chunk_period_ms`, `first_unit_ms`) up to the commit, residual included.

Which units count as decided in the window: with unit marks, a listen on a unit ending past the committed
unit (and past the last unit spoken on), at least one unit after the previous one counted (a server that
answers each append marks several per unit); by count, every unit answer after the one that decided the
committed unit, a listen adding one, a speaking answer resetting the count to zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from duplexkit.client.events import ReceivedEvent, as_ms, is_failure, response_id_of
from duplexkit.protocol.units import UnitGrid

HOUSEKEEPING = frozenset({"playback.acknowledged", "session.heartbeat_ack", "rate_limits.updated"})
"""Answers to the client's own events: they say nothing about the model."""
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
    answers_units: bool = False
    """The server showed before the commit that it answers units (`shows_unit_answers`)."""
    last_answer_at: float | None = None
    """When (client receive clock) the last unit answer before the commit arrived (the drain's pace is the
    one shown after the commit: this is the record of the one before)."""

    @classmethod
    def at(cls, media_ms: float, grid: UnitGrid, earlier: Iterable[ReceivedEvent]) -> CommitPoint:
        """A commit at media time `media_ms` on the server's unit `grid`, after the events `earlier`."""
        before = list(earlier)
        return cls(
            media_ms=media_ms,
            units_due=grid.unit_count(media_ms, include_residual=True),
            units_answered=sum(1 for e in before if e.type in UNIT_ANSWERS),
            unit_ms=grid.chunk_period_ms,
            answers_units=any(shows_unit_answers(e.type, e.data) for e in before),
            last_answer_at=max((e.received_at for e in before if e.type in UNIT_ANSWERS), default=None),
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
        self._quiet_marked = 0
        self._last_counted_ms: float | None = None
        """With marks: the end of the last unit counted quiet (`None` while none is)."""
        self._latest_marked_ms = commit.media_ms
        """The latest unit end any decision named: where an unmarked output restarts the window."""

    @property
    def quiet_units(self) -> int:
        """Units decided without speaking after the committed unit and after the last unit spoken on."""
        return self._quiet_marked if self._marked else self._quiet_counted

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
        elif speaking:  # an unmarked output: the window restarts after every unit named so far
            self._count_marked(self._latest_marked_ms, speaking=True)
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
        self._latest_marked_ms = max(self._latest_marked_ms, unit_end_ms)
        if speaking:
            self._quiet_after_ms = max(self._quiet_after_ms, unit_end_ms)
            self._quiet_marked, self._last_counted_ms = 0, None
            return
        previous = self._last_counted_ms
        past_start = unit_end_ms > self._quiet_after_ms + UNIT_END_TOLERANCE_MS
        next_unit = previous is None or unit_end_ms >= previous + self.commit.unit_ms - UNIT_END_TOLERANCE_MS
        if past_start and next_unit:
            self._quiet_marked += 1
            self._last_counted_ms = unit_end_ms


def shows_unit_answers(kind: str, data: dict[str, Any]) -> bool:
    """Whether an event shows a server that answers every stepped unit: a listen (outputs alone are what
    any Realtime server sends) or a decision that names its unit."""
    return kind == "response.listen" or (kind in DECISIONS and as_ms(data.get("unit_end_ms")) is not None)


def is_heard_from(data: dict[str, Any]) -> bool:
    """Whether an event shows the server still at work (it breaks the `wall_clock` window): anything but
    housekeeping answers and benign errors."""
    kind = data.get("type")
    if kind in HOUSEKEEPING:
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
        self.last_heard = committed_at
        """When the server was last heard from (`is_heard_from`): the start of the `wall_clock` window."""
        self.listens = 0
        self.failure: dict[str, Any] | None = None
        self.settled_by: QuietRule | None = None
        """Which window settled the drain (`None` until it settles)."""
        self.answers_units = self.unit.commit.answers_units
        """The server answers units (`shows_unit_answers`), seen before or after the commit."""
        self.committed_at = committed_at
        self.answer_gap_s: float | None = None
        """The longest interval between two unit answers received after the commit: the pace a server that
        answers units has shown since (`None` until it has shown one)."""
        self._last_answer_at: float | None = None
        """When the latest unit answer after the commit arrived."""

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

    def wall_window_s(self, settle_s: float) -> float:
        """The silence that settles the drain on the wall clock: `settle_s`, plus, when the server answers
        units, its own longest interval between unit answers after the commit; while it has shown none,
        `math.inf` for a server that answered units before the commit (its quiet is counted in units
        only) and `settle_s` for one that did not (see the module docstring)."""
        if not self.answers_units:
            return settle_s
        if self.answer_gap_s is not None:
            return settle_s + self.answer_gap_s
        return math.inf if self.unit.commit.answers_units else settle_s

    def observe(self, event: ReceivedEvent) -> None:
        data, kind = event.data, event.type
        self.unit.observe(kind, data)
        self.answers_units = self.answers_units or shows_unit_answers(kind, data)
        if kind in UNIT_ANSWERS and event.received_at >= self.committed_at:
            if self._last_answer_at is not None:
                gap = event.received_at - self._last_answer_at
                self.answer_gap_s = gap if self.answer_gap_s is None else max(self.answer_gap_s, gap)
            self._last_answer_at = event.received_at
        if kind == "response.created":
            response_id = response_id_of(data)
            if response_id is not None:
                self.open_responses.add(response_id)
        elif kind == "response.listen":
            self.listens += 1
        elif kind == "response.done":
            self.open_responses.discard(response_id_of(data) or "")
        if self.failure is None and is_failure(data):
            self.failure = data
        if is_heard_from(data):
            self.last_heard = max(self.last_heard, event.received_at)

    def poll(self, now: float, settle_s: float) -> DrainStatus:
        """Whether the replies have settled at `now` with a quiet window of `settle_s` seconds: its units
        decided quiet, or that long (a server that answers units: plus its own pace, `wall_window_s`)
        without hearing from it."""
        if self.failure is not None:
            return DrainStatus(False, self.failure, None)
        if not (self.commit_acknowledged and self.decided and not self.open_responses):
            return DrainStatus(False, None, None)
        quiet_until = self.last_heard + self.wall_window_s(settle_s)
        if self.unit.quiet_units >= self.unit.commit.quiet_units(settle_s):
            self.settled_by = "units"
        elif now >= quiet_until:
            self.settled_by = "wall_clock"
        else:
            return DrainStatus(False, None, None if math.isinf(quiet_until) else quiet_until)
        return DrainStatus(True, None, None)
