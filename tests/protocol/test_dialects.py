"""The dialect table: which dialect a connection gets, and what each one changes on the wire."""

from __future__ import annotations

import json

import pytest

from duplexkit.protocol import ServerEventStamper
from duplexkit.protocol import server_events as se
from duplexkit.protocol.dialects import CANONICAL_NAMES, Dialect, follow_ups, render, select_dialect
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.protocol.wire import parse_client_event
from tests.protocol.test_wire import SERVER_EXAMPLES

BETA = {"openai-beta": "realtime=v1"}


@pytest.mark.parametrize(
    ("query", "headers", "expected"),
    [
        ({}, {}, Dialect.GA),
        ({}, BETA, Dialect.BETA),
        ({"duplex": "1"}, {}, Dialect.VLLM_OMNI),
        ({"duplex": "1"}, BETA, Dialect.BETA),  # the header says more about the client than duplex=1
        ({"dialect": "ga", "duplex": "1"}, BETA, Dialect.GA),  # explicit wins
        ({"dialect": "vllm-omni"}, {}, Dialect.VLLM_OMNI),
        ({"dialect": "BETA"}, {}, Dialect.BETA),
        ({"duplex": "0"}, {}, Dialect.GA),
    ],
)
def test_selection_rule(query: dict[str, str], headers: dict[str, str], expected: Dialect) -> None:
    assert select_dialect(query, headers) is expected


def test_an_unknown_explicit_dialect_is_an_error_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="ga, beta, vllm_omni"):
        select_dialect({"dialect": "v2"}, {})


def _delta(cls: type[se.ServerEventBase], **extra: object) -> se.ServerEventBase:
    return cls(response_id="r", item_id="i", **extra)


RENAMED = {
    "response.audio.delta": _delta(
        se.ResponseOutputAudioDelta,
        delta="",
        sample_rate_hz=24000,
        metadata=se.AudioDeltaMetadata(audio_duration_ms=80.0),
        response_request_metrics=se.ResponseRequestMetrics(ttfp_ms=12.0),
    ),
    "response.audio.done": _delta(se.ResponseOutputAudioDone),
    "response.audio_transcript.delta": _delta(se.ResponseOutputAudioTranscriptDelta, delta="Hi"),
    "response.audio_transcript.done": _delta(se.ResponseOutputAudioTranscriptDone, transcript="Hi"),
    "response.text.delta": _delta(se.ResponseOutputTextDelta, delta="Hi"),
    "response.text.done": _delta(se.ResponseOutputTextDone, text="Hi"),
}


@pytest.mark.parametrize("dialect", [Dialect.BETA, Dialect.VLLM_OMNI])
@pytest.mark.parametrize("beta_name", sorted(RENAMED))
def test_beta_names_in_beta_and_vllm_omni_and_ga_names_in_ga(dialect: Dialect, beta_name: str) -> None:
    event = RENAMED[beta_name]
    assert json.loads(ServerEventStamper(dialect).encode(event.model_copy()))["type"] == beta_name
    assert json.loads(ServerEventStamper(Dialect.GA).encode(event.model_copy()))["type"] == event.type
    assert CANONICAL_NAMES[beta_name] == event.type


def test_vllm_omni_metric_placements_and_rate_limits_after_done() -> None:
    metrics = se.ResponseRequestMetrics(ttft_ms=40.0, ttfp_ms=55.0)
    created = se.ResponseCreated(
        response=se.ResponseInfo(id="r", status="in_progress"), response_request_metrics=metrics
    )
    wire = json.loads(ServerEventStamper(Dialect.VLLM_OMNI).encode(created))
    placed = wire["response"]["metadata"]["duplex_event"]["response_request_metrics"]
    assert placed == wire["response_request_metrics"] and placed["ttfp_ms"] == 55.0
    audio = json.loads(
        ServerEventStamper(Dialect.VLLM_OMNI).encode(RENAMED["response.audio.delta"].model_copy())
    )
    assert audio["metadata"]["vllm_omni"]["response_request_metrics"]["ttfp_ms"] == 12.0
    assert (
        "vllm_omni"
        not in json.loads(
            ServerEventStamper(Dialect.BETA).encode(RENAMED["response.audio.delta"].model_copy())
        )["metadata"]
    )
    done = se.ResponseDone(response=se.ResponseInfo(id="r", status="completed"))
    assert [e.type for e in follow_ups(done, Dialect.VLLM_OMNI)] == ["rate_limits.updated"]
    assert follow_ups(done, Dialect.GA) == follow_ups(done, Dialect.BETA) == []
    assert follow_ups(created, Dialect.VLLM_OMNI) == []


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [("close_session", "session.close"), ("close", "session.close"), ("audio.playback_ack", "playback.ack")],
)
def test_vllm_omni_aliases_parse_only_in_that_dialect(alias: str, canonical: str) -> None:
    frame = json.dumps({"type": alias, "response_id": "r", "played_ms": 10})
    assert parse_client_event(frame, dialect=Dialect.VLLM_OMNI).type == canonical
    with pytest.raises(ProtocolError) as info:
        parse_client_event(frame, dialect=Dialect.GA)
    assert info.value.code is ErrorCode.UNKNOWN_EVENT


