"""Full-Duplex-Bench v2's Moshi adapter on `/api/chat`, as it behaves on the wire, against `--model moshi`
(a tiny random-weight checkpoint): no query string and no subprotocol; the kind-0 handshake never parsed
(the adapter sleeps `--waitForHandshakeMs`, 800 ms by default, and its message listener is attached only
after, so what came before is lost); then the `OpusHead` page (BOS, pre-skip 312, rate field 48000) and the
`OpusTags` page, each its own kind-1 message; then every 80 ms, 80 ms of the orchestrator's 48 kHz audio
(zero-padded, silence when none) averaged pairwise down to 24 kHz and sent as four 20 ms Opus packets, each
in its own Ogg page (granule +960) in its own kind-1 message, never an EOS page; downlink kind 1 demuxed
(lacing, continued packets) and decoded, kind 2 logged, other kinds ignored.

Written (re-implemented in Python, not copied: FDB v2 is CC BY-NC 4.0) from
DanielLin94144/Full-Duplex-Bench @ d7336bda1385872b83b48a8d45d9c0003836a60d, `v2/adapters/moshi_adapter.js`
(`connectMoshi`, `OpusOggMuxer`, `OggDemuxer`, `startBridge`).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import websockets

pytest.importorskip("moshi")
pytest.importorskip("av")

import av

from duplexkit.models import load_model
from duplexkit.models.moshi.tiny import write_tiny_checkpoint
from duplexkit.server import EmbeddedServer, ServerConfig

MOSHI_SR = 24_000
FRAME = MOSHI_SR // 50  # 20 ms, the Opus frame


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        r = i << 24
        for _ in range(8):
            r = ((r << 1) ^ 0x04C11DB7) & 0xFFFFFFFF if r & 0x80000000 else (r << 1) & 0xFFFFFFFF
        table.append(r)
    return table


CRC = _crc_table()


def ogg_crc(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ CRC[((crc >> 24) ^ byte) & 0xFF]
    return crc


class Muxer:
    """`OpusOggMuxer`: one packet a page."""

    def __init__(self) -> None:
        self.serial, self.seq, self.granule = 0x5EED, 0, 0

    def page(self, packet: bytes, header_type: int, granule: int) -> bytes:
        laces = [255] * (len(packet) // 255) + [len(packet) % 255]
        head = b"OggS" + bytes([0, header_type]) + struct.pack("<QIII", granule, self.serial, self.seq, 0)
        self.seq += 1
        page = bytearray(head + bytes([len(laces)]) + bytes(laces) + packet)
        page[22:26] = struct.pack("<I", ogg_crc(bytes(page)))
        return bytes(page)

    def id_header(self) -> bytes:
        head = b"OpusHead" + bytes([1, 1]) + struct.pack("<HIhB", 312, 48_000, 0, 0)
        return self.page(head, 0x02, 0)

    def tags_header(self) -> bytes:
        vendor = b"MoshiAdapterSeed"
        return self.page(b"OpusTags" + struct.pack("<I", len(vendor)) + vendor + struct.pack("<I", 0), 0, 0)

    def audio_page(self, packet: bytes) -> bytes:
        self.granule += 960
        return self.page(packet, 0, self.granule)


def demux(buffer: bytearray) -> list[bytes]:
    """`OggDemuxer.push` on whole pages: the packets, headers skipped."""
    packets, partial = [], b""
    while len(buffer) >= 27 and buffer[:4] == b"OggS":
        count = buffer[26]
        table = buffer[27 : 27 + count]
        body_at, size = 27 + count, 27 + count + sum(table)
        if len(buffer) < size:
            break
        offset = body_at
        for seg in table:
            partial += bytes(buffer[offset : offset + seg])
            offset += seg
            if seg < 255:
                if partial[:8] not in (b"OpusHead", b"OpusTags"):
                    packets.append(partial)
                partial = b""
        del buffer[:size]
    return packets


class FdbV2MoshiAdapter:
    """Role B of an FDB v2 conversation, with the orchestrator's 48 kHz audio given up front."""

    def __init__(self, url: str, audio_48k: np.ndarray, wait_for_handshake_ms: float = 800) -> None:
        self.url, self.uplink, self.wait_s = url, audio_48k, wait_for_handshake_ms / 1000
        self.encoder = av.CodecContext.create("libopus", "w")
        self.encoder.sample_rate, self.encoder.layout, self.encoder.format = MOSHI_SR, "mono", "s16"
        self.decoder = av.CodecContext.create("libopus", "r")
        self.decoder.sample_rate, self.decoder.layout = MOSHI_SR, "mono"
        self.muxer = Muxer()
        self.lost: list[bytes] = []
        self.kinds: list[int] = []
        self.texts: list[str] = []
        self.decoded = 0
        self.sent_pages = 0
        self._downlink = bytearray()

    def _encode(self, pcm16: np.ndarray) -> list[bytes]:
        frame = av.AudioFrame.from_ndarray(pcm16.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = MOSHI_SR
        return [bytes(p) for p in self.encoder.encode(frame)]

    def _on_message(self, message: bytes) -> None:
        kind, payload = message[0], message[1:]
        self.kinds.append(kind)
        if kind == 1:
            self._downlink += payload
            for packet in demux(self._downlink):
                for frame in self.decoder.decode(av.Packet(packet)):
                    self.decoded += frame.samples
        elif kind == 2:
            self.texts.append(payload.decode())

    async def run(self, seconds: float) -> None:
        async with websockets.connect(self.url, max_size=None) as ws:
            await asyncio.sleep(self.wait_s)
            while True:  # what came before the listener was attached (the handshake) is lost
                try:
                    self.lost.append(await asyncio.wait_for(ws.recv(), 0.001))  # type: ignore[arg-type]
                except TimeoutError:
                    break
            await ws.send(b"\x01" + self.muxer.id_header())
            await ws.send(b"\x01" + self.muxer.tags_header())

            async def listen() -> None:
                async for message in ws:
                    assert isinstance(message, bytes)
                    self._on_message(message)

            listener = asyncio.create_task(listen())
            need = 48_000 * 80 // 1000
            loop = asyncio.get_running_loop()
            start = loop.time()
            for k in range(round(seconds / 0.08)):
                chunk = self.uplink[k * need : (k + 1) * need].astype(np.float32)
                chunk = np.pad(chunk, (0, need - len(chunk)))  # zero-padded, silence when none
                down = 0.5 * (chunk[0::2] + chunk[1::2])  # ds48kTo24k
                pcm16 = (np.clip(down, -1, 1) * 32768).astype(np.int32).clip(-32768, 32767).astype("<i2")
                for off in range(0, len(pcm16), FRAME):
                    for packet in self._encode(pcm16[off : off + FRAME]):
                        await ws.send(b"\x01" + self.muxer.audio_page(packet))
                        self.sent_pages += 1
                await asyncio.sleep(max(0.0, start + (k + 1) * 0.08 - loop.time()))
            # the stream's tail (a loaded CPU steps the first frames late): until a frame per 80 ms sent
            async with asyncio.timeout(30):
                while self.kinds.count(1) < round(seconds / 0.08) - 2:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            listener.cancel()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("moshi") / "tiny")


