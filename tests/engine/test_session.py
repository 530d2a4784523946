"""EngineSession as a specification: the Sans-I/O duplex session state machine.

Each test drives the engine the way the server's runner does — client events through `handle`, model
progress through `request_started` / `on_decision` / `on_step_failed` / `step_finished`, time through
`tick` — on a fake clock (every `now` is a plain float in seconds), and reads the server events it answers.
"""

from __future__ import annotations

import base64
import json
import math
import re
from typing import Any

import numpy as np
import pytest

from duplexkit.engine import EngineConfig, EngineSession, Interrupt, Listen, Speak, Step, Transcribed, Unit
from duplexkit.protocol.audio import decode_base64_audio, encode_base64_audio
from duplexkit.protocol.errors import ErrorCode
from duplexkit.protocol.wire import parse_client_event

SESSION_ID = "sess_test"
IN_RATE = 16_000
OUT_RATE = 24_000

RESPONSE_HEAD = [
    "response.created",
    "conversation.item.added",
    "response.output_item.added",
    "response.content_part.added",
    "response.speak",
]
AUDIO_PAIR = ["response.output_audio.delta", "response.output_audio_transcript.delta"]
AUDIO_TAIL = [
    "response.output_audio.done",
    "response.output_audio_transcript.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.done",
]
INTERRUPTS = [
    ("barge_in", {}, "barge_in"),
    ("output_audio_buffer.clear", {}, "barge_in"),
    ("response.cancel", {}, "client_cancelled"),
    ("input.cancel", {}, "client_cancelled"),
]


def client(type_: str, **fields: Any) -> Any:
    """A client event exactly as the wire parser builds it."""
    return parse_client_event(json.dumps({"type": type_, **fields}))


def pcm(ms: float, amplitude: float = 0.0, rate: int = IN_RATE) -> str:
    return encode_base64_audio(np.full(round(ms * rate / 1000), amplitude, dtype=np.float32), "pcm16")


def speak(text: str = "", ms: float = 0.0, **kwargs: Any) -> Speak:
    """A reply segment: `text` as word tokens and `ms` of output audio at 24 kHz."""
    tokens = tuple(t for t in re.findall(r"\S*\s*", text) if t)
    audio = np.full(round(ms * OUT_RATE / 1000), 0.1, dtype=np.float32)
    return Speak(tokens=tokens, audio=audio, **kwargs)


def types(events: list[Any]) -> list[str]:
    return [e.type for e in events]


def only(events: list[Any], type_: str) -> Any:
    [event] = [e for e in events if e.type == type_]
    return event


def error_codes(events: list[Any]) -> list[str]:
    return [e.error.code for e in events if e.type == "error"]


class Harness:
    """An EngineSession on a fake clock."""

    def __init__(self, *, autostart: bool = True, **config: Any) -> None:
        self.engine = EngineSession(SESSION_ID, EngineConfig(model="scripted", **config))
        self.opening = self.engine.start(0.0) if autostart else Step()

    def send(self, type_: str, now: float = 0.0, **fields: Any) -> Step:
        return self.engine.handle(client(type_, **fields), now)

    def append(self, ms: float, now: float = 0.0, *, amplitude: float = 0.0, **fields: Any) -> Step:
        return self.send("input_audio_buffer.append", now, audio=pcm(ms, amplitude), **fields)

    def unit(self, now: float = 0.0, ms: float = 1000) -> Unit:
        [unit] = self.append(ms, now).units
        return unit

    def step(
        self, unit: Unit, *decisions: Listen | Speak | Transcribed, at: float, started: float | None = None
    ) -> list[Any]:
        """One model step of `unit`: its request starts, its decisions arrive at `at`, it finishes."""
        self.engine.request_started(unit, at if started is None else started)
        events: list[Any] = []
        for decision in decisions:
            events += self.engine.on_decision(unit, decision, at).events
        events += self.engine.step_finished(unit, at).events
        return events

    def open_response(self, now: float = 1.0, text: str = "Hello ", ms: float = 1000) -> str:
        events = self.step(self.unit(now - 1.0), speak(text, ms), at=now)
        return str(only(events, "response.created").response.id)


# --- opening the session ----------------------------------------------------------------------------


def test_autostart_opens_with_session_created_advertising_the_model_capabilities() -> None:
    h = Harness(chunk_period_ms=200, first_unit_ms=230, accepts_video=True, max_sessions=3)
    [created] = h.opening.events
    assert created.type == "session.created"
    assert created.session.id == SESSION_ID
    caps = created.session.capabilities
    assert (caps.chunk_period_ms, caps.first_unit_ms, caps.max_sessions) == (200, 230, 3)
    assert caps.input_modes == ["audio", "video"]
    assert (caps.input_sample_rate_hz, caps.output_sample_rate_hz) == (16_000, 24_000)


@pytest.mark.parametrize(
    ("type_", "fields"),
    [
        ("input_audio_buffer.append", {"audio": pcm(20)}),
        ("input_audio_buffer.commit", {}),
        ("response.create", {}),
        ("response.cancel", {}),
        ("barge_in", {}),
        ("playback.ack", {"response_id": "resp_1", "played_ms": 10}),
        ("session.heartbeat", {}),
    ],
)
def test_without_autostart_every_event_before_session_update_is_session_not_configured(
    type_: str, fields: dict[str, Any]
) -> None:
    h = Harness(autostart=False)
    step = h.send(type_, event_id="evt_client_1", **fields)
    [error] = step.events
    assert error.error.code == ErrorCode.SESSION_NOT_CONFIGURED
    assert error.error.event_id == "evt_client_1"
    assert step.units == []
    assert not h.engine.started


def test_the_first_session_update_answers_session_created_then_session_updated() -> None:
    h = Harness(autostart=False)
    first = h.send("session.update", session={"instructions": "Be brief."})
    assert types(first.events) == ["session.created", "session.updated"]
    assert first.events[1].session.instructions == "Be brief."
    assert types(h.send("session.update", session={"voice": "alloy"}).events) == ["session.updated"]
    assert types(h.send("session.heartbeat").events) == ["session.heartbeat_ack"]


def test_session_update_with_server_vad_turn_detection_is_not_yet_supported() -> None:
    h = Harness(autostart=False)
    [error] = h.send("session.update", session={"turn_detection": {"type": "server_vad"}}).events
    assert error.error.code == ErrorCode.INVALID_VALUE
    assert error.error.param == "session.turn_detection"
    assert not h.engine.started
    # model-native turn taking (explicit null) is accepted
    ok = h.send("session.update", session={"turn_detection": None})
    assert types(ok.events) == ["session.created", "session.updated"]


