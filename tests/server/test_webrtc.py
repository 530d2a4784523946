"""`POST /v1/realtime/calls`: a session on a WebRTC call, driven by peers built from OpenAI's documented
contract (the openai SDK's `realtime.calls.create`; an aiortc client with an `oai-events` channel)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest

pytest.importorskip("aiortc")

from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from duplexkit.models import ModelPlugin, load_model
from duplexkit.server import EmbeddedServer, ServerConfig
from duplexkit.server.edge import HttpRequest
from duplexkit.server.serve import Edge
from tests.server.conftest import small_limits
from tests.server.webrtc_peer import CallPeer, tone

REPLY = "This is a scripted reply."


@pytest.fixture
def plugin() -> ModelPlugin:
    return load_model("scripted", {"first_output_ms": "50", "token_ms": "5", "chunk_period_ms": "200"})


@pytest.fixture
async def server(plugin: ModelPlugin) -> AsyncIterator[EmbeddedServer]:
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=1, limits=small_limits())) as srv:
        yield srv


def _speech() -> np.ndarray:
    return tone(1.0)


async def _slot_back(server: EmbeddedServer) -> None:
    """The call's session ended and gave its slot back, without the client doing anything more."""
    for _ in range(100):
        if server.duplex.manager.active == 0:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{server.duplex.manager.active} slots still held")


async def _nothing_left(peer: CallPeer | None, tasks_before: set[asyncio.Task[object]]) -> None:
    """Once the peer is gone too, no task of the call (or its request) is left on either side (bounded
    wait)."""
    if peer is not None:
        await peer.close()
    left: set[asyncio.Task[object]] = set()
    for _ in range(100):
        left = asyncio.all_tasks() - tasks_before
        if not left:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"tasks left: {sorted(repr(t.get_coro()) for t in left)}")


def _openai_event(event: dict[str, Any]) -> Any:
    """`event` as the openai SDK's realtime event union reads it (its WebRTC-only playout events)."""
    from openai.types.realtime import RealtimeServerEvent
    from pydantic import TypeAdapter

    return TypeAdapter(RealtimeServerEvent).validate_python(event)


def _metric(server: EmbeddedServer, name: str) -> float:
    for line in server.duplex.metrics.render().decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in the metrics")


async def test_openai_sdk_calls_create_gets_an_sdp_answer(server: EmbeddedServer) -> None:
    openai = pytest.importorskip("openai")
    peer = CallPeer(_speech())
    client = openai.AsyncOpenAI(api_key="unused", base_url=f"{server.http_url}/v1")
    response = await client.realtime.calls.with_raw_response.create(
        sdp=await peer.offer(), session={"type": "realtime", "instructions": "Be brief."}
    )
    assert response.status_code == 201
    assert response.headers["content-type"] == "application/sdp"
    assert response.headers["location"].startswith("/v1/realtime/calls/sess_")
    answer = response.http_response.text
    assert answer.startswith("v=0") and "m=audio" in answer and "a=fingerprint:" in answer
    await peer.pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))  # a valid answer to it
    created = await peer.until("session.created")
    assert created["session"]["instructions"] == "Be brief."
    await peer.close()


