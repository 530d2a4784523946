"""`duplexkit serve --model moshi` end to end on a tiny random-weight checkpoint: several sessions on one
model behind every protocol (the openai SDK in GA and beta, a vLLM-Omni-style raw client, Full-Duplex-
Bench's Moshi client on `/api/chat`, and a WebRTC call from OpenAI's calls contract), the slots' capacity
refusal, a persona prefilled before the Moshi handshake, and the slot metrics."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import websockets

pytest.importorskip("moshi")

from duplexkit.models import load_model
from duplexkit.models.moshi.plugin import MoshiModel
from duplexkit.models.moshi.tiny import write_tiny_checkpoint
from duplexkit.server import EmbeddedServer, ServerConfig
from tests.models.moshi.reference import assert_hears
from tests.server.test_dialects_e2e import _sdk, _speech_pcm16
from tests.server.test_moshi_endpoint import FdbMoshiClient

RATE = 24_000


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = write_tiny_checkpoint(tmp_path_factory.mktemp("moshi") / "tiny")
    assert_hears(folder)  # or a session routed to the wrong slot could not fail anything here
    return folder


@pytest.fixture
async def server(checkpoint: Path) -> AsyncIterator[EmbeddedServer]:
    plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": "2", "max_response_ms": "800"})
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=8)) as srv:
        yield srv


def _speech(seconds: float) -> bytes:
    return _speech_pcm16(RATE, seconds)


async def test_the_openai_sdk_hears_moshi_and_two_sessions_share_the_model(server: EmbeddedServer) -> None:
    sdk = _sdk(server)

    async def hear(beta: bool) -> int:
        """One SDK session (GA or beta) speaking 1.6 s at 24 kHz: the reply samples it heard."""
        connect = sdk.beta.realtime.connect if beta else sdk.realtime.connect
        delta_type = "response.audio.delta" if beta else "response.output_audio.delta"
        session: dict[str, Any] = (
            {"input_audio_format": "pcm16"}
            if beta
            else {"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcm"}}}}
        )
        heard = 0
        async with connect(model="moshi") as connection:
            await connection.session.update(session=session)
            await connection.input_audio_buffer.append(audio=base64.b64encode(_speech(1.6)).decode())
            async with asyncio.timeout(20):
                async for event in connection:
                    if event.type == delta_type:
                        heard += len(base64.b64decode(event.delta)) // 2
                    elif event.type == "response.done":
                        break
                    elif event.type == "error":
                        raise AssertionError(event.error)
        return heard

    heard = await asyncio.gather(hear(beta=False), hear(beta=True))
    assert all(n >= 1920 for n in heard), heard  # each heard at least one 80 ms frame of the model
    plugin = server.duplex.plugin
    assert isinstance(plugin, MoshiModel)
    assert plugin.slot_stats().frames_stepped > 0


async def test_a_webrtc_call_hears_moshi_on_the_track_and_frees_both_slots(server: EmbeddedServer) -> None:
    """An aiortc peer from OpenAI's calls contract: Moshi's audio on the server's track (it speaks from its
    first frame; random weights make no silence), its events on `oai-events`, and on `session.close` the
    server's session and the model's slot are both given back."""
    pytest.importorskip("aiortc")
    from tests.server.webrtc_peer import CallPeer, tone

    plugin = server.duplex.plugin
    assert isinstance(plugin, MoshiModel)
    peer = CallPeer(tone(1.2))
    response = await peer.call(server.http_url)
    assert response.status_code == 201, response.text
    created = await peer.until("session.created")
    assert created["session"]["capabilities"]["chunk_period_ms"] == 80
    assert plugin.slot_stats().in_use == 1
    await peer.until("response.created", timeout=20)
    async with asyncio.timeout(20):
        while peer.heard_audio_after(0.0) is None:  # noqa: ASYNC110 - the track's frames arrive on their own
            await asyncio.sleep(0.05)
    assert not peer.of_type("response.output_audio.delta")  # the audio rode the track, not the channel
    await peer.until("playback.acknowledged")
    peer.send({"type": "session.close"})
    assert (await peer.until("session.closed"))["reason"] == "client_close"
    async with asyncio.timeout(5):
        while server.duplex.manager.active or plugin.slot_stats().in_use:  # noqa: ASYNC110 - server cleanup
            await asyncio.sleep(0.02)
    await peer.close()


async def test_a_full_duplex_bench_moshi_client_hears_one_frame_per_frame(server: EmbeddedServer) -> None:
    url = server.url.replace("/v1/realtime", "/api/chat") + "?text_prompt=you%20are%20a%20pirate"
    plugin = server.duplex.plugin
    assert isinstance(plugin, MoshiModel)
    async with websockets.connect(url, max_size=None) as ws:
        client = FdbMoshiClient(ws)
        await client.handshake()
        # The persona went into this session's slot before the handshake was sent.
        offsets = plugin._batch.gen._streaming_state.offsets.tolist()
        assert max(offsets) >= len(plugin.tokenizer.encode("<system> you are a pirate <system>"))
        receiver = asyncio.create_task(client.receive())
        clip = (np.frombuffer(_speech(1.2), dtype="<i2") / 32768).astype(np.float32)
        await client.send_realtime(clip)
        async with asyncio.timeout(30):  # one output frame per frame stepped, however slow the machine
            while client.audio_frames < 10:  # noqa: ASYNC110 - frames arrive on their own
                await asyncio.sleep(0.05)
        await ws.close()
        await receiver
    assert client.errors == []
    assert client.audio_frames >= 10  # 15 frames sent; Opus framing may hold the last back


async def test_sessions_beyond_the_slots_are_refused_retryably_until_one_leaves(
    server: EmbeddedServer,
) -> None:
    http = httpx.AsyncClient(base_url=server.http_url)
    health = (await http.get("/healthz")).json()
    assert health["max_sessions"] == 2  # the slots, not --max-sessions 8
    first = await websockets.connect(server.url)
    second = await websockets.connect(server.url)
    for ws in (first, second):
        assert json.loads(await ws.recv())["type"] == "session.created"
    async with websockets.connect(server.url) as third:
        refusal = json.loads(await third.recv())
        assert refusal["type"] == "error" and refusal["error"]["code"] == "session_capacity_exhausted"
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await third.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
    await first.send(json.dumps({"type": "session.close"}))
    async with asyncio.timeout(5):
        while (await http.get("/healthz")).json()["sessions"] > 1:  # noqa: ASYNC110 - polling a server
            await asyncio.sleep(0.05)
    async with websockets.connect(server.url) as fourth:
        assert json.loads(await fourth.recv())["type"] == "session.created"
    await second.close()
    metrics = (await http.get("/metrics")).text
    await http.aclose()
    assert "duplexkit_model_slots 2.0" in metrics
    assert "duplexkit_model_frames_frozen_total" in metrics


async def test_a_vllm_omni_client_drops_and_resumes_on_the_same_slot(checkpoint: Path) -> None:
    """vLLM-Omni's dialect with its resume contract: the slot is held while the session is detached (the
    model keeps stepping what it has), the replay carries the model's output, and a close frees it."""
    from duplexkit.engine.journal import ResumeConfig
    from tests.server.test_resume import RESUME_QUERY, open_session, resume

    plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": "2"})
    assert isinstance(plugin, MoshiModel)
    config = ServerConfig(max_sessions=2, resume=ResumeConfig())
    async with EmbeddedServer(plugin, config) as server:
        client, created = await open_session(server)
        assert RESUME_QUERY and created["session"]["capabilities"]["chunk_period_ms"] == 80
        await client.send({"type": "session.update", "session": {"input_sample_rate_hz": RATE}})
        await client.until("session.updated")
        await client.send(
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(_speech(0.8)).decode()}
        )
        await client.until("response.listen", timeout=10)
        last_seq = client.events[-1]["server_event_seq"]
        client.ws.transport.abort()  # no close frame: the network went away
        await asyncio.sleep(0.5)
        assert plugin.slot_stats().in_use == 1  # detached, not gone: the slot is kept
        again = await resume(server, created, last_seq)
        resumed = await again.recv()
        assert resumed["type"] == "session.resumed"
        replay = [await again.recv() for _ in range(resumed["replayed_events"])]
        decided = [e for e in replay if e["type"] in ("response.listen", "response.audio.delta")]
        assert decided, "the frames sent before the drop were stepped while detached"
        await again.send({"type": "session.close"})
        await again.until("session.closed")
        async with asyncio.timeout(5):
            while plugin.slot_stats().in_use:  # noqa: ASYNC110 - the session's cleanup runs on the server
                await asyncio.sleep(0.02)