def test_session_update_rejects_modalities_the_model_does_not_offer_and_changes_nothing() -> None:
    h = Harness(modalities=("audio",))
    [error] = h.send("session.update", session={"modalities": ["text"], "voice": "x"}).events
    assert error.error.code == ErrorCode.INVALID_VALUE
    assert error.error.param == "session.modalities"
    assert h.engine.settings.modalities == ["audio"]
    assert h.engine.settings.voice is None


def test_session_update_changes_only_the_fields_it_names() -> None:
    h = Harness()
    h.send("session.update", session={"instructions": "Be brief.", "temperature": 0.2})
    [updated] = h.send("session.update", session={"voice": "verse"}).events
    assert (updated.session.instructions, updated.session.temperature) == ("Be brief.", 0.2)
    assert updated.session.voice == "verse"


def test_heartbeat_is_acknowledged() -> None:
    assert types(Harness().send("session.heartbeat").events) == ["session.heartbeat_ack"]


# --- input ------------------------------------------------------------------------------------------


def test_appends_become_units_stamped_with_the_current_fence() -> None:
    h = Harness()
    assert h.append(600).units == []
    [unit] = h.append(600).units
    assert (unit.index, unit.start_ms, unit.end_ms) == (0, 0.0, 1000.0)
    assert unit.sample_rate_hz == IN_RATE
    assert len(unit.samples) == IN_RATE
    assert unit.fence == h.engine.fence
    assert not unit.final
    assert not unit.continuation


def test_commit_is_answered_with_committed_and_flushes_the_residual_as_a_final_unit() -> None:
    h = Harness()
    h.append(1400)
    step = h.send("input_audio_buffer.commit", is_speech=False)
    committed, added, done = step.events
    assert committed.type == "input_audio_buffer.committed"
    # OpenAI's order: the user item is announced after the commit, so clients know it before a reply
    assert (added.type, done.type) == ("conversation.item.added", "conversation.item.done")
    assert added.item.id == committed.item_id and added.previous_item_id == committed.previous_item_id
    assert committed.audio_end_ms == pytest.approx(1400.0)
    [unit] = step.units
    assert unit.final
    assert unit.is_speech is False
    assert (unit.start_ms, unit.end_ms) == (1000.0, pytest.approx(1400.0))
    assert [item.role for item in h.engine.history] == ["user"]


def test_clear_drops_buffered_input_without_moving_the_media_clock() -> None:
    h = Harness()
    h.append(400)
    assert types(h.send("input_audio_buffer.clear").events) == ["input_audio_buffer.cleared"]
    [unit] = h.append(600).units
    assert (unit.start_ms, unit.end_ms) == (pytest.approx(400.0), 1000.0)


def test_response_create_flushes_buffered_input_for_the_model() -> None:
    h = Harness()
    h.append(300)
    [unit] = h.send("response.create").units
    assert unit.final
    assert len(unit.samples) == 300 * IN_RATE // 1000
    h.step(unit, Listen(), at=1.0)  # (the request ends: an empty response)
    assert h.send("response.create").units == []  # nothing buffered, nothing to step
    # ... unless it asks for an answer by metadata (LiveKit's generate_reply): an empty final unit
    [empty] = h.send("response.create", response={"metadata": {"client_event_id": "x"}}).units
    assert empty.final and len(empty.samples) == 0


def test_a_user_message_item_is_answered_by_the_next_response_create() -> None:
    """Pipecat's first request is a text message then `response.create` (vLLM-Omni answers one too): an
    empty final unit, which carries the message's text to the model. Once a final unit was stepped, a
    `response.create` adds nothing again."""
    h = Harness()
    message = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    assert h.send("conversation.item.create", item=message).units == []
    [empty] = h.send("response.create").units
    assert empty.final and len(empty.samples) == 0
    assert empty.user_texts == ("hi",)
    assert h.send("response.create").units == []
    h.send("conversation.item.create", item=message)
    h.append(300)
    [spoken] = h.send("input_audio_buffer.commit").units  # the commit's final unit answers it
    assert spoken.final and spoken.user_texts == ("hi",)
    assert h.send("response.create").units == []
    assistant = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}
    h.send("conversation.item.create", item=assistant)
    assert h.send("response.create").units == []  # only a user's message asks
    h.append(300)
    [last] = h.send("input_audio_buffer.commit").units
    assert last.user_texts == ()  # a text is delivered once, and only a user's reaches the model


# --- every response.create ends (OpenAI's contract: response.created ... response.done) ---------------

EMPTY_RESPONSE = ["response.created", "response.listen", "response.done"]


def _empty_done(events: list[Any], status: str = "completed") -> Any:
    done = only(events, "response.done")
    assert (done.response.status, done.response.output) == (status, [])
    assert only(events, "response.created").response.id == done.response.id
    return done


def test_a_response_create_the_model_answers_by_listening_ends_with_an_empty_response() -> None:
    """LiveKit's `generate_reply` waits for the `response.created` echoing its metadata, Pipecat holds its
    next request until a `response.done`: a model that listens on the request's unit still ends it."""
    h = Harness()
    [unit] = h.send("response.create", response={"metadata": {"client_event_id": "ce_1"}}).units
    events = h.step(unit, Listen(), at=1.0)
    assert types(events) == EMPTY_RESPONSE
    assert only(events, "response.created").response.metadata == {"client_event_id": "ce_1"}
    done = _empty_done(events)
    assert only(events, "response.listen").response_id == done.response.id
    assert h.engine.active_response_id is None
    assert h.step(h.unit(1.0), Listen(), at=2.0)[0].response_id is None  # later listens end nothing


def test_a_response_create_after_a_commit_is_answered_by_the_commits_unit() -> None:
    """The openai SDK's manual turn (`commit`, then `response.create`): the commit's final unit answers
    the request, with speech (one response, not two) or by listening (an empty one)."""
    h = Harness()
    h.append(300)
    [unit] = h.send("input_audio_buffer.commit").units
    assert h.send("response.create").events == []
    assert types(h.step(unit, Listen(), at=1.0)) == EMPTY_RESPONSE
    h.append(300)
    [unit] = h.send("input_audio_buffer.commit").units
    h.send("response.create")
    events = h.step(unit, speak("Hi", 100, end_of_turn=True), at=2.0)
    assert [e.response.status for e in events if e.type == "response.done"] == ["completed"]
    assert only(events, "response.done").response.output != []


