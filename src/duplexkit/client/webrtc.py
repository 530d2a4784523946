"""The client's WebRTC transport edge (aiortc, the `webrtc` extra): a call to a server's
`POST /v1/realtime/calls`, used by `DuplexClient` where it would open a WebSocket.

`CallConnection` carries the two kinds of message the `webrtc` protocol adapter speaks: text is a JSON
event on the `oai-events` data channel, binary is PCM16 mono at 48 kHz. Sent binary messages are the
microphone: `MicTrack` sends them 20 ms at a time, each frame stamped with its place on the client's media
clock (the RTP timestamps count the samples sent, so the server's clock is the client's) and never before
that place has happened on the wall clock since the first frame (real time; audio queued late goes at
once). Received messages are the channel's events and the server's track, one 20 ms frame per message.
The call ends like a WebSocket (`ConnectionClosed` from `send`, the iteration stops) when the channel
closes or the peer connection fails or closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import time
from collections.abc import AsyncIterator, Mapping

import httpx
import numpy as np
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCDataChannel,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK, InvalidStatus
from websockets.http11 import Response

from duplexkit.client.protocols.base import Wire

RATE_HZ = 48_000
FRAME_SAMPLES = 960
EVENTS_CHANNEL = "oai-events"
_TIME_BASE = fractions.Fraction(1, RATE_HZ)


class MicTrack(MediaStreamTrack):
    """The microphone: queued PCM16 48 kHz samples, 20 ms per frame on the media clock (see the module
    doc). `recv` waits for a whole frame; audio never runs ahead of the wall clock."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._queued = bytearray()
        self._more = asyncio.Event()
        self._pts = 0
        self._start: float | None = None

    def feed(self, pcm: bytes) -> None:
        self._queued += pcm
        self._more.set()

    async def recv(self) -> AudioFrame:
        while len(self._queued) < 2 * FRAME_SAMPLES:
            self._more.clear()
            await self._more.wait()
        if self._start is None:
            self._start = time.monotonic() - self._pts / RATE_HZ
        wait = self._start + self._pts / RATE_HZ - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        pcm = np.frombuffer(bytes(self._queued[: 2 * FRAME_SAMPLES]), "<i2").reshape(1, -1)
        del self._queued[: 2 * FRAME_SAMPLES]
        frame = AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
        frame.sample_rate = RATE_HZ
        frame.pts = self._pts
        frame.time_base = _TIME_BASE
        self._pts += FRAME_SAMPLES
        return frame


class CallConnection:
    """One call as the client's connection (see the module doc). Made by `open_call`."""

    def __init__(self, pc: RTCPeerConnection, channel: RTCDataChannel, mic: MicTrack) -> None:
        self._pc = pc
        self._channel = channel
        self._mic = mic
        self._inbound: asyncio.Queue[Wire | None] = asyncio.Queue()
        self._listener: asyncio.Task[None] | None = None
        self.close_code: int | None = None
        """1000 once the call ended cleanly (this side closed it), 1006 when it was lost."""
        channel.on("message", self._on_message)
        channel.on("close", lambda: self._ended(1006))
        pc.on("connectionstatechange", self._on_state)
        pc.on("track", self._on_track)

    async def send(self, message: Wire) -> None:
        if self.close_code is not None or self._channel.readyState != "open":
            raise ConnectionClosedError(None, None)
        if isinstance(message, bytes):
            self._mic.feed(message)
        else:
            self._channel.send(message)

    async def recv(self) -> Wire:
        message = await self._inbound.get()
        if message is None:
            self._inbound.put_nowait(None)
            raise (
                ConnectionClosedOK(None, None)
                if self.close_code == 1000
                else ConnectionClosedError(None, None)
            )
        return message

    async def __aiter__(self) -> AsyncIterator[Wire]:
        while True:
            message = await self._inbound.get()
            if message is None:
                self._inbound.put_nowait(None)
                return
            yield message

    async def close(self) -> None:
        """End the call: the channel (after what was sent on it), then the peer connection."""
        if self.close_code is None:
            self.close_code = 1000
        if self._channel.readyState == "open" and self._pc.connectionState == "connected":
            closed = asyncio.Event()
            self._channel.on("close", closed.set)
            self._channel.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closed.wait(), 1.0)
        await self._pc.close()
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
        self._inbound.put_nowait(None)

    def abort(self) -> None:
        """Drop the call without waiting (the peer connection closes in the background)."""
        self._ended(1006)
        task = asyncio.ensure_future(self.close())
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    def _on_message(self, message: str | bytes) -> None:
        """A channel message is an event, text even when it came as bytes (binary means audio here)."""
        self._inbound.put_nowait(message if isinstance(message, str) else message.decode("utf-8", "replace"))

    def _ended(self, code: int) -> None:
        if self.close_code is None:
            self.close_code = code
        self._inbound.put_nowait(None)

    def _on_state(self) -> None:
        if self._pc.connectionState in ("failed", "closed"):
            self._ended(1006)

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio" and self._listener is None:
            self._listener = asyncio.ensure_future(self._listen(track))

    async def _listen(self, track: MediaStreamTrack) -> None:
        """The server's track as binary messages: mono PCM16 at 48 kHz, one per 20 ms frame."""
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                assert isinstance(frame, AudioFrame)
                channels = len(frame.layout.channels)
                pcm = frame.to_ndarray().reshape(-1, channels).astype(np.int32).sum(axis=1) // channels
                self._inbound.put_nowait(pcm.astype("<i2").tobytes())


async def open_call(url: str, headers: Mapping[str, str], timeout_s: float) -> CallConnection:
    """Call `url` (a calls endpoint): the offer with a microphone track and the `oai-events` channel POSTed
    as `application/sdp`, the answer applied; returns once the channel is open (at most `timeout_s`).
    Host candidates only: no STUN or TURN server is asked. Raises `InvalidStatus` (as a refused WebSocket
    handshake does) for an answer other than 201, `TimeoutError` when the call does not connect in time."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    mic = MicTrack()
    pc.addTrack(mic)
    channel = pc.createDataChannel(EVENTS_CHANNEL)
    connection = CallConnection(pc, channel, mic)
    opened = asyncio.Event()
    channel.on("open", opened.set)
    try:
        async with asyncio.timeout(timeout_s):
            await pc.setLocalDescription(await pc.createOffer())
            async with httpx.AsyncClient(timeout=timeout_s) as http:
                response = await http.post(
                    url,
                    content=pc.localDescription.sdp,
                    headers={**headers, "Content-Type": "application/sdp"},
                )
            if response.status_code != 201:  # refused as a WebSocket handshake would be
                raise InvalidStatus(
                    Response(
                        response.status_code,
                        response.reason_phrase,
                        Headers(response.headers),
                        response.content,
                    )
                )
            await pc.setRemoteDescription(RTCSessionDescription(response.text, "answer"))
            await opened.wait()
    except BaseException:
        await connection.close()
        raise
    return connection
