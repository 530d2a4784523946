"""The wire layer as a specification: what the parser accepts, what it rejects and how, and how server
events are stamped and encoded."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from duplexkit.protocol import (
    CLIENT_EVENT_TYPES,
    ERROR_SPECS,
    SERVER_EVENT_TYPES,
    ClientEventBase,
    ErrorCode,
    ProtocolError,
    ServerEvent,
    ServerEventBase,
    ServerEventStamper,
    error_event,
    parse_client_event,
    wire,
)
from duplexkit.protocol import client_events as ce
from duplexkit.protocol import server_events as se
from duplexkit.protocol.audio import AudioDecodeError, decode_audio, decode_base64_audio
from duplexkit.protocol.dialects import CANONICAL_NAMES, Dialect

SERVER_EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(ServerEvent)

# --- payloads ---------------------------------------------------------------------------------------

PCM16_SAMPLES = list(range(-160, 160, 2))
PCM16_B64 = base64.b64encode(struct.pack(f"<{len(PCM16_SAMPLES)}h", *PCM16_SAMPLES)).decode()
THREE_BYTES_B64 = base64.b64encode(b"\x01\x02\x03").decode()  # odd: not whole pcm16 samples
F32_NAN_B64 = base64.b64encode(struct.pack("<2f", 0.25, float("nan"))).decode()
JPEG_B64 = base64.b64encode(b"\xff\xd8\xff\xe0" + bytes(12)).decode()
PNG_B64 = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(8)).decode()


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj)


def _parse_error(data: str | bytes, **kwargs: Any) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        parse_client_event(data, **kwargs)
    return info.value


# --- one valid, fully populated instance of every event type -----------------------------------------


def _client_examples() -> dict[str, ClientEventBase]:
    events: list[ClientEventBase] = [
        ce.SessionUpdate(
            event_id="c_1",
            session=ce.SessionConfig(
                model="minicpm-o",
                modalities=["audio", "text"],
                instructions="Be brief.",
                voice="default",
                ref_audio=PCM16_B64,
                input_audio_format="pcm16",
                output_audio_format="pcm16",
                input_sample_rate_hz=16000,
                turn_detection=ce.ServerVadConfig(
                    threshold=0.6, prefix_padding_ms=200, silence_duration_ms=400
                ),
                temperature=0.7,
                max_tokens=256,
                idle_timeout_s=120.0,
                overlap_policy="barge_in_on_speech",
                playback_commit_policy="ack_only",
                extra_body={"top_p": 0.9, "nested": {"k": [1, 2]}},
            ),
        ),
        ce.InputAudioBufferAppend(
            event_id="c_2",
            audio=PCM16_B64,
            input_audio_format="pcm16",
            sample_rate_hz=16000,
            duration_ms=10.0,
            audio_end_ms=1030.0,
            video_frames=[JPEG_B64, PNG_B64],
            is_speech=True,
            force_listen=False,
            force_barge_in=False,
        ),
        ce.InputAudioBufferCommit(event_id="c_3", final=False, is_speech=False),
        ce.InputAudioBufferClear(event_id="c_4"),
        ce.InputCancel(event_id="c_5"),
        ce.ResponseCreate(
            event_id="c_6", response={"instructions": "Say hi.", "output_modalities": ["audio"]}
        ),
        ce.ResponseCancel(event_id="c_7", response_id="resp_1"),
        ce.OutputAudioBufferClear(event_id="c_8"),
        ce.BargeIn(event_id="c_9"),
        ce.PlaybackAck(
            event_id="c_10",
            response_id="resp_1",
            item_id="item_1",
            played_ms=800.0,
            committed_ms=750.0,
            truncate=True,
        ),
        ce.ConversationItemCreate(
            event_id="c_11",
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            previous_item_id="item_0",
        ),
        ce.ConversationItemRetrieve(event_id="c_12", item_id="item_1"),
        ce.ConversationItemDelete(event_id="c_13", item_id="item_1"),
        ce.ConversationItemTruncate(event_id="c_14", item_id="item_1", content_index=0, audio_end_ms=640),
        ce.SessionHeartbeat(event_id="c_15"),
        ce.SessionClose(event_id="c_16", reason="done"),
        ce.SessionResume(
            event_id="c_17", session_id="sess_1", resume_token="tok", last_received_server_event_seq=41
        ),
        ce.SessionEventAck(event_id="c_18", server_event_seq=41),
    ]
    return {event.type: event for event in events}  # type: ignore[attr-defined]


def _item(role: str = "assistant", item_id: str = "item_1") -> se.ConversationItem:
    content_type = "output_audio" if role == "assistant" else "input_audio"
    return se.ConversationItem(
        id=item_id,
        role=role,  # type: ignore[arg-type]
        status="completed",
        content=[se.ItemContent(type=content_type, transcript="hello there")],  # type: ignore[arg-type]
    )


def _session_info() -> se.SessionInfo:
    return se.SessionInfo(
        id="sess_1",
        model="minicpm-o",
        modalities=["audio", "text"],
        instructions="Be brief.",
        voice="default",
        input_audio_format="pcm16",
        output_audio_format="pcm16",
        turn_detection=ce.ServerVadConfig(),
        temperature=0.7,
        max_tokens=256,
        idle_timeout_s=300.0,
        overlap_policy="listen_only",
        playback_commit_policy="commit_all_on_done",
        capabilities=se.Capabilities(
            chunk_period_ms=1000,
            first_unit_ms=1030,
            supports_barge_in=True,
            input_modes=["audio", "video"],
            max_sessions=4,
            input_sample_rate_hz=16000,
            output_sample_rate_hz=24000,
        ),
    )


def _metrics() -> se.ResponseRequestMetrics:
    return se.ResponseRequestMetrics(
        ttft_ms=120.5, ttfp_ms=340.0, tpot_ms=25.0, output_tokens=14, output_audio_ms=2000.0
    )


def _response(status: str = "completed", reason: str | None = "stop") -> se.ResponseInfo:
    return se.ResponseInfo(
        id="resp_1",
        status=status,  # type: ignore[arg-type]
        status_details=se.StatusDetails(type=status, reason=reason),  # type: ignore[arg-type]
        output=[_item()],
        output_modalities=["audio"],
        usage=se.Usage(input_tokens=26, output_tokens=14, total_tokens=40),
    )


def _delta_ids() -> dict[str, Any]:
    return {"response_id": "resp_1", "item_id": "item_1", "output_index": 0, "content_index": 0}


def _server_examples() -> dict[str, ServerEventBase]:
    part = se.ContentPart(type="audio", transcript="hello there")
    events: list[ServerEventBase] = [
        se.SessionCreated(session=_session_info()),
        se.SessionUpdated(session=_session_info()),
        se.InputAudioBufferCommitted(item_id="item_u1", previous_item_id="item_0", audio_end_ms=2030.0),
        se.InputAudioBufferCleared(),
        se.InputAudioBufferSpeechStarted(audio_start_ms=300, item_id="item_u1"),
        se.InputAudioBufferSpeechStopped(audio_end_ms=1800, item_id="item_u1"),
        se.InputAudioTranscriptionDelta(item_id="item_u1", delta="hello"),
        se.InputAudioTranscriptionCompleted(
            item_id="item_u1", transcript="hello there", usage=se.TranscriptionUsage(seconds=1.2)
        ),
        se.ConversationItemAdded(item=_item(), previous_item_id="item_u1"),
        se.ConversationItemDone(item=_item(), previous_item_id="item_u1"),
        se.ConversationItemRetrieved(item=_item("user", "item_u1")),
        se.ConversationItemDeleted(item_id="item_u1"),
        se.ConversationItemTruncated(item_id="item_1", content_index=0, audio_end_ms=640),
        se.ResponseCreated(
            response=se.ResponseInfo(id="resp_1", status="in_progress", output_modalities=["audio"]),
            response_request_metrics=se.ResponseRequestMetrics(ttft_ms=None, ttfp_ms=None),
        ),
        se.ResponseOutputItemAdded(response_id="resp_1", output_index=0, item=_item()),
        se.ResponseOutputItemDone(response_id="resp_1", output_index=0, item=_item()),
        se.ResponseContentPartAdded(**_delta_ids(), part=se.ContentPart(type="audio", transcript="")),
        se.ResponseContentPartDone(**_delta_ids(), part=part),
        se.ResponseSpeak(response_id="resp_1", item_id="item_1"),
        se.ResponseOutputAudioDelta(
            **_delta_ids(),
            delta=PCM16_B64,
            sample_rate_hz=24000,
            metadata=se.AudioDeltaMetadata(
                audio_duration_ms=1000.0,
                end_of_turn=False,
                audio_text_marks=[se.AudioTextMark(text_chars=5, audio_end_ms=480.0)],
            ),
            response_request_metrics=se.ResponseRequestMetrics(ttfp_ms=340.0),
        ),
        se.ResponseOutputAudioTranscriptDelta(
            **_delta_ids(), delta="hello", response_request_metrics=se.ResponseRequestMetrics(ttft_ms=120.5)
        ),
        se.ResponseOutputTextDelta(**_delta_ids(), delta="hello"),
        se.ResponseFunctionCallArgumentsDelta(
            response_id="resp_1", item_id="item_2", output_index=1, call_id="call_1", delta="{}"
        ),
        se.ResponseFunctionCallArgumentsDone(
            response_id="resp_1", item_id="item_2", output_index=1, call_id="call_1", name="f", arguments="{}"
        ),
        se.ResponseOutputAudioDone(**_delta_ids()),
        se.ResponseOutputAudioTranscriptDone(**_delta_ids(), transcript="hello there"),
        se.ResponseOutputTextDone(**_delta_ids(), text="hello there"),
        se.ResponseDone(
            response=_response("cancelled", "client_cancelled"), response_request_metrics=_metrics()
        ),
        se.ResponseListen(
            response_id="resp_2",
            response=se.ListenInfo(
                id="resp_2", metadata=se.ListenMetadata(reason="continuation_limit", model_listen=False)
            ),
        ),
        se.OutputAudioBufferStarted(response_id="resp_1"),
        se.OutputAudioBufferStopped(response_id="resp_1"),
        se.OutputAudioBufferCleared(response_id="resp_1"),
        se.PlaybackAcknowledged(response_id="resp_1", item_id="item_1", played_ms=800.0, committed_ms=750.0),
        se.SessionHeartbeatAck(),
        se.SessionClosed(session_id="sess_1", reason="client_close"),
        se.SessionResumed(
            session_id="sess_1",
            resume_token="tok_2",
            attachment_generation=2,
            replayed_events=3,
            client_events_received=17,
            session=_session_info(),
        ),
        se.SessionReplaced(session_id="sess_1", attachment_generation=2),
        se.SessionResyncRequired(session_id="sess_1", reason="journal_overflow", first_available_seq=90),
        se.SessionExpired(session_id="sess_1", reason="disconnect_grace_expired"),
        se.RateLimitsUpdated(
            rate_limits=[se.RateLimit(name="requests", limit=4, remaining=3, reset_seconds=0.0)]
        ),
        error_event(ErrorCode.UNKNOWN_ITEM, "no item 'x'", param="item_id", event_id="c_12"),
    ]
    return {event.type: event for event in events}  # type: ignore[attr-defined]


CLIENT_EXAMPLES = _client_examples()
SERVER_EXAMPLES = _server_examples()


# --- round trips ------------------------------------------------------------------------------------


def test_every_client_event_type_has_a_round_trip_example() -> None:
    assert set(CLIENT_EXAMPLES) == set(CLIENT_EVENT_TYPES)
    for event_type, example in CLIENT_EXAMPLES.items():
        assert type(example) is CLIENT_EVENT_TYPES[event_type]


def test_every_server_event_type_has_a_round_trip_example() -> None:
    assert set(SERVER_EXAMPLES) == set(SERVER_EVENT_TYPES)
    for event_type, example in SERVER_EXAMPLES.items():
        assert type(example) is SERVER_EVENT_TYPES[event_type]


@pytest.mark.parametrize("event_type", sorted(CLIENT_EVENT_TYPES))
def test_client_event_survives_json_and_the_parser_unchanged(event_type: str) -> None:
    original = CLIENT_EXAMPLES[event_type]
    parsed = parse_client_event(original.model_dump_json())
    assert type(parsed) is type(original)
    assert parsed.model_dump() == original.model_dump()


@pytest.mark.parametrize("event_type", sorted(CLIENT_EVENT_TYPES))
def test_client_event_without_null_fields_also_round_trips(event_type: str) -> None:
    original = CLIENT_EXAMPLES[event_type]
    parsed = parse_client_event(original.model_dump_json(exclude_none=True).encode())
    assert parsed.model_dump(exclude_none=True) == original.model_dump(exclude_none=True)


def test_append_round_trip_keeps_the_decoded_audio_and_video_frames() -> None:
    parsed = parse_client_event(CLIENT_EXAMPLES["input_audio_buffer.append"].model_dump_json())
    assert isinstance(parsed, ce.InputAudioBufferAppend)
    expected = np.asarray(PCM16_SAMPLES, dtype=np.float32) / 32768.0
    assert parsed.samples.dtype == np.float32
    np.testing.assert_array_equal(parsed.samples, expected)
    assert parsed.frames == [base64.b64decode(JPEG_B64), base64.b64decode(PNG_B64)]


@pytest.mark.parametrize("event_type", sorted(SERVER_EVENT_TYPES))
def test_server_event_survives_stamped_json_and_the_server_event_union_unchanged(event_type: str) -> None:
    original = SERVER_EXAMPLES[event_type].model_copy(deep=True)
    # The beta dialect keeps the canonical session shape, the GA dialect every other (the beta one says
    # the beta API's content types); only names differ, and they map back one to one (and the beta
    # `response.function_call_arguments.done` has no `name`: it is left out).
    dialect = Dialect.BETA if event_type.startswith("session.") else Dialect.GA
    wire = json.loads(ServerEventStamper(dialect).encode(original))
    wire["type"] = CANONICAL_NAMES.get(wire["type"], wire["type"])
    parsed = SERVER_EVENT_ADAPTER.validate_python(wire)
    assert type(parsed) is type(original)
    assert parsed.model_dump() == original.model_dump()
    assert parsed.server_event_seq == 1
    assert parsed.event_id == original.event_id is not None


def test_session_closed_always_names_its_session() -> None:
    with pytest.raises(ValidationError):
        se.SessionClosed.model_validate({"type": "session.closed", "reason": "config_timeout"})


# --- malformed input: every parser error code ------------------------------------------------------

PARSER_CODES = {
    ErrorCode.INVALID_JSON,
    ErrorCode.NOT_AN_OBJECT,
    ErrorCode.UNKNOWN_EVENT,
    ErrorCode.MISSING_FIELD,
    ErrorCode.INVALID_VALUE,
    ErrorCode.EVENT_TOO_LARGE,
    ErrorCode.UNSUPPORTED_AUDIO_FORMAT,
    ErrorCode.INVALID_AUDIO,
    ErrorCode.INVALID_VIDEO_FRAME,
    ErrorCode.UNKNOWN_PARAMETER,
    ErrorCode.UNSUPPORTED_VALUE,
}

APPEND = "input_audio_buffer.append"


def _case(
    case_id: str, frame: str | bytes, code: ErrorCode, param: str | None = None, **kwargs: Any
) -> tuple[str, str | bytes, dict[str, Any], ErrorCode, str | None]:
    return (case_id, frame, kwargs, code, param)


# (id, frame, parse_client_event kwargs, expected code, expected param)
MALFORMED = [
    _case("truncated json", '{"type": "session.update"', ErrorCode.INVALID_JSON),
    _case("empty frame", "", ErrorCode.INVALID_JSON),
    _case(
        "NaN constant",
        '{"type": "playback.ack", "response_id": "r", "played_ms": NaN}',
        ErrorCode.INVALID_JSON,
    ),
    _case("Infinity constant", '{"type": "session.close", "x": -Infinity}', ErrorCode.INVALID_JSON),
    _case("bytes not utf-8", b'{"type": "session.close", "reason": "\xff\xfe"}', ErrorCode.INVALID_JSON),
    _case(
        "nesting too deep",
        '{"type": "session.close", "x": ' + "[" * 10**5 + "]" * 10**5 + "}",
        ErrorCode.INVALID_JSON,
    ),
    _case(
        "nesting past the bound, on the fallback parser's path (a lone surrogate)",
        '{"type": "session.close", "x": ' + "[" * 500 + '"\\udc00"' + "]" * 500 + "}",
        ErrorCode.INVALID_JSON,
    ),
    _case("array", '[{"type": "session.heartbeat"}]', ErrorCode.NOT_AN_OBJECT),
    _case("string", '"session.heartbeat"', ErrorCode.NOT_AN_OBJECT),
    _case("null", "null", ErrorCode.NOT_AN_OBJECT),
    _case("unknown type", '{"type": "session.teleport"}', ErrorCode.UNKNOWN_EVENT, "type"),
    _case("non-string type", '{"type": 7}', ErrorCode.UNKNOWN_EVENT, "type"),
    _case("server event sent by client", '{"type": "session.created"}', ErrorCode.UNKNOWN_EVENT, "type"),
    _case("no type", '{"event_id": "c_1"}', ErrorCode.MISSING_FIELD, "type"),
    _case(
        "unknown session field",
        _dumps({"type": "session.update", "session": {"vad": True}}),
        ErrorCode.UNKNOWN_PARAMETER,
        "session.vad",
    ),
    _case(
        "session term not served",
        _dumps({"type": "session.update", "session": {"tracing": "auto"}}),
        ErrorCode.UNSUPPORTED_VALUE,
        "session.tracing",
    ),
    _case(
        "ack without played_ms",
        '{"type": "playback.ack", "response_id": "r"}',
        ErrorCode.MISSING_FIELD,
        "played_ms",
    ),
    _case("append without audio", _dumps({"type": APPEND}), ErrorCode.MISSING_FIELD, "audio"),
    _case(
        "played_ms is a string",
        '{"type": "playback.ack", "response_id": "r", "played_ms": "lots"}',
        ErrorCode.INVALID_VALUE,
        "played_ms",
    ),
    _case(
        "played_ms negative",
        '{"type": "playback.ack", "response_id": "r", "played_ms": -1}',
        ErrorCode.INVALID_VALUE,
        "played_ms",
    ),
    _case(
        "nested wrong type",
        '{"type": "session.update", "session": {"temperature": "hot"}}',
        ErrorCode.INVALID_VALUE,
        "session.temperature",
    ),
    _case(
        "session not an object",
        '{"type": "session.update", "session": []}',
        ErrorCode.INVALID_VALUE,
        "session",
    ),
    _case(
        "format not a string",
        _dumps({"type": APPEND, "audio": PCM16_B64, "input_audio_format": 16}),
        ErrorCode.INVALID_VALUE,
        "input_audio_format",
    ),
    _case("too large", '{"type": "session.heartbeat"}', ErrorCode.EVENT_TOO_LARGE, max_bytes=10),
    _case(
        "unknown append format",
        _dumps({"type": APPEND, "audio": PCM16_B64, "input_audio_format": "mp3"}),
        ErrorCode.UNSUPPORTED_AUDIO_FORMAT,
        "input_audio_format",
    ),
    _case(
        "unknown session format",
        '{"type": "session.update", "session": {"output_audio_format": "opus"}}',
        ErrorCode.UNSUPPORTED_AUDIO_FORMAT,
        "session.output_audio_format",
    ),
    _case("bad base64 audio", _dumps({"type": APPEND, "audio": "not base64!"}), ErrorCode.INVALID_AUDIO),
    _case(
        "odd pcm16 bytes, session default format",
        _dumps({"type": APPEND, "audio": THREE_BYTES_B64}),
        ErrorCode.INVALID_AUDIO,
    ),
    _case(
        "odd pcm16 bytes, the event's own format",
        _dumps({"type": APPEND, "audio": THREE_BYTES_B64, "input_audio_format": "pcm16"}),
        ErrorCode.INVALID_AUDIO,
        input_audio_format="g711_ulaw",
    ),
    _case(
        "pcm_f32le NaN sample",
        _dumps({"type": APPEND, "audio": F32_NAN_B64, "input_audio_format": "pcm_f32le"}),
        ErrorCode.INVALID_AUDIO,
    ),
    _case(
        "video frame not base64",
        _dumps({"type": APPEND, "audio": PCM16_B64, "video_frames": ["%%%"]}),
        ErrorCode.INVALID_VIDEO_FRAME,
        "video_frames",
    ),
    _case(
        "video frame not an image",
        _dumps({"type": APPEND, "audio": PCM16_B64, "video_frames": [JPEG_B64, PCM16_B64]}),
        ErrorCode.INVALID_VIDEO_FRAME,
        "video_frames",
    ),
]


def test_malformed_input_table_produces_every_parser_error_code() -> None:
    assert {case[3] for case in MALFORMED} == PARSER_CODES


@pytest.mark.parametrize(
    ("frame", "kwargs", "code", "param"),
    [pytest.param(*case[1:], id=case[0]) for case in MALFORMED],
)
def test_malformed_frame_is_rejected_with_its_code_and_param(
    frame: str | bytes, kwargs: dict[str, Any], code: ErrorCode, param: str | None
) -> None:
    error = _parse_error(frame, **kwargs)
    assert error.code is code
    assert error.param == param
    assert error.message


def test_append_audio_is_checked_against_the_session_format_when_the_event_names_none() -> None:
    frame = _dumps({"type": "input_audio_buffer.append", "audio": THREE_BYTES_B64})
    assert _parse_error(frame).code is ErrorCode.INVALID_AUDIO  # pcm16 session: 3 bytes is 1.5 samples
    parsed = parse_client_event(frame, input_audio_format="g711_ulaw")  # 3 bytes is 3 mu-law samples
    assert isinstance(parsed, ce.InputAudioBufferAppend)
    assert parsed.samples.shape == (3,)


def test_append_audio_format_alias_is_normalised() -> None:
    frame = _dumps(
        {"type": "input_audio_buffer.append", "audio": PCM16_B64, "input_audio_format": "audio/pcm"}
    )
    parsed = parse_client_event(frame, input_audio_format="g711_alaw")
    assert isinstance(parsed, ce.InputAudioBufferAppend)
    assert parsed.input_audio_format == "pcm16"
    assert parsed.samples.shape == (len(PCM16_SAMPLES),)


def test_frame_exactly_at_the_size_limit_is_accepted() -> None:
    frame = '{"type": "session.heartbeat"}'
    assert isinstance(parse_client_event(frame, max_bytes=len(frame)), ce.SessionHeartbeat)
    assert _parse_error(frame, max_bytes=len(frame) - 1).code is ErrorCode.EVENT_TOO_LARGE


def test_size_limit_counts_utf8_bytes_of_a_text_frame() -> None:
    frame = _dumps({"type": "session.close", "reason": "é" * 100})
    frame = frame.replace("\\u00e9", "é")  # send the characters themselves, not JSON escapes
    limit = len(frame) + 50  # above the character count, below the 100 extra UTF-8 bytes
    assert len(frame.encode()) > limit
    assert _parse_error(frame, max_bytes=limit).code is ErrorCode.EVENT_TOO_LARGE


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ('{"type": "playback.ack", "event_id": "c_9", "response_id": "r"}', ErrorCode.MISSING_FIELD),
        (
            '{"type": "playback.ack", "event_id": "c_9", "response_id": "r", "played_ms": "x"}',
            ErrorCode.INVALID_VALUE,
        ),
        ('{"type": "session.teleport", "event_id": "c_9"}', ErrorCode.UNKNOWN_EVENT),
        ('{"event_id": "c_9"}', ErrorCode.MISSING_FIELD),
        ('{"type": "input_audio_buffer.append", "event_id": "c_9", "audio": "***"}', ErrorCode.INVALID_AUDIO),
        (
            '{"type": "session.update", "event_id": "c_9", "session": {"input_audio_format": "mp3"}}',
            ErrorCode.UNSUPPORTED_AUDIO_FORMAT,
        ),
    ],
)
def test_readable_client_event_id_is_carried_by_the_protocol_error(frame: str, code: ErrorCode) -> None:
    error = _parse_error(frame)
    assert error.code is code
    assert error.event_id == "c_9"


@pytest.mark.parametrize(
    "frame",
    [
        '{"type": "session.heartbeat", "event_id": 9}',  # not a string: not the client's id
        '{"type": "playback.ack", "event_id": ["c_9"], "response_id": "r"}',
        '{"type": "playback.ack", "event_id": "c_9", "response_id": "r",',  # not JSON at all
    ],
)
def test_unreadable_event_id_is_not_invented(frame: str) -> None:
    assert _parse_error(frame).event_id is None


# --- forward compatibility and the OpenAI GA session shape ------------------------------------------


def test_unknown_top_level_fields_are_kept() -> None:
    frame = _dumps({"type": "playback.ack", "response_id": "r", "played_ms": 5, "x_future": {"a": [1, None]}})
    parsed = parse_client_event(frame)
    assert parsed.model_extra == {"x_future": {"a": [1, None]}}
    assert parsed.model_dump()["x_future"] == {"a": [1, None]}
    assert json.loads(parsed.model_dump_json())["x_future"] == {"a": [1, None]}


@pytest.mark.parametrize(
    ("session", "code", "param"),
    [
        ({"voice": "v", "tracing_level": 3}, "unknown_parameter", "session.tracing_level"),
        (
            {"audio": {"input": {"echo_cancellation": True}}},
            "unknown_parameter",
            "session.audio.input.echo_cancellation",
        ),
        ({"audio": {"output": {"speed": 1.5}}}, "unsupported_value", "session.audio.output.speed"),
        ({"speed": 0.8}, "unsupported_value", "session.speed"),
        ({"tracing": "auto"}, "unsupported_value", "session.tracing"),
        (
            {"audio": {"input": {"noise_reduction": {"type": "studio"}}}},
            "invalid_value",
            "session.audio.input.noise_reduction.type",
        ),
        ({"truncation": "disabled"}, "unsupported_value", "session.truncation"),
        ({"include": ["item.input_audio_transcription.logprobs"]}, "unsupported_value", "session.include"),
        ({"type": "transcription"}, "unsupported_value", "session.type"),
        (
            {"turn_detection": {"type": "server_vad", "idle_timeout_ms": 6000}},
            "unsupported_value",
            "session.turn_detection.server_vad.idle_timeout_ms",
        ),
    ],
)
def test_a_session_term_this_server_would_not_serve_is_refused_with_a_code(
    session: dict[str, Any], code: str, param: str
) -> None:
    """Never dropped in silence: a field no one defines is `unknown_parameter` (OpenAI's code), a term
    OpenAI defines with a value this server does not serve `unsupported_value`."""
    with pytest.raises(ProtocolError) as refused:
        parse_client_event(_dumps({"type": "session.update", "session": session}))
    assert (refused.value.code, refused.value.param) == (code, param)


def test_openai_terms_named_as_served_are_taken() -> None:
    session = {
        "type": "realtime",
        "tracing": None,
        "truncation": "auto",
        "include": [],
        "prompt": None,
        "speed": 1.0,
        "input_audio_noise_reduction": None,
        "audio": {"input": {"noise_reduction": None}, "output": {"speed": 1}},
    }
    parsed = parse_client_event(_dumps({"type": "session.update", "session": session}))
    assert isinstance(parsed, ce.SessionUpdate)


def test_session_update_accepts_the_openai_ga_shape() -> None:
    frame = _dumps(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "output_modalities": ["audio"],
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}},
            },
        }
    )
    parsed = parse_client_event(frame)
    assert isinstance(parsed, ce.SessionUpdate)
    assert parsed.session.modalities == ["audio"]
    assert parsed.session.input_audio_format == "pcm16"
    assert parsed.session.input_sample_rate_hz == 24000
    assert parsed.session.output_audio_format is None  # not named, so unchanged


def test_session_update_explicit_fields_win_over_the_ga_shape() -> None:
    session = {
        "modalities": ["text"],
        "output_modalities": ["audio"],
        "input_audio_format": "g711_ulaw",
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}},
    }
    parsed = parse_client_event(_dumps({"type": "session.update", "session": session}))
    assert isinstance(parsed, ce.SessionUpdate)
    assert parsed.session.modalities == ["text"]
    assert parsed.session.input_audio_format == "g711_ulaw"


def test_session_update_ga_shape_with_an_unknown_format_is_unsupported_audio_format() -> None:
    frame = _dumps(
        {"type": "session.update", "session": {"audio": {"output": {"format": {"type": "audio/mp3"}}}}}
    )
    assert _parse_error(frame).code is ErrorCode.UNSUPPORTED_AUDIO_FORMAT


def test_session_update_ga_shape_with_an_out_of_range_rate_is_invalid_value() -> None:
    frame = _dumps(
        {
            "type": "session.update",
            "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": -8000}}}},
        }
    )
    error = _parse_error(frame)
    assert error.code is ErrorCode.INVALID_VALUE
    assert error.param == "session.audio.input.format.rate"


def test_session_update_ga_shape_boolean_rate_is_not_a_sample_rate() -> None:
    frame = _dumps(
        {
            "type": "session.update",
            "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": True}}}},
        }
    )
    try:
        parsed = parse_client_event(frame)
    except ProtocolError as error:
        assert error.code is ErrorCode.INVALID_VALUE
    else:
        assert isinstance(parsed, ce.SessionUpdate)
        assert parsed.session.input_sample_rate_hz != 1


# --- the parser is total: property test --------------------------------------------------------------

_FIELD_NAMES = sorted(
    {name for model in CLIENT_EVENT_TYPES.values() for name in model.model_fields}
    | set(ce.SessionConfig.model_fields)
    | set(ce.ServerVadConfig.model_fields)
    | {"output_modalities", "audio", "input", "output", "format", "rate"}
)
_FORMAT_NAMES = ["pcm16", "pcm_f32le", "g711_ulaw", "g711_alaw", "audio/pcm", "PCMU", "mp3", ""]

_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(_FORMAT_NAMES + sorted(CLIENT_EVENT_TYPES))
    | st.binary(max_size=24).map(lambda raw: base64.b64encode(raw).decode())
)
_json_values = st.recursive(
    _leaves,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=8), children, max_size=4)
        | st.dictionaries(st.sampled_from(_FIELD_NAMES), children, max_size=4)
    ),
    max_leaves=20,
)
_image_b64 = st.builds(
    lambda head, tail: base64.b64encode(head + tail).decode(),
    st.sampled_from([b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b""]),
    st.binary(max_size=8),
)
_ga_format = st.fixed_dictionaries(
    {"type": st.sampled_from(_FORMAT_NAMES) | _json_values}, optional={"rate": _json_values}
)
_ga_direction = st.fixed_dictionaries({"format": _ga_format}) | _json_values
_ga_session = st.fixed_dictionaries(
    {},
    optional={
        "type": st.just("realtime"),
        "output_modalities": st.lists(st.sampled_from(["audio", "text", "video"]), max_size=2) | _json_values,
        "audio": st.fixed_dictionaries({}, optional={"input": _ga_direction, "output": _ga_direction}),
    },
)
_targeted_values: dict[str, st.SearchStrategy[Any]] = {
    "audio": st.binary(max_size=24).map(lambda raw: base64.b64encode(raw).decode()),
    "input_audio_format": st.sampled_from(_FORMAT_NAMES),
    "video_frames": st.lists(_image_b64, max_size=3),
    "session": _ga_session
    | st.dictionaries(st.sampled_from(sorted(ce.SessionConfig.model_fields)), _json_values, max_size=4),
    "item": st.dictionaries(st.text(max_size=8), _json_values, max_size=3),
}


_DROP = object()


def _field_value(name: str, valid: Any) -> st.SearchStrategy[Any]:
    """Mostly the example's valid value; sometimes absent; sometimes a random or targeted value."""
    random_value = _targeted_values.get(name, _json_values) | _json_values
    return st.sampled_from(["keep", "keep", "keep", "keep", "drop", "random"]).flatmap(
        lambda how: st.just(valid) if how == "keep" else st.just(_DROP) if how == "drop" else random_value
    )


def _event_of_type(event_type: str) -> st.SearchStrategy[dict[str, Any]]:
    """An event of `event_type` derived from its valid example, with fields dropped, replaced and added."""
    example = CLIENT_EXAMPLES[event_type].model_dump(mode="json", exclude_none=True)
    fields = {
        name: _field_value(name, example.get(name, _DROP))
        for name in CLIENT_EVENT_TYPES[event_type].model_fields
        if name != "type"
    }
    unknown = st.dictionaries(st.text(max_size=8), _json_values, max_size=2)
    return st.builds(
        lambda known, extra: {
            **extra,
            **{k: v for k, v in known.items() if v is not _DROP},
            "type": event_type,
        },
        st.fixed_dictionaries(fields),
        unknown,
    )


_typed_events = st.sampled_from(sorted(CLIENT_EVENT_TYPES)).flatmap(_event_of_type)
_frames = (
    st.one_of(_json_values, _typed_events).map(lambda value: json.dumps(value, allow_nan=True))
    | _typed_events.map(lambda value: json.dumps(value, allow_nan=True).encode())
    | st.binary(max_size=64)
    | st.text(max_size=64)
)


@settings(max_examples=300, deadline=None)
@given(frame=_frames, session_format=st.sampled_from(["pcm16", "pcm_f32le", "g711_ulaw", "g711_alaw"]))
def test_parser_returns_a_typed_event_or_raises_only_protocol_error(
    frame: str | bytes, session_format: Any
) -> None:
    try:
        event = parse_client_event(frame, input_audio_format=session_format)
    except ProtocolError as error:
        assert error.code in PARSER_CODES
        assert isinstance(error.message, str)
        assert error.message
    else:
        event_type = json.loads(frame)["type"]
        assert type(event) is CLIENT_EVENT_TYPES[event_type]


# --- ServerEventStamper ---------------------------------------------------------------------------


def test_stamper_numbers_events_from_one_without_gaps_and_with_unique_ids() -> None:
    stamper = ServerEventStamper()
    wires = [json.loads(stamper.encode(se.SessionHeartbeatAck())) for _ in range(50)]
    assert [wire["server_event_seq"] for wire in wires] == list(range(1, 51))
    assert len({wire["event_id"] for wire in wires}) == 50
    assert all(isinstance(wire["event_id"], str) and wire["event_id"] for wire in wires)


def test_stamp_sets_the_fields_in_place_and_encode_uses_them() -> None:
    stamper = ServerEventStamper()
    first = se.InputAudioBufferCleared()
    assert stamper.stamp(first) is first
    assert first.server_event_seq == 1
    second = se.InputAudioBufferCleared()
    wire = json.loads(stamper.encode(second))
    assert wire == {"event_id": second.event_id, "server_event_seq": 2, "type": "input_audio_buffer.cleared"}
    assert second.event_id != first.event_id


def test_encode_omits_unobserved_metrics_rather_than_sending_null_or_zero() -> None:
    event = se.ResponseCreated(
        response=se.ResponseInfo(id="resp_1", status="in_progress"),
        response_request_metrics=se.ResponseRequestMetrics(ttft_ms=None, ttfp_ms=210.0),
    )
    wire = json.loads(ServerEventStamper().encode(event))
    metrics = wire["response_request_metrics"]
    assert "ttft_ms" not in metrics
    assert "tpot_ms" not in metrics
    assert metrics["ttfp_ms"] == 210.0
    assert metrics["source"] == "server_monotonic_request_start"
    assert metrics["measurement_origin"] == {
        "ttft": "model_turn_request_start",
        "ttfp": "model_turn_request_start",
    }
    assert "status_details" not in wire["response"]


def test_two_stampers_number_independently() -> None:
    a, b = ServerEventStamper(), ServerEventStamper()
    a_events = [a.stamp(se.SessionHeartbeatAck()) for _ in range(3)]
    b_first = b.stamp(se.SessionHeartbeatAck())
    a_next = a.stamp(se.SessionHeartbeatAck())
    assert [event.server_event_seq for event in a_events] == [1, 2, 3]
    assert b_first.server_event_seq == 1
    assert a_next.server_event_seq == 4
    assert b_first.event_id not in {event.event_id for event in [*a_events, a_next]}


# --- error_event ------------------------------------------------------------------------------------


def test_capacity_exhausted_is_a_retryable_rate_limit_error() -> None:
    event = error_event(ErrorCode.SESSION_CAPACITY_EXHAUSTED, "all 4 sessions are in use")
    assert event.error.type == "rate_limit_error"
    assert event.error.retryable is True
    assert event.error.code == "session_capacity_exhausted"


def test_invalid_json_is_a_non_retryable_invalid_request_error() -> None:
    event = error_event(ErrorCode.INVALID_JSON, "frame is not valid JSON", event_id="c_1")
    assert event.error.type == "invalid_request_error"
    assert event.error.retryable is False
    assert event.error.event_id == "c_1"


@pytest.mark.parametrize("code", list(ErrorCode))
def test_error_event_type_and_retryable_come_from_the_code_table(code: ErrorCode) -> None:
    wire = json.loads(ServerEventStamper().encode(error_event(code, "m", param="p")))
    assert wire["type"] == "error"
    assert wire["error"] == {
        "type": ERROR_SPECS[code].type,
        "code": code.value,
        "message": "m",
        "param": "p",
        "retryable": ERROR_SPECS[code].retryable,
    }


def test_every_error_code_has_a_spec() -> None:
    assert set(ERROR_SPECS) == set(ErrorCode)


# --- the fast paths give the reference answers -------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)
_json_texts = st.one_of(
    _json_values.map(json.dumps),
    _json_values.map(lambda v: json.dumps(v, ensure_ascii=False)),
    st.text(alphabet='{}[]":,.-+eE0123456789 \\ntrufalsNIinfy\ud800\ufeff', max_size=30),
    st.text(max_size=30),
)


def _reference_loads(data: str | bytes) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(name)

    try:
        return ("ok", json.loads(data, parse_constant=refuse))
    except (ValueError, RecursionError):
        return ("invalid_json", None)


@settings(max_examples=400, deadline=None)
@given(text=_json_texts, as_bytes=st.booleans())
def test_the_fast_json_parse_accepts_and_refuses_what_json_loads_does(text: str, as_bytes: bool) -> None:
    data: str | bytes = text.encode("utf-8", "surrogatepass") if as_bytes else text
    try:
        ours = ("ok", wire._loads(data))
    except ProtocolError as exc:
        assert exc.code is ErrorCode.INVALID_JSON
        ours = ("invalid_json", None)
    assert repr(ours) == repr(_reference_loads(data))  # repr: nan-free, and keeps int vs float apart


@settings(max_examples=400, deadline=None)
@given(
    text=st.one_of(
        st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()),
        st.text(alphabet="ABCDabcd0189+/=\n -_é", max_size=24),
    )
)
def test_audio_base64_is_as_strict_as_the_standard_library(text: str) -> None:
    try:
        reference: object = base64.b64decode(text, validate=True)
    except ValueError:
        reference = "refused"
    try:
        ours: object = decode_base64_audio(text, "g711_ulaw")  # any length decodes: only base64 is judged
        assert not isinstance(reference, str)
        assert np.array_equal(ours, decode_audio(reference, "g711_ulaw"))
    except AudioDecodeError:
        assert reference == "refused"