def test_a_response_create_with_nothing_to_answer_ends_at_once() -> None:
    h = Harness()
    [unit] = h.append(1000).units
    h.step(unit, Listen(), at=1.0)
    step = h.send("response.create")
    assert step.units == []
    assert types(step.events) == ["response.created", "response.done"]
    _empty_done(step.events)


def test_a_request_the_model_gives_no_decision_for_ends_when_its_unit_is_done() -> None:
    h = Harness()
    h.append(300)
    [unit] = h.send("response.create").units
    events = h.step(unit, Transcribed("hm", final=True), at=1.0)  # a transcript decides nothing
    assert types(events)[-2:] == ["response.created", "response.done"]
    _empty_done(events)


def test_a_second_request_before_the_first_ended_is_refused_as_openai_does() -> None:
    """OpenAI answers `conversation_already_has_active_response` (Pipecat and LiveKit pass over it); the
    first request still ends, once, and its metadata is not overwritten."""
    h = Harness()
    [first] = h.send("response.create", response={"metadata": {"client_event_id": "a"}}).units
    again = h.send("response.create", response={"metadata": {"client_event_id": "b"}})
    assert error_codes(again.events) == [ErrorCode.CONVERSATION_ALREADY_HAS_ACTIVE_RESPONSE]
    assert again.units == []
    events = h.step(first, speak("Hi", 100), at=1.0)
    assert only(events, "response.created").response.metadata == {"client_event_id": "a"}
    during = h.send("response.create")  # while its response is active
    assert error_codes(during.events) == [ErrorCode.CONVERSATION_ALREADY_HAS_ACTIVE_RESPONSE]
    events += h.step(h.unit(1.0), Listen(), at=2.0)
    assert [e.response.status for e in events if e.type == "response.done"] == ["completed"]
    assert error_codes(h.send("response.create").events) == []  # and after it ended, a new one goes


def test_output_decided_inside_a_turn_the_client_ended_opens_the_response_at_its_end() -> None:
    """A clip sent at once, then `response.create`: the model may decide to speak at a pause inside the
    question (a unit before the request's final unit). That output is held and released at the final
    unit, so the response starts where the client's turn ends and answers the request."""
    h = Harness()
    [unit] = h.append(1000).units
    h.append(300)
    [asked] = h.send("response.create").units  # while the model has not stepped the unit before
    assert h.step(unit, speak(), speak("Hi ", 100), at=1.0) == []  # held: the question goes on
    events = h.step(asked, at=2.0)  # the final unit decides nothing: what was held is released there
    assert types(events) == [*RESPONSE_HEAD, *AUDIO_PAIR]
    assert only(events, "response.created").unit_end_ms == asked.end_ms
    events = h.step(h.unit(2.0), speak("there.", 100, end_of_turn=True), at=3.0)
    assert only(events, "response.done").response.output[0].content[0].transcript == "Hi there."


def test_the_rest_of_a_question_sent_at_once_never_cancels_its_request() -> None:
    """The openai SDK's commonest flow, on a model that opens a reply at a pause inside the question and
    barges in on it when the question goes on: no response opens inside the question, the barge-in
    cancels nothing of the request queued after it, and the model's answer at the final unit is the
    request's response, completed."""
    h = Harness()
    first, second = h.unit(), h.unit()
    h.append(300)
    [asked] = h.send("response.create").units
    assert h.step(first, speak(), at=1.0) == []  # a reply at the pause, held
    assert h.step(second, Interrupt(), at=1.1) == []  # the question goes on: the held reply is dropped
    assert h.engine.admits(asked)  # the barge-in made nothing after it stale
    events = h.step(asked, speak("Sure.", 200, end_of_turn=True), at=1.2)
    done = only(events, "response.done").response
    assert done.status == "completed" and done.output[0].content[0].transcript == "Sure."
    assert "error" not in types(events)


def test_a_barge_in_the_model_hears_ends_an_active_reply_but_not_the_input_queued_after_it() -> None:
    """The user talks over the reply and commits a question sent at once: the barge-in on the unit the
    model heard it in cancels the reply; the commit's final unit, queued after it, is answered."""
    h = Harness()
    response_id = h.open_response()
    speech = h.unit(1.0)
    h.append(300)
    [committed] = h.send("input_audio_buffer.commit").units
    events = h.step(speech, Interrupt(), at=2.0)
    done = only(events, "response.done").response
    assert (done.id, done.status) == (response_id, "cancelled")
    events = h.step(committed, speak("Yes?", 100, end_of_turn=True), at=2.5)
    assert only(events, "response.done").response.status == "completed"


@pytest.mark.parametrize(("type_", "fields", "reason"), INTERRUPTS)
def test_a_request_cut_before_its_response_opened_ends_cancelled(
    type_: str, fields: dict[str, Any], reason: str
) -> None:
    h = Harness()
    h.append(300)
    [unit] = h.send("response.create").units
    events = h.send(type_, **fields).events
    assert error_codes(events) == []
    done = _empty_done(events, "cancelled")
    assert done.response.status_details.reason == reason
    assert h.step(unit, speak("late", 100), at=1.0) == []  # its unit's decisions are stale


def test_a_request_after_a_barge_in_is_not_left_to_the_stale_unit() -> None:
    h = Harness()
    h.append(300)
    [unit] = h.send("input_audio_buffer.commit").units
    h.send("barge_in")
    step = h.send("response.create")  # the commit's unit is still stepping, but its decisions are dropped
    assert types(step.events) == ["response.created", "response.done"]
    assert h.step(unit, Listen(), at=1.0) == []


def test_a_request_whose_step_fails_ends_failed() -> None:
    h = Harness()
    h.append(300)
    [unit] = h.send("response.create").units
    events = h.engine.on_step_failed(unit, "boom", 1.0).events
    assert types(events) == ["response.created", "response.done"]  # the error rides on the response
    _empty_done(events, "failed")
    error = events[-1].response.status_details.error
    assert (error.code, error.type, error.retryable) == (ErrorCode.MODEL_STEP_FAILED, "server_error", True)
    assert h.engine.step_finished(unit, 1.0).events == []


def test_append_flags_ride_on_the_units() -> None:
    h = Harness()
    [unit] = h.append(1000, amplitude=0.2, is_speech=True, force_listen=True).units
    assert unit.is_speech is True
    assert unit.force_listen is True


