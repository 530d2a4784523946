"""EventCollector: turns received events into per-response and per-session timing, sentences and audio.

Clocks. Per response, TTFT (first non-empty text), TTFP (first audio) and RTF come from one of two sources,
named on every response and never mixed:

* `server_request_start_and_client_receive` when the server sent request-start metrics for the response
  (`response_request_metrics{source: "server_monotonic_request_start"}` at the event's top level, at
  `response.metadata.duplex_event` or at `metadata.vllm_omni`): TTFT, TTFP and TPOT are the server's values
  (the first one seen of each); RTF is (server TTFP + client receive span of the audio) / audio duration.
* otherwise the client's monotonic receive clock, from one of two anchors, each its own label because they
  measure different things: `client_commit_to_receive` for the first response created after a commit
  (from the commit's send: includes the server's wait for the commit and the model's request), and
  `client_created_to_receive` for any other response (from its `response.created` receipt: only the time
  to its first output). RTF is (last audio receipt - that anchor) / audio duration; TPOT is `None` (token
  boundaries are invisible to a client).
* `client_receive_unanchored` for a reply the client's protocol adapter cut out of a continuous stream
  (Moshi: `synthesized_from` on its events): its opening is its first output, so nothing anchors it and
  its TTFT, TTFP and RTF are `None` rather than a meaningless 0.

Placement (`Placement`). Every output event sits on the input timeline where it was heard: `arrival`, its
arrival on the stream's clock (`ReceivedEvent.media_ms`), audio played serially (a chunk starts at its
arrival, or where the audio before it ends if that is later). `concatenated` is Full-Duplex-Bench's Moshi
client's rule: the server's output is one continuous stream of frames and frame i plays at i · 80 ms, so an
event carrying `output_stream_ms` (its start in that stream; the Moshi adapter sets it) sits there. Timed
sentences are the span of their own audio on that timeline (`client.voicing`): a sentence starts where its
first character was voiced and ends where its last one was. With `sentence_timing="arrival"` (vLLM-Omni's
benchmark runner's rule, for comparing with its nightly numbers) a sentence starts at the arrival of the
delta that gave its first character and ends at the arrival of the one that completed it, each arrival
read as the media clock on the wire then (the `audio_end_ms` of the last append sent,
`ReceivedEvent.sent_ms`).

A value that was not observed is `None`, never 0. Per session, `stream_ttft_ms`, `stream_ttfp_ms` and
`stream_rtf` are always on the client clock, from the stream's start (the media clock's origin), labelled
`client_stream_start_to_receive`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from duplexkit.client.events import (
    ReceivedEvent,
    as_ms,
    as_positive_int,
    as_str,
    dig,
    failed_response_error,
    is_failure,
    response_id_of,
    text_marks,
)
from duplexkit.client.sentences import SentenceBuilder, TimedSentence, media_seconds
from duplexkit.client.stats import Distribution
from duplexkit.client.voicing import voicings
from duplexkit.protocol.audio import AudioDecodeError, AudioFormat, decode_base64_audio, resample
from duplexkit.protocol.units import ms_to_samples, samples_to_ms

if TYPE_CHECKING:
    from duplexkit.client.tools import ToolCallRecord

MetricsSource = Literal[
    "server_request_start_and_client_receive",
    "client_commit_to_receive",
    "client_created_to_receive",
    "client_receive_unanchored",
]
SERVER_SOURCE: MetricsSource = "server_request_start_and_client_receive"
COMMIT_SOURCE: MetricsSource = "client_commit_to_receive"
CREATED_SOURCE: MetricsSource = "client_created_to_receive"
UNANCHORED_SOURCE: MetricsSource = "client_receive_unanchored"
"""A reply the client cut out of a continuous stream itself (Moshi): its `response.created` is the first
output, so nothing anchors its TTFT/TTFP/RTF, which are `None`; the session's stream values still hold."""
STREAM_SOURCE: Literal["client_stream_start_to_receive"] = "client_stream_start_to_receive"
CLIENT_SOURCES = frozenset({COMMIT_SOURCE, CREATED_SOURCE, UNANCHORED_SOURCE, STREAM_SOURCE})
"""Every label of a value measured on the client's own clock."""

