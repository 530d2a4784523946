"""`moshi`: a Moshi-protocol server (`/api/chat`: Kyutai Moshi, NVIDIA PersonaPlex, duplexkit's own).

Out: input audio as Ogg-Opus 24 kHz kind 1 frames; nothing else has an equivalent that needs sending
(no session update: settings ride the URL's query; no commit: the client keeps streaming silence through
the drain; no playback acks; closing the socket ends the session).

Placement: the output is one continuous stream, one 80 ms frame per input frame, so every output event
carries `output_stream_ms`, where it starts in that stream (frame i at i · 80 ms): Full-Duplex-Bench's own
client builds `output.wav` by concatenating the frames, and that is this protocol's default placement
(`concatenated`; `arrival` stays an option). The adapter counts the input frames it sent and the output
frames it received (`wire_report`): a client that got fewer than it sent knows how many it missed.

In: the server's one continuous stream is cut into replies on the client's side, since the protocol has
no response events: a reply opens at the first output frame louder than `SPEECH_RMS` (or the first text
piece) and ends after `END_SILENCE_MS` of quiet frames; a quiet frame outside a reply is the model
listening for that frame. Those are reported as canonical events marked `synthesized_from: "moshi"` (the
handshake as `session.created`, replies as `response.created`, deltas and `response.done`, quiet frames as
`response.listen`, kind 5 as `error`), so the collector times them on the client's receive clock, the only
clock a Moshi server offers (no request-start metrics exist in the protocol).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from duplexkit.client.connection import ServerCapabilities
from duplexkit.client.protocols.base import ProtocolAdapter, Wire
from duplexkit.protocol import moshi
from duplexkit.protocol.audio import decode_base64_audio, encode_base64_audio

SPEECH_RMS = 0.01
"""An output frame at least this loud (-40 dBFS) is speech."""
END_SILENCE_MS = 800
"""This much quiet output ends a reply."""
_NOT_SENT = frozenset(
    {"session.update", "input_audio_buffer.commit", "playback.ack", "session.close", "session.heartbeat"}
)
_SYNTHESIZED = {"synthesized_from": "moshi"}


class MoshiProtocol(ProtocolAdapter):
    name = "moshi"
    sends_commit = False
    closes_with_event = False
    acks_playback = False
    carries_server_timing = False
    placement = "concatenated"
    admits_with_ready = True

    def __init__(self) -> None:
        self._encoder = moshi.OpusEncoder()
        self._decoder = moshi.OpusDecoder()
        self._pending = np.zeros(0, dtype=np.float32)
        self._reply: str | None = None
        self._replies = 0
        self._quiet_frames = 0
        self._input_samples = 0
        self._output_frames = 0
        """Whole output frames decoded so far: the next frame's index in the output stream."""

    def url(self, url: str, *, model: str | None) -> str:
        return super().url(url, model=None)  # a Moshi server serves one model; the query is its settings

    def encode(self, event: dict[str, Any]) -> list[Wire]:
        kind = event.get("type")
        if kind in _NOT_SENT:
            return []
        if kind != "input_audio_buffer.append":
            raise ValueError(f"{kind} has no equivalent in the Moshi protocol")
        rate = event.get("sample_rate_hz", moshi.SAMPLE_RATE_HZ)
        if rate != moshi.SAMPLE_RATE_HZ:
            raise ValueError(f"Moshi input is {moshi.SAMPLE_RATE_HZ} Hz, not {rate}")
        pcm = decode_base64_audio(event["audio"], "pcm16")
        self._input_samples += len(pcm)
        ogg = self._encoder.encode(pcm)
        return [moshi.frame(moshi.Kind.AUDIO, ogg)] if ogg else []

    def decode(self, message: Wire) -> list[dict[str, Any]] | None:
        if isinstance(message, str):
            return None
        try:
            kind, payload = moshi.parse_frame(message)
        except moshi.MoshiFrameError:
            return None
        if kind is moshi.Kind.HANDSHAKE:
            return [self._session_created(payload)]
        if kind is moshi.Kind.AUDIO:
            samples, problem = self._decoder.decode(payload)
            events = self._audio(samples)
            return events + ([_error(f"undecodable audio from the server: {problem}")] if problem else [])
        if kind is moshi.Kind.TEXT:
            text = payload.decode("utf-8", "replace")
            events = [] if self._reply is not None else self._open()
            assert self._reply is not None
            self._quiet_frames = 0
            events.append(
                {
                    "type": "response.output_audio_transcript.delta",
                    "response_id": self._reply,
                    "delta": text,
                    "output_stream_ms": self._output_frames * moshi.FRAME_MS,
                }
                | _SYNTHESIZED
            )
            return events
        if kind is moshi.Kind.ERROR:
            return [_error(payload.decode("utf-8", "replace"))]
        return []  # control, metadata, ping: nothing the collector reads

    def capabilities(self, session: dict[str, Any]) -> ServerCapabilities:
        return ServerCapabilities(
            chunk_period_ms=moshi.FRAME_MS,
            first_unit_ms=moshi.FRAME_MS,
            input_sample_rate_hz=moshi.SAMPLE_RATE_HZ,
            output_sample_rate_hz=moshi.SAMPLE_RATE_HZ,
            advertised=False,
        )

    def wire_report(self) -> dict[str, Any]:
        """Input frames sent, output frames received, and the output frames missed (one is due per input
        frame, so fewer received than sent is what the client missed)."""
        sent = self._input_samples // moshi.FRAME_SAMPLES
        return {
            "protocol": self.name,
            "input_frames": sent,
            "output_frames": self._output_frames,
            "output_frames_missed": max(0, sent - self._output_frames),
        }

    # --- internals ------------------------------------------------------------------------------------

    def _session_created(self, payload: bytes) -> dict[str, Any]:
        try:
            protocol_version, model_version = moshi.parse_handshake(payload)
        except moshi.MoshiFrameError:
            protocol_version = model_version = None  # type: ignore[assignment]
        return {
            "type": "session.created",
            "session": {"moshi": {"protocol_version": protocol_version, "model_version": model_version}},
        } | _SYNTHESIZED

    def _audio(self, samples: np.ndarray[Any, np.dtype[np.float32]]) -> list[dict[str, Any]]:
        """Classify whole 80 ms frames; reply frames (pauses inside a reply included) become deltas."""
        self._pending = np.concatenate([self._pending, samples])
        events: list[dict[str, Any]] = []
        reply_audio: list[np.ndarray[Any, np.dtype[np.float32]]] = []
        first_frame = self._output_frames
        end_frames = END_SILENCE_MS // moshi.FRAME_MS
        while len(self._pending) >= moshi.FRAME_SAMPLES:
            chunk, self._pending = self._pending[: moshi.FRAME_SAMPLES], self._pending[moshi.FRAME_SAMPLES :]
            index = self._output_frames
            self._output_frames += 1
            loud = float(np.sqrt(np.mean(np.square(chunk)))) >= SPEECH_RMS
            if self._reply is None and not loud:
                events.append(_listen())
                continue
            if self._reply is None:
                events += self._open()
            if not reply_audio:
                first_frame = index
            reply_audio.append(chunk)
            self._quiet_frames = 0 if loud else self._quiet_frames + 1
            if self._quiet_frames >= end_frames:
                events += self._flush(reply_audio, first_frame)
                reply_audio = []
                events.append(self._close())
        return events + self._flush(reply_audio, first_frame)

    def _open(self) -> list[dict[str, Any]]:
        self._replies += 1
        self._reply = f"moshi_reply_{self._replies}"
        self._quiet_frames = 0
        return [
            {"type": "response.created", "response": {"id": self._reply, "status": "in_progress"}}
            | _SYNTHESIZED
        ]

    def _flush(
        self, audio: list[np.ndarray[Any, np.dtype[np.float32]]], first_frame: int
    ) -> list[dict[str, Any]]:
        """One delta of the reply frames `audio`, the first of them frame `first_frame` of the output."""
        if not audio or self._reply is None:
            return []
        return [
            {
                "type": "response.output_audio.delta",
                "response_id": self._reply,
                "delta": encode_base64_audio(np.concatenate(audio), "pcm16"),
                "sample_rate_hz": moshi.SAMPLE_RATE_HZ,
                "output_stream_ms": first_frame * moshi.FRAME_MS,
            }
            | _SYNTHESIZED
        ]

    def _close(self) -> dict[str, Any]:
        assert self._reply is not None
        done = {
            "type": "response.done",
            "response": {"id": self._reply, "status": "completed"},
        } | _SYNTHESIZED
        self._reply = None
        return done


def _listen() -> dict[str, Any]:
    metadata = {"reason": "model_listen", "model_listen": True}
    return {
        "type": "response.listen",
        "response": {"status": "listening", "metadata": metadata},
    } | _SYNTHESIZED


def _error(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "server_error", "code": "moshi_error", "message": message}} | (
        _SYNTHESIZED
    )
