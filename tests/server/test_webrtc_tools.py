"""A tool round trip on a WebRTC call: the call's `session` offers the tool, the spoken turn (on the
microphone track) is answered by a function call on the `oai-events` channel, the output and
`response.create` go back on the channel, and the answer is spoken on the call's track."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

pytest.importorskip("aiortc")

from duplexkit.models import ModelPlugin, load_model
from duplexkit.server import EmbeddedServer
from tests.server.conftest import WEATHER_CALLS
from tests.server.test_tools_e2e import WEATHER
from tests.server.webrtc_peer import CallPeer, tone


@pytest.fixture
async def server() -> AsyncIterator[EmbeddedServer]:
    args = {"first_output_ms": "50", "token_ms": "5", "chunk_period_ms": "200", "tool_calls": WEATHER_CALLS}
    plugin: ModelPlugin = load_model("scripted", {**args, "reply": "It is {output}."})
    async with EmbeddedServer(plugin) as srv:
        yield srv


async def test_a_function_call_and_its_spoken_answer_over_a_call(server: EmbeddedServer) -> None:
    peer = CallPeer(tone(1.0))
    try:
        response = await peer.call(server.http_url, session={"type": "realtime", "tools": [WEATHER]})
        assert response.status_code == 201, response.text
        args = await peer.until("response.function_call_arguments.done", timeout=15)
        assert (args["name"], json.loads(args["arguments"])) == ("get_weather", {"city": "Paris"})
        done = await peer.until("response.done")
        assert [i["type"] for i in done["response"]["output"]] == ["function_call"]
        answered_at = asyncio.get_running_loop().time()
        peer.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": args["call_id"], "output": "21 degrees"},
            }
        )
        peer.send({"type": "response.create"})
        said = await peer.until("response.output_audio_transcript.done", timeout=15)
        assert said["transcript"] == "It is 21 degrees."
        started = await peer.until("output_audio_buffer.started")  # the answer rides the call's track
        assert started["response_id"] != done["response"]["id"]
        for _ in range(100):
            if peer.heard_audio_after(answered_at) is not None:
                break
            await asyncio.sleep(0.05)
        assert peer.heard_audio_after(answered_at) is not None
    finally:
        await peer.close()
