"""Client → server events: one pydantic model per event type, discriminated on `type`.

Models keep unknown fields (forward compatibility with newer clients); validation failures carry custom
error types (`invalid_audio`, `unsupported_audio_format`, `invalid_video_frame`) that the parser maps to
wire error codes. Audio payloads are base64-decoded and checked once, at validation, and kept on the event
in their wire encoding (`EncodedAudio`), to be converted to float where they are stored.

`InputAudioBufferAppend.from_plain` is the hot event's fast path: the common shape of an append, built
without pydantic's validator; anything else goes through the validator, which has the last word.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Annotated, Any, Final, Literal, get_args

import numpy as np
import numpy.typing as npt
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    StrictInt,
    Tag,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from duplexkit.protocol.audio import (
    AudioDecodeError,
    AudioFormat,
    EncodedAudio,
    UnsupportedAudioFormat,
    decode_base64_payload,
    normalize_audio_format,
)
from duplexkit.protocol.errors import ErrorCode, ProtocolError

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
NonNegativeMs = Annotated[float, Field(ge=0, allow_inf_nan=False)]

GA_PCM_RATE_HZ = 24_000
"""The rate of an OpenAI GA `audio/pcm` format that does not name one."""

_MAX_RATE_HZ: Final = 192_000
"""The highest PCM rate a session or an append may name."""
_IMAGE_SIGNATURES = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n")


def _audio_format(value: str) -> AudioFormat:
    try:
        return normalize_audio_format(value)
    except UnsupportedAudioFormat as exc:
        raise PydanticCustomError("unsupported_audio_format", str(exc)) from exc


class ClientEventBase(BaseModel):
    """Fields every client event may carry; unknown fields are kept, not rejected."""

    model_config = ConfigDict(extra="allow")

    type: str
    event_id: str | None = None


class ServerVadConfig(BaseModel):
    """`turn_detection: {type: "server_vad"}`: the server detects speech and decides turns. A field OpenAI
    does not define is `unknown_parameter`; its `idle_timeout_ms` (a reply prompted after silence) is not
    served: `unsupported_value` unless null."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["server_vad"] = "server_vad"
    threshold: float = Field(0.5, ge=0.0, le=1.0)
    prefix_padding_ms: int = Field(300, ge=0)
    silence_duration_ms: int = Field(500, ge=0)
    interrupt_response: bool = True
    create_response: bool = True
    idle_timeout_ms: None = None

    @field_validator("idle_timeout_ms", mode="before")
    @classmethod
    def _no_idle_prompt(cls, value: object) -> object:
        if value is not None:
            raise PydanticCustomError("unsupported_value", "idle_timeout_ms is not served: send null")
        return value


