"""Twilio Media Streams, Sans-I/O: a phone call's stream ↔ one session's typed events.

`TwilioStream` is fed Twilio's messages (`receive`, JSON text as Twilio sends it) and the session's output
(`reply_audio`, `reply_ended`), and answers with what to do: client events for the session (typed
`client_events`, never JSON), messages for Twilio (`media`, `mark`, `clear`: the only three a bidirectional
stream accepts; anything else is Twilio warning 31951), and the problems it found, each a coded
`ProtocolError`. It holds no socket, task or clock.

In (Twilio → session):

* `connected` is noted; `start` must carry `mediaFormat` audio/x-mulaw at 8000 Hz mono (anything else is
  `unsupported_audio_format`) and opens the session with a `session.update` from the defaults and the
  `start` message's `customParameters` (`SESSION_PARAMETERS`). Any problem with the `start` is fatal: a call
  has one, and without it the call cannot be heard.
* `media` on the inbound track becomes an append of its 8 kHz mu-law as it is (G.711 in the session's own
  format, one byte a sample). Its `timestamp` (ms since the stream started, a string) places it: a gap (a
  frame lost, or refused as bad base64) is filled with mu-law silence, so the session's media clock stays
  the call's. A gap past `MAX_GAP_MS` is refused, never filled.
* `mark` is Twilio's echo of a mark sent after a reply chunk, sent once the audio before it has played:
  it becomes a `playback.ack` of that reply up to the chunk's end (marks of audio dropped by `clear` are
  forgotten when the clear is sent, so their echoes ack nothing).
* `dtmf` is noted (`digits`, the latest `MAX_DIGITS`); no model acts on key presses yet. `stop` ends the
  stream.
* An unknown event, bad JSON (or JSON past `MAX_MESSAGE_BYTES` or nested too deep), bad base64, a bad
  `timestamp` or `digit`, or a message before `start` is a non-fatal coded problem: the message is
  dropped, nothing else is.

Out (session → Twilio): each reply's mu-law is cut into chunks of `CHUNK_MS`, each sent as `media` under
the call's `streamSid` and followed by a `mark`. Sending is paced by playback: no more than `lead_ms` of
audio is queued on Twilio's side past the last mark it echoed; the rest waits here, and each echo releases
more. A reply that ends cancelled (barge-in) sends `clear` when any of its audio is queued or waiting, and
so does the caller's speech starting (`speech_started`, with barge-in on) while any reply's is, even one
whose `response.done` went already.
"""

from __future__ import annotations

import base64
import json
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from duplexkit.protocol import client_events as ce
from duplexkit.protocol.audio import AudioDecodeError, EncodedAudio, decode_base64_payload
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.protocol.wire import load_json

SAMPLE_RATE_HZ: Final = 8_000
ENCODING: Final = "audio/x-mulaw"
BYTES_PER_MS: Final = SAMPLE_RATE_HZ // 1000
MULAW_SILENCE: Final = b"\xff"
CHUNK_MS: Final = 100
"""Reply audio per `media` message (and per mark: the granularity of playback acks)."""
LEAD_MS: Final = 600.0
"""Reply audio that may be queued on Twilio's side beyond its last echoed mark."""
GAP_SLACK_MS: Final = 10.0
"""A frame later than the input so far by more than this is preceded by silence for the gap."""
MAX_GAP_MS: Final = 2_000.0
"""The longest gap a frame's `timestamp` may open (100 lost 20 ms frames): a frame past it is refused
(`invalid_value`), its silence never made, the input clock unmoved."""
MAX_MESSAGE_BYTES: Final = 64 * 1024
"""The largest message read from Twilio (a `media` message is about 300 bytes); larger ones are refused
(`event_too_large`). JSON nesting is bounded as on every door (`wire.MAX_JSON_DEPTH`)."""
DTMF_DIGITS: Final = frozenset("0123456789*#")
MAX_DIGITS: Final = 64
"""Key presses kept (`TwilioStream.digits`: the latest)."""

