"""Server VAD in the engine: speech start/stop events, barge-in on speech start, commit on speech stop."""

from __future__ import annotations

import base64
import json

import numpy as np

from duplexkit.engine import EngineConfig, EngineSession, Speak, Transcribed
from duplexkit.protocol import server_events as se
from duplexkit.protocol.wire import parse_client_event

VAD = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500}


def _session(vad: dict[str, object] | None = None) -> EngineSession:
    engine = EngineSession("sess_vad", EngineConfig(model="m", server_vad=True))
    engine.start(0.0)
    update = {"type": "session.update", "session": {"turn_detection": vad or VAD}}
    step = engine.handle(parse_client_event(json.dumps(update)), 0.0)
    assert [type(e) for e in step.events] == [se.SessionUpdated]
    return engine


def _speaking(engine: EngineSession) -> str:
    """Open a response by letting the model speak on a unit; return its id."""
    pcm = np.zeros(16_000, dtype="<i2").tobytes()
    append = {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}
    [unit] = engine.handle(parse_client_event(json.dumps(append)), 0.1).units
    engine.request_started(unit, 0.1)
    audio = np.full(24_000, 0.1, dtype=np.float32)
    engine.on_decision(unit, Speak(tokens=("Hello ",), audio=audio), 0.3)
    assert engine.active_response_id is not None
    return engine.active_response_id


def test_speech_start_and_stop_are_announced_with_their_media_times_and_one_item() -> None:
    engine = _session()
    started = engine.speech_started(1234.4, 1.0).events
    stopped = engine.speech_stopped(2500.0, 2.0).events
    assert isinstance(started[0], se.InputAudioBufferSpeechStarted) and started[0].audio_start_ms == 1234
    assert isinstance(stopped[0], se.InputAudioBufferSpeechStopped) and stopped[0].audio_end_ms == 2500
    assert started[0].item_id == stopped[0].item_id


def test_speech_stop_commits_the_turn_when_create_response_is_on() -> None:
    step = _session().speech_stopped(2500.0, 2.0)
    assert [type(e) for e in step.events][-3:] == [
        se.InputAudioBufferCommitted,
        se.ConversationItemAdded,
        se.ConversationItemDone,
    ]
    assert [u.final for u in step.units] == [True]


def test_speech_stop_only_announces_when_create_response_is_off() -> None:
    step = _session({**VAD, "create_response": False}).speech_stopped(2500.0, 2.0)
    assert [type(e) for e in step.events] == [se.InputAudioBufferSpeechStopped]
    assert step.units == []


def test_speech_start_during_a_reply_barges_in_with_interrupt_response() -> None:
    engine = _session()
    response_id = _speaking(engine)
    epoch = engine.fence.epoch
    events = engine.speech_started(1500.0, 1.0).events
    done = [e for e in events if isinstance(e, se.ResponseDone)]
    assert len(done) == 1 and done[0].response.id == response_id
    assert done[0].response.status == "cancelled"
    assert (
        done[0].response.status_details is not None
        and done[0].response.status_details.reason == "turn_detected"
    )
    assert engine.fence.epoch == epoch + 1 and engine.active_response_id is None


def test_speech_start_does_not_interrupt_when_interrupt_response_is_off() -> None:
    engine = _session({**VAD, "interrupt_response": False})
    response_id = _speaking(engine)
    events = engine.speech_started(1500.0, 1.0).events
    assert [type(e) for e in events] == [se.InputAudioBufferSpeechStarted]
    assert engine.active_response_id == response_id


def test_a_failed_detector_turns_server_vad_off_and_says_so() -> None:
    engine = _session()
    events = engine.vad_failed("RuntimeError: boom").events
    assert isinstance(events[0], se.Error) and events[0].error.code == "internal_error"
    assert isinstance(events[1], se.SessionUpdated) and events[1].session.turn_detection is None
    assert engine.speech_started(10.0, 1.0).events == []


def test_server_vad_is_refused_where_the_server_has_no_detector() -> None:
    engine = EngineSession("sess_novad", EngineConfig(model="m", server_vad=False))
    engine.start(0.0)
    update = {"type": "session.update", "session": {"turn_detection": VAD}}
    [error] = engine.handle(parse_client_event(json.dumps(update)), 0.0).events
    assert isinstance(error, se.Error) and error.error.code == "invalid_value"
    assert error.error.param == "session.turn_detection"


