"""Function calls in the engine: the call's events, the client's output, continuing, barge-in and staleness.

Driven like `test_session.py`: client events through `handle`, model decisions through `on_decision`, on
a fake clock. The wire contract the events follow is OpenAI's (checked against the SDK's own types in
`tests/protocol/test_tools_wire.py`).
"""

from __future__ import annotations

import json
from typing import Any

from duplexkit.engine import FunctionCall, Listen
from duplexkit.protocol import server_events as se
from duplexkit.protocol.errors import ErrorCode
from tests.engine.test_session import IN_RATE, Harness, error_codes, only, speak, types

WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
TIME = {"type": "function", "name": "get_time"}
CALL_EVENTS = [
    "response.output_item.added",
    "conversation.item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "conversation.item.done",
]


def _harness(*tools: dict[str, Any]) -> Harness:
    h = Harness()
    h.send("session.update", session={"tools": list(tools or (WEATHER,)), "tool_choice": "auto"})
    return h


def _call(call_id: str = "call_1", name: str = "get_weather", end: bool = True, **args: Any) -> FunctionCall:
    return FunctionCall(call_id, name, json.dumps(args or {"city": "Paris"}), end_of_turn=end)


def _output(h: Harness, call_id: str = "call_1", output: object = '{"temp": 21}', **fields: Any) -> Any:
    item = {"type": "function_call_output", "call_id": call_id, "output": output}
    return h.send("conversation.item.create", item=item, **fields)


def test_session_update_with_tools_is_echoed_in_session_updated() -> None:
    h = Harness()
    step = h.send("session.update", session={"tools": [WEATHER, TIME], "tool_choice": "required"})
    session = only(step.events, "session.updated").session
    assert [t.name for t in session.tools] == ["get_weather", "get_time"]
    assert session.tools[0].parameters == {"type": "object"}
    assert session.tool_choice == "required"
    cleared = only(h.send("session.update", session={"tools": []}).events, "session.updated").session
    assert cleared.tools == [] and cleared.tool_choice == "required"  # only what an update names changes


def test_a_function_call_response_lists_the_call_and_opens_no_message() -> None:
    h = _harness()
    events = h.step(h.unit(), _call(), at=1.0)
    assert types(events) == ["response.created", *CALL_EVENTS, "response.done"]
    added, done = only(events, "response.output_item.added"), only(events, "response.output_item.done")
    assert (added.item.type, added.item.status, added.item.arguments) == ("function_call", "in_progress", "")
    assert (done.item.call_id, done.item.name, done.item.arguments) == (
        "call_1",
        "get_weather",
        '{"city": "Paris"}',
    )
    assert only(events, "response.function_call_arguments.done").name == "get_weather"
    response = only(events, "response.done").response
    assert (response.status, [item.id for item in response.output]) == ("completed", [done.item.id])


def test_speech_then_several_calls_in_one_response_in_output_order() -> None:
    h = _harness(WEATHER, TIME)
    unit = h.unit()
    events = h.step(
        unit, speak("One moment. ", 500), _call("call_a", end=False), _call("call_b", "get_time"), at=1.0
    )
    done = only(events, "response.done").response
    assert [(i.type, i.call_id) for i in done.output] == [
        ("message", None),
        ("function_call", "call_a"),
        ("function_call", "call_b"),
    ]
    indices = [e.output_index for e in events if e.type == "response.function_call_arguments.done"]
    assert indices == [1, 2]
    # the message is done before the first call opens
    order = types(events)
    assert order.index("response.output_audio.done") < order.index("response.function_call_arguments.delta")


def test_output_then_response_create_gives_the_model_the_output_on_a_final_unit() -> None:
    h = _harness()
    h.step(h.unit(), _call(), at=1.0)
    created = _output(h, previous_item_id=None)
    assert types(created.events) == ["conversation.item.added", "conversation.item.done"]
    assert created.units == []  # the server does not answer a tool output by itself
    item = only(created.events, "conversation.item.added").item
    assert (item.type, item.call_id, item.output) == ("function_call_output", "call_1", '{"temp": 21}')
    step = h.send("response.create", response={"metadata": {"client_event_id": "ce_9"}})
    [unit] = step.units
    assert unit.final and [(o.call_id, o.name, o.output) for o in unit.tool_outputs] == [
        ("call_1", "get_weather", '{"temp": 21}')
    ]
    answer = h.step(unit, speak("It is 21 degrees.", 800, end_of_turn=True), at=2.0)
    assert only(answer, "response.created").response.metadata == {"client_event_id": "ce_9"}
    assert only(answer, "response.done").response.metadata == {"client_event_id": "ce_9"}