Placement = Literal["arrival", "concatenated"]
"""Where output sits on the input timeline (module docstring)."""
PLACEMENTS: tuple[Placement, ...] = ("arrival", "concatenated")

SentenceTiming = Literal["audio", "arrival"]
"""How a sentence is timed: the span of its own audio (the default) or its deltas' arrival (module
docstring)."""
SENTENCE_TIMINGS: tuple[SentenceTiming, ...] = ("audio", "arrival")

WAV_RATE_HZ = 24_000
"""Rate of the assembled output audio."""

TEXT_DELTAS = frozenset(
    {
        "response.output_audio_transcript.delta",
        "response.output_text.delta",
        "response.audio_transcript.delta",  # OpenAI Realtime beta names
        "response.text.delta",
    }
)
AUDIO_DELTAS = frozenset({"response.output_audio.delta", "response.audio.delta"})
_RESPONSE_EVENTS = TEXT_DELTAS | AUDIO_DELTAS | {"response.created", "response.done"}

_METRICS_PLACES = (
    ("response_request_metrics",),
    ("response", "metadata", "duplex_event", "response_request_metrics"),
    ("metadata", "vllm_omni", "response_request_metrics"),
)
_SERVER_METRICS_SOURCE = "server_monotonic_request_start"


def server_request_metrics(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The request-start metrics objects an event carries, at any of the places servers put them."""
    found = []
    for path in _METRICS_PLACES:
        metrics = dig(data, *path)
        if isinstance(metrics, dict) and metrics.get("source") == _SERVER_METRICS_SOURCE:
            found.append(metrics)
    return found


@dataclass(frozen=True, slots=True)
class ResponseMetrics:
    response_id: str
    status: str | None
    """`response.done`'s status, `None` while the response is still open."""
    source: MetricsSource
    ttft_ms: float | None
    ttfp_ms: float | None
    tpot_ms: float | None
    rtf: float | None
    audio_ms: float
    audio_chunks: int
    inter_chunk_gap_ms: Distribution | None
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "response_id": self.response_id,
            "status": self.status,
            "source": self.source,
            "ttft_ms": _round(self.ttft_ms),
            "ttfp_ms": _round(self.ttfp_ms),
            "tpot_ms": _round(self.tpot_ms),
            "rtf": _round(self.rtf, 4),
            "audio_ms": _round(self.audio_ms),
            "audio_chunks": self.audio_chunks,
            "inter_chunk_gap_ms": self.inter_chunk_gap_ms.to_json() if self.inter_chunk_gap_ms else None,
            "text": self.text,
        }


@dataclass(frozen=True, slots=True)
class SessionMetrics:
    """Session-level timing, on the client's monotonic clock from the stream's start."""

    stream_ttft_ms: float | None
    stream_ttfp_ms: float | None
    stream_rtf: float | None
    turns: int
    """Responses the server created."""
    source: Literal["client_stream_start_to_receive"] = STREAM_SOURCE

    def to_json(self) -> dict[str, Any]:
        return {
            "stream_ttft_ms": _round(self.stream_ttft_ms),
            "stream_ttfp_ms": _round(self.stream_ttfp_ms),
            "stream_rtf": _round(self.stream_rtf, 4),
            "turns": self.turns,
            "source": self.source,
        }


