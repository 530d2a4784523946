"""One session's runner: the I/O edge around the Sans-I/O engine.

Four tasks per connection: the reader parses frames and feeds the engine; the stepper runs the model on
units, in order, off the event loop's critical path; the ticker feeds the passage of time; the writer sends
events in order. The outbound queue is bounded in bytes: a client that stops reading is dropped with a
logged reason instead of making the server buffer without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.websockets import WebSocketDisconnect

from duplexkit import vad
from duplexkit.engine import EngineSession, Step, Unit
from duplexkit.models import ModelSession
from duplexkit.protocol import client_events as ce
from duplexkit.protocol import server_events as se
from duplexkit.protocol.dialects import Dialect, follow_ups
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.protocol.wire import MAX_EVENT_BYTES, ServerEventStamper, parse_client_event
from duplexkit.server.metrics import ServerMetrics

log = logging.getLogger("duplexkit.server")


class SessionSocket(Protocol):
    """What the runner needs of its connection: a Starlette `WebSocket`, or a protocol edge standing in
    front of one (`server.moshi.MoshiSocket`)."""

    async def receive(self) -> Any: ...

    async def send_text(self, data: str) -> None: ...

    async def close(self, code: int = 1000) -> None: ...


@dataclass(frozen=True, slots=True)
class RunnerLimits:
    config_timeout_s: float = 10.0
    max_event_bytes: int = MAX_EVENT_BYTES
    max_pending_input_bytes: int = 16 * 1024 * 1024
    max_outbound_bytes: int = 32 * 1024 * 1024
    tick_s: float = 0.1
    close_timeout_s: float = 2.0


class SessionRunner:
    def __init__(
        self,
        websocket: SessionSocket,
        engine: EngineSession,
        model: ModelSession,
        metrics: ServerMetrics,
        limits: RunnerLimits,
        clock: Callable[[], float] = time.monotonic,
        dialect: Dialect = Dialect.GA,
    ) -> None:
        self.ws = websocket
        self.engine = engine
        self.model = model
        self.metrics = metrics
        self.limits = limits
        self.clock = clock
        self.dialect = dialect
        self._stamper = ServerEventStamper(dialect)
        self._outbound: asyncio.Queue[str | None] = asyncio.Queue()
        self._outbound_bytes = 0
        self._units: asyncio.Queue[Unit] = asyncio.Queue()
        self._pending_input_bytes = 0
        self._epoch = engine.fence.epoch
        self._vad: vad.VoiceActivityDetector | None = None
        self._vad_config: ce.TurnDetection | None = None
        self._done = asyncio.Event()
        self.close_reason: str | None = None

    async def run(self, *, autostart: bool) -> None:
        """Serve the connection until the client closes, the session ends, or the client is dropped."""
        if autostart:
            self._apply(self.engine.start(self.clock()))
        tasks = [
            asyncio.create_task(self._read(), name="reader"),
            asyncio.create_task(self._step_units(), name="stepper"),
            asyncio.create_task(self._tick(), name="ticker"),
            asyncio.create_task(self._write(), name="writer"),
        ]
        try:
            await self._done.wait()
        finally:
            for task in tasks[:3]:
                task.cancel()
            await asyncio.gather(*tasks[:3], return_exceptions=True)
            self._outbound.put_nowait(None)  # the writer flushes what is queued, then stops
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(tasks[3]), self.limits.close_timeout_s)
            tasks[3].cancel()
            await asyncio.gather(tasks[3], return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.ws.close(1000), self.limits.close_timeout_s)
            try:
                await self.model.aclose()
            except Exception:
                log.exception("session %s: model cleanup failed", self.engine.session_id)

    async def shutdown(self, reason: str) -> None:
        """Close from the server side (e.g. SIGTERM): `session.closed{reason}` then the socket."""
        if not self._done.is_set():
            self._apply(self.engine.close(reason, self.clock()))

    # --- tasks ----------------------------------------------------------------------------------------

    async def _read(self) -> None:
        """Read frames until the client goes; the first must come within `config_timeout_s`."""
        first = True
        try:
            while not self._done.is_set():
                if first:
                    try:
                        message = await asyncio.wait_for(self.ws.receive(), self.limits.config_timeout_s)
                    except TimeoutError:
                        now = self.clock()
                        self._apply(self.engine.protocol_error(_config_timeout(self.limits.config_timeout_s)))
                        self._apply(self.engine.close("config_timeout", now))
                        return
                    first = False
                else:
                    message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    self._finish("client_disconnected")
                    return
                data = message.get("text") if message.get("text") is not None else message.get("bytes")
                if data is None:
                    continue
                self._handle_frame(data)
        except (WebSocketDisconnect, RuntimeError, OSError):
            self._finish("client_disconnected")

    def _handle_frame(self, data: str | bytes) -> None:
        now = self.clock()
        try:
            event = parse_client_event(
                data,
                input_audio_format=self.engine.settings.input_audio_format,
                max_bytes=self.limits.max_event_bytes,
                dialect=self.dialect,
            )
        except ProtocolError as exc:
            self._apply(self.engine.protocol_error(exc))
            return
        if isinstance(event, ce.InputAudioBufferAppend) and self._over_input_limit(event):
            return
        if not isinstance(event, ce.SessionUpdate):
            self._apply(self.engine.handle(event, now))
            return
        previous = (self.model.sampling, dict(self.engine.settings.extra_body))
        if not self._configure_model(event):
            return
        step = self.engine.handle(event, now)
        if any(isinstance(e, se.Error) for e in step.events):  # the engine refused it: undo the model's part
            self.model.configure(*previous)
        self._apply(step)

    def _over_input_limit(self, event: ce.InputAudioBufferAppend) -> bool:
        if self._pending_input_bytes + event.samples.nbytes <= self.limits.max_pending_input_bytes:
            return False
        self._apply(
            self.engine.protocol_error(
                ProtocolError(
                    ErrorCode.INPUT_BACKPRESSURE,
                    f"{self._pending_input_bytes} bytes of input await the model; this append was dropped",
                    event_id=event.event_id,
                )
            )
        )
        return True

    def _configure_model(self, event: ce.SessionUpdate) -> bool:
        update = event.session
        sampling = self.model.sampling.with_overrides(
            temperature=update.temperature, max_tokens=update.max_tokens, instructions=update.instructions
        )
        try:
            extra = self.engine.settings.extra_body if update.extra_body is None else update.extra_body
            self.model.configure(sampling, extra)
        except ValueError as exc:
            self._apply(
                self.engine.protocol_error(
                    ProtocolError(
                        ErrorCode.INVALID_VALUE,
                        f"session.extra_body: {exc}",
                        param="session.extra_body",
                        event_id=event.event_id,
                    )
                )
            )
            return False
        return True

    async def _step_units(self) -> None:
        while True:
            unit = await self._units.get()
            self._pending_input_bytes -= unit.samples.nbytes
            started = self.clock()
            # A unit of an older epoch is still stepped (the model must hear all the input); the engine
            # drops whatever it decides.
            if not unit.continuation:
                try:
                    await self._detect_speech(unit)
                except Exception as exc:  # the session goes on without server VAD, and says so
                    log.exception("session %s: server VAD failed", self.engine.session_id)
                    self._apply(self.engine.vad_failed(f"{type(exc).__name__}: {exc}"))
                    self._vad = self._vad_config = None
            self.engine.request_started(unit, started)
            try:
                async for decision in self.model.step(unit, started):
                    self._apply(self.engine.on_decision(unit, decision, self.clock()))
                    if not self.engine.fence.admits(unit.fence):
                        break
            except Exception as exc:
                log.exception("session %s: model step failed on unit %d", self.engine.session_id, unit.index)
                self._apply(self.engine.on_step_failed(unit, f"{type(exc).__name__}: {exc}", self.clock()))
            finished = self.clock()
            self.engine.step_finished(unit, finished)
            self.metrics.unit_step_seconds.observe(finished - started)

    async def _detect_speech(self, unit: Unit) -> None:
        """Server VAD (`turn_detection: server_vad` or `semantic_vad`): run the detector on the unit, off the
        event loop."""
        config = self.engine.settings.turn_detection
        if config is None:
            self._vad = self._vad_config = None
            return
        if self._vad is None or config != self._vad_config:
            self._vad = await asyncio.to_thread(vad.detector_for, config)
            self._vad_config = config
        for change in await asyncio.to_thread(self._vad.feed, unit.samples, unit.start_ms):
            now = self.clock()
            if isinstance(change, vad.SpeechStarted):
                self._apply(self.engine.speech_started(change.audio_start_ms, now))
            else:
                self._apply(self.engine.speech_stopped(change.audio_end_ms, now))

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.limits.tick_s)
            self._apply(self.engine.tick(self.clock()))

    async def _write(self) -> None:
        while True:
            text = await self._outbound.get()
            if text is None:
                return
            self._outbound_bytes -= len(text)
            await self.ws.send_text(text)

    # --- plumbing -------------------------------------------------------------------------------------

    def _apply(self, step: Step) -> None:
        """Send the step's events in order, queue its units, and act on an epoch change or a close."""
        for event in step.events:
            self._observe(event)
            self._tell_model_what_was_heard(event)
            for sent in (event, *follow_ups(event, self.dialect)):
                text = self._stamper.encode(sent)
                self._outbound_bytes += len(text)
                self._outbound.put_nowait(text)
        for unit in step.units:
            self._pending_input_bytes += unit.samples.nbytes
            self._units.put_nowait(unit)
        if self.engine.fence.epoch != self._epoch:
            self._epoch = self.engine.fence.epoch
            self.model.interrupt()
        if step.close_reason:
            self._finish(step.close_reason)
        elif self._outbound_bytes > self.limits.max_outbound_bytes:
            log.warning(
                "session %s: dropped, client is not reading (%d bytes queued)",
                self.engine.session_id,
                self._outbound_bytes,
            )
            self._finish("client_too_slow")

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


def _config_timeout(timeout_s: float) -> ProtocolError:
    return ProtocolError(ErrorCode.CONFIG_TIMEOUT, f"no session.update within {timeout_s:g} s")
