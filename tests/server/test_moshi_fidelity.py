"""On the wire, every Moshi session equals `moshi.server`'s own per-frame algorithm on the PCM it sent
(`tests/models/moshi/reference.py`, written from Kyutai's code): `/api/chat` with Ogg-Opus from
`sphn.OpusStreamWriter` (the reference gets the PCM `sphn.OpusStreamReader` decodes from the same bytes,
as `moshi.server` does), the OpenAI WebSocket with PCM16 (the reference gets the same int16 samples), and a
WebRTC call (the reference gets the PCM the server decoded from its Opus track). Sessions join a running
batch at different frames; each one's text ids and audio codes (read at the model's torch edge) and the
text pieces its client received must be the reference's, frame for frame."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import sphn
import websockets

pytest.importorskip("moshi")

from duplexkit.models import load_model
from duplexkit.models.moshi.frames import SlotFrame
from duplexkit.models.moshi.plugin import MoshiModel
from duplexkit.models.moshi.tiny import write_tiny_checkpoint
from duplexkit.server import EmbeddedServer, ServerConfig
from tests.models.moshi.reference import assert_hears, moshi_server_loop

RATE, FRAME, FRAMES = 24_000, 1920, 12


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = write_tiny_checkpoint(tmp_path_factory.mktemp("moshi") / "tiny")
    assert_hears(folder)
    return folder


def _pcm(seed: int) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    t = np.arange(FRAME * FRAMES) / RATE
    tone = 0.25 * np.sin(2 * np.pi * (150 + 100 * seed) * t) * (t % 0.32 < 0.2)
    return (tone + 0.05 * rng.standard_normal(len(t))).astype(np.float32)


class Recorder:
    """Every slot's raw outputs at the model's torch edge, in stepping order."""

    def __init__(self, plugin: MoshiModel) -> None:
        self.seen: dict[int, list[SlotFrame]] = {}
        self.heard: dict[int, list[npt.NDArray[np.float32]]] = {}
        """Every slot's input frames, as the torch edge was given them."""
        self._step = plugin._batch.step
        plugin._batch.step = self._record  # type: ignore[method-assign]

    def _record(self, groups, occupied, forced=None):  # type: ignore[no-untyped-def]
        out = self._step(groups, occupied, forced)
        for frames in groups.values():
            for slot, pcm in frames.items():
                self.heard.setdefault(slot, []).append(pcm.copy())
        for slot, frame in out.items():
            self.seen.setdefault(slot, []).append(frame)
        return out

    def frames(self, slot: int) -> int:
        return len(self.seen.get(slot, []))

    async def until(self, slot: int, count: int) -> None:
        async with asyncio.timeout(60):
            while self.frames(slot) < count:  # noqa: ASYNC110 - the model steps on its own thread
                await asyncio.sleep(0.01)


class MoshiChat:
    """`/api/chat` as Kyutai's client does it: handshake, then `b"\\x01"` + Ogg pages from
    `sphn.OpusStreamWriter(24000)`, 80 ms of PCM at a time; text pieces arrive as kind 2."""

    def __init__(self, ws: websockets.ClientConnection, pcm: npt.NDArray[np.float32]) -> None:
        self.ws = ws
        self.writer = sphn.OpusStreamWriter(RATE)
        self.oggs = [self.writer.append_pcm(pcm[i : i + FRAME]) for i in range(0, len(pcm), FRAME)]
        reader = sphn.OpusStreamReader(RATE)
        decoded = [reader.append_bytes(ogg) for ogg in self.oggs if len(ogg)]
        self.heard_pcm = np.concatenate(decoded).astype(np.float32)
        """What `moshi.server` would step: the PCM its Opus reader gives for these bytes."""
        self.pieces: list[str] = []
        self.sent = 0

    async def send(self, count: int) -> None:
        for ogg in self.oggs[self.sent : self.sent + count]:
            if len(ogg):
                await self.ws.send(b"\x01" + ogg)
        self.sent += count

    async def receive(self) -> None:
        async for message in self.ws:
            if isinstance(message, bytes) and message[:1] == b"\x02":
                self.pieces.append(message[1:].decode())


