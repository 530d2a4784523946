"""Server events that also exist in the OpenAI Realtime API are readable by the `openai` SDK's own types.

Each case stamps one of our events, decodes the JSON text frame exactly as a client would receive it, and
validates it against `openai.types.realtime.RealtimeServerEvent`; then checks that the SDK object carries
our values, not merely that validation passed. Our extensions (duplex-only events, extra enum values) are
listed explicitly, and each is shown to be exactly what the SDK rejects, so the lists cannot go stale.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, get_args

import pytest
from openai.types.beta.realtime import ResponseDoneEvent as BetaResponseDoneEvent
from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemDeletedEvent,
    ConversationItemDone,
    ConversationItemInputAudioTranscriptionCompletedEvent,
    ConversationItemInputAudioTranscriptionDeltaEvent,
    ConversationItemTruncatedEvent,
    InputAudioBufferClearedEvent,
    InputAudioBufferCommittedEvent,
    InputAudioBufferSpeechStartedEvent,
    InputAudioBufferSpeechStoppedEvent,
    RateLimitsUpdatedEvent,
    RealtimeErrorEvent,
    RealtimeResponseStatus,
    RealtimeResponseUsage,
    RealtimeServerEvent,
    ResponseAudioDeltaEvent,
    ResponseAudioDoneEvent,
    ResponseAudioTranscriptDeltaEvent,
    ResponseAudioTranscriptDoneEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseDoneEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
    SessionCreatedEvent,
    SessionUpdatedEvent,
)
from openai.types.realtime.realtime_server_event import (
    ConversationItemRetrieved,
    OutputAudioBufferCleared,
    OutputAudioBufferStarted,
    OutputAudioBufferStopped,
)
from pydantic import TypeAdapter, ValidationError

from duplexkit.protocol import SERVER_EVENT_TYPES, ErrorCode, ServerEventBase, ServerEventStamper, error_event
from duplexkit.protocol import client_events as ce
from duplexkit.protocol import server_events as se
from duplexkit.protocol.dialects import Dialect

OPENAI_EVENT = TypeAdapter(RealtimeServerEvent)

# Our server events that OpenAI's Realtime API does not have: duplex extensions.
DUPLEX_ONLY_EVENTS = {
    "response.speak",
    "response.listen",
    "playback.acknowledged",
    "session.heartbeat_ack",
    "session.closed",
    "session.resumed",  # vLLM-Omni's resume contract
    "session.replaced",
    "session.resync_required",
    "session.expired",
}

# Our documented extensions to OpenAI's enumerations: `response.status_details.reason` values OpenAI does
# not have, each with the status our server ends a response with for it. "stop" is the model's natural end
# of turn, "barge_in" the user speaking over the model, "model_error" a failed model step and
# "continuation_limit" the bound on silence continuation. Our `status_details.type` may also be
# "in_progress", which OpenAI's lacks.
STATUS_REASON_EXTENSIONS = {
    "stop": "completed",
    "barge_in": "cancelled",
    "model_error": "failed",
    "continuation_limit": "incomplete",
}
STATUS_DETAILS_TYPE_EXTENSIONS = {"in_progress"}

OPENAI_STATUS_REASONS = set(get_args(get_args(RealtimeResponseStatus.model_fields["reason"].annotation)[0]))
OPENAI_STATUS_DETAILS_TYPES = set(
    get_args(get_args(RealtimeResponseStatus.model_fields["type"].annotation)[0])
)


def _wire(event: ServerEventBase) -> dict[str, Any]:
    """What the client receives: the stamped JSON text frame, decoded."""
    return json.loads(ServerEventStamper().encode(event))


def _validate(event: ServerEventBase) -> Any:
    return OPENAI_EVENT.validate_python(_wire(event))


def _canonical(event: ServerEventBase) -> dict[str, Any]:
    """The event as the engine emits it, before any dialect renders it (vLLM-Omni's dialect keeps it)."""
    return json.loads(event.model_dump_json(exclude_none=True))


# --- our events ---------------------------------------------------------------------------------------


def _capabilities() -> se.Capabilities:
    return se.Capabilities(
        chunk_period_ms=1000,
        first_unit_ms=1030,
        supports_barge_in=True,
        input_modes=["audio"],
        max_sessions=2,
        input_sample_rate_hz=24000,  # a GA session: OpenAI's `audio/pcm` is 24 kHz
        output_sample_rate_hz=24000,
    )


def _session() -> se.SessionInfo:
    return se.SessionInfo(
        id="sess_7",
        model="minicpm-o-4.5",
        modalities=["audio"],
        instructions="Answer briefly.",
        voice="default",
        input_audio_format="pcm16",
        output_audio_format="pcm16",
        turn_detection=ce.ServerVadConfig(),
        idle_timeout_s=300.0,
        overlap_policy="barge_in_on_speech",
        playback_commit_policy="commit_all_on_done",
        capabilities=_capabilities(),
    )


def _assistant_item() -> se.ConversationItem:
    return se.ConversationItem(
        id="item_a1",
        role="assistant",
        status="in_progress",
        content=[se.ItemContent(type="output_audio", transcript="Hi there.")],
    )


def _user_item() -> se.ConversationItem:
    return se.ConversationItem(
        id="item_u1", role="user", content=[se.ItemContent(type="input_audio", transcript="hello")]
    )


def _ids() -> dict[str, Any]:
    return {"response_id": "resp_3", "item_id": "item_a1", "output_index": 0, "content_index": 1}


def _response_done(status: str, reason: str | None) -> se.ResponseDone:
    details = se.StatusDetails(type=status, reason=reason)  # type: ignore[arg-type]
    return se.ResponseDone(
        response=se.ResponseInfo(
            id="resp_3",
            status=status,  # type: ignore[arg-type]
            status_details=details,
            output=[_assistant_item()],
            output_modalities=["audio"],
            usage=se.Usage(input_tokens=18, output_tokens=12, total_tokens=30),
        ),
        response_request_metrics=se.ResponseRequestMetrics(ttft_ms=90.0, ttfp_ms=310.0, tpot_ms=25.0),
    )


def _check_session(ours: se.SessionCreated | se.SessionUpdated, theirs: Any) -> None:
    assert theirs.session.type == "realtime"
    assert theirs.session.model == ours.session.model
    assert theirs.session.instructions == ours.session.instructions
    # The GA shape (not the beta `modalities` / `input_audio_format` fields).
    assert theirs.session.output_modalities == ["audio"]
    assert theirs.session.audio.input.format.type == theirs.session.audio.output.format.type == "audio/pcm"
    assert theirs.session.audio.input.format.rate == theirs.session.audio.output.format.rate == 24000
    assert theirs.session.audio.input.turn_detection.type == "server_vad"
    assert theirs.session.audio.output.voice == "default"
    assert "input_audio_format" not in theirs.session.model_extra
    # Our duplex fields ride along as extras an SDK client can still read.
    assert theirs.session.model_extra["id"] == ours.session.id
    assert theirs.session.model_extra["capabilities"]["chunk_period_ms"] == 1000


def _check_item(ours: se.ConversationItem, theirs: Any) -> None:
    assert theirs.id == ours.id
    assert theirs.role == ours.role
    assert theirs.type == "message"
    assert theirs.status == ours.status
    assert [(c.type, c.transcript) for c in theirs.content] == [(c.type, c.transcript) for c in ours.content]


def _check_response(ours: se.ResponseInfo, theirs: Any) -> None:
    assert theirs.id == ours.id
    assert theirs.object == "realtime.response"
    assert theirs.status == ours.status
    assert theirs.output_modalities == ours.output_modalities
    assert [item.id for item in theirs.output or []] == [item.id for item in ours.output]
    if ours.status_details is None:
        assert theirs.status_details is None
    else:
        assert theirs.status_details.type == ours.status_details.type
        assert theirs.status_details.reason == ours.status_details.reason
    if ours.usage is not None:
        assert theirs.usage.output_tokens == ours.usage.output_tokens
        assert theirs.usage.total_tokens == ours.usage.total_tokens


def _same(*names: str) -> Callable[[Any, Any], None]:
    def check(ours: Any, theirs: Any) -> None:
        for name in names:
            assert getattr(theirs, name) == getattr(ours, name), name

    return check


def _check_content_part(ours: Any, theirs: Any) -> None:
    _same("response_id", "item_id", "output_index", "content_index")(ours, theirs)
    assert theirs.part.type == ours.part.type
    assert theirs.part.transcript == ours.part.transcript


def _check_error(ours: se.Error, theirs: Any) -> None:
    assert theirs.error.type == ours.error.type
    assert theirs.error.code == ours.error.code.value
    assert theirs.error.message == ours.error.message
    assert theirs.error.param == ours.error.param
    assert theirs.error.event_id == ours.error.event_id


def _check_rate_limits(ours: se.RateLimitsUpdated, theirs: Any) -> None:
    assert [(r.name, r.limit, r.remaining, r.reset_seconds) for r in theirs.rate_limits] == [
        (r.name, r.limit, r.remaining, r.reset_seconds) for r in ours.rate_limits
    ]


# (our event, the SDK class it must become, a check that the SDK object carries our values)
CASES: dict[str, tuple[Callable[[], ServerEventBase], type, Callable[[Any, Any], None]]] = {
    "session.created": (lambda: se.SessionCreated(session=_session()), SessionCreatedEvent, _check_session),
    "session.updated": (lambda: se.SessionUpdated(session=_session()), SessionUpdatedEvent, _check_session),
    "input_audio_buffer.committed": (
        lambda: se.InputAudioBufferCommitted(
            item_id="item_u1", previous_item_id="item_a0", audio_end_ms=2030.0
        ),
        InputAudioBufferCommittedEvent,
        _same("item_id", "previous_item_id"),
    ),
    "input_audio_buffer.cleared": (
        se.InputAudioBufferCleared,
        InputAudioBufferClearedEvent,
        _same("type"),
    ),
    "input_audio_buffer.speech_started": (
        lambda: se.InputAudioBufferSpeechStarted(audio_start_ms=320, item_id="item_u1"),
        InputAudioBufferSpeechStartedEvent,
        _same("audio_start_ms", "item_id"),
    ),
    "input_audio_buffer.speech_stopped": (
        lambda: se.InputAudioBufferSpeechStopped(audio_end_ms=1870, item_id="item_u1"),
        InputAudioBufferSpeechStoppedEvent,
        _same("audio_end_ms", "item_id"),
    ),
    "conversation.item.input_audio_transcription.delta": (
        lambda: se.InputAudioTranscriptionDelta(item_id="item_u1", delta="turn on the"),
        ConversationItemInputAudioTranscriptionDeltaEvent,
        _same("item_id", "content_index", "delta"),
    ),
    "conversation.item.input_audio_transcription.completed": (
        lambda: se.InputAudioTranscriptionCompleted(
            item_id="item_u1",
            transcript="turn on the kitchen lights",
            usage=se.TranscriptionUsage(seconds=1.31),
        ),
        ConversationItemInputAudioTranscriptionCompletedEvent,
        lambda ours, theirs: (
            _same("item_id", "content_index", "transcript")(ours, theirs),
            _same("type", "seconds")(ours.usage, theirs.usage),
        ),
    ),
    "conversation.item.added": (
        lambda: se.ConversationItemAdded(item=_assistant_item(), previous_item_id="item_u1"),
        ConversationItemAdded,
        lambda ours, theirs: (_check_item(ours.item, theirs.item), _same("previous_item_id")(ours, theirs)),
    ),
    "conversation.item.done": (
        lambda: se.ConversationItemDone(item=_assistant_item(), previous_item_id="item_u1"),
        ConversationItemDone,
        lambda ours, theirs: (_check_item(ours.item, theirs.item), _same("previous_item_id")(ours, theirs)),
    ),
    "conversation.item.retrieved": (
        lambda: se.ConversationItemRetrieved(item=_user_item()),
        ConversationItemRetrieved,
        lambda ours, theirs: _check_item(ours.item, theirs.item),
    ),
    "conversation.item.deleted": (
        lambda: se.ConversationItemDeleted(item_id="item_u1"),
        ConversationItemDeletedEvent,
        _same("item_id"),
    ),
    "conversation.item.truncated": (
        lambda: se.ConversationItemTruncated(item_id="item_a1", content_index=0, audio_end_ms=1500),
        ConversationItemTruncatedEvent,
        _same("item_id", "content_index", "audio_end_ms"),
    ),
    "response.created": (
        lambda: se.ResponseCreated(
            response=se.ResponseInfo(id="resp_3", status="in_progress", output_modalities=["audio"]),
            response_request_metrics=se.ResponseRequestMetrics(),
        ),
        ResponseCreatedEvent,
        lambda ours, theirs: _check_response(ours.response, theirs.response),
    ),
    "response.output_item.added": (
        lambda: se.ResponseOutputItemAdded(response_id="resp_3", output_index=0, item=_assistant_item()),
        ResponseOutputItemAddedEvent,
        lambda ours, theirs: (
            _check_item(ours.item, theirs.item),
            _same("response_id", "output_index")(ours, theirs),
        ),
    ),
    "response.output_item.done": (
        lambda: se.ResponseOutputItemDone(response_id="resp_3", output_index=0, item=_assistant_item()),
        ResponseOutputItemDoneEvent,
        lambda ours, theirs: (
            _check_item(ours.item, theirs.item),
            _same("response_id", "output_index")(ours, theirs),
        ),
    ),
    "response.content_part.added": (
        lambda: se.ResponseContentPartAdded(**_ids(), part=se.ContentPart(type="audio", transcript="")),
        ResponseContentPartAddedEvent,
        _check_content_part,
    ),
    "response.content_part.done": (
        lambda: se.ResponseContentPartDone(
            **_ids(), part=se.ContentPart(type="audio", transcript="Hi there.")
        ),
        ResponseContentPartDoneEvent,
        _check_content_part,
    ),
    "response.output_audio.delta": (
        lambda: se.ResponseOutputAudioDelta(
            **_ids(),
            delta="AAAAAA==",
            sample_rate_hz=24000,
            metadata=se.AudioDeltaMetadata(audio_duration_ms=1000.0),
            response_request_metrics=se.ResponseRequestMetrics(ttfp_ms=310.0),
        ),
        ResponseAudioDeltaEvent,
        _same("response_id", "item_id", "output_index", "content_index", "delta"),
    ),
    "response.output_audio_transcript.delta": (
        lambda: se.ResponseOutputAudioTranscriptDelta(**_ids(), delta="Hi "),
        ResponseAudioTranscriptDeltaEvent,
        _same("response_id", "item_id", "output_index", "content_index", "delta"),
    ),
    "response.output_text.delta": (
        lambda: se.ResponseOutputTextDelta(**_ids(), delta="Hi "),
        ResponseTextDeltaEvent,
        _same("response_id", "item_id", "output_index", "content_index", "delta"),
    ),
    "response.output_audio.done": (
        lambda: se.ResponseOutputAudioDone(**_ids()),
        ResponseAudioDoneEvent,
        _same("response_id", "item_id", "output_index", "content_index"),
    ),
    "response.output_audio_transcript.done": (
        lambda: se.ResponseOutputAudioTranscriptDone(**_ids(), transcript="Hi there."),
        ResponseAudioTranscriptDoneEvent,
        _same("response_id", "item_id", "output_index", "content_index", "transcript"),
    ),
    "response.output_text.done": (
        lambda: se.ResponseOutputTextDone(**_ids(), text="Hi there."),
        ResponseTextDoneEvent,
        _same("response_id", "item_id", "output_index", "content_index", "text"),
    ),
    "response.done": (
        lambda: _response_done("completed", None),
        ResponseDoneEvent,
        lambda ours, theirs: _check_response(ours.response, theirs.response),
    ),
    "output_audio_buffer.started": (
        lambda: se.OutputAudioBufferStarted(response_id="resp_3"),
        OutputAudioBufferStarted,
        _same("response_id"),
    ),
    "output_audio_buffer.stopped": (
        lambda: se.OutputAudioBufferStopped(response_id="resp_3"),
        OutputAudioBufferStopped,
        _same("response_id"),
    ),
    "output_audio_buffer.cleared": (
        lambda: se.OutputAudioBufferCleared(response_id="resp_3"),
        OutputAudioBufferCleared,
        _same("response_id"),
    ),
    "rate_limits.updated": (
        lambda: se.RateLimitsUpdated(
            rate_limits=[
                se.RateLimit(name="requests", limit=2, remaining=1, reset_seconds=0.0),
                se.RateLimit(name="tokens", limit=4096, remaining=4000, reset_seconds=1.5),
            ]
        ),
        RateLimitsUpdatedEvent,
        _check_rate_limits,
    ),
    "response.function_call_arguments.delta": (
        lambda: se.ResponseFunctionCallArgumentsDelta(
            response_id="resp_3", item_id="item_f1", output_index=1, call_id="call_1", delta='{"city":'
        ),
        ResponseFunctionCallArgumentsDeltaEvent,
        _same("response_id", "item_id", "output_index", "call_id", "delta"),
    ),
    "response.function_call_arguments.done": (
        lambda: se.ResponseFunctionCallArgumentsDone(
            response_id="resp_3",
            item_id="item_f1",
            output_index=1,
            call_id="call_1",
            name="get_weather",
            arguments='{"city": "Paris"}',
        ),
        ResponseFunctionCallArgumentsDoneEvent,
        _same("response_id", "item_id", "output_index", "call_id", "name", "arguments"),
    ),
    "error": (
        lambda: error_event(ErrorCode.SESSION_CAPACITY_EXHAUSTED, "all sessions in use", event_id="c_1"),
        RealtimeErrorEvent,
        _check_error,
    ),
}


def test_every_server_event_is_either_checked_against_openai_or_listed_as_duplex_only() -> None:
    assert set(CASES).isdisjoint(DUPLEX_ONLY_EVENTS)
    assert set(CASES) | DUPLEX_ONLY_EVENTS == set(SERVER_EVENT_TYPES)


@pytest.mark.parametrize("event_type", sorted(CASES))
def test_shared_event_validates_against_the_openai_sdk_and_keeps_our_values(event_type: str) -> None:
    build, sdk_class, check = CASES[event_type]
    ours = build()
    assert ours.type == event_type  # type: ignore[attr-defined]
    theirs = _validate(ours)
    assert type(theirs) is sdk_class
    assert theirs.type == event_type
    assert theirs.event_id == ours.event_id is not None
    check(ours, theirs)


def test_cancelled_response_with_client_cancelled_reason_validates() -> None:
    ours = _response_done("cancelled", "client_cancelled")
    theirs = _validate(ours)
    assert isinstance(theirs, ResponseDoneEvent)
    _check_response(ours.response, theirs.response)
    assert theirs.response.status_details.reason == "client_cancelled"


def test_turn_detected_cancellation_validates() -> None:
    theirs = _validate(_response_done("cancelled", "turn_detected"))
    assert theirs.response.status_details.reason == "turn_detected"


def test_error_event_of_every_code_validates() -> None:
    for code in ErrorCode:
        theirs = _validate(error_event(code, f"{code.value} happened", param="x"))
        assert isinstance(theirs, RealtimeErrorEvent)
        assert theirs.error.code == code.value


def test_status_reason_extension_list_is_exactly_what_we_add_to_openai() -> None:
    ours = set(get_args(se.ResponseEndReason))
    assert ours - OPENAI_STATUS_REASONS == set(STATUS_REASON_EXTENSIONS)


def test_status_details_type_extension_list_is_exactly_what_we_add_to_openai() -> None:
    ours = set(get_args(se.ResponseStatus))
    assert ours - OPENAI_STATUS_DETAILS_TYPES == STATUS_DETAILS_TYPE_EXTENSIONS


@pytest.mark.parametrize(("reason", "status"), sorted(STATUS_REASON_EXTENSIONS.items()))
def test_each_status_reason_extension_is_rejected_by_openai(reason: str, status: str) -> None:
    with pytest.raises(ValidationError) as info:
        OPENAI_EVENT.validate_python(_canonical(_response_done(status, reason)))
    assert "status_details.reason" in str(info.value)
    # Without the extension value the same response validates.
    assert isinstance(_validate(_response_done(status, None)), ResponseDoneEvent)


@pytest.mark.parametrize(
    ("reason", "status", "openai_reason"),
    [
        ("barge_in", "cancelled", "turn_detected"),
        ("turn_detected", "cancelled", "turn_detected"),
        ("client_cancelled", "cancelled", "client_cancelled"),
        ("continuation_limit", "incomplete", "max_output_tokens"),
        ("model_error", "failed", None),
    ],
)
def test_the_openai_dialects_say_every_reason_in_openais_enum(
    reason: str, status: str, openai_reason: str | None
) -> None:
    """GA and beta sessions get OpenAI's reasons, so a strict reader of either API's types accepts every
    `response.done`; vLLM-Omni's dialect keeps ours (its clients read them)."""
    event = _response_done(status, reason)
    theirs = _validate(event)
    assert theirs.response.status == status
    assert theirs.response.status_details.reason == openai_reason
    beta = json.loads(ServerEventStamper(Dialect.BETA).encode(_response_done(status, reason)))
    assert BetaResponseDoneEvent.model_validate(beta).response.status_details.reason == openai_reason
    duplex = json.loads(ServerEventStamper(Dialect.VLLM_OMNI).encode(_response_done(status, reason)))
    assert duplex["response"]["status_details"]["reason"] == reason


def test_listen_continuation_limit_is_a_duplex_only_event_openai_rejects() -> None:
    event = se.ResponseListen(
        response=se.ListenInfo(metadata=se.ListenMetadata(reason="continuation_limit", model_listen=False))
    )
    with pytest.raises(ValidationError):
        _validate(event)


def _duplex_only_examples() -> list[ServerEventBase]:
    return [
        se.ResponseSpeak(response_id="resp_3", item_id="item_a1"),
        se.ResponseListen(
            response=se.ListenInfo(metadata=se.ListenMetadata(reason="model_listen", model_listen=True))
        ),
        se.PlaybackAcknowledged(response_id="resp_3", played_ms=500.0, committed_ms=500.0),
        se.SessionHeartbeatAck(),
        se.SessionClosed(session_id="sess_7", reason="client_close"),
        se.SessionResumed(
            session_id="sess_7",
            resume_token="tok",
            attachment_generation=2,
            replayed_events=0,
            client_events_received=3,
            session=_session(),
        ),
        se.SessionReplaced(session_id="sess_7", attachment_generation=3),
        se.SessionResyncRequired(session_id="sess_7", reason="journal_gap", first_available_seq=5),
        se.SessionExpired(session_id="sess_7", reason="idle_ttl_expired"),
    ]


def test_duplex_only_examples_cover_the_list() -> None:
    assert {event.type for event in _duplex_only_examples()} == DUPLEX_ONLY_EVENTS  # type: ignore[attr-defined]


@pytest.mark.parametrize("event", _duplex_only_examples(), ids=lambda event: event.type)
def test_duplex_only_event_is_unknown_to_openai(event: ServerEventBase) -> None:
    with pytest.raises(ValidationError):
        _validate(event)


def test_a_completed_reply_from_the_engine_validates_strictly() -> None:
    """What the engine really sends for a finished reply validates against the SDK's strict types: a
    completed response has no `status_details`, as OpenAI's."""
    import numpy as np

    from duplexkit.engine import EngineConfig, EngineSession, Speak
    from duplexkit.engine.units import Unit

    engine = EngineSession("sess_compat", EngineConfig(model="m"))
    engine.start(0.0)
    unit = Unit(0, engine.fence, np.zeros(16_000, np.float32), 16_000, 0.0, 1000.0, final=True)
    engine.request_started(unit, 0.0)
    speak = Speak(tokens=("Done.",), audio=np.zeros(2_400, np.float32), end_of_turn=True)
    [done] = [e for e in engine.on_decision(unit, speak, 0.2).events if isinstance(e, se.ResponseDone)]
    wire = _wire(done)
    assert "status_details" not in wire["response"]
    assert ResponseDoneEvent.model_validate(wire, strict=True).response.status == "completed"


def test_a_user_item_the_engine_adds_before_the_reply_it_came_after_validates_with_its_place() -> None:
    """A transcript that completes after the reply opened: its user item's `conversation.item.added` and
    `.done` validate against the SDK and keep `previous_item_id`, which is how OpenAI says where it goes."""
    import numpy as np

    from duplexkit.engine import EngineConfig, EngineSession, Speak, Transcribed
    from duplexkit.engine.units import Unit

    engine = EngineSession("sess_compat", EngineConfig(model="m"))
    engine.start(0.0)

    def unit(index: int) -> Unit:
        return Unit(index, engine.fence, np.zeros(16_000, np.float32), 16_000, index * 1e3, index * 1e3 + 1e3)

    greeting = engine.on_decision(unit(0), Speak(end_of_turn=True), 0.1).events
    [greeted] = [e.item.id for e in greeting if isinstance(e, se.ConversationItemAdded)]
    engine.on_decision(unit(1), Speak(), 1.1)  # the reply opens at 2 s; the recogniser finishes after
    heard = Transcribed("hello", final=True, audio_seconds=0.5, speech_end_ms=1700.0)
    events = engine.on_decision(unit(2), heard, 2.1).events
    added = [e for e in events if isinstance(e, se.ConversationItemAdded | se.ConversationItemDone)]
    assert [e.type for e in added] == ["conversation.item.added", "conversation.item.done"]
    for ours in added:
        theirs = _validate(ours)
        assert isinstance(theirs, ConversationItemAdded | ConversationItemDone)
        _check_item(ours.item, theirs.item)
        assert theirs.previous_item_id == greeted  # after the greeting, before the reply it came after
    assert [item.role for item in engine.history] == ["assistant", "user", "assistant"]


@pytest.mark.parametrize(
    ("session", "max_tokens", "voice"),
    [
        # The GA shape, as the openai SDK's `realtime.connect` sends it.
        (
            {"type": "realtime", "max_output_tokens": 300, "audio": {"output": {"voice": "alloy"}}},
            300,
            "alloy",
        ),
        ({"type": "realtime", "max_output_tokens": "inf"}, None, None),
        # The beta shape.
        ({"max_response_output_tokens": 120, "voice": "verse"}, 120, "verse"),
        ({"max_response_output_tokens": "inf"}, None, None),
    ],
)
def test_openai_reply_budgets_and_voices_reach_the_session_fields(
    session: dict[str, Any], max_tokens: int | None, voice: str | None
) -> None:
    """OpenAI names the reply budget `max_output_tokens` (GA) or `max_response_output_tokens` (beta) and
    puts GA's voice under `audio.output`; a server that dropped them would ignore what clients asked for."""
    update = ce.SessionUpdate.model_validate({"type": "session.update", "session": session})
    assert (update.session.max_tokens, update.session.voice) == (max_tokens, voice)


def test_a_ga_session_update_is_read_and_reported_where_openai_puts_each_term() -> None:
    """Every GA term a client sends comes back in `session.updated` at OpenAI's place, and the event
    validates strictly against the SDK's GA `SessionUpdatedEvent` (τ-Voice sets server VAD under
    `audio.input`: it was read nowhere and reported `null`)."""
    from duplexkit.engine import EngineConfig, EngineSession
    from duplexkit.protocol.wire import parse_client_event

    engine = EngineSession("sess_ga", EngineConfig(model="m", server_vad=True))
    engine.start(0.0)
    vad = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500}
    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    session = {
        "type": "realtime",
        "output_modalities": ["audio"],
        "instructions": "Answer briefly.",
        "max_output_tokens": 300,
        "tools": [tool],
        "tool_choice": "required",
        "truncation": "auto",
        "tracing": None,
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": 24_000},
                "transcription": {"model": "gpt-4o-transcribe", "language": "en"},
                "noise_reduction": None,
                "turn_detection": vad,
            },
            "output": {"format": {"type": "audio/pcmu"}, "voice": "marin", "speed": 1.0},
        },
    }
    update = parse_client_event(json.dumps({"type": "session.update", "session": session}))
    [updated] = engine.handle(update, 0.0).events
    theirs = SessionUpdatedEvent.model_validate(_wire(updated), strict=True).session
    assert theirs.type == "realtime" and theirs.output_modalities == ["audio"]
    assert (theirs.instructions, theirs.max_output_tokens, theirs.tool_choice) == (
        "Answer briefly.",
        300,
        "required",
    )
    assert [t.model_dump(exclude_none=True) for t in theirs.tools] == [tool]
    audio_in, audio_out = theirs.audio.input, theirs.audio.output
    assert audio_in.turn_detection.model_dump(exclude_none=True) == {
        **vad,
        "interrupt_response": True,
        "create_response": True,
    }
    assert audio_in.transcription.model_dump(exclude_none=True) == {
        "model": "gpt-4o-transcribe",
        "language": "en",
    }
    assert (audio_in.format.type, audio_in.format.rate, audio_in.noise_reduction) == (
        "audio/pcm",
        24_000,
        None,
    )
    assert (audio_out.format.type, audio_out.voice, audio_out.speed) == ("audio/pcmu", "marin", 1.0)
    assert (theirs.truncation, theirs.tracing, theirs.prompt, theirs.include) == ("auto", None, None, None)
    assert not {"turn_detection", "voice", "modalities", "max_tokens"} & set(theirs.model_extra or {})