def test_an_output_without_response_create_rides_the_next_unit_but_asks_for_nothing() -> None:
    h = _harness()
    h.step(h.unit(), _call(), at=1.0)
    _output(h)
    unit = h.unit(now=2.0)
    assert not unit.final and [o.call_id for o in unit.tool_outputs] == ["call_1"]
    assert h.unit(now=3.0).tool_outputs == ()  # delivered once


def test_where_the_session_continues_by_itself_an_output_steps_a_final_unit_at_once() -> None:
    """vLLM-Omni's rule (its dialect): the accepted output asks for the answer, no `response.create`."""
    h = Harness(continues_after_tool_output=True)
    h.send("session.update", session={"tools": [WEATHER]})
    h.step(h.unit(), _call(), at=1.0)
    h.append(200)  # what the user said since rides along, as `response.create` would flush it
    [unit] = _output(h).units
    assert unit.final and [o.call_id for o in unit.tool_outputs] == ["call_1"]
    assert len(unit.samples) == 200 * IN_RATE // 1000
    assert h.send("response.create").units == []  # a client that asks anyway adds nothing
    assert error_codes(_output(h).events) == [ErrorCode.DUPLICATE_FUNCTION_CALL_OUTPUT]  # refused: no unit


def test_outputs_that_cannot_be_accepted_get_codes_and_the_session_goes_on() -> None:
    h = _harness()
    assert error_codes(_output(h, "call_nope").events) == [ErrorCode.UNKNOWN_FUNCTION_CALL]
    h.step(h.unit(), _call(), at=1.0)
    assert error_codes(_output(h).events) == []
    assert error_codes(_output(h).events) == [ErrorCode.DUPLICATE_FUNCTION_CALL_OUTPUT]
    malformed = h.send("conversation.item.create", item={"type": "function_call_output", "output": "x"})
    assert error_codes(malformed.events) == [ErrorCode.INVALID_FUNCTION_CALL_OUTPUT]
    assert only(malformed.events, "error").error.param == "item.call_id"
    not_text = _output(h, "call_1", 21)  # an output that is not text
    assert error_codes(not_text.events) == [ErrorCode.INVALID_FUNCTION_CALL_OUTPUT]
    assert only(not_text.events, "error").error.param == "item.output"
    bad_args = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}
    assert error_codes(h.send("conversation.item.create", item=bad_args).events) == [
        ErrorCode.INVALID_FUNCTION_CALL
    ]
    unknown_place = _output(h, "call_1", previous_item_id="item_nowhere")
    assert error_codes(unknown_place.events) == [ErrorCode.UNKNOWN_ITEM]
    # still serving: a new turn is answered
    assert "response.created" in types(h.step(h.unit(now=5.0), speak("Hi", 100), at=5.5))


def test_barge_in_during_a_pending_call_cancels_its_response_and_its_output_is_stale() -> None:
    """The output of a call a barge-in retired joins the conversation as OpenAI takes any call's output
    (no `error`: Pipecat ends its connection on one), but the model never receives it."""
    h = _harness()
    unit = h.unit()
    opened = h.step(unit, speak("Let me check. ", 500), _call(end=False), at=1.0)
    response_id = only(opened, "response.created").response.id
    interrupted = h.send("barge_in", 1.5)
    done = only(interrupted.events, "response.done").response
    assert (done.id, done.status, done.status_details.reason) == (response_id, "cancelled", "barge_in")
    assert [i.type for i in done.output] == ["message", "function_call"]  # the call was made, then cut
    stale = _output(h)
    assert types(stale.events) == ["conversation.item.added", "conversation.item.done"]
    assert stale.events[0].item.type == "function_call_output" and stale.units == []
    assert h.unit(now=2.0).tool_outputs == ()  # nothing reaches the model
    assert [i.type for i in h.engine.history][-1] == "function_call_output"
    # vLLM-Omni's ledger refuses it instead (its dialect)
    v = Harness(refuses_stale_outputs=True)
    v.send("session.update", session={"tools": [WEATHER]})
    v.step(v.unit(), _call(end=False), at=1.0)
    v.send("barge_in", 1.5)
    assert error_codes(_output(v).events) == [ErrorCode.STALE_FUNCTION_CALL_OUTPUT]


