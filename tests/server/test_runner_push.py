"""A session on an edge that pushes its messages and sends without waiting (the default, picows): no reader
or writer task, and a `session.update` the model takes time to prepare still holds back what came after
it, in order, within the pending-input bound."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from duplexkit.models import ModelSession
from duplexkit.models.scripted import ScriptedModel, ScriptedSession
from duplexkit.server import EmbeddedServer, ServerConfig
from tests.server.conftest import append, connect, small_limits, tone_pcm16


class _SlowPrepare(ScriptedModel):
    """The scripted model, whose sessions prepare each accepted update only when `gate` opens."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.preparing = asyncio.Event()

    def new_session(self) -> ModelSession:
        plugin = self

        class Session(ScriptedSession):
            async def prepare(self) -> None:
                plugin.preparing.set()
                await plugin.gate.wait()

        return Session(self)


def _task_names() -> set[str]:
    return {task.get_name() for task in asyncio.all_tasks()}


async def test_a_session_on_the_default_edge_runs_no_reader_or_writer_task() -> None:
    async with EmbeddedServer(ScriptedModel(), ServerConfig()) as server:
        client = await connect(server.url)
        await client.until("session.created")
        await client.send(append(tone_pcm16(1.0)))
        await client.until("response.listen")
        names = _task_names()
        assert "stepper" in names  # the session is running
        assert not {"reader", "writer"} & names
        await client.ws.close()


async def test_messages_after_an_update_being_prepared_wait_for_it_and_keep_their_order() -> None:
    plugin = _SlowPrepare()
    async with EmbeddedServer(plugin, ServerConfig()) as server:
        client = await connect(server.url, "?autostart=0")
        await client.send({"type": "session.update", "session": {"instructions": "be brief"}})
        await asyncio.wait_for(plugin.preparing.wait(), 5)
        await client.send(append(tone_pcm16(1.0)))
        await client.send({"type": "session.heartbeat", "event_id": "hb"})
        with pytest.raises(TimeoutError):  # nothing is answered before the update is prepared
            await client.recv(timeout=0.3)
        plugin.gate.set()
        await client.until("session.heartbeat_ack")
        if not client.of_type("response.listen"):  # the model's answer may trail the heartbeat's
            await client.until("response.listen")
        kinds = [e["type"] for e in client.events]
        assert kinds[:2] == ["session.created", "session.updated"]  # the update first, then what it held
        assert client.of_type("response.listen")[0]["unit_end_ms"] == 1000.0
        await client.ws.close()


async def test_messages_held_past_the_pending_input_bound_are_refused_with_a_code() -> None:
    plugin = _SlowPrepare()
    frame = append(tone_pcm16(0.1))
    limits = small_limits(max_pending_input_bytes=3 * len(frame) + 100)
    async with EmbeddedServer(plugin, ServerConfig(limits=limits)) as server:
        client = await connect(server.url, "?autostart=0")
        await client.send({"type": "session.update", "session": {}})
        await asyncio.wait_for(plugin.preparing.wait(), 5)
        for _ in range(5):
            await client.send(frame)
        error: dict[str, Any] = await client.until("error")
        assert error["error"]["code"] == "input_backpressure"
        plugin.gate.set()
        await client.until("session.updated")
        await client.send({"type": "input_audio_buffer.commit"})
        committed = await client.until("input_audio_buffer.committed")
        assert committed["audio_end_ms"] == 300  # the three appends held, applied once it was prepared
        assert len(client.of_type("error")) == 2  # the two past the bound, and nothing else
        await client.ws.close()
