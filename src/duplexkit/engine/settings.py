"""What a session is configured with: the model's and server's fixed terms (`EngineConfig`) and the
client's adjustable ones (`SessionSettings`, changed by `session.update`), and how the session describes
itself (`session.created`/`session.updated`). Sans-I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from duplexkit.engine.playback import CommitPolicy
from duplexkit.protocol import client_events as ce
from duplexkit.protocol import server_events as se
from duplexkit.protocol.audio import FORMAT_RATE_HZ, AudioFormat
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.protocol.units import UnitGrid

Modality = Literal["audio", "text"]


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What the serving model and the server impose on every session."""

    model: str
    model_identity: dict[str, str] | None = None
    """What exactly the model is (`ModelPlugin.identity`: its `id` and parts), sent as
    `session.model_identity` beside `model`, the plugin's name OpenAI clients read."""
    chunk_period_ms: int = 1000
    first_unit_ms: int | None = None
    input_sample_rate_hz: int = 16_000
    output_sample_rate_hz: int = 24_000
    modalities: tuple[Modality, ...] = ("audio", "text")
    accepts_video: bool = False
    supports_barge_in: bool = True
    supports_function_calling: bool = False
    max_sessions: int = 64
    continuation_limit: int = 8
    input_clocked: bool = False
    """No continuation silence: the model steps only on input (`ModelCapabilities.input_clocked`)."""
    idle_timeout_s: float = 300.0
    server_vad: bool = False
    supports_session_resume: bool = False
    continues_after_tool_output: bool = False
    """An accepted function output is answered without a `response.create` (the dialect's rule: vLLM-Omni's
    session continues on its own; OpenAI's waits for the client)."""
    announces_whole_calls: bool = False
    """A call's item is announced complete (`completed`, its `arguments`) in `response.output_item.added`
    and `conversation.item.added`, as vLLM-Omni's projector does; OpenAI announces it `in_progress`, empty."""
    refuses_stale_outputs: bool = False
    """An output for a call a barge-in retired is refused, `stale_function_call_output` (vLLM-Omni's
    ledger); OpenAI takes it as a conversation item, which the model never answers."""