async def test_a_spoken_turn_over_webrtc(server: EmbeddedServer) -> None:
    tasks_before = asyncio.all_tasks()
    peer = CallPeer(_speech())
    response = await peer.call(server.http_url)
    assert response.status_code == 201, response.text
    assert _metric(server, "duplexkit_sessions_active") == 1
    done = await peer.until("response.done", timeout=15)
    assert done["response"]["status"] == "completed"
    metrics = done["response_request_metrics"]
    assert metrics["source"] == "server_monotonic_request_start"
    assert metrics["measurement_origin"] == {
        "ttft": "model_turn_request_start",
        "ttfp": "model_turn_request_start",
    }
    assert metrics["ttft_ms"] is not None and metrics["ttfp_ms"] is not None
    transcript = "".join(e["delta"] for e in peer.of_type("response.output_audio_transcript.delta"))
    assert transcript == REPLY
    assert not peer.of_type("response.output_audio.delta")  # reply audio rides the track, not the channel
    # The transcript deltas name the units the model spoke (the audio deltas that would have are gone).
    spoken = [e["unit_end_ms"] for e in peer.of_type("response.output_audio_transcript.delta")]
    assert spoken == sorted(spoken) and spoken[0] >= (await peer.until("response.created"))["unit_end_ms"]
    # The reply is heard on the track after the end of speech; what was sent is acknowledged as played.
    await peer.until("playback.acknowledged")
    assert peer.mic.clip_end_at is not None
    for _ in range(100):
        if peer.heard_audio_after(peer.mic.clip_end_at) is not None:
            break
        await asyncio.sleep(0.05)
    assert peer.heard_audio_after(peer.mic.clip_end_at) is not None
    assert peer.heard_audio_after(0.0) == peer.heard_audio_after(peer.mic.clip_end_at)  # silence before
    # OpenAI's playout events, as its SDK reads them: the reply's audio started on the track, and stopped
    # once it was finished and all sent.
    stopped = _openai_event(await peer.until("output_audio_buffer.stopped"))
    started = _openai_event(peer.of_type("output_audio_buffer.started")[0])
    assert started.response_id == stopped.response_id == done["response"]["id"]
    order = [e["type"] for e in peer.events]
    assert order.index("response.created") < order.index("output_audio_buffer.started")
    assert order.index("response.done") < order.index("output_audio_buffer.stopped")
    assert not peer.of_type("output_audio_buffer.cleared")
    playout = [e for e in peer.events if e["type"].startswith("output_audio_buffer.")]
    assert all("server_event_seq" not in e for e in playout)  # the call's events, not the session's
    peer.send({"type": "session.close"})
    closed = await peer.until("session.closed")
    assert closed["reason"] == "client_close"
    await _slot_back(server)
    assert _metric(server, "duplexkit_sessions_active") == 0
    await _nothing_left(peer, tasks_before)


async def _post(server: EmbeddedServer, body: bytes, content_type: str = "application/sdp") -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.post(
            f"{server.http_url}/v1/realtime/calls", content=body, headers={"Content-Type": content_type}
        )


def _error(response: httpx.Response) -> str:
    code: str = response.json()["error"]["code"]
    return code


async def _offer_without_audio() -> str:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.createDataChannel("oai-events")
    await pc.setLocalDescription(await pc.createOffer())
    sdp: str = pc.localDescription.sdp
    await pc.close()
    return sdp


async def test_offers_that_cannot_be_answered_are_refused_with_a_code_and_take_no_slot(
    server: EmbeddedServer,
) -> None:
    tasks_before = asyncio.all_tasks()
    not_sdp = await _post(server, b"hello")
    assert (not_sdp.status_code, _error(not_sdp)) == (400, "invalid_sdp")
    no_audio = await _post(server, (await _offer_without_audio()).encode())
    assert (no_audio.status_code, _error(no_audio)) == (400, "offer_without_audio")
    assert _metric(server, "duplexkit_sessions_admitted_total") == 0
    # SDP with an audio section that aiortc cannot negotiate (no ICE, no DTLS): admitted, then released.
    unusable = await _post(
        server, b"v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio 9 RTP/AVP 0\r\n"
    )
    assert (unusable.status_code, _error(unusable)) == (400, "invalid_sdp")
    form = await _post(
        server,
        b"--b\r\nContent-Disposition: form-data; name=x\r\n\r\n1\r\n--b--\r\n",
        "multipart/form-data; boundary=b",
    )
    assert (form.status_code, _error(form)) == (400, "missing_field")
    assert server.duplex.manager.active == 0
    await _nothing_left(None, tasks_before)


async def test_a_channel_with_another_name_gets_a_coded_error_and_ends_the_call(
    server: EmbeddedServer,
) -> None:
    tasks_before = asyncio.all_tasks()
    peer = CallPeer(_speech(), channel="chat")
    assert (await peer.call(server.http_url)).status_code == 201
    error = await peer.until("error")
    assert error["error"]["code"] == "invalid_data_channel" and "oai-events" in error["error"]["message"]
    await _slot_back(server)
    await _nothing_left(peer, tasks_before)


