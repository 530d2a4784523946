"""One session's runner: the I/O edge around the Sans-I/O engine.

The runner does the session's own job: it hands the engine (and the model) what comes from the client and
from the clock, and sends what they decide, in order. A client message is applied as it comes (`handle`:
the one dispatch on a client event's type; a JSON socket's text is parsed here, an in-process edge's event
comes typed); a `session.update` first lets the model prepare. Each step's events are stamped and, on a
JSON socket, rendered once (`protocol.wire`); its units go to the stepper. Time comes from the server's
shared `SessionTicker` (the idle timeout, a continuation, a step's deadline, the resume reaper).

Its other jobs have their modules. Stepping (`server.stepping`): one stepper task runs the model on units,
in order, with a deadline per decision, through the server's `BatchScheduler` when the model batches. The
attachment job (`server.attaching`): the socket the session is attached to, its messages in (pushed by
the default picows edge, else read by a task) and events out (written at once, else queued to a writer
task, bounded in bytes), how the session ends when its client leaves, and, for a resumable session,
detaching from a lost socket and attaching a new one with the replay journal. The edge contract
(`server.attachment`, `server.edge`): what a socket is to the runner. On the default edge a unit costs one
task wake-up (the stepper's).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from duplexkit.engine import EngineSession, Step
from duplexkit.engine.journal import ExpiryReason, ReplayJournal, ResumeConfig, ResumeTicket
from duplexkit.models import ModelSession
from duplexkit.protocol import client_events as ce
from duplexkit.protocol import server_events as se
from duplexkit.protocol.dialects import Dialect, follow_ups, sends
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.protocol.wire import MAX_EVENT_BYTES, EventRenderer, ServerEventStamper, parse_client_event
from duplexkit.server.attaching import Attachments
from duplexkit.server.attachment import FirstMessage, SessionSocket
from duplexkit.server.batching import BatchScheduler
from duplexkit.server.edge import EdgeTaskFailed, EventSocket
from duplexkit.server.metrics import ServerMetrics
from duplexkit.server.stepping import Stepper
from duplexkit.server.supervision import supervised
from duplexkit.server.ticker import SessionTicker

__all__ = ["RunnerLimits", "SessionRunner", "configure_model"]

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
    """One session's runner (see the module doc): it gives the engine and the model what comes from the
    client and the clock, and sends what they decide. Its attachment and resume job is `attachments`
    (`server.attaching.Attachments`), its stepping job the stepper (`server.stepping.Stepper`)."""

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
        self._stamper = ServerEventStamper(dialect)
        self._done = asyncio.Event()
        self.attachments = Attachments(
            websocket,
            self,
            engine,
            metrics,
            done=self._done,
            config_timeout_s=limits.config_timeout_s,
            max_pending_input_bytes=limits.max_pending_input_bytes,
            close_timeout_s=limits.close_timeout_s,
            clock=clock,
            dialect=dialect,
            resume=resume if resume is not None and resume.enabled else None,
        )
        self._renderer = None if isinstance(websocket, EventSocket) else EventRenderer(dialect)
        """A JSON session's renderer (its events become text here, once, for the socket and the journal);
        `None` for an in-process edge's session, whose events go to the edge as objects."""
        if self._renderer is None and self.attachments.resume_config is not None:
            raise ValueError("a session on an in-process edge has no resume (its journal holds JSON text)")
        self._lease = self.attachments.lease
        self._epoch = engine.fence.epoch
        self.close_reason: str | None = None
        self._read_event = False
        """A client event has parsed (what meets the opening deadline, with the session started)."""
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

    # What the resume registry (`server.resume`) and tests read of the session's attachment job.

    @property
    def attached(self) -> bool:
        return self.attachments.current is not None

    @property
    def journal(self) -> ReplayJournal | None:
        return self.attachments.journal

    @property
    def ticket(self) -> ResumeTicket | None:
        return self.attachments.ticket

    @property
    def expired(self) -> ExpiryReason | None:
        return self.attachments.expired

    @property
    def client_events_received(self) -> int:
        """Client frames this session has read, on every attachment (`session.resumed` reports it)."""
        return self.attachments.client_events_received

    @property
    def last_seq(self) -> int:
        return self.attachments.last_seq

    async def run(self, *, autostart: bool, first: FirstMessage | None = None) -> None:
        """Serve the session until it ends: the client closes it, it expires, or the client is dropped
        (without resume, a lost socket ends it too). `first` is the first message when it was read already.
        """
        if autostart:
            await self._prepare_model(None)
            self._apply(self.engine.start(self.clock()))
        opening = self.attachments.current
        assert opening is not None
        self.attachments.start(opening, first)
        tasks = [self._stepper.start(self.task_failed), supervised(self._tick(), "ticker", self.task_failed)]
        try:
            await self._done.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.attachments.end()
            try:
                await self.model.aclose()
            except Exception:
                log.exception("session %s: model cleanup failed", self.engine.session_id)

    async def opening_closed(self) -> None:
        """Wait until the socket the session opened on is closed (`Attachments.opening_closed`)."""
        await self.attachments.opening_closed()

    async def shutdown(self, reason: str) -> None:
        """Close from the server side (e.g. SIGTERM): `session.closed{reason}` then the socket."""
        if not self._done.is_set():
            self._apply(self.engine.close(reason, self.clock()))

    async def resume(self, websocket: SessionSocket, event: ce.SessionResume, dialect: Dialect) -> None:
        """Attach `websocket` to this session and serve it until it ends (`Attachments.resume`)."""
        await self.attachments.resume(websocket, event, dialect)

    # --- what the attachment job hands the session (`attaching.AttachedSession`) ----------------------

    def handle(
        self, message: str | bytes | ce.ClientEventBase | ProtocolError
    ) -> tuple[ce.SessionUpdate, float] | None:
        """Apply one client message: a JSON socket's text frame is parsed here (with the session's input
        format, which an update before it may have changed); an in-process edge's event comes typed. This
        is the one dispatch on a client event's type. A `session.update` is returned with its arrival time
        instead: the model may have to prepare for it, which is asynchronous (`update`)."""
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
        self._read_event = True
        if isinstance(event, ce.InputAudioBufferAppend):
            if not self._over_input_limit(event):
                self._apply(self.engine.handle(event, now))
            return None
        if isinstance(event, ce.SessionUpdate):
            return event, now
        if isinstance(event, ce.SessionEventAck | ce.SessionResume):
            refusal = self.attachments.resume_event(event)
            if refusal is not None:
                self._apply(self.engine.protocol_error(refusal))
            return None
        self._apply(self.engine.handle(event, now))
        return None

    def refuse(self, error: ProtocolError) -> None:
        self._apply(self.engine.protocol_error(error))

    async def update(self, event: ce.SessionUpdate, now: float) -> None:
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

    @property
    def opened(self) -> bool:
        return self.engine.started and self._read_event

    def config_timed_out(self) -> None:
        now = self.clock()
        self._apply(self.engine.protocol_error(_config_timeout(self.limits.config_timeout_s)))
        self._apply(self.engine.close("config_timeout", now))

    def task_failed(self, name: str, exc: BaseException) -> None:
        """A task of this session raised (`server.supervision`): logged with the session id, counted
        (`duplexkit_task_failures_total{task}`), and the session ends with `internal_error` (close 1011),
        which frees its slot."""
        if isinstance(exc, EdgeTaskFailed):  # the edge's task, reported through the reader
            name = exc.task
        log.error("session %s: %s task failed", self.engine.session_id, name, exc_info=exc)
        self.metrics.task_failures.labels(task=name).inc()
        if self._done.is_set():
            return
        self.attachments.close_code = 1011
        error = ProtocolError(ErrorCode.INTERNAL_ERROR, f"the session's {name} failed: {type(exc).__name__}")
        try:
            self._apply(self.engine.protocol_error(error))
            self._apply(self.engine.close("internal_error", self.clock()))
        except Exception:  # the engine is what failed: end the session without its events
            log.exception("session %s: closing after a failed task failed too", self.engine.session_id)
        self._finish("internal_error")

    def end_without_client(self, reason: str) -> None:
        """End the session as any close does (a response in flight ends cancelled; the journal, if any,
        records it and `session.closed`), sending nothing: no event is owed to a client that is gone."""
        if not self.engine.closed and not self._done.is_set():
            self._apply(self.engine.close(reason, self.clock()), deliver=False)
        self._finish(reason)

    def expire(self, reason: ExpiryReason, now: float) -> None:
        self._apply(self.engine.close(reason, now))

    # --- the session's own work -----------------------------------------------------------------------

    def _refuse_opening(self) -> None:
        """The settings a session was to open with (`autostart=0`: `/api/chat`'s query, a call's offer, a
        client's first `session.update`) were refused: its coded error is out; the session ends, the
        socket closes with 1008 (policy) and the slot is free at once, never held by a session that
        cannot start."""
        self.attachments.close_code = 1008
        self._finish("opening_refused")

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
        """One tick: the engine hears the time (idle timeout, continuation); the lease reaper runs when due,
        attached or not (a detached session past its grace ends here). Returns in how many seconds the
        session next has time-based work due (the ticker calls it then, or when woken)."""
        if self._done.is_set():
            return math.inf
        try:
            return self._tick_once()
        except Exception as exc:  # the shared ticker goes on; this session ends
            self.task_failed("tick", exc)
            return math.inf

    def _tick_once(self) -> float:
        now = self.clock()
        self._stepper.check_deadline(now)
        self._apply(self.engine.tick(now))
        dues = [self.engine.next_tick_at()]
        decision_due = self._stepper.next_due()
        if decision_due is not None:
            dues.append(decision_due)
        reap_due = self.attachments.reap(now)
        if reap_due is not None:
            dues.append(reap_due)
        return min(dues) - now

    def _wake_ticker(self) -> None:
        """The engine's time-based work may be due sooner (a reply started, a shorter idle timeout)."""
        self.ticker.wake(self._tick_callback, self.engine.next_tick_at() - self.clock())

    # --- plumbing -------------------------------------------------------------------------------------

    def _apply(self, step: Step, *, deliver: bool = True) -> None:
        """Send the step's events in order (journal them only, `deliver=False`), queue its units, and act on
        an epoch change or a close."""
        if not (step.events or step.units or step.close_reason) and self.engine.fence.epoch == self._epoch:
            return  # most appends: input buffered, nothing to send, step or act on
        for event in step.events:
            if not sends(event.type, self.dialect):
                continue
            if type(event) is se.ResponseListen:  # one per unit: nothing to observe, tell or follow
                self._send(event, deliver)
                continue
            self._observe(event)
            self._tell_model_what_was_heard(event)
            if isinstance(event, se.SessionCreated):
                self.attachments.stamp_created(event)
            self._send(event, deliver)
            for follow_up in follow_ups(event, self.dialect):
                self._send(follow_up, deliver)
        for unit in step.units:
            self._stepper.submit(unit, self.clock())
        if self.engine.fence.epoch != self._epoch:
            self._epoch = self.engine.fence.epoch
            self.model.interrupt()
        if self.engine.active_response_id is not None:
            self._wake_ticker()
        if step.close_reason:
            self._finish(step.close_reason)
        elif deliver and self.attachments.backlog > self.limits.max_outbound_bytes:
            log.warning(
                "session %s: dropped, client is not reading (%d bytes queued)",
                self.engine.session_id,
                self.attachments.backlog,
            )
            self._finish("client_too_slow")

    def _send(self, event: se.ServerEventBase, deliver: bool) -> None:
        """Stamp one event; on a JSON session render it in the session's dialect (the attachment job
        journals the text when the session is resumable); hand it to the attachment, if any (`deliver`)."""
        self._stamper.stamp(event)
        seq = event.server_event_seq
        assert seq is not None
        message = event if self._renderer is None else self._renderer.render(event)
        self.attachments.send(seq, message, deliver=deliver)

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
        """Server metrics: TTFT/TTFP of each response, and every error sent (`se.reported_error`: an
        `error` event's or a failed response's)."""
        if isinstance(event, se.ResponseDone) and event.response_request_metrics is not None:
            m = event.response_request_metrics
            if m.ttft_ms is not None:
                self.metrics.ttft_seconds.observe(m.ttft_ms / 1000.0)
            if m.ttfp_ms is not None:
                self.metrics.ttfp_seconds.observe(m.ttfp_ms / 1000.0)
        error = se.reported_error(event)
        if error is not None:
            self.metrics.errors.labels(code=error.code.value).inc()

    def _finish(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason
            log.info("session %s: closing (%s)", self.engine.session_id, reason)
        self._done.set()


def configure_model(
    model: ModelSession, extra_body: Mapping[str, Any], event: ce.SessionUpdate
) -> ProtocolError | None:
    """Give the model the update's sampling, tools and `extra_body` (`extra_body`: the session's so far,
    kept when the update has none); what it refuses, as the update's coded error. A model that cannot
    call tools takes them too (`ModelCapabilities.function_calling` tells the client)."""
    update = event.session
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
    return ProtocolError(ErrorCode.CONFIG_TIMEOUT, f"the session was not opened within {timeout_s:g} s")