def test_server_vad_speech_during_a_pending_call_retires_it_as_turn_detected() -> None:
    h = Harness(server_vad=True)
    h.send("session.update", session={"tools": [WEATHER], "turn_detection": {"type": "server_vad"}})
    h.step(h.unit(), _call(), at=1.0)  # the call's response completed; the tool runs
    started = h.engine.speech_started(1200.0, 1.2)
    assert types(started.events) == ["input_audio_buffer.speech_started"]  # nothing active to cancel
    assert _output(h).units == []  # retired: its output asks for nothing
    h.engine.speech_stopped(1800.0, 1.8)
    # a response opened after the user spoke during the call is cancelled, at the next speech, with
    # OpenAI's reason
    h.step(h.unit(now=2.0), _call("call_2"), at=2.5)
    h.step(h.unit(now=3.0), speak("Still checking", 500), at=3.5)
    done = only(h.engine.speech_started(4000.0, 4.0).events, "response.done").response
    assert (done.status, done.status_details.reason) == ("cancelled", "turn_detected")
    assert error_codes(_output(h, "call_2").events) == []
    assert h.unit(now=5.0).tool_outputs == ()


def _refusal(events: list[se.ServerEventBase]) -> se.ErrorDetail | None:
    """The response failed by a refused call: its `status_details.error` (and no `error` event)."""
    assert error_codes(events) == []
    done = only(events, "response.done").response
    assert (done.status, done.output) == ("failed", [])
    return done.status_details.error


def test_a_call_the_session_does_not_offer_fails_closed() -> None:
    """No call events; the response fails with `invalid_function_call` on its `response.done`, where
    OpenAI reports a failure within a response (an `error` event would end Pipecat's connection)."""
    h = _harness()
    events = h.step(h.unit(), _call(name="launch_rockets"), at=1.0)
    assert "response.function_call_arguments.done" not in types(events)
    error = _refusal(events)
    assert error is not None and error.code == ErrorCode.INVALID_FUNCTION_CALL
    assert "launch_rockets" in error.message
    not_json = h.step(h.unit(now=2.0), FunctionCall("call_x", "get_weather", "{oops"), at=2.5)
    error = _refusal(not_json)
    assert error is not None and error.code == ErrorCode.INVALID_FUNCTION_CALL


def test_a_refused_call_makes_the_rest_of_the_models_turn_stale() -> None:
    """What the model decides after a call the session refused, for the same turn, is dropped: it does
    not open a response nobody asked for; the model's next turn is heard as usual."""
    h = _harness()
    unit = h.unit()
    refused = h.step(unit, _call(name="launch_rockets", end=False), at=1.0)
    assert only(refused, "response.done").response.status == "failed"
    assert h.step(unit, speak("and then", 100, end_of_turn=True), at=1.1) == []
    after = h.step(h.unit(now=2.0), speak("Hello", 100, end_of_turn=True), at=2.5)
    assert only(after, "response.done").response.status == "completed"


def test_a_client_function_call_item_can_be_answered_and_placed_after_root() -> None:
    h = _harness()
    call = {
        "type": "function_call",
        "id": "item_c",
        "call_id": "c1",
        "name": "get_weather",
        "arguments": "{}",
    }
    first = h.send("conversation.item.create", item=call, previous_item_id="root")
    assert only(first.events, "conversation.item.added").item.id == "item_c"  # the client's id echoed
    answered = _output(h, "c1", previous_item_id="item_c")
    assert only(answered.events, "conversation.item.added").previous_item_id == "item_c"
    assert [i.id for i in h.engine.history][:1] == ["item_c"]
    assert error_codes(h.send("conversation.item.create", item=call).events) == [
        ErrorCode.ITEM_CREATE_DUPLICATE_ITEM_ID
    ]


def test_listen_does_not_end_a_pending_call() -> None:
    h = _harness()
    h.step(h.unit(), _call(), at=1.0)
    h.step(h.unit(now=1.5), Listen(), at=2.0)  # audio keeps flowing; the model keeps listening
    assert error_codes(_output(h).events) == []


def test_per_response_tools_are_refused_with_a_code_and_the_response_still_comes() -> None:
    h = _harness()
    h.append(300)
    step = h.send("response.create", response={"tools": [TIME], "tool_choice": "required"})
    assert error_codes(step.events) == [ErrorCode.INVALID_VALUE]
    assert only(step.events, "error").error.param == "response.tools"
    [unit] = step.units
    assert unit.final
    h.step(unit, Listen(), at=1.0)
    # the session's own choice repeated (LiveKit sends it with every request) is no override
    same = h.send("response.create", response={"tool_choice": "auto", "tools": [WEATHER]})
    assert error_codes(same.events) == []
