"""Function calls in vLLM-Omni's dialect (`?duplex=1`), held to vLLM-Omni's own code rather than ours:
`vllm_omni/engine/duplex/session/tools.py` (its `DuplexToolLedger`), `session/control.py` and
`session/model_channel.py` @ cec5f837 (vllm-project/vllm-omni), and its realtime projection of a call
(`_function_call_done_events`, `resolve_create_item`); and how its Nemotron VoiceChat deployment takes
tools (`extra_body.realtime_tools`: `nemotron_voicechat/duplex/serving_adapter.py` `_normalized_tools`
@ 30a90c24).

- A call reaches the client in a response whose `output` is the call (vLLM-Omni gives each call a response
  of its own; the scripted model says nothing before it): `conversation.item.created` with the complete
  `function_call` item (`call_id`, `name`, `arguments`, `status: completed`: its projector announces the
  call whole, in `response.output_item.added` too), `response.function_call_arguments.done` without a
  `name` (its `FunctionCallArgumentsDone` has no such field), and `response.done` whose `output` is the call;
  `rate_limits.updated` follows every `response.done`.
- An accepted `function_call_output` is announced (`conversation.item.created`) and the session continues
  by itself (`maybe_continue_response`): the spoken answer comes with no `response.create`.
- An output whose `call_id` names no function call, a second output, or an output that is not a string is
  `invalid_function_call_output` (its projector refuses those before its ledger); an output for a call a
  barge-in retired is `stale_function_call_output` (its ledger: the epoch moved on). The session goes on.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from duplexkit.models import ModelPlugin
from duplexkit.server import EmbeddedServer
from tests.server.conftest import RawClient, append, connect, tone_pcm16, weather_tool_plugin

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture
def plugin() -> ModelPlugin:
    return weather_tool_plugin()


NEMOTRON_TOOLS = {
    "auto_response": True,
    "realtime_tools": [{"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}],
}
"""How vLLM-Omni's Nemotron VoiceChat deployment takes tools (`serving_adapter._normalized_tools`)."""


async def _open(server: EmbeddedServer, *, nemotron: bool = False) -> RawClient:
    """A session as vLLM-Omni's clients open one (`duplex=1`, `autostart=0`), offering the weather tool in
    `session.tools` (its `session.update`) or, as its Nemotron deployment takes them, in `extra_body`."""
    client = await connect(server.url, "?duplex=1&autostart=0")
    session = {"extra_body": NEMOTRON_TOOLS} if nemotron else {"tools": [WEATHER], "tool_choice": "auto"}
    await client.send({"type": "session.update", "session": session})
    updated = await client.until("session.updated")
    assert [tool["name"] for tool in updated["session"]["tools"]] == ["get_weather"]
    return client


async def _call(client: RawClient) -> dict[str, Any]:
    """Speak a turn; the `response.done` of the response that calls the tool."""
    await client.send(append(tone_pcm16(1.0)))
    await client.send({"type": "input_audio_buffer.commit"})
    return await client.until("response.done", timeout=10)


def _items(client: RawClient, event_type: str, kind: str) -> list[dict[str, Any]]:
    """The items of `kind` that the events of `event_type` read so far carry."""
    return [e["item"] for e in client.of_type(event_type) if e["item"]["type"] == kind]


async def _output(client: RawClient, call_id: str, output: object = "21 degrees") -> None:
    item = {"type": "function_call_output", "call_id": call_id, "output": output}
    await client.send({"type": "conversation.item.create", "item": item})


@pytest.mark.parametrize("nemotron", [False, True], ids=["session_tools", "extra_body_realtime_tools"])
async def test_the_call_comes_whole_and_its_answer_needs_no_response_create(
    server: EmbeddedServer, nemotron: bool
) -> None:
    client = await _open(server, nemotron=nemotron)
    done = await _call(client)
    [call] = done["response"]["output"]
    assert (call["type"], call["name"], json.loads(call["arguments"])) == (
        "function_call",
        "get_weather",
        {"city": "Paris"},
    )
    assert done["response"]["status"] == "completed"
    assert (await client.recv())["type"] == "rate_limits.updated"
    [args_done] = client.of_type("response.function_call_arguments.done")
    assert "name" not in args_done
    assert (args_done["call_id"], args_done["item_id"], args_done["response_id"]) == (
        call["call_id"],
        call["id"],
        done["response"]["id"],
    )
    assert args_done["arguments"] == call["arguments"]
    announced = _items(client, "conversation.item.created", "function_call")
    [added] = _items(client, "response.output_item.added", "function_call")
    for item in (*announced, added):  # whole at once: a client may take the call from either
        assert (item["id"], item["call_id"], item["name"]) == (call["id"], call["call_id"], "get_weather")
        assert (item["status"], item["arguments"]) == ("completed", call["arguments"])
    assert len(announced) == 1

    await _output(client, call["call_id"])  # and nothing else: no response.create
    answer = await client.until("response.done", timeout=10)
    assert answer["response"]["status"] == "completed"
    outputs = _items(client, "conversation.item.created", "function_call_output")
    assert [(i["call_id"], i["output"]) for i in outputs] == [(call["call_id"], "21 degrees")]
    said = "".join(e["delta"] for e in client.of_type("response.audio_transcript.delta"))
    assert "21 degrees" in said
    assert client.of_type("response.audio.delta")
    assert not client.of_type("error")
    await client.ws.close()


async def test_outputs_it_cannot_take_get_vllm_omnis_codes_and_the_session_goes_on(
    server: EmbeddedServer,
) -> None:
    client = await _open(server)
    call_id = (await _call(client))["response"]["output"][0]["call_id"]
    await _output(client, call_id)
    await client.until("response.done", timeout=10)  # answered by itself

    async def refused(call_id: str, output: object = "x") -> dict[str, Any]:
        await _output(client, call_id, output)
        error = await client.until("error")
        return error["error"]

    assert (await refused(call_id))["code"] == "invalid_function_call_output"  # a second output
    assert (await refused("call_never_made"))["code"] == "invalid_function_call_output"
    not_text = await refused(call_id, {"temp": 21})
    assert (not_text["code"], not_text["param"]) == ("invalid_function_call_output", "item.output")

    pending = (await _call(client))["response"]["output"][0]["call_id"]
    assert pending != call_id
    await client.send({"type": "barge_in"})  # the user cut in while the tool ran: the epoch moves on
    assert (await refused(pending, "late"))["code"] == "stale_function_call_output"
    assert len(client.of_type("error")) == 4

    again = (await _call(client))["response"]["output"][0]["call_id"]  # still serving
    await _output(client, again)
    await client.until("response.done", timeout=10)
    assert "21 degrees" in "".join(e["delta"] for e in client.of_type("response.audio_transcript.delta"))
    await client.ws.close()