SESSION_PARAMETERS: Final = ("instructions", "voice", "temperature", "max_tokens", "turn_detection")
"""`customParameters` (TwiML `<Parameter>`) a call's session takes: the first three as the session field of
that name, `max_tokens` an integer, `turn_detection` one of `server_vad`, `semantic_vad`, `none`."""


@dataclass(slots=True)
class Output:
    """What one input asks for: events for the session, messages for Twilio (JSON-ready dicts), problems
    to report, and whether the stream ended (`ended`) or must be closed for a fatal problem (`fatal`)."""

    events: list[ce.ClientEventBase] = field(default_factory=list)
    twilio: list[dict[str, Any]] = field(default_factory=list)
    problems: list[ProtocolError] = field(default_factory=list)
    ended: bool = False
    fatal: bool = False

    def frames(self) -> list[str]:
        """The messages for Twilio as the text frames of its wire (compact JSON)."""
        return [json.dumps(message, separators=(",", ":")) for message in self.twilio]


@dataclass(slots=True)
class _Chunk:
    response_id: str
    payload: bytes
    end_ms: float
    """Where the chunk ends in its reply's audio."""


@dataclass(frozen=True, slots=True)
class CallInfo:
    """What the `start` message said about the call."""

    stream_sid: str
    call_sid: str
    account_sid: str
    custom_parameters: Mapping[str, str]


