"""The engine-resident duplex session: a Sans-I/O state machine.

The server's runner feeds it three kinds of input, each with `now` (seconds on a monotonic clock it owns):
client events (`handle`), model progress (`request_started`, `on_decision`, `on_step_failed`,
`step_finished`) and the passage of time (`tick`). It answers with a `Step`: server events to send, in
order, and units for the model to step, in order. It never sleeps, reads a clock or touches a socket.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from duplexkit.engine.conversation import Conversation, UserSpeech, client_item
from duplexkit.engine.decisions import Decision, FunctionCall, Interrupt, Listen, Speak, Transcribed
from duplexkit.engine.fence import Fence
from duplexkit.engine.ledger import RequestStartLedger, ResponseTiming
from duplexkit.engine.playback import PlaybackLedger
from duplexkit.engine.response import Response, ResponseState, ServerEvents, listen_event, request_metrics
from duplexkit.engine.settings import EngineConfig, SessionSettings, append_rate
from duplexkit.engine.timeline import InputTimeline
from duplexkit.engine.tools import ToolLedger, check_arguments
from duplexkit.engine.units import Unit
from duplexkit.protocol import client_events as ce
from duplexkit.protocol import server_events as se
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.protocol.units import UnitGrid


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


class EngineSession:
    def __init__(self, session_id: str, config: EngineConfig) -> None:
        self.config = config
        self.fence = Fence(session_id)
        self.settings = SessionSettings(
            modalities=list(config.modalities), idle_timeout_s=config.idle_timeout_s
        )
        self.started = False
        self.closed = False
        self._input = InputTimeline(config)
        self._requests = RequestStartLedger()
        self._playback = PlaybackLedger(self.settings.playback_commit_policy)
        self._response: Response | None = None
        self._conversation = Conversation()
        self._counter = 0
        self._continuations = 0
        self._last_input_at: float | None = None
        self._speech = UserSpeech(self._conversation, self._new_id)
        self._tools = ToolLedger()
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
        return self.settings.input_rate_hz

    @property
    def output_rate_hz(self) -> int:
        return self.settings.output_rate_hz(self.config)

    @property
    def grid(self) -> UnitGrid:
        """The unit grid the session's input is cut on."""
        return self._input.grid

    @property
    def buffered_samples(self) -> int:
        """Input received and not yet part of a unit (what a client can make the session hold)."""
        return self._input.buffered_samples

    def admits(self, unit: Unit) -> bool:
        """Whether the model's output for `unit` may still take effect (`Fence`)."""
        return self.fence.admits(unit.fence, unit.index)

    @property
    def active_response_id(self) -> str | None:
        return self._response.id if self._response else None

    @property
    def history(self) -> list[se.ConversationItem]:
        """The conversation as the listener heard it (assistant items trimmed to played audio)."""
        return [self._heard(item) for item in self._conversation]

    def heard_text(self, response_id: str) -> str | None:
        """The part of a response's transcript the listener heard, per the playback ledger."""
        entry = self._playback.get(response_id)
        return None if entry is None else entry.heard_text()

    def start(self, now: float) -> Step:
        """Open the session with defaults (autostart): `session.created`."""
        self.started = True
        self._last_input_at = now
        return Step(events=[se.SessionCreated(session=self.session_info())])

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
                self._input.clear()
                return Step(events=[se.InputAudioBufferCleared()])
            case ce.ResponseCreate():
                return self._respond(event, now)
            case ce.ResponseCancel():
                return self._cancel(event.response_id, now)
            case ce.InputCancel():
                self._input.clear()
                return self._interrupt("client_cancelled", now)
            case ce.OutputAudioBufferClear() | ce.BargeIn():
                return self._interrupt("barge_in", now)
            case ce.PlaybackAck():
                return self._ack(event)
            case ce.ConversationItemCreate():
                return self._create_item(event, now)
            case ce.ConversationItemRetrieve():
                item = self._conversation.get(event.item_id, ErrorCode.ITEM_RETRIEVE_INVALID_ITEM_ID)
                return Step(events=[se.ConversationItemRetrieved(item=self._heard(item))])
            case ce.ConversationItemDelete():
                self._conversation.delete(event.item_id)
                return Step(events=[se.ConversationItemDeleted(item_id=event.item_id)])
            case ce.ConversationItemTruncate():
                return self._truncate(event)
            case ce.SessionHeartbeat():
                return Step(events=[se.SessionHeartbeatAck()])
            case ce.SessionClose():
                return self.close(event.reason or "client_close", now)
        raise ProtocolError(ErrorCode.UNKNOWN_EVENT, f"{event.type!r} is not handled by this server")

    def _update(self, update: ce.SessionConfig) -> Step:
        self.settings.apply(update, self.config)
        self._playback.policy = self.settings.playback_commit_policy
        step = Step()
        if not self.started:
            self.started = True
            step.events.append(se.SessionCreated(session=self.session_info()))
        step.events.append(se.SessionUpdated(session=self.session_info()))
        return step

    def session_info(self) -> se.SessionInfo:
        """The session as `session.created`/`session.updated` describe it (also sent on `session.resumed`)."""
        return self.settings.info(self.session_id, self.config)

    def _append(self, event: ce.InputAudioBufferAppend, now: float) -> Step:
        rate = append_rate(event, self.settings.input_sample_rate_hz)  # refuses a wrong rate before anything
        barge_in = self._response is not None and (
            event.force_barge_in or (event.is_speech and self.settings.overlap_policy == "barge_in_on_speech")
        )
        interrupted = self._interrupt("barge_in", now) if barge_in else None
        self._continuations = 0
        frames = tuple(event.frames) if self.config.accepts_video else ()
        units = self._input.push(
            event.payload,
            rate,
            frames,
            self.fence,
            now,
            is_speech=event.is_speech,
            force_listen=bool(event.force_listen),
        )
        step = Step(units=units)
        if interrupted is None:
            return step
        interrupted.extend(step)
        return interrupted

    def _commit(self, now: float, *, is_speech: bool | None = None, item_id: str | None = None) -> Step:
        """The buffered input becomes a user item (`UserSpeech.committed`) and a final unit."""
        step = Step(events=self._speech.committed(item_id, self._input.media_ms))
        step.units.append(self._final_unit(now, is_speech=is_speech))
        return step

    def speech_started(self, audio_start_ms: float, now: float, unit_index: int | None = None) -> Step:
        """Server VAD heard speech start (in unit `unit_index`, before the model steps it): announce it
        and, with `interrupt_response`, barge in there."""
        vad = self.settings.turn_detection
        if vad is None or self.closed:
            return Step()
        step = Step(events=[self._speech.started(audio_start_ms)])
        if vad.interrupt_response and (self._response is not None or self._tools.pending):
            step.extend(self._interrupt("turn_detected", now, first_unit=unit_index))
        return step

    def vad_failed(self, message: str) -> Step:
        """Server VAD broke: turn detection falls back to model-native, and the client is told so."""
        self.settings.turn_detection = None
        self._speech.not_heard()
        return Step(
            events=[
                se.error_event(
                    ErrorCode.INTERNAL_ERROR, f"server VAD failed and is off for this session: {message}"
                ),
                se.SessionUpdated(session=self.session_info()),
            ]
        )

    def speech_stopped(self, audio_end_ms: float, now: float) -> Step:
        """Server VAD heard speech end: announce it and, with `create_response`, commit the turn."""
        vad = self.settings.turn_detection
        if vad is None or self.closed:
            return Step()
        stopped = self._speech.stopped(audio_end_ms)
        step = Step(events=[stopped])
        item_id = stopped.item_id
        if vad.create_response:
            step.extend(self._commit(now, is_speech=True, item_id=item_id))
        return step

    def _final_unit(self, now: float, *, is_speech: bool | None = None) -> Unit:
        """What is buffered, as the final unit of a turn the client ended (it answers what was typed)."""
        self._user_item_unanswered = False
        return self._input.flush(self.fence, now, is_speech=is_speech)

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
        overrides = self.settings.tool_overrides(options)
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
            self._input.buffered_samples
            or self._input.carries
            or self._metadata is not None
            or self._user_item_unanswered
        )
        if asks:
            step.units.append(self._final_unit(now))
        self._asked = self._input.latest_final_unit
        if self._asked is None:
            step.events.extend(self._empty_response("completed", "stop", self._input.media_ms))
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
            step.events.append(listen_event(listen, unit_end_ms, response.id))
        step.events.extend(self._finish(status, reason, interrupted=status != "completed", error=error))
        return step.events

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
        first = self._input.next_index if first_unit is None else first_unit
        step = Step()
        if self._response is not None:
            step.events.extend(self._finish("cancelled", reason, interrupted=True))
        if self._asked is not None and self._asked < first:
            step.events.extend(self._empty_response("cancelled", reason, self._input.media_ms))
            self._asked = None
        self._held.clear()
        self._input.drop_final_units_before(first)
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
        item = client_item(event.item, self._new_id("item"))
        placed = self._conversation.place(item, event.previous_item_id)
        if item.type == "function_call":
            assert item.call_id is not None and item.name is not None and item.arguments is not None
            self._tools.open(item.call_id, item.name, item.arguments)
        elif item.type == "function_call_output":
            assert item.call_id is not None and item.output is not None
            output = self._tools.answer(item.call_id, item.output)
            if output is None and self.config.refuses_stale_outputs:
                raise ProtocolError(
                    ErrorCode.STALE_FUNCTION_CALL_OUTPUT,
                    f"function call {item.call_id!r} was cancelled by a barge-in before its output came",
                    param="item.call_id",
                )
            self._input.carry(output=output)
        elif item.role == "user":
            self._user_item_unanswered = True
            for part in item.content or ():
                self._input.carry(text=part.text if part.type == "input_text" else None)
        previous = self._conversation.add_client(placed, item, self._input.media_ms)
        step = Step(
            events=[
                se.ConversationItemAdded(item=item, previous_item_id=previous),
                se.ConversationItemDone(item=item, previous_item_id=previous),
            ]
        )
        continues = (
            self.config.continues_after_tool_output
            and item.type == "function_call_output"
            and self._input.carries
            and not self._tools.pending  # every call of the turn has its output
        )
        if continues and self._response is None:
            step.units.append(self._final_unit(now))
        return step

    def _truncate(self, event: ce.ConversationItemTruncate) -> Step:
        item = self._conversation.get(event.item_id)
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
            media_ms = self._input.media_ms
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
        if isinstance(decision, Transcribed):  # what the user said is never held
            return self._decide(unit, decision, now)
        if self._in_user_turn(unit):
            return self._hold(unit, decision, now)
        step = self._release(unit, now)
        step.extend(self._decide(unit, decision, now))
        return step

    def _in_user_turn(self, unit: Unit) -> bool:
        """`unit` is inside a turn of the user's that has not ended where the model steps it: the client
        has declared the turn's end after it (a final unit is queued behind it), or server VAD hears the
        user still speaking (under server VAD, the detector ends turns: OpenAI's contract)."""
        heard = self._speech.speaking is not None and self.settings.turn_detection is not None
        return self._input.turn_continues(unit) or heard

    def _hold(self, unit: Unit, decision: Decision, now: float) -> Step:
        """A decision inside a turn the client has already ended (audio sent faster than real time, then
        committed): a response the model opens there would start inside the user's question, and the
        rest of the question, already queued, would barge in on it. So what would open a response is held
        and released at the turn's final unit, where the client's commit and `response.create` put it
        (`_release`): audio that precedes a response never interrupts it. Under server VAD the same holds
        while the user speaks: a reply the model would start at a pause inside the question waits for
        the detector's end of speech. An active response goes on as
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
        if isinstance(decision, Transcribed):
            return Step(events=self._speech.transcribed(decision, self._input.media_ms))
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
        if isinstance(decision, FunctionCall):
            return self._call(decision, unit.end_ms, now)
        return self._speak(decision, unit.end_ms, now)

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
        step = Step() if self._in_user_turn(unit) else self._release(unit, now)
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
        self._input.finished(unit, now)
        step = Step()
        if self.closed or not self.admits(unit):
            return step
        if not self._in_user_turn(unit):  # held output its final unit did not release
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
            due = min(due, self._input.last_unit_at + self.config.chunk_period_ms / 1000.0)
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
        if self.config.input_clocked or self._response is None or self._input.outstanding:
            return Step()
        if now - self._input.last_unit_at < period_s:
            return Step()
        if self._continuations >= self.config.continuation_limit:
            response_id = self._response.id
            step = Step(events=[listen_event("continuation_limit", self._input.media_ms, response_id)])
            step.events.extend(self._finish("incomplete", "continuation_limit", interrupted=False))
            return step
        self._continuations += 1
        return Step(units=[self._input.continuation(self.fence, now)])

    # --- responses ------------------------------------------------------------------------------------

    def _listen(self, decision: Listen, unit_end_ms: float) -> Step:
        if self._response is None:
            return Step(events=[listen_event(decision.reason, unit_end_ms)])
        step = Step(events=[listen_event(decision.reason, unit_end_ms, self._response.id)])
        step.events.extend(self._finish("completed", "stop", interrupted=False))
        return step

    def _speak(self, segment: Speak, unit_end_ms: float, now: float) -> Step:
        step = Step()
        response = self._response
        if response is not None and response.state is ResponseState.CALLING:  # speech after a call: the next
            step.events.extend(self._finish("completed", "stop", interrupted=False))  # response
            response = None
        created = response is None
        if response is None:
            response = self._begin_response(step, unit_end_ms)
        step.events.extend(response.speak(segment, unit_end_ms, now, tools_offered=bool(self.settings.tools)))
        if created:
            self._observed_at_creation(step, response)
        if segment.end_of_turn:
            step.events.extend(self._finish("completed", "stop", interrupted=False))
        return step

    @staticmethod
    def _observed_at_creation(step: Step, response: Response) -> None:
        """A response that opened with this output: its `response.created` carries what it observed."""
        if response.timing.request_start is not None:
            created = next(e for e in step.events if isinstance(e, se.ResponseCreated))
            created.response_request_metrics = request_metrics(response.timing)

    def _call(self, call: FunctionCall, unit_end_ms: float, now: float) -> Step:
        """The model calls a function (`Response.call`). A call the session cannot accept (an undeclared
        function, arguments that are not a JSON object, a reused `call_id`) fails closed: never shown as a
        call; the response ends `failed` with `invalid_function_call` in its `status_details`, and the
        rest of the model's turn is stale, as after a barge-in (`_interrupt`)."""
        step = Step()
        response = self._response
        if response is None:
            response = self._begin_response(step, unit_end_ms)
            self._observed_at_creation(step, response)
        try:
            self._check_call(call)
            self._tools.open(call.call_id, call.name, call.arguments)
        except ProtocolError as exc:
            message = f"the model's function call was refused: {exc.message}"
            error = se.error_detail(ErrorCode.INVALID_FUNCTION_CALL, message)
            step.events.extend(self._finish("failed", "model_error", interrupted=True, error=error))
            step.extend(self._interrupt("model_error", now))
            return step
        step.events.extend(response.call(call, unit_end_ms))
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

    def _begin_response(self, step: Step, unit_end_ms: float) -> Response:
        """Open a response (`response.created`, echoing the `response.create` metadata it answers); its
        message item opens with its first speech."""
        turn = self.fence.turn_id
        response = Response(
            response_id=self._new_id("resp"),
            turn=turn,
            timing=ResponseTiming(
                request_start=self._requests.begin_response(turn),
                queue_wait_ms=self._requests.queue_wait_ms_of(turn),
            ),
            modalities=list(self.settings.modalities),
            output_format=self.settings.output_audio_format,
            output_rate_hz=self.output_rate_hz,
            model_rate_hz=self.config.output_sample_rate_hz,
            metadata=self._metadata,
            conversation=self._conversation,
            playback=self._playback,
            new_id=self._new_id,
            announces_whole_calls=self.config.announces_whole_calls,
        )
        self._metadata = None
        self._response = response
        self._continuations = 0
        step.events.append(response.created(unit_end_ms))
        return response

    def _finish(
        self,
        status: se.ResponseStatus,
        reason: se.ResponseEndReason,
        *,
        interrupted: bool,
        error: se.ErrorDetail | None = None,
    ) -> ServerEvents:
        """End the active response (`Response.finish`); the model's next turn starts."""
        response = self._response
        assert response is not None
        self._response = None
        events = response.finish(status, reason, interrupted=interrupted, error=error)
        self._requests.complete_model_turn(response.turn)
        self.fence = self.fence.next_turn()
        return events

    # --- helpers --------------------------------------------------------------------------------------

    def _new_id(self, kind: str) -> str:
        self._counter += 1
        return f"{kind}_{self.session_id.removeprefix('sess_')}_{self._counter}"

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