@pytest.mark.parametrize(
    "session",
    [
        {"audio": {"input": {"noise_reduction": {"type": "near_field"}}}},  # τ-Voice, on every session
        {"audio": {"input": {"noise_reduction": {"type": "far_field"}}}},
        {"audio": {}, "input_audio_noise_reduction": {"type": "near_field"}},  # beta's name
    ],
)
def test_noise_reduction_is_taken_and_reported_not_in_force(session: dict[str, Any]) -> None:
    """τ-Voice asks for near-field noise reduction on every session and fails on any `error` (it was
    refused with `unsupported_value`): the request is taken, its shape checked, and `session.updated`
    reports none in force, valid for the SDK's GA `SessionUpdatedEvent`."""
    from duplexkit.engine import EngineConfig, EngineSession
    from duplexkit.protocol.wire import parse_client_event

    engine = EngineSession("sess_nr", EngineConfig(model="m"))
    engine.start(0.0)
    pcmu = {"format": {"type": "audio/pcmu"}}  # as τ-Voice's, both ways
    audio = {"input": {**pcmu, **session["audio"].get("input", {})}, "output": pcmu}
    session = {"type": "realtime", **session, "audio": audio}
    update = parse_client_event(json.dumps({"type": "session.update", "session": session}))
    [updated] = engine.handle(update, 0.0).events
    theirs = SessionUpdatedEvent.model_validate(_wire(updated), strict=True).session
    assert theirs.audio.input.noise_reduction is None


