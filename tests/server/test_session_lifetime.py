"""A session's lifetime follows what its client did: a client that closed its socket has left (the session
ends and frees its slot at once), a socket lost without a close frame detaches only a resumable session
(resume on, vLLM-Omni's dialect), and the lease (grace, idle TTL, renewed by client frames and model
output) governs a detached session as it does an attached one.

Clients: the official `openai` SDK (GA and beta realtime connections, which say goodbye by closing the
socket) and raw `websockets` connections speaking each dialect's documented contract."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
import pytest
from openai import AsyncOpenAI

from duplexkit.engine.journal import ResumeConfig
from duplexkit.models import ModelPlugin, load_model
from duplexkit.server import EmbeddedServer, ServerConfig
from duplexkit.server.serve import Edge
from tests.server.conftest import RawClient, append, connect, tone_pcm16

REPLY = "This is a scripted reply."


def _sdk(server: EmbeddedServer) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key="unused", base_url=f"{server.http_url}/v1", websocket_base_url=server.url[: -len("/realtime")]
    )


def _speech_b64(rate: int, seconds: float = 1.0) -> str:
    t = np.arange(round(rate * seconds)) / rate
    return base64.b64encode((0.2 * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2").tobytes()).decode()


async def _one_sdk_turn(server: EmbeddedServer, beta: bool) -> str:
    """One person's session as the SDK's docs show it: connect, one spoken turn, leave the block (the SDK
    closes the socket; it has no other goodbye). Returns the reply's transcript."""
    sdk = _sdk(server)
    manager = sdk.beta.realtime.connect(model="scripted") if beta else sdk.realtime.connect(model="scripted")
    transcript: list[str] = []
    async with manager as connection:
        created = await asyncio.wait_for(connection.recv(), 5)
        assert created.type == "session.created", created  # not the capacity refusal
        await connection.input_audio_buffer.append(audio=_speech_b64(24_000))  # OpenAI's PCM rate, both APIs
        await connection.input_audio_buffer.commit()
        async with asyncio.timeout(10):
            async for event in connection:
                if event.type in (
                    "response.audio_transcript.delta",
                    "response.output_audio_transcript.delta",
                ):
                    transcript.append(event.delta)  # type: ignore[union-attr]
                elif event.type == "response.done":
                    break
                elif event.type == "error":
                    raise AssertionError(event.error)  # type: ignore[union-attr]
    return "".join(transcript)


@pytest.mark.parametrize("beta", [False, True], ids=["ga", "beta"])
async def test_ten_openai_sdk_users_in_a_row_are_each_admitted_by_a_two_slot_server(
    plugin: ModelPlugin, beta: bool
) -> None:
    """Resume is on (the default): still, a GA or beta session ends with its socket, so nobody who left
    keeps a slot from the next person."""
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=2)) as server:
        assert server.duplex.config.resume.enabled
        for _ in range(10):
            assert await _one_sdk_turn(server, beta) == REPLY
        await _until_no_session(server)
        assert server.duplex.metrics.sessions_admitted._value.get() == 10
        assert server.duplex.manager.active == 0


async def _until_no_session(server: EmbeddedServer) -> None:
    """Wait (bounded far below the 30 s grace a detached session would keep its slot) for 0 slots in use."""
    for _ in range(250):
        if server.duplex.manager.active == 0:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{server.duplex.manager.active} slots still in use")


@pytest.mark.parametrize("code", [1000, 1001])
@pytest.mark.parametrize("query", ["", "?dialect=beta", "?duplex=1"], ids=["ga", "beta", "vllm_omni"])
async def test_a_clean_close_ends_the_session_at_once_in_every_dialect(
    plugin: ModelPlugin, query: str, code: int
) -> None:
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=1)) as server:
        client = await connect(server.url, query)
        created = await client.until("session.created")
        await client.send(append(tone_pcm16(0.5)))
        await client.ws.close(code)
        await _until_no_session(server)
        newcomer = await connect(server.url)
        assert (await newcomer.recv())["type"] == "session.created"
        if query == "?duplex=1":  # resumable, yet it ended: a resume learns it was the client's close
            refusal = await _resume(server, created)
            assert refusal["code"] == "invalid_session_resume"
            assert "client_close" in refusal["error"]


async def _resume(server: EmbeddedServer, created: dict[str, Any]) -> dict[str, Any]:
    again = await connect(server.url, "?duplex=1&autostart=0")
    await again.send(
        {
            "type": "session.resume",
            "session_id": created["session"]["id"],
            "resume_token": created["resume_token"],
            "last_received_server_event_seq": 1,
        }
    )
    return await again.recv()


@pytest.mark.parametrize("query", ["", "?dialect=beta"], ids=["ga", "beta"])
async def test_ga_and_beta_sessions_never_offer_resume(plugin: ModelPlugin, query: str) -> None:
    async with EmbeddedServer(plugin, ServerConfig()) as server:
        client = await connect(server.url, query)
        created = await client.until("session.created")
        assert created["session"]["capabilities"]["supports_session_resume"] is False
        assert "resume_token" not in created