class OpenAIRaw:
    """The OpenAI Realtime WebSocket: `input_audio_buffer.append` of PCM16 at 24 kHz, 80 ms each."""

    def __init__(self, ws: websockets.ClientConnection, pcm: npt.NDArray[np.float32]) -> None:
        self.ws = ws
        self.pcm16 = np.clip(np.round(pcm * 32768), -32768, 32767).astype("<i2")
        self.heard_pcm = (self.pcm16 / 32768).astype(np.float32)
        self.sent = 0

    async def open(self) -> None:
        assert json.loads(await self.ws.recv())["type"] == "session.created"
        update = {"turn_detection": None, "input_audio_format": "pcm16", "input_sample_rate_hz": RATE}
        await self.ws.send(json.dumps({"type": "session.update", "session": update}))

    async def send(self, count: int) -> None:
        for i in range(self.sent, min(self.sent + count, FRAMES)):
            chunk = self.pcm16[i * FRAME : (i + 1) * FRAME].tobytes()
            await self.ws.send(
                json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()})
            )
        self.sent += count

    async def drain(self) -> None:
        async for _ in self.ws:
            pass


def _reference(checkpoint: Path, pcm: npt.NDArray[np.float32]) -> list[tuple[int, tuple[int, ...]] | None]:
    frames = moshi_server_loop(checkpoint, pcm[: FRAME * FRAMES])
    return [None if f is None else (f.text_id, f.codes) for f in frames]


def _got(frames: list[SlotFrame]) -> list[tuple[int, tuple[int, ...]] | None]:
    return [None if f.text_id == -2 else (f.text_id, f.codes) for f in frames]