def test_a_reply_s_usage_counts_what_was_observed_and_omits_what_was_not() -> None:
    """OpenAI's usage shape: the reply's text tokens as `output_tokens` and `output_token_details`; the
    input the model did not count is omitted (EVA-Bench logged it as 0), and so is the total it would be
    part of, never a made-up number."""
    import numpy as np

    from duplexkit.engine import EngineConfig, EngineSession, Speak
    from duplexkit.engine.units import Unit

    engine = EngineSession("sess_usage", EngineConfig(model="m"))
    engine.start(0.0)
    unit = Unit(0, engine.fence, np.zeros(16_000, np.float32), 16_000, 0.0, 1000.0, final=True)
    engine.request_started(unit, 0.0)
    speak = Speak(tokens=("It ", "is ", "done."), audio=np.zeros(2_400, np.float32), end_of_turn=True)
    [done] = [e for e in engine.on_decision(unit, speak, 0.2).events if isinstance(e, se.ResponseDone)]
    usage = _wire(done)["response"]["usage"]
    assert usage == {"output_tokens": 3, "output_token_details": {"text_tokens": 3}}
    theirs = RealtimeResponseUsage.model_validate(usage, strict=True)
    assert (theirs.input_tokens, theirs.total_tokens, theirs.output_tokens) == (None, None, 3)