async def _slots_free(server: EmbeddedServer) -> None:
    plugin = server.duplex.plugin
    assert isinstance(plugin, MoshiModel)
    async with asyncio.timeout(5):
        while server.duplex.manager.active or plugin.slot_stats().in_use:  # noqa: ASYNC110 - server cleanup
            await asyncio.sleep(0.02)


async def _refused_on_api_chat(server: EmbeddedServer, query: str, reason: bytes) -> None:
    """An `/api/chat` opening on `query` is refused: a kind 5 `invalid_value` naming `reason`, then close
    1008, and every slot free at once."""
    async with websockets.connect(server.url.replace("/v1/realtime", "/api/chat") + query) as ws:
        refusal = await asyncio.wait_for(ws.recv(), 10)
        assert isinstance(refusal, bytes) and refusal[0] == 5
        assert refusal[1:].startswith(b"invalid_value:") and reason in refusal
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        assert ws.close_code == 1008
    await _slots_free(server)


async def test_a_refused_opening_ends_on_api_chat_and_the_websocket_with_the_slot_freed(
    server: EmbeddedServer,
) -> None:
    """PersonaPlex's client asks for `voice_prompt=NATF0.pt`; a server that cannot honour it says so (kind
    5 on `/api/chat`, a coded `error` on the WebSocket), closes with 1008, and the slot is free at once."""
    await _refused_on_api_chat(server, "?text_prompt=hi&voice_prompt=NATF0.pt", b"voice_prompt")
    async with websockets.connect(server.url + "?autostart=0") as ws:
        update = {"type": "session.update", "session": {"extra_body": {"voice_prompt": "NATF0.pt"}}}
        await ws.send(json.dumps(update))
        error = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert error["type"] == "error" and error["error"]["code"] == "invalid_value"
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        assert ws.close_code == 1008
    await _slots_free(server)


