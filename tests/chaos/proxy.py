"""An in-process TCP proxy that injects faults between a client and a server.

Each accepted connection takes the next `Fault` from the plan (none: a clean pipe). A fault acts on one
direction (`up`: client → server, `down`: server → client) and starts after `after_bytes` bytes, or at the
first occurrence of `marker` (a byte string such as an event type: server frames are unmasked, so their
JSON is visible on the wire). Kinds:

* `reset`: abort both sockets (an RST, no close frame), forwarding nothing past the trigger point;
* `half_close`: forward up to the trigger, then send EOF that way only; the other direction stays open;
* `stall`: stop reading that way (the sender's buffers fill; nothing more arrives) until the proxy closes;
* `delay`: hold every chunk that way for `delay_s` (from the trigger on).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

Direction = Literal["up", "down"]


@dataclass(frozen=True, slots=True)
class Fault:
    kind: Literal["reset", "half_close", "stall", "delay"]
    direction: Direction = "down"
    after_bytes: int | None = None
    marker: bytes | None = None
    occurrence: int = 1
    """With `marker`: trigger at its n-th occurrence."""
    delay_s: float = 0.0


@dataclass(slots=True)
class _Pipe:
    fault: Fault | None
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    triggered: asyncio.Event = field(default_factory=asyncio.Event)


class FaultProxy:
    """`async with FaultProxy(host, port) as proxy:` listens on `proxy.port`; `plan(...)` queues faults."""

    def __init__(self, host: str, port: int, *, upstream_rcvbuf: int | None = None) -> None:
        """`upstream_rcvbuf` fixes the receive buffer of the proxy's sockets to the server: a stalled
        direction then holds little in the kernel, so the server feels a stalled reader at once."""
        self.target = (host, port)
        self.upstream_rcvbuf = upstream_rcvbuf
        self.port = 0
        self.connections = 0
        self.triggered = 0
        """Connections whose fault fired."""
        self._plan: deque[Fault | None] = deque()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def plan(self, *faults: Fault | None) -> None:
        """The faults of the next connections, in order (`None`: a clean connection)."""
        self._plan.extend(faults)

    def url(self, path: str = "/v1/realtime") -> str:
        return f"ws://127.0.0.1:{self.port}{path}"

    async def __aenter__(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        pipe = _Pipe(self._plan.popleft() if self._plan else None, [client_w])
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if self.upstream_rcvbuf is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.upstream_rcvbuf)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, self.target)
            server_r, server_w = await asyncio.open_connection(sock=sock)
        except OSError:
            client_w.transport.abort()
            return
        pipe.writers.append(server_w)
        up = asyncio.create_task(self._pump(pipe, "up", client_r, server_w))
        down = asyncio.create_task(self._pump(pipe, "down", server_r, client_w))
        for task in (up, down):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        await asyncio.gather(up, down, return_exceptions=True)
        for writer in pipe.writers:
            writer.transport.abort()

    async def _pump(
        self, pipe: _Pipe, direction: Direction, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        fault = pipe.fault if pipe.fault is not None and pipe.fault.direction == direction else None
        seen = 0
        found = 0
        tail = b""
        active = False
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                    return
                if fault is not None and not active:
                    cut = None
                    if fault.after_bytes is not None and seen + len(chunk) >= fault.after_bytes:
                        cut = fault.after_bytes - seen
                    elif fault.marker is not None:
                        window = tail + chunk
                        start = 0
                        while (index := window.find(fault.marker, start)) >= 0:
                            found += 1
                            start = index + 1
                            if found == fault.occurrence:
                                cut = max(0, index - len(tail))
                                break
                        tail = window[-(len(fault.marker) - 1) :] if len(fault.marker) > 1 else b""
                    seen += len(chunk)
                    if cut is not None:
                        active = True
                        self.triggered += 1
                        pipe.triggered.set()
                        if fault.kind != "delay":
                            await self._act(pipe, fault, writer, chunk[:cut])
                            return
                if active and fault is not None and fault.kind == "delay":
                    await asyncio.sleep(fault.delay_s)
                writer.write(chunk)
                await writer.drain()
        except (OSError, ConnectionError):
            for w in pipe.writers:
                w.transport.abort()

    @staticmethod
    async def _act(pipe: _Pipe, fault: Fault, writer: asyncio.StreamWriter, prefix: bytes) -> None:
        """Forward `prefix` (what precedes the trigger), then break this direction as `fault` says."""
        writer.write(prefix)
        with contextlib.suppress(OSError, ConnectionError):
            await writer.drain()
        if fault.kind == "reset":
            for w in pipe.writers:
                w.transport.abort()
            return
        if fault.kind == "half_close":
            with contextlib.suppress(OSError):
                writer.write_eof()
        await asyncio.Event().wait()  # stalled, or half-closed: this direction carries nothing more
