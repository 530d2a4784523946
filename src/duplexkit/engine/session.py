"""The engine-resident duplex session: a Sans-I/O state machine.

The server's runner feeds it three kinds of input, each with `now` (seconds on a monotonic clock it owns):
client events (`handle`), model progress (`request_started`, `on_decision`, `on_step_failed`,
`step_finished`) and the passage of time (`tick`). It answers with a `Step`: server events to send, in
order, and units for the model to step, in order. It never sleeps, reads a clock or touches a socket.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np
from pydantic import ValidationError

from duplexkit.engine.assembler import AssembledUnit, UnitAssembler
from duplexkit.engine.decisions import Decision, FunctionCall, Interrupt, Listen, Speak, Transcribed
from duplexkit.engine.fence import Fence
from duplexkit.engine.ledger import RequestStartLedger, ResponseTiming
from duplexkit.engine.playback import CommitPolicy, PlaybackLedger
from duplexkit.engine.tools import FunctionOutput, ToolLedger, check_arguments
from duplexkit.engine.units import Unit
from duplexkit.protocol import client_events as ce
from duplexkit.protocol import server_events as se
from duplexkit.protocol.audio import FORMAT_RATE_HZ, AudioFormat, EncodedAudio, StreamingResampler
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.protocol.units import UnitGrid, ms_to_samples, samples_to_ms

Modality = Literal["audio", "text"]
ServerEvents = list[se.ServerEventBase]


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


@dataclass(slots=True)
class Step:
    """The engine's answer to one input: events to send and units to step, each in order."""

    events: ServerEvents = field(default_factory=list)
    units: list[Unit] = field(default_factory=list)
    close_reason: str | None = None

    def extend(self, other: Step) -> None:
        self.events.extend(other.events)
        self.units.extend(other.units)
        self.close_reason = self.close_reason or other.close_reason


@dataclass(slots=True)
class _ActiveResponse:
    """The response being generated. Its message item opens with its first speech (`item_id`), and
    closes when it ends or when a function call follows it (`message_done`); `calls` are its function
    call items, in order."""

    id: str
    turn: int
    timing: ResponseTiming
    modalities: list[Modality]
    output_format: AudioFormat
    output_rate_hz: int
    resampler: StreamingResampler | None
    """The reply's stream from the model's output rate to `output_rate_hz` (`None`: they are the same)."""
    metadata: dict[str, Any] | None = None
    item_id: str | None = None
    message_done: bool = False
    text: str = ""
    audio_ms: float = 0.0
    outputs: list[se.ConversationItem] = field(default_factory=list)


