"""A client that behaves as Full-Duplex-Bench's Moshi client: wait for the handshake, encode the input
with `sphn.OpusStreamWriter(24000)` in 80 ms frames sent in real time as `b"\\x01" + ogg`, decode kind 1
through `sphn.OpusStreamReader`, and build the output by concatenating the decoded audio. (FDB pins sphn
0.1.x, whose writer is `append_pcm` then `read_bytes` and reader `append_bytes` then `read_pcm`; the sphn
0.2 installed here returns the same Ogg bytes and PCM from `append_pcm` and `append_bytes` directly, and the
client uses that.)"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import sphn
import websockets

RATE = 24_000
FRAME = 1_920


class FdbMoshiClient:
    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.reader = sphn.OpusStreamReader(RATE)
        self.decoded: list[np.ndarray] = []
        self.texts: list[tuple[int, str]] = []
        """(output samples decoded before the piece arrived, the piece)"""
        self.errors: list[str] = []
        self.audio_frames = 0

    async def handshake(self) -> bytes:
        message = await asyncio.wait_for(self.ws.recv(), 5)
        assert isinstance(message, bytes) and message[0] == 0
        return message

    async def receive(self) -> None:
        async for message in self.ws:
            assert isinstance(message, bytes)
            kind, payload = message[0], message[1:]
            if kind == 1:
                self.audio_frames += 1
                self.decoded.append(self.reader.append_bytes(payload))
            elif kind == 2:
                self.texts.append((sum(len(d) for d in self.decoded), payload.decode()))
            elif kind == 5:
                self.errors.append(payload.decode())

    async def send_realtime(self, clip: np.ndarray) -> None:
        writer = sphn.OpusStreamWriter(RATE)
        start = time.monotonic()
        for i in range(0, len(clip) - FRAME + 1, FRAME):
            ogg = writer.append_pcm(clip[i : i + FRAME])
            if len(ogg) > 0:
                await self.ws.send(b"\x01" + ogg)
            await asyncio.sleep(max(0.0, start + (i + FRAME) / RATE - time.monotonic()))

    def output(self) -> np.ndarray:
        return np.concatenate(self.decoded) if self.decoded else np.zeros(0, dtype=np.float32)
