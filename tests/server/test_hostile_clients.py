"""Every door against hostile and unlucky clients, over real sockets with the scripted model on a one-slot
server: a session that is never opened is ended at its opening deadline whatever its client sends, a
bad `start` ends a call at once, and in each case the slot is free again (docs/reliability.md, "Bounds on
what a client controls")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets

from duplexkit.engine import EngineSession
from duplexkit.models import load_model
from duplexkit.protocol import client_events as ce
from duplexkit.protocol import server_events as se
from duplexkit.protocol.audio import EncodedAudio
from duplexkit.server import EmbeddedServer, ServerConfig
from duplexkit.server.runner import SessionRunner
from duplexkit.server.serve import Edge
from duplexkit.server.twilio.edge import TwilioSocket
from duplexkit.server.twilio.protocol import TwilioStream
from tests.server.conftest import RawClient, append, connect, small_limits, tone_pcm16
from tests.server.twilio_peer import TwilioPeer, error_counts, health, slot_freed, stream_url

OPENING_S = 0.3
"""The opening deadline (`config_timeout_s`) these servers run with."""

CONNECTED = {"event": "connected", "protocol": "Call", "version": "1.0.0"}


@pytest.fixture
async def one_slot() -> AsyncIterator[EmbeddedServer]:
    config = ServerConfig(max_sessions=1, limits=small_limits(config_timeout_s=OPENING_S))
    async with EmbeddedServer(load_model("scripted", {}), config) as running:
        yield running


@pytest.mark.parametrize(
    "first",
    ["{bad json", '{"type": "input_audio_buffer.append", "audio": ""}', "[" * 30_000 + "]" * 30_000],
    ids=["bad-json", "append", "deep"],
)
async def test_a_realtime_session_whose_opening_message_is_refused_ends_at_its_deadline(
    one_slot: EmbeddedServer, first: str
) -> None:
    client = await connect(one_slot.url, "?autostart=0")
    await client.send(first)
    refused = (await client.until("error"))["error"]["code"]
    assert refused in ("invalid_json", "session_not_configured")
    await client.send("{still not json")
    assert (await client.until("error"))["error"]["code"] == "invalid_json"
    assert (await client.until("error", timeout=5))["error"]["code"] == "config_timeout"
    assert (await client.until("session.closed"))["reason"] == "config_timeout"
    with pytest.raises(websockets.ConnectionClosed):
        await client.recv()
    await slot_freed(one_slot)
    second = await connect(one_slot.url)
    assert (await second.recv())["type"] == "session.created"


@pytest.mark.parametrize(
    "opening",
    [
        {
            "event": "media",
            "streamSid": "MZ1",
            "media": {"track": "inbound", "payload": "/w==", "timestamp": "0"},
        },
        "{bad json",
        {"event": "dtmf", "streamSid": "MZ1", "dtmf": {"digit": "1"}},
    ],
    ids=["media", "bad-json", "dtmf"],
)
async def test_a_twilio_stream_that_never_starts_ends_at_its_deadline_whatever_it_sends(
    one_slot: EmbeddedServer, opening: dict[str, object] | str
) -> None:
    peer = await TwilioPeer.connect(stream_url(one_slot))
    await peer.send_raw(CONNECTED)
    for _ in range(3):  # more of the same keeps nothing open
        await peer.ws.send(opening if isinstance(opening, str) else json.dumps(opening))
        await asyncio.sleep(OPENING_S / 3)
    async with asyncio.timeout(5):
        await peer.ws.wait_closed()
    await slot_freed(one_slot)
    assert (await error_counts(one_slot)).get("config_timeout") == 1


async def test_a_twilio_start_without_its_start_object_ends_the_call_at_once_with_its_code() -> None:
    config = ServerConfig(max_sessions=1, limits=small_limits(config_timeout_s=30))
    async with EmbeddedServer(load_model("scripted", {}), config) as server:
        peer = await TwilioPeer.connect(stream_url(server))
        await peer.send_raw(CONNECTED)
        await peer.send_raw({"event": "start", "sequenceNumber": "1", "streamSid": "MZ1"})
        async with asyncio.timeout(5):  # well before the 30 s opening deadline
            await peer.ws.wait_closed()
        assert (peer.ws.close_code, peer.ws.close_reason) == (1008, "missing_field")
        await slot_freed(server)
        assert (await error_counts(server)).get("missing_field") == 1


async def test_a_live_call_drops_and_counts_malformed_messages_and_goes_on(one_slot: EmbeddedServer) -> None:
    peer = await TwilioPeer.connect(stream_url(one_slot))
    await peer.open()
    hostile = [
        {"event": "media", "streamSid": peer.stream_sid, "media": {"payload": "/w==", "timestamp": stamp}}
        for stamp in ("inf", "1e13", "2e7", "nan")
    ]
    for message in hostile:
        await peer.send_raw(message)
    await peer.ws.send("[" * 30_000 + "]" * 30_000)
    await peer.ws.send("[" * 100_000 + "]" * 100_000)
    await peer.send_raw({"event": "bogus", "streamSid": peer.stream_sid})  # read after all of them
    async with asyncio.timeout(5):
        while (await error_counts(one_slot)).get("unknown_event") != 1:  # noqa: ASYNC110 (polls /metrics)
            await asyncio.sleep(0.02)
    counts = await error_counts(one_slot)
    assert (counts.get("invalid_value"), counts.get("invalid_json"), counts.get("event_too_large")) == (
        4,
        1,
        1,
    )
    assert (await health(one_slot))["sessions"] == 1  # the call is still up
    await peer.stop()
    await slot_freed(one_slot)


@pytest.mark.parametrize("kind", [[], {}, ["response.create"]], ids=["list", "object", "list-of-name"])
async def test_a_type_that_is_not_a_string_is_answered_coded_in_every_dialect(
    one_slot: EmbeddedServer, kind: Any
) -> None:
    """Found by the wire fuzzer (tests/fuzz/test_wire_fuzz.py): in the vLLM-Omni dialect (`?duplex=1`), a
    `type` that is a list or an object raised `TypeError` (unhashable) in the alias lookup, which ended the
    session with `internal_error` and counted a task failure."""
    for query in ("", "?duplex=1"):
        client = await connect(one_slot.url, query)
        assert (await client.recv())["type"] == "session.created"
        await client.send(json.dumps({"type": kind, "event_id": "evt_odd"}))
        error = await client.until("error")
        assert error["error"]["code"] == "unknown_event"
        await client.send({"type": "session.heartbeat"})
        await client.until("session.heartbeat_ack")  # the session goes on
        await client.ws.close()
        await slot_freed(one_slot)
    assert await task_failures(one_slot) == {}


async def task_failures(server: EmbeddedServer) -> dict[str, float]:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"{server.http_url}/metrics")).text
    return {
        line.split('task="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("duplexkit_task_failures_total{")
    }


async def _ends_with_internal_error(server: EmbeddedServer, client: RawClient, task: str) -> None:
    assert (await client.until("error"))["error"]["code"] == "internal_error"
    assert (await client.until("session.closed"))["reason"] == "internal_error"
    with pytest.raises(websockets.ConnectionClosed):
        await client.recv()
    assert client.ws.close_code == 1011
    await slot_freed(server)
    assert await task_failures(server) == {task: 1.0}
    after = await connect(server.url)  # the server goes on
    assert (await after.recv())["type"] == "session.created"


async def test_a_session_whose_reading_raises_ends_coded_and_frees_its_slot_on_each_edge(
    edge: Edge, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = SessionRunner.handle

    def buggy(self: SessionRunner, message: Any) -> Any:
        if isinstance(message, str) and "boom" in message:
            raise ValueError("a bug in handling")
        return handle(self, message)

    monkeypatch.setattr(SessionRunner, "handle", buggy)
    async with EmbeddedServer(load_model("scripted", {}), ServerConfig(max_sessions=1), edge=edge) as server:
        client = await connect(server.url)
        await client.until("session.created")
        await client.send({"type": "session.update", "session": {"instructions": "boom"}})
        await _ends_with_internal_error(server, client, "reader")


async def test_a_session_whose_stepper_raises_ends_coded_and_frees_its_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    step_finished = EngineSession.step_finished
    failed = False

    def buggy(self: EngineSession, unit: Any, now: float) -> Any:
        nonlocal failed
        if not failed:
            failed = True
            raise ValueError("a bug in the engine")
        return step_finished(self, unit, now)

    monkeypatch.setattr(EngineSession, "step_finished", buggy)
    async with EmbeddedServer(load_model("scripted", {}), ServerConfig(max_sessions=1)) as server:
        client = await connect(server.url)
        await client.until("session.created")
        await client.send(append(tone_pcm16(1.2)))
        await _ends_with_internal_error(server, client, "stepper")


class _YieldingConnection:
    """A `Connection` whose every send yields once before it is written (as a send waiting on TCP
    backpressure does), and whose messages come from `incoming`."""

    close_code = None

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[str | None] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> str | None:
        return await self.incoming.get()

    async def send_text(self, data: str) -> None:
        await asyncio.sleep(0)
        self.sent.append(json.loads(data))

    async def send_bytes(self, data: bytes) -> None:
        raise NotImplementedError

    async def close(self, code: int = 1000, reason: str = "") -> None:
        pass


async def _start(connection: _YieldingConnection, socket: TwilioSocket) -> None:
    start = {
        "event": "start",
        "start": {
            "streamSid": "MZ1",
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
        },
    }
    connection.incoming.put_nowait(json.dumps(start))
    assert isinstance(await socket.receive_event(), ce.SessionUpdate)


def delta(ms: int) -> se.ResponseOutputAudioDelta:
    audio = EncodedAudio(b"\x01" * (8 * ms), "g711_ulaw")
    return se.ResponseOutputAudioDelta.of_audio(
        audio,
        response_id="resp_1",
        item_id="item_1",
        output_index=0,
        content_index=0,
        sample_rate_hz=8000,
        metadata=se.AudioDeltaMetadata(audio_duration_ms=ms),
    )


async def test_twilio_audio_and_marks_leave_in_order_when_sends_wait() -> None:
    connection = _YieldingConnection()
    socket = TwilioSocket(connection, TwilioStream())
    await _start(connection, socket)

    def marks() -> list[str]:
        return [m["mark"]["name"] for m in connection.sent if m["event"] == "mark"]

    await socket.send_event(delta(500))  # five chunks, within the lead
    async with asyncio.timeout(5):
        while len(marks()) < 5:  # noqa: ASYNC110 (the writer task sends them)
            await asyncio.sleep(0)
    # Twilio echoes the first mark (releasing a chunk the lead held back) while the next reply audio is
    # being sent: the reader's chunk and the writer's must not interleave.
    connection.incoming.put_nowait(json.dumps({"event": "mark", "mark": {"name": marks()[0]}}))
    _, ack = await asyncio.gather(socket.send_event(delta(500)), socket.receive_event())
    assert isinstance(ack, ce.PlaybackAck)
    await socket.close()
    numbers = [int(m["mark"]["name"].rsplit(":", 1)[1]) for m in connection.sent if m["event"] == "mark"]
    assert len(numbers) == 7 and numbers == sorted(numbers)
    kinds = [m["event"] for m in connection.sent]
    assert kinds == ["media", "mark"] * (len(kinds) // 2)  # each chunk right before its mark


async def test_twilio_clears_a_done_replys_queued_audio_when_the_caller_talks_over_it() -> None:
    connection = _YieldingConnection()
    socket = TwilioSocket(connection, TwilioStream())
    await _start(connection, socket)
    await socket.send_event(delta(500))
    done = se.ResponseDone(response=se.ResponseInfo(id="resp_1", status="completed"))
    await socket.send_event(done)
    await socket.send_event(se.InputAudioBufferSpeechStarted(audio_start_ms=0, item_id="item_2"))
    await socket.close()
    assert [m["event"] for m in connection.sent][-1] == "clear"