# --- a response -------------------------------------------------------------------------------------


def test_a_response_emits_its_events_in_protocol_order() -> None:
    h = Harness()
    first = h.step(h.unit(0.0), speak("Hello ", 1000), at=1.0)
    second = h.step(h.unit(1.0), speak("world.", 500, end_of_turn=True), at=2.0)
    assert types(first) == RESPONSE_HEAD + AUDIO_PAIR
    assert types(second) == AUDIO_PAIR + AUDIO_TAIL
    response_id = first[0].response.id
    assert first[0].response.status == "in_progress"
    assert all(e.response_id == response_id for e in first[2:] + second[:-1])
    item_id = first[1].item.id
    assert all(e.item_id == item_id for e in first[3:] + second[:-2])


def test_response_speak_is_sent_exactly_once_before_the_first_audio() -> None:
    h = Harness()
    events: list[Any] = []
    for k in range(3):
        events += h.step(h.unit(float(k)), speak(f"part{k} ", 1000, end_of_turn=k == 2), at=k + 1.0)
    assert types(events).count("response.speak") == 1
    assert types(events).index("response.speak") < types(events).index("response.output_audio.delta")
    assert types(events).count("response.output_audio.delta") == 3
    assert types(events).count("response.output_audio_transcript.delta") == 3


def test_every_audio_delta_is_paired_with_one_transcript_delta_even_without_text() -> None:
    h = Harness()
    events = h.step(h.unit(), speak("", 400), speak("Hi", 200, end_of_turn=True), at=1.0)
    deltas = [e for e in events if e.type in AUDIO_PAIR]
    assert types(deltas) == AUDIO_PAIR * 2
    assert [e.delta for e in deltas if e.type == AUDIO_PAIR[1]] == ["", "Hi"]


def test_an_empty_segment_opens_the_response_and_its_output_follows_with_real_timing() -> None:
    h = Harness()
    opened = h.step(h.unit(0.0), Speak(), at=1.0, started=1.0)
    assert types(opened) == RESPONSE_HEAD  # response.created etc., then nothing until there is output
    assert only(opened, "response.created").response_request_metrics.ttfp_ms is None  # not observed yet
    later = h.step(h.unit(1.0), speak("Hello.", 500, end_of_turn=True), at=1.4)
    assert types(later) == AUDIO_PAIR + AUDIO_TAIL and "response.speak" not in types(later)
    audio = only(later, "response.output_audio.delta")
    assert audio.response_request_metrics.ttfp_ms == pytest.approx(400.0)  # from the request at 1.0 s


def test_audio_deltas_carry_the_audio_and_cumulative_audio_text_marks() -> None:
    h = Harness()
    events = h.step(h.unit(), speak("Hello ", 1000), speak("world.", 500, end_of_turn=True), at=1.0)
    first, second = [e for e in events if e.type == "response.output_audio.delta"]
    assert first.sample_rate_hz == OUT_RATE
    assert first.audio is not None and len(first.audio.decode()) == OUT_RATE  # samples, not base64 yet
    rendered = first.model_dump()["delta"]  # base64 where a JSON socket renders it
    assert len(decode_base64_audio(rendered, "pcm16")) == OUT_RATE
    assert decode_base64_audio(rendered, "pcm16")[0] == pytest.approx(0.1, abs=1e-4)
    assert first.metadata.audio_duration_ms == pytest.approx(1000.0)
    assert second.metadata.audio_duration_ms == pytest.approx(1500.0)
    assert [(m.text_chars, m.audio_end_ms) for m in first.metadata.audio_text_marks] == [(6, 1000.0)]
    assert [(m.text_chars, m.audio_end_ms) for m in second.metadata.audio_text_marks] == [(12, 1500.0)]
    assert (first.metadata.end_of_turn, second.metadata.end_of_turn) == (False, True)


def test_response_done_reports_completed_stop_with_what_was_generated() -> None:
    h = Harness()
    events = h.step(h.unit(), speak("Hello ", 1000), speak("world.", 500, end_of_turn=True), at=1.0)
    assert only(events, "response.output_audio_transcript.done").transcript == "Hello world."
    done = only(events, "response.done").response
    assert (done.status, done.status_details) == ("completed", None)  # OpenAI's: no details
    [item] = done.output
    assert (item.role, item.status, item.content[0].transcript) == ("assistant", "completed", "Hello world.")
    assert h.engine.active_response_id is None


def test_text_only_sessions_use_output_text_events() -> None:
    h = Harness()
    h.send("session.update", session={"modalities": ["text"]})
    events = h.step(h.unit(), speak("Hello ", 1000), speak("world.", 500, end_of_turn=True), at=1.0)
    assert types(events) == [
        *RESPONSE_HEAD,
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.done",
    ]
    assert only(events, "response.content_part.added").part.type == "text"
    assert only(events, "response.output_text.done").text == "Hello world."
    assert only(events, "response.done").response.output_modalities == ["text"]


def test_each_response_gets_a_new_id_and_item() -> None:
    h = Harness()
    a = h.step(h.unit(0.0), speak("One", 100, end_of_turn=True), at=1.0)
    b = h.step(h.unit(1.0), speak("Two", 100, end_of_turn=True), at=2.0)
    assert only(a, "response.created").response.id != only(b, "response.created").response.id
    assert only(a, "conversation.item.added").item.id != only(b, "conversation.item.added").item.id
    assert only(b, "conversation.item.added").previous_item_id == only(a, "conversation.item.added").item.id


# --- listening --------------------------------------------------------------------------------------


def test_one_response_listen_per_unit_in_which_the_model_listened() -> None:
    h = Harness()
    events: list[Any] = []
    for k in range(3):
        events += h.step(h.unit(float(k)), Listen(), at=k + 0.5)
    assert types(events) == ["response.listen"] * 3
    for event in events:
        assert event.response_id is None
        assert event.response.id is None
        assert event.response.status == "listening"
        assert (event.response.metadata.reason, event.response.metadata.model_listen) == (
            "model_listen",
            True,
        )


@pytest.mark.parametrize(
    ("reason", "model_listen"),
    [("model_listen", True), ("silence_or_noise", False), ("buffering", False)],
)
def test_response_listen_states_why_the_model_listened(reason: Any, model_listen: bool) -> None:
    h = Harness()
    [event] = h.step(h.unit(), Listen(reason), at=0.5)
    assert (event.response.metadata.reason, event.response.metadata.model_listen) == (reason, model_listen)