async def test_a_call_over_capacity_is_refused_retryably(server: EmbeddedServer) -> None:
    tasks_before = asyncio.all_tasks()
    first = CallPeer(_speech())
    assert (await first.call(server.http_url)).status_code == 201
    await first.until("session.created")
    second = CallPeer(_speech())
    refused = await second.call(server.http_url)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert _error(refused) == "session_capacity_exhausted"
    assert _metric(server, 'duplexkit_sessions_rejected_total{reason="capacity"}') == 1
    await second.close()
    first.send({"type": "session.close"})
    await _slot_back(server)
    await _nothing_left(first, tasks_before)


@pytest.mark.parametrize("how", ["channel_closed", "peer_closed", "never_connected"])
async def test_a_call_ends_and_frees_its_slot_when_the_client_goes(server: EmbeddedServer, how: str) -> None:
    tasks_before = asyncio.all_tasks()
    peer = CallPeer(_speech())
    if how == "never_connected":  # the answer is never applied: no ICE, no DTLS (config timeout 0.5 s)
        async with httpx.AsyncClient() as http:
            response = await http.post(f"{server.http_url}/v1/realtime/calls", content=await peer.offer())
        assert response.status_code == 201
    else:
        assert (await peer.call(server.http_url)).status_code == 201
        await peer.until("session.created")
        if how == "channel_closed":
            assert peer.channel is not None
            peer.channel.close()
        else:
            await peer.pc.close()  # DTLS close, then the transports
    await _slot_back(server)
    await _nothing_left(peer, tasks_before)


async def test_an_unauthorized_call_is_refused(plugin: ModelPlugin) -> None:
    config = ServerConfig(api_keys=frozenset({"k1"}), limits=small_limits())
    async with EmbeddedServer(plugin, config) as srv:
        peer = CallPeer(_speech())
        refused = await peer.call(srv.http_url)
        assert (refused.status_code, _error(refused)) == (401, "unauthorized")
        accepted = await peer.call(srv.http_url, headers={"Authorization": "Bearer k1"})
        assert accepted.status_code == 201
        await peer.until("session.created")
        await peer.close()
        await _slot_back(srv)


async def test_lost_packets_become_silence_on_the_media_clock_and_are_counted(server: EmbeddedServer) -> None:
    peer = CallPeer(_speech(), drop=frozenset(range(10, 15)))  # 5 frames of 20 ms never sent
    assert (await peer.call(server.http_url)).status_code == 201
    await peer.until("response.done", timeout=15)
    assert _metric(server, "duplexkit_webrtc_input_lost_seconds_total") == pytest.approx(0.1)
    await peer.close()


async def test_the_post_on_either_edge(plugin: ModelPlugin, edge: Edge) -> None:
    async with EmbeddedServer(plugin, ServerConfig(limits=small_limits()), edge=edge) as srv:
        peer = CallPeer(_speech())
        assert (await peer.call(srv.http_url)).status_code == 201
        await peer.until("session.created")
        await peer.close()
        too_large = await _post(srv, b"v=0\r\n" + b"a=x\r\n" * 60_000)
        assert (too_large.status_code, _error(too_large)) == (413, "invalid_value")
        async with httpx.AsyncClient() as http:
            assert (await http.post(f"{srv.http_url}/v1/elsewhere", content=b"x")).status_code in (404, 405)
        await _slot_back(srv)


async def test_server_shutdown_closes_the_call(plugin: ModelPlugin) -> None:
    async with EmbeddedServer(plugin, ServerConfig(limits=small_limits())) as srv:
        peer = CallPeer(_speech())
        assert (await peer.call(srv.http_url)).status_code == 201
        await peer.until("session.created")
        await srv.duplex.drain()
        assert (await peer.until("session.closed"))["reason"] == "server_shutdown"
        assert srv.duplex.manager.active == 0
        await peer.close()