@dataclass(slots=True)
class _Response:
    id: str
    anchor: float | None
    anchor_source: MetricsSource
    """Which client-clock anchor `anchor` is (used when the server sends no request-start metrics)."""
    item_id: str | None = None
    status: str | None = None
    server: dict[str, float] = field(default_factory=dict)
    server_seen: bool = False
    first_text_at: float | None = None
    audio_at: list[float] = field(default_factory=list)
    audio_ms: float = 0.0
    text: list[str] = field(default_factory=list)
    text_chars: int = 0
    """Characters of `text` so far: where the next delta starts in the response's text."""
    text_kind: str | None = None

    def metrics(self) -> ResponseMetrics:
        first_audio = self.audio_at[0] if self.audio_at else None
        last_audio = self.audio_at[-1] if self.audio_at else None
        tpot_ms: float | None = None
        if self.server_seen:
            source = SERVER_SOURCE
            ttft_ms, ttfp_ms = self.server.get("ttft_ms"), self.server.get("ttfp_ms")
            tpot_ms = self.server.get("tpot_ms")
            generation_ms = (
                None
                if ttfp_ms is None or first_audio is None or last_audio is None
                else ttfp_ms + (last_audio - first_audio) * 1000.0
            )
        else:
            source = self.anchor_source
            ttft_ms = _since(self.anchor, self.first_text_at)
            ttfp_ms = _since(self.anchor, first_audio)
            generation_ms = _since(self.anchor, last_audio)
        gaps = [(b - a) * 1000.0 for a, b in itertools.pairwise(self.audio_at)]
        return ResponseMetrics(
            response_id=self.id,
            status=self.status,
            source=source,
            ttft_ms=ttft_ms,
            ttfp_ms=ttfp_ms,
            tpot_ms=tpot_ms,
            rtf=None if generation_ms is None or self.audio_ms <= 0 else generation_ms / self.audio_ms,
            audio_ms=self.audio_ms,
            audio_chunks=len(self.audio_at),
            inter_chunk_gap_ms=Distribution.of(gaps),
            text="".join(self.text),
        )


@dataclass(frozen=True, slots=True)
class PlacedAudio:
    """One received audio chunk of `response_id` at sample `start` of the 24 kHz playback timeline."""

    response_id: str
    start: int
    samples: npt.NDArray[np.float32]