def test_a_listen_that_ends_a_response_carries_its_id_and_is_followed_by_response_done() -> None:
    h = Harness()
    response_id = h.open_response()
    events = h.step(h.unit(1.0), Listen(), at=2.0)
    assert types(events) == ["response.listen", *AUDIO_TAIL]
    assert events[0].response_id == events[0].response.id == response_id
    done = events[-1].response
    assert (done.id, done.status, done.status_details) == (response_id, "completed", None)
    # the next listen acknowledges a unit again, without a response
    [after] = h.step(h.unit(2.0), Listen(), at=3.0)
    assert after.response_id is None


def test_every_decision_names_the_end_of_its_unit_on_the_input_media_clock() -> None:
    h = Harness()
    [first] = h.step(h.unit(0.0), Listen(), at=0.5)
    second = h.unit(1.0)
    late = h.step(second, speak("Hi", 500), at=5.0)  # a late step still names its own unit
    assert first.unit_end_ms == 1000.0
    assert only(late, "response.created").unit_end_ms == 2000.0
    assert only(late, "response.output_audio.delta").unit_end_ms == 2000.0
    [third] = h.step(h.unit(2.0), Listen(), at=6.0)[:1]
    assert third.unit_end_ms == 3000.0


def test_a_unit_in_which_the_model_speaks_sends_no_listen() -> None:
    h = Harness()
    events = h.step(h.unit(), speak("Hi", 500), at=1.0)
    assert "response.listen" not in types(events)


# --- interruptions and the fence --------------------------------------------------------------------


@pytest.mark.parametrize(("type_", "fields", "reason"), INTERRUPTS)
def test_an_interrupt_cancels_the_active_response_with_its_reason(
    type_: str, fields: dict[str, Any], reason: str
) -> None:
    h = Harness()
    response_id = h.open_response()
    events = h.send(type_, 1.5, **fields).events
    assert types(events) == AUDIO_TAIL
    done = events[-1].response
    assert (done.id, done.status, done.status_details.reason) == (response_id, "cancelled", reason)
    assert done.output[0].status == "incomplete"
    assert h.engine.active_response_id is None


@pytest.mark.parametrize(("type_", "fields", "reason"), INTERRUPTS)
def test_an_interrupt_advances_the_epoch_and_drops_decisions_for_older_units(
    type_: str, fields: dict[str, Any], reason: str
) -> None:
    h = Harness()
    h.open_response()
    in_flight = h.unit(1.0)
    epoch = h.engine.fence.epoch
    h.send(type_, 1.5, **fields)
    assert h.engine.fence.epoch == epoch + 1
    assert h.engine.on_decision(in_flight, speak("stale", 1000), 2.0).events == []
    assert h.engine.on_decision(in_flight, Listen(), 2.0).events == []
    assert h.engine.active_response_id is None


@pytest.mark.parametrize(("type_", "fields", "reason"), [i for i in INTERRUPTS if i[0] != "response.cancel"])
def test_an_interrupt_without_a_response_still_makes_units_in_flight_stale(
    type_: str, fields: dict[str, Any], reason: str
) -> None:
    h = Harness()
    in_flight = h.unit()
    assert h.send(type_, 0.5, **fields).events == []
    assert h.engine.on_decision(in_flight, speak("stale", 500), 1.0).events == []


def test_the_session_continues_after_an_interrupt() -> None:
    h = Harness()
    first = h.open_response()
    h.send("barge_in", 1.5)
    events = h.step(h.unit(2.0), speak("Again", 300, end_of_turn=True), at=3.0)
    assert types(events) == RESPONSE_HEAD + AUDIO_PAIR + AUDIO_TAIL
    assert only(events, "response.created").response.id != first
    assert only(events, "response.done").response.status == "completed"


def test_response_cancel_with_nothing_active_is_response_cancel_not_active() -> None:
    h = Harness()
    [error] = h.send("response.cancel", event_id="evt_9").events
    assert (error.error.code, error.error.event_id) == (ErrorCode.RESPONSE_CANCEL_NOT_ACTIVE, "evt_9")
    # OpenAI's code and message: Pipecat tolerates the code, LiveKit messages starting "Cancellation failed".
    assert error.error.message.startswith("Cancellation failed")
    assert types(h.send("session.heartbeat").events) == ["session.heartbeat_ack"]
    assert types(h.step(h.unit(), speak("Hi", 100), at=1.0))[0] == "response.created"


def test_response_cancel_of_another_response_is_response_cancel_not_active_and_keeps_the_active_one() -> None:
    h = Harness()
    response_id = h.open_response()
    epoch = h.engine.fence.epoch
    [error] = h.send("response.cancel", response_id="resp_other").events
    assert (error.error.code, error.error.param) == (ErrorCode.RESPONSE_CANCEL_NOT_ACTIVE, "response_id")
    assert (h.engine.active_response_id, h.engine.fence.epoch) == (response_id, epoch)
    [done] = [
        e for e in h.send("response.cancel", response_id=response_id).events if e.type == "response.done"
    ]
    assert done.response.status == "cancelled"


def test_speech_while_a_response_is_active_barges_in_under_barge_in_on_speech() -> None:
    h = Harness()
    response_id = h.open_response()
    step = h.append(1000, 1.5, amplitude=0.2, is_speech=True)
    assert types(step.events) == AUDIO_TAIL
    assert step.events[-1].response.status_details.reason == "barge_in"
    assert step.events[-1].response.id == response_id
    [unit] = step.units  # the speech that barged in belongs to the new epoch
    assert unit.fence == h.engine.fence
    assert types(h.step(unit, speak("Yes?", 200), at=2.0))[0] == "response.created"


def test_speech_under_listen_only_does_not_barge_in_but_force_barge_in_does() -> None:
    h = Harness()
    h.send("session.update", session={"overlap_policy": "listen_only"})
    response_id = h.open_response()
    assert h.append(200, 1.2, amplitude=0.2, is_speech=True).events == []
    assert h.engine.active_response_id == response_id
    events = h.append(200, 1.4, force_barge_in=True).events
    assert events[-1].response.status_details.reason == "barge_in"


def test_audio_without_speech_does_not_barge_in() -> None:
    h = Harness()
    response_id = h.open_response()
    assert h.append(1000, 1.5).events == []
    assert h.engine.active_response_id == response_id


# --- silence continuation ---------------------------------------------------------------------------