class EngineSession:
    def __init__(self, session_id: str, config: EngineConfig) -> None:
        self.config = config
        self.fence = Fence(session_id)
        self.settings = SessionSettings(
            modalities=list(config.modalities), idle_timeout_s=config.idle_timeout_s
        )
        self.grid = UnitGrid(config.chunk_period_ms, config.first_unit_ms)
        self.started = False
        self.closed = False
        self._assembler = UnitAssembler(self.grid, config.input_sample_rate_hz)
        self._requests = RequestStartLedger()
        self._playback = PlaybackLedger(self.settings.playback_commit_policy)
        self._response: _ActiveResponse | None = None
        self._history: list[se.ConversationItem] = []
        self._entered_ms: dict[str, float] = {}
        """Where each history item entered the conversation on the input media clock (a reply: the end of
        the unit it opened at), so that a transcript completing late puts its user item where it was said."""
        self._counter = 0
        self._unit_index = 0
        self._outstanding = 0
        self._continuations = 0
        self._last_input_at: float | None = None
        self._last_unit_at = 0.0
        self._vad_item: str | None = None
        self._unheard: str | None = None
        """The latest user item announced (server VAD's speech, a commit) whose transcript has not come."""
        self._transcript_item: str | None = None
        self._tools = ToolLedger()
        self._outputs: list[FunctionOutput] = []
        """Function outputs the client sent that the model has not received yet (they ride the next unit)."""
        self._texts: list[str] = []
        """The text of user messages the client created that the model has not received yet (they ride the
        next unit, as outputs do)."""
        self._final_units: list[int] = []
        """The final units not stepped yet (a commit's, a `response.create`'s), in order: each ends a turn
        the client declared, so what the model decides before one is held for it (`_hold`)."""
        self._held: list[Decision] = []
        """Output the model decided on units before a queued final unit (a clip sent at once, then its
        commit): released at that final unit, where the client's turn ends (`_release`)."""
        self._asked: int | None = None
        """The pending `response.create`'s final unit, whose decisions answer it: the response they open,
        else an empty one. Every request ends with a `response.done` (OpenAI's contract; Pipecat holds its
        next request until then), and a second one before it is refused."""
        self._metadata: dict[str, Any] | None = None
        """The latest `response.create`'s `response.metadata`, for the next response to echo."""
        self._user_item_unanswered = False
        """A client created a user message since the model last stepped a final unit (a `response.create`
        then asks for an answer even with no audio: Pipecat's first request, vLLM-Omni's rule)."""

    # --- client events --------------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self.fence.session_id

    @property
    def input_rate_hz(self) -> int:
        """The rate of input in the session's format: the format's own (G.711: 8 kHz), else the PCM rate."""
        s = self.settings
        return FORMAT_RATE_HZ.get(s.input_audio_format, s.input_sample_rate_hz)

    @property
    def output_rate_hz(self) -> int:
        """The rate replies are sent at: the output format's own (G.711: 8 kHz), else the PCM rate asked
        for, else the model's."""
        s = self.settings
        fixed = FORMAT_RATE_HZ.get(s.output_audio_format)
        return fixed or s.output_sample_rate_hz or self.config.output_sample_rate_hz

    def admits(self, unit: Unit) -> bool:
        """Whether the model's output for `unit` may still take effect (`Fence`)."""
        return self.fence.admits(unit.fence, unit.index)

    @property
    def active_response_id(self) -> str | None:
        return self._response.id if self._response else None

    @property
    def history(self) -> list[se.ConversationItem]:
        """The conversation as the listener heard it (assistant items trimmed to played audio)."""
        return [self._heard(item) for item in self._history]

    def heard_text(self, response_id: str) -> str | None:
        """The part of a response's transcript the listener heard, per the playback ledger."""
        entry = self._playback.get(response_id)
        return None if entry is None else entry.heard_text()

    def start(self, now: float) -> Step:
        """Open the session with defaults (autostart): `session.created`."""
        self.started = True
        self._last_input_at = now
        return Step(events=[se.SessionCreated(session=self._session_info())])

    def handle(self, event: ce.ClientEventBase, now: float) -> Step:
        """Apply one client event. Invalid requests become `error` events; the session carries on."""
        self._last_input_at = now
        try:
            if not self.started and not isinstance(event, ce.SessionUpdate):
                raise ProtocolError(
                    ErrorCode.SESSION_NOT_CONFIGURED, "the first event must be session.update (autostart=0)"
                )
            return self._dispatch(event, now)
        except ProtocolError as exc:
            return Step(
                events=[se.error_event(exc.code, exc.message, param=exc.param, event_id=event.event_id)]
            )

    def protocol_error(self, exc: ProtocolError) -> Step:
        """An event that could not even be parsed: report it, change nothing."""
        return Step(events=[se.error_event(exc.code, exc.message, param=exc.param, event_id=exc.event_id)])

    def _dispatch(self, event: ce.ClientEventBase, now: float) -> Step:
        match event:
            case ce.SessionUpdate():
                return self._update(event.session)
            case ce.InputAudioBufferAppend():
                return self._append(event, now)
            case ce.InputAudioBufferCommit():
                return self._commit(now, is_speech=event.is_speech)
            case ce.InputAudioBufferClear():
                self._assembler.clear()
                return Step(events=[se.InputAudioBufferCleared()])
            case ce.ResponseCreate():
                return self._respond(event, now)
            case ce.ResponseCancel():
                return self._cancel(event.response_id, now)
            case ce.InputCancel():
                self._assembler.clear()
                return self._interrupt("client_cancelled", now)
            case ce.OutputAudioBufferClear() | ce.BargeIn():
                return self._interrupt("barge_in", now)
            case ce.PlaybackAck():
                return self._ack(event)
            case ce.ConversationItemCreate():
                return self._create_item(event, now)
            case ce.ConversationItemRetrieve():
                item = self._item(event.item_id, ErrorCode.ITEM_RETRIEVE_INVALID_ITEM_ID)
                return Step(events=[se.ConversationItemRetrieved(item=self._heard(item))])
            case ce.ConversationItemDelete():
                self._history.remove(self._item(event.item_id))
                self._entered_ms.pop(event.item_id, None)
                return Step(events=[se.ConversationItemDeleted(item_id=event.item_id)])
            case ce.ConversationItemTruncate():
                return self._truncate(event)
            case ce.SessionHeartbeat():
                return Step(events=[se.SessionHeartbeatAck()])
            case ce.SessionClose():
                return self.close(event.reason or "client_close", now)
        raise ProtocolError(ErrorCode.UNKNOWN_EVENT, f"{event.type!r} is not handled by this server")

    def _update(self, update: ce.SessionConfig) -> Step:
        if update.turn_detection is not None and not self.config.server_vad:
            raise ProtocolError(
                ErrorCode.INVALID_VALUE,
                "server_vad turn detection is not available on this server; send null (model-native turns)",
                param="session.turn_detection",
            )
        if update.modalities is not None:
            unsupported = set(update.modalities) - set(self.config.modalities)
            if unsupported or not update.modalities:
                raise ProtocolError(
                    ErrorCode.INVALID_VALUE,
                    f"modalities must be a non-empty subset of {list(self.config.modalities)}",
                    param="session.modalities",
                )
        _check_rates(update, self.settings)
        limit = self.config.idle_timeout_s
        if update.idle_timeout_s is not None and update.idle_timeout_s > limit:
            # the server's idle deadline bounds how long a silent client holds its slot: shorter only
            raise ProtocolError(
                ErrorCode.INVALID_VALUE,
                f"idle_timeout_s may be at most this server's {limit:g} s",
                param="session.idle_timeout_s",
            )
        s = self.settings
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
                setattr(s, name, getattr(update, name))
        if "turn_detection" in update.model_fields_set:  # explicit null: back to model-native turns
            s.turn_detection = update.turn_detection
        self._playback.policy = s.playback_commit_policy
        step = Step()
        if not self.started:
            self.started = True
            step.events.append(se.SessionCreated(session=self._session_info()))
        step.events.append(se.SessionUpdated(session=self._session_info()))
        return step

    def _append(self, event: ce.InputAudioBufferAppend, now: float) -> Step:
        rate = _append_rate(event, self.settings.input_sample_rate_hz)  # refuses a wrong rate before anything
        barge_in = self._response is not None and (
            event.force_barge_in or (event.is_speech and self.settings.overlap_policy == "barge_in_on_speech")
        )
        interrupted = self._interrupt("barge_in", now) if barge_in else None
        self._continuations = 0
        frames = tuple(event.frames) if self.config.accepts_video else ()
        assembled = self._assembler.push(event.payload, rate, frames)
        step = self._units(assembled, now, is_speech=event.is_speech, force_listen=bool(event.force_listen))
        if interrupted is None:
            return step
        interrupted.extend(step)
        return interrupted

    def _commit(self, now: float, *, is_speech: bool | None = None, item_id: str | None = None) -> Step:
        """The buffered input becomes user item `item_id` (server VAD's speech names it; else a new one)."""
        item_id = item_id or self._new_id("item")
        previous = self._append_item(
            se.ConversationItem(id=item_id, role="user", content=[se.ItemContent(type="input_audio")]),
            self._assembler.media_ms,
        )
        self._unheard = item_id
        committed = se.InputAudioBufferCommitted(
            item_id=item_id, previous_item_id=previous, audio_end_ms=self._assembler.media_ms
        )
        item = self._history[-1]
        step = Step(
            events=[
                committed,
                se.ConversationItemAdded(item=item, previous_item_id=previous),
                se.ConversationItemDone(item=item, previous_item_id=previous),
            ]
        )
        step.extend(self._units([self._assembler.flush()], now, is_speech=is_speech))
        return step

    def speech_started(self, audio_start_ms: float, now: float, unit_index: int | None = None) -> Step:
        """Server VAD heard speech start (in unit `unit_index`, before the model steps it): announce it
        and, with `interrupt_response`, barge in there."""
        vad = self.settings.turn_detection
        if vad is None or self.closed:
            return Step()
        self._vad_item = self._unheard = self._new_id("item")
        step = Step(
            events=[
                se.InputAudioBufferSpeechStarted(audio_start_ms=round(audio_start_ms), item_id=self._vad_item)
            ]
        )
        if vad.interrupt_response and (self._response is not None or self._tools.pending):
            step.extend(self._interrupt("turn_detected", now, first_unit=unit_index))
        return step

    def vad_failed(self, message: str) -> Step:
        """Server VAD broke: turn detection falls back to model-native, and the client is told so."""
        self.settings.turn_detection = None
        return Step(
            events=[
                se.error_event(
                    ErrorCode.INTERNAL_ERROR, f"server VAD failed and is off for this session: {message}"
                ),
                se.SessionUpdated(session=self._session_info()),
            ]
        )

    def speech_stopped(self, audio_end_ms: float, now: float) -> Step:
        """Server VAD heard speech end: announce it and, with `create_response`, commit the turn."""
        vad = self.settings.turn_detection
        if vad is None or self.closed:
            return Step()
        item_id = self._vad_item or self._new_id("item")
        step = Step(
            events=[se.InputAudioBufferSpeechStopped(audio_end_ms=round(audio_end_ms), item_id=item_id)]
        )
        self._vad_item = None
        if vad.create_response:
            step.extend(self._commit(now, is_speech=True, item_id=item_id))
        return step

    def _units(
        self,
        assembled: list[AssembledUnit],
        now: float,
        *,
        is_speech: bool | None = None,
        force_listen: bool = False,
        continuation: bool = False,
    ) -> Step:
        units = [
            Unit(
                index=self._unit_index + i,
                fence=self.fence,
                samples=a.samples,
                sample_rate_hz=self.config.input_sample_rate_hz,
                start_ms=a.start_ms,
                end_ms=a.end_ms,
                frames=a.frames,
                final=a.final,
                is_speech=is_speech,
                force_listen=force_listen,
                continuation=continuation,
            )
            for i, a in enumerate(assembled)
        ]
        if units and (self._outputs or self._texts):  # the model receives them with the next unit it steps
            units[0] = dataclasses.replace(
                units[0], tool_outputs=tuple(self._outputs), user_texts=tuple(self._texts)
            )
            self._outputs, self._texts = [], []
        for unit in units:
            if unit.final:
                self._user_item_unanswered = False
                self._final_units.append(unit.index)
        self._unit_index += len(units)
        self._outstanding += len(units)
        if units:
            self._last_unit_at = now
        return Step(units=units)

    def _respond(self, event: ce.ResponseCreate, now: float) -> Step:
        """`response.create`: answer now. The buffered input becomes a final unit, which asks the model for
        its answer (function outputs and user texts the client sent ride it), and the response that answers
        echoes this request's `response.metadata`. With nothing buffered, no outputs, no metadata and no new
        user message to answer, nothing is stepped (a duplex model answers input): the request is answered
        by the final unit still being stepped (the `response.create` OpenAI clients send after a commit),
        else at once by an empty response. A request with metadata (LiveKit's `generate_reply`) or after a
        user message item (Pipecat's first request; vLLM-Omni answers one the same way) is answered on an
        empty final unit, which carries the message's text. A model that listens there still ends the
        request: an empty response, `completed`. A request while a response is active or requested is
        refused with OpenAI's `conversation_already_has_active_response`; nothing changes."""
        if self._response is not None or self._asked is not None:
            raise ProtocolError(
                ErrorCode.CONVERSATION_ALREADY_HAS_ACTIVE_RESPONSE,
                # OpenAI's wording (Pipecat and LiveKit pass over this code)
                "Conversation already has an active response in progress: "
                f"{self._response.id if self._response else 'requested'}. Wait until the response is "
                "finished before creating a new one.",
            )
        options = event.response or {}
        metadata = options.get("metadata")
        self._metadata = metadata if isinstance(metadata, dict) else None
        step = Step()
        overrides = self._tool_overrides(options)
        if overrides:  # not served; said, never ignored silently: the session's own apply
            message = f"per-response {' and '.join(overrides)} other than the session's are not served"
            step.events.append(
                se.error_event(
                    ErrorCode.INVALID_VALUE,
                    message,
                    param=f"response.{overrides[0]}",
                    event_id=event.event_id,
                )
            )
        asks = (
            self._assembler.buffered_samples
            or self._outputs
            or self._metadata is not None
            or self._user_item_unanswered
        )
        if asks:
            step.extend(self._units([self._assembler.flush()], now))
        if not self._final_units:
            step.events.extend(self._empty_response("completed", "stop", self._assembler.media_ms))
        else:
            self._asked = self._final_units[-1]
        return step

    def _empty_response(
        self,
        status: se.ResponseStatus,
        reason: se.ResponseEndReason,
        unit_end_ms: float,
        listen: se.ListenReason | None = None,
        *,
        error: se.ErrorDetail | None = None,
    ) -> ServerEvents:
        """A response that ends a request with no output: `response.created`, the model's `response.listen`
        when it listened, `response.done` (`status`, `output: []`; a failed one's `error`)."""
        step = Step()
        response = self._begin_response(step, unit_end_ms)
        if listen is not None:
            step.events.append(_listen_event(listen, unit_end_ms, response.id))
        step.events.extend(self._finish(status, reason, interrupted=status != "completed", error=error))
        return step.events

    def _tool_overrides(self, options: dict[str, Any]) -> list[str]:
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
            if names != [tool.name for tool in self.settings.tools]:
                differ.append("tools")
        if "tool_choice" in options:
            choice = self.settings.tool_choice
            mine = choice if isinstance(choice, str) else {"type": "function", "name": choice.name}
            if options["tool_choice"] != mine:
                differ.append("tool_choice")
        return differ

    def _cancel(self, response_id: str | None, now: float) -> Step:
        if self._response is None and self._asked is not None and response_id is None:
            return self._interrupt("client_cancelled", now)  # the request whose response has not opened
        if self._response is None or (response_id is not None and response_id != self._response.id):
            raise ProtocolError(
                ErrorCode.RESPONSE_CANCEL_NOT_ACTIVE,
                # OpenAI's wording: LiveKit's realtime model passes over errors that start so.
                f"Cancellation failed: no active response {response_id!r} found"
                if response_id
                else "Cancellation failed: no active response found",
                param="response_id" if response_id else None,
            )
        return self._interrupt("client_cancelled", now)

    def _interrupt(
        self,
        reason: Literal["barge_in", "client_cancelled", "turn_detected", "model_error"],
        now: float,
        first_unit: int | None = None,
    ) -> Step:
        """Barge-in, cancel, clear (or a model's call refused) at its place on the input timeline: before
        unit `first_unit` (default: after all input so far, a client's event). End the active response and
        any output held for a turn's end; make stale the units before `first_unit` and the pending
        function calls (an output that comes for one later joins the conversation, unanswered). A pending
        request whose final unit is stale ends `cancelled`, empty; one queued after `first_unit` stands:
        input that precedes a request never cancels it."""
        first = self._unit_index if first_unit is None else first_unit
        step = Step()
        if self._response is not None:
            step.events.extend(self._finish("cancelled", reason, interrupted=True))
        if self._asked is not None and self._asked < first:
            step.events.extend(self._empty_response("cancelled", reason, self._assembler.media_ms))
            self._asked = None
        self._held.clear()
        self._final_units = [index for index in self._final_units if index >= first]
        self._tools.retire()
        self.fence = self.fence.next_epoch(first)
        self._requests.clear()
        return step

    def _ack(self, event: ce.PlaybackAck) -> Step:
        entry = self._playback.ack(event.response_id, event.played_ms, event.committed_ms)
        return Step(
            events=[
                se.PlaybackAcknowledged(
                    response_id=entry.response_id,
                    item_id=entry.item_id,
                    played_ms=entry.played_ms,
                    committed_ms=entry.committed_ms,
                )
            ]
        )

    def _create_item(self, event: ce.ConversationItemCreate, now: float) -> Step:
        """A client's item: a message, a `function_call`, or a `function_call_output` answering a call
        (which the model receives with its next unit; where the session continues after an output by
        itself, no response is active and no call of the turn still waits, that is a final unit stepped
        now, which asks for the answer; the output of a call a barge-in retired joins the conversation
        and is never answered, as OpenAI takes any output).
        It goes after `previous_item_id` (`root`: first; absent: last); an unknown one is `unknown_item`, a
        malformed function item `invalid_function_call` (`invalid_function_call_output` for an output), an
        output for no pending call a code of the tool ledger's."""
        item = _client_item(event.item, self._new_id("item"))
        if any(h.id == item.id for h in self._history):
            raise ProtocolError(
                ErrorCode.ITEM_CREATE_DUPLICATE_ITEM_ID, f"item {item.id!r} already exists", param="item.id"
            )
        at = self._place(event.previous_item_id)
        if item.type == "function_call":
            assert item.call_id is not None and item.name is not None and item.arguments is not None
            self._tools.open(item.call_id, item.name, item.arguments)
        elif item.type == "function_call_output":
            assert item.call_id is not None and item.output is not None
            output = self._tools.answer(item.call_id, item.output)
            if output is not None:
                self._outputs.append(output)
            elif self.config.refuses_stale_outputs:
                raise ProtocolError(
                    ErrorCode.STALE_FUNCTION_CALL_OUTPUT,
                    f"function call {item.call_id!r} was cancelled by a barge-in before its output came",
                    param="item.call_id",
                )
        elif item.role == "user":
            self._user_item_unanswered = True
            self._texts.extend(c.text for c in item.content or () if c.type == "input_text" and c.text)
        self._history.insert(at, item)
        self._entered_ms[item.id] = self._assembler.media_ms
        previous = self._history[at - 1].id if at else None
        step = Step(
            events=[
                se.ConversationItemAdded(item=item, previous_item_id=previous),
                se.ConversationItemDone(item=item, previous_item_id=previous),
            ]
        )
        continues = (
            self.config.continues_after_tool_output
            and item.type == "function_call_output"
            and bool(self._outputs)
            and not self._tools.pending  # every call of the turn has its output
        )
        if continues and self._response is None:
            step.extend(self._units([self._assembler.flush()], now))
        return step

    def _place(self, previous_item_id: str | None) -> int:
        """Where an item created after `previous_item_id` goes in the history."""
        if previous_item_id is None:
            return len(self._history)
        if previous_item_id == "root":
            return 0
        for index, item in enumerate(self._history):
            if item.id == previous_item_id:
                return index + 1
        raise ProtocolError(
            ErrorCode.UNKNOWN_ITEM, f"no conversation item {previous_item_id!r}", param="previous_item_id"
        )

    def _truncate(self, event: ce.ConversationItemTruncate) -> Step:
        item = self._item(event.item_id)
        entry = self._playback.by_item(item.id)
        if entry is None:
            raise ProtocolError(
                ErrorCode.INVALID_VALUE, "only assistant audio items can be truncated", param="item_id"
            )
        entry.committed_ms = entry.played_ms = min(float(event.audio_end_ms), entry.generated_ms)
        entry.settled = True
        return Step(
            events=[
                se.ConversationItemTruncated(
                    item_id=item.id, content_index=event.content_index, audio_end_ms=event.audio_end_ms
                )
            ]
        )

    def close(self, reason: str, now: float) -> Step:
        """End the session: cancel what is active, forget request starts, say `session.closed`."""
        step = Step(close_reason=reason)
        if self._response is not None:
            step.events.extend(self._finish("cancelled", "client_cancelled", interrupted=True))
        if self._asked is not None:
            media_ms = self._assembler.media_ms
            step.events.extend(self._empty_response("cancelled", "client_cancelled", media_ms))
        self._asked = None
        self._held.clear()
        self._requests.clear()
        self.closed = True
        step.events.append(se.SessionClosed(session_id=self.session_id, reason=reason))
        return step

    # --- model progress -------------------------------------------------------------------------------

    def request_started(self, unit: Unit, submitted_at: float, *, queue_wait_s: float | None = None) -> None:
        """`unit` was complete and submitted to the model's queue at `submitted_at` (the anchor for TTFT/TTFP
        of the reply it produces) and waited `queue_wait_s` for the stepper before its request started."""
        if self.admits(unit):
            turn = self.fence.turn_id
            wait_ms = None if queue_wait_s is None else max(0.0, queue_wait_s * 1000.0)
            self._requests.mark_model_turn_request_started(turn, submitted_at, wait_ms)
            if self._response is not None and self._response.turn == turn:
                self._response.timing.adopt_request_start(
                    self._requests.start_of(turn), self._requests.queue_wait_ms_of(turn)
                )

    def on_decision(self, unit: Unit, decision: Decision, now: float) -> Step:
        """Turn one model decision for `unit` into events; output for a stale unit is dropped, and output
        for a unit before a queued final unit is held for it (`_hold`)."""
        if self.closed or not self.admits(unit):
            return Step()
        if isinstance(decision, Transcribed):
            return self._transcribed(decision)
        if self._turn_continues(unit):
            return self._hold(unit, decision, now)
        step = self._release(unit, now)
        step.extend(self._decide(unit, decision, now))
        return step

    def _turn_continues(self, unit: Unit) -> bool:
        """The client has ended its turn after `unit`: a final unit (its commit, its `response.create`)
        is queued behind it, so `unit` is inside the user's turn."""
        return any(index > unit.index for index in self._final_units)

    def _hold(self, unit: Unit, decision: Decision, now: float) -> Step:
        """A decision inside a turn the client has already ended (audio sent faster than real time, then
        committed): a response the model opens there would start inside the user's question, and the
        rest of the question, already queued, would barge in on it. So what would open a response is held
        and released at the turn's final unit, where the client's commit and `response.create` put it
        (`_release`): audio that precedes a response never interrupts it. An active response goes on as
        usual; a barge-in the model hears ends it (and anything held), but not the request queued after
        it; a listen outside any reply is said at once."""
        if isinstance(decision, Interrupt):
            self._held.clear()
            if self._response is not None or self._tools.pending:
                return self._interrupt("barge_in", now, first_unit=unit.index + 1)
            return Step()
        if self._response is not None or (not self._held and isinstance(decision, Listen)):
            return self._decide(unit, decision, now)
        self._held.append(decision)
        return Step()

    def _release(self, unit: Unit, now: float) -> Step:
        """The held decisions, in order, as decided at `unit` (the turn's final unit): the response they
        open starts there on the timeline and answers the turn's request."""
        held, self._held = self._held, []
        step = Step()
        for decision in held:
            step.extend(self._decide(unit, decision, now))
        return step

    def _decide(self, unit: Unit, decision: Decision, now: float) -> Step:
        if self._asked == unit.index and not isinstance(decision, Interrupt):
            self._asked = None  # answered by the response this opens, continues or ends...
            if isinstance(decision, Listen) and self._response is None:  # ...else by an empty one
                return Step(events=self._empty_response("completed", "stop", unit.end_ms, decision.reason))
        if isinstance(decision, Listen):
            return self._listen(decision, unit.end_ms)
        if isinstance(decision, Interrupt):
            stale_request = self._asked is not None and self._asked <= unit.index
            if self._response is not None or self._tools.pending or stale_request:
                return self._interrupt("barge_in", now, first_unit=unit.index + 1)
            return Step()
        if isinstance(decision, Transcribed):
            return self._transcribed(decision)
        if isinstance(decision, FunctionCall):
            return self._call(decision, unit.end_ms, now)
        return self._speak(decision, unit.end_ms, now)

    def _transcribed(self, heard: Transcribed) -> Step:
        """Input transcription events for the utterance being heard. They name the user item of the
        speech: the latest one announced (server VAD's, a commit's) still without a transcript, else a new
        user item added to the conversation when the transcript completes. That item goes where the speech
        ended (`heard.speech_end_ms`), before the reply the model opened after it, however late the
        recogniser finished: `previous_item_id` names the item before it."""
        if self._transcript_item is None:
            self._transcript_item = self._unheard or self._new_id("item")
        item_id = self._transcript_item
        if not heard.final:
            return Step(events=[se.InputAudioTranscriptionDelta(item_id=item_id, delta=heard.text)])
        self._transcript_item = None
        if self._unheard == item_id:
            self._unheard = None
        step = Step()
        known = [item for item in self._history if item.id == item_id]
        if known and known[0].content:
            known[0].content[0].transcript = heard.text
        else:
            item = se.ConversationItem(
                id=item_id, role="user", content=[se.ItemContent(type="input_audio", transcript=heard.text)]
            )
            said_ms = self._assembler.media_ms if heard.speech_end_ms is None else heard.speech_end_ms
            previous = self._insert_item(item, said_ms)
            step.events.append(se.ConversationItemAdded(item=item, previous_item_id=previous))
            step.events.append(se.ConversationItemDone(item=item, previous_item_id=previous))
        step.events.append(
            se.InputAudioTranscriptionCompleted(
                item_id=item_id,
                transcript=heard.text,
                usage=se.TranscriptionUsage(seconds=round(heard.audio_seconds, 3)),
            )
        )
        return step

    def on_step_failed(
        self, unit: Unit, message: str, now: float, code: ErrorCode = ErrorCode.MODEL_STEP_FAILED
    ) -> Step:
        """The model raised (or missed its step deadline, `model_step_timeout`) while stepping `unit`: the
        active response (or the request's, empty) ends `failed` with the error in its `status_details`,
        where OpenAI reports a failure within a response and clients go on; with no response to carry
        it, an empty response ends `failed` with it, as OpenAI reports a server failure, never a top-level
        `error` (which Pipecat takes as the end of its connection). The session survives. A pending
        `response.create` is answered by that response whichever unit failed: its client reads the
        `response.done` as its request's, so the request must not stay pending behind it (its next
        `response.create` would be refused with no response active)."""
        if self.closed or not self.admits(unit):
            return Step()
        error = se.error_detail(code, f"model step failed: {message}")
        step = Step() if self._turn_continues(unit) else self._release(unit, now)
        if self._asked is not None and (self._asked == unit.index or self._response is None):
            self._asked = None
        if self._response is not None:
            step.events.extend(self._finish("failed", "model_error", interrupted=True, error=error))
        else:
            step.events.extend(self._empty_response("failed", "model_error", unit.end_ms, error=error))
        return step

    def step_finished(self, unit: Unit, now: float) -> Step:
        """The model is done with `unit`. Output still held for a final unit that decided nothing is
        released; a request it answered with no decision that opens or ends a response (nothing, or only
        a transcript) ends now, empty."""
        self._outstanding = max(0, self._outstanding - 1)
        self._last_unit_at = max(self._last_unit_at, now)
        if unit.index in self._final_units:
            self._final_units.remove(unit.index)
        step = Step()
        if self.closed or not self.admits(unit):
            return step
        if not self._turn_continues(unit):  # held output its final unit did not release
            step.extend(self._release(unit, now))
        if self._asked == unit.index:
            self._asked = None
            if self._response is None:
                step.events.extend(self._empty_response("completed", "stop", unit.end_ms))
        return step

    def next_tick_at(self) -> float:
        """The earliest `now` at which `tick` may have work (`math.inf`: none, whatever the time): the idle
        timeout, and while a reply is active, one unit period after the last unit (a continuation)."""
        if self.closed or self._last_input_at is None:
            due = math.inf
        else:
            due = self._last_input_at + self.settings.idle_timeout_s
        if self._response is not None and not self.closed and not self.config.input_clocked:
            due = min(due, self._last_unit_at + self.config.chunk_period_ms / 1000.0)
        return due

    def tick(self, now: float) -> Step:
        """Time passed: enforce the idle timeout and step silence while a reply continues past the input."""
        if self.closed:
            return Step()
        if self._last_input_at is not None and now - self._last_input_at > self.settings.idle_timeout_s:
            step = Step(
                events=[se.error_event(ErrorCode.IDLE_TIMEOUT, "no client event within idle_timeout_s")]
            )
            step.extend(self.close("idle_timeout", now))
            return step
        period_s = self.config.chunk_period_ms / 1000.0
        if self.config.input_clocked or self._response is None or self._outstanding:
            return Step()
        if now - self._last_unit_at < period_s:
            return Step()
        if self._continuations >= self.config.continuation_limit:
            response_id = self._response.id
            step = Step(events=[_listen_event("continuation_limit", self._assembler.media_ms, response_id)])
            step.events.extend(self._finish("incomplete", "continuation_limit", interrupted=False))
            return step
        self._continuations += 1
        media_ms = self._assembler.media_ms
        silence = np.zeros(
            ms_to_samples(self.config.chunk_period_ms, self.config.input_sample_rate_hz), np.float32
        )
        return self._units(
            [AssembledUnit(silence, media_ms, media_ms, (), final=False)], now, continuation=True
        )

    # --- responses ------------------------------------------------------------------------------------

    def _listen(self, decision: Listen, unit_end_ms: float) -> Step:
        if self._response is None:
            return Step(events=[_listen_event(decision.reason, unit_end_ms)])
        step = Step(events=[_listen_event(decision.reason, unit_end_ms, self._response.id)])
        step.events.extend(self._finish("completed", "stop", interrupted=False))
        return step

    def _speak(self, segment: Speak, unit_end_ms: float, now: float) -> Step:
        step = Step()
        response = self._response
        if response is not None and response.message_done:  # speech after a call: the next response
            step.events.extend(self._finish("completed", "stop", interrupted=False))
            response = None
        if response is None:
            response = self._begin_response(step, unit_end_ms)
        text, audio = segment.text, segment.audio
        empty = not text and not len(audio) and not segment.end_of_turn
        opened = response.item_id is None and not (empty and self.settings.tools)
        # With tools offered, an empty segment opens only the response: what follows may be a call
        if opened:
            self._open_message(step, response, unit_end_ms)
        speaks_audio = "audio" in response.modalities
        first = response.timing.mark_response_first_outputs(
            now, text=bool(text.strip()), audio=speaks_audio and len(audio) > 0
        )
        response.timing.record_segment(len(segment.tokens), tpot_ms=segment.tpot_ms, itl_ms=segment.itl_ms)
        if segment.stages_ms:
            response.timing.model_stages_ms = dict(segment.stages_ms)
        created = next((e for e in step.events if isinstance(e, se.ResponseCreated)), None)
        if created is not None and response.timing.request_start is not None:
            # the response opened with this segment: created carries what it already observed
            created.response_request_metrics = self._metrics(response.timing)
        if opened:
            assert response.item_id is not None
            step.events.append(se.ResponseSpeak(response_id=response.id, item_id=response.item_id))
        if empty:
            return step  # nothing to say yet: the response is open, its output follows
        item_id = response.item_id
        assert item_id is not None
        ids = {"response_id": response.id, "item_id": item_id}
        if speaks_audio and response.resampler is not None:
            audio = response.resampler.process(audio)
            if segment.end_of_turn:
                audio = np.concatenate([audio, response.resampler.flush()])
                response.resampler = None
        audio_ms = samples_to_ms(len(audio), response.output_rate_hz) if speaks_audio else 0.0
        text_chars, audio_end_ms = self._playback.generated(response.id, text, audio_ms)
        response.text += text
        response.audio_ms = audio_end_ms
        if speaks_audio:
            step.events.append(
                self._audio_delta(
                    response,
                    audio,
                    (text_chars, audio_end_ms),
                    end_of_turn=segment.end_of_turn,
                    metrics=self._metrics(response.timing) if first.ttfp_ms is not None else None,
                    unit_end_ms=unit_end_ms,
                )
            )
            step.events.append(
                se.ResponseOutputAudioTranscriptDelta(
                    **ids,
                    delta=text,
                    response_request_metrics=self._metrics(response.timing)
                    if first.ttft_ms is not None
                    else None,
                    unit_end_ms=unit_end_ms,
                )
            )
        else:
            step.events.append(
                se.ResponseOutputTextDelta(
                    **ids,
                    delta=text,
                    response_request_metrics=self._metrics(response.timing)
                    if first.ttft_ms is not None
                    else None,
                    unit_end_ms=unit_end_ms,
                )
            )
        if segment.end_of_turn:
            step.events.extend(self._finish("completed", "stop", interrupted=False))
        return step

    def _call(self, call: FunctionCall, unit_end_ms: float, now: float) -> Step:
        """The model calls a function: its item opens and completes at once (the arguments in one delta),
        after the response's message, which closes first. A call the session cannot accept (an undeclared
        function, arguments that are not a JSON object, a reused `call_id`) fails closed: never shown as a
        call; the response ends `failed` with `invalid_function_call` in its `status_details`, and the
        rest of the model's turn is stale, as after a barge-in (`_interrupt`)."""
        step = Step()
        response = self._response or self._begin_response(step, unit_end_ms)
        created = next((e for e in step.events if isinstance(e, se.ResponseCreated)), None)
        if created is not None and response.timing.request_start is not None:
            created.response_request_metrics = self._metrics(response.timing)
        try:
            self._check_call(call)
            self._tools.open(call.call_id, call.name, call.arguments)
        except ProtocolError as exc:
            message = f"the model's function call was refused: {exc.message}"
            error = se.error_detail(ErrorCode.INVALID_FUNCTION_CALL, message)
            step.events.extend(self._finish("failed", "model_error", interrupted=True, error=error))
            step.extend(self._interrupt("model_error", now))
            return step
        else:
            if response.item_id is not None and not response.message_done:
                step.events.extend(self._close_message(response, interrupted=False))
            response.message_done = True
            step.events.extend(self._call_events(response, call, unit_end_ms))
        if call.end_of_turn:
            step.events.extend(self._finish("completed", "stop", interrupted=False))
        return step

    def _check_call(self, call: FunctionCall) -> None:
        declared = {tool.name for tool in self.settings.tools}
        if call.name not in declared or self.settings.tool_choice == "none":
            raise ProtocolError(
                ErrorCode.INVALID_FUNCTION_CALL, f"{call.name!r} is not a function the session offers"
            )
        check_arguments(call.arguments)

    def _call_events(self, response: _ActiveResponse, call: FunctionCall, unit_end_ms: float) -> ServerEvents:
        item_id = self._new_id("item")
        opening = se.ConversationItem(
            id=item_id,
            type="function_call",
            status="in_progress",
            content=None,
            call_id=call.call_id,
            name=call.name,
            arguments="",
        )
        done = opening.model_copy(update={"status": "completed", "arguments": call.arguments})
        if self.config.announces_whole_calls:
            opening = done
        previous = self._append_item(done, unit_end_ms)
        index = len(response.outputs)
        response.outputs.append(done)
        ids = {"response_id": response.id, "item_id": item_id, "output_index": index, "call_id": call.call_id}
        return [
            se.ResponseOutputItemAdded(response_id=response.id, output_index=index, item=opening),
            se.ConversationItemAdded(item=opening, previous_item_id=previous),
            se.ResponseFunctionCallArgumentsDelta(**ids, delta=call.arguments),
            se.ResponseFunctionCallArgumentsDone(**ids, name=call.name, arguments=call.arguments),
            se.ResponseOutputItemDone(response_id=response.id, output_index=index, item=done),
            se.ConversationItemDone(item=done, previous_item_id=previous),
        ]

    def _audio_delta(
        self,
        response: _ActiveResponse,
        audio: np.ndarray[Any, np.dtype[np.float32]],
        mark: tuple[int, float],
        *,
        end_of_turn: bool,
        metrics: se.ResponseRequestMetrics | None,
        unit_end_ms: float | None,
    ) -> se.ResponseOutputAudioDelta:
        """One audio delta of `response`: `audio` at its output rate, in its format; `mark` is where the
        playback ledger put its end (text chars, audio ms)."""
        text_chars, audio_end_ms = mark
        item_id = response.item_id
        assert item_id is not None
        return se.ResponseOutputAudioDelta.of_audio(
            EncodedAudio.of_samples(audio, response.output_format),
            response_id=response.id,
            item_id=item_id,
            sample_rate_hz=response.output_rate_hz,
            metadata=se.AudioDeltaMetadata(
                audio_duration_ms=audio_end_ms,
                end_of_turn=end_of_turn,
                audio_text_marks=[se.AudioTextMark(text_chars=text_chars, audio_end_ms=audio_end_ms)],
            ),
            response_request_metrics=metrics,
            unit_end_ms=unit_end_ms,
        )

    def _begin_response(self, step: Step, unit_end_ms: float) -> _ActiveResponse:
        """Open a response (`response.created`, echoing the `response.create` metadata it answers); its
        message item opens with its first speech (`_open_message`)."""
        turn = self.fence.turn_id
        output_rate_hz, model_rate_hz = self.output_rate_hz, self.config.output_sample_rate_hz
        response = _ActiveResponse(
            id=self._new_id("resp"),
            turn=turn,
            timing=ResponseTiming(
                request_start=self._requests.begin_response(turn),
                queue_wait_ms=self._requests.queue_wait_ms_of(turn),
            ),
            modalities=list(self.settings.modalities),
            output_format=self.settings.output_audio_format,
            output_rate_hz=output_rate_hz,
            resampler=None
            if output_rate_hz == model_rate_hz
            else StreamingResampler(model_rate_hz, output_rate_hz),
            metadata=self._metadata,
        )
        self._metadata = None
        self._response = response
        self._continuations = 0
        step.events.append(
            se.ResponseCreated(
                response=se.ResponseInfo(
                    id=response.id,
                    status="in_progress",
                    output_modalities=response.modalities,
                    metadata=response.metadata,
                ),
                unit_end_ms=unit_end_ms,
            )
        )
        return response

    def _open_message(self, step: Step, response: _ActiveResponse, unit_end_ms: float) -> None:
        response.item_id = self._new_id("item")
        self._playback.open(response.id, response.item_id)
        item = se.ConversationItem(id=response.item_id, role="assistant", status="in_progress")
        previous = self._append_item(item, unit_end_ms)
        part = se.ContentPart(type="audio" if "audio" in response.modalities else "text")
        index = len(response.outputs)
        step.events.extend(
            [
                se.ConversationItemAdded(item=item, previous_item_id=previous),
                se.ResponseOutputItemAdded(response_id=response.id, output_index=index, item=item),
                se.ResponseContentPartAdded(
                    response_id=response.id, item_id=response.item_id, output_index=index, part=part
                ),
            ]
        )

    def _close_message(self, response: _ActiveResponse, *, interrupted: bool) -> ServerEvents:
        """The done events of the response's message item, its history entry and playback settled."""
        item_id = response.item_id
        assert item_id is not None
        response.message_done = True
        audio = "audio" in response.modalities
        events: ServerEvents = []
        if audio and response.resampler is not None and not interrupted:  # the resampler's last samples
            tail = response.resampler.flush()
            mark = self._playback.generated(
                response.id, "", samples_to_ms(len(tail), response.output_rate_hz)
            )
            response.audio_ms = mark[1]
            events.append(
                self._audio_delta(response, tail, mark, end_of_turn=True, metrics=None, unit_end_ms=None)
            )
        response.resampler = None
        self._playback.finish(response.id, interrupted=interrupted)
        index = len(response.outputs)
        ids = {"response_id": response.id, "item_id": item_id, "output_index": index}
        content = (
            se.ItemContent(type="output_audio", transcript=response.text)
            if audio
            else se.ItemContent(type="output_text", text=response.text)
        )
        item = se.ConversationItem(
            id=item_id,
            role="assistant",
            status="incomplete" if interrupted else "completed",
            content=[content],
        )
        self._history = [item if h.id == item.id else h for h in self._history]
        response.outputs.append(item)
        part = (
            se.ContentPart(type="audio", transcript=response.text)
            if audio
            else se.ContentPart(type="text", text=response.text)
        )
        if audio:
            events.append(se.ResponseOutputAudioDone(**ids))
            events.append(se.ResponseOutputAudioTranscriptDone(**ids, transcript=response.text))
        else:
            events.append(se.ResponseOutputTextDone(**ids, text=response.text))
        events += [
            se.ResponseContentPartDone(**ids, part=part),
            se.ResponseOutputItemDone(response_id=response.id, output_index=index, item=item),
        ]
        return events

    def _finish(
        self,
        status: se.ResponseStatus,
        reason: se.ResponseEndReason,
        *,
        interrupted: bool,
        error: se.ErrorDetail | None = None,
    ) -> ServerEvents:
        """Close the active response: the done events in order (a failed one's `error` in its
        `status_details`), history and ledgers settled."""
        response = self._response
        assert response is not None
        self._response = None
        events: ServerEvents = []
        if response.item_id is not None and not response.message_done:
            events.extend(self._close_message(response, interrupted=interrupted or status != "completed"))
        entry = self._playback.get(response.id)
        audio = "audio" in response.modalities
        timing = response.timing
        metrics = self._metrics(timing)
        metrics.tpot_ms = timing.tpot_ms
        metrics.output_tokens = timing.output_tokens
        metrics.output_audio_ms = entry.generated_ms if audio and entry is not None else None
        events.append(
            se.ResponseDone(
                response=se.ResponseInfo(
                    id=response.id,
                    status=status,
                    status_details=None
                    if status == "completed"
                    else se.StatusDetails(type=status, reason=reason, error=error),
                    output=list(response.outputs),
                    output_modalities=response.modalities,
                    usage=se.Usage.of_reply(timing.output_tokens),
                    metadata=response.metadata,
                ),
                response_request_metrics=metrics,
            ),
        )
        self._requests.complete_model_turn(response.turn)
        self.fence = self.fence.next_turn()
        return events

    @staticmethod
    def _metrics(timing: ResponseTiming) -> se.ResponseRequestMetrics:
        """The response's metrics; without a request start they carry no server source (not measured)."""
        if timing.request_start is None:
            return se.ResponseRequestMetrics(source=None, measurement_origin=None)
        return se.ResponseRequestMetrics(
            ttft_ms=timing.ttft_ms,
            ttfp_ms=timing.ttfp_ms,
            queue_wait_ms=timing.queue_wait_ms,
            model_stages_ms=timing.model_stages_ms,
        )

    # --- helpers --------------------------------------------------------------------------------------

    def session_info(self) -> se.SessionInfo:
        """The session as `session.created`/`session.updated` describe it (also sent on `session.resumed`)."""
        return self._session_info()

    def _session_info(self) -> se.SessionInfo:
        s, c = self.settings, self.config
        return se.SessionInfo(
            id=self.session_id,
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
                first_unit_ms=self.grid.unit_end_ms(0),
                supports_barge_in=c.supports_barge_in,
                supports_function_calling=c.supports_function_calling,
                input_modes=["audio", "video"] if c.accepts_video else ["audio"],
                max_sessions=c.max_sessions,
                input_sample_rate_hz=self.input_rate_hz,
                output_sample_rate_hz=self.output_rate_hz,
                supports_session_resume=c.supports_session_resume,
            ),
        )

    def _new_id(self, kind: str) -> str:
        self._counter += 1
        return f"{kind}_{self.session_id.removeprefix('sess_')}_{self._counter}"

    def _append_item(self, item: se.ConversationItem, entered_ms: float) -> str | None:
        """Add `item` at the end of the conversation; the id of the item before it."""
        previous = self._history[-1].id if self._history else None
        self._history.append(item)
        self._entered_ms[item.id] = entered_ms
        return previous

    def _insert_item(self, item: se.ConversationItem, said_ms: float) -> str | None:
        """Add `item`, said up to `said_ms` on the input media clock, before the items that entered at or
        after that time (the reply to it among them); the id of the item before it."""
        at = len(self._history)
        while at and self._entered_ms[self._history[at - 1].id] >= said_ms:
            at -= 1
        self._history.insert(at, item)
        self._entered_ms[item.id] = said_ms
        return self._history[at - 1].id if at else None

    def _item(self, item_id: str, unknown: ErrorCode = ErrorCode.UNKNOWN_ITEM) -> se.ConversationItem:
        """The item `item_id`, else a ProtocolError coded `unknown` (a retrieval says OpenAI's code)."""
        for item in self._history:
            if item.id == item_id:
                return item
        raise ProtocolError(unknown, f"no conversation item {item_id!r}", param="item_id")

    def _heard(self, item: se.ConversationItem) -> se.ConversationItem:
        entry = self._playback.by_item(item.id)
        if entry is None or not item.content:
            return item
        heard = entry.heard_text()
        content = [
            part.model_copy(update={"transcript": heard} if part.transcript is not None else {"text": heard})
            for part in item.content
        ]
        return item.model_copy(update={"content": content})


