"""Small scripted WebSocket servers for client tests: each records every frame it reads, in wire order."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

SERVER_METRICS = "server_monotonic_request_start"


def pcm16_silence_b64(ms: float, rate: int = 24_000) -> str:
    return base64.b64encode(bytes(2 * round(ms * rate / 1000))).decode()


class FakeSession:
    """One connection as the handler sees it."""

    def __init__(self, server: FakeServer, ws: ServerConnection) -> None:
        self.server = server
        self.ws = ws

    async def recv(self) -> dict[str, Any]:
        """The next frame (recorded on the server, audio replaced by its base64 length)."""
        frame: dict[str, Any] = json.loads(await self.ws.recv())
        if isinstance(frame.get("audio"), str):
            frame["audio"] = len(frame["audio"])
        self.server.frames.append(frame)
        return frame

    async def until(self, event_type: str) -> dict[str, Any]:
        while True:
            frame = await self.recv()
            if frame["type"] == event_type:
                return frame

    async def send(self, event_type: str, **fields: Any) -> None:
        await self.ws.send(json.dumps({"type": event_type, **fields}))

    async def handshake(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        """Wait for `session.update`, answer `session.created` then `session.updated`; return the update."""
        update = await self.until("session.update")
        session: dict[str, Any] = {"id": "sess_fake", "model": "fake"}
        if capabilities is not None:
            session["capabilities"] = capabilities
        await self.send("session.created", session=session)
        await self.send("session.updated", session=session)
        return update

    async def serve_until_close(
        self, on_frame: Callable[[dict[str, Any]], Awaitable[None]] | None = None
    ) -> None:
        """Read frames (handing each to `on_frame`) until `session.close`, then answer `session.closed`."""
        while True:
            frame = await self.recv()
            if frame["type"] == "session.close":
                await self.send("session.closed", session_id="sess_fake", reason="client_close")
                return
            if on_frame is not None:
                await on_frame(frame)

    async def reply(self, *, metrics: str | None, text: str = "Hi there.", audio_ms: float = 100.0) -> None:
        """One response: created, an audio delta and a transcript delta, done.

        `metrics`: None (none sent), "ours" (top level) or "vllm" (vLLM-Omni's placements).
        """
        m = {"source": SERVER_METRICS, "ttft_ms": 150.0, "ttfp_ms": 180.0}
        created: dict[str, Any] = {"response": {"id": "resp_1", "status": "in_progress"}}
        delta: dict[str, Any] = {
            "response_id": "resp_1",
            "item_id": "item_1",
            "delta": pcm16_silence_b64(audio_ms),
            "sample_rate_hz": 24_000,
        }
        done: dict[str, Any] = {"response": {"id": "resp_1", "status": "completed"}}
        if metrics == "ours":
            created["response_request_metrics"] = m
            delta["response_request_metrics"] = m
            done["response_request_metrics"] = {**m, "tpot_ms": 25.0}
        elif metrics == "vllm":
            created["response"]["metadata"] = {"duplex_event": {"response_request_metrics": m}}
            delta["metadata"] = {"vllm_omni": {"response_request_metrics": m}}
        await self.send("response.created", **created)
        await asyncio.sleep(0.05)
        await self.send("response.output_audio.delta", **delta)
        await self.send(
            "response.output_audio_transcript.delta", response_id="resp_1", item_id="item_1", delta=text
        )
        await self.send("response.done", **done)


Handler = Callable[[FakeSession], Awaitable[None]]


class FakeServer:
    """`async with FakeServer(handler) as server:` serves on a free loopback port; `server.frames` holds
    every frame the handlers read, `server.requests` the handshake requests (path, headers)."""

    def __init__(self, handler: Handler, *, receive_buffer: int | None = None, **serve_kwargs: Any) -> None:
        self.handler = handler
        self.frames: list[dict[str, Any]] = []
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._receive_buffer = receive_buffer
        self._serve_kwargs = {"max_size": None, "ping_interval": None, "compression": None, **serve_kwargs}
        self._server: Server | None = None
        self.url = ""

    async def __aenter__(self) -> FakeServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if self._receive_buffer is not None:  # inherited by accepted sockets: a small window fills fast
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer)
        sock.bind(("127.0.0.1", 0))
        self._server = await serve(self._handle, sock=sock, **self._serve_kwargs)
        self.url = f"ws://127.0.0.1:{sock.getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        self.requests.append((ws.request.path, dict(ws.request.headers)))
        with contextlib.suppress(ConnectionClosed):
            await self.handler(FakeSession(self, ws))

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["type"] == event_type]

    def types(self) -> list[str]:
        return [f["type"] for f in self.frames]