class EventCollector:
    """Feed it every received event (`observe`) and the client's own sends (`stream_started`,
    `commit_sent`); read metrics, sentences and audio whenever you like.

    Audio deltas are in `audio_format` (what the client configures: PCM16, or G.711 for telephone audio)
    at their `sample_rate_hz`, else at `output_rate_hz` (the server's advertised output rate).
    """

    def __init__(
        self,
        output_rate_hz: int = WAV_RATE_HZ,
        placement: Placement = "arrival",
        sentence_timing: SentenceTiming = "audio",
    ) -> None:
        self.output_rate_hz = output_rate_hz
        self.audio_format: AudioFormat = "pcm16"
        self.placement: Placement = placement
        self.sentence_timing: SentenceTiming = sentence_timing
        self.stream_started_at: float | None = None
        self.errors: list[dict[str, Any]] = []
        self.undecodable_audio_chunks = 0
        self._responses: dict[str, _Response] = {}
        self._pending_commit_at: float | None = None
        self._current: str | None = None
        self._sentences = SentenceBuilder()
        self._text_owner: str | None = None
        self._audio: list[tuple[str, float, npt.NDArray[np.float32]]] = []
        self._marks: dict[str, list[tuple[int, float]]] = {}
        """Per response, the server's `audio_text_marks` as `(text_chars, audio_end_ms)`."""

    # --- inputs ---------------------------------------------------------------------------------------

    def stream_started(self, at: float) -> None:
        """The session's input stream started at `at` (client monotonic clock): media time 0 of its
        realtime schedule. Later calls are ignored."""
        if self.stream_started_at is None:
            self.stream_started_at = at

    def commit_sent(self, at: float) -> None:
        """A commit reached the socket at `at`: the client-clock anchor of the next response created."""
        self._pending_commit_at = at

    def observe(self, event: ReceivedEvent) -> None:
        data, kind = event.data, event.type
        if kind == "error":
            self.errors.append(data)
            return
        if kind not in _RESPONSE_EVENTS:
            return
        response = self._response_for(data, event.received_at)
        for metrics in server_request_metrics(data):
            response.server_seen = True
            for name in ("ttft_ms", "ttfp_ms", "tpot_ms"):
                value = as_ms(metrics.get(name))
                if value is not None:
                    response.server.setdefault(name, value)
        response.item_id = response.item_id or as_str(data.get("item_id"))
        marks = dig(data, "metadata", "audio_text_marks")
        if kind in AUDIO_DELTAS and isinstance(marks, list):
            self._marks.setdefault(response.id, []).extend(text_marks(marks))
        if kind in TEXT_DELTAS:
            self._text(response, data, event)
        elif kind in AUDIO_DELTAS:
            self._audio_delta(response, data, event)
        elif kind == "response.done":
            response.status = as_str(dig(data, "response", "status")) or "unknown"
            if failed_response_error(data) is not None:
                self.errors.append(data)
            if self._text_owner == response.id:
                self._sentences.flush()
                self._text_owner = None

    # --- outputs --------------------------------------------------------------------------------------

    def responses(self) -> list[ResponseMetrics]:
        return [response.metrics() for response in self._responses.values()]

    def session(self) -> SessionMetrics:
        start = self.stream_started_at
        records = list(self._responses.values())
        first_text = min((r.first_text_at for r in records if r.first_text_at is not None), default=None)
        first_audio = min((r.audio_at[0] for r in records if r.audio_at), default=None)
        anchored = [r for r in records if r.audio_at and r.anchor is not None]
        generation_ms = sum(_since(r.anchor, r.audio_at[-1]) or 0.0 for r in anchored)
        audio_ms = sum(r.audio_ms for r in anchored)
        return SessionMetrics(
            stream_ttft_ms=None if start is None else _since(start, first_text),
            stream_ttfp_ms=None if start is None else _since(start, first_audio),
            stream_rtf=generation_ms / audio_ms if audio_ms > 0 else None,
            turns=len(records),
        )

    def open_responses(self) -> list[str]:
        """Responses seen and not yet done."""
        return [r.id for r in self._responses.values() if r.status is None]

    def playback_positions(self) -> list[tuple[str, str | None, float]]:
        """`(response_id, item_id, ms of audio received)` for every response with audio."""
        return [(r.id, r.item_id, r.audio_ms) for r in self._responses.values() if r.audio_at]

    def failures(self) -> list[dict[str, Any]]:
        """The errors that failed the session (benign codes excluded): `error` events and failed
        responses' `response.done` (`events.error_code_of` reads the code of either)."""
        return [e for e in self.errors if is_failure(e)]

    def sentences(self) -> list[TimedSentence]:
        """Timed sentences so far, including the text still open (flushed without ending it), each the span
        of its own audio on the timeline (text never voiced keeps the arrival of its deltas), or with
        `sentence_timing="arrival"` the arrival of its deltas (module docstring)."""
        if self.sentence_timing == "arrival":
            return self._sentences.finished()
        placed = [(c.response_id, c.start, len(c.samples)) for c in self.audio_placements()]
        texts = {r.id: "".join(r.text) for r in self._responses.values()}
        voiced = voicings(placed, texts, self._marks)
        out = []
        for sentence in self._sentences.finished():
            voicing = voiced.get(sentence.response_id or "")
            if voicing is None or sentence.chars is None or sentence.chars[0] >= voicing.voiced_chars:
                out.append(sentence)
                continue
            first, last = sentence.chars
            start = voicing.timeline_ms(first, opening=True)
            end = max(start, voicing.timeline_ms(last, opening=False))
            out.append(replace(sentence, start=media_seconds(start), end=media_seconds(end)))
        return out

    def output_audio(self) -> npt.NDArray[np.float32]:
        """All response audio at 24 kHz on its playback timeline (module docstring: placement); silence
        fills the gaps."""
        placed = self.audio_placements()
        out = np.zeros(placed[-1].start + len(placed[-1].samples) if placed else 0, dtype=np.float32)
        for chunk in placed:
            out[chunk.start : chunk.start + len(chunk.samples)] = chunk.samples
        return out

    def audio_placements(self) -> list[PlacedAudio]:
        """Where each received audio chunk sits on the playback timeline `output_audio` builds, with its
        response, so per-response positions (e.g. `audio_text_marks`) can be placed on that timeline."""
        cursor = 0
        placed: list[PlacedAudio] = []
        for response_id, media_ms, samples in self._audio:
            start = max(cursor, ms_to_samples(media_ms, WAV_RATE_HZ))
            placed.append(PlacedAudio(response_id, start, samples))
            cursor = start + len(samples)
        return placed

    # --- internals ------------------------------------------------------------------------------------

    def _response_for(self, data: dict[str, Any], received_at: float) -> _Response:
        response_id = response_id_of(data) or self._current or "unidentified"
        response = self._responses.get(response_id)
        if response is None:
            anchor: float | None
            if data.get("synthesized_from") is not None:
                anchor, source = None, UNANCHORED_SOURCE
            elif self._pending_commit_at is None:
                anchor, source = received_at, CREATED_SOURCE
            else:
                anchor, source = self._pending_commit_at, COMMIT_SOURCE
                self._pending_commit_at = None
            response = self._responses[response_id] = _Response(response_id, anchor, source)
            self._current = response_id
        return response

    def _heard_ms(self, data: dict[str, Any], event: ReceivedEvent) -> float:
        """Where an output event sits on the input timeline, by the collector's placement rule."""
        in_stream = as_ms(data.get("output_stream_ms"))
        if self.placement == "concatenated" and in_stream is not None:
            return in_stream
        return event.media_ms

    def _text(self, response: _Response, data: dict[str, Any], event: ReceivedEvent) -> None:
        text = as_str(data.get("delta"))
        response.text_kind = response.text_kind or event.type
        if not text or response.text_kind != event.type:
            return  # a server sending both text kinds for one response would double the text
        offset = response.text_chars
        response.text.append(text)
        response.text_chars += len(text)
        if response.first_text_at is None and text.strip():
            response.first_text_at = event.received_at
        if self._text_owner not in (None, response.id):
            self._sentences.flush()
        self._text_owner = response.id
        at = self._heard_ms(data, event)
        if self.sentence_timing == "arrival" and event.sent_ms is not None:
            at = event.sent_ms
        self._sentences.add(text, at, response_id=response.id, offset=offset)

    def _audio_delta(self, response: _Response, data: dict[str, Any], event: ReceivedEvent) -> None:
        b64 = as_str(data.get("delta"))
        if not b64:
            return
        try:
            samples = decode_base64_audio(b64, self.audio_format)
        except AudioDecodeError:
            self.undecodable_audio_chunks += 1
            return
        if len(samples) == 0:
            return
        rate = as_positive_int(data.get("sample_rate_hz")) or self.output_rate_hz
        response.audio_at.append(event.received_at)
        response.audio_ms += samples_to_ms(len(samples), rate)
        self._audio.append(
            (
                response.id,
                self._heard_ms(data, event),
                samples if rate == WAV_RATE_HZ else resample(samples, rate, WAV_RATE_HZ),
            )
        )


