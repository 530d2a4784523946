"""Every door against hostile and unlucky clients, over real sockets with the scripted model on a one-slot
server: a session that is never opened is ended at its opening deadline whatever its client sends, a
bad `start` ends a call at once, and in each case the slot is free again (docs/reliability.md, "Bounds on
what a client controls")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import websockets

from duplexkit.models import load_model
from duplexkit.server import EmbeddedServer, ServerConfig
from tests.server.conftest import connect, small_limits
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