async def test_without_the_webrtc_extra_a_call_is_refused_with_a_code(
    server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("duplexkit.server.webrtc.AVAILABLE", False)
    peer = CallPeer(_speech())
    refused = await _post(server, (await peer.offer()).encode())
    assert (refused.status_code, _error(refused)) == (501, "webrtc_unavailable")
    assert server.duplex.manager.active == 0
    await peer.close()


async def test_events_ride_the_channel_in_the_sessions_dialect(server: EmbeddedServer) -> None:
    peer = CallPeer(_speech())
    assert (await peer.call(server.http_url, headers={"OpenAI-Beta": "realtime=v1"})).status_code == 201
    await peer.until("response.done", timeout=15)
    names = {e["type"] for e in peer.events}
    assert "response.audio_transcript.delta" in names  # the beta names
    assert "response.output_audio_transcript.delta" not in names and "response.audio.delta" not in names
    await peer.close()


async def test_a_client_that_expects_100_continue_gets_it_before_sending_the_offer(
    server: EmbeddedServer,
) -> None:
    """curl sends `Expect: 100-continue` for a body of a few KiB and waits for the interim answer."""
    peer = CallPeer(_speech())
    offer = (await peer.offer()).encode()
    host, port = server.http_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"POST /v1/realtime/calls HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/sdp\r\n"
        f"Content-Length: {len(offer)}\r\nExpect: 100-continue\r\n\r\n"
    )
    writer.write(head.encode())
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(offer)
    assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"HTTP/1.1 201")
    writer.close()
    await writer.wait_closed()
    await _slot_back(server)  # the answer is never applied: the call ends at its connect timeout
    await peer.close()


async def test_a_cleared_reply_stops_on_the_track_and_history_keeps_what_was_sent() -> None:
    reply = "This reply goes on and on, long enough to be cut while it plays. " * 2
    plugin = load_model("scripted", {"reply": reply, "first_output_ms": "50", "chunk_period_ms": "200"})
    async with EmbeddedServer(plugin, ServerConfig(limits=small_limits())) as server:
        peer = CallPeer(_speech())
        assert (await peer.call(server.http_url)).status_code == 201
        created = await peer.until("response.created", timeout=15)
        await peer.until("playback.acknowledged")
        await asyncio.sleep(0.5)
        peer.send({"type": "output_audio_buffer.clear"})
        done = await peer.until("response.done")
        assert done["response"]["id"] == created["response"]["id"]
        assert done["response"]["status"] == "cancelled"
        cleared = _openai_event(await peer.until("output_audio_buffer.cleared"))
        assert cleared.response_id == done["response"]["id"]
        stopped_at = asyncio.get_running_loop().time()
        await asyncio.sleep(0.6)
        # What the track sent before the clear was acknowledged as played, and that is all that was.
        played = max(e["played_ms"] for e in peer.of_type("playback.acknowledged"))
        assert 0 < played < 60.0 * len(reply) - 1000
        # The track went quiet (the jitter buffer's last frames aside), and no error reached the client.
        late = [pcm for at, pcm in peer.heard if at >= stopped_at + 0.3]
        assert late and max(float(np.abs(pcm).max()) for pcm in late) < 0.01
        assert peer.of_type("error") == []
        assert not peer.of_type("output_audio_buffer.stopped")  # cut, not drained
        await peer.close()


async def test_a_call_request_cancelled_at_any_point_leaks_no_slot(server: EmbeddedServer) -> None:
    """The POST handler cancelled after each of its steps in turn (as an edge cancels the handler of a
    client that went away): its slot is free again and nothing of the call is left running; uncancelled,
    it answers 201."""
    peer = CallPeer(_speech())
    offer = (await peer.offer()).encode()
    request = HttpRequest({}, {"content-type": "application/sdp"}, offer)
    tasks_before = asyncio.all_tasks()
    for steps in range(1000):
        handler = asyncio.ensure_future(server.duplex.post_routes["/v1/realtime/calls"](request))
        for _ in range(steps):
            await asyncio.sleep(0)
        if handler.done():
            break
        handler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await handler
        assert server.duplex.manager.active == 0, f"a slot leaked, cancelled after {steps} steps"
        await _nothing_left(None, tasks_before)
    assert steps > 2 and handler.result().status == 201
    await server.duplex.drain(timeout_s=2)
    await peer.close()