@dataclass(slots=True)
class SessionSettings:
    """The client-adjustable part of the session (`session.update`)."""

    modalities: list[Modality]
    input_audio_format: AudioFormat = "pcm16"
    output_audio_format: AudioFormat = "pcm16"
    input_sample_rate_hz: int = 16_000
    """The rate of PCM input that names none (a G.711 format's rate is its own: `FORMAT_RATE_HZ`)."""
    output_sample_rate_hz: int | None = None
    """The rate of PCM output; `None`: the model's (a G.711 format's rate is its own)."""
    instructions: str | None = None
    voice: str | None = None
    turn_detection: ce.TurnDetection | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    idle_timeout_s: float = 300.0
    overlap_policy: Literal["listen_only", "barge_in_on_speech"] = "barge_in_on_speech"
    playback_commit_policy: CommitPolicy = "ack_only"
    tools: list[ce.FunctionTool] = field(default_factory=list)
    tool_choice: ce.ToolChoice = "auto"
    input_audio_transcription: ce.InputAudioTranscription | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)

    @property
    def input_rate_hz(self) -> int:
        """The rate of input in the session's format: the format's own (G.711: 8 kHz), else the PCM rate."""
        return FORMAT_RATE_HZ.get(self.input_audio_format, self.input_sample_rate_hz)

    def output_rate_hz(self, config: EngineConfig) -> int:
        """The rate replies are sent at: the output format's own (G.711: 8 kHz), else the PCM rate asked
        for, else the model's."""
        fixed = FORMAT_RATE_HZ.get(self.output_audio_format)
        return fixed or self.output_sample_rate_hz or config.output_sample_rate_hz

    def apply(self, update: ce.SessionConfig, config: EngineConfig) -> None:
        """A `session.update`: checked whole (a refusal is a `ProtocolError` and changes nothing), then
        applied field by field; an explicit null `turn_detection` goes back to model-native turns."""
        if update.turn_detection is not None and not config.server_vad:
            raise ProtocolError(
                ErrorCode.INVALID_VALUE,
                "server_vad turn detection is not available on this server; send null (model-native turns)",
                param="session.turn_detection",
            )
        if update.modalities is not None:
            unsupported = set(update.modalities) - set(config.modalities)
            if unsupported or not update.modalities:
                raise ProtocolError(
                    ErrorCode.INVALID_VALUE,
                    f"modalities must be a non-empty subset of {list(config.modalities)}",
                    param="session.modalities",
                )
        _check_rates(update, self)
        limit = config.idle_timeout_s
        if update.idle_timeout_s is not None and update.idle_timeout_s > limit:
            # the server's idle deadline bounds how long a silent client holds its slot: shorter only
            raise ProtocolError(
                ErrorCode.INVALID_VALUE,
                f"idle_timeout_s may be at most this server's {limit:g} s",
                param="session.idle_timeout_s",
            )
        for name in (
            "modalities",
            "input_audio_format",
            "output_audio_format",
            "input_sample_rate_hz",
            "output_sample_rate_hz",
            "instructions",
            "voice",
            "temperature",
            "max_tokens",
            "idle_timeout_s",
            "overlap_policy",
            "playback_commit_policy",
            "tools",
            "tool_choice",
            "input_audio_transcription",
            "extra_body",
        ):
            if name in update.model_fields_set and getattr(update, name) is not None:
                setattr(self, name, getattr(update, name))
        if "turn_detection" in update.model_fields_set:  # explicit null: back to model-native turns
            self.turn_detection = update.turn_detection

    def tool_overrides(self, options: dict[str, Any]) -> list[str]:
        """The `response.create` tool options that differ from the session's (LiveKit repeats the
        session's `tool_choice` on every request: that is no override)."""
        differ = []
        tools = options.get("tools")
        if tools is not None:
            names = (
                [t.get("name") if isinstance(t, dict) else None for t in tools or ()]
                if isinstance(tools, list)
                else None
            )
            if names != [tool.name for tool in self.tools]:
                differ.append("tools")
        if "tool_choice" in options:
            choice = self.tool_choice
            mine = choice if isinstance(choice, str) else {"type": "function", "name": choice.name}
            if options["tool_choice"] != mine:
                differ.append("tool_choice")
        return differ

    def info(self, session_id: str, config: EngineConfig) -> se.SessionInfo:
        """The session as `session.created`/`session.updated` describe it (also sent on `session.resumed`)."""
        s, c = self, config
        return se.SessionInfo(
            id=session_id,
            model=c.model,
            model_identity=c.model_identity,
            modalities=s.modalities,
            instructions=s.instructions,
            voice=s.voice,
            input_audio_format=s.input_audio_format,
            output_audio_format=s.output_audio_format,
            turn_detection=s.turn_detection,
            temperature=s.temperature,
            max_tokens=s.max_tokens,
            idle_timeout_s=s.idle_timeout_s,
            overlap_policy=s.overlap_policy,
            playback_commit_policy=s.playback_commit_policy,
            tools=s.tools,
            tool_choice=s.tool_choice,
            input_audio_transcription=s.input_audio_transcription,
            capabilities=se.Capabilities(
                chunk_period_ms=c.chunk_period_ms,
                first_unit_ms=UnitGrid(c.chunk_period_ms, c.first_unit_ms).unit_end_ms(0),
                supports_barge_in=c.supports_barge_in,
                supports_function_calling=c.supports_function_calling,
                input_modes=["audio", "video"] if c.accepts_video else ["audio"],
                max_sessions=c.max_sessions,
                input_sample_rate_hz=self.input_rate_hz,
                output_sample_rate_hz=self.output_rate_hz(c),
                supports_session_resume=c.supports_session_resume,
            ),
        )


def append_rate(event: ce.InputAudioBufferAppend, session_rate_hz: int) -> int:
    """The rate of an append's audio: its format's own (G.711), else the rate it names, else the session's
    PCM rate. A G.711 append that names another rate is refused (`unsupported_sample_rate`)."""
    fixed = FORMAT_RATE_HZ.get(event.payload.format)
    if fixed is None:
        return event.sample_rate_hz or session_rate_hz
    if event.sample_rate_hz not in (None, fixed):
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_SAMPLE_RATE,
            f"{event.payload.format} audio is {fixed} Hz; it cannot be read at {event.sample_rate_hz} Hz",
            param="sample_rate_hz",
        )
    return fixed


def _check_rates(update: ce.SessionConfig, settings: SessionSettings) -> None:
    """Refuse an update that names a rate its G.711 format does not have (before anything is applied)."""
    for direction in ("input", "output"):
        fmt: AudioFormat = getattr(update, f"{direction}_audio_format") or getattr(
            settings, f"{direction}_audio_format"
        )
        fixed = FORMAT_RATE_HZ.get(fmt)
        named = getattr(update, f"{direction}_sample_rate_hz")
        if fixed is not None and named is not None and named != fixed:
            raise ProtocolError(
                ErrorCode.UNSUPPORTED_SAMPLE_RATE,
                f"{fmt} is {fixed} Hz audio; this server cannot send or read it at {named} Hz",
                param=f"session.audio.{direction}.format.rate",
            )
