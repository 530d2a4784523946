"""Error codes of the wire protocol: the one table that says what each code means on the wire.

Every `error` event the server sends, and every `ProtocolError` the parser raises, uses a code from
`ErrorCode`; `ERROR_SPECS` fixes its `type` and whether a client may retry. Nothing else re-derives them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

ErrorType = Literal["invalid_request_error", "server_error", "rate_limit_error"]


class ErrorCode(StrEnum):
    """Stable machine-readable codes carried in `error.error.code`."""

    # Malformed client input (the parser).
    INVALID_JSON = "invalid_json"
    NOT_AN_OBJECT = "not_an_object"
    UNKNOWN_EVENT = "unknown_event"
    UNSUPPORTED_EVENT = "unsupported_event"
    """A known event (a dialect's documented alias) this server does not implement; see docs/protocol.md."""
    MISSING_FIELD = "missing_field"
    INVALID_VALUE = "invalid_value"
    UNKNOWN_PARAMETER = "unknown_parameter"
    """A field neither this protocol nor OpenAI's defines there (OpenAI's code for it)."""
    UNSUPPORTED_VALUE = "unsupported_value"
    """A field OpenAI defines, with a value this server does not serve (e.g. noise reduction)."""
    EVENT_TOO_LARGE = "event_too_large"
    UNSUPPORTED_AUDIO_FORMAT = "unsupported_audio_format"
    UNSUPPORTED_SAMPLE_RATE = "unsupported_sample_rate"
    INVALID_AUDIO = "invalid_audio"
    INVALID_VIDEO_FRAME = "invalid_video_frame"
    # WebRTC calls (`POST /v1/realtime/calls`).
    INVALID_SDP = "invalid_sdp"
    OFFER_WITHOUT_AUDIO = "offer_without_audio"
    INVALID_DATA_CHANNEL = "invalid_data_channel"
    WEBRTC_UNAVAILABLE = "webrtc_unavailable"
    # Session state.
    SESSION_NOT_CONFIGURED = "session_not_configured"
    CONFIG_TIMEOUT = "config_timeout"
    IDLE_TIMEOUT = "idle_timeout"
    UNKNOWN_RESPONSE = "unknown_response"
    RESPONSE_CANCEL_NOT_ACTIVE = "response_cancel_not_active"  # OpenAI's code: clients tolerate it
    CONVERSATION_ALREADY_HAS_ACTIVE_RESPONSE = "conversation_already_has_active_response"  # OpenAI's
    UNKNOWN_ITEM = "unknown_item"
    CONVERSATION_TOO_LARGE = "conversation_too_large"
    """A client's items past the conversation's bounds (`engine.conversation.MAX_CLIENT_ITEMS`)."""
    # OpenAI's codes where a client branches on them: Pipecat's retrieval and LiveKit's item sync.
    ITEM_RETRIEVE_INVALID_ITEM_ID = "item_retrieve_invalid_item_id"
    ITEM_CREATE_DUPLICATE_ITEM_ID = "item_create_duplicate_item_id"
    PLAYBACK_ACK_TOO_LATE = "playback_ack_too_late"
    # Tool (function) calls: the model's calls and the client's outputs for them.
    INVALID_FUNCTION_CALL = "invalid_function_call"
    INVALID_FUNCTION_CALL_OUTPUT = "invalid_function_call_output"
    UNKNOWN_FUNCTION_CALL = "unknown_function_call"
    DUPLICATE_FUNCTION_CALL = "duplicate_function_call"
    DUPLICATE_FUNCTION_CALL_OUTPUT = "duplicate_function_call_output"
    STALE_FUNCTION_CALL_OUTPUT = "stale_function_call_output"
    # Session resume (vLLM-Omni's contract): a client treats every one of these as final.
    INVALID_SESSION_RESUME = "invalid_session_resume"
    SESSION_RESUME_EXPIRED = "session_resume_expired"
    UNSUPPORTED_SESSION_RESUME = "unsupported_session_resume"
    INVALID_RESUME_TOKEN = "invalid_resume_token"
    SESSION_RESUME_CONFLICT = "session_resume_conflict"
    # Admission, auth and flow control.
    UNAUTHORIZED = "unauthorized"
    SESSION_CAPACITY_EXHAUSTED = "session_capacity_exhausted"
    INPUT_BACKPRESSURE = "input_backpressure"
    CLIENT_TOO_SLOW = "client_too_slow"
    # Server faults.
    MODEL_STEP_FAILED = "model_step_failed"
    MODEL_STEP_TIMEOUT = "model_step_timeout"
    INTERNAL_ERROR = "internal_error"


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    """How a code travels: its OpenAI-style `type` and whether retrying the same request can succeed."""

    type: ErrorType
    retryable: bool


_INVALID = ErrorSpec("invalid_request_error", retryable=False)

ERROR_SPECS: dict[ErrorCode, ErrorSpec] = {
    **{code: _INVALID for code in ErrorCode},
    ErrorCode.SESSION_CAPACITY_EXHAUSTED: ErrorSpec("rate_limit_error", retryable=True),
    ErrorCode.INPUT_BACKPRESSURE: ErrorSpec("rate_limit_error", retryable=True),
    ErrorCode.CLIENT_TOO_SLOW: ErrorSpec("server_error", retryable=True),
    ErrorCode.MODEL_STEP_FAILED: ErrorSpec("server_error", retryable=True),
    ErrorCode.MODEL_STEP_TIMEOUT: ErrorSpec("server_error", retryable=True),
    ErrorCode.INTERNAL_ERROR: ErrorSpec("server_error", retryable=True),
    ErrorCode.WEBRTC_UNAVAILABLE: ErrorSpec("server_error", retryable=False),
}

BENIGN_CODES: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.PLAYBACK_ACK_TOO_LATE,
        ErrorCode.STALE_FUNCTION_CALL_OUTPUT,
        ErrorCode.RESPONSE_CANCEL_NOT_ACTIVE,
        ErrorCode.CONVERSATION_ALREADY_HAS_ACTIVE_RESPONSE,
    }
)
"""Codes that report a race duplex makes expected, not a fault of either side; a benchmark must not fail a
sample over them: an ack after its response settled, a tool's output after a barge-in retired its call
(the client ran the tool while the user spoke; it cannot know before the output arrives), a
`response.cancel` that came after its response ended (Pipecat cancels at every interruption of its own),
and a `response.create` while one is active (OpenAI's code; Pipecat and LiveKit pass over it). The other
tool codes stay failures: a malformed, unknown or repeated item is the client's bug, and
`invalid_function_call` also a model's call that was refused."""

RESUME_FINAL_CODES: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.INVALID_SESSION_RESUME,
        ErrorCode.SESSION_RESUME_EXPIRED,
        ErrorCode.UNSUPPORTED_SESSION_RESUME,
        ErrorCode.INVALID_RESUME_TOKEN,
        ErrorCode.SESSION_RESUME_CONFLICT,
    }
)
"""Answers to `session.resume` after which a client must not try to resume that session again."""


class ProtocolError(Exception):
    """A client event that cannot be accepted; the server answers it with an `error` event of this code."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        param: str | None = None,
        event_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.event_id = event_id

    def __repr__(self) -> str:
        return f"ProtocolError({self.code.value!r}, {self.message!r}, param={self.param!r})"