def _since(anchor: float | None, at: float | None) -> float | None:
    return None if at is None or anchor is None else (at - anchor) * 1000.0


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def dump_events(
    events: list[ReceivedEvent], origin: float, tool_calls: Sequence[ToolCallRecord] = ()
) -> list[dict[str, Any]]:
    """Events as JSON-ready dicts: `t_ms` since `origin` (client monotonic clock), `media_ms` where it was
    heard on the input timeline (`ReceivedEvent.media_ms`), and the event with audio payloads replaced by
    their decoded byte counts (`<field>_bytes`).

    The function-call outputs the client sent (`tool_calls`) are listed among them in time order, marked
    `"sent": true`, at their wire time and where they were sent on the input timeline."""
    out = [
        {
            "t_ms": round((event.received_at - origin) * 1000.0, 3),
            "media_ms": round(event.media_ms, 3),
            "event": _without_audio(event.data),
        }
        for event in events
    ]
    sent = [
        {
            "t_ms": round((record.output_sent_at - origin) * 1000.0, 3),
            "media_ms": round(record.output_media_ms or 0.0, 3),
            "sent": True,
            "event": {
                "type": "conversation.item.create",
                "item": {
                    "type": "function_call_output",
                    "call_id": record.call.call_id,
                    "output": record.output,
                },
                "name": record.call.name,
            },
        }
        for record in tool_calls
        if record.output_sent_at is not None
    ]
    return sorted(out + sent, key=lambda entry: entry["t_ms"]) if sent else out


def _without_audio(data: dict[str, Any]) -> dict[str, Any]:
    out = dict(data)
    audio_fields = ["audio"] + (["delta"] if data.get("type") in AUDIO_DELTAS else [])
    for name in audio_fields:
        value = out.get(name)
        if isinstance(value, str):
            del out[name]
            out[f"{name}_bytes"] = _base64_size(value)
    return out


def _base64_size(b64: str) -> int:
    """Decoded size of padded base64 text, without decoding it."""
    padding = len(b64) - len(b64.rstrip("="))
    return max(0, len(b64) * 3 // 4 - min(padding, 2))