class SemanticVadConfig(BaseModel):
    """`turn_detection: {type: "semantic_vad", eagerness}` (OpenAI's name): the server detects speech and
    ends the turn when an end-of-turn model (Smart Turn) judges the user finished at a pause; `eagerness`
    says how readily (`low` lets the user take their time, `high` answers soonest)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["semantic_vad"] = "semantic_vad"
    eagerness: Literal["low", "medium", "high", "auto"] = "auto"
    interrupt_response: bool = True
    create_response: bool = True


def _turn_detection_kind(value: Any) -> str:
    kind = value.get("type", "server_vad") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if isinstance(kind, str) else "server_vad"


TurnDetection = Annotated[
    Annotated[ServerVadConfig, Tag("server_vad")] | Annotated[SemanticVadConfig, Tag("semantic_vad")],
    Discriminator(_turn_detection_kind),
]
"""What a server-side turn detector is configured with; a config without `type` is `server_vad`."""


class FunctionTool(BaseModel):
    """A function the model may call (OpenAI's flat realtime shape); `parameters` is a JSON Schema object."""

    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None


def is_json_object(text: str) -> bool:
    """Whether `text` is a JSON-encoded object (what a function call's `arguments` must be)."""
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


class ToolChoiceFunction(BaseModel):
    """`tool_choice` naming one function the model must call."""

    type: Literal["function"] = "function"
    name: str


ToolChoice = Literal["auto", "none", "required"] | ToolChoiceFunction
"""`auto` (the model decides), `none` (no calls), `required` (a call in every response), or one function."""


class InputAudioTranscription(BaseModel):
    """`audio.input.transcription` (beta `input_audio_transcription`): OpenAI's fields, kept and echoed.
    The model's own recogniser transcribes (its `Transcribed` decisions), whatever these name."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    language: str | None = None
    languages: list[str] | None = None
    prompt: str | None = None
    keywords: list[str] | None = None
    delay: Literal["minimal", "low", "medium", "high", "xhigh"] | None = None


class NoiseReduction(BaseModel):
    """`audio.input.noise_reduction` (beta `input_audio_noise_reduction`): `{type: near_field | far_field}`.
    Taken and not applied (`NOT_APPLIED_TERMS`): `session.updated` reports `null`, what is in force."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["near_field", "far_field"]


class GaAudioFormat(BaseModel):
    """GA `audio.{input,output}.format`: `{type, rate?}` (`audio/pcm` without a rate is 24 kHz)."""

    model_config = ConfigDict(extra="forbid")

    type: AudioFormat
    rate: StrictInt | None = Field(None, gt=0, le=_MAX_RATE_HZ)

    @field_validator("type", mode="before")
    @classmethod
    def _known_format(cls, value: object) -> object:
        return _audio_format(value) if isinstance(value, str) else value


class GaAudioInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: GaAudioFormat | None = None
    transcription: InputAudioTranscription | None = None
    noise_reduction: NoiseReduction | None = None
    turn_detection: TurnDetection | None = None


class GaAudioOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: GaAudioFormat | None = None
    voice: str | None = None
    speed: Any = None


class GaAudio(BaseModel):
    """GA `session.audio`: where OpenAI's GA API puts the audio terms (read onto the flat fields)."""

    model_config = ConfigDict(extra="forbid")

    input: GaAudioInput | None = None
    output: GaAudioOutput | None = None


OPENAI_FIXED_TERMS: Final[dict[str, Any]] = {
    "audio.input.noise_reduction": None,
    "audio.output.speed": 1.0,
    "truncation": "auto",
    "tracing": None,
    "prompt": None,
    "include": None,
    "reasoning": None,
    "parallel_tool_calls": None,
}
"""OpenAI session terms (GA path → value) this server serves one way only: no noise reduction, speech at
normal speed, context truncated as the model does it, no OpenAI tracing, saved prompt, extra outputs,
reasoning or parallel-call setting. A `session.update` may name them with that value (or null; `include`
may be `[]`); another is `unsupported_value`, except the terms of `NOT_APPLIED_TERMS`. `session.updated`
(GA) reports them at their paths."""

NOT_APPLIED_TERMS: Final = frozenset({"audio.input.noise_reduction"})
"""Fixed terms a client may name with any value OpenAI defines, taken and not applied (`session.updated`
reports the value in force): τ-Voice asks for `near_field` noise reduction on every session and fails on
any `error`, so refusing it would keep τ-Voice off this server; its shape is still checked
(`NoiseReduction`)."""

_BETA_FIXED_NAMES: Final = {
    "input_audio_noise_reduction": "audio.input.noise_reduction",
    "speed": "audio.output.speed",
}
"""The beta session's names for fixed terms GA puts under `audio`."""


class SessionConfig(BaseModel):
    """The `session` object of `session.update`; every field optional so an update changes only what it names.

    `turn_detection: null` (explicitly sent) means model-native turn taking; absent means "unchanged".
    OpenAI's GA and beta shapes are read onto the flat fields (`_read_openai_shapes`; a flat field named
    too wins); a field neither this protocol nor OpenAI defines is `unknown_parameter`.
    """

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    modalities: list[Literal["audio", "text"]] | None = None
    instructions: str | None = None
    voice: str | None = None
    ref_audio: str | None = None
    input_audio_format: AudioFormat | None = None
    output_audio_format: AudioFormat | None = None
    input_sample_rate_hz: int | None = Field(None, gt=0, le=_MAX_RATE_HZ)
    output_sample_rate_hz: int | None = Field(None, gt=0, le=_MAX_RATE_HZ)
    """The rate of PCM output (the model's when unset: the reply is resampled to it); a G.711 format's rate
    is its own (8 kHz), and naming another with it is refused (`unsupported_sample_rate`)."""
    turn_detection: TurnDetection | None = None
    temperature: FiniteFloat | None = Field(None, ge=0.0, le=2.0)
    max_tokens: int | None = Field(None, gt=0)
    idle_timeout_s: FiniteFloat | None = Field(None, gt=0)
    overlap_policy: Literal["listen_only", "barge_in_on_speech"] | None = None
    playback_commit_policy: Literal["commit_all_on_done", "ack_only"] | None = None
    tools: list[FunctionTool] | None = None
    """The functions the model may call (an empty list clears them); MCP tools are not served."""
    tool_choice: ToolChoice | None = None
    input_audio_transcription: InputAudioTranscription | None = None
    """What the client asked of input transcription (echoed); the model's recogniser transcribes."""
    extra_body: dict[str, Any] | None = None
    # OpenAI's names, read onto the fields above (`_read_openai_shapes`).
    type: Literal["realtime"] | None = None
    audio: GaAudio | None = None
    output_modalities: list[Literal["audio", "text"]] | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    max_response_output_tokens: int | Literal["inf"] | None = None
    # OpenAI's terms served one way only (`OPENAI_FIXED_TERMS`).
    input_audio_noise_reduction: NoiseReduction | None = None
    speed: Any = None
    truncation: Any = None
    tracing: Any = None
    prompt: Any = None
    include: Any = None
    reasoning: Any = None
    parallel_tool_calls: Any = None

    @field_validator("type", mode="before")
    @classmethod
    def _realtime_only(cls, value: object) -> object:
        if value not in (None, "realtime"):
            raise PydanticCustomError(
                "unsupported_value",
                "only realtime sessions are served (type: realtime), not {value}",
                {"value": value},
            )
        return value

    @field_validator("input_audio_format", "output_audio_format", mode="before")
    @classmethod
    def _known_format(cls, value: object) -> object:
        return _audio_format(value) if isinstance(value, str) else value

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _function_by_name(cls, value: object) -> object:
        """The beta API's `tool_choice` is a string: a function's name where it is not a mode."""
        if isinstance(value, str) and value not in ("auto", "none", "required"):
            return {"type": "function", "name": value}
        return value

    @model_validator(mode="after")
    def _read_openai_shapes(self) -> SessionConfig:
        """Read OpenAI's GA and beta names onto the flat fields, where no flat field was named: GA's
        `output_modalities`, `audio.input.{format, transcription, turn_detection}` and
        `audio.output.{format, voice}`, the reply budget (GA `max_output_tokens`, beta
        `max_response_output_tokens`; `"inf"` sets none); refuse a fixed term named otherwise (but
        take one of `NOT_APPLIED_TERMS`)."""
        named = set(self.model_fields_set)

        def take(name: str, value: object) -> None:
            if name not in named:
                setattr(self, name, value)

        if self.output_modalities is not None:
            take("modalities", self.output_modalities)
        for budget in (self.max_output_tokens, self.max_response_output_tokens):
            if isinstance(budget, int):
                take("max_tokens", budget)
        fixed: dict[str, tuple[str, object]] = {  # as named → (GA path, value)
            name: (_BETA_FIXED_NAMES.get(name, name), getattr(self, name))
            for name in (*_BETA_FIXED_NAMES, *OPENAI_FIXED_TERMS)
            if name in named
        }
        audio_in = self.audio.input if self.audio is not None else None
        audio_out = self.audio.output if self.audio is not None else None
        if audio_in is not None:
            given = audio_in.model_fields_set
            if "turn_detection" in given:  # null too: model-native turns
                take("turn_detection", audio_in.turn_detection)
            if audio_in.transcription is not None:
                take("input_audio_transcription", audio_in.transcription)
            if "noise_reduction" in given:
                path = "audio.input.noise_reduction"
                fixed[path] = (path, audio_in.noise_reduction)
        if audio_out is not None:
            if audio_out.voice is not None:
                take("voice", audio_out.voice)
            if "speed" in audio_out.model_fields_set:
                fixed["audio.output.speed"] = ("audio.output.speed", audio_out.speed)
        for direction, section in (("input", audio_in), ("output", audio_out)):
            fmt = section.format if section is not None else None
            if fmt is not None:
                take(f"{direction}_audio_format", fmt.type)
                rate = fmt.rate if fmt.rate is not None or fmt.type != "pcm16" else GA_PCM_RATE_HZ
                if rate is not None:
                    take(f"{direction}_sample_rate_hz", rate)
        for name, (path, value) in fixed.items():
            if path in NOT_APPLIED_TERMS:
                continue
            served = OPENAI_FIXED_TERMS[path]
            if value is not None and value != served and not (path == "include" and value == []):
                only = "is not served: send null" if served is None else f"is served as {served!r} only"
                raise PydanticCustomError(
                    "unsupported_value", "{path} " + only + ", not {value}", {"path": name, "value": value}
                )
        return self


class SessionUpdate(ClientEventBase):
    type: Literal["session.update"] = "session.update"
    session: SessionConfig = Field(default_factory=SessionConfig)


class InputAudioBufferAppend(ClientEventBase):
    """One chunk of input audio, in wire order, with its place on the sender's media clock.

    The payload is validated against its format (the event's own, else the session's, passed as the
    validation context key `input_audio_format`) and kept base64-decoded in `payload`.
    """

    type: Literal["input_audio_buffer.append"] = "input_audio_buffer.append"
    audio: str
    input_audio_format: AudioFormat | None = None
    sample_rate_hz: int | None = Field(None, gt=0, le=_MAX_RATE_HZ)
    duration_ms: NonNegativeMs | None = None
    audio_end_ms: NonNegativeMs | None = None
    video_frames: list[str] | None = None
    is_speech: bool | None = None
    force_listen: bool | None = None
    force_barge_in: bool | None = None

    _payload: EncodedAudio = PrivateAttr()
    _frames: list[bytes] = PrivateAttr(default_factory=list)

    @field_validator("input_audio_format", mode="before")
    @classmethod
    def _known_format(cls, value: object) -> object:
        return _audio_format(value) if isinstance(value, str) else value

    @field_validator("video_frames")
    @classmethod
    def _frames_are_images(cls, frames: list[str] | None) -> list[str] | None:
        for index, frame in enumerate(frames or []):
            try:
                raw = base64.b64decode(frame, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise PydanticCustomError(
                    "invalid_video_frame", f"video_frames[{index}] is not base64"
                ) from exc
            if not raw.startswith(_IMAGE_SIGNATURES):
                raise PydanticCustomError(
                    "invalid_video_frame", f"video_frames[{index}] is not a JPEG or PNG image"
                )
        return frames

    @model_validator(mode="after")
    def _decode_audio(self, info: ValidationInfo) -> InputAudioBufferAppend:
        context = info.context if isinstance(info.context, dict) else {}
        fmt: AudioFormat = self.input_audio_format or context.get("input_audio_format", "pcm16")
        try:
            self._payload = decode_base64_payload(self.audio, fmt)
        except AudioDecodeError as exc:
            raise PydanticCustomError("invalid_audio", str(exc)) from exc
        self._frames = [base64.b64decode(frame) for frame in self.video_frames or []]
        return self

    @classmethod
    def from_plain(
        cls, obj: dict[str, Any], input_audio_format: AudioFormat
    ) -> InputAudioBufferAppend | None:
        """The event `model_validate` would build from `obj` (parsed JSON), when `obj` has the common
        shape: `type` this event's, `audio` a string that decodes in `input_audio_format`, and at most an
        `event_id` string, a `sample_rate_hz` int (as `DuplexClient` sends on every append) and
        `duration_ms`/`audio_end_ms` numbers, each within its limits. Anything else,
        valid or not, is `None`: the validator decides it (and words its error). It skips pydantic's
        per-event machinery (~6 µs of an ~11 µs validation); a property test holds the two to the same
        events.
        """
        if obj.get("type") != "input_audio_buffer.append" or not obj.keys() <= _PLAIN_APPEND_KEYS:
            return None
        audio = obj.get("audio")
        event_id = obj.get("event_id")
        if type(audio) is not str or (event_id is not None and type(event_id) is not str):
            return None
        fields = dict(_APPEND_FIELDS)
        fields["audio"] = audio
        if event_id is not None:
            fields["event_id"] = event_id
        if "sample_rate_hz" in obj:
            rate = obj["sample_rate_hz"]
            if type(rate) is not int or not 0 < rate <= _MAX_RATE_HZ:
                return None
            fields["sample_rate_hz"] = rate
        for name in ("duration_ms", "audio_end_ms"):
            if name in obj:
                ms = _plain_ms(obj[name])
                if ms is None:
                    return None
                fields[name] = ms
        try:
            payload = decode_base64_payload(audio, input_audio_format)
        except AudioDecodeError:
            return None
        event = cls.__new__(cls)
        # What `model_construct` sets, without its generic walk over the fields (~9 µs).
        object.__setattr__(event, "__dict__", fields)
        object.__setattr__(event, "__pydantic_fields_set__", set(obj))
        object.__setattr__(event, "__pydantic_extra__", {})
        object.__setattr__(event, "__pydantic_private__", {"_payload": payload, "_frames": []})
        return event

    @classmethod
    def of_audio(
        cls,
        payload: EncodedAudio,
        *,
        sample_rate_hz: int | None = None,
        input_audio_format: AudioFormat | None = None,
        duration_ms: float | None = None,
        audio_end_ms: float | None = None,
    ) -> InputAudioBufferAppend:
        """The append an in-process edge (Moshi, a WebRTC track) hands the runner for audio it decoded
        itself: the event a JSON client's append of the same audio and fields parses to, with no base64 or
        JSON on the way. `audio` stays empty (`payload` is the audio; a dump writes it as base64)."""
        fields = dict(_APPEND_FIELDS)
        given = {
            "sample_rate_hz": sample_rate_hz,
            "input_audio_format": input_audio_format,
            "duration_ms": duration_ms,
            "audio_end_ms": audio_end_ms,
        }
        fields.update(audio="", **{name: value for name, value in given.items() if value is not None})
        event = cls.__new__(cls)
        object.__setattr__(event, "__dict__", fields)
        fields_set = {"type", "audio"} | {name for name, value in given.items() if value is not None}
        object.__setattr__(event, "__pydantic_fields_set__", fields_set)
        object.__setattr__(event, "__pydantic_extra__", {})
        object.__setattr__(event, "__pydantic_private__", {"_payload": payload, "_frames": []})
        return event

    @field_serializer("audio")
    def _audio_text(self, audio: str) -> str:
        """An in-process edge's append (`of_audio`) dumps its payload as the base64 a client would send."""
        return audio or self.payload.to_base64()

    # The properties read `__pydantic_private__` directly: pydantic's `__getattr__`, which serves private
    # attributes otherwise, costs ~1.6 µs a read, a few times per append.

    def _private(self) -> dict[str, Any]:
        private = self.__pydantic_private__
        assert private is not None  # the model declares private attributes, so pydantic sets them
        return private

    @property
    def payload(self) -> EncodedAudio:
        """The audio, base64-decoded and checked in its format, not yet converted to float."""
        payload: EncodedAudio = self._private()["_payload"]
        return payload

    @property
    def samples(self) -> npt.NDArray[np.float32]:
        """The audio as a new float32 mono array in [-1, 1], at `sample_rate_hz` (or the session's input
        rate)."""
        return self.payload.decode()

    @property
    def decoded_nbytes(self) -> int:
        """Bytes the audio takes as float32 (what the server's input backpressure counts)."""
        return 4 * len(self.payload)

    @property
    def frames(self) -> list[bytes]:
        """The decoded video frames (JPEG or PNG bytes) riding on this append."""
        frames: list[bytes] = self._private()["_frames"]
        return frames


_PLAIN_APPEND_KEYS: Final = frozenset(
    {"type", "event_id", "audio", "sample_rate_hz", "duration_ms", "audio_end_ms"}
)
_APPEND_FIELDS: Final[dict[str, Any]] = {
    name: None if field.is_required() else field.get_default()
    for name, field in InputAudioBufferAppend.model_fields.items()
}
"""Every field in declaration order (the order the validator fills them, and dumps follow), defaulted."""
_EXACT_FLOAT_INT: Final = 2**53


def _plain_ms(value: object) -> float | None:
    """`value` as `NonNegativeMs` validates it, for the types JSON gives (an int that a float holds
    exactly, a finite float); `None` for anything else."""
    if type(value) is float:
        return value if value >= 0 and math.isfinite(value) else None
    if type(value) is int and 0 <= value <= _EXACT_FLOAT_INT:
        return float(value)
    return None


class InputAudioBufferCommit(ClientEventBase):
    type: Literal["input_audio_buffer.commit"] = "input_audio_buffer.commit"
    final: bool = True
    is_speech: bool | None = None


class InputAudioBufferClear(ClientEventBase):
    type: Literal["input_audio_buffer.clear"] = "input_audio_buffer.clear"


class InputCancel(ClientEventBase):
    type: Literal["input.cancel"] = "input.cancel"


class ResponseCreate(ClientEventBase):
    type: Literal["response.create"] = "response.create"
    response: dict[str, Any] | None = None


class ResponseCancel(ClientEventBase):
    type: Literal["response.cancel"] = "response.cancel"
    response_id: str | None = None


class OutputAudioBufferClear(ClientEventBase):
    type: Literal["output_audio_buffer.clear"] = "output_audio_buffer.clear"


class BargeIn(ClientEventBase):
    type: Literal["barge_in"] = "barge_in"


class PlaybackAck(ClientEventBase):
    """How much of a response's audio the client has played (and, optionally, committed to history)."""

    type: Literal["playback.ack"] = "playback.ack"
    response_id: str
    item_id: str | None = None
    played_ms: NonNegativeMs
    committed_ms: NonNegativeMs | None = None
    truncate: bool | None = None


class ConversationItemCreate(ClientEventBase):
    type: Literal["conversation.item.create"] = "conversation.item.create"
    item: dict[str, Any]
    previous_item_id: str | None = None


class ConversationItemRetrieve(ClientEventBase):
    type: Literal["conversation.item.retrieve"] = "conversation.item.retrieve"
    item_id: str


class ConversationItemDelete(ClientEventBase):
    type: Literal["conversation.item.delete"] = "conversation.item.delete"
    item_id: str


class ConversationItemTruncate(ClientEventBase):
    type: Literal["conversation.item.truncate"] = "conversation.item.truncate"
    item_id: str
    content_index: int = Field(0, ge=0)
    audio_end_ms: int = Field(ge=0)


class SessionHeartbeat(ClientEventBase):
    type: Literal["session.heartbeat"] = "session.heartbeat"


class SessionClose(ClientEventBase):
    type: Literal["session.close"] = "session.close"
    reason: str | None = None


class SessionResume(ClientEventBase):
    """Reattach to a detached session (the first message of a `?autostart=0` connection)."""

    type: Literal["session.resume"] = "session.resume"
    session_id: str
    resume_token: str
    last_received_server_event_seq: int = Field(ge=0)


class SessionEventAck(ClientEventBase):
    """The client holds every server event through `server_event_seq`: the server may trim its journal."""

    type: Literal["session.event_ack"] = "session.event_ack"
    server_event_seq: int = Field(ge=0)


ClientEvent = Annotated[
    SessionUpdate
    | InputAudioBufferAppend
    | InputAudioBufferCommit
    | InputAudioBufferClear
    | InputCancel
    | ResponseCreate
    | ResponseCancel
    | OutputAudioBufferClear
    | BargeIn
    | PlaybackAck
    | ConversationItemCreate
    | ConversationItemRetrieve
    | ConversationItemDelete
    | ConversationItemTruncate
    | SessionHeartbeat
    | SessionClose
    | SessionResume
    | SessionEventAck,
    Field(discriminator="type"),
]

CLIENT_EVENT_TYPES: dict[str, type[ClientEventBase]] = {
    cls.model_fields["type"].default: cls for cls in get_args(get_args(ClientEvent)[0])
}
"""Event type → model: the parser's dispatch table and the list the documentation test walks."""


def validate_client_event(obj: dict[str, Any], input_audio_format: AudioFormat = "pcm16") -> ClientEventBase:
    """The typed event for one client event object, its `type` canonical (a JSON socket's parsed frame,
    `wire.parse_client_event`, or an object an in-process edge built): the one table from a type to its
    model, the append's fast path first. `input_audio_format` is the session's, for an append that names
    none. Raises only `ProtocolError` (with the object's `event_id` when it has one)."""
    event_id = obj.get("event_id") if isinstance(obj.get("event_id"), str) else None
    event_type = obj.get("type")
    if event_type == "input_audio_buffer.append":
        append = InputAudioBufferAppend.from_plain(obj, input_audio_format)
        if append is not None:
            return append
    model = CLIENT_EVENT_TYPES.get(event_type) if isinstance(event_type, str) else None
    if model is None:
        raise ProtocolError(
            ErrorCode.UNKNOWN_EVENT, f"unknown event type {event_type!r}", param="type", event_id=event_id
        )
    try:
        return model.model_validate(obj, context={"input_audio_format": input_audio_format})
    except ValidationError as exc:
        raise _protocol_error(exc, str(event_type), event_id) from None


_CUSTOM_CODES = {
    "extra_forbidden": ErrorCode.UNKNOWN_PARAMETER,
    "unsupported_value": ErrorCode.UNSUPPORTED_VALUE,
    "invalid_audio": ErrorCode.INVALID_AUDIO,
    "unsupported_audio_format": ErrorCode.UNSUPPORTED_AUDIO_FORMAT,
    "invalid_video_frame": ErrorCode.INVALID_VIDEO_FRAME,
}
"""The validators' own error types and the wire codes they stand for."""


def _loc(error: ErrorDetails) -> str:
    return ".".join(str(part) for part in error["loc"])


def _protocol_error(exc: ValidationError, event_type: str, event_id: str | None) -> ProtocolError:
    errors = exc.errors(include_url=False, include_input=False)
    for error in errors:
        if error["type"] in _CUSTOM_CODES:
            path = error.get("ctx", {}).get("path")  # a term a model validator refused, below its loc
            param = ".".join(part for part in (_loc(error), path) if part)
            message = f"unknown parameter '{param}'" if error["type"] == "extra_forbidden" else error["msg"]
            return ProtocolError(
                _CUSTOM_CODES[error["type"]], message, param=param or None, event_id=event_id
            )
    missing = [error for error in errors if error["type"] == "missing"]
    if missing:
        param = _loc(missing[0])
        return ProtocolError(
            ErrorCode.MISSING_FIELD,
            f"{event_type}: missing required field '{param}'",
            param=param,
            event_id=event_id,
        )
    first = errors[0]
    param = _loc(first)
    return ProtocolError(
        ErrorCode.INVALID_VALUE,
        f"{event_type}: invalid '{param}': {first['msg']}",
        param=param,
        event_id=event_id,
    )