@pytest.mark.parametrize(
    ("alias", "event"),
    [
        ("input_text.append", "input.text.append"),
        ("push_text", "input.text.append"),
        ("signal_turn", "turn.signal"),
    ],
)
def test_vllm_omni_text_and_turn_aliases_are_refused_with_their_own_code(alias: str, event: str) -> None:
    frame = json.dumps({"type": alias, "text": "hello", "event_id": "c_1"})
    with pytest.raises(ProtocolError) as info:
        parse_client_event(frame, dialect=Dialect.VLLM_OMNI)
    assert info.value.code is ErrorCode.UNSUPPORTED_EVENT and info.value.param == "type"
    assert event in str(info.value) and info.value.event_id == "c_1"
    with pytest.raises(ProtocolError) as other:
        parse_client_event(frame, dialect=Dialect.GA)
    assert other.value.code is ErrorCode.UNKNOWN_EVENT


@pytest.mark.parametrize("dialect", list(Dialect))
@pytest.mark.parametrize("event_type", sorted(SERVER_EXAMPLES))
def test_the_serialiser_fast_path_equals_the_full_rendering(dialect: Dialect, event_type: str) -> None:
    event = SERVER_EXAMPLES[event_type].model_copy(deep=True)
    for opened in (False, True):
        stamper = ServerEventStamper(dialect)
        if opened:
            stamper.encode(se.SessionCreated(session=SERVER_EXAMPLES["session.created"].session))  # type: ignore[attr-defined]
        wire = json.loads(stamper.encode(event))
        expected = render(event.model_dump(mode="json", exclude_none=True), dialect, opened=opened)
        assert wire == expected


WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


def test_vllm_omni_realtime_tools_in_extra_body_become_the_sessions_tools() -> None:
    """vLLM-Omni's Nemotron VoiceChat deployment takes tools in `extra_body.realtime_tools`, flat or in the
    chat-completions shape (its `serving_adapter._normalized_tools`): they are the session's tools here."""
    nested = {"type": "function", "function": {"name": "get_time", "description": "The time."}}
    update = {"auto_response": True, "realtime_tools": [WEATHER, nested]}
    frame = json.dumps({"type": "session.update", "session": {"extra_body": update}})
    tools = parse_client_event(frame, dialect=Dialect.VLLM_OMNI).session.tools  # type: ignore[attr-defined]
    assert [(t.type, t.name, t.description) for t in tools] == [
        ("function", "get_weather", None),
        ("function", "get_time", "The time."),
    ]
    same = json.dumps(
        {
            "type": "session.update",
            "session": {"tools": [WEATHER], "extra_body": {"realtime_tools": [WEATHER]}},
        }
    )
    assert [t.name for t in parse_client_event(same, dialect=Dialect.VLLM_OMNI).session.tools] == [
        "get_weather"
    ]  # type: ignore[attr-defined]
    for session in (
        {"extra_body": {"realtime_tools": {"name": "get_weather"}}},  # not a list
        {"tools": [], "extra_body": {"realtime_tools": [WEATHER]}},  # two answers
    ):
        with pytest.raises(ProtocolError) as info:
            parse_client_event(
                json.dumps({"type": "session.update", "session": session}), dialect=Dialect.VLLM_OMNI
            )
        assert info.value.code is ErrorCode.INVALID_VALUE
        assert info.value.param == "session.extra_body.realtime_tools"


@pytest.mark.parametrize(
    ("dialect", "ledger_code", "code"),
    [
        (Dialect.GA, ErrorCode.UNKNOWN_FUNCTION_CALL, "unknown_function_call"),
        (Dialect.BETA, ErrorCode.DUPLICATE_FUNCTION_CALL_OUTPUT, "duplicate_function_call_output"),
        (Dialect.VLLM_OMNI, ErrorCode.UNKNOWN_FUNCTION_CALL, "invalid_function_call_output"),
        (Dialect.VLLM_OMNI, ErrorCode.DUPLICATE_FUNCTION_CALL_OUTPUT, "invalid_function_call_output"),
        (Dialect.VLLM_OMNI, ErrorCode.STALE_FUNCTION_CALL_OUTPUT, "stale_function_call_output"),
    ],
)
def test_an_output_the_ledger_refuses_has_the_dialects_code(
    dialect: Dialect, ledger_code: ErrorCode, code: str
) -> None:
    """vLLM-Omni's realtime projector refuses an output for no call, and a second one, with
    `invalid_function_call_output` before its ledger sees it; the OpenAI-style dialects keep our code."""
    stamper = ServerEventStamper(dialect)
    stamper.encode(se.SessionCreated(session=SERVER_EXAMPLES["session.created"].session))  # type: ignore[attr-defined]
    event = se.error_event(ledger_code, "refused", param="item.call_id")
    wire = json.loads(stamper.encode(event))
    assert (wire["type"], wire["error"]["code"], wire["error"]["param"]) == ("error", code, "item.call_id")
    assert wire == render(event.model_dump(mode="json", exclude_none=True), dialect)