def _heard(engine: EngineSession, text: str, speech_end_ms: float) -> list[se.ServerEventBase]:
    """The model's recogniser finishes the utterance (a step of a fresh unit)."""
    pcm = np.zeros(16_000, dtype="<i2").tobytes()
    append = {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}
    [unit] = engine.handle(parse_client_event(json.dumps(append)), 3.0).units
    return engine.on_decision(unit, Transcribed(text, final=True, speech_end_ms=speech_end_ms), 3.1).events


def test_the_committed_turn_is_the_speech_item_and_its_late_transcript_stays_before_the_reply() -> None:
    engine = _session()
    [started] = engine.speech_started(200.0, 0.5).events
    committed = engine.speech_stopped(900.0, 1.0).events[-3]
    assert isinstance(committed, se.InputAudioBufferCommitted) and committed.item_id == started.item_id
    _speaking(engine)  # the reply opens before the recogniser is done
    events = _heard(engine, "hello", 900.0)
    assert [type(e) for e in events] == [se.InputAudioTranscriptionCompleted]  # no second user item
    assert events[0].item_id == started.item_id
    assert [item.role for item in engine.history] == ["user", "assistant"]
    assert engine.history[0].id == started.item_id and engine.history[0].content[0].transcript == "hello"


def test_without_create_response_the_transcript_names_the_speech_item_and_adds_it_where_it_ended() -> None:
    engine = _session({**VAD, "create_response": False})
    [started] = engine.speech_started(200.0, 0.5).events
    engine.speech_stopped(900.0, 1.0)
    _speaking(engine)  # the model answers on its own, at the end of a unit past the speech
    events = _heard(engine, "hello", 900.0)
    added = [e for e in events if isinstance(e, se.ConversationItemAdded)]
    assert [e.item.id for e in added] == [started.item_id] and added[0].previous_item_id is None
    assert [(item.id, item.role) for item in engine.history] == [
        (started.item_id, "user"),
        (engine.history[1].id, "assistant"),
    ]


def test_a_reply_the_model_starts_while_the_detector_hears_the_user_waits_for_the_end_of_speech() -> None:
    """Under server VAD the detector ends turns (OpenAI's contract): a reply the model would start at a
    pause inside the question is held while the user is heard speaking, and opens once the detector's
    end of speech has committed the turn, at its final unit; a client never sees a response before
    `speech_stopped` and `committed`."""
    engine = _session()
    pcm = np.zeros(16_000, dtype="<i2").tobytes()
    append = parse_client_event(
        json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()})
    )
    engine.speech_started(100.0, 0.1)
    [pause] = engine.handle(append, 0.2).units
    audio = np.full(2_400, 0.1, dtype=np.float32)
    assert engine.on_decision(pause, Speak(tokens=("Sure ",), audio=audio), 0.3).events == []  # held
    assert engine.step_finished(pause, 0.3).events == []
    stopped = engine.speech_stopped(1000.0, 1.0)
    [final] = stopped.units
    assert [type(e) for e in stopped.events][:2] == [
        se.InputAudioBufferSpeechStopped,
        se.InputAudioBufferCommitted,
    ]
    events = engine.step_finished(final, 1.1).events  # the final unit decides nothing: the held reply opens
    assert isinstance(events[0], se.ResponseCreated) and events[0].unit_end_ms == final.end_ms
    assert [e.delta for e in events if isinstance(e, se.ResponseOutputAudioTranscriptDelta)] == ["Sure "]


def test_output_held_while_the_detector_heard_the_user_goes_out_once_it_is_turned_off() -> None:
    """A client that turns server VAD off mid-speech (or a detector that broke) does not leave the model's
    output held for an end of speech that will never come: it goes out with the next decision."""
    engine = _session()
    pcm = np.zeros(16_000, dtype="<i2").tobytes()
    append = parse_client_event(
        json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()})
    )
    engine.speech_started(100.0, 0.1)
    [first] = engine.handle(append, 0.2).units
    audio = np.full(2_400, 0.1, dtype=np.float32)
    assert engine.on_decision(first, Speak(tokens=("Sure ",), audio=audio), 0.3).events == []  # held
    off = parse_client_event(json.dumps({"type": "session.update", "session": {"turn_detection": None}}))
    engine.handle(off, 0.4)
    [second] = engine.handle(append, 0.5).units
    events = engine.on_decision(second, Speak(tokens=("then.",), audio=audio, end_of_turn=True), 0.6).events
    said = [e.delta for e in events if isinstance(e, se.ResponseOutputAudioTranscriptDelta)]
    assert said == ["Sure ", "then."]
