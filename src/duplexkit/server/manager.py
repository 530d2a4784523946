"""Admission and the registry of live sessions: capacity, slots held through cleanup, and shutdown."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from duplexkit.server.metrics import ServerMetrics


@dataclass(eq=False)
class Slot:
    """A session's hold on capacity; released only after its cleanup has finished."""

    session_id: str
    shutdown: Callable[[str], Awaitable[None]] | None = None
    released: bool = field(default=False)


class SessionManager:
    def __init__(self, max_sessions: int, metrics: ServerMetrics) -> None:
        self.max_sessions = max_sessions
        self.metrics = metrics
        self.accepting = True
        self._slots: set[Slot] = set()
        self.changed = asyncio.Event()
        """Set when a slot is taken or freed (a cluster replica reports its load on it, and clears it)."""

    @property
    def active(self) -> int:
        return len(self._slots)

    @property
    def session_ids(self) -> set[str]:
        """The ids of the sessions holding a slot (a cluster routes a session's reconnection by them). A
        detached session awaiting its resume keeps its slot through the grace, so it is among them."""
        return {slot.session_id for slot in self._slots}

    def try_admit(self) -> Slot | None:
        """A slot for a new session, or `None` at capacity or while shutting down."""
        if not self.accepting or len(self._slots) >= self.max_sessions:
            self.metrics.sessions_rejected.labels(reason="capacity" if self.accepting else "shutdown").inc()
            return None
        slot = Slot(session_id=f"sess_{secrets.token_hex(8)}")
        self._slots.add(slot)
        self.metrics.sessions_admitted.inc()
        self.metrics.sessions_active.set(len(self._slots))
        self.changed.set()
        return slot

    def release(self, slot: Slot) -> None:
        if not slot.released:
            slot.released = True
            self._slots.discard(slot)
            self.metrics.sessions_active.set(len(self._slots))
            self.changed.set()

    async def shutdown(self, timeout_s: float = 5.0) -> None:
        """Stop admitting and close every live session with `session.closed{reason: server_shutdown}`."""
        self.accepting = False
        closers = [slot.shutdown("server_shutdown") for slot in list(self._slots) if slot.shutdown]
        if closers:
            await asyncio.wait([asyncio.ensure_future(c) for c in closers], timeout=timeout_s)