def _continue_reply(h: Harness, now: float) -> Step:
    """A tick at `now`; the model keeps speaking on every continuation unit it yields."""
    step = h.engine.tick(now)
    for unit in step.units:
        h.step(unit, speak("more ", 1000), at=now)
    return step


def test_tick_steps_a_silence_unit_per_chunk_period_while_a_response_is_active() -> None:
    h = Harness()
    h.open_response(now=1.0)
    assert h.engine.tick(1.5).units == []  # less than a period since the last step finished
    [unit] = h.engine.tick(2.0).units
    assert unit.continuation
    assert not unit.final
    assert len(unit.samples) == IN_RATE
    assert not unit.samples.any()
    assert unit.start_ms == unit.end_ms == 1000.0  # not on the client's media clock
    assert unit.fence == h.engine.fence
    assert h.engine.tick(5.0).units == []  # the continuation unit is still being stepped
    h.step(unit, speak("more ", 1000), at=2.2)
    assert h.engine.tick(3.1).units == []
    assert len(h.engine.tick(3.2).units) == 1


def test_continuation_follows_the_chunk_period() -> None:
    h = Harness(chunk_period_ms=200)
    h.step(h.unit(0.0, ms=200), speak("Hi ", 200), at=1.0)
    assert h.engine.tick(1.15).units == []
    [unit] = h.engine.tick(1.25).units
    assert len(unit.samples) == 200 * IN_RATE // 1000


def test_next_tick_at_is_when_a_tick_first_has_work() -> None:
    """The shared ticker visits the session then: before it, ticks do nothing; at it, one does."""
    h = Harness()
    h.step(h.unit(), Listen(), at=1.0)
    idle_due = h.engine.next_tick_at()  # listening: only the idle timeout
    assert h.engine.tick(idle_due - 0.01) == Step()
    h.open_response(now=1.0)
    due = h.engine.next_tick_at()  # a reply: its continuation, one period after the last unit
    assert due < idle_due
    assert h.engine.tick(due - 0.01).units == []
    assert len(h.engine.tick(due).units) == 1
    h.engine.close("client_close", due)
    assert h.engine.next_tick_at() == math.inf


def test_no_continuation_without_an_active_response() -> None:
    h = Harness()
    h.step(h.unit(), Listen(), at=1.0)
    assert h.engine.tick(5.0) == Step()


def test_continuation_is_bounded_then_response_listen_continuation_limit_ends_the_response() -> None:
    h = Harness()
    response_id = h.open_response(now=1.0)
    limit = h.engine.config.continuation_limit
    assert limit == 8
    for k in range(limit):
        assert len(_continue_reply(h, 2.0 + k).units) == 1
    step = h.engine.tick(2.0 + limit)
    assert step.units == []
    assert types(step.events) == ["response.listen", *AUDIO_TAIL]
    listen = step.events[0]
    assert listen.response_id == response_id
    assert (listen.response.metadata.reason, listen.response.metadata.model_listen) == (
        "continuation_limit",
        False,
    )
    done = step.events[-1].response
    assert done.id == response_id
    assert done.status_details.reason == "continuation_limit"
    assert h.engine.active_response_id is None
    assert h.engine.tick(20.0) == Step()


def test_real_input_resets_the_continuation_count() -> None:
    h = Harness(continuation_limit=3)
    h.open_response(now=1.0)
    for k in range(2):
        assert len(_continue_reply(h, 2.0 + k).units) == 1
    h.step(h.unit(3.5), speak("still ", 1000), at=4.0)  # the client's audio resumes
    units = [len(_continue_reply(h, 5.0 + k).units) for k in range(3)]
    assert units == [1, 1, 1]
    assert types(h.engine.tick(8.0).events)[0] == "response.listen"


def test_a_new_response_starts_with_a_fresh_continuation_count() -> None:
    h = Harness(continuation_limit=2)
    h.open_response(now=1.0)
    _continue_reply(h, 2.0)
    _continue_reply(h, 3.0)
    h.engine.tick(4.0)  # limit reached: the response ends
    h.open_response(now=5.0)
    assert [len(_continue_reply(h, 6.0 + k).units) for k in range(2)] == [1, 1]


# --- model failures ---------------------------------------------------------------------------------


def test_a_model_step_failure_fails_only_the_active_response() -> None:
    """OpenAI reports a failure within a response on its `response.done` (`status_details.error`), not as
    an `error` event, which Pipecat takes as the end of the connection."""
    h = Harness()
    response_id = h.open_response(now=1.0)
    failing = h.unit(1.0)
    h.engine.request_started(failing, 2.0)
    events = h.engine.on_step_failed(failing, "boom", 2.1).events
    h.engine.step_finished(failing, 2.1)
    assert types(events) == AUDIO_TAIL
    done = events[-1].response
    assert (done.id, done.status, done.status_details.type) == (response_id, "failed", "failed")
    error = done.status_details.error
    assert (error.code, error.type, error.retryable) == (ErrorCode.MODEL_STEP_FAILED, "server_error", True)
    assert "boom" in error.message
    assert not h.engine.closed
    # the session keeps working for the next unit
    after = h.step(h.unit(2.0), speak("Recovered", 300, end_of_turn=True), at=3.0)
    assert types(after) == RESPONSE_HEAD + AUDIO_PAIR + AUDIO_TAIL
    assert only(after, "response.done").response.status == "completed"


def test_a_model_step_failure_without_a_response_is_reported_on_an_empty_failed_response() -> None:
    """Never a top-level `error`, which Pipecat takes as the end of its connection: OpenAI reports a
    server failure on a `response.done` whose status is `failed`."""
    h = Harness()
    unit = h.unit()
    events = h.engine.on_step_failed(unit, "boom", 1.0).events
    assert types(events) == ["response.created", "response.done"]
    done = events[-1].response
    assert done.status == "failed" and done.output == []
    assert done.status_details.error.code == ErrorCode.MODEL_STEP_FAILED
    assert types(h.step(h.unit(1.0), Listen(), at=2.0)) == ["response.listen"]


