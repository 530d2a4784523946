"""One session's runner: the I/O edge around the Sans-I/O engine.

The runner holds a session's jobs together; each has its module. Stepping (`server.stepping`): one
stepper task runs the model on units, in order, off the event loop's critical path (with a deadline per
decision, through the server's `BatchScheduler` when the model batches). Time: the server's shared
`SessionTicker` feeds the engine the passage of time and reaps the resume lease, attached or not. The
edge contract (`server.attachment`, `server.edge`): per attachment (a socket the session is attached to:
a JSON socket, or an in-process edge handing typed events), messages are handled as they arrive: a socket that
pushes them (`edge.PushReceive`: the default picows edge) calls the runner back per message; any other is
read by a reader task. A `session.update` the model must prepare for holds the messages after it until it
is prepared, within the pending-input bound. Events go to the socket at once when its sends never wait
(`edge.DirectSend`); any other socket gets a writer task and an outbound queue. Either way what a client
has not taken is bounded in bytes: a client that stops reading is dropped with a logged reason instead of
making the server buffer without bound. On the default edge a unit costs one task wake-up (the stepper's),
not three hand-offs between a reader, a stepper and a writer.

How a session ends follows what its client did. A client that closed its socket on purpose (a coded
close frame: 1000, 1001, ...) has left: the session ends at once (`client_close`) and frees its slot; no
`session.closed` is owed to it. A socket lost without a close frame ends the session too
(`client_disconnected`), unless the session is resumable (the caller passes a `ResumeConfig` only then:
resume on and a dialect with a resume contract). A resumable session detaches instead: the engine keeps
stepping the input it already has, every event goes to the replay journal, and `resume` attaches a new
socket, replaying what the client lacks (`duplexkit.engine.journal` holds the rules).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from duplexkit.engine import EngineSession, Step
from duplexkit.engine.journal import ExpiryReason, Lease, Replay, ReplayJournal, ResumeConfig, ResumeTicket
from duplexkit.models import ModelSession
from duplexkit.protocol import client_events as ce
from duplexkit.protocol import server_events as se
from duplexkit.protocol.dialects import Dialect, follow_ups, render
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.protocol.wire import MAX_EVENT_BYTES, EventRenderer, ServerEventStamper, parse_client_event
from duplexkit.server.attachment import (
    Attachment,
    FirstMessage,
    Inbound,
    SessionSocket,
    message_size,
    refuse,
)
from duplexkit.server.batching import BatchScheduler
from duplexkit.server.edge import EventSocket, PushReceive, SocketClosed, left_on_purpose
from duplexkit.server.metrics import ServerMetrics
from duplexkit.server.stepping import Stepper
from duplexkit.server.ticker import SessionTicker

__all__ = ["FirstMessage", "RunnerLimits", "SessionRunner", "SessionSocket", "configure_model", "refuse"]

log = logging.getLogger("duplexkit.server")


@dataclass(frozen=True, slots=True)
class RunnerLimits:
    config_timeout_s: float = 10.0
    max_event_bytes: int = MAX_EVENT_BYTES
    max_pending_input_bytes: int = 16 * 1024 * 1024
    max_outbound_bytes: int = 32 * 1024 * 1024
    tick_s: float = 0.1
    close_timeout_s: float = 2.0
    step_deadline_s: float = 60.0
    """The longest a model may take to yield its next decision for a unit before the step is abandoned."""


class SessionRunner:
    def __init__(
        self,
        websocket: SessionSocket | EventSocket,
        engine: EngineSession,
        model: ModelSession,
        metrics: ServerMetrics,
        limits: RunnerLimits,
        *,
        ticker: SessionTicker,
        batches: BatchScheduler | None = None,
        clock: Callable[[], float] = time.monotonic,
        dialect: Dialect = Dialect.GA,
        resume: ResumeConfig | None = None,
    ) -> None:
        self.ticker = ticker
        self.batches = batches
        self.engine = engine
        self.model = model
        self.metrics = metrics
        self.limits = limits
        self.clock = clock
        self.dialect = dialect
        """Pinned for the session's life: the journal holds frames rendered in it (a resume must match)."""
        self.resume_config = resume if resume is not None and resume.enabled else None
        self._stamper = ServerEventStamper(dialect)
        self._attachment: Attachment | None = Attachment(websocket, generation=1)
        self._renderer = None if self._attachment.events is not None else EventRenderer(dialect)
        """A JSON session's renderer (its events become text here, once, for the socket and the journal);
        `None` for an in-process edge's session, whose events go to the edge as objects."""
        if self._renderer is None and self.resume_config is not None:
            raise ValueError("a session on an in-process edge has no resume (its journal holds JSON text)")
        self._opening = self._attachment
        """The attachment the session opened on (see `opening_closed`)."""
        self._journal: ReplayJournal | None = None
        self._lease: Lease | None = None
        self.ticket: ResumeTicket | None = None
        if self.resume_config is not None:
            c = self.resume_config
            self._journal = ReplayJournal(c.journal_max_bytes, c.replay_ttl_s)
            self._lease = Lease(c.disconnect_grace_s, c.idle_ttl_s, clock())
            self.ticket = ResumeTicket()
        self._next_reap = clock()
        self._resuming = False
        self._closing: set[asyncio.Task[None]] = set()
        self.last_seq = 0
        self.client_events_received = 0
        """Client frames this session has read, on every attachment (`session.resumed` reports it)."""
        self.expired: ExpiryReason | None = None
        self._epoch = engine.fence.epoch
        self._done = asyncio.Event()
        self.close_reason: str | None = None
        self._close_code = 1000
        """How the session's socket closes: 1008 when its opening was refused, else normally."""
        self._tick_callback = self._on_tick
        """The ticker's key for this session (one bound method, not a new one per wake)."""
        self._stepper = Stepper(
            engine,
            model,
            metrics,
            step_deadline_s=limits.step_deadline_s,
            apply=self._apply,
            wake=partial(ticker.wake, self._tick_callback),
            batches=batches,
            lease=self._lease,
            clock=clock,
        )

    @property
    def attached(self) -> bool:
        return self._attachment is not None

    @property
    def journal(self) -> ReplayJournal | None:
        return self._journal

    async def run(self, *, autostart: bool, first: FirstMessage | None = None) -> None:
        """Serve the session until it ends: the client closes it, it expires, or the client is dropped
        (without resume, a lost socket ends it too). `first` is the first message when it was read already.
        """
        if autostart:
            await self._prepare_model(None)
            self._apply(self.engine.start(self.clock()))
        assert self._attachment is not None
        self._start_attachment(self._attachment, first)
        tasks = [self._stepper.start(), asyncio.create_task(self._tick(), name="ticker")]
        try:
            await self._done.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            attachment, self._attachment = self._attachment, None
            if attachment is not None:
                await self._end_attachment(attachment)
            try:
                await self.model.aclose()
            except Exception:
                log.exception("session %s: model cleanup failed", self.engine.session_id)

    async def opening_closed(self) -> None:
        """Wait until the socket the session opened on is closed: the session ended, or it lost that
        socket and lives on detached (resumable on another connection). The opening connection's handler
        returns then, so a detached session holds no request open (a proxy draining its requests, like
        Ray Serve's, is not kept waiting by sessions nobody is connected to)."""
        await self._opening.ended.wait()

    async def shutdown(self, reason: str) -> None:
        """Close from the server side (e.g. SIGTERM): `session.closed{reason}` then the socket."""
        if not self._done.is_set():
            self._apply(self.engine.close(reason, self.clock()))

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
            old, self._attachment = self._attachment, None
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
                await self._end_attachment(old)
            if self._done.is_set():
                await refuse(
                    websocket, ProtocolError(ErrorCode.SESSION_RESUME_CONFLICT, "the session ended"), dialect
                )
                return
            attachment = self._attach(event.last_received_server_event_seq, websocket)
        finally:
            self._resuming = False
        self._start_attachment(attachment, None)
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
        assert self.ticket is not None and self._journal is not None and self._lease is not None
        now = self.clock()
        self.ticket.rotate()
        self._journal.expire(now)
        plan = self._journal.replay_after(last_seq)
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
        self._attachment = attachment
        self._lease.attach(now)
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

    def _start_attachment(self, attachment: Attachment, first: FirstMessage | None) -> None:
        """Start handling the attachment's messages: `first` (read before admission; `None` in it: none
        came in time), then whatever arrives. A new session's first message must come within
        `config_timeout_s` (a resumed attachment's first message was the resume)."""
        if attachment.direct is None:
            attachment.writer = asyncio.create_task(self._write(attachment), name="writer")
        if first is not None:
            if first.message is None:
                attachment.reading = False
                self._config_timed_out()
                return
            self._on_message(attachment, first.message)
        elif attachment.generation == 1:
            attachment.first_deadline = asyncio.get_running_loop().call_later(
                self.limits.config_timeout_s, self._first_overdue, attachment
            )
        ws = attachment.ws
        if isinstance(ws, PushReceive):
            ws.deliver(partial(self._on_message, attachment))
        else:
            attachment.reader = asyncio.create_task(self._read(attachment), name="reader")

    async def _end_attachment(self, attachment: Attachment) -> None:
        """Stop handling its messages, let the writer flush what is queued (bounded), close the socket."""
        self._stop_reading(attachment)
        for task in (attachment.reader, attachment.updating):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if attachment.writer is not None:
            attachment.outbound.put_nowait(None)  # the writer flushes what is queued, then stops
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(attachment.writer), self.limits.close_timeout_s)
            attachment.writer.cancel()
            await asyncio.gather(attachment.writer, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(attachment.ws.close(self._close_code), self.limits.close_timeout_s)
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
            await asyncio.wait_for(attachment.ws.close(1000), self.limits.close_timeout_s)
        attachment.ended.set()

    def _gone(self, attachment: Attachment) -> None:
        """The attachment's socket is gone: the client left (the session ends), or the socket was lost
        (a resumable session detaches, any other ends)."""
        if attachment is not self._attachment:
            attachment.ended.set()
            return
        if left_on_purpose(attachment.ws.close_code):
            self._end_without_client("client_close")
            return
        if self._lease is None or not self.engine.started or self.engine.closed or self._done.is_set():
            self._end_without_client("client_disconnected")
            return
        self._attachment = None
        closing = asyncio.create_task(self._close_lost(attachment), name="detach")
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)
        self._lease.detach(self.clock())
        log.info("session %s: detached, awaiting resume", self.engine.session_id)

    def _end_without_client(self, reason: str) -> None:
        """End the session as any close does (a response in flight ends cancelled; the journal, if any,
        records it and `session.closed`), sending nothing: no event is owed to a client that is gone."""
        if not self.engine.closed and not self._done.is_set():
            self._apply(self.engine.close(reason, self.clock()), deliver=False)
        self._finish(reason)

    # --- tasks ----------------------------------------------------------------------------------------

    async def _read(self, attachment: Attachment) -> None:
        """Read a socket that does not push its messages, until its peer is gone."""
        try:
            while attachment.reading:
                message = await attachment.receive()
                self._on_message(attachment, message)
                if message is None:
                    return
        except (SocketClosed, RuntimeError, OSError):
            self._on_message(attachment, None)

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
        attachment.cancel_first_deadline()
        if self._done.is_set():
            return
        self.client_events_received += 1
        update = self._handle_frame(message)
        if update is not None:
            attachment.updating = asyncio.create_task(self._update(attachment, *update), name="update")

    def _hold(self, attachment: Attachment, message: Inbound) -> None:
        """Keep a message until the update before it is prepared; past `max_pending_input_bytes` held, it
        is refused with `input_backpressure` instead (a socket that pushes is not paused meanwhile)."""
        size = 0 if message is None else message_size(message)
        if message is not None and attachment.held_bytes + size > self.limits.max_pending_input_bytes:
            error = ProtocolError(
                ErrorCode.INPUT_BACKPRESSURE,
                f"{attachment.held_bytes} bytes wait for a session.update to be prepared; this message "
                "was dropped",
            )
            self._apply(self.engine.protocol_error(error))
            return
        attachment.held_bytes += size
        attachment.held.append(message)

    async def _update(self, attachment: Attachment, event: ce.SessionUpdate, now: float) -> None:
        """A `session.update`, then the messages that arrived while it was prepared, in order."""
        try:
            await self._update_session(event, now)
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
            self._config_timed_out()

    def _config_timed_out(self) -> None:
        now = self.clock()
        self._apply(self.engine.protocol_error(_config_timeout(self.limits.config_timeout_s)))
        self._apply(self.engine.close("config_timeout", now))

    def _handle_frame(
        self, message: str | bytes | ce.ClientEventBase | ProtocolError
    ) -> tuple[ce.SessionUpdate, float] | None:
        """Apply one client message: a JSON socket's text frame is parsed here (with the session's input
        format, which an update before it may have changed); an in-process edge's event comes typed. This
        is the one dispatch on a client event's type. A `session.update` is returned with its arrival time
        instead: the model may have to prepare for it, which is asynchronous (`_update_session`)."""
        now = self.clock()
        if self._lease is not None:
            self._lease.renew(now)
        if isinstance(message, (str, bytes)):
            try:
                event = parse_client_event(
                    message,
                    input_audio_format=self.engine.settings.input_audio_format,
                    max_bytes=self.limits.max_event_bytes,
                    dialect=self.dialect,
                )
            except ProtocolError as exc:
                self._apply(self.engine.protocol_error(exc))
                return None
        elif isinstance(message, ProtocolError):
            self._apply(self.engine.protocol_error(message))
            return None
        else:
            event = message
        if isinstance(event, ce.InputAudioBufferAppend):
            if not self._over_input_limit(event):
                self._apply(self.engine.handle(event, now))
            return None
        if isinstance(event, ce.SessionUpdate):
            return event, now
        if isinstance(event, ce.SessionEventAck | ce.SessionResume):
            self._resume_event(event)
            return None
        self._apply(self.engine.handle(event, now))
        return None

    async def _update_session(self, event: ce.SessionUpdate, now: float) -> None:
        await self._stepper.settled()  # the audio sent before the update reaches the model first
        opening = not self.engine.started
        previous = (self.model.sampling, dict(self.engine.settings.extra_body))
        if not self._configure_model(event):
            if opening:
                self._refuse_opening()
            return
        if not await self._prepare_model(event.event_id):
            self.model.configure(*previous)  # the refused update leaves the model as it was
            if opening:
                self._refuse_opening()
            return
        step = self.engine.handle(event, now)
        if any(isinstance(e, se.Error) for e in step.events):  # the engine refused it: undo the model's part
            self.model.configure(*previous)
        self._apply(step)
        if opening and not self.engine.started:
            self._refuse_opening()
            return
        self._wake_ticker()

    def _refuse_opening(self) -> None:
        """The settings a session was to open with (`autostart=0`: `/api/chat`'s query, a call's offer, a
        client's first `session.update`) were refused: its coded error is out; the session ends, the
        socket closes with 1008 (policy) and the slot is free at once, never held by a session that
        cannot start."""
        self._close_code = 1008
        self._finish("opening_refused")

    def _resume_event(self, event: ce.SessionEventAck | ce.SessionResume) -> None:
        """`session.event_ack` trims the journal; `session.resume` is only valid as a connection's first."""
        if isinstance(event, ce.SessionEventAck):
            if self._journal is not None:
                self._journal.ack(event.server_event_seq)
            return
        code, message = (
            (ErrorCode.INVALID_SESSION_RESUME, "session.resume must be the first message of a new connection")
            if self._journal is not None
            else (
                ErrorCode.UNSUPPORTED_SESSION_RESUME,
                "this session cannot be resumed (resume is off, or its dialect has no resume)",
            )
        )
        self._apply(self.engine.protocol_error(ProtocolError(code, message, event_id=event.event_id)))

    def _over_input_limit(self, event: ce.InputAudioBufferAppend) -> bool:
        pending = self._stepper.pending_input_bytes
        if pending + event.decoded_nbytes <= self.limits.max_pending_input_bytes:
            return False
        self._apply(
            self.engine.protocol_error(
                ProtocolError(
                    ErrorCode.INPUT_BACKPRESSURE,
                    f"{pending} bytes of input await the model; this append was dropped",
                    event_id=event.event_id,
                )
            )
        )
        return True

    def _configure_model(self, event: ce.SessionUpdate) -> bool:
        refusal = configure_model(self.model, self.engine.settings.extra_body, event)
        if refusal is not None:
            self._apply(self.engine.protocol_error(refusal))
            return False
        return True

    async def _prepare_model(self, event_id: str | None) -> bool:
        """Let the model prime its state for the settings it accepted (a persona prefill) before the
        session is announced; a failure is the update's coded error (`invalid_value` for a `ValueError`:
        the settings could not be honoured, e.g. a voice file that cannot be read), and the session goes
        on."""
        try:
            await self.model.prepare()
        except ValueError as exc:
            error = ProtocolError(
                ErrorCode.INVALID_VALUE,
                f"session.extra_body: {exc}",
                param="session.extra_body",
                event_id=event_id,
            )
            self._apply(self.engine.protocol_error(error))
            return False
        except Exception as exc:
            log.exception("session %s: model prepare failed", self.engine.session_id)
            error = ProtocolError(
                ErrorCode.MODEL_STEP_FAILED, f"{type(exc).__name__}: {exc}", event_id=event_id
            )
            self._apply(self.engine.protocol_error(error))
            return False
        return True

    async def _tick(self) -> None:
        """Hear the time from the server's shared ticker (one timer for all sessions) until cancelled."""
        self.ticker.add(self._tick_callback)
        try:
            await asyncio.Event().wait()
        finally:
            self.ticker.discard(self._tick_callback)

    def _on_tick(self) -> float:
        """One tick: the engine hears the time (idle timeout, continuation); the lease reaper runs every
        `reap_interval_s`, attached or not (a detached session past its grace ends here). Returns in how
        many seconds the session next has time-based work due (the ticker calls it then, or when woken)."""
        if self._done.is_set():
            return math.inf
        now = self.clock()
        self._stepper.check_deadline(now)
        self._apply(self.engine.tick(now))
        if self.resume_config is not None and now >= self._next_reap and not self._done.is_set():
            self._next_reap = now + self.resume_config.reap_interval_s
            self._reap(now)
        dues = [self.engine.next_tick_at()]
        decision_due = self._stepper.next_due()
        if decision_due is not None:
            dues.append(decision_due)
        if self.resume_config is not None:
            dues.append(self._next_reap)
        return min(dues) - now

    def _wake_ticker(self) -> None:
        """The engine's time-based work may be due sooner (a reply started, a shorter idle timeout)."""
        self.ticker.wake(self._tick_callback, self.engine.next_tick_at() - self.clock())

    def _reap(self, now: float) -> None:
        """The lease reaper: end a session past its grace or idle TTL; age the journal."""
        assert self._lease is not None and self._journal is not None
        self._journal.expire(now)
        reason = self._lease.expiry(now)
        if reason is None or self.engine.closed:
            return
        self.expired = reason
        self.metrics.sessions_expired.labels(reason=reason).inc()
        log.info("session %s: expired (%s)", self.engine.session_id, reason)
        if self._attachment is not None:
            self._attachment.send(
                self._control(se.SessionExpired(session_id=self.engine.session_id, reason=reason))
            )
        self._apply(self.engine.close(reason, now))

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

    # --- plumbing -------------------------------------------------------------------------------------

    def _apply(self, step: Step, *, deliver: bool = True) -> None:
        """Send the step's events in order (journal them only, `deliver=False`), queue its units, and act on
        an epoch change or a close."""
        if not (step.events or step.units or step.close_reason) and self.engine.fence.epoch == self._epoch:
            return  # most appends: input buffered, nothing to send, step or act on
        attachment = self._attachment if deliver else None
        for event in step.events:
            if type(event) is se.ResponseListen:  # one per unit: nothing to observe, tell or follow
                self._send(attachment, event)
                continue
            self._observe(event)
            self._tell_model_what_was_heard(event)
            if isinstance(event, se.SessionCreated) and self.ticket is not None:
                event.resume_token = self.ticket.token
                event.attachment_generation = self.ticket.generation
            self._send(attachment, event)
            for follow_up in follow_ups(event, self.dialect):
                self._send(attachment, follow_up)
        for unit in step.units:
            self._stepper.submit(unit, self.clock())
        if self.engine.fence.epoch != self._epoch:
            self._epoch = self.engine.fence.epoch
            self.model.interrupt()
        if self.engine.active_response_id is not None:
            self._wake_ticker()
        if step.close_reason:
            self._finish(step.close_reason)
        elif attachment is not None and attachment.backlog > self.limits.max_outbound_bytes:
            log.warning(
                "session %s: dropped, client is not reading (%d bytes queued)",
                self.engine.session_id,
                attachment.backlog,
            )
            self._finish("client_too_slow")

    def _send(self, attachment: Attachment | None, event: se.ServerEventBase) -> None:
        """Stamp one event; on a JSON session render it in the session's dialect, journal it (resume on)
        and send the text if attached; on an in-process edge's session hand it the event."""
        self._stamper.stamp(event)
        assert event.server_event_seq is not None
        self.last_seq = event.server_event_seq
        if self._renderer is None:
            if attachment is not None:
                attachment.send(event)
            return
        text = self._renderer.render(event)
        if self._journal is not None:
            self._journal.record(self.last_seq, text, self.clock())
        if attachment is not None:
            attachment.send(text)

    def _tell_model_what_was_heard(self, event: se.ServerEventBase) -> None:
        """After a response ends or an ack moves its played point, the model learns what was heard."""
        if isinstance(event, se.ResponseDone):
            response_id = event.response.id
        elif isinstance(event, se.PlaybackAcknowledged):
            response_id = event.response_id
        else:
            return
        text = self.engine.heard_text(response_id)
        if text is not None:
            self.model.heard(text)

    def _observe(self, event: se.ServerEventBase) -> None:
        if isinstance(event, se.ResponseDone) and event.response_request_metrics is not None:
            m = event.response_request_metrics
            if m.ttft_ms is not None:
                self.metrics.ttft_seconds.observe(m.ttft_ms / 1000.0)
            if m.ttfp_ms is not None:
                self.metrics.ttfp_seconds.observe(m.ttfp_ms / 1000.0)
        elif isinstance(event, se.Error):
            self.metrics.errors.labels(code=event.error.code.value).inc()

    def _finish(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason
            log.info("session %s: closing (%s)", self.engine.session_id, reason)
        self._done.set()


def configure_model(
    model: ModelSession, extra_body: Mapping[str, Any], event: ce.SessionUpdate
) -> ProtocolError | None:
    """Give the model the update's sampling, tools and `extra_body` (`extra_body`: the session's so far,
    kept when the update has none); what it refuses, as the update's coded error."""
    update = event.session
    refusal = model.tools_refusal() if update.tools else None
    if refusal is not None:
        return ProtocolError(
            ErrorCode.TOOLS_UNSUPPORTED, refusal, param="session.tools", event_id=event.event_id
        )
    sampling = model.sampling.with_overrides(
        temperature=update.temperature,
        max_tokens=update.max_tokens,
        instructions=update.instructions,
        voice=update.voice,
        tools=update.tools,
        tool_choice=update.tool_choice,
    )
    try:
        model.configure(sampling, extra_body if update.extra_body is None else update.extra_body)
    except ValueError as exc:
        return ProtocolError(
            ErrorCode.INVALID_VALUE,
            f"session.extra_body: {exc}",
            param="session.extra_body",
            event_id=event.event_id,
        )
    return None


def _config_timeout(timeout_s: float) -> ProtocolError:
    return ProtocolError(ErrorCode.CONFIG_TIMEOUT, f"no session.update within {timeout_s:g} s")
