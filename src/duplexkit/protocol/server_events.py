"""Server → client events: one pydantic model per event type, discriminated on `type`.

Events the OpenAI Realtime API also has keep its field names and shapes, so its clients and SDK read them;
duplex extensions (`response.speak`, `response.listen`, `playback.acknowledged`, `session.closed`, the
per-response metrics) are added beside them. `event_id` and `server_event_seq` are left empty here and
stamped by `ServerEventStamper` when an event is sent.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_serializer

from duplexkit.protocol.audio import AudioFormat, EncodedAudio
from duplexkit.protocol.client_events import FunctionTool, InputAudioTranscription, ToolChoice, TurnDetection
from duplexkit.protocol.errors import ERROR_SPECS, ErrorCode, ErrorType

METRICS_SOURCE_SERVER: Literal["server_monotonic_request_start"] = "server_monotonic_request_start"
"""`response_request_metrics.source` of values measured on the server from the model request's start."""

ResponseStatus = Literal["in_progress", "completed", "cancelled", "failed", "incomplete"]
ResponseEndReason = Literal[
    "stop", "barge_in", "client_cancelled", "turn_detected", "model_error", "continuation_limit"
]
ListenReason = Literal[
    "model_listen", "buffering", "silence_or_noise", "continuation_limit", "response_budget"
]


