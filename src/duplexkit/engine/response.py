"""One response: its whole event sequence, from `response.created` to `response.done`, as a state machine.

A response opens (`response.created`) when the model first decides to answer, opens its message item with
its first speech, may close that item for the function calls that follow it, and ends once
(`response.done`: completed, cancelled, incomplete, or failed with the error in its `status_details`, where
OpenAI reports a failure within a response). Each transition is in `_NEXT`, in `h11`'s manner: an event
the state does not allow is a bug of the caller (`LocalProtocolError`), never a malformed stream sent.
The session decides when a response opens and ends; this object decides what each step says, in order.
Sans-I/O: it is handed `now` and the model's output, and writes only to the conversation and the playback
ledger it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any, get_args

import numpy as np

from duplexkit.engine.conversation import Conversation
from duplexkit.engine.decisions import FunctionCall, Speak
from duplexkit.engine.ledger import ResponseTiming
from duplexkit.engine.playback import PlaybackLedger
from duplexkit.protocol import server_events as se
from duplexkit.protocol.audio import AudioFormat, EncodedAudio, StreamingResampler
from duplexkit.protocol.units import samples_to_ms

ServerEvents = list[se.ServerEventBase]
Samples = np.ndarray[Any, np.dtype[np.float32]]


class ResponseState(Enum):
    CREATED = "created"
    """`response.created` is out; no output item yet."""
    SPEAKING = "speaking"
    """Its message item is open: audio or text deltas follow."""
    CALLING = "calling"
    """Its message (if any) is done; function call items follow. Speech now belongs to the next response."""
    DONE = "done"
    """`response.done` is out: nothing more."""


_NEXT: dict[ResponseState, frozenset[ResponseState]] = {
    ResponseState.CREATED: frozenset({ResponseState.SPEAKING, ResponseState.CALLING, ResponseState.DONE}),
    ResponseState.SPEAKING: frozenset({ResponseState.CALLING, ResponseState.DONE}),
    ResponseState.CALLING: frozenset({ResponseState.CALLING, ResponseState.DONE}),
    ResponseState.DONE: frozenset(),
}


class LocalProtocolError(RuntimeError):
    """The session asked a response for a transition its state does not allow (a bug, not bad input)."""


def request_metrics(timing: ResponseTiming) -> se.ResponseRequestMetrics:
    """A response's metrics; without a request start they carry no server source (not measured)."""
    if timing.request_start is None:
        return se.ResponseRequestMetrics(source=None, measurement_origin=None)
    return se.ResponseRequestMetrics(
        ttft_ms=timing.ttft_ms,
        ttfp_ms=timing.ttfp_ms,
        queue_wait_ms=timing.queue_wait_ms,
        model_stages_ms=timing.model_stages_ms,
    )


def listen_event(
    reason: se.ListenReason, unit_end_ms: float, response_id: str | None = None
) -> se.ResponseListen:
    """`response.listen`: the model listened through the unit ending at `unit_end_ms` (in a response:
    that ends it)."""
    info = _LISTENING[reason] if response_id is None else _listen_info(reason, response_id)
    return se.ResponseListen(response_id=response_id, unit_end_ms=unit_end_ms, response=info)


def _listen_info(reason: se.ListenReason, response_id: str | None) -> se.ListenInfo:
    return se.ListenInfo(
        id=response_id, metadata=se.ListenMetadata(reason=reason, model_listen=reason == "model_listen")
    )


_LISTENING = {reason: _listen_info(reason, None) for reason in get_args(se.ListenReason)}
"""A listen's `response` outside a reply, per reason (shared: the objects are frozen)."""


