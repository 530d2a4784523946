"""A Twilio Media Streams peer: what Twilio does on a `<Connect><Stream>` (bidirectional) call, written from
Twilio's documented messages ("Media Streams - WebSocket Messages"; the field lists Fonoster's Twilio
compatibility reference repeats), not from the server's code.

Twilio sends `connected`, `start` (streamSid, callSid, accountSid, tracks, mediaFormat audio/x-mulaw 8000 Hz
mono, customParameters), then a `media` message every 20 ms (160 bytes of mu-law, base64, with `chunk` and
`timestamp` as strings, `sequenceNumber` counting every message), `dtmf` for key presses and `stop` at the
end. While the call lasts the line streams without a break: silence when the caller says nothing. From the
server it accepts only `media`, `mark` and `clear` carrying the stream's `streamSid` (anything
else is warning 31951: recorded here in `violations`). It plays the server's media in order in real time;
a mark is echoed once the audio sent before it has played; `clear` drops the audio not yet played and
echoes the marks that were waiting behind it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import httpx
import websockets

from duplexkit.server import EmbeddedServer

FRAME_BYTES = 160  # 20 ms of 8 kHz mu-law
FRAME_S = 0.02


@dataclass
class Played:
    """What the peer received and did, for the test to read."""

    audio: bytearray = field(default_factory=bytearray)
    """Every byte of reply audio received, in order."""
    played: bytearray = field(default_factory=bytearray)
    """What actually played (cleared audio never does)."""
    sequence: list[str] = field(default_factory=list)
    """The events received, in order (`media`, `mark`, `clear`)."""
    echoed: list[str] = field(default_factory=list)
    clears: int = 0
    violations: list[str] = field(default_factory=list)


class TwilioPeer:
    def __init__(self, ws: websockets.ClientConnection, *, stream_sid: str = "MZ0123456789abcdef") -> None:
        self.ws = ws
        self.stream_sid = stream_sid
        self.call_sid = "CA0123456789abcdef"
        self.account_sid = "AC0123456789abcdef"
        self.result = Played()
        self._sequence = 0
        self._chunk = 0
        self._timestamp_ms = 0
        self._queue: deque[bytes | str] = deque()  # audio frames and mark names, in arrival order
        self._outgoing: deque[tuple[bytes, str | None]] = deque()  # the caller's frames (and bad payloads)
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def connect(cls, url: str, **kwargs: Any) -> TwilioPeer:
        return cls(await websockets.connect(url, max_size=None, **kwargs))

    async def open(
        self, custom: dict[str, str] | None = None, media_format: dict[str, Any] | None = None
    ) -> None:
        await self._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self._send(
            {
                "event": "start",
                "sequenceNumber": self._next(),
                "start": {
                    "accountSid": self.account_sid,
                    "streamSid": self.stream_sid,
                    "callSid": self.call_sid,
                    "tracks": ["inbound"],
                    "mediaFormat": media_format
                    or {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                    "customParameters": custom or {},
                },
                "streamSid": self.stream_sid,
            },
            numbered=False,
        )
        self._tasks = [
            asyncio.create_task(self._read()),
            asyncio.create_task(self._play()),
            asyncio.create_task(self._line()),
        ]

    async def say(self, mulaw: bytes) -> None:
        """Put `mulaw` on the line (20 ms media messages in real time) and wait until it has all gone."""
        for offset in range(0, len(mulaw), FRAME_BYTES):
            self._outgoing.append((mulaw[offset : offset + FRAME_BYTES], None))
        while True:
            if not self._outgoing:
                return
            await asyncio.sleep(FRAME_S)

    def garble_next(self, payload: str) -> None:
        """The next 20 ms frame goes out with `payload` as its base64 (a bad one); its time still passes."""
        self._outgoing.appendleft((b"\xff" * FRAME_BYTES, payload))

    async def _line(self) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        index = 0
        while True:
            frame, payload = self._outgoing.popleft() if self._outgoing else (b"\xff" * FRAME_BYTES, None)
            await self.media(frame, payload=payload)
            index += 1
            await asyncio.sleep(max(0.0, start + index * FRAME_S - loop.time()))

    async def media(self, frame: bytes, *, payload: str | None = None) -> None:
        """One media message; `payload` overrides the base64 (to send a bad one): its 20 ms still pass."""
        self._chunk += 1
        await self._send(
            {
                "event": "media",
                "sequenceNumber": self._next(),
                "media": {
                    "track": "inbound",
                    "chunk": str(self._chunk),
                    "timestamp": str(self._timestamp_ms),
                    "payload": base64.b64encode(frame).decode() if payload is None else payload,
                },
                "streamSid": self.stream_sid,
            },
            numbered=False,
        )
        self._timestamp_ms += len(frame) * 1000 // 8000

    async def send_raw(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(message))

    async def stop(self) -> None:
        stop = {"accountSid": self.account_sid, "callSid": self.call_sid}
        await self._send({"event": "stop", "streamSid": self.stream_sid, "stop": stop})
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.ws.close()

    async def wait_for(self, predicate: Any, timeout: float) -> None:  # noqa: ASYNC109
        async with asyncio.timeout(timeout):
            while True:
                if predicate(self.result):
                    return
                await asyncio.sleep(0.02)

    @property
    def pending(self) -> int:
        """Frames and marks waiting to play."""
        return len(self._queue)

    # --- internals ------------------------------------------------------------------------------------

    def _next(self) -> str:
        self._sequence += 1
        return str(self._sequence)

    async def _send(self, message: dict[str, Any], *, numbered: bool = True) -> None:
        if numbered and "sequenceNumber" not in message and message["event"] != "connected":
            message = {**message, "sequenceNumber": self._next()}
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.ws.send(json.dumps(message))

    async def _read(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for raw in self.ws:
                if not isinstance(raw, str):
                    self.result.violations.append("binary message (31950)")
                    continue
                message = json.loads(raw)
                event = message.get("event")
                self.result.sequence.append(str(event))
                if event not in ("media", "mark", "clear") or message.get("streamSid") != self.stream_sid:
                    self.result.violations.append(raw)
                elif event == "media":
                    frame = base64.b64decode(message["media"]["payload"])
                    self.result.audio += frame
                    for offset in range(0, len(frame), FRAME_BYTES):
                        self._queue.append(frame[offset : offset + FRAME_BYTES])
                elif event == "mark":
                    self._queue.append(str(message["mark"]["name"]))
                else:
                    self.result.clears += 1
                    marks = [item for item in self._queue if isinstance(item, str)]
                    self._queue.clear()
                    for name in marks:  # cleared audio never plays; its marks come back at once
                        await self._echo(name)

    async def _play(self) -> None:
        """Play queued audio in real time, echoing each mark when the audio before it has played."""
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            while self._queue and isinstance(self._queue[0], str):
                await self._echo(str(self._queue.popleft()))
            if self._queue:
                frame = self._queue.popleft()
                assert isinstance(frame, bytes)
                self.result.played += frame
                next_at = max(next_at, loop.time()) + len(frame) / 8000
            else:
                next_at = loop.time() + FRAME_S
            await asyncio.sleep(max(0.0, next_at - loop.time()))

    async def _echo(self, name: str) -> None:
        self.result.echoed.append(name)
        await self._send({"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}})


# --- what a test reads of the server it calls ------------------------------------------------------


def stream_url(server: EmbeddedServer) -> str:
    return server.url.removesuffix("/v1/realtime") + "/v1/twilio/stream"


async def health(server: EmbeddedServer) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        return dict((await http.get(f"{server.http_url}/healthz")).json())


async def error_counts(server: EmbeddedServer) -> dict[str, float]:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"{server.http_url}/metrics")).text
    counts = {}
    for line in text.splitlines():
        if line.startswith("duplexkit_errors_total{"):
            code = line.split('code="')[1].split('"')[0]
            counts[code] = float(line.rsplit(" ", 1)[1])
    return counts


async def slot_freed(server: EmbeddedServer) -> None:
    async with asyncio.timeout(10):
        while True:
            if not (await health(server))["sessions"]:
                return
            await asyncio.sleep(0.05)
