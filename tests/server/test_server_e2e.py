"""The server over a real socket on an ephemeral port (the default edge; a few tests on each edge), driven
by a raw `websockets` client."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from collections.abc import AsyncIterator

import httpx
import pytest
import websockets

from duplexkit.engine import Decision, Unit
from duplexkit.engine.journal import ResumeConfig
from duplexkit.models import ModelPlugin, load_model
from duplexkit.models.scripted import ScriptedModel, ScriptedParams, ScriptedSession
from duplexkit.server import EmbeddedServer, ServerConfig
from duplexkit.server.serve import Edge
from tests.server.conftest import FailsOnceModel, append, connect, small_limits, spoken_turn, tone_pcm16

RESPONSE_ORDER = [
    "response.created",
    "conversation.item.added",
    "response.output_item.added",
    "response.content_part.added",
    "response.speak",
    "response.output_audio.delta",
    "response.output_audio_transcript.delta",
]


async def test_a_spoken_turn_is_answered_in_protocol_order_with_server_side_metrics(
    server: EmbeddedServer,
) -> None:
    client = await connect(server.url)
    created = await client.until("session.created")
    assert created["session"]["capabilities"]["chunk_period_ms"] == 1000
    done = await spoken_turn(client)

    types = [e["type"] for e in client.events]
    start = types.index("response.created")
    assert types[start : start + len(RESPONSE_ORDER)] == RESPONSE_ORDER
    assert types.count("response.speak") == 1
    assert types[-5:] == [
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.done",
    ]
    assert types.count("response.output_audio.delta") == types.count("response.output_audio_transcript.delta")
    transcript = "".join(e["delta"] for e in client.of_type("response.output_audio_transcript.delta"))
    assert transcript == "This is a scripted reply."
    audio = b"".join(base64.b64decode(e["delta"]) for e in client.of_type("response.output_audio.delta"))
    assert len(audio) == 2 * round(len(transcript) * 0.060 * 24_000)  # 60 ms of pcm16 per character at 24 kHz

    created_metrics = client.of_type("response.created")[0]["response_request_metrics"]
    assert created_metrics["source"] == "server_monotonic_request_start"
    assert created_metrics["measurement_origin"] == {
        "ttft": "model_turn_request_start",
        "ttfp": "model_turn_request_start",
    }
    assert 50 <= created_metrics["ttfp_ms"] < 150  # first_output_ms=50, with room for a busy machine
    final = done["response_request_metrics"]
    assert done["response"]["status"] == "completed"
    assert final["ttft_ms"] == created_metrics["ttft_ms"] and final["ttfp_ms"] == created_metrics["ttfp_ms"]
    assert final["tpot_ms"] >= 4.0
    assert final["output_tokens"] == 5
    seqs = [e["server_event_seq"] for e in client.events]
    assert seqs == list(range(1, len(seqs) + 1))


async def test_every_listening_unit_is_acknowledged_with_one_listen(server: EmbeddedServer) -> None:
    client = await connect(server.url)
    await client.until("session.created")
    await client.send(append(tone_pcm16(3.0)))  # three speech units: the scripted model listens to each
    for _ in range(3):
        listen = await client.until("response.listen")
        assert listen["response"]["metadata"] == {"reason": "model_listen", "model_listen": True}
        assert "response_id" not in listen


async def test_autostart_0_requires_session_update_first(server: EmbeddedServer) -> None:
    client = await connect(server.url, "?autostart=0")
    await client.send({"type": "session.heartbeat", "event_id": "c1"})
    error = await client.until("error")
    assert error["error"]["code"] == "session_not_configured" and error["error"]["event_id"] == "c1"
    await client.send({"type": "session.update", "session": {"modalities": ["text"]}})
    assert (await client.recv())["type"] == "session.created"
    updated = await client.recv()
    assert updated["type"] == "session.updated" and updated["session"]["output_modalities"] == ["text"]


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("{not json", "invalid_json"),
        ("[1, 2]", "not_an_object"),
        ('{"type": "input_audio_buffer.teleport"}', "unknown_event"),
        ('{"type": "playback.ack", "response_id": "r"}', "missing_field"),
        ('{"type": "session.update", "session": {"temperature": "hot"}}', "invalid_value"),
        ('{"type": "input_audio_buffer.append", "audio": "!!!"}', "invalid_audio"),
        ('{"type": "input_audio_buffer.append", "audio": "AAAA"}', "invalid_audio"),  # 3 bytes of pcm16
        (
            '{"type": "input_audio_buffer.append", "audio": "", "input_audio_format": "mp3"}',
            "unsupported_audio_format",
        ),
        (
            '{"type": "input_audio_buffer.append", "audio": "", "video_frames": ["AAAA"]}',
            "invalid_video_frame",
        ),
        ('{"type": "playback.ack", "response_id": "nope", "played_ms": 1}', "unknown_response"),
        ('{"type": "response.cancel"}', "response_cancel_not_active"),
        ('{"type": "conversation.item.retrieve", "item_id": "nope"}', "item_retrieve_invalid_item_id"),
    ],
)
async def test_bad_input_gets_its_error_code_and_the_session_continues(
    server: EmbeddedServer, frame: str, code: str
) -> None:
    client = await connect(server.url)
    await client.until("session.created")
    await client.send(frame)
    error = await client.until("error")
    assert error["error"]["code"] == code
    assert error["error"]["type"] == "invalid_request_error" and error["error"]["retryable"] is False
    await client.send({"type": "session.heartbeat"})
    assert (await client.until("session.heartbeat_ack"))["type"] == "session.heartbeat_ack"


async def test_an_oversized_frame_is_refused_with_event_too_large() -> None:
    config = ServerConfig(limits=small_limits(max_event_bytes=10_000))
    async with EmbeddedServer(load_model("scripted", {}), config) as server:
        client = await connect(server.url)
        await client.until("session.created")
        await client.send(append(b"\0" * 20_000))
        assert (await client.until("error"))["error"]["code"] == "event_too_large"
        await client.send({"type": "session.heartbeat"})
        await client.until("session.heartbeat_ack")


async def test_capacity_refusal_is_retryable_and_a_slot_frees_after_close(edge: Edge) -> None:
    async with EmbeddedServer(load_model("scripted", {}), ServerConfig(max_sessions=1), edge=edge) as server:
        first = await connect(server.url)
        await first.until("session.created")
        second = await connect(server.url)
        refusal = await second.recv()
        assert refusal["error"] == {
            "type": "rate_limit_error",
            "code": "session_capacity_exhausted",
            "message": refusal["error"]["message"],
            "retryable": True,
        }
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await second.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013

        await first.send({"type": "session.close"})
        assert (await first.until("session.closed"))["reason"] == "client_close"
        for _ in range(100):
            if server.duplex.manager.active == 0:
                break
            await asyncio.sleep(0.02)
        third = await connect(server.url)
        assert (await third.recv())["type"] == "session.created"


async def test_session_close_is_answered_then_the_socket_closes_normally(server: EmbeddedServer) -> None:
    client = await connect(server.url)
    created = await client.until("session.created")
    await client.send({"type": "session.close", "reason": "done here"})
    closed = await client.until("session.closed")
    assert closed == {**closed, "session_id": created["session"]["id"], "reason": "done here"}
    with pytest.raises(websockets.ConnectionClosedOK):
        await client.recv()


@pytest.mark.parametrize("query", ["?autostart=0", ""])
async def test_a_connection_silent_past_the_config_timeout_is_closed_and_frees_its_slot(query: str) -> None:
    config = ServerConfig(limits=small_limits(config_timeout_s=0.2))
    async with EmbeddedServer(load_model("scripted", {}), config) as server:
        client = await connect(server.url, query)
        assert (await client.until("error"))["error"]["code"] == "config_timeout"
        assert (await client.recv())["type"] == "session.closed"
        assert client.events[-1]["reason"] == "config_timeout"
        with pytest.raises(websockets.ConnectionClosed):
            await client.recv()
        for _ in range(100):
            if server.duplex.manager.active == 0:
                break
            await asyncio.sleep(0.02)
        assert server.duplex.manager.active == 0


async def test_a_refused_session_update_leaves_the_model_settings_as_they_were(
    server: EmbeddedServer,
) -> None:
    client = await connect(server.url)
    await client.until("session.created")
    refused = {"modalities": [], "extra_body": {"reply": "Refused update applied."}}
    await client.send({"type": "session.update", "session": refused})
    assert (await client.until("error"))["error"]["code"] == "invalid_value"
    await spoken_turn(client)
    transcript = "".join(e["delta"] for e in client.of_type("response.output_audio_transcript.delta"))
    assert transcript == "This is a scripted reply."


async def test_api_keys_are_checked_before_admission(edge: Edge) -> None:
    config = ServerConfig(api_keys=frozenset({"sekret"}))
    async with EmbeddedServer(load_model("scripted", {}), config, edge=edge) as server:
        with pytest.raises(websockets.InvalidStatus) as refused:
            await connect(server.url)
        assert refused.value.response.status_code == 403
        assert server.duplex.manager.active == 0
        with pytest.raises(websockets.InvalidStatus):
            await connect(server.url, additional_headers={"Authorization": "Bearer wrong"})
        bearer = await connect(server.url, additional_headers={"Authorization": "Bearer sekret"})
        assert (await bearer.recv())["type"] == "session.created"
        browser = await connect(server.url, subprotocols=["realtime", "openai-insecure-api-key.sekret"])
        assert browser.ws.subprotocol == "realtime"
        assert (await browser.recv())["type"] == "session.created"


@pytest.mark.parametrize(
    ("grace_s", "query", "held"),
    [(0.0, "?duplex=1", False), (0.5, "?duplex=1", True), (0.5, "", False)],
    ids=["vllm-omni-resume-off", "vllm-omni-resume-on", "ga-resume-on"],
)
async def test_an_abrupt_disconnect_mid_response_leaves_the_server_and_other_sessions_intact(
    plugin: ModelPlugin, grace_s: float, query: str, held: bool
) -> None:
    """A resumable session (resume on, vLLM-Omni's dialect) holds its slot through the grace, then frees it;
    any other frees it at once (a GA client has no resume to come back with)."""
    resume = ResumeConfig(disconnect_grace_s=grace_s, reap_interval_s=0.05)
    async with EmbeddedServer(plugin, ServerConfig(resume=resume)) as server:
        other = await connect(server.url)
        await other.until("session.created")
        leaver = await connect(server.url, query)
        await leaver.until("session.created")
        await leaver.send(append(tone_pcm16(1.0)))
        await leaver.send({"type": "input_audio_buffer.commit"})
        await leaver.until("response.created")
        leaver.ws.transport.abort()  # no close frame
        lost_at = asyncio.get_running_loop().time()
        if held:
            await asyncio.sleep(0.2)
            assert server.duplex.manager.active == 2  # held through the grace
        done = await spoken_turn(other)
        assert done["response"]["status"] == "completed"
        for _ in range(200):
            if server.duplex.manager.active == 1:
                break
            await asyncio.sleep(0.02)
        assert server.duplex.manager.active == 1
        if held:
            assert asyncio.get_running_loop().time() - lost_at >= grace_s


async def test_a_client_that_stops_reading_is_dropped_instead_of_buffered_without_bound(edge: Edge) -> None:
    script = json.dumps([{"speak": "x" * 17}] * 500)  # every unit answers with a second of audio (~64 KB)
    plugin = load_model("scripted", {"first_output_ms": "0", "token_ms": "0", "script": script})
    config = ServerConfig(limits=small_limits(max_outbound_bytes=256_000))
    async with EmbeddedServer(plugin, config, edge=edge) as server:
        # A reader that never reads: websockets stops draining the socket once its small queue is full, and
        # a small fixed receive buffer keeps the kernel from absorbing megabytes on the server's behalf.
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        sock.connect(("127.0.0.1", int(server.url.split(":")[2].split("/")[0])))
        stalled = await connect(server.url, max_queue=1, sock=sock)
        one_second = append(tone_pcm16(1.0))
        for _ in range(500):
            if server.duplex.manager.active == 0:
                break
            try:  # without compression our sends fill the socket too, once the server stops reading it
                await asyncio.wait_for(stalled.send(one_second), 1.0)
            except (websockets.ConnectionClosed, TimeoutError):
                break
            await asyncio.sleep(0.001)
        for _ in range(200):
            if server.duplex.manager.active == 0:
                break
            await asyncio.sleep(0.02)
        assert server.duplex.manager.active == 0
        stalled.ws.transport.abort()  # the stalled client goes away (its unread bytes never drain)
        fresh = await connect(server.url)
        assert (await fresh.recv())["type"] == "session.created"


async def test_a_model_step_that_raises_fails_that_response_and_the_session_survives() -> None:
    script = '[{"listen": true}, {"speak": "Hello ", "end_of_turn": false}, {"listen": true}]'
    params = ScriptedParams.parse(ScriptedParams(), {"script": script, "first_output_ms": "0"})
    plugin = FailsOnceModel(params, fail_at=3)
    async with EmbeddedServer(plugin) as server:
        client = await connect(server.url)
        await client.until("session.created")
        await client.send(append(tone_pcm16(2.0)))  # unit 1: listen, unit 2: speak
        await client.until("response.created")
        await client.send(append(tone_pcm16(1.0)))  # the third step raises mid-response
        done = await client.until("response.done")
        assert done["response"]["status"] == "failed"
        assert "reason" not in done["response"]["status_details"]  # OpenAI's enum has none for it
        error = done["response"]["status_details"]["error"]  # where OpenAI reports it: no `error` event
        assert error["code"] == "model_step_failed" and error["retryable"] is True
        assert error["type"] == "server_error" and "boom" in error["message"]
        await client.send(append(tone_pcm16(1.0)))  # the fourth step works again
        assert (await client.until("response.listen"))["response"]["metadata"]["reason"] == "model_listen"
        assert client.of_type("error") == []


class _SlowSession(ScriptedSession):
    """Each step takes `STEP_S` before the scripted decisions: units queue up behind one another."""

    STEP_S = 0.3

    async def step(self, unit: Unit, request_started_at: float) -> AsyncIterator[Decision]:
        await asyncio.sleep(self.STEP_S)
        async for decision in super().step(unit, request_started_at):
            yield decision


class _SlowModel(ScriptedModel):
    def new_session(self) -> ScriptedSession:
        return _SlowSession(self)


async def test_server_ttfp_runs_from_the_unit_s_submission_and_its_queue_wait_is_reported() -> None:
    # Five 1 s units arrive in one append; the model takes 0.3 s a step and speaks on the fifth, which
    # waits for the four steps before it. Its TTFP starts when it was submitted, not when it was stepped.
    script = json.dumps([{"listen": True}] * 4 + [{"speak": "Hello."}])
    params = ScriptedParams.parse(ScriptedParams(), {"script": script, "first_output_ms": "0"})
    async with EmbeddedServer(_SlowModel(params)) as server:
        client = await connect(server.url)
        await client.until("session.created")
        await client.send(append(tone_pcm16(5.0)))
        done = await client.until("response.done")
        async with httpx.AsyncClient(base_url=server.http_url) as http:
            metrics = (await http.get("/metrics")).text
    timing = done["response_request_metrics"]
    queued_s = 4 * _SlowSession.STEP_S
    assert timing["queue_wait_ms"] >= 1000 * queued_s
    assert timing["ttfp_ms"] >= timing["queue_wait_ms"] + 1000 * _SlowSession.STEP_S
    assert "duplexkit_unit_queue_wait_seconds_count 5.0" in metrics


async def test_fifty_concurrent_sessions_have_correct_isolated_metrics(server: EmbeddedServer) -> None:
    async def one(i: int) -> tuple[str, float, str]:
        client = await connect(server.url)
        await client.until("session.created")
        first_output_ms = 100 + 10 * i
        reply = f"Reply number {i}."
        extra = {"first_output_ms": first_output_ms, "reply": reply}
        await client.send({"type": "session.update", "session": {"extra_body": extra}})
        await client.until("session.updated")
        done = await spoken_turn(client, seconds=1.0)
        transcript = "".join(e["delta"] for e in client.of_type("response.output_audio_transcript.delta"))
        ttfp = done["response_request_metrics"]["ttfp_ms"]
        assert transcript == reply
        assert ttfp >= first_output_ms, (i, ttfp)  # its own model's delay, not a faster neighbour's
        await client.ws.close()
        return done["response"]["id"], ttfp, transcript

    results = await asyncio.gather(*(one(i) for i in range(50)))
    assert len({response_id for response_id, _, _ in results}) == 50
    assert all(r[2] == f"Reply number {i}." for i, r in enumerate(results))


async def test_http_endpoints_report_health_models_and_prometheus_metrics(
    plugin: ModelPlugin, edge: Edge
) -> None:
    async with EmbeddedServer(plugin, edge=edge) as server:
        client = await connect(server.url)
        await client.until("session.created")
        await spoken_turn(client)
        async with httpx.AsyncClient(base_url=server.http_url) as http:
            health = (await http.get("/healthz")).json()
            assert health["status"] == "ok" and health["sessions"] == 1 and health["model"] == "scripted"
            models = (await http.get("/v1/models")).json()
            assert models["data"][0]["id"] == "scripted"
            metrics = (await http.get("/metrics")).text
        assert "duplexkit_sessions_active 1.0" in metrics
        assert "duplexkit_sessions_admitted_total 1.0" in metrics
        assert "duplexkit_response_ttfp_seconds_count 1.0" in metrics
        assert "duplexkit_unit_step_seconds_count" in metrics


async def test_the_alias_path_v1_duplex_serves_the_same_protocol(server: EmbeddedServer) -> None:
    client = await connect(server.url.replace("/v1/realtime", "/v1/duplex"))
    assert (await client.recv())["type"] == "session.created"


async def test_per_session_overrides_do_not_leak_between_sessions(server: EmbeddedServer) -> None:
    custom = await connect(server.url)
    await custom.until("session.created")
    await custom.send(
        {"type": "session.update", "session": {"temperature": 0.1, "extra_body": {"reply": "Custom."}}}
    )
    await custom.until("session.updated")
    plain = await connect(server.url)
    await plain.until("session.created")
    await spoken_turn(custom)
    await spoken_turn(plain)
    text = lambda c: "".join(e["delta"] for e in c.of_type("response.output_audio_transcript.delta"))  # noqa: E731
    assert text(custom) == "Custom."
    assert text(plain) == "This is a scripted reply."


class _ListeningSession(ScriptedSession):
    """Records what the server says the listener heard of each reply."""

    heard_log: list[str]

    def __init__(self, plugin: ScriptedModel) -> None:
        super().__init__(plugin)
        self.heard_log = []

    def heard(self, text: str) -> None:
        self.heard_log.append(text)


class _ListeningModel(ScriptedModel):
    sessions: list[_ListeningSession]

    def new_session(self) -> _ListeningSession:
        session = _ListeningSession(self)
        self.sessions = [*getattr(self, "sessions", []), session]
        return session


async def test_the_model_learns_what_was_heard_from_the_playback_ledger_not_what_it_generated() -> None:
    plugin = _ListeningModel(ScriptedParams(first_output_ms=0, token_ms=0))
    async with EmbeddedServer(plugin) as server:
        client = await connect(server.url)
        await client.until("session.created")
        await client.send(append(tone_pcm16(1.0)))
        await client.send({"type": "input_audio_buffer.commit"})
        created = await client.until("response.created")
        response_id = created["response"]["id"]
        await client.until("response.output_audio.delta")  # the first second of a 1.5 s reply
        await client.send({"type": "playback.ack", "response_id": response_id, "played_ms": 1000})
        assert (await client.until("playback.acknowledged"))["played_ms"] == 1000
        await client.send({"type": "barge_in"})
        done = await client.until("response.done")
        assert done["response"]["status"] == "cancelled"
        [session] = plugin.sessions
        assert session.heard_log[-1] == "This is a scripted "  # the first segment: what 1000 ms played
        assert "This is a scripted reply." not in session.heard_log


async def test_input_beyond_the_pending_bound_is_refused_with_a_retryable_backpressure_error() -> None:
    script = json.dumps([{"speak": "Slow."}] * 20)  # every step waits 500 ms: input piles up
    plugin = load_model("scripted", {"first_output_ms": "500", "script": script})
    config = ServerConfig(limits=small_limits(max_pending_input_bytes=3 * 64_000))  # three 1 s units
    async with EmbeddedServer(plugin, config) as server:
        client = await connect(server.url)
        await client.until("session.created")
        for _ in range(6):
            await client.send(append(tone_pcm16(1.0)))
        error = await client.until("error")
        assert error["error"]["code"] == "input_backpressure"
        assert error["error"]["type"] == "rate_limit_error" and error["error"]["retryable"] is True
        await client.send({"type": "session.heartbeat"})
        await client.until("session.heartbeat_ack")  # the session goes on


async def test_a_session_idle_past_its_idle_timeout_is_closed() -> None:
    async with EmbeddedServer(load_model("scripted", {})) as server:
        client = await connect(server.url)
        await client.until("session.created")
        await client.send({"type": "session.update", "session": {"idle_timeout_s": 0.3}})
        await client.until("session.updated")
        assert (await client.until("error", timeout=3))["error"]["code"] == "idle_timeout"
        assert (await client.until("session.closed"))["reason"] == "idle_timeout"


@pytest.mark.parametrize("enabled", [False, True])
async def test_permessage_deflate_is_negotiated_only_when_the_server_is_told_to(
    enabled: bool, edge: Edge
) -> None:
    plugin = load_model("scripted", {})
    if edge == "picows" and enabled:  # picows has no permessage-deflate: asking it for that is an error
        with pytest.raises(ValueError, match="permessage-deflate"):
            EmbeddedServer(plugin, ServerConfig(ws_compression=True), edge=edge)
        return
    async with EmbeddedServer(plugin, ServerConfig(ws_compression=enabled), edge=edge) as server:
        ws = await websockets.connect(server.url, compression="deflate")  # a client offering it
        extensions = ws.response.headers.get("Sec-WebSocket-Extensions") or ""
        assert ("permessage-deflate" in extensions) is enabled
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.close()
