"""Session resume over real sockets, driven by a raw client that speaks vLLM-Omni's documented contract
(`session.resume{session_id, resume_token, last_received_server_event_seq}` on `?duplex=1&autostart=0`)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import websockets

from duplexkit.engine.journal import ResumeConfig
from duplexkit.models import ModelPlugin, load_model
from duplexkit.server import EmbeddedServer, ServerConfig
from tests.server.conftest import RawClient, append, connect, tone_pcm16

RESUME_QUERY = "?duplex=1&autostart=0"


PLUGIN_ARGS = {"first_output_ms": "50", "token_ms": "5", "chunk_period_ms": "250", "reply": "Hello there."}


@pytest.fixture
def plugin() -> ModelPlugin:
    """Quarter-second units and a reply spread over three of them, so a reply is in flight for a while."""
    return load_model("scripted", PLUGIN_ARGS)


@pytest.fixture(params=["per_session", "batched"])
def either_plugin(request: pytest.FixtureRequest) -> ModelPlugin:
    """The same model stepped per session or through `step_batch` (resume must not care which)."""
    batching = {"batch_size": "4", "batch_wait_ms": "5"} if request.param == "batched" else {}
    return load_model("scripted", PLUGIN_ARGS | batching)


async def open_session(server: EmbeddedServer) -> tuple[RawClient, dict[str, Any]]:
    client = await connect(server.url, RESUME_QUERY)
    await client.send({"type": "session.update", "session": {"turn_detection": None}})
    created = await client.until("session.created")
    await client.until("session.updated")
    return client, created


async def resume(server: EmbeddedServer, created: dict[str, Any], last_seq: int, **fields: Any) -> RawClient:
    client = await connect(server.url, RESUME_QUERY)
    request = {
        "type": "session.resume",
        "session_id": created["session"]["id"],
        "resume_token": created["resume_token"],
        "last_received_server_event_seq": last_seq,
    }
    await client.send(request | fields)
    return client


def resume_server(plugin: ModelPlugin, **resume: Any) -> EmbeddedServer:
    return EmbeddedServer(plugin, ServerConfig(max_sessions=4, resume=ResumeConfig(**resume)))


async def test_a_session_dropped_mid_response_resumes_and_replays_what_was_missed_in_order(
    either_plugin: ModelPlugin,
) -> None:
    async with resume_server(either_plugin) as server:
        client, created = await open_session(server)
        assert created["session"]["capabilities"]["supports_session_resume"] is True
        assert created["attachment_generation"] == 1 and created["resume_token"]
        await client.send(append(tone_pcm16(1.5)))
        await client.send({"type": "input_audio_buffer.commit"})
        await client.until("response.created")
        client.ws.transport.abort()  # no close frame: the network went away
        before = client.events
        last_seq = before[-1]["server_event_seq"]
        await asyncio.sleep(1.0)  # the reply runs on while nobody is attached

        again = await resume(server, created, last_seq)
        resumed = await again.recv()
        assert resumed["type"] == "session.resumed"
        assert resumed["attachment_generation"] == 2
        assert resumed["resume_token"] != created["resume_token"]
        assert resumed["session"]["id"] == created["session"]["id"]
        replay = [await again.recv() for _ in range(resumed["replayed_events"])]
        assert replay, "the detached session kept stepping, so there is something to replay"
        assert any(e["type"] == "response.done" for e in replay)  # produced while detached
        seqs = [e["server_event_seq"] for e in before + replay]
        assert seqs == list(range(1, len(seqs) + 1))  # nothing lost, nothing twice
        assert resumed["server_event_seq"] == seqs[-1]  # the journal's head: where the replay ends
        assert len({e["event_id"] for e in before + replay}) == len(seqs)

        # Replayed byte for byte: the server's journal holds exactly what the client now has.
        runner = next(iter(server.duplex.resumable._live.values()))
        assert runner.journal is not None
        journal = runner.journal.replay_after(last_seq)
        assert [json.loads(e.text) for e in journal.entries] == replay  # type: ignore[union-attr]

        # The session is live on the new socket; seqs carry on.
        await again.send({"type": "session.heartbeat"})
        ack = await again.until("session.heartbeat_ack")
        assert ack["server_event_seq"] == seqs[-1] + 1
        await again.send({"type": "session.close"})
        await again.until("session.closed")


async def test_acked_events_leave_the_journal_and_a_resume_before_them_must_resync(
    plugin: ModelPlugin,
) -> None:
    async with resume_server(plugin) as server:
        client, created = await open_session(server)
        await client.send({"type": "session.heartbeat"})
        await client.until("session.heartbeat_ack")
        head = client.events[-1]["server_event_seq"]
        await client.send({"type": "session.event_ack", "server_event_seq": head})
        await client.send({"type": "session.heartbeat"})
        await client.until("session.heartbeat_ack")  # the ack was processed first, and answered nothing
        assert [e["type"] for e in client.events].count("error") == 0
        client.ws.transport.abort()
        again = await resume(server, created, 1)
        resumed = await again.recv()
        assert resumed["type"] == "session.resumed" and resumed["replayed_events"] == 0
        resync = await again.recv()
        assert resync["type"] == "session.resync_required"
        assert resync["reason"] == "journal_gap" and resync["first_available_seq"] == head + 1


async def test_an_attachment_still_open_is_replaced(plugin: ModelPlugin) -> None:
    async with resume_server(plugin) as server:
        client, created = await open_session(server)
        last = client.events[-1]["server_event_seq"]
        again = await resume(server, created, last)
        assert (await again.recv())["type"] == "session.resumed"
        replaced = await client.until("session.replaced")
        assert replaced["attachment_generation"] == 2
        with pytest.raises(websockets.ConnectionClosedOK):
            await client.recv()
        await again.send({"type": "session.heartbeat"})
        await again.until("session.heartbeat_ack")


async def error_code(client: RawClient) -> str:
    """The code of a refused resume: a handshake error, so flat in the vLLM-Omni dialect
    (`{type: "error", error: "<message>", code}`), then the socket closes."""
    event = await client.until("error")
    with pytest.raises(websockets.ConnectionClosed):
        await client.recv()
    assert isinstance(event["error"], str), event
    return str(event["code"])


async def test_refused_resumes_get_their_final_codes(plugin: ModelPlugin) -> None:
    async with resume_server(plugin) as server:
        client, created = await open_session(server)
        last = client.events[-1]["server_event_seq"]
        assert await error_code(await resume(server, created, last, resume_token="forged")) == (
            "invalid_resume_token"
        )
        assert await error_code(await resume(server, created, last + 50)) == "invalid_session_resume"
        assert await error_code(await resume(server, created, last, session_id="sess_nope")) == (
            "invalid_session_resume"
        )
        await client.send(
            {
                "type": "session.resume",
                **{k: created[k] for k in ("resume_token",)},
                "session_id": created["session"]["id"],
                "last_received_server_event_seq": 0,
            }
        )
        assert (await client.until("error"))["error"][
            "code"
        ] == "invalid_session_resume"  # not a first message
        await client.send({"type": "session.close"})
        await client.until("session.closed")
        assert await error_code(await resume(server, created, last)) == "invalid_session_resume"  # ended

    async with resume_server(plugin, disconnect_grace_s=0) as server:
        client, created = await open_session(server)
        assert created["session"]["capabilities"]["supports_session_resume"] is False
        assert "resume_token" not in created
        created["resume_token"] = "anything"
        assert await error_code(await resume(server, created, 1)) == "unsupported_session_resume"


async def test_past_the_grace_the_session_expires_and_its_slot_is_freed_once(plugin: ModelPlugin) -> None:
    async with EmbeddedServer(
        plugin,
        ServerConfig(max_sessions=1, resume=ResumeConfig(disconnect_grace_s=0.6, reap_interval_s=0.05)),
    ) as server:
        client, created = await open_session(server)
        last = client.events[-1]["server_event_seq"]
        client.ws.transport.abort()
        await asyncio.sleep(0.2)
        # At capacity the detached session still holds its slot: a new session is refused...
        refused = await connect(server.url)
        assert (await refused.recv())["error"]["code"] == "session_capacity_exhausted"
        # ...and a resume, which takes no new slot, succeeds.
        again = await resume(server, created, last)
        resumed = await again.recv()
        assert resumed["type"] == "session.resumed"
        again.ws.transport.abort()
        await asyncio.sleep(1.0)
        assert server.duplex.manager.active == 0
        late = await resume(server, created | {"resume_token": resumed["resume_token"]}, last)
        expired = await late.recv()
        assert (expired["type"], expired["reason"]) == ("session.expired", "disconnect_grace_expired")
        assert await error_code(late) == "session_resume_expired"
        admitted = server.duplex.metrics.sessions_admitted._value.get()
        assert admitted == 1 and server.duplex.manager.active == 0


async def test_an_idle_session_expires_with_idle_ttl(plugin: ModelPlugin) -> None:
    async with resume_server(plugin, idle_ttl_s=0.3, reap_interval_s=0.05) as server:
        client, _ = await open_session(server)
        expired = await client.until("session.expired", timeout=3)
        assert expired["reason"] == "idle_ttl_expired"
        assert (await client.until("session.closed"))["reason"] == "idle_ttl_expired"


async def test_a_resume_in_another_dialect_is_refused_and_the_detached_session_stays_routable(
    plugin: ModelPlugin,
) -> None:
    """The journal holds frames rendered and numbered in the session's dialect (vLLM-Omni here), so a resume
    over a GA connection is refused with a coded error; the session is untouched, still holds its slot
    (a cluster's router finds it by `session_ids`) and resumes in its own dialect."""
    async with resume_server(plugin) as server:
        client, created = await open_session(server)
        session_id = created["session"]["id"]
        client.ws.transport.abort()
        last_seq = client.events[-1]["server_event_seq"]
        await asyncio.sleep(0.2)
        assert session_id in server.duplex.manager.session_ids

        ga = await connect(server.url, "?autostart=0")
        request = {
            "type": "session.resume",
            "session_id": session_id,
            "resume_token": created["resume_token"],
            "last_received_server_event_seq": last_seq,
        }
        await ga.send(request)
        refusal = await ga.until("error")
        assert refusal["error"]["code"] == "invalid_session_resume"
        assert refusal["error"]["param"] == "dialect"
        with pytest.raises(websockets.ConnectionClosed):
            await ga.recv()
        assert session_id in server.duplex.manager.session_ids

        again = await resume(server, created, last_seq)
        resumed = await again.recv()
        assert resumed["type"] == "session.resumed" and resumed["session"]["id"] == session_id


async def test_a_detached_session_holds_no_request_open_and_a_drain_still_closes_it(
    plugin: ModelPlugin,
) -> None:
    """Driven through the ASGI interface as a server (uvicorn, Ray Serve's proxy) calls it: the call for a
    connection returns once its socket is gone, though the session lives on for resume; a drain then
    closes that detached session too."""
    from duplexkit.server import DuplexServer
    from duplexkit.server.asgi import asgi_app

    duplex = DuplexServer(plugin, ServerConfig(max_sessions=4))
    app = asgi_app(duplex)
    received: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    created = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message.get("type") == "websocket.send" and "session.created" in message.get("text", ""):
            created.set()

    scope = {
        "type": "websocket",
        "asgi": {"version": "3.0"},
        "scheme": "ws",
        "path": "/v1/realtime",
        "raw_path": b"/v1/realtime",
        "root_path": "",
        "query_string": b"duplex=1",
        "headers": [(b"host", b"127.0.0.1")],
        "subprotocols": [],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    await received.put({"type": "websocket.connect"})
    call = asyncio.create_task(app(scope, received.get, send))
    await asyncio.wait_for(created.wait(), 5)
    await received.put({"type": "websocket.disconnect", "code": 1006})
    await asyncio.wait_for(call, 5)  # the connection's request is over ...
    assert duplex.manager.active == 1  # ... and the session lives on, detached, resumable
    await asyncio.wait_for(duplex.drain(), 10)
    assert duplex.manager.active == 0