@pytest.fixture
async def server(checkpoint: Path) -> AsyncIterator[EmbeddedServer]:
    plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": "1"})
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=1)) as srv:
        yield srv


@pytest.mark.parametrize("wait_ms", [800, 0], ids=["default-wait", "audio-before-handshake"])
async def test_fdb_v2_s_moshi_adapter_streams_both_ways(server: EmbeddedServer, wait_ms: int) -> None:
    """Its pages are taken (no kind 5 back), and the stream comes back one 80 ms frame per 80 ms sent, as
    one continuous stream the adapter decodes; with no wait, its audio reaches the server before the
    handshake has been sent and is still taken."""
    t = np.arange(48_000 * 3) / 48_000
    speech_like = (0.3 * np.sin(2 * np.pi * 220 * t) * (np.sin(2 * np.pi * 2 * t) > 0)).astype(np.float32)
    url = server.url.replace("/v1/realtime", "/api/chat")  # as the runner hard-codes it: no query
    adapter = FdbV2MoshiAdapter(url, speech_like, wait_for_handshake_ms=wait_ms)
    seconds = 4.0
    await adapter.run(seconds)
    if wait_ms:
        assert adapter.lost and adapter.lost[0][0] == 0  # the handshake (kind 0), which it never reads
    assert 5 not in adapter.kinds, adapter.texts
    assert adapter.sent_pages >= 4 * round(seconds / 0.08) - 2  # four pages a tick (the encoder's lookahead)
    frames = adapter.kinds.count(1)
    assert frames >= round(seconds / 0.08) - 6  # one frame per 80 ms of input the model stepped
    assert adapter.decoded >= (frames - 1) * 1920
