"""The Media Streams protocol (`server.twilio.protocol`), Sans-I/O: Twilio's messages in, typed events and
Twilio's messages out, no socket."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from duplexkit.protocol import client_events as ce
from duplexkit.protocol.errors import ErrorCode
from duplexkit.server.twilio.protocol import CHUNK_MS, MAX_GAP_MS, MAX_MESSAGE_BYTES, TwilioStream

SID = "MZ42"
START = {
    "event": "start",
    "sequenceNumber": "1",
    "start": {
        "streamSid": SID,
        "callSid": "CA1",
        "accountSid": "AC1",
        "tracks": ["inbound"],
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
        "customParameters": {"instructions": "Be brief.", "turn_detection": "server_vad"},
    },
    "streamSid": SID,
}


def _media(payload: bytes | str, timestamp: int | str) -> str:
    b64 = payload if isinstance(payload, str) else base64.b64encode(payload).decode()
    media = {"track": "inbound", "chunk": "1", "timestamp": str(timestamp), "payload": b64}
    return json.dumps({"event": "media", "streamSid": SID, "media": media})


def _started(**kwargs: Any) -> TwilioStream:
    stream = TwilioStream({"voice": "alloy"}, **kwargs)
    stream.receive(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
    stream.receive(json.dumps(START))
    return stream


def test_start_opens_a_mulaw_session_from_the_defaults_and_the_calls_parameters() -> None:
    stream = TwilioStream({"voice": "alloy", "instructions": "default"})
    out = stream.receive(json.dumps(START))
    [update] = out.events
    assert isinstance(update, ce.SessionUpdate)
    session = update.session
    assert (session.input_audio_format, session.output_audio_format) == ("g711_ulaw", "g711_ulaw")
    assert (session.voice, session.instructions) == ("alloy", "Be brief.")
    assert session.turn_detection is not None and session.turn_detection.type == "server_vad"
    assert session.playback_commit_policy == "ack_only"
    assert stream.call is not None and stream.call.call_sid == "CA1"


def test_media_is_appended_as_is_and_a_gap_on_the_calls_clock_is_filled_with_silence() -> None:
    stream = _started()
    frame = bytes(range(160))
    [first] = stream.receive(_media(frame, 0)).events
    assert isinstance(first, ce.InputAudioBufferAppend) and first.payload.data == frame
    bad = stream.receive(_media("not base64!", 20))
    assert [p.code for p in bad.problems] == [ErrorCode.INVALID_AUDIO] and bad.events == []
    [after] = stream.receive(_media(frame, 40)).events  # the bad frame's 20 ms come back as silence
    assert isinstance(after, ce.InputAudioBufferAppend)
    assert after.payload.data == b"\xff" * 160 + frame


def test_reply_audio_is_sent_in_marked_chunks_within_the_lead_and_each_echo_acks_and_releases_more() -> None:
    stream = _started(lead_ms=2 * CHUNK_MS)
    out = stream.reply_audio("resp_1", b"\x01" * (8 * CHUNK_MS * 5))  # five chunks
    assert [m["event"] for m in out.twilio] == ["media", "mark"] * 2  # two chunks fill the lead
    assert all(m["streamSid"] == SID for m in out.twilio)
    first_mark = out.twilio[1]["mark"]["name"]
    echo = stream.receive(json.dumps({"event": "mark", "streamSid": SID, "mark": {"name": first_mark}}))
    [ack] = echo.events
    assert isinstance(ack, ce.PlaybackAck) and (ack.response_id, ack.played_ms) == ("resp_1", CHUNK_MS)
    assert [m["event"] for m in echo.twilio] == ["media", "mark"]  # one more chunk goes out


def test_a_cancelled_reply_clears_twilio_and_the_echoes_of_cleared_marks_ack_nothing() -> None:
    stream = _started(lead_ms=2 * CHUNK_MS)
    out = stream.reply_audio("resp_1", b"\x01" * (8 * CHUNK_MS * 5))
    names = [m["mark"]["name"] for m in out.twilio if m["event"] == "mark"]
    cleared = stream.reply_ended("resp_1", cancelled=True)
    assert cleared.twilio == [{"event": "clear", "streamSid": SID}]
    for name in names:  # Twilio echoes the marks of the audio it dropped
        echo = stream.receive(json.dumps({"event": "mark", "streamSid": SID, "mark": {"name": name}}))
        assert echo.events == [] and echo.twilio == []
    assert stream.reply_ended("resp_2", cancelled=True).twilio == []  # nothing queued: nothing to clear


def test_unknown_events_and_messages_before_start_are_coded_problems_and_stop_ends() -> None:
    stream = TwilioStream()
    early = stream.receive(_media(b"\xff" * 160, 0))
    assert [p.code for p in early.problems] == [ErrorCode.SESSION_NOT_CONFIGURED] and early.events == []
    stream.receive(json.dumps(START))
    unknown = stream.receive(json.dumps({"event": "bogus", "streamSid": SID}))
    assert [p.code for p in unknown.problems] == [ErrorCode.UNKNOWN_EVENT] and not unknown.fatal
    assert [p.code for p in stream.receive("{not json").problems] == [ErrorCode.INVALID_JSON]
    stream.receive(
        json.dumps({"event": "dtmf", "streamSid": SID, "dtmf": {"track": "inbound_track", "digit": "5"}})
    )
    assert stream.digits == "5"
    assert stream.receive(json.dumps({"event": "stop", "streamSid": SID, "stop": {}})).ended


def test_a_start_that_is_not_mulaw_8khz_is_fatal_with_unsupported_audio_format() -> None:
    start = json.loads(json.dumps(START))
    start["start"]["mediaFormat"]["sampleRate"] = 16000
    out = TwilioStream().receive(json.dumps(start))
    assert out.fatal and [p.code for p in out.problems] == [ErrorCode.UNSUPPORTED_AUDIO_FORMAT]
    assert out.events == []


def test_a_start_without_its_start_object_or_stream_sid_is_fatal() -> None:
    no_sid = {**START, "start": {**START["start"], "streamSid": None}, "streamSid": None}  # type: ignore[dict-item]
    for start in ({"event": "start", "streamSid": SID}, no_sid):
        out = TwilioStream().receive(json.dumps(start))
        assert out.fatal and [p.code for p in out.problems] == [ErrorCode.MISSING_FIELD]


def test_a_second_start_is_dropped_with_a_code_and_the_call_goes_on_as_opened() -> None:
    stream = _started()
    other = {**START, "start": {**START["start"], "streamSid": "MZ99", "callSid": "CA9"}, "streamSid": "MZ99"}
    out = stream.receive(json.dumps(other))
    assert [p.code for p in out.problems] == [ErrorCode.INVALID_VALUE] and not out.fatal
    assert out.events == []  # no second session.update: the session is not re-opened
    assert stream.call is not None and (stream.call.stream_sid, stream.call.call_sid) == (SID, "CA1")
    assert not stream.receive(_media(bytes(160), 0)).problems


@pytest.mark.parametrize("timestamp", ["inf", "-inf", "nan", "1e400", "1e13", "2e7", "2100", "-20", "soon"])
def test_a_timestamp_that_is_no_time_or_opens_a_gap_past_the_maximum_is_refused_and_nothing_moves(
    timestamp: str,
) -> None:
    stream = _started()
    frame = bytes(range(160))
    stream.receive(_media(frame, 0))
    refused = stream.receive(_media(frame, timestamp))
    assert [p.code for p in refused.problems] == [ErrorCode.INVALID_VALUE] and refused.events == []
    assert refused.problems[0].param == "media.timestamp"
    [after] = stream.receive(_media(frame, 20)).events  # the call's clock is where it was
    assert isinstance(after, ce.InputAudioBufferAppend) and after.payload.data == frame


def test_the_longest_gap_allowed_is_filled() -> None:
    stream = _started()
    [first] = stream.receive(_media(b"\x01" * 160, int(MAX_GAP_MS))).events
    assert isinstance(first, ce.InputAudioBufferAppend)
    assert first.payload.data == b"\xff" * int(MAX_GAP_MS * 8) + b"\x01" * 160


def test_json_nested_too_deep_or_a_message_too_large_is_a_coded_problem_not_an_exception() -> None:
    stream = _started()
    deep = stream.receive("[" * 30_000 + "]" * 30_000)
    assert [p.code for p in deep.problems] == [ErrorCode.INVALID_JSON]
    deeper = stream.receive("[" * 100_000 + "]" * 100_000)
    assert [p.code for p in deeper.problems] == [ErrorCode.EVENT_TOO_LARGE]
    surrogate_deep = stream.receive("[" * 500 + '"\\udc00"' + "]" * 500)  # past pydantic-core's parser
    assert [p.code for p in surrogate_deep.problems] == [ErrorCode.INVALID_JSON]
    large = stream.receive(json.dumps({"event": "dtmf", "pad": "x" * MAX_MESSAGE_BYTES}))
    assert [p.code for p in large.problems] == [ErrorCode.EVENT_TOO_LARGE]
    bad_key = stream.receive(json.dumps({"event": "dtmf", "streamSid": SID, "dtmf": {"digit": "9" * 1000}}))
    assert [p.code for p in bad_key.problems] == [ErrorCode.INVALID_VALUE] and stream.digits == ""
    [ok] = stream.receive(_media(b"\x01" * 160, 0)).events  # and the call goes on
    assert isinstance(ok, ce.InputAudioBufferAppend)


def test_the_callers_speech_clears_audio_still_queued_after_its_reply_is_done() -> None:
    stream = _started(lead_ms=2 * CHUNK_MS)
    stream.reply_audio("resp_1", b"\x01" * (8 * CHUNK_MS * 5))
    assert stream.reply_ended("resp_1", cancelled=False).twilio == []  # done, two chunks still queued
    cleared = stream.speech_started()
    assert cleared.twilio == [{"event": "clear", "streamSid": SID}]
    assert stream.reply_audio("resp_2", b"\x01" * (8 * CHUNK_MS)).twilio[0]["event"] == "media"  # none left
    assert stream.speech_started().twilio == [{"event": "clear", "streamSid": SID}]


def test_speech_clears_nothing_with_nothing_queued_or_when_the_call_does_not_barge_in() -> None:
    assert _started().speech_started().twilio == []
    start = json.loads(json.dumps(START))
    listen_only = TwilioStream({"overlap_policy": "listen_only"})
    listen_only.receive(json.dumps(start))
    listen_only.reply_audio("resp_1", b"\x01" * (8 * CHUNK_MS))
    assert listen_only.speech_started().twilio == []
