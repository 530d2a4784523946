"""A stateful fuzzer of the Twilio Media Streams protocol (`server.twilio.protocol.TwilioStream`): a caller's
stream sends random messages (valid, malformed, out of order, oversized, absurd), the session sends reply
audio and ends replies (some cancelled), the caller speaks over them, and a simulated Twilio echoes the
marks it was sent, as Twilio does: in order once played, and all at once after a `clear`.

Invariants, after every rule: nothing but a coded `ProtocolError` comes out of a bad message (and a bad
message yields no event); only a `start` can be fatal; only `media`, `mark` and `clear` go to Twilio, under
the call's `streamSid`; what is queued on Twilio's side stays within the lead (one chunk over at most), the
marks awaiting an echo with it; the input clock is the audio appended, and no message moves it by more
than its own audio and the gap bound; a `playback.ack` comes only for a mark sent since the last `clear`,
never past the audio of its reply.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from duplexkit.protocol import client_events as ce
from duplexkit.server.twilio.protocol import (
    BYTES_PER_MS,
    CHUNK_MS,
    LEAD_MS,
    MAX_DIGITS,
    MAX_GAP_MS,
    Output,
    TwilioStream,
)
from tests.fuzz.contract import CODES
from tests.fuzz.strategies import absurd_json, examples, junk_frames

SID = "MZfuzz"
FORMAT = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
SETTINGS = settings(
    max_examples=examples(60),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _start(**changes: Any) -> dict[str, Any]:
    start = {"streamSid": SID, "callSid": "CA1", "accountSid": "AC1", "mediaFormat": FORMAT}
    return {"event": "start", "streamSid": SID, "start": start | changes}


_STARTS = st.sampled_from(
    [
        _start(),
        _start(),
        _start(customParameters={"turn_detection": "server_vad", "temperature": "0.5"}),
        _start(customParameters={"max_tokens": "-1"}),
        _start(customParameters={"temperature": "nan"}),
        _start(customParameters={"turn_detection": "chaos"}),
        _start(mediaFormat={"encoding": "audio/x-alaw", "sampleRate": 8000}),
        _start(mediaFormat="mulaw"),
        _start(streamSid=""),
        {"event": "start"},
        {"event": "start", "start": []},
    ]
)
_TIMESTAMPS = st.sampled_from(
    [None, "0", "20", "1000", "2999", "5000", "-20", "nan", "inf", "1e400", "abc", 10**30, [], 40.5, True]
)


class TwilioFuzz(RuleBasedStateMachine):
    messages = 0
    """Client messages delivered by every run so far (the long run's figure)."""

    def __init__(self) -> None:
        super().__init__()
        self.stream = TwilioStream({"voice": "alloy"})
        self.appended_ms = 0.0
        self.pending: list[str] = []
        """Marks Twilio holds, in the order it was sent them."""
        self.cleared: list[str] = []
        """Marks a `clear` dropped, which Twilio echoes anyway."""
        self.live: dict[str, tuple[str, float]] = {}
        """Marks sent since the last clear: name → (reply, where its chunk ends)."""
        self.reply_ms: dict[str, float] = {}
        self.replies = 0
        self.ended = False

    def take(self, out: Output, *, from_caller: bool, kind: Any = None) -> None:
        for problem in out.problems:
            assert problem.code in CODES
        if from_caller and out.problems:
            assert not out.events, "a message with a problem still became an event"
        if out.fatal:
            assert kind == "start", f"a {kind!r} message was fatal"
        for event in out.events:
            if isinstance(event, ce.InputAudioBufferAppend):
                self.appended_ms += len(event.payload.data) / BYTES_PER_MS
            elif isinstance(event, ce.PlaybackAck):
                name = next(
                    (n for n, v in self.live.items() if v == (event.response_id, event.played_ms)), None
                )
                assert name is not None, f"an ack of no mark sent since the last clear: {event}"
                assert event.played_ms <= self.reply_ms.get(event.response_id, math.inf) + 1e-6
        for message in out.twilio:
            assert message["event"] in ("media", "mark", "clear"), message
            assert self.stream.call is not None and message["streamSid"] == self.stream.call.stream_sid
            if message["event"] == "mark":
                name = message["mark"]["name"]
                self.pending.append(name)
                chunk = self.stream._marks[name]
                self.live[name] = (chunk.response_id, chunk.end_ms)
            elif message["event"] == "clear":
                self.cleared += self.pending
                self.pending = []
                self.live.clear()
        self.ended = self.ended or out.ended

    def receive(self, text: str | bytes, kind: Any = None) -> None:
        TwilioFuzz.messages += 1
        before = self.stream._input_ms
        out = self.stream.receive(text)
        moved = self.stream._input_ms - before
        audio = sum(len(e.payload.data) for e in out.events if isinstance(e, ce.InputAudioBufferAppend))
        assert 0 <= moved <= MAX_GAP_MS + audio / BYTES_PER_MS + 1e-6
        self.take(out, from_caller=True, kind=kind)

    # --- the caller -----------------------------------------------------------------------------------

    @rule(message=_STARTS)
    def start(self, message: dict[str, Any]) -> None:
        self.receive(json.dumps(message), "start")

    @rule()
    def connected(self) -> None:
        self.receive(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}), "connected")

    @rule(
        frames=st.integers(1, 8),
        size=st.sampled_from([0, 1, 160, 161, 8000]),
        timestamp=_TIMESTAMPS,
        track=st.sampled_from(["inbound", "outbound", None]),
        b64=st.sampled_from(["ok", "ok", "bad", "missing", "number"]),
    )
    def media(self, frames: int, size: int, timestamp: Any, track: Any, b64: str) -> None:
        for _ in range(frames):
            media: dict[str, Any] = {"chunk": "1"}
            if track is not None:
                media["track"] = track
            if timestamp is not None:
                media["timestamp"] = timestamp
            payload = {"ok": base64.b64encode(b"\x7f" * size).decode(), "bad": "!!!", "number": 5}.get(b64)
            if payload is not None:
                media["payload"] = payload
            self.receive(json.dumps({"event": "media", "streamSid": SID, "media": media}), "media")

    @rule(digit=st.sampled_from(["1", "#", "*", "A", "", "12", None, 5]))
    def dtmf(self, digit: Any) -> None:
        self.receive(json.dumps({"event": "dtmf", "streamSid": SID, "dtmf": {"digit": digit}}), "dtmf")

    @rule(
        value=absurd_json(), event=st.sampled_from(["media", "mark", "dtmf", "start", "stop", "weird", None])
    )
    def absurd(self, value: Any, event: Any) -> None:
        message = {**value, "event": event} if isinstance(value, dict) else value
        self.receive(json.dumps(message), event if isinstance(value, dict) else None)

    @rule(frame=junk_frames())
    def junk(self, frame: str | bytes) -> None:
        self.receive(frame)

    @rule()
    def stop(self) -> None:
        self.receive(json.dumps({"event": "stop", "streamSid": SID}), "stop")

    # --- Twilio's echoes --------------------------------------------------------------------------------

    @precondition(lambda self: bool(self.pending))
    @rule(count=st.integers(1, 4))
    def played(self, count: int) -> None:
        for name in self.pending[:count]:
            self.pending.remove(name)
            self.receive(json.dumps({"event": "mark", "streamSid": SID, "mark": {"name": name}}), "mark")
            self.live.pop(name, None)

    @precondition(lambda self: bool(self.cleared))
    @rule()
    def cleared_echoes(self) -> None:
        names, self.cleared = self.cleared, []
        for name in names:
            self.receive(json.dumps({"event": "mark", "streamSid": SID, "mark": {"name": name}}), "mark")

    @rule(name=st.sampled_from(["resp_1:1", "x", "", "resp_0:99999"]))
    def forged_mark(self, name: str) -> None:
        self.receive(json.dumps({"event": "mark", "streamSid": SID, "mark": {"name": name}}), "mark")

    # --- the session --------------------------------------------------------------------------------------

    @rule(ms=st.sampled_from([0, 20, 100, 130, 1000, 4000]), new=st.booleans())
    def reply_audio(self, ms: int, new: bool) -> None:
        if new or not self.replies:
            self.replies += 1
        response_id = f"resp_{self.replies}"
        self.reply_ms[response_id] = self.reply_ms.get(response_id, 0.0) + ms
        self.take(self.stream.reply_audio(response_id, b"\x7f" * (ms * BYTES_PER_MS)), from_caller=False)

    @rule(cancelled=st.booleans(), which=st.integers(0, 3))
    def reply_ended(self, cancelled: bool, which: int) -> None:
        response_id = f"resp_{max(self.replies - which, 0)}"
        self.take(self.stream.reply_ended(response_id, cancelled=cancelled), from_caller=False)

    @rule()
    def speech_started(self) -> None:
        self.take(self.stream.speech_started(), from_caller=False)

    # --- invariants ---------------------------------------------------------------------------------------

    @invariant()
    def bounded(self) -> None:
        stream = self.stream
        assert stream._queued_ms <= LEAD_MS + CHUNK_MS
        assert len(stream._marks) <= (LEAD_MS + CHUNK_MS) * BYTES_PER_MS  # each mark's chunk has a sample
        assert len(stream.digits) <= MAX_DIGITS
        assert math.isclose(stream._input_ms, self.appended_ms, abs_tol=1e-6)


TestTwilioFuzz = TwilioFuzz.TestCase
TestTwilioFuzz.settings = SETTINGS
