"""The fence that scopes every model output to the session state it was computed for."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Fence:
    """`(session_id, epoch, turn_id, first_unit)`: the model's output for a unit before `first_unit` is
    stale and is dropped.

    The epoch advances on barge-in, cancel and clear, and `first_unit` moves to the first unit after that
    event's place on the input timeline: a client's cancel or clear comes after every unit it has sent, so
    everything in flight becomes stale; a barge-in the model hears on unit `n` makes stale only the units
    up to `n`, never the input queued after it (the rest of a clip sent at once, and the commit and
    `response.create` that follow it). The turn advances when a response ends (the next model turn starts).
    """

    session_id: str
    epoch: int = 0
    turn_id: int = 0
    first_unit: int = 0

    def next_epoch(self, first_unit: int) -> Fence:
        return replace(self, epoch=self.epoch + 1, first_unit=max(self.first_unit, first_unit))

    def next_turn(self) -> Fence:
        return replace(self, turn_id=self.turn_id + 1)

    def admits(self, other: Fence, unit_index: int) -> bool:
        """True when output computed for unit `unit_index` (stamped `other`) may still be emitted now."""
        return other.session_id == self.session_id and unit_index >= self.first_unit