def test_a_failure_before_a_pending_requests_unit_answers_that_request() -> None:
    """Found by the engine fuzzer (tests/fuzz/test_engine_fuzz.py): clip, commit, `response.create`, then
    the model fails on an earlier unit of the clip. Its empty failed `response.done` was not the request's,
    which stayed pending behind it, so the client, which reads that done as its answer, had its next
    `response.create` refused (`conversation_already_has_active_response`) with no response active."""
    h = Harness()
    first, _ = h.append(2000).units
    assert len(h.send("input_audio_buffer.commit", 0.1).units) == 1  # the final unit, queued
    assert h.send("response.create", 0.1, response={"metadata": {"turn": "1"}}).events == []  # pending
    failed = h.engine.on_step_failed(first, "boom", 1.0).events
    assert types(failed) == ["response.created", "response.done"]
    assert failed[-1].response.status == "failed" and failed[-1].response.metadata == {"turn": "1"}
    again = h.send("response.create", 1.1).events
    assert ErrorCode.CONVERSATION_ALREADY_HAS_ACTIVE_RESPONSE not in error_codes(again)


@pytest.mark.parametrize("kind", [{}, [], ["message"], 5, None])
def test_an_item_whose_type_is_not_a_name_is_refused_coded(kind: Any) -> None:
    """Found by the engine fuzzer (tests/fuzz/test_engine_fuzz.py): `conversation.item.create` with
    `item.type: {}` raised TypeError (unhashable) out of the engine, which ended the session with
    `internal_error`."""
    h = Harness()
    [error] = h.send("conversation.item.create", item={"type": kind, "role": "user"}).events
    assert error.error.code == ErrorCode.INVALID_VALUE and error.error.param == "item.type"
    assert h.engine.history == []


def test_a_failure_of_a_stale_unit_is_dropped() -> None:
    h = Harness()
    stale = h.unit()
    h.send("barge_in", 0.5)
    assert h.engine.on_step_failed(stale, "boom", 1.0).events == []


# --- timeouts and closing ---------------------------------------------------------------------------


def test_idle_timeout_via_tick_reports_idle_timeout_then_session_closed() -> None:
    h = Harness()
    assert h.engine.tick(300.0) == Step()
    step = h.engine.tick(300.5)
    assert types(step.events) == ["error", "session.closed"]
    assert step.events[0].error.code == ErrorCode.IDLE_TIMEOUT
    assert (step.events[1].session_id, step.events[1].reason) == (SESSION_ID, "idle_timeout")
    assert step.close_reason == "idle_timeout"
    assert h.engine.closed
    assert h.engine.tick(1000.0) == Step()


def test_any_client_event_resets_the_idle_clock_and_the_session_sets_its_own_timeout() -> None:
    h = Harness()
    h.send("session.update", 0.0, session={"idle_timeout_s": 5})
    h.send("session.heartbeat", 4.0)
    assert h.engine.tick(8.5) == Step()
    assert types(h.engine.tick(9.5).events) == ["error", "session.closed"]


def test_a_client_cannot_lengthen_the_idle_timeout_past_the_servers() -> None:
    """Found by the engine fuzzer (tests/fuzz/test_engine_fuzz.py): `idle_timeout_s: 1e300` was taken, and
    a silent client held its slot for ever. A client may shorten the deadline, never lengthen it."""
    h = Harness(idle_timeout_s=30.0)
    [error] = h.send("session.update", 0.0, session={"idle_timeout_s": 1e300, "voice": "verse"}).events
    assert (error.error.code, error.error.param) == (ErrorCode.INVALID_VALUE, "session.idle_timeout_s")
    assert (h.engine.settings.idle_timeout_s, h.engine.settings.voice) == (30.0, None)  # nothing changed
    [updated] = h.send("session.update", 0.0, session={"idle_timeout_s": 30.0}).events  # the bound itself
    assert updated.session.idle_timeout_s == 30.0
    assert types(h.engine.tick(30.5).events) == ["error", "session.closed"]


def test_idle_timeout_cancels_the_active_response_before_closing() -> None:
    h = Harness(idle_timeout_s=10.0)
    h.open_response(now=1.0)
    events = h.engine.tick(20.0).events
    assert types(events) == ["error", *AUDIO_TAIL, "session.closed"]
    assert events[-2].response.status == "cancelled"


def test_session_close_cancels_the_active_response_and_says_session_closed() -> None:
    h = Harness()
    h.open_response()
    in_flight = h.unit(1.0)
    step = h.send("session.close", 1.5, reason="bye")
    assert types(step.events) == [*AUDIO_TAIL, "session.closed"]
    assert step.events[-2].response.status_details.reason == "client_cancelled"
    assert step.events[-1].reason == "bye"
    assert step.close_reason == "bye"
    assert h.engine.on_decision(in_flight, speak("late", 100), 2.0).events == []


def test_session_close_without_a_reason_says_client_close() -> None:
    step = Harness().send("session.close")
    assert [(e.type, e.reason) for e in step.events] == [("session.closed", "client_close")]


# --- conversation items -----------------------------------------------------------------------------


def test_conversation_items_can_be_created_retrieved_and_deleted() -> None:
    h = Harness()
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    added, done = h.send("conversation.item.create", item=item).events
    assert (added.type, done.type) == ("conversation.item.added", "conversation.item.done")
    item_id = added.item.id
    [retrieved] = h.send("conversation.item.retrieve", item_id=item_id).events
    assert retrieved.item.content[0].text == "hi"
    assert types(h.send("conversation.item.delete", item_id=item_id).events) == ["conversation.item.deleted"]
    [error] = h.send("conversation.item.retrieve", item_id=item_id).events
    assert error.error.code == ErrorCode.ITEM_RETRIEVE_INVALID_ITEM_ID  # OpenAI's: Pipecat's retrieval fails
    # An item id already in use: OpenAI's code, which LiveKit's chat-context sync takes as "already there".
    [kept] = h.send("conversation.item.create", item=item).events[:1]
    again = {**item, "id": kept.item.id}
    [duplicate] = h.send("conversation.item.create", item=again).events
    assert duplicate.error.code == ErrorCode.ITEM_CREATE_DUPLICATE_ITEM_ID
    assert duplicate.error.param == "item.id"


def test_a_client_s_items_are_bounded_in_number_and_size_and_a_deleted_one_frees_its_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from duplexkit.engine import conversation

    monkeypatch.setattr(conversation, "MAX_CLIENT_ITEMS", 3)
    monkeypatch.setattr(conversation, "MAX_CLIENT_ITEM_BYTES", 600)
    h = Harness()

    def create(text: str) -> Any:
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        return h.send("conversation.item.create", item=item).events

    ids = [create("hi")[0].item.id for _ in range(3)]
    [refused] = create("one too many")
    assert refused.error.code == ErrorCode.CONVERSATION_TOO_LARGE and refused.error.param == "item"
    assert sum(1 for _ in h.engine._conversation) == 3  # the refused item was not kept
    assert types(h.send("conversation.item.delete", item_id=ids[0]).events) == ["conversation.item.deleted"]
    assert types(create("hi")) == ["conversation.item.added", "conversation.item.done"]
    [too_big] = create("x" * 600)  # a place is free, but not the bytes
    assert too_big.error.code == ErrorCode.CONVERSATION_TOO_LARGE
    assert types(h.send("session.heartbeat").events) == ["session.heartbeat_ack"]  # the session goes on