async def test_sessions_on_api_chat_and_the_openai_socket_equal_moshi_servers_loop(checkpoint: Path) -> None:
    plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": "3"})
    assert isinstance(plugin, MoshiModel)
    recorder = Recorder(plugin)
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=3)) as server:
        chat_url = server.url.replace("/v1/realtime", "/api/chat")
        async with (
            websockets.connect(chat_url) as ws_a,
            websockets.connect(server.url) as ws_b,
            websockets.connect(chat_url) as ws_c,
        ):
            a, b, c = MoshiChat(ws_a, _pcm(0)), OpenAIRaw(ws_b, _pcm(1)), MoshiChat(ws_c, _pcm(2))
            assert (await ws_a.recv())[:1] == b"\x00"  # slot 0: the handshake comes once it is ready
            receiving = [asyncio.create_task(a.receive())]
            await a.send(4)  # a steps alone ...
            await recorder.until(0, 4)
            await b.open()  # ... b joins the running batch at a's fifth frame (slot 1) ...
            receiving.append(asyncio.create_task(b.drain()))
            await asyncio.gather(a.send(3), b.send(3))
            await recorder.until(0, 7)
            assert (await ws_c.recv())[:1] == b"\x00"  # ... and c at a's eighth (slot 2)
            receiving.append(asyncio.create_task(c.receive()))
            await asyncio.gather(a.send(FRAMES), b.send(FRAMES), c.send(FRAMES))
            for slot, client in enumerate((a, b, c)):
                await recorder.until(slot, len(client.heard_pcm) // FRAME)
            await asyncio.sleep(0.3)  # the last text pieces reach the clients
            for task in receiving:
                task.cancel()
    for slot, client in enumerate((a, b, c)):
        # The model stepped the very samples the reference steps: for /api/chat the Opus decoder's floats,
        # not rounded to PCM16 (which flips a greedy token wherever the model stands near a tie).
        heard = np.concatenate(recorder.heard[slot])
        assert np.array_equal(heard, client.heard_pcm[: len(heard)]), f"slot {slot} heard other samples"
        reference = _reference(checkpoint, client.heard_pcm)
        got = _got(recorder.seen[slot])
        assert got[: len(reference)] == reference, f"slot {slot} ({type(client).__name__}) differs"
        assert len(got) == len(reference)
        if isinstance(client, MoshiChat):
            pieces = [plugin.piece(tid) for tid, _ in filter(None, reference)]
            assert "".join(client.pieces) == "".join(p for p in pieces if p)
    stats = plugin.slot_stats()
    assert stats.ticks < stats.frames_stepped  # some ticks stepped several sessions together


async def test_a_persona_sent_after_audio_comes_after_that_audio(checkpoint: Path) -> None:
    """Audio, then at once a `session.update` with a persona: the audio is stepped first, so the persona
    comes after the session's first audio and is refused (the slot is never prompted in the middle of
    it), and the session's frames stay the reference's for its PCM alone."""
    plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": "1"})
    assert isinstance(plugin, MoshiModel)
    recorder = Recorder(plugin)
    errors: list[dict[str, object]] = []
    async with (
        EmbeddedServer(plugin, ServerConfig(max_sessions=1)) as server,
        websockets.connect(server.url) as ws,
    ):
        client = OpenAIRaw(ws, _pcm(3))
        await client.open()
        await client.send(3)
        persona = {"extra_body": {"text_prompt": "you are a pirate"}}
        await ws.send(json.dumps({"type": "session.update", "session": persona}))
        await client.send(FRAMES)
        async with asyncio.timeout(60):
            async for message in ws:
                event = json.loads(message)
                if event["type"] == "error":
                    errors.append(event["error"])
                if recorder.frames(0) >= FRAMES and errors:
                    break
        await recorder.until(0, FRAMES)
    assert [e["param"] for e in errors] == ["session.extra_body"]
    assert "before the session's first audio" in str(errors[0]["message"])
    assert _got(recorder.seen[0]) == _reference(checkpoint, client.heard_pcm)


async def test_a_webrtc_call_joining_a_chat_equals_moshi_servers_loop_on_the_pcm_it_decoded(
    checkpoint: Path,
) -> None:
    """A WebRTC call (an aiortc peer from OpenAI's calls contract, Opus over RTP at 48 kHz) joins a running
    `/api/chat` session: each slot's outputs are the reference's for the PCM that slot was given (for the
    call, what the server decoded and resampled from the track; for the chat, what `moshi.server` would
    decode from its Ogg pages), frame for frame; and the call's slot was given its peer's clip (its
    pitch), not the chat's audio or silence."""
    from tests.server.webrtc_peer import CallPeer

    plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": "2"})
    assert isinstance(plugin, MoshiModel)
    recorder = Recorder(plugin)
    t = np.arange(int(1.2 * 48_000)) / 48_000
    clip = (0.3 * np.sin(2 * np.pi * 220 * t) * (t % 0.4 < 0.25)).astype(np.float32)
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=2)) as server:
        chat_url = server.url.replace("/v1/realtime", "/api/chat")
        async with websockets.connect(chat_url) as ws:
            chat = MoshiChat(ws, _pcm(4))
            assert (await ws.recv())[:1] == b"\x00"
            receiving = asyncio.create_task(chat.receive())
            await chat.send(3)
            await recorder.until(0, 3)
            peer = CallPeer(clip)
            try:
                assert (await peer.call(server.http_url)).status_code == 201
                sending = asyncio.create_task(chat.send(FRAMES))
                await recorder.until(1, 16)
                await sending
                await recorder.until(0, len(chat.heard_pcm) // FRAME)
            finally:
                await peer.close()
                receiving.cancel()
    call_pcm = np.concatenate(recorder.heard[1])
    spectrum = np.abs(np.fft.rfft(call_pcm[:RATE]))
    assert abs(float(np.argmax(spectrum)) - 220) <= 3  # the slot was given the call's 220 Hz clip
    assert float(np.sqrt(np.mean(call_pcm[:RATE] ** 2))) > 0.05
    for slot, pcm in ((0, chat.heard_pcm), (1, call_pcm)):
        got, reference = _got(recorder.seen[slot]), _reference(checkpoint, pcm)
        assert len(got) >= len(reference) == FRAMES
        assert got[:FRAMES] == reference, f"slot {slot} differs"
