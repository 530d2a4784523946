"""The resume edge: which live sessions a `session.resume` may reach, and what a finished one answers.

A connection opened with `?autostart=0` has its first message read before admission (`read_first`): a
`session.resume` goes to `ResumeRegistry.serve` and never takes a new slot (the detached session kept its
own through the grace). Ended sessions leave a bounded tombstone, so a late resume learns why
(`session.expired{reason}` then `session_resume_expired`) instead of a bare "unknown session".
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from duplexkit.engine.journal import ExpiryReason
from duplexkit.protocol import client_events as ce
from duplexkit.protocol import server_events as se
from duplexkit.protocol.dialects import Dialect
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.protocol.wire import ServerEventStamper, load_json, parse_client_event
from duplexkit.server.attachment import FirstMessage, refuse
from duplexkit.server.edge import Connection, SocketClosed
from duplexkit.server.runner import SessionRunner

MAX_TOMBSTONES = 10_000
"""Ended sessions remembered for late resumes; the oldest are forgotten first."""


async def read_first(connection: Connection, timeout_s: float) -> FirstMessage | None:
    """The first message within `timeout_s` (`FirstMessage(None)`: none came); `None`: the client left."""
    try:
        message = await asyncio.wait_for(connection.receive(), timeout_s)
    except TimeoutError:
        return FirstMessage(None)
    return None if message is None else FirstMessage(message)


def is_resume(first: FirstMessage) -> bool:
    """Whether the frame names `session.resume` (whether or not it is valid)."""
    data = first.message
    if data is None:
        return False
    try:
        obj = load_json(data, max_bytes=64 * 1024)
    except ProtocolError:
        return False
    return isinstance(obj, dict) and obj.get("type") == "session.resume"


class ResumeRegistry:
    """Live resumable sessions by id, and tombstones of ended ones."""

    def __init__(self) -> None:
        self._live: dict[str, SessionRunner] = {}
        self._ended: OrderedDict[str, tuple[str, ExpiryReason | None]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._live)

    def register(self, runner: SessionRunner) -> None:
        if runner.ticket is not None:
            self._live[runner.engine.session_id] = runner

    def retire(self, runner: SessionRunner) -> None:
        """The session ended: forget it, keep why."""
        session_id = runner.engine.session_id
        if self._live.pop(session_id, None) is None:
            return
        self._ended[session_id] = (runner.close_reason or "closed", runner.expired)
        while len(self._ended) > MAX_TOMBSTONES:
            self._ended.popitem(last=False)

    async def serve(
        self, websocket: Connection, first: FirstMessage, dialect: Dialect, *, enabled: bool
    ) -> None:
        """Answer a connection (in `dialect`) whose first message is `session.resume`."""
        data = first.message
        assert data is not None
        try:
            event = parse_client_event(data, dialect=dialect)
        except ProtocolError as exc:
            await refuse(websocket, exc, dialect)
            return
        assert isinstance(event, ce.SessionResume)
        if not enabled:
            await refuse(
                websocket,
                ProtocolError(ErrorCode.UNSUPPORTED_SESSION_RESUME, "this server does not resume sessions"),
                dialect,
            )
            return
        runner = self._live.get(event.session_id)
        if runner is not None and runner.close_reason is not None:
            self.retire(runner)  # it has ended (its close was sent); only its socket is still closing
        elif runner is not None:
            await runner.resume(websocket, event, dialect)
            return
        ended = self._ended.get(event.session_id)
        if ended is None:
            error = ProtocolError(
                ErrorCode.INVALID_SESSION_RESUME, f"no session {event.session_id!r}", param="session_id"
            )
        elif ended[1] is not None:
            expired = se.SessionExpired(session_id=event.session_id, reason=ended[1])
            try:
                await websocket.send_text(ServerEventStamper(dialect).encode(expired))
            except (SocketClosed, RuntimeError, OSError):
                return
            error = ProtocolError(ErrorCode.SESSION_RESUME_EXPIRED, f"the session expired ({ended[1]})")
        else:
            error = ProtocolError(
                ErrorCode.INVALID_SESSION_RESUME, f"the session ended ({ended[0]})", param="session_id"
            )
        await refuse(websocket, error, dialect)
