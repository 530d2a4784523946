"""uvicorn running the ASGI app on a socket, inside the caller's event loop (signals stay the caller's)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn

from duplexkit.server.asgi.app import asgi_app
from duplexkit.server.edge import QUIET_PATHS
from duplexkit.server.service import WS_MAX_FRAME_BYTES, DuplexServer


class _Uvicorn(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Leave the process's signals be: whoever runs the edge drains on SIGTERM (`server.serve`)."""
        yield


class _QuietPathsAtDebug(logging.Filter):
    """uvicorn's access line for a `QUIET_PATHS` request, at DEBUG (kept only when DEBUG is on)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not (isinstance(args, tuple) and len(args) > 2 and str(args[2]).partition("?")[0] in QUIET_PATHS):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return _ACCESS.isEnabledFor(logging.DEBUG)


_ACCESS = logging.getLogger("uvicorn.access")
_ACCESS.addFilter(_QuietPathsAtDebug())


class AsgiEdge:
    """The ASGI app under uvicorn (sans-I/O websockets, the core's frame cap, no pings) on `sock`."""

    def __init__(self, server: _Uvicorn, task: asyncio.Task[None]) -> None:
        self._server = server
        self._task = task

    @classmethod
    async def start(cls, duplex: DuplexServer, sock: socket.socket, *, log_level: str) -> AsgiEdge:
        config = uvicorn.Config(
            asgi_app(duplex),
            log_level=log_level,
            ws="websockets-sansio",
            ws_max_size=WS_MAX_FRAME_BYTES,
            ws_ping_interval=None,
            ws_per_message_deflate=duplex.config.ws_compression,
            lifespan="off",
        )
        server = _Uvicorn(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if task.done():
                await task
                raise RuntimeError("uvicorn failed to start")
            await asyncio.sleep(0.01)
        return cls(server, task)

    async def stop(self) -> None:
        """Stop accepting and close what is left (the caller has drained the sessions already)."""
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self._task, 10)