def _client_item(raw: dict[str, Any], default_id: str) -> se.ConversationItem:
    """A client's `conversation.item.create` item, checked for its type: a message needs a `role`; a
    `function_call` a `call_id`, a `name` and JSON-object `arguments`; a `function_call_output` a `call_id`
    and a string `output`."""
    kind = raw.get("type", "message")
    code = (
        {
            "message": ErrorCode.INVALID_VALUE,
            "function_call_output": ErrorCode.INVALID_FUNCTION_CALL_OUTPUT,
        }.get(kind, ErrorCode.INVALID_FUNCTION_CALL)
        if isinstance(kind, str)
        else ErrorCode.INVALID_VALUE  # a type that is no name at all (an object, a list: unhashable)
    )
    try:
        item = se.ConversationItem.model_validate({"id": default_id, **raw})
    except ValidationError as exc:
        where = exc.errors()[0]["loc"][:1]  # the item's field at fault (`item.output`), when there is one
        param = ".".join(["item", *map(str, where)])
        raise ProtocolError(code, f"invalid conversation item: {exc}", param=param) from None
    required = {
        "message": ("role",),
        "function_call": ("call_id", "name", "arguments"),
        "function_call_output": ("call_id", "output"),
    }[item.type]
    missing = [name for name in required if getattr(item, name) is None]
    if missing:
        raise ProtocolError(
            code, f"a {item.type} item needs {', '.join(missing)}", param=f"item.{missing[0]}"
        )
    if item.type == "function_call":
        assert item.arguments is not None
        check_arguments(item.arguments)
    if item.type != "message":
        item.content = None
    return item


def _listen_event(
    reason: se.ListenReason, unit_end_ms: float, response_id: str | None = None
) -> se.ResponseListen:
    info = _LISTENING[reason] if response_id is None else _listen_info(reason, response_id)
    return se.ResponseListen(response_id=response_id, unit_end_ms=unit_end_ms, response=info)


def _listen_info(reason: se.ListenReason, response_id: str | None) -> se.ListenInfo:
    return se.ListenInfo(
        id=response_id, metadata=se.ListenMetadata(reason=reason, model_listen=reason == "model_listen")
    )


_LISTENING = {reason: _listen_info(reason, None) for reason in get_args(se.ListenReason)}
"""A listen's `response` outside a reply, per reason (shared: the objects are frozen)."""


def _append_rate(event: ce.InputAudioBufferAppend, session_rate_hz: int) -> int:
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
