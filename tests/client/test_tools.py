"""The client's side of function calls: `talk --tools` against an OpenAI-style server that calls a tool
(GA and beta names, written from the OpenAI contract in `tests/client/protocol_peers.py`), the tracker's
reading of the call events, and the tool box's answers when a call cannot be made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from duplexkit.client.tools import ToolBox, ToolCallTracker, ToolsFileError, load_tools_file
from duplexkit.client.wavfile import write_wav
from tests.client.protocol_peers import OPENAI_REPLY, OpenAIPeer, ServedInThread
from tests.client.speech_clip import DEMO_RATE_HZ, speech_like
from tests.client.test_protocols import cli

MODULE = """
import asyncio

DEFINITIONS = [{"type": "function", "name": "get_weather", "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}]


async def get_weather(city):
    await asyncio.sleep(0.05)
    return {"city": city, "celsius": 21}
"""


@pytest.mark.parametrize("beta", [False, True], ids=["openai", "openai-beta"])
def test_talk_answers_a_function_call_and_hears_the_answer(
    tmp_path: Path, beta: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    wav = tmp_path / "speech.wav"
    write_wav(wav, speech_like()[: round(1.2 * DEMO_RATE_HZ)], DEMO_RATE_HZ)
    tools = tmp_path / ("tools.py" if not beta else "tools.json")
    tools.write_text(MODULE if not beta else json.dumps({"get_weather": {"city": "Paris", "celsius": 21}}))
    peer = OpenAIPeer(beta=beta, tool_call=("get_weather", '{"city": "Paris"}'))
    out = tmp_path / "out"
    with ServedInThread(peer) as url:
        code = cli(
            "talk", "--url", url, "--input", str(wav), "--out", str(out), "--settle", "0.3",
            "--pace", "as-fast-as-possible", "--protocol", "openai-beta" if beta else "openai",
            "--tools", str(tools),
        )  # fmt: skip
    assert code == 0
    assert [t["name"] for t in peer.tools] == ["get_weather"]
    if not beta:  # the module's own declaration went out as it is
        assert peer.tools[0]["parameters"]["required"] == ["city"]
    kinds = [e["type"] for e in peer.events]
    assert "error" not in kinds
    # the output, then (padding appends may come between) one response.create asking the model to go on
    output = kinds.index("conversation.item.create")
    assert kinds.count("response.create") == 2 and kinds.index("response.create", output) > output
    assert set(kinds[output + 1 : kinds.index("response.create", output)]) <= {"input_audio_buffer.append"}
    item = peer.events[output]["item"]
    assert item["type"] == "function_call_output" and item["call_id"] == "call_0"
    assert json.loads(item["output"]) == {"city": "Paris", "celsius": 21}
    # the spoken answer after the call was heard and recorded
    assert json.loads((out / "transcript.json").read_text())[0]["sentence"] == OPENAI_REPLY
    calls = json.loads((out / "tool_calls.json").read_text())
    assert [(c["name"], c["arguments"], c["status"]) for c in calls] == [
        ("get_weather", '{"city": "Paris"}', "answered")
    ]
    assert calls[0]["output_media_ms"] >= calls[0]["called_media_ms"] >= 0
    events = json.loads((out / "events.json").read_text())
    sent = [e for e in events if e.get("sent")]
    assert len(sent) == 1 and sent[0]["event"]["item"]["call_id"] == "call_0"
    assert [e["t_ms"] for e in events] == sorted(e["t_ms"] for e in events)
    assert "called: get_weather" in capsys.readouterr().out


def _ga_call(call_id: str, rid: str, name: str | None = "f") -> list[dict[str, object]]:
    item = {"type": "function_call", "id": f"i_{call_id}", "call_id": call_id, "name": "f", "arguments": "{}"}
    done = {"type": "response.function_call_arguments.done", "response_id": rid, "call_id": call_id}
    return [
        {"type": "response.output_item.added", "response_id": rid, "item": {**item, "arguments": ""}},
        {**done, "arguments": "{}", "item_id": f"i_{call_id}", **({"name": name} if name else {})},
        {"type": "response.output_item.done", "response_id": rid, "item": item},
    ]


def test_the_tracker_reads_each_call_once_and_continues_when_the_response_is_done() -> None:
    tracker = ToolCallTracker()
    calls = [c for e in _ga_call("c1", "r1", name=None) for c in tracker.observe(e, 1.0, 10.0)]
    assert [(c.call_id, c.name, c.response_id) for c in calls] == [
        ("c1", "f", "r1")
    ]  # beta: name from the item
    tracker.finished(calls[0], sent=True)
    assert tracker.continuations() == []  # the response is not done yet
    tracker.observe({"type": "response.done", "response": {"id": "r1", "status": "completed"}}, 2.0, 20.0)
    assert tracker.continuations() == ["r1"] and tracker.continuations() == []


def test_a_call_in_a_cancelled_response_is_not_answered_nor_continued() -> None:
    tracker = ToolCallTracker()
    [call] = tracker.observe(
        {
            "type": "response.done",
            "response": {"id": "r2", "status": "cancelled", "output": [_ga_call("c2", "r2")[2]["item"]]},
        },
        1.0,
        0.0,
    )
    assert tracker.cancelled(call)
    tracker.finished(call, sent=False)
    assert tracker.continuations() == []


async def test_the_tool_box_answers_every_call_it_cannot_make() -> None:
    def boom() -> None:
        raise RuntimeError("down")

    box = ToolBox({"boom": boom, "echo": lambda text: text}, fixed={"rate": 1.1})
    assert await box.run("echo", '{"text": "hi"}') == ("hi", None)
    assert await box.run("rate", "{}") == ("1.1", None)
    assert (await box.run("nope", "{}"))[1] == "unknown_tool"
    assert (await box.run("echo", "[1]"))[1] == "bad_arguments"
    output, error = await box.run("boom", "")
    assert error == "tool_raised" and "down" in json.loads(output)["error"]
    assert [d["name"] for d in box.definitions()] == ["boom", "echo", "rate"]
    assert box.definitions()[1]["parameters"]["required"] == ["text"]


def test_tools_files_that_cannot_be_loaded(tmp_path: Path) -> None:
    for name, text, code in (
        ("a.json", "[1]", "bad_json"),
        ("b.txt", "x", "bad_suffix"),
        ("c.py", "raise SystemError('x')", "bad_module"),
        ("d.py", "X = 1", "no_tools"),
    ):
        (tmp_path / name).write_text(text)
        with pytest.raises(ToolsFileError) as info:
            load_tools_file(tmp_path / name)
        assert info.value.code == code


def test_talk_answers_our_servers_function_call_on_the_duplex_protocol(tmp_path: Path) -> None:
    """The embedded server's scripted model calls the declared tool after the commit; the client answers
    from a JSON of fixed results and the model speaks the output."""
    wav = tmp_path / "speech.wav"
    write_wav(wav, speech_like()[: round(1.2 * DEMO_RATE_HZ)], DEMO_RATE_HZ)
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps({"get_weather": {"celsius": 21}}))
    out = tmp_path / "out"
    calls = json.dumps([{"name": "get_weather", "arguments": {"city": "Paris"}}])
    code = cli(
        "talk", "--model", "scripted", "--model-arg", f"tool_calls={calls}",
        "--model-arg", "reply=It is {output}", "--tools", str(tools), "--input", str(wav),
        "--out", str(out), "--settle", "0.5", "--pace", "as-fast-as-possible",
    )  # fmt: skip
    assert code == 0
    [call] = json.loads((out / "tool_calls.json").read_text())
    assert (call["name"], call["arguments"], call["output"]) == (
        "get_weather",
        '{"city": "Paris"}',
        '{"celsius": 21}',
    )
    assert json.loads((out / "transcript.json").read_text())[-1]["sentence"] == 'It is {"celsius": 21}'


def test_a_call_completed_before_its_response_is_named_is_still_continued() -> None:
    """A server that sends `conversation.item.done` (no `response_id`) first: the call is run at once and
    the response that `arguments.done` names later is continued."""
    tracker = ToolCallTracker()
    item = {"type": "function_call", "id": "i9", "call_id": "c9", "name": "f", "arguments": "{}"}
    [call] = tracker.observe({"type": "conversation.item.done", "item": item}, 1.0, 0.0)
    assert call.response_id is None
    tracker.finished(call, sent=True)
    done = {"type": "response.function_call_arguments.done", "response_id": "r9", "call_id": "c9"}
    assert tracker.observe({**done, "arguments": "{}"}, 1.1, 0.0) == []
    tracker.observe({"type": "response.done", "response": {"id": "r9", "status": "completed"}}, 1.2, 0.0)
    assert tracker.continuations() == ["r9"]
