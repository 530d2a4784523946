"""`webrtc`: a server's WebRTC calls (`POST /v1/realtime/calls`: duplexkit's, or any server implementing
OpenAI's calls endpoint), through the client's WebRTC transport edge (`client.webrtc`).

The transport carries two kinds of message, and this adapter says which is which: text is a JSON event on
the `oai-events` data channel, binary is audio (PCM16 mono at 48 kHz, the tracks' rate).

Out: every event goes on the channel as it is (the GA names), except appends: their audio goes to the
microphone track (binary), which sends it in real time on the media clock, and their video frames, if any,
go on the channel in an append without audio (it reaches the server before the track's audio does, so the
frames join the unit the audio closes). Playback is not acknowledged by
the client: the server counts what it sent on its track (see docs/protocol.md).

In: channel events as they are. The server's track is one continuous stream (silence while the model
listens); its 20 ms frames become `response.output_audio.delta` events of the response whose audio they
carry, so the collector times them like any server's deltas, each at its own arrival (the response ids, and
the server's request metrics, come on the channel). Deltas made from the track carry `from_track: true`.

Which frames are a response's: where the server says (OpenAI's `output_audio_buffer.started`, `.stopped`
and `.cleared`, by `response_id`), a response's audio is the frames the track sent from `started` to
`stopped` (its last frame included) or, where its `response.done` said the `output_audio_ms` it made,
exactly that many frames from `started` (the count is exact; `stopped` is placed by its arrival, which a
loaded receiver shifts by a frame, and one sent once the response finished after its audio had run out
comes late), cut short by `cleared` (no frame after it). Each event was sent as the
server's track sent a frame, which reaches this client `TRACK_LAG_FRAMES` frames after the event: the
frames before it were already on their way. Audio level plays no part, so a reply that starts quiet or
pauses is whole. A server that sends none of these events (the first one switches them on for the call)
gets the heuristic: a response's audio starts at the first audible frame after its `response.created` and
ends once the track has carried the audio the response said it made (`output_audio_ms` of its
`response.done` metrics), at the next response, at a cancellation, or, when the server did not say, at the
first quiet frame after its `response.done`.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import urllib.parse
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from duplexkit.client.collector import server_request_metrics
from duplexkit.client.connection import ServerCapabilities
from duplexkit.client.events import as_ms, as_str, dig
from duplexkit.client.protocols.base import ProtocolAdapter, Wire
from duplexkit.protocol.audio import decode_audio, encode_base64_audio
from duplexkit.protocol.dialects import CANONICAL_NAMES
from duplexkit.protocol.units import samples_to_ms

TRACK_RATE_HZ = 48_000
"""The rate of the binary messages both ways (Opus in WebRTC runs at 48 kHz)."""
AUDIBLE_PEAK = 1e-3
"""A track frame whose peak reaches this (-60 dBFS) carries audio; below it, the server's silence (the
heuristic only)."""
FRAME_MS = 20.0
"""One frame of the server's track (the client's transport edge hands them on one at a time)."""
TRACK_LAG_FRAMES = 4
"""Frames of the server's track still to come out of the client's receiver when a channel event sent with
a later frame arrives: the channel and the track share one transport, but aiortc's audio jitter buffer
hands a frame on once four more have arrived (`JitterBuffer(prefetch=4)`). An event sent as the track sent
frame k arrives before frames k-4 .. k-1 come out, so frame k is the fifth after it."""
_PLAYOUT_EVENTS = frozenset(
    {"output_audio_buffer.started", "output_audio_buffer.stopped", "output_audio_buffer.cleared"}
)


@dataclass(slots=True)
class _Reply:
    """A response whose audio the track carries, or will."""

    id: str
    started: bool = False
    received_ms: float = 0.0
    done: bool = False
    audio_ms: float | None = None
    """What the response said it generated (`None`: not said, or not done yet)."""

    def complete(self) -> bool:
        return self.done and self.audio_ms is not None and self.received_ms >= self.audio_ms - 1e-6


@dataclass(slots=True)
class _Span:
    """A response's frames on the track, as the server's `output_audio_buffer` events said: frame indices
    counted from the first frame this client received, `end` exclusive (`None`: not said yet).

    Where the finished response said how much audio it made, that count ends it rather than `stopped`:
    the count is exact, while `stopped` is placed by its arrival among the track's frames, which a loaded
    receiver shifts by a frame or two (and a `stopped` sent after the audio had run out comes late).
    A cut (`cleared`, or the next response's `started`) still ends it where it came."""

    id: str
    start: int
    said: int | None = None
    """The frames the finished response said it made (`None`: not said)."""
    stopped: int | None = None
    cut: int | None = None

    @property
    def end(self) -> int | None:
        """Exclusive; `None`: not said yet."""
        natural = self.stopped if self.said is None else self.start + self.said
        ends = [e for e in (natural, self.cut) if e is not None]
        return max(self.start, min(ends)) if ends else None


class WebRTCProtocol(ProtocolAdapter):
    name = "webrtc"
    acks_playback = False
    transport = "webrtc"

    def __init__(self) -> None:
        self._frames = 0
        """Track frames received so far: the index of the next one."""
        self._spans: list[_Span] | None = None
        """The server's word on where each response's audio is (`None`: it has said nothing, the heuristic
        cuts the replies)."""
        self._said_ms: dict[str, float] = {}
        """The audio a response said it made (`output_audio_ms`), until its audio starts on the track."""
        self._replies: deque[_Reply] = deque()

    def url(self, url: str, *, model: str | None) -> str:
        """The calls endpoint for `url`: http(s) (ws(s) becomes http(s)), the path's `/v1/realtime` (or an
        empty path) becomes `/v1/realtime/calls`; `model` as a query parameter."""
        parts = urllib.parse.urlsplit(url)
        scheme = {"http": "http", "https": "https", "ws": "http", "wss": "https"}.get(parts.scheme.lower())
        if scheme is None or not parts.netloc:
            raise ValueError(f"expected an http(s):// or ws(s):// URL with a host, got {url!r}")
        path = parts.path.rstrip("/")
        if path in ("", "/v1/realtime", "/v1/duplex"):
            path = "/v1/realtime/calls"
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        if model:
            query = [(k, v) for k, v in query if k != "model"] + [("model", model)]
        return urllib.parse.urlunsplit((scheme, parts.netloc, path, urllib.parse.urlencode(query), ""))

    def capabilities(self, session: dict[str, Any]) -> ServerCapabilities:
        """As the session says, but input goes on the track: the client makes it at the track's rate."""
        return dataclasses.replace(super().capabilities(session), input_sample_rate_hz=TRACK_RATE_HZ)

    def encode(self, event: dict[str, Any]) -> list[Wire]:
        if event.get("type") == "input_audio_buffer.append":
            if event.get("sample_rate_hz", TRACK_RATE_HZ) != TRACK_RATE_HZ:
                raise ValueError("the microphone track takes audio at 48 kHz")
            audio: list[Wire] = [base64.b64decode(event["audio"])]
            if event.get("video_frames"):  # the frames ride the channel, in an append without audio
                frames = {
                    "type": "input_audio_buffer.append",
                    "audio": "",
                    "video_frames": event["video_frames"],
                }
                audio.append(json.dumps(frames))
            return audio
        return [json.dumps(event)]

    def decode(self, message: Wire) -> list[dict[str, Any]] | None:
        if isinstance(message, bytes):
            return self._track_frame(message)
        try:
            data = json.loads(message)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        self._follow(data)
        return [data]

    def _follow(self, data: dict[str, Any]) -> None:
        """Keep the replies whose audio the track carries, from the channel's events."""
        kind = CANONICAL_NAMES.get(as_str(data.get("type")) or "", data.get("type"))
        if kind in _PLAYOUT_EVENTS:
            self._playout(kind, as_str(data.get("response_id")))
        elif self._spans is not None:
            if kind == "response.done" and dig(data, "response", "status") != "cancelled":
                self._said(as_str(dig(data, "response", "id")), _said_ms(data))
        elif kind == "response.created":
            response_id = as_str(dig(data, "response", "id"))
            if response_id is not None:
                self._replies.append(_Reply(response_id))
        elif kind == "response.done":
            response_id = as_str(dig(data, "response", "id"))
            reply = next((r for r in self._replies if r.id == response_id), None)
            if reply is None:
                return
            if dig(data, "response", "status") == "cancelled":
                self._replies.remove(reply)  # the server sends none of what it had not sent yet
                return
            reply.done = True
            reply.audio_ms = _said_ms(data)

    def _said(self, response_id: str | None, audio_ms: float | None) -> None:
        """A finished response said how much audio it made: its span holds that many frames (`_Span`)."""
        if response_id is None or audio_ms is None:
            return
        span = next((s for s in reversed(self._spans or []) if s.id == response_id), None)
        if span is None:
            if audio_ms > 0:
                self._said_ms[response_id] = audio_ms
        else:
            span.said = math.ceil(audio_ms / FRAME_MS - 1e-6)

    def _playout(self, kind: str, response_id: str | None) -> None:
        """An `output_audio_buffer` event: it names the frame the track sent as it was sent, the one
        `TRACK_LAG_FRAMES` after the frames received so far (module doc)."""
        if self._spans is None:
            self._spans = []
            self._replies.clear()
        if response_id is None:
            return
        at = self._frames + TRACK_LAG_FRAMES
        if kind == "output_audio_buffer.started":
            for earlier in self._spans:
                if earlier.end is None:
                    earlier.cut = at  # the track carries one response's audio at a time
            self._spans.append(_Span(response_id, at))
            self._said(response_id, self._said_ms.pop(response_id, None))
            return
        span = next((s for s in reversed(self._spans) if s.id == response_id), None)
        if span is None:
            return
        if kind == "output_audio_buffer.stopped":
            span.stopped = at + 1  # it follows the reply's last frame
        else:
            span.cut = at  # `cleared`: nothing after what the track had sent

    def _track_frame(self, pcm: bytes) -> list[dict[str, Any]]:
        samples = decode_audio(pcm, "pcm16")
        index = self._frames
        self._frames += 1
        if self._spans is None:
            response_id = self._cut(samples)
        else:
            while self._spans and self._spans[0].end is not None and self._spans[0].end <= index:
                self._spans.pop(0)  # over
            span = next((s for s in self._spans if s.start <= index), None)
            response_id = None if span is None else span.id
        if response_id is None:
            return []  # the server's silence
        delta = {
            "type": "response.output_audio.delta",
            "response_id": response_id,
            "delta": encode_base64_audio(samples, "pcm16"),
            "sample_rate_hz": TRACK_RATE_HZ,
            "from_track": True,
        }
        return [delta]

    def _cut(self, samples: npt.NDArray[np.float32]) -> str | None:
        """The heuristic (module doc): the response whose audio this frame is, `None` for silence."""
        audible = len(samples) > 0 and float(np.max(np.abs(samples))) >= AUDIBLE_PEAK
        while self._replies:
            reply = self._replies[0]
            if reply.complete() or (reply.done and reply.audio_ms is None and reply.started and not audible):
                self._replies.popleft()
                continue
            if not reply.started and not audible:
                if reply.done and reply.audio_ms is not None and reply.audio_ms <= 0:
                    self._replies.popleft()  # it said nothing aloud
                    continue
                return None  # the model is still thinking
            reply.started = True
            reply.received_ms += samples_to_ms(len(samples), TRACK_RATE_HZ)
            return reply.id
        return None  # listening


def _said_ms(done: dict[str, Any]) -> float | None:
    """The audio a `response.done` says its response made (`output_audio_ms` of its metrics), if it says."""
    said = [as_ms(m.get("output_audio_ms")) for m in server_request_metrics(done)]
    return next((ms for ms in said if ms is not None), None)