class TwilioStream:
    """One Media Stream's state; see the module doc. `defaults`: the server's session settings for calls
    (a `session` object), which `customParameters` override."""

    def __init__(self, defaults: Mapping[str, Any] | None = None, *, lead_ms: float = LEAD_MS) -> None:
        self._defaults = dict(defaults or {})
        self._lead_ms = lead_ms
        self.call: CallInfo | None = None
        self.connected = False
        self.digits = ""
        self._input_ms = 0.0
        self._waiting: deque[_Chunk] = deque()
        self._marks: dict[str, _Chunk] = {}
        """Marks sent whose echo has not come, in order: name → the chunk they follow."""
        self._queued_ms = 0.0
        self._mark_count = 0
        self._reply_ms: dict[str, float] = {}
        self._barge_in = True
        """The call's session lets the caller talk over a reply (`overlap_policy`)."""

    # --- Twilio → session -----------------------------------------------------------------------------

    def receive(self, text: str | bytes) -> Output:
        """One message from Twilio."""
        out = Output()
        try:
            message = load_json(text, max_bytes=MAX_MESSAGE_BYTES)
        except ProtocolError as exc:
            out.problems.append(exc)
            return out
        if not isinstance(message, dict):
            out.problems.append(
                ProtocolError(ErrorCode.NOT_AN_OBJECT, "a Media Streams message is an object")
            )
            return out
        kind = message.get("event")
        try:
            if kind == "connected":
                self.connected = True
            elif kind == "start":
                self._start(message, out)
            elif kind == "stop":
                out.ended = True
            elif self.call is None:
                raise ProtocolError(
                    ErrorCode.SESSION_NOT_CONFIGURED, f"{kind!r} before the stream's start", param="event"
                )
            elif kind == "media":
                self._media(message, out)
            elif kind == "mark":
                self._echo(message, out)
            elif kind == "dtmf":
                self._dtmf(message)
            else:
                raise ProtocolError(
                    ErrorCode.UNKNOWN_EVENT, f"{kind!r} is not a Media Streams event", param="event"
                )
        except ProtocolError as exc:
            out.problems.append(exc)
        return out

    def _start(self, message: dict[str, Any], out: Output) -> None:
        """A call has one `start`: one it cannot open on is fatal (the call could never be heard); another
        after it is dropped (`invalid_value`), and the call goes on as it was opened."""
        if self.call is not None:
            raise ProtocolError(
                ErrorCode.INVALID_VALUE,
                f"the stream {self.call.stream_sid!r} has started already; a second start is dropped",
                param="event",
            )
        try:
            self._open(message, out)
        except ProtocolError:
            out.fatal = True
            raise

    def _open(self, message: dict[str, Any], out: Output) -> None:
        start = _section(message, "start")
        fmt = start.get("mediaFormat")
        fmt = fmt if isinstance(fmt, dict) else {}
        encoding, rate, channels = fmt.get("encoding"), fmt.get("sampleRate"), fmt.get("channels", 1)
        if encoding != ENCODING or rate != SAMPLE_RATE_HZ or channels != 1:
            raise ProtocolError(
                ErrorCode.UNSUPPORTED_AUDIO_FORMAT,
                f"the stream's mediaFormat is {encoding!r} at {rate!r} Hz, {channels!r} channel(s); "
                f"this server reads {ENCODING} at {SAMPLE_RATE_HZ} Hz mono",
                param="start.mediaFormat",
            )
        stream_sid = start.get("streamSid") or message.get("streamSid")
        if not isinstance(stream_sid, str) or not stream_sid:
            raise ProtocolError(ErrorCode.MISSING_FIELD, "start without a streamSid", param="start.streamSid")
        params = start.get("customParameters")
        params = {str(k): str(v) for k, v in params.items()} if isinstance(params, dict) else {}
        self.call = CallInfo(
            stream_sid=stream_sid,
            call_sid=str(start.get("callSid", "")),
            account_sid=str(start.get("accountSid", "")),
            custom_parameters=params,
        )
        try:
            session = ce.SessionConfig.model_validate(self._session(params))
        except ValueError as exc:
            raise ProtocolError(
                ErrorCode.INVALID_VALUE,
                f"the call's session settings are not valid: {exc}",
                param="customParameters",
            ) from None
        self._barge_in = session.overlap_policy != "listen_only"
        out.events.append(ce.SessionUpdate(type="session.update", session=session))

    def _session(self, params: Mapping[str, str]) -> dict[str, Any]:
        session: dict[str, Any] = {
            "turn_detection": None,
            **self._defaults,
            "input_audio_format": "g711_ulaw",
            "output_audio_format": "g711_ulaw",
            "playback_commit_policy": "ack_only",
        }
        for name in ("instructions", "voice", "temperature"):
            if name in params:
                session[name] = params[name]
        if "max_tokens" in params:
            session["max_tokens"] = params["max_tokens"]
        if "turn_detection" in params:
            kind = params["turn_detection"].strip().lower()
            session["turn_detection"] = None if kind in ("", "none", "null") else {"type": kind}
        return session

    def _media(self, message: dict[str, Any], out: Output) -> None:
        media = _section(message, "media")
        if media.get("track", "inbound") not in ("inbound", "inbound_track"):
            return  # a stream of both tracks: the call's own output is not the caller
        payload = media.get("payload")
        if not isinstance(payload, str):
            raise ProtocolError(ErrorCode.MISSING_FIELD, "media without a payload", param="media.payload")
        try:
            audio = decode_base64_payload(payload, "g711_ulaw").data
        except AudioDecodeError as exc:
            raise ProtocolError(ErrorCode.INVALID_AUDIO, str(exc), param="media.payload") from None
        gap_ms = _timestamp(media) - self._input_ms if "timestamp" in media else 0.0
        if gap_ms > MAX_GAP_MS:
            raise ProtocolError(
                ErrorCode.INVALID_VALUE,
                f"media.timestamp is {gap_ms:.0f} ms past the input so far; the most a gap may be is "
                f"{MAX_GAP_MS:.0f} ms",
                param="media.timestamp",
            )
        if gap_ms > GAP_SLACK_MS:
            audio = MULAW_SILENCE * round(gap_ms * BYTES_PER_MS) + audio
        self._input_ms += len(audio) / BYTES_PER_MS
        # the payload as it came, in the session's format: no base64 or JSON on the way to the runner
        out.events.append(ce.InputAudioBufferAppend.of_audio(EncodedAudio(audio, "g711_ulaw")))

    def _dtmf(self, message: dict[str, Any]) -> None:
        digit = _section(message, "dtmf").get("digit")
        if digit not in DTMF_DIGITS:
            raise ProtocolError(
                ErrorCode.INVALID_VALUE, f"dtmf.digit {digit!r} is not a key", param="dtmf.digit"
            )
        self.digits = (self.digits + digit)[-MAX_DIGITS:]

    def _echo(self, message: dict[str, Any], out: Output) -> None:
        name = _section(message, "mark").get("name")
        chunk = self._marks.pop(name, None) if isinstance(name, str) else None
        if chunk is None:
            return  # audio a clear dropped, or a mark this stream did not send: nothing was played
        self._queued_ms = max(self._queued_ms - _ms(chunk), 0.0)
        out.events.append(
            ce.PlaybackAck(type="playback.ack", response_id=chunk.response_id, played_ms=chunk.end_ms)
        )
        self._send_due(out)

    # --- session → Twilio -----------------------------------------------------------------------------

    def reply_audio(self, response_id: str, mulaw: bytes) -> Output:
        """A reply delta's audio (8 kHz mu-law): chunks to send now, within the lead, the rest later."""
        out = Output()
        offset = self._reply_ms.get(response_id, 0.0)
        step = CHUNK_MS * BYTES_PER_MS
        for start in range(0, len(mulaw), step):
            piece = mulaw[start : start + step]
            offset += len(piece) / BYTES_PER_MS
            self._waiting.append(_Chunk(response_id, piece, offset))
        self._reply_ms[response_id] = offset
        self._send_due(out)
        return out

    def reply_ended(self, response_id: str, *, cancelled: bool) -> Output:
        """A reply is done: a cancelled one (barge-in, cancel) is cleared from Twilio's queue and ours."""
        out = Output()
        self._reply_ms.pop(response_id, None)
        if cancelled:
            self._clear(out, response_id)
        return out

    def speech_started(self) -> Output:
        """The caller started talking: with barge-in on, the reply audio queued on Twilio's side and here is
        cleared, whether or not its reply is done (Twilio's recipe: clear whenever marks are pending)."""
        out = Output()
        if self._barge_in:
            self._clear(out, None)
        return out

    def _clear(self, out: Output, response_id: str | None) -> None:
        """`clear` Twilio's queue (its marks will ack nothing) and drop the audio waiting here: the reply's,
        or every reply's (`None`), then send what remains due."""
        if self.call is None:
            return
        dropped = [c for c in self._waiting if response_id in (None, c.response_id)]
        if dropped or self._marks:
            self._waiting = deque(c for c in self._waiting if response_id not in (None, c.response_id))
            self._marks.clear()
            self._queued_ms = 0.0
            out.twilio.append({"event": "clear", "streamSid": self.call.stream_sid})
            self._send_due(out)

    def _send_due(self, out: Output) -> None:
        if self.call is None:
            return
        while self._waiting and self._queued_ms < self._lead_ms:
            chunk = self._waiting.popleft()
            self._mark_count += 1
            name = f"{chunk.response_id}:{self._mark_count}"
            sid = self.call.stream_sid
            out.twilio.append(
                {
                    "event": "media",
                    "streamSid": sid,
                    "media": {"payload": base64.b64encode(chunk.payload).decode("ascii")},
                }
            )
            out.twilio.append({"event": "mark", "streamSid": sid, "mark": {"name": name}})
            self._marks[name] = chunk
            self._queued_ms += _ms(chunk)


def _ms(chunk: _Chunk) -> float:
    return len(chunk.payload) / BYTES_PER_MS


def _section(message: dict[str, Any], name: str) -> dict[str, Any]:
    section = message.get(name)
    if not isinstance(section, dict):
        raise ProtocolError(
            ErrorCode.MISSING_FIELD, f"{message.get('event')!r} without its {name!r}", param=name
        )
    return section


def _timestamp(media: dict[str, Any]) -> float:
    """`media.timestamp`: ms since the stream started, a string of digits (Twilio's) or a number."""
    value = media["timestamp"]
    try:
        ms = float(value)
    except (TypeError, ValueError):
        raise ProtocolError(
            ErrorCode.INVALID_VALUE,
            f"media.timestamp {value!r} is not a number of ms",
            param="media.timestamp",
        ) from None
    if not 0 <= ms < math.inf:  # negative, infinite or NaN
        raise ProtocolError(
            ErrorCode.INVALID_VALUE, f"media.timestamp {value!r} is not a time", param="media.timestamp"
        )
    return ms
