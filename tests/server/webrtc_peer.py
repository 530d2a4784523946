"""A WebRTC client of `POST /v1/realtime/calls` built from OpenAI's documented contract only (aiortc, no
duplexkit code): one audio track playing a clip in real time then silence, a data channel named
`oai-events` (or another name, or none), the offer POSTed as `application/sdp`, the answer applied; events
read from the channel as JSON, the server's track recorded with arrival times. Host candidates only."""

from __future__ import annotations

import asyncio
import fractions
import json
import time
from typing import Any

import httpx
import numpy as np
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame

RATE = 48_000
FRAME = 960


def tone(seconds: float, hz: float = 300.0, amplitude: float = 0.2) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32)


class ClipTrack(MediaStreamTrack):
    """A microphone that says `clip` once, then silence, 20 ms per frame on the wall clock. `drop` holds
    frame indices that are never sent (their RTP timestamps are skipped: lost packets)."""

    kind = "audio"

    def __init__(self, clip: np.ndarray, drop: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.clip = clip
        self.drop = drop
        self.index = 0
        self.start: float | None = None
        self.clip_end_at: float | None = None
        """When the clip's last frame was handed to the sender (the end of speech, on this clock)."""

    async def recv(self) -> AudioFrame:
        while True:
            if self.start is None:
                self.start = time.monotonic()
            else:
                self.index += 1
                wait = self.start + self.index * FRAME / RATE - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            if self.index not in self.drop:
                break
        chunk = self.clip[self.index * FRAME : (self.index + 1) * FRAME]
        if (self.index + 1) * FRAME >= len(self.clip) and self.clip_end_at is None:
            self.clip_end_at = time.monotonic()
        if len(chunk) < FRAME:
            chunk = np.concatenate([chunk, np.zeros(FRAME - len(chunk), np.float32)])
        pcm = (chunk * 32767).astype(np.int16).reshape(1, -1)
        frame = AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
        frame.sample_rate = RATE
        frame.pts = self.index * FRAME
        frame.time_base = fractions.Fraction(1, RATE)
        return frame


class CallPeer:
    def __init__(
        self, clip: np.ndarray, *, channel: str | None = "oai-events", drop: frozenset[int] = frozenset()
    ):
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.mic = ClipTrack(clip, drop)
        self.pc.addTrack(self.mic)
        self.events: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self.heard: list[tuple[float, np.ndarray]] = []
        """(arrival time, mono samples) of every frame of the server's track."""
        self.channel = None if channel is None else self.pc.createDataChannel(channel)
        if self.channel is not None:
            self.channel.on("message", self._on_message)
        self.pc.on("track", self._on_track)
        self._tasks: list[asyncio.Task[None]] = []

    def _on_message(self, message: str | bytes) -> None:
        self.events.append(json.loads(message))
        self.arrived.set()

    def _on_track(self, track: MediaStreamTrack) -> None:
        self._tasks.append(asyncio.ensure_future(self._listen(track)))

    async def _listen(self, track: MediaStreamTrack) -> None:
        try:
            while True:
                frame = await track.recv()
                pcm = frame.to_ndarray().reshape(-1, len(frame.layout.channels)).mean(axis=1) / 32768
                self.heard.append((time.monotonic(), pcm.astype(np.float32)))
        except MediaStreamError:
            return

    async def offer(self) -> str:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        return self.pc.localDescription.sdp

    async def call(
        self,
        http_url: str,
        query: str = "",
        headers: dict[str, str] | None = None,
        session: dict[str, Any] | None = None,
    ) -> httpx.Response:
        """POST the offer as `application/sdp`, or with a `session` as multipart (`sdp`, `session`); on 201
        apply the answer."""
        sdp = await self.offer()
        url = f"{http_url}/v1/realtime/calls{query}"
        async with httpx.AsyncClient() as http:
            if session is None:
                response = await http.post(
                    url, content=sdp, headers={"Content-Type": "application/sdp", **(headers or {})}
                )
            else:
                form = {"sdp": (None, sdp, "application/sdp"), "session": (None, json.dumps(session))}
                response = await http.post(url, files=form, headers=headers)
        if response.status_code == 201:
            await self.pc.setRemoteDescription(RTCSessionDescription(response.text, "answer"))
        return response

    def send(self, event: dict[str, Any]) -> None:
        assert self.channel is not None
        self.channel.send(json.dumps(event))

    async def until(self, event_type: str, timeout: float = 10.0) -> dict[str, Any]:  # noqa: ASYNC109
        """The first event of `event_type` received (waiting for it, bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events:
                if event["type"] == event_type:
                    return event
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), max(0.01, deadline - time.monotonic()))

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == event_type]

    def heard_audio_after(self, since: float, rms: float = 0.01) -> float | None:
        """When the first frame louder than `rms` arrived after `since` (None: none did)."""
        for arrived, pcm in self.heard:
            if arrived >= since and float(np.sqrt(np.mean(pcm**2))) >= rms:
                return arrived
        return None

    async def close(self) -> None:
        await self.pc.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
