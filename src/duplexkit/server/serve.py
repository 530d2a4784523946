"""Running the server on an edge: in the foreground with a SIGTERM drain, or embedded in a running loop.

`EDGES` names the I/O edges: `picows` (the default: the least CPU per frame), `websockets` (the one with
permessage-deflate, served when compression is asked for) and `asgi` (the Starlette app under uvicorn;
`edge_for` holds the rule). SIGTERM (or Ctrl-C) first stops admission and closes every live session with
`session.closed{reason: server_shutdown}`, then stops the edge; the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import socket
from collections.abc import Awaitable, Callable
from typing import Literal, Protocol

from duplexkit.models import ModelPlugin
from duplexkit.server.service import DuplexServer, ServerConfig

Edge = Literal["picows", "websockets", "asgi"]
EDGES: tuple[Edge, ...] = ("picows", "websockets", "asgi")


def edge_for(edge: Edge | None, *, ws_compression: bool) -> Edge:
    """The edge to serve on: `edge` when one was asked for, else `picows`, or `websockets` when
    `ws_compression` is on (picows has no permessage-deflate). `ValueError` for picows with compression."""
    if edge is None:
        return "websockets" if ws_compression else "picows"
    if edge == "picows" and ws_compression:
        raise ValueError(
            "the picows edge has no permessage-deflate: drop --ws-compression or name another edge"
        )
    return edge


GC_YOUNG_THRESHOLD = 10_000
"""Net new tracked objects between young collections (CPython's default: 700)."""


def settle_gc() -> None:
    """Set the garbage collector up for serving, once start-up is done.

    A collection pauses every session's units at once, and a server near its CPU budget takes long to
    work off the backlog after a pause: this is what the latency tail under load is made of. So what
    start-up built (modules, schemas, the model), which lives as long as the process, is frozen: a full
    collection no longer walks it (500 sessions of 80 ms units in `benchmarks/runner_path.py`'s process:
    the longest pause 59-62 → 38-46 ms). And the young generation's threshold is raised: at CPython's 700
    net allocations, the objects each unit has in flight (its unit, futures, the model's step) set off
    about one young collection per 500 units, whose survivors are promoted until a full collection of
    every session's objects is due (at 500 sessions of 80 ms units, every few seconds, 40-60 ms each).
    Per-unit work frees what it allocates, so at `GC_YOUNG_THRESHOLD` steady serving sets off none
    (`runner_path.py --gc`); a growing heap (sessions joining) still does, and cycles are still collected.
    """
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD)


class RunningEdge(Protocol):
    async def stop(self) -> None: ...


async def start_edge(edge: Edge, duplex: DuplexServer, sock: socket.socket, *, log_level: str) -> RunningEdge:
    """Serve `duplex` on the bound `sock` with `edge` (its framework is imported only when chosen)."""
    start: Callable[..., Awaitable[RunningEdge]]
    if edge == "asgi":
        from duplexkit.server.asgi.serve import AsgiEdge

        start = AsgiEdge.start
    elif edge == "websockets":
        from duplexkit.server.websockets import WebSocketsEdge

        start = WebSocketsEdge.start
    else:
        from duplexkit.server.picows import PicowsEdge

        start = PicowsEdge.start
    return await start(duplex, sock, log_level=log_level)


def bind(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket on `host`:`port` (IPv6 when `host` is an IPv6 address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    return sock


def run_server(
    duplex: DuplexServer, *, host: str, port: int, log_level: str = "info", edge: Edge | None = None
) -> None:
    """Serve until SIGTERM/SIGINT, then drain; on uvloop when it is installed (as uvicorn would). `edge`:
    see `edge_for`."""
    edge = edge_for(edge, ws_compression=duplex.config.ws_compression)
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve_until_signalled(duplex, bind(host, port), log_level, edge))
    else:
        uvloop.run(_serve_until_signalled(duplex, bind(host, port), log_level, edge))


async def _serve_until_signalled(
    duplex: DuplexServer, sock: socket.socket, log_level: str, edge: Edge
) -> None:
    running = await start_edge(edge, duplex, sock, log_level=log_level)
    settle_gc()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    for signum in (signal.SIGTERM, signal.SIGINT):  # a second signal ends the process without a drain
        loop.remove_signal_handler(signum)
    await duplex.drain()
    await running.stop()


class EmbeddedServer:
    """A server on an ephemeral loopback port inside the current event loop (tests, `talk`, `bench`)."""

    def __init__(
        self,
        plugin: ModelPlugin,
        config: ServerConfig | None = None,
        *,
        log_level: str = "warning",
        edge: Edge | None = None,
    ):
        self.duplex = DuplexServer(plugin, config)
        self.edge = edge_for(edge, ws_compression=self.duplex.config.ws_compression)
        self._log_level = log_level
        self._running: RunningEdge | None = None
        self.url = ""

    async def __aenter__(self) -> EmbeddedServer:
        sock = bind("127.0.0.1", 0)
        host, port = sock.getsockname()
        self.url = f"ws://{host}:{port}/v1/realtime"
        self._running = await start_edge(self.edge, self.duplex, sock, log_level=self._log_level)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._running is not None
        await self.duplex.drain()
        with contextlib.suppress(asyncio.CancelledError):
            await self._running.stop()

    @property
    def moshi_url(self) -> str:
        """The Moshi protocol endpoint, `/api/chat`."""
        return self.url.removesuffix("/v1/realtime") + "/api/chat"

    @property
    def http_url(self) -> str:
        return self.url.replace("ws://", "http://", 1).removesuffix("/v1/realtime")