class ServerEventBase(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    event_id: str | None = None
    server_event_seq: int | None = None


# --- shared objects ---------------------------------------------------------------------------------


class Capabilities(BaseModel):
    """What the serving model can do; a client sizes its units from `chunk_period_ms` and `first_unit_ms`."""

    chunk_period_ms: int
    first_unit_ms: int
    supports_barge_in: bool
    input_modes: list[Literal["audio", "video"]]
    max_sessions: int
    input_sample_rate_hz: int
    output_sample_rate_hz: int
    supports_session_resume: bool = False
    supports_function_calling: bool = False
    """The model calls the session's `tools`; without it the tools are taken, echoed and never called."""


class SessionInfo(BaseModel):
    """The session as the server holds it (`session.created` / `session.updated`)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["realtime"] = "realtime"
    id: str
    object: Literal["realtime.session"] = "realtime.session"
    model: str
    model_identity: dict[str, str] | None = None
    """What exactly serves the session (duplexkit's extension; `model` stays the name OpenAI clients read):
    `id`, one string that differs whenever the model does (a checkpoint's content fingerprint, the
    cascade's LLM and voice, a remote responder's model), and the parts it is made of."""
    modalities: list[Literal["audio", "text"]]
    instructions: str | None = None
    voice: str | None = None
    input_audio_format: AudioFormat
    output_audio_format: AudioFormat
    turn_detection: TurnDetection | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    idle_timeout_s: float
    overlap_policy: Literal["listen_only", "barge_in_on_speech"]
    playback_commit_policy: Literal["commit_all_on_done", "ack_only"]
    tools: list[FunctionTool] = Field(default_factory=list)
    tool_choice: ToolChoice = "auto"
    input_audio_transcription: InputAudioTranscription | None = None
    """What the client asked of input transcription, echoed (GA: `audio.input.transcription`)."""
    capabilities: Capabilities


class ItemContent(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["input_audio", "input_text", "output_audio", "output_text", "audio", "text"]
    text: str | None = None
    transcript: str | None = None


ItemType = Literal["message", "function_call", "function_call_output"]


class ConversationItem(BaseModel):
    """An item of the conversation, in OpenAI's flat shape (the beta `ConversationItem`; GA's per-type
    classes have the same fields): a `message` (assistant messages hold only what the listener actually
    heard), a model's `function_call` (`call_id`, `name`, `arguments`: a JSON-encoded string), or the
    client's `function_call_output` for one (`call_id`, `output`). Fields another type does not have stay
    `None` and are not sent."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["realtime.item"] = "realtime.item"
    type: ItemType = "message"
    role: Literal["user", "assistant", "system"] | None = None
    status: Literal["in_progress", "completed", "incomplete"] = "completed"
    content: list[ItemContent] | None = Field(default_factory=list)
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None


class MeasurementOrigin(BaseModel):
    ttft: Literal["model_turn_request_start"] = "model_turn_request_start"
    ttfp: Literal["model_turn_request_start"] = "model_turn_request_start"


class ResponseRequestMetrics(BaseModel):
    """Per-response timings measured on the server's monotonic clock from the model request's start: when
    the unit that prompted the response was complete and submitted to the model's queue, so TTFT/TTFP
    include the unit's wait for the stepper, which `queue_wait_ms` also gives on its own.

    A value that was not observed is `None` (omitted on the wire), never 0.
    """

    source: Literal["server_monotonic_request_start"] | None = METRICS_SOURCE_SERVER
    """`None` (omitted) when the response had no request start: nothing here is server-anchored then."""
    measurement_origin: MeasurementOrigin | None = Field(default_factory=MeasurementOrigin)
    ttft_ms: float | None = None
    ttfp_ms: float | None = None
    tpot_ms: float | None = None
    output_tokens: int | None = None
    output_audio_ms: float | None = None
    queue_wait_ms: float | None = None
    """How long the unit at the request start waited in the model's queue before it was stepped."""
    model_stages_ms: dict[str, float] | None = None
    """The model's own split of its latency (stage → ms, on its clocks; the cascade's are documented in
    docs/models.md), when it measures one."""


class ErrorDetail(BaseModel):
    type: ErrorType
    code: ErrorCode
    message: str
    param: str | None = None
    event_id: str | None = None
    retryable: bool = False


class StatusDetails(BaseModel):
    """Why a response ended; a `failed` one carries its error here (OpenAI's place for a failure within a
    response, which clients such as Pipecat and LiveKit report without ending the session)."""

    type: ResponseStatus
    reason: ResponseEndReason | None = None
    error: ErrorDetail | None = None


class InputTokenDetails(BaseModel):
    text_tokens: int | None = None
    audio_tokens: int | None = None
    image_tokens: int | None = None
    cached_tokens: int | None = None


class OutputTokenDetails(BaseModel):
    text_tokens: int | None = None
    audio_tokens: int | None = None


class Usage(BaseModel):
    """OpenAI's `response.usage`. A count the model did not observe is `None` (omitted), never 0: the
    engine counts the reply's text tokens (`output_tokens`, `output_token_details.text_tokens`); no model
    reports the tokens it read, so `input_tokens` and `total_tokens` (their sum) are omitted (`of_reply`)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    input_token_details: InputTokenDetails | None = None
    output_token_details: OutputTokenDetails | None = None

    @classmethod
    def of_reply(cls, text_tokens: int) -> Usage:
        """The usage of a reply of `text_tokens` text tokens (its audio synthesised from them, no tokens of
        its own as far as the engine knows), its input not counted."""
        return cls(
            output_tokens=text_tokens, output_token_details=OutputTokenDetails(text_tokens=text_tokens)
        )


class ResponseInfo(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["realtime.response"] = "realtime.response"
    status: ResponseStatus
    status_details: StatusDetails | None = None
    output: list[ConversationItem] = Field(default_factory=list)
    output_modalities: list[Literal["audio", "text"]] | None = None
    usage: Usage | None = None
    metadata: dict[str, Any] | None = None
    """The `response.metadata` of the `response.create` that asked for this response, echoed (LiveKit
    matches its `client_event_id` to tell which request a response answers)."""


class AudioTextMark(BaseModel):
    """After `text_chars` characters of transcript, the audio had reached `audio_end_ms`."""

    text_chars: int
    audio_end_ms: float


class AudioDeltaMetadata(BaseModel):
    audio_duration_ms: float
    end_of_turn: bool = False
    audio_text_marks: list[AudioTextMark] = Field(default_factory=list)


class ContentPart(BaseModel):
    type: Literal["audio", "text"]
    transcript: str | None = None
    text: str | None = None


class ListenMetadata(BaseModel):
    model_config = ConfigDict(frozen=True)

    reason: ListenReason
    model_listen: bool


class ListenInfo(BaseModel):
    """Frozen, so one object per reason can serve every listen outside a reply (one per unit)."""

    model_config = ConfigDict(frozen=True)

    id: str | None = None
    status: Literal["listening"] = "listening"
    metadata: ListenMetadata


class RateLimit(BaseModel):
    name: Literal["requests", "tokens"]
    limit: int
    remaining: int
    reset_seconds: float


# --- events -----------------------------------------------------------------------------------------


class SessionCreated(ServerEventBase):
    """`resume_token` and `attachment_generation` are set when the server supports resume."""

    type: Literal["session.created"] = "session.created"
    session: SessionInfo
    resume_token: str | None = None
    attachment_generation: int | None = None


class SessionUpdated(ServerEventBase):
    type: Literal["session.updated"] = "session.updated"
    session: SessionInfo


class InputAudioBufferCommitted(ServerEventBase):
    type: Literal["input_audio_buffer.committed"] = "input_audio_buffer.committed"
    item_id: str
    previous_item_id: str | None = None
    audio_end_ms: float


class InputAudioBufferCleared(ServerEventBase):
    type: Literal["input_audio_buffer.cleared"] = "input_audio_buffer.cleared"


class InputAudioBufferSpeechStarted(ServerEventBase):
    type: Literal["input_audio_buffer.speech_started"] = "input_audio_buffer.speech_started"
    audio_start_ms: int
    item_id: str


class InputAudioBufferSpeechStopped(ServerEventBase):
    type: Literal["input_audio_buffer.speech_stopped"] = "input_audio_buffer.speech_stopped"
    audio_end_ms: int
    item_id: str


class TranscriptionUsage(BaseModel):
    """Billing-style usage of an input transcription: the seconds of audio transcribed (OpenAI's shape)."""

    type: Literal["duration"] = "duration"
    seconds: float


class InputAudioTranscriptionDelta(ServerEventBase):
    """More of what the model heard the user say (the words recognised so far, before the turn ends)."""

    type: Literal["conversation.item.input_audio_transcription.delta"] = (
        "conversation.item.input_audio_transcription.delta"
    )
    item_id: str
    content_index: int = 0
    delta: str


class InputAudioTranscriptionCompleted(ServerEventBase):
    """The final transcript of one user utterance, as the model heard it."""

    type: Literal["conversation.item.input_audio_transcription.completed"] = (
        "conversation.item.input_audio_transcription.completed"
    )
    item_id: str
    content_index: int = 0
    transcript: str
    usage: TranscriptionUsage


class ConversationItemAdded(ServerEventBase):
    type: Literal["conversation.item.added"] = "conversation.item.added"
    item: ConversationItem
    previous_item_id: str | None = None


class ConversationItemDone(ServerEventBase):
    type: Literal["conversation.item.done"] = "conversation.item.done"
    item: ConversationItem
    previous_item_id: str | None = None


class ConversationItemRetrieved(ServerEventBase):
    type: Literal["conversation.item.retrieved"] = "conversation.item.retrieved"
    item: ConversationItem


class ConversationItemDeleted(ServerEventBase):
    type: Literal["conversation.item.deleted"] = "conversation.item.deleted"
    item_id: str


class ConversationItemTruncated(ServerEventBase):
    type: Literal["conversation.item.truncated"] = "conversation.item.truncated"
    item_id: str
    content_index: int
    audio_end_ms: int


class ResponseCreated(ServerEventBase):
    type: Literal["response.created"] = "response.created"
    response: ResponseInfo
    response_request_metrics: ResponseRequestMetrics | None = None
    unit_end_ms: float | None = None
    """End, on the input media clock, of the unit whose step opened this response (see `ResponseListen`)."""


class ResponseOutputItemAdded(ServerEventBase):
    type: Literal["response.output_item.added"] = "response.output_item.added"
    response_id: str
    output_index: int = 0
    item: ConversationItem


class ResponseOutputItemDone(ServerEventBase):
    type: Literal["response.output_item.done"] = "response.output_item.done"
    response_id: str
    output_index: int = 0
    item: ConversationItem


class ResponseContentPartAdded(ServerEventBase):
    type: Literal["response.content_part.added"] = "response.content_part.added"
    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0
    part: ContentPart


class ResponseContentPartDone(ServerEventBase):
    type: Literal["response.content_part.done"] = "response.content_part.done"
    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0
    part: ContentPart


class ResponseSpeak(ServerEventBase):
    """The model decided to speak; sent once per response, before its first audio."""

    type: Literal["response.speak"] = "response.speak"
    response_id: str
    item_id: str


class _ContentDelta(ServerEventBase):
    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0
    response_request_metrics: ResponseRequestMetrics | None = None


class ResponseOutputAudioDelta(_ContentDelta):
    """A piece of reply audio. The engine builds it around the samples in the session's output format
    (`of_audio`); they become base64 only where a JSON socket renders the event (the `delta` it writes),
    and an in-process edge (Moshi, a WebRTC track) takes `audio` as it is."""

    type: Literal["response.output_audio.delta"] = "response.output_audio.delta"
    delta: str
    """The audio as base64, as a JSON socket carries it (empty on an event built by `of_audio`, whose
    dump writes it from `audio`)."""
    sample_rate_hz: int
    metadata: AudioDeltaMetadata
    unit_end_ms: float | None = None
    """End, on the input media clock, of the unit whose step produced this delta."""

    _audio: EncodedAudio | None = PrivateAttr(default=None)

    @classmethod
    def of_audio(cls, audio: EncodedAudio, **fields: Any) -> ResponseOutputAudioDelta:
        event = cls(delta="", **fields)
        private = event.__pydantic_private__
        assert private is not None  # the model declares a private attribute, so pydantic sets the dict
        private["_audio"] = audio
        return event

    @property
    def audio(self) -> EncodedAudio | None:
        """The audio in the session's output format, not base64 (`None`: an event read from JSON text)."""
        private = self.__pydantic_private__
        return None if private is None else private["_audio"]

    @field_serializer("delta")
    def _delta_text(self, delta: str) -> str:
        audio = self.audio
        return delta if audio is None else audio.to_base64()


class ResponseOutputAudioTranscriptDelta(_ContentDelta):
    type: Literal["response.output_audio_transcript.delta"] = "response.output_audio_transcript.delta"
    delta: str
    unit_end_ms: float | None = None
    """End, on the input media clock, of the unit whose step produced this delta (and its audio delta):
    where a WebRTC client, whose audio rides the track, sees the units the model spoke."""


class ResponseOutputTextDelta(_ContentDelta):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    delta: str
    unit_end_ms: float | None = None
    """End, on the input media clock, of the unit whose step produced this delta."""


class ResponseFunctionCallArgumentsDelta(ServerEventBase):
    """More of a function call's arguments (a JSON-encoded string, in pieces)."""

    type: Literal["response.function_call_arguments.delta"] = "response.function_call_arguments.delta"
    response_id: str
    item_id: str
    output_index: int = 0
    call_id: str
    delta: str


class ResponseFunctionCallArgumentsDone(ServerEventBase):
    """A function call's arguments are complete. GA carries the function's `name`; the beta dialect does
    not (its event has no such field)."""

    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    response_id: str
    item_id: str
    output_index: int = 0
    call_id: str
    name: str | None = None
    arguments: str


class ResponseOutputAudioDone(_ContentDelta):
    type: Literal["response.output_audio.done"] = "response.output_audio.done"


class ResponseOutputAudioTranscriptDone(_ContentDelta):
    type: Literal["response.output_audio_transcript.done"] = "response.output_audio_transcript.done"
    transcript: str


class ResponseOutputTextDone(_ContentDelta):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    text: str


class ResponseDone(ServerEventBase):
    type: Literal["response.done"] = "response.done"
    response: ResponseInfo
    response_request_metrics: ResponseRequestMetrics | None = None


class ResponseListen(ServerEventBase):
    """The model kept listening for one stepped unit; an acknowledgement, not reply activity."""

    type: Literal["response.listen"] = "response.listen"
    response_id: str | None = None
    response: ListenInfo
    unit_end_ms: float | None = None
    """End of the listened unit on the input media clock: which unit this decision answers, so a client
    draining a commit can tell a backlog's late listens from the decision on the committed unit."""


class _OutputAudioBufferEvent(ServerEventBase):
    """OpenAI's WebRTC-only playout events, sent by the call (not the session): no `server_event_seq`."""

    response_id: str


class OutputAudioBufferStarted(_OutputAudioBufferEvent):
    """The call's track began carrying this response's audio."""

    type: Literal["output_audio_buffer.started"] = "output_audio_buffer.started"


class OutputAudioBufferStopped(_OutputAudioBufferEvent):
    """All of this finished response's audio has gone out on the call's track (after its `response.done`)."""

    type: Literal["output_audio_buffer.stopped"] = "output_audio_buffer.stopped"


class OutputAudioBufferCleared(_OutputAudioBufferEvent):
    """This cancelled response's audio was cut from the call's track (what was not sent never will be)."""

    type: Literal["output_audio_buffer.cleared"] = "output_audio_buffer.cleared"


class PlaybackAcknowledged(ServerEventBase):
    type: Literal["playback.acknowledged"] = "playback.acknowledged"
    response_id: str
    item_id: str | None = None
    played_ms: float
    committed_ms: float


class SessionHeartbeatAck(ServerEventBase):
    type: Literal["session.heartbeat_ack"] = "session.heartbeat_ack"


class SessionClosed(ServerEventBase):
    type: Literal["session.closed"] = "session.closed"
    session_id: str
    reason: str


class RateLimitsUpdated(ServerEventBase):
    type: Literal["rate_limits.updated"] = "rate_limits.updated"
    rate_limits: list[RateLimit]


class SessionResumed(ServerEventBase):
    """The resume was accepted; the journaled events after the client's seq follow, with their original ids.

    Not journaled itself: its `server_event_seq` is the journal's head, where the replay ends.
    `client_events_received` (a duplexkit extension) counts the client frames the session has processed,
    so a client can resend exactly the frames that never arrived.
    """

    type: Literal["session.resumed"] = "session.resumed"
    session_id: str
    resume_token: str
    attachment_generation: int
    replayed_events: int
    client_events_received: int
    session: SessionInfo


class SessionReplaced(ServerEventBase):
    """Sent to an attachment that a newer `session.resume` took over; its socket closes next."""

    type: Literal["session.replaced"] = "session.replaced"
    session_id: str
    attachment_generation: int


class SessionResyncRequired(ServerEventBase):
    """The journal no longer holds events the client says it lacks: nothing is replayed."""

    type: Literal["session.resync_required"] = "session.resync_required"
    session_id: str
    reason: Literal["journal_gap", "journal_overflow"]
    first_available_seq: int


class SessionExpired(ServerEventBase):
    type: Literal["session.expired"] = "session.expired"
    session_id: str
    reason: Literal["disconnect_grace_expired", "idle_ttl_expired"]


class Error(ServerEventBase):
    type: Literal["error"] = "error"
    error: ErrorDetail


ServerEvent = Annotated[
    SessionCreated
    | SessionUpdated
    | InputAudioBufferCommitted
    | InputAudioBufferCleared
    | InputAudioBufferSpeechStarted
    | InputAudioBufferSpeechStopped
    | InputAudioTranscriptionDelta
    | InputAudioTranscriptionCompleted
    | ConversationItemAdded
    | ConversationItemDone
    | ConversationItemRetrieved
    | ConversationItemDeleted
    | ConversationItemTruncated
    | ResponseCreated
    | ResponseOutputItemAdded
    | ResponseOutputItemDone
    | ResponseContentPartAdded
    | ResponseContentPartDone
    | ResponseSpeak
    | ResponseOutputAudioDelta
    | ResponseOutputAudioTranscriptDelta
    | ResponseOutputTextDelta
    | ResponseFunctionCallArgumentsDelta
    | ResponseFunctionCallArgumentsDone
    | ResponseOutputAudioDone
    | ResponseOutputAudioTranscriptDone
    | ResponseOutputTextDone
    | ResponseDone
    | ResponseListen
    | OutputAudioBufferStarted
    | OutputAudioBufferStopped
    | OutputAudioBufferCleared
    | PlaybackAcknowledged
    | SessionHeartbeatAck
    | SessionClosed
    | RateLimitsUpdated
    | SessionResumed
    | SessionReplaced
    | SessionResyncRequired
    | SessionExpired
    | Error,
    Field(discriminator="type"),
]

SERVER_EVENT_TYPES: dict[str, type[ServerEventBase]] = {
    cls.model_fields["type"].default: cls for cls in get_args(get_args(ServerEvent)[0])
}
"""Event type → model, for readers that dispatch on `type` and for the documentation test."""


def error_detail(
    code: ErrorCode,
    message: str,
    *,
    param: str | None = None,
    event_id: str | None = None,
) -> ErrorDetail:
    """The error body for `code`; its `type` and `retryable` come from the one code table."""
    spec = ERROR_SPECS[code]
    return ErrorDetail(
        type=spec.type, code=code, message=message, param=param, event_id=event_id, retryable=spec.retryable
    )


def error_event(
    code: ErrorCode,
    message: str,
    *,
    param: str | None = None,
    event_id: str | None = None,
) -> Error:
    """The `error` event for `code` (`error_detail`)."""
    return Error(error=error_detail(code, message, param=param, event_id=event_id))


def reported_error(event: ServerEventBase) -> ErrorDetail | None:
    """The error an event reports: an `error` event's, or a failed response's (`status_details.error`);
    `None` for any other event. Edges that report errors in their own form (Moshi's error frame, a log
    line for Twilio) and the server's error metric read both through this."""
    if isinstance(event, Error):
        return event.error
    if isinstance(event, ResponseDone) and event.response.status_details is not None:
        return event.response.status_details.error
    return None