async def _open_resumable(server: EmbeddedServer) -> tuple[RawClient, dict[str, Any]]:
    client = await connect(server.url, "?duplex=1&autostart=0")
    await client.send({"type": "session.update", "session": {"turn_detection": None}})
    created = await client.until("session.created")
    await client.until("session.updated")
    return client, created


async def test_a_detached_session_is_still_reaped_by_its_idle_ttl(plugin: ModelPlugin) -> None:
    """A long grace does not keep an idle detached session alive: the idle TTL reaps it first."""
    resume = ResumeConfig(disconnect_grace_s=30.0, idle_ttl_s=0.4, reap_interval_s=0.05)
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=1, resume=resume)) as server:
        client, created = await _open_resumable(server)
        client.ws.transport.abort()  # lost, no close frame: it detaches
        await asyncio.sleep(0.1)
        assert server.duplex.manager.active == 1
        await _until_no_session(server)
        late = await connect(server.url, "?duplex=1&autostart=0")
        await late.send(
            {
                "type": "session.resume",
                "session_id": created["session"]["id"],
                "resume_token": created["resume_token"],
                "last_received_server_event_seq": 1,
            }
        )
        expired = await late.recv()
        assert (expired["type"], expired["reason"]) == ("session.expired", "idle_ttl_expired")


async def test_appends_renew_the_lease() -> None:
    """Appends too short to close a unit (so no model step renews it): the client frames alone keep the
    session alive well past its idle TTL; once they stop, it expires."""
    plugin = load_model("scripted", {"chunk_period_ms": "1000"})
    resume = ResumeConfig(idle_ttl_s=0.5, reap_interval_s=0.05)
    async with EmbeddedServer(plugin, ServerConfig(resume=resume)) as server:
        client, _ = await _open_resumable(server)
        loop = asyncio.get_running_loop()
        started = loop.time()
        while loop.time() - started < 1.5:  # three idle TTLs
            await client.send(append(tone_pcm16(0.01, amplitude=0.0)))
            await asyncio.sleep(0.1)
        await client.send({"type": "session.heartbeat"})
        await client.until("session.heartbeat_ack")  # still alive after 3 TTLs of appends only
        assert not client.of_type("session.expired")
        expired = await client.until("session.expired", timeout=5)
        assert expired["reason"] == "idle_ttl_expired"


async def test_model_output_renews_the_lease() -> None:
    """A reply produced over longer than the idle TTL, with the client silent since its commit: the
    session lives until the reply is done, then expires."""
    # 27 characters at 60 ms each: 7 quarter-second units of reply, stepped as the silence continues.
    plugin = load_model("scripted", {"first_output_ms": "50", "token_ms": "5", "chunk_period_ms": "250"})
    resume = ResumeConfig(idle_ttl_s=0.6, reap_interval_s=0.05)
    async with EmbeddedServer(plugin, ServerConfig(resume=resume)) as server:
        client, _ = await _open_resumable(server)
        await client.send(append(tone_pcm16(0.5)))
        await client.send({"type": "input_audio_buffer.commit"})  # the client's last frame
        committed_at = asyncio.get_running_loop().time()
        done = await client.until("response.done", timeout=10)
        took = asyncio.get_running_loop().time() - committed_at
        assert took > resume.idle_ttl_s  # the reply outlasted the TTL (else this proves nothing)
        assert not client.of_type("session.expired")
        assert done["response"]["status"] == "completed"
        expired = await client.until("session.expired", timeout=5)
        assert expired["reason"] == "idle_ttl_expired"


async def test_each_edge_tells_a_close_from_a_loss(plugin: ModelPlugin, edge: Edge) -> None:
    """Every edge (the two native ones and ASGI under uvicorn) reports how the socket went: a resumable
    session whose client closed ends; one whose socket was lost detaches and keeps its slot."""
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=2), edge=edge) as server:
        closer, _ = await _open_resumable(server)
        await closer.ws.close()
        await _until_no_session(server)
        loser, _ = await _open_resumable(server)
        loser.ws.transport.abort()
        await asyncio.sleep(0.3)
        assert server.duplex.manager.active == 1  # detached, awaiting its resume


@pytest.mark.parametrize("edge", ["picows", "websockets"])
async def test_on_a_native_edge_a_close_frame_without_a_code_is_a_close(
    plugin: ModelPlugin, edge: Edge
) -> None:
    """A browser's `ws.close()` sends a close frame with no code (1005): on a native edge, which sees the
    frame itself, the client has left and the resumable session ends at once."""
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=2), edge=edge) as server:
        closer, _ = await _open_resumable(server)
        # An empty, masked close frame, written as a browser sends it (the client library will not send 1005).
        closer.ws.transport.write(b"\x88\x80\x00\x00\x00\x00")
        await _until_no_session(server)