class Response:
    """The response being generated, from its `response.created` (`created`) to its `response.done`
    (`finish`). Its items enter `conversation`; its audio and text marks go to `playback`."""

    def __init__(
        self,
        *,
        response_id: str,
        turn: int,
        timing: ResponseTiming,
        modalities: list[Any],
        output_format: AudioFormat,
        output_rate_hz: int,
        model_rate_hz: int,
        metadata: dict[str, Any] | None,
        conversation: Conversation,
        playback: PlaybackLedger,
        new_id: Callable[[str], str],
        announces_whole_calls: bool = False,
    ) -> None:
        self.id = response_id
        self.turn = turn
        self.timing = timing
        self.modalities = modalities
        self.metadata = metadata
        self.state = ResponseState.CREATED
        self.item_id: str | None = None
        """Its message item, once its first speech opened it."""
        self.text = ""
        self.outputs: list[se.ConversationItem] = []
        self._format = output_format
        self._rate_hz = output_rate_hz
        self._resampler = (
            None if output_rate_hz == model_rate_hz else StreamingResampler(model_rate_hz, output_rate_hz)
        )
        """The reply's stream from the model's output rate to `output_rate_hz` (`None`: they are the same)."""
        self._conversation = conversation
        self._playback = playback
        self._new_id = new_id
        self._announces_whole_calls = announces_whole_calls

    @property
    def speaks_audio(self) -> bool:
        return "audio" in self.modalities

    def created(self, unit_end_ms: float) -> se.ResponseCreated:
        """Its `response.created` (echoing the `response.create` metadata it answers)."""
        return se.ResponseCreated(
            response=se.ResponseInfo(
                id=self.id, status="in_progress", output_modalities=self.modalities, metadata=self.metadata
            ),
            unit_end_ms=unit_end_ms,
        )

    def speak(self, segment: Speak, unit_end_ms: float, now: float, *, tools_offered: bool) -> ServerEvents:
        """One segment of the model's speech. The first that says something opens the message item
        (`response.speak` announces it); an empty one with tools offered opens nothing yet, since what
        follows may be a call. Each segment then sends its audio with its transcript (or its text)."""
        text, audio = segment.text, segment.audio
        empty = not text and not len(audio) and not segment.end_of_turn
        events: ServerEvents = []
        opened = self.state is ResponseState.CREATED and not (empty and tools_offered)
        if opened:
            events += self._open_message(unit_end_ms)
        elif self.state is not ResponseState.SPEAKING and not empty:
            self._to(ResponseState.SPEAKING)  # (raises: speech after a call is the next response's)
        first = self.timing.mark_response_first_outputs(
            now, text=bool(text.strip()), audio=self.speaks_audio and len(audio) > 0
        )
        self.timing.record_segment(len(segment.tokens), tpot_ms=segment.tpot_ms, itl_ms=segment.itl_ms)
        if segment.stages_ms:
            self.timing.model_stages_ms = dict(segment.stages_ms)
        if opened:
            assert self.item_id is not None
            events.append(se.ResponseSpeak(response_id=self.id, item_id=self.item_id))
        if empty:
            return events  # nothing to say yet: the response is open, its output follows
        assert self.item_id is not None
        if self.speaks_audio and self._resampler is not None:
            audio = self._resampler.process(audio)
            if segment.end_of_turn:
                audio = np.concatenate([audio, self._resampler.flush()])
                self._resampler = None
        audio_ms = samples_to_ms(len(audio), self._rate_hz) if self.speaks_audio else 0.0
        mark = self._playback.generated(self.id, text, audio_ms)
        self.text += text
        text_metrics = request_metrics(self.timing) if first.ttft_ms is not None else None
        if not self.speaks_audio:
            return [
                *events,
                se.ResponseOutputTextDelta(
                    response_id=self.id,
                    item_id=self.item_id,
                    delta=text,
                    response_request_metrics=text_metrics,
                    unit_end_ms=unit_end_ms,
                ),
            ]
        audio_metrics = request_metrics(self.timing) if first.ttfp_ms is not None else None
        return [
            *events,
            self._audio_delta(
                audio, mark, end_of_turn=segment.end_of_turn, metrics=audio_metrics, unit_end_ms=unit_end_ms
            ),
            se.ResponseOutputAudioTranscriptDelta(
                response_id=self.id,
                item_id=self.item_id,
                delta=text,
                response_request_metrics=text_metrics,
                unit_end_ms=unit_end_ms,
            ),
        ]

    def call(self, call: FunctionCall, unit_end_ms: float) -> ServerEvents:
        """A function call the session accepted: its item opens and completes at once (the arguments in
        one delta), after the message, which closes first."""
        events = self._close_message(interrupted=False) if self.state is ResponseState.SPEAKING else []
        self._to(ResponseState.CALLING)
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
        if self._announces_whole_calls:
            opening = done
        previous = self._conversation.append(done, unit_end_ms)
        index = len(self.outputs)
        self.outputs.append(done)
        ids = {"response_id": self.id, "item_id": item_id, "output_index": index, "call_id": call.call_id}
        return [
            *events,
            se.ResponseOutputItemAdded(response_id=self.id, output_index=index, item=opening),
            se.ConversationItemAdded(item=opening, previous_item_id=previous),
            se.ResponseFunctionCallArgumentsDelta(**ids, delta=call.arguments),
            se.ResponseFunctionCallArgumentsDone(**ids, name=call.name, arguments=call.arguments),
            se.ResponseOutputItemDone(response_id=self.id, output_index=index, item=done),
            se.ConversationItemDone(item=done, previous_item_id=previous),
        ]

    def finish(
        self,
        status: se.ResponseStatus,
        reason: se.ResponseEndReason,
        *,
        interrupted: bool,
        error: se.ErrorDetail | None = None,
    ) -> ServerEvents:
        """The done events in order: its message's (an interrupted one `incomplete`, trimmed to what was
        played), then `response.done` (a completed one without `status_details`, as OpenAI's; a failed
        one's `error` in them)."""
        events = (
            self._close_message(interrupted=interrupted or status != "completed")
            if self.state is ResponseState.SPEAKING
            else []
        )
        self._to(ResponseState.DONE)
        entry = self._playback.get(self.id)
        metrics = request_metrics(self.timing)
        metrics.tpot_ms = self.timing.tpot_ms
        metrics.output_tokens = self.timing.output_tokens
        metrics.output_audio_ms = entry.generated_ms if self.speaks_audio and entry is not None else None
        details = None if status == "completed" else se.StatusDetails(type=status, reason=reason, error=error)
        events.append(
            se.ResponseDone(
                response=se.ResponseInfo(
                    id=self.id,
                    status=status,
                    status_details=details,
                    output=list(self.outputs),
                    output_modalities=self.modalities,
                    usage=se.Usage.of_reply(self.timing.output_tokens),
                    metadata=self.metadata,
                ),
                response_request_metrics=metrics,
            )
        )
        return events

    def _to(self, state: ResponseState) -> None:
        if state not in _NEXT[self.state]:
            raise LocalProtocolError(f"response {self.id}: {self.state.value} → {state.value} is not allowed")
        self.state = state

    def _open_message(self, unit_end_ms: float) -> ServerEvents:
        self._to(ResponseState.SPEAKING)
        item_id = self.item_id = self._new_id("item")
        self._playback.open(self.id, item_id)
        item = se.ConversationItem(id=item_id, role="assistant", status="in_progress")
        previous = self._conversation.append(item, unit_end_ms)
        part = se.ContentPart(type="audio" if self.speaks_audio else "text")
        index = len(self.outputs)
        return [
            se.ConversationItemAdded(item=item, previous_item_id=previous),
            se.ResponseOutputItemAdded(response_id=self.id, output_index=index, item=item),
            se.ResponseContentPartAdded(response_id=self.id, item_id=item_id, output_index=index, part=part),
        ]

    def _close_message(self, *, interrupted: bool) -> ServerEvents:
        """The done events of its message item; its conversation entry and playback settled."""
        item_id = self.item_id
        assert item_id is not None
        events: ServerEvents = []
        if (
            self.speaks_audio and self._resampler is not None and not interrupted
        ):  # the resampler's last samples
            tail = self._resampler.flush()
            mark = self._playback.generated(self.id, "", samples_to_ms(len(tail), self._rate_hz))
            events.append(
                self._audio_delta(
                    tail,
                    mark,
                    end_of_turn=True,
                    metrics=None,
                    unit_end_ms=None,
                )
            )
        self._resampler = None
        self._playback.finish(self.id, interrupted=interrupted)
        index = len(self.outputs)
        ids = {"response_id": self.id, "item_id": item_id, "output_index": index}
        content = (
            se.ItemContent(type="output_audio", transcript=self.text)
            if self.speaks_audio
            else se.ItemContent(type="output_text", text=self.text)
        )
        item = se.ConversationItem(
            id=item_id,
            role="assistant",
            status="incomplete" if interrupted else "completed",
            content=[content],
        )
        self._conversation.replace(item)
        self.outputs.append(item)
        if self.speaks_audio:
            part = se.ContentPart(type="audio", transcript=self.text)
            events.append(se.ResponseOutputAudioDone(**ids))
            events.append(se.ResponseOutputAudioTranscriptDone(**ids, transcript=self.text))
        else:
            part = se.ContentPart(type="text", text=self.text)
            events.append(se.ResponseOutputTextDone(**ids, text=self.text))
        events += [
            se.ResponseContentPartDone(**ids, part=part),
            se.ResponseOutputItemDone(response_id=self.id, output_index=index, item=item),
        ]
        return events

    def _audio_delta(
        self,
        audio: Samples,
        mark: tuple[int, float],
        *,
        end_of_turn: bool,
        metrics: se.ResponseRequestMetrics | None,
        unit_end_ms: float | None,
    ) -> se.ResponseOutputAudioDelta:
        """One audio delta of its message: `audio` at the output rate, in the output format; `mark` is where
        the playback ledger put its end (text chars, audio ms)."""
        text_chars, audio_end_ms = mark
        assert self.item_id is not None
        return se.ResponseOutputAudioDelta.of_audio(
            EncodedAudio.of_samples(audio, self._format),
            response_id=self.id,
            item_id=self.item_id,
            sample_rate_hz=self._rate_hz,
            metadata=se.AudioDeltaMetadata(
                audio_duration_ms=audio_end_ms,
                end_of_turn=end_of_turn,
                audio_text_marks=[se.AudioTextMark(text_chars=text_chars, audio_end_ms=audio_end_ms)],
            ),
            response_request_metrics=metrics,
            unit_end_ms=unit_end_ms,
        )
