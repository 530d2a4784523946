"""`/api/chat` in front of a duplexkit model, driven by a client that behaves as Full-Duplex-Bench's Moshi
client (`tests/server/moshi_peer.py`)."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest
import sphn
import websockets

from duplexkit.models import ModelPlugin, load_model
from duplexkit.protocol import client_events as ce
from duplexkit.protocol import server_events as se
from duplexkit.protocol import wire
from duplexkit.protocol.audio import EncodedAudio
from duplexkit.server import EmbeddedServer, ServerConfig, runner
from duplexkit.server.edge import EventSocket
from duplexkit.server.moshi import MoshiSocket, session_from_query
from tests.server.moshi_peer import FRAME, RATE, FdbMoshiClient

REPLY = "This is a scripted reply."


@pytest.fixture
def plugin() -> ModelPlugin:
    """A scripted model on Moshi's 80 ms frames: `/api/chat` sends an output frame per frame it steps."""
    return load_model("scripted", {"first_output_ms": "50", "token_ms": "5", "chunk_period_ms": "80"})


def _clip(speech_s: float = 1.5, silence_s: float = 3.0) -> np.ndarray:
    t = np.arange(round(speech_s * RATE)) / RATE
    speech = (0.2 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
    return np.concatenate([speech, np.zeros(round(silence_s * RATE), dtype=np.float32)])


def _chat_url(server: EmbeddedServer, query: str = "") -> str:
    return server.url.replace("/v1/realtime", "/api/chat") + query


def _frame_rms(pcm: np.ndarray) -> list[float]:
    return [float(np.sqrt(np.mean(pcm[i : i + FRAME] ** 2))) for i in range(0, len(pcm) - FRAME + 1, FRAME)]


async def test_a_full_duplex_bench_moshi_client_gets_speech_back_on_the_input_timeline(
    server: EmbeddedServer,
) -> None:
    clip = _clip()
    url = _chat_url(server, "?text_temperature=0.7&text_topk=25&pad_mult=0&unknown_knob=x")
    async with websockets.connect(url) as ws:
        client = FdbMoshiClient(ws)
        assert struct.unpack("<II", (await client.handshake())[1:9])[0] == 0  # protocol version 0
        receiving = asyncio.create_task(client.receive())
        await client.send_realtime(clip)
        await asyncio.sleep(0.3)
        receiving.cancel()
    out = client.output()
    frames_in = len(clip) // FRAME
    # One continuous stream: an output frame for (nearly) every input frame, silence included.
    assert frames_in - 3 <= len(out) // FRAME <= frames_in
    rms = _frame_rms(out)
    speaking = [i for i, value in enumerate(rms) if value > 0.01]
    assert speaking, "no reply audio"
    # The reply comes after the speech (1.5 s) on the input's timeline, not at the start of the file.
    assert speaking[0] * FRAME / RATE >= 1.5
    assert all(value < 1e-3 for value in rms[: round(1.5 * RATE / FRAME)])
    # Text pieces arrive interleaved with the audio they belong to.
    assert "".join(text for _, text in client.texts).startswith("This is a scripted")
    first_piece_at = client.texts[0][0] // FRAME
    assert abs(first_piece_at - speaking[0]) <= 1
    assert client.errors == []


async def test_a_moshi_session_makes_and_reads_no_json_or_base64_inside_the_server(
    server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The typed seam: Opus in, samples to the model and back, Opus out; the JSON parser and renderer and
    the base64 codec are never called for it (a `/v1/realtime` session on the same server calls each)."""
    calls: Counter[str] = Counter()

    def spy(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        return counted

    monkeypatch.setattr(runner, "parse_client_event", spy("parse", runner.parse_client_event))
    monkeypatch.setattr(wire.EventRenderer, "render", spy("render", wire.EventRenderer.render))
    monkeypatch.setattr(EncodedAudio, "to_base64", spy("to_base64", EncodedAudio.to_base64))
    monkeypatch.setattr(ce, "decode_base64_payload", spy("from_base64", ce.decode_base64_payload))
    async with websockets.connect(_chat_url(server)) as ws:
        client = FdbMoshiClient(ws)
        await client.handshake()
        receiving = asyncio.create_task(client.receive())
        await client.send_realtime(_clip())
        await asyncio.sleep(0.3)
        receiving.cancel()
    assert max(_frame_rms(client.output())) > 0.01, "no reply audio came back"
    assert calls == Counter()
    async with websockets.connect(server.url) as ws:  # the premise: a JSON session goes through each
        await asyncio.wait_for(ws.recv(), 5)  # session.created
        pcm = (0.2 * np.sin(np.arange(16_000) / 16_000 * 2 * np.pi * 300) * 32767).astype("<i2")
        audio = base64.b64encode(pcm.tobytes()).decode()
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))
        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        while "to_base64" not in calls:
            await asyncio.wait_for(ws.recv(), 10)
    assert {"parse", "render", "to_base64", "from_base64"} <= set(calls)


async def test_bad_frames_get_kind_5_and_the_session_goes_on(server: EmbeddedServer) -> None:
    async with websockets.connect(_chat_url(server)) as ws:
        client = FdbMoshiClient(ws)
        await client.handshake()
        receiving = asyncio.create_task(client.receive())
        await ws.send(b"\x09hello")  # unknown kind
        await ws.send(b"\x02hi from the client")  # text is server -> client only
        await ws.send("a text message")  # not a binary frame
        await ws.send(b"")  # no kind at all
        writer = sphn.OpusStreamWriter(RATE)
        first = writer.append_pcm(np.zeros(FRAME, dtype=np.float32))
        await ws.send(b"\x01" + b"garbage!" + first[:20])  # not Ogg, then a truncated page
        await ws.send(b"\x01" + first[20:])  # the rest of that page: the stream recovers
        await client.send_realtime(_clip(0.0, 0.8))
        await asyncio.sleep(0.3)
        receiving.cancel()
    assert len(client.errors) == 5, client.errors
    assert "unknown message kind 9" in client.errors[0]
    assert "kind 2" in client.errors[1] and "binary" in client.errors[2] and "empty" in client.errors[3]
    assert "not Ogg" in client.errors[4]
    assert client.audio_frames >= 5  # still streaming after every bad frame


async def test_an_ogg_page_the_codec_refuses_gets_kind_5_and_the_stream_goes_on(
    server: EmbeddedServer,
) -> None:
    """Found by the Moshi fuzzer (tests/fuzz/test_moshi_fuzz.py): a page that is Ogg in shape but not in
    version made the Opus reader raise ("unsupported ogg version 2"), which ended the session with
    `internal_error`; and the reader, which keeps the page, refused every page after it."""
    async with websockets.connect(_chat_url(server)) as ws:
        client = FdbMoshiClient(ws)
        await client.handshake()
        receiving = asyncio.create_task(client.receive())
        writer = sphn.OpusStreamWriter(RATE)
        header = bytearray(writer.append_pcm(np.zeros(FRAME, dtype=np.float32)))
        header[4] = 2  # the page's stream structure version: Ogg has only 0
        await ws.send(b"\x01" + bytes(header))
        await client.send_realtime(_clip(0.0, 0.8))
        await asyncio.sleep(0.3)
        receiving.cancel()
    assert len(client.errors) == 1 and "could not be decoded" in client.errors[0], client.errors
    assert client.audio_frames >= 5  # the session lived on, and so did the stream's decoding


async def test_moshi_sessions_share_admission_with_realtime(plugin: ModelPlugin) -> None:
    async with (
        EmbeddedServer(plugin, ServerConfig(max_sessions=1)) as server,
        websockets.connect(server.url) as holder,
    ):
        await holder.recv()  # session.created: the only slot is taken
        async with websockets.connect(_chat_url(server)) as ws:
            refusal = await asyncio.wait_for(ws.recv(), 5)
            assert isinstance(refusal, bytes) and refusal[0] == 5 and b"slots" in refusal
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 5)
            assert ws.close_code == 1013


class _FakeWebSocket:
    """Just enough of an edge's `Connection` for `MoshiSocket`: queued binary input, recorded output."""

    def __init__(self, frames: list[bytes]) -> None:
        self.incoming = list(frames)
        self.sent: list[bytes] = []
        self.close_code: int | None = None

    async def receive(self) -> bytes | None:
        return self.incoming.pop(0) if self.incoming else None

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)


async def test_a_cancelled_reply_stops_at_once_and_the_stream_goes_on_in_silence() -> None:
    """One output frame per stepped frame (each decision's `unit_end_ms`): reply audio with its piece right
    after it, as `moshi.server` sends them, then silence for the listens after a cancel."""
    ws = _FakeWebSocket([])
    socket = MoshiSocket(ws, session_from_query({}))  # type: ignore[arg-type]
    assert isinstance(socket, EventSocket)  # the in-process edge contract: typed events both ways
    assert isinstance(await socket.receive_event(), ce.SessionUpdate)
    await socket.send_event(se.SessionCreated.model_construct(session=None))
    ids = {"response_id": "r", "item_id": "i"}
    tone = _clip(2.0, 0.0)
    metadata = se.AudioDeltaMetadata(audio_duration_ms=80.0, end_of_turn=False, audio_text_marks=[])
    for k in range(3):  # three frames of a reply, the text piece right after the first
        audio = EncodedAudio.of_samples(tone[k * FRAME : (k + 1) * FRAME], "pcm16")
        end_ms = 80.0 * (k + 1)
        await socket.send_event(
            se.ResponseOutputAudioDelta.of_audio(
                audio, sample_rate_hz=RATE, metadata=metadata, unit_end_ms=end_ms, **ids
            )
        )
        if k == 0:
            await socket.send_event(
                se.ResponseOutputAudioTranscriptDelta(delta="Hi", unit_end_ms=end_ms, **ids)
            )
    done = se.ResponseDone(response=se.ResponseInfo(id="r", status="cancelled"))
    await socket.send_event(done)
    listening = se.ListenInfo(metadata=se.ListenMetadata(reason="model_listen", model_listen=True))
    for k in range(3, 6):
        await socket.send_event(se.ResponseListen(response=listening, unit_end_ms=80.0 * (k + 1)))
    reader = sphn.OpusStreamReader(RATE)
    kinds = [m[0] for m in ws.sent]
    assert kinds[:3] == [0, 1, 2] and ws.sent[2] == b"\x02Hi"
    pcm = np.concatenate([reader.append_bytes(m[1:]) for m in ws.sent if m[0] == 1])
    rms = _frame_rms(pcm)
    assert len(rms) == 6 and all(v > 0.05 for v in rms[1:3]) and all(v < 0.01 for v in rms[4:]), rms


async def test_moshi_sessions_count_in_the_same_prometheus_metrics(plugin: ModelPlugin) -> None:
    async with (
        EmbeddedServer(plugin, ServerConfig(api_keys=frozenset({"k1"}))) as server,
        httpx.AsyncClient() as http,
    ):
        with pytest.raises(websockets.InvalidStatus):  # no key: refused at the handshake, as on /v1/realtime
            await websockets.connect(_chat_url(server))
        async with websockets.connect(
            _chat_url(server), additional_headers={"Authorization": "Bearer k1"}
        ) as ws:
            client = FdbMoshiClient(ws)
            await client.handshake()
            await ws.send(b"\x09")  # a bad frame is answered, and the session stays admitted
            assert (await asyncio.wait_for(ws.recv(), 5))[0] == 5
            text = (await http.get(f"{server.http_url}/metrics")).text
    assert 'duplexkit_sessions_rejected_total{reason="unauthorized"} 1.0' in text
    assert "duplexkit_sessions_admitted_total 1.0" in text
    assert "duplexkit_sessions_active 1.0" in text