def test_an_item_refused_for_its_content_takes_no_share_of_the_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from duplexkit.engine import conversation

    monkeypatch.setattr(conversation, "MAX_CLIENT_ITEMS", 1)
    h = Harness()
    output = {"type": "function_call_output", "call_id": "nobody_asked", "output": "{}"}
    assert error_codes(h.send("conversation.item.create", item=output).events) == ["unknown_function_call"]
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    assert types(h.send("conversation.item.create", item=item).events)[0] == "conversation.item.added"


def test_an_unknown_item_is_an_error_that_leaves_the_session_running() -> None:
    h = Harness()
    assert error_codes(h.send("conversation.item.delete", item_id="nope").events) == ["unknown_item"]
    assert types(h.send("session.heartbeat").events) == ["session.heartbeat_ack"]


def test_audio_deltas_are_base64_pcm16_by_default() -> None:
    h = Harness()
    events = h.step(h.unit(), speak("Hi", 10), at=1.0)
    raw = base64.b64decode(only(events, "response.output_audio.delta").model_dump()["delta"])
    assert len(raw) == 2 * 240


# --- input transcription ----------------------------------------------------------------------------


def test_what_the_model_heard_becomes_input_transcription_events_on_a_new_user_item() -> None:
    h = Harness()
    unit = h.unit(0.0)
    events = h.step(unit, Transcribed("turn on"), Transcribed(" the lights"), Listen(), at=1.0)
    deltas = [e for e in events if e.type == "conversation.item.input_audio_transcription.delta"]
    assert [d.delta for d in deltas] == ["turn on", " the lights"]
    assert deltas[0].item_id == deltas[1].item_id and not h.engine.history  # no item until it completes
    events = h.step(h.unit(1.0), Transcribed("turn on the lights", final=True, audio_seconds=1.25), at=2.0)
    assert types(events)[:3] == [
        "conversation.item.added",
        "conversation.item.done",
        "conversation.item.input_audio_transcription.completed",
    ]
    completed = events[2]
    assert completed.item_id == deltas[0].item_id and completed.transcript == "turn on the lights"
    assert completed.usage.seconds == 1.25 and completed.content_index == 0
    [item] = h.engine.history
    assert item.id == completed.item_id and item.role == "user"
    assert item.content[0].type == "input_audio" and item.content[0].transcript == "turn on the lights"
    later = h.step(h.unit(2.0), Transcribed("next", final=True), at=3.0)
    assert only(later, "conversation.item.input_audio_transcription.completed").item_id != item.id


def test_a_transcript_completes_the_committed_user_item_instead_of_adding_one() -> None:
    h = Harness()
    h.append(500)
    committed = only(h.send("input_audio_buffer.commit").events, "input_audio_buffer.committed")
    events = h.step(h.unit(1.0), Transcribed("hello", final=True, audio_seconds=0.5), at=2.0)
    assert types(events) == ["conversation.item.input_audio_transcription.completed"]
    assert events[0].item_id == committed.item_id
    assert h.engine.history[-1].content[0].transcript == "hello"


def _said(events: list[Any]) -> tuple[str, str | None]:
    """The user item a completed transcript added, and the item it says goes before it."""
    added = only(events, "conversation.item.added")
    assert added.item.role == "user" and only(events, "conversation.item.done").previous_item_id == (
        added.previous_item_id
    )
    return added.item.id, added.previous_item_id


def test_a_transcript_completing_after_the_reply_opened_puts_the_user_item_before_that_reply() -> None:
    h = Harness()
    events = h.step(h.unit(0.0), Transcribed("hi", final=True, speech_end_ms=600.0), Listen(), at=1.0)
    first, previous = _said(events)
    assert previous is None
    answer = h.step(h.unit(1.0), speak("Hello.", 500, end_of_turn=True), at=2.0)
    answer_item = only(answer, "conversation.item.added").item.id
    h.step(h.unit(2.0), Transcribed("how"), Listen(), at=3.0)  # the user speaks until 2.8 s
    opened = h.step(h.unit(3.0), speak(), at=4.0)  # the model answers at the end of the speech
    reply_item = only(opened, "conversation.item.added").item.id
    late = h.step(h.unit(4.0), Transcribed("how are you", final=True, speech_end_ms=2800.0), at=5.0)
    second, previous = _said(late)
    assert previous == answer_item  # not the reply it came after
    assert [item.id for item in h.engine.history] == [first, answer_item, second, reply_item]
    assert only(late, "conversation.item.input_audio_transcription.completed").item_id == second


def test_a_reply_opened_before_the_speech_ended_stays_before_its_user_item() -> None:
    h = Harness()
    opened = h.step(h.unit(0.0), speak("Go on", 500), at=1.0)  # the model talks while the user does
    reply_item = only(opened, "conversation.item.added").item.id
    events = h.step(h.unit(1.0), Transcribed("sure", final=True, speech_end_ms=1500.0), at=2.0)
    user_item, previous = _said(events)
    assert previous == reply_item
    assert [item.id for item in h.engine.history] == [reply_item, user_item]


def test_a_transcript_completing_after_the_reply_fills_the_committed_item_where_it_was_committed() -> None:
    h = Harness()
    h.append(500)
    committed = only(h.send("input_audio_buffer.commit").events, "input_audio_buffer.committed")
    opened = h.step(h.unit(1.0), speak("Hello", 500), at=1.5)
    reply_item = only(opened, "conversation.item.added")
    assert reply_item.previous_item_id == committed.item_id
    events = h.step(h.unit(2.0), Transcribed("hello", final=True, speech_end_ms=450.0), at=2.5)
    assert types(events) == ["conversation.item.input_audio_transcription.completed"]
    assert events[0].item_id == committed.item_id
    assert [item.id for item in h.engine.history] == [committed.item_id, reply_item.item.id]
    assert h.engine.history[0].content[0].transcript == "hello"