async def test_a_webrtc_call_whose_opening_is_refused_gets_a_coded_4xx_never_201(
    server: EmbeddedServer,
) -> None:
    """The call's session is validated before any answer: a refused opening is a 400 with its code (not a
    201 followed by a stream of `session_not_configured`), and the slot is free at once."""
    pytest.importorskip("aiortc")
    from tests.server.webrtc_peer import CallPeer, tone

    peer = CallPeer(tone(0.2))
    try:
        response = await peer.call(server.http_url, session={"extra_body": {"voice_prompt": "NATF0.pt"}})
    finally:
        await peer.close()
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_value" and "voice_prompt" in error["message"]
    await _slots_free(server)


async def test_a_voice_that_cannot_be_read_is_a_coded_error_and_never_hangs_the_session(
    checkpoint: Path, tmp_path: Path
) -> None:
    """A voice file is read in the session's `prepare`, off the event loop; one that is not audio is the
    update's `invalid_value` all the same: an opening on `/api/chat` ends (kind 5, close 1008, the slot
    free), and a running WebSocket session keeps its settings and goes on."""
    voices = tmp_path / "voices"
    voices.mkdir()
    (voices / "BAD.wav").write_bytes(b"RIFF, but no audio")
    plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": "2", "voices": str(voices)})
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=2)) as srv:
        await _refused_on_api_chat(srv, "?voice_prompt=BAD", b"BAD.wav is not an audio file")
        async with websockets.connect(srv.url) as ws:
            assert json.loads(await ws.recv())["type"] == "session.created"
            bad = {"type": "session.update", "session": {"extra_body": {"voice_prompt": "BAD"}}}
            await ws.send(json.dumps(bad))
            error = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert error["type"] == "error" and error["error"]["code"] == "invalid_value"
            audio = {"type": "input_audio_buffer.append", "audio": base64.b64encode(_speech(0.4)).decode()}
            await ws.send(json.dumps(audio))
            async with asyncio.timeout(10):
                while json.loads(await ws.recv())["type"] != "response.listen":
                    pass
            # The refused voice is not the session's: a later update (after audio) does not read it again.
            await ws.send(json.dumps({"type": "session.update", "session": {"temperature": 0.6}}))
            async with asyncio.timeout(10):
                while (event := json.loads(await ws.recv()))["type"] not in ("session.updated", "error"):
                    pass
            assert event["type"] == "session.updated", event
