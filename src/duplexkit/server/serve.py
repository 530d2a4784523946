"""Running the server: in the foreground with a SIGTERM drain, or embedded in a running event loop.

SIGTERM (or Ctrl-C) first stops admission and closes every live session with
`session.closed{reason: server_shutdown}`, then stops uvicorn; the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from types import FrameType

import uvicorn

from duplexkit.models import ModelPlugin
from duplexkit.server.app import DuplexServer, ServerConfig
from duplexkit.server.runner import RunnerLimits

_WS_MAX_SIZE = 2 * RunnerLimits().max_event_bytes
"""uvicorn's frame cap sits above ours: an oversized event gets `event_too_large`, not a dropped socket."""


class _DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, duplex: DuplexServer, *, own_signals: bool) -> None:
        super().__init__(config)
        self.duplex = duplex
        self._own_signals = own_signals
        self._draining: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Only the foreground server takes over the process's signals; an embedded one leaves them be."""
        if self._own_signals:
            with super().capture_signals():
                yield
        else:
            yield

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._draining is not None or not self.started:
            self.should_exit = True
            return
        loop = asyncio.get_event_loop()
        self._draining = loop.create_task(self.drain())

    async def drain(self) -> None:
        await self.duplex.manager.shutdown()
        self.should_exit = True


def uvicorn_config(duplex: DuplexServer, *, log_level: str) -> uvicorn.Config:
    """How every duplexkit server runs under uvicorn (sans-I/O websockets, our frame cap, no pings)."""
    return uvicorn.Config(
        duplex.app,
        log_level=log_level,
        ws="websockets-sansio",
        ws_max_size=_WS_MAX_SIZE,
        ws_ping_interval=None,
        ws_per_message_deflate=duplex.config.ws_compression,
        lifespan="off",
    )


def run_server(duplex: DuplexServer, *, host: str, port: int, log_level: str = "info") -> None:
    """Serve until SIGTERM/SIGINT, then drain."""
    config = uvicorn_config(duplex, log_level=log_level)
    config.host, config.port = host, port
    _DrainingServer(config, duplex, own_signals=True).run()


class EmbeddedServer:
    """A server on an ephemeral loopback port inside the current event loop (tests, `talk`, `bench`)."""

    def __init__(
        self, plugin: ModelPlugin, config: ServerConfig | None = None, *, log_level: str = "warning"
    ):
        self.duplex = DuplexServer(plugin, config)
        self._log_level = log_level
        self._server: _DrainingServer | None = None
        self._task: asyncio.Task[None] | None = None
        self.url = ""

    async def __aenter__(self) -> EmbeddedServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        host, port = sock.getsockname()
        self.url = f"ws://{host}:{port}/v1/realtime"
        self._server = _DrainingServer(
            uvicorn_config(self.duplex, log_level=self._log_level), self.duplex, own_signals=False
        )
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                await self._task
                raise RuntimeError("embedded server failed to start")
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None and self._task is not None
        await self._server.drain()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self._task, 10)

    @property
    def moshi_url(self) -> str:
        """The Moshi protocol endpoint, `/api/chat`."""
        return self.url.removesuffix("/v1/realtime") + "/api/chat"

    @property
    def http_url(self) -> str:
        return self.url.replace("ws://", "http://", 1).removesuffix("/v1/realtime")
