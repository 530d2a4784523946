"""One session's attachment job: the socket it is attached to, its messages in and events out, and, for a
resumable session, detaching from a lost socket and attaching a new one (`session.resume`).

Per attachment (`server.attachment.Attachment`), messages are handled as they arrive: a socket that pushes
them (`edge.PushReceive`: the default picows edge) calls back per message; any other is read by a reader
task. A `session.update` the model must prepare for holds the messages after it until it is prepared,
within the pending-input bound. Events go to the socket at once when its sends never wait
(`edge.DirectSend`); any other socket gets a writer task and an outbound queue. A new session must be
opened within `config_timeout_s` (`start`), whatever its client sends meanwhile.

How an attachment ends follows what its client did. A client that closed its socket on purpose (a coded
close frame: 1000, 1001, ...) has left: the session ends at once (`client_close`). A socket lost without a
close frame ends the session too (`client_disconnected`), unless the session is resumable (a
`ResumeConfig` is passed only then: resume on and a dialect with a resume contract). A resumable session
detaches instead: the engine keeps stepping the input it already has, every event goes to the replay
journal, the resume lease runs, and `resume` attaches a new socket, replaying what the client lacks
(`duplexkit.engine.journal` holds the rules). What the messages mean is the session's
(`AttachedSession`, the runner).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Callable
from functools import partial
from typing import Protocol

from duplexkit.engine import EngineSession
from duplexkit.engine.journal import ExpiryReason, Lease, Replay, ReplayJournal, ResumeConfig, ResumeTicket
from duplexkit.protocol import client_events as ce
from duplexkit.protocol import server_events as se
from duplexkit.protocol.dialects import Dialect, render
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.server.attachment import (
    Attachment,
    FirstMessage,
    Inbound,
    Outbound,
    SessionSocket,
    message_size,
    refuse,
)
from duplexkit.server.edge import EventSocket, PushReceive, SocketClosed, left_on_purpose
from duplexkit.server.metrics import ServerMetrics
from duplexkit.server.supervision import supervised

log = logging.getLogger("duplexkit.server")


class AttachedSession(Protocol):
    """What the attachment job needs of its session (the runner): the meaning of the messages, and how
    the session ends."""

    def handle(
        self, message: str | bytes | ce.ClientEventBase | ProtocolError
    ) -> tuple[ce.SessionUpdate, float] | None:
        """Apply one client message; a `session.update` is returned instead, with its arrival time, to be
        prepared (`update`)."""
        ...

    def refuse(self, error: ProtocolError) -> None:
        """Answer a message that is dropped with its coded error."""
        ...

    async def update(self, event: ce.SessionUpdate, now: float) -> None:
        """Prepare the model for an update and apply it."""
        ...

    @property
    def opened(self) -> bool:
        """The session has started and read a client event it could parse: its opening deadline is met."""
        ...

    def config_timed_out(self) -> None:
        """A new session was not opened within `config_timeout_s`."""
        ...

    def task_failed(self, name: str, exc: BaseException) -> None:
        """A task of the session (or the handling of a pushed message) raised: end the session, coded."""
        ...

    def end_without_client(self, reason: str) -> None:
        """End the session with no client to tell (it left, or its socket was lost)."""
        ...

    def expire(self, reason: ExpiryReason, now: float) -> None:
        """The resume lease expired: close the session (`session.expired` went out already)."""
        ...


class Attachments:
    """The attachment job of one session (see the module doc). `done` is set once the session ends
    (nothing more is handled); `resume`, when given, makes the session resumable."""

    def __init__(
        self,
        websocket: SessionSocket | EventSocket,
        session: AttachedSession,
        engine: EngineSession,
        metrics: ServerMetrics,
        *,
        done: asyncio.Event,
        config_timeout_s: float,
        max_pending_input_bytes: int,
        close_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        dialect: Dialect = Dialect.GA,
        resume: ResumeConfig | None = None,
    ) -> None:
        self._session = session
        self.engine = engine
        self.metrics = metrics
        self._done = done
        self.config_timeout_s = config_timeout_s
        self.max_pending_input_bytes = max_pending_input_bytes
        self.close_timeout_s = close_timeout_s
        self.clock = clock
        self.dialect = dialect
        self.current: Attachment | None = Attachment(websocket, generation=1)
        """The attachment events go to (`None`: detached, or the session ended)."""
        self._opening = self.current
        """The attachment the session opened on (see `opening_closed`)."""
        self.resume_config = resume
        self.journal: ReplayJournal | None = None
        self.lease: Lease | None = None
        self.ticket: ResumeTicket | None = None
        if resume is not None:
            self.journal = ReplayJournal(resume.journal_max_bytes, resume.replay_ttl_s)
            self.lease = Lease(resume.disconnect_grace_s, resume.idle_ttl_s, clock())
            self.ticket = ResumeTicket()
        self.next_reap = clock()
        """When the lease reaper is next due (a resumable session; see `reap`)."""
        self._resuming = False
        self._closing: set[asyncio.Task[None]] = set()
        self.last_seq = 0
        """The seq of the last event sent (or journaled)."""
        self.client_events_received = 0
        """Client frames this session has read, on every attachment (`session.resumed` reports it)."""
        self.expired: ExpiryReason | None = None
        self.close_code = 1000
        """How the session's socket closes: 1008 when its opening was refused, else normally."""

    @property
    def backlog(self) -> int:
        """Bytes sent to the current attachment that its peer has not taken yet (0 when detached)."""
        return self.current.backlog if self.current is not None else 0

    def send(self, seq: int, message: Outbound, *, deliver: bool = True) -> None:
        """Send the session's event `seq` (its text, or the event object to an in-process edge) to the
        current attachment, if any (`deliver=False`: to none); journal its text when the session is
        resumable."""
        self.last_seq = seq
        if self.journal is not None and type(message) is str:
            self.journal.record(seq, message, self.clock())
        if deliver and self.current is not None:
            self.current.send(message)

    def stamp_created(self, event: se.SessionCreated) -> None:
        """`session.created` of a resumable session carries the resume token and the generation."""
        if self.ticket is not None:
            event.resume_token = self.ticket.token
            event.attachment_generation = self.ticket.generation

    def resume_event(self, event: ce.SessionEventAck | ce.SessionResume) -> ProtocolError | None:
        """`session.event_ack` trims the journal; `session.resume` is only valid as a connection's first
        (the coded error to answer it with)."""
        if isinstance(event, ce.SessionEventAck):
            if self.journal is not None:
                self.journal.ack(event.server_event_seq)
            return None
        code, message = (
            (ErrorCode.INVALID_SESSION_RESUME, "session.resume must be the first message of a new connection")
            if self.journal is not None
            else (
                ErrorCode.UNSUPPORTED_SESSION_RESUME,
                "this session cannot be resumed (resume is off, or its dialect has no resume)",
            )
        )
        return ProtocolError(code, message, event_id=event.event_id)

    async def opening_closed(self) -> None:
        """Wait until the socket the session opened on is closed: the session ended, or it lost that
        socket and lives on detached (resumable on another connection). The opening connection's handler
        returns then, so a detached session holds no request open (a proxy draining its requests, like
        Ray Serve's, is not kept waiting by sessions nobody is connected to)."""
        await self._opening.ended.wait()

    # --- an attachment's life -------------------------------------------------------------------------

    def start(self, attachment: Attachment, first: FirstMessage | None) -> None:
        """Start handling the attachment's messages: `first` (read before admission; `None` in it: none
        came in time), then whatever arrives. A new session must be opened within `config_timeout_s`: by
        an opening `session.update` (`autostart=0`) or, started already, by a client event that parses.
        Nothing else meets the deadline: a message that is refused does not (a resumed attachment's first
        message was the resume)."""
        if attachment.direct is None:
            attachment.writer = supervised(self._write(attachment), "writer", self._session.task_failed)
        if first is not None and first.message is None:
            attachment.reading = False
            self._session.config_timed_out()
            return
        if attachment.generation == 1:
            attachment.first_deadline = asyncio.get_running_loop().call_later(
                self.config_timeout_s, self._first_overdue, attachment
            )
        if first is not None:
            self._on_message(attachment, first.message)
        ws = attachment.ws
        if isinstance(ws, PushReceive):
            ws.deliver(partial(self._on_pushed, attachment))
        else:
            attachment.reader = supervised(self._read(attachment), "reader", self._session.task_failed)

    async def end(self) -> None:
        """The session ended: end the current attachment, if any."""
        attachment, self.current = self.current, None
        if attachment is not None:
            await self._end(attachment)

    async def _end(self, attachment: Attachment) -> None:
        """Stop handling its messages, let the writer flush what is queued (bounded), close the socket."""
        self._stop_reading(attachment)
        for task in (attachment.reader, attachment.updating):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if attachment.writer is not None:
            attachment.outbound.put_nowait(None)  # the writer flushes what is queued, then stops
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(attachment.writer), self.close_timeout_s)
            attachment.writer.cancel()
            await asyncio.gather(attachment.writer, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(attachment.ws.close(self.close_code), self.close_timeout_s)
        attachment.ended.set()

    @staticmethod
    def _stop_reading(attachment: Attachment) -> None:
        attachment.reading = False
        attachment.held.clear()
        attachment.held_bytes = 0
        attachment.cancel_first_deadline()

    async def _close_lost(self, attachment: Attachment) -> None:
        """Finish a lost socket's closing handshake (its unsent events are in the journal)."""
        if attachment.writer is not None:
            attachment.writer.cancel()
            await asyncio.gather(attachment.writer, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(attachment.ws.close(1000), self.close_timeout_s)
        attachment.ended.set()

    def _gone(self, attachment: Attachment) -> None:
        """The attachment's socket is gone: the client left (the session ends), or the socket was lost
        (a resumable session detaches, any other ends)."""
        if attachment is not self.current:
            attachment.ended.set()
            return
        if left_on_purpose(attachment.ws.close_code):
            self._session.end_without_client("client_close")
            return
        if self.lease is None or not self.engine.started or self.engine.closed or self._done.is_set():
            self._session.end_without_client("client_disconnected")
            return
        self.current = None
        closing = supervised(self._close_lost(attachment), "detach", self._session.task_failed)
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)
        self.lease.detach(self.clock())
        log.info("session %s: detached, awaiting resume", self.engine.session_id)

    async def _read(self, attachment: Attachment) -> None:
        """Read a socket that does not push its messages, until its peer is gone."""
        while attachment.reading:
            try:
                message = await attachment.receive()
            except (SocketClosed, RuntimeError, OSError):  # a library's own way of saying it is gone
                message = None
            self._on_message(attachment, message)
            if message is None:
                return

    def _on_pushed(self, attachment: Attachment, message: Inbound) -> None:
        """A message a socket pushed (from its library's callback): what it raises ends this session, as a
        reader task's failure would, never the edge."""
        try:
            self._on_message(attachment, message)
        except Exception as exc:
            self._session.task_failed("reader", exc)

    def _on_message(self, attachment: Attachment, message: Inbound) -> None:
        """One message of the attachment's socket, in arrival order (`None`: the peer is gone). Handled at
        once, unless a `session.update` is still being prepared: then it waits its turn behind it."""
        if not attachment.reading:
            return
        if attachment.updating is not None:
            self._hold(attachment, message)
            return
        if message is None:
            self._stop_reading(attachment)
            self._gone(attachment)
            return
        if self._done.is_set():
            return
        self.client_events_received += 1
        update = self._session.handle(message)
        if attachment.first_deadline is not None and (update is not None or self._session.opened):
            attachment.cancel_first_deadline()  # an opening update ends in the session's start or refusal
        if update is not None:
            attachment.updating = supervised(
                self._update(attachment, *update), "update", self._session.task_failed
            )

    def _hold(self, attachment: Attachment, message: Inbound) -> None:
        """Keep a message until the update before it is prepared; past `max_pending_input_bytes` held, it
        is refused with `input_backpressure` instead (a socket that pushes is not paused meanwhile)."""
        size = 0 if message is None else message_size(message)
        if message is not None and attachment.held_bytes + size > self.max_pending_input_bytes:
            error = ProtocolError(
                ErrorCode.INPUT_BACKPRESSURE,
                f"{attachment.held_bytes} bytes wait for a session.update to be prepared; this message "
                "was dropped",
            )
            self._session.refuse(error)
            return
        attachment.held_bytes += size
        attachment.held.append(message)

    async def _update(self, attachment: Attachment, event: ce.SessionUpdate, now: float) -> None:
        """A `session.update`, then the messages that arrived while it was prepared, in order."""
        try:
            await self._session.update(event, now)
        finally:
            attachment.updating = None
        while attachment.held and attachment.updating is None:
            message = attachment.held.popleft()
            attachment.held_bytes -= 0 if message is None else message_size(message)
            self._on_message(attachment, message)

    def _first_overdue(self, attachment: Attachment) -> None:
        attachment.first_deadline = None
        if attachment.reading and not self._done.is_set():
            self._stop_reading(attachment)
            self._session.config_timed_out()

    async def _write(self, attachment: Attachment) -> None:
        while True:
            message = await attachment.outbound.get()
            if message is None:
                return
            attachment.outbound_bytes -= message_size(message)
            try:
                await attachment.write(message)
            except SocketClosed:  # the peer is gone: its reader sees the loss (detach or end), the rest
                return  # of the queue is in the journal, or was never going to arrive

    # --- resume ---------------------------------------------------------------------------------------

    async def resume(self, websocket: SessionSocket, event: ce.SessionResume, dialect: Dialect) -> None:
        """Attach `websocket` (in `dialect`) to this session (`event` was its first message) and serve it
        until it ends.

        The caller has matched the session id; this checks the dialect, the token and the seq, replaces an
        attachment still open (`session.replaced`), then sends `session.resumed` and the replay (or
        `session.resync_required`). A refused resume is answered with its coded error and the socket closes.
        """
        refusal = self._resume_refusal(event, dialect)
        if refusal is not None:
            await refuse(websocket, refusal, dialect)
            return
        self._resuming = True
        try:
            old, self.current = self.current, None
            if old is not None:  # a half-open socket the server had not noticed yet
                assert self.ticket is not None
                old.send(
                    self._control(
                        se.SessionReplaced(
                            session_id=self.engine.session_id,
                            attachment_generation=self.ticket.generation + 1,
                        )
                    )
                )
                await self._end(old)
            if self._done.is_set():
                await refuse(
                    websocket, ProtocolError(ErrorCode.SESSION_RESUME_CONFLICT, "the session ended"), dialect
                )
                return
            attachment = self._attach(event.last_received_server_event_seq, websocket)
        finally:
            self._resuming = False
        self.start(attachment, None)
        await attachment.ended.wait()

    def _resume_refusal(self, event: ce.SessionResume, dialect: Dialect) -> ProtocolError | None:
        if self.ticket is None:
            return ProtocolError(ErrorCode.UNSUPPORTED_SESSION_RESUME, "this session cannot be resumed")
        if dialect != self.dialect:  # the journal holds frames rendered (and numbered) in the session's
            return ProtocolError(
                ErrorCode.INVALID_SESSION_RESUME,
                f"the session speaks the {self.dialect.value} dialect; resume it in that dialect, not "
                f"{dialect.value}",
                param="dialect",
            )
        if self._resuming:
            return ProtocolError(ErrorCode.SESSION_RESUME_CONFLICT, "a resume of this session is under way")
        if self._done.is_set() or self.engine.closed:
            return ProtocolError(ErrorCode.SESSION_RESUME_CONFLICT, "the session is closing")
        if not self.ticket.matches(event.resume_token):
            return ProtocolError(
                ErrorCode.INVALID_RESUME_TOKEN, "resume_token does not match", param="resume_token"
            )
        if event.last_received_server_event_seq > self.last_seq:
            return ProtocolError(
                ErrorCode.INVALID_SESSION_RESUME,
                f"last_received_server_event_seq {event.last_received_server_event_seq} is past the "
                f"last event sent ({self.last_seq})",
                param="last_received_server_event_seq",
            )
        return None

    def _attach(self, last_seq: int, websocket: SessionSocket) -> Attachment:
        """A new attachment, `session.resumed` and the replay queued; no await, so nothing interleaves."""
        assert self.ticket is not None and self.journal is not None and self.lease is not None
        now = self.clock()
        self.ticket.rotate()
        self.journal.expire(now)
        plan = self.journal.replay_after(last_seq)
        attachment = Attachment(websocket, generation=self.ticket.generation)
        entries = plan.entries if isinstance(plan, Replay) else ()
        resumed = se.SessionResumed(
            session_id=self.engine.session_id,
            resume_token=self.ticket.token,
            attachment_generation=self.ticket.generation,
            replayed_events=len(entries),
            client_events_received=self.client_events_received,
            session=self.engine.session_info(),
        )
        attachment.send(self._control(resumed))
        if isinstance(plan, Replay):
            for entry in entries:
                attachment.send(entry.text)
        else:
            resync = se.SessionResyncRequired(
                session_id=self.engine.session_id,
                reason=plan.reason,
                first_available_seq=plan.first_available_seq,
            )
            attachment.send(self._control(resync))
        self.current = attachment
        self.lease.attach(now)
        self.metrics.sessions_resumed.inc()
        log.info(
            "session %s: resumed (generation %d, %d events replayed)",
            self.engine.session_id,
            attachment.generation,
            len(entries),
        )
        return attachment

    def _control(self, event: se.ServerEventBase) -> str:
        """An attachment-level event: not journaled, its seq the journal head (where a replay ends)."""
        event.server_event_seq = self.last_seq
        event.event_id = f"evt_ctl_{secrets.token_hex(6)}"
        return json.dumps(render(event.model_dump(mode="json", exclude_none=True), self.dialect))

    def reap(self, now: float) -> float | None:
        """From the session's tick, attached or not: the lease reaper, every `reap_interval_s`, ends a
        session past its grace or idle TTL (`session.expired`, then the session's `expire`) and ages the
        journal. Returns when it is next due (`None`: the session is not resumable)."""
        if self.resume_config is None:
            return None
        if now >= self.next_reap and not self._done.is_set():
            self.next_reap = now + self.resume_config.reap_interval_s
            self._reap(now)
        return self.next_reap

    def _reap(self, now: float) -> None:
        assert self.lease is not None and self.journal is not None
        self.journal.expire(now)
        reason = self.lease.expiry(now)
        if reason is None or self.engine.closed:
            return
        self.expired = reason
        self.metrics.sessions_expired.labels(reason=reason).inc()
        log.info("session %s: expired (%s)", self.engine.session_id, reason)
        if self.current is not None:
            expired = se.SessionExpired(session_id=self.engine.session_id, reason=reason)
            self.current.send(self._control(expired))
        self._session.expire(reason, now)
