"""The fence that scopes every model output to the session state it was computed for."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Fence:
    """`(session_id, epoch, turn_id)`: output computed under an older fence is stale and is dropped.

    The epoch advances on barge-in, cancel and clear (everything in flight becomes stale); the turn advances
    when a response ends (the next model turn starts).
    """

    session_id: str
    epoch: int = 0
    turn_id: int = 0

    def next_epoch(self) -> Fence:
        return replace(self, epoch=self.epoch + 1)

    def next_turn(self) -> Fence:
        return replace(self, turn_id=self.turn_id + 1)

    def admits(self, other: Fence) -> bool:
        """True when output computed under `other` may still be emitted now (same session and epoch)."""
        return other.session_id == self.session_id and other.epoch == self.epoch
