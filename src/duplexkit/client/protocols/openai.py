"""`openai`, `openai-beta`: an OpenAI-Realtime-style server, which has no `response.listen`, no playback
acks, no `session.close` and no duplex fields.

Turns are the client's by default (`turn_detection: null`): a commit is followed by `response.create`,
which is how such a server is asked to answer. With `server_vad=True` the server detects the turns and
answers by itself, and the client sends no commit; a `turn_detection` object the client configures
(`DuplexClient.configure`) is sent as given, in either dialect's place for it. PCM16 is 24 kHz both
ways. Outgoing events carry only the fields the OpenAI API defines (it rejects unknown ones). Incoming
events are kept as sent: the collector reads the GA and the beta names alike.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from duplexkit.client.connection import ServerCapabilities
from duplexkit.client.events import as_positive_int, dig
from duplexkit.client.protocols.base import ProtocolAdapter, Wire
from duplexkit.protocol.audio import (
    FORMAT_RATE_HZ,
    AudioFormat,
    UnsupportedAudioFormat,
    normalize_audio_format,
)

OPENAI_PCM_RATE_HZ = 24_000
_FIELDS = {
    "input_audio_buffer.append": ("audio",),
    "input_audio_buffer.commit": (),
    "input_audio_buffer.clear": (),
    "response.cancel": ("response_id",),
    "response.create": ("response",),
    "conversation.item.create": ("item", "previous_item_id"),
    "conversation.item.retrieve": ("item_id",),
    "conversation.item.delete": ("item_id",),
    "conversation.item.truncate": ("item_id", "content_index", "audio_end_ms"),
}
_NOT_SENT = frozenset({"playback.ack", "session.close", "session.heartbeat"})


_GA_FORMATS: dict[str, dict[str, Any]] = {
    "g711_ulaw": {"type": "audio/pcmu"},
    "g711_alaw": {"type": "audio/pcma"},
}
"""The GA API's G.711 formats: no rate field (they are 8 kHz)."""


def _known_format(name: object) -> AudioFormat:
    try:
        return normalize_audio_format(name) if isinstance(name, str) else "pcm16"
    except UnsupportedAudioFormat:
        return "pcm16"


class OpenAIProtocol(ProtocolAdapter):
    """The GA API (`response.output_audio.delta`, GA session shape)."""

    name = "openai"
    ready_event = "session.updated"  # the server opens the session on connect; ours is the update's answer
    closes_with_event = False
    acks_playback = False
    beta: ClassVar[bool] = False

    def __init__(self, *, server_vad: bool = False) -> None:
        self.server_vad = server_vad
        self.sends_commit = not server_vad

    def headers(self) -> dict[str, str]:
        return {"OpenAI-Beta": "realtime=v1"} if self.beta else {}

    def encode(self, event: dict[str, Any]) -> list[Wire]:
        kind = event.get("type")
        if kind in _NOT_SENT or (kind == "input_audio_buffer.commit" and self.server_vad):
            return []
        if kind == "session.update":
            return [json.dumps({"type": kind, "session": self._session(event.get("session", {}))})]
        if kind not in _FIELDS:
            raise ValueError(f"{kind} has no equivalent in the OpenAI Realtime API")
        out = {"type": kind, **{k: event[k] for k in _FIELDS[kind] if k in event}}
        frames: list[Wire] = [json.dumps(out)]
        if kind == "input_audio_buffer.commit":
            frames.append(json.dumps({"type": "response.create"}))
        return frames

    def decode(self, message: Wire) -> list[dict[str, Any]] | None:
        try:
            data = json.loads(message)
        except ValueError:
            return None
        return [data] if isinstance(data, dict) else None

    def capabilities(self, session: dict[str, Any]) -> ServerCapabilities:
        if isinstance(session.get("capabilities"), dict):  # a duplex server behind the OpenAI API
            return ServerCapabilities.from_session(session)
        rates = []
        for direction in ("input", "output"):
            fmt = dig(session, "audio", direction, "format", "type") or session.get(
                f"{direction}_audio_format"
            )
            fixed = FORMAT_RATE_HZ.get(_known_format(fmt))  # G.711: 8 kHz, a rate it does not name
            rate = as_positive_int(dig(session, "audio", direction, "format", "rate"))
            rates.append(fixed or rate or OPENAI_PCM_RATE_HZ)
        return ServerCapabilities(input_sample_rate_hz=rates[0], output_sample_rate_hz=rates[1])

    def _session(self, ours: dict[str, Any]) -> dict[str, Any]:
        modalities = ours.get("modalities") or ["audio", "text"]
        turns = ours.get("turn_detection")  # the client's turn detector, passed through as given
        if not isinstance(turns, dict):
            turns = {"type": "server_vad"} if self.server_vad else None
        # Function tools have the same flat shape in both dialects (`{"type": "function", "name", ...}`).
        common = {k: ours[k] for k in ("instructions", "tools", "tool_choice") if ours.get(k) is not None}
        fmt: AudioFormat = ours.get("input_audio_format") or "pcm16"
        if self.beta:
            beta: dict[str, Any] = {
                **common,
                "modalities": modalities,
                "input_audio_format": fmt,
                "output_audio_format": fmt,
                "turn_detection": turns,
            }
            if ours.get("voice"):
                beta["voice"] = ours["voice"]
            return beta
        pcm = _GA_FORMATS.get(fmt) or {"type": "audio/pcm", "rate": OPENAI_PCM_RATE_HZ}
        output: dict[str, Any] = {"format": pcm} | ({"voice": ours["voice"]} if ours.get("voice") else {})
        return {
            **common,
            "type": "realtime",
            # GA takes one output modality; audio replies carry their transcript.
            "output_modalities": ["audio"] if "audio" in modalities else ["text"],
            "audio": {"input": {"format": pcm, "turn_detection": turns}, "output": output},
        }


class OpenAIBetaProtocol(OpenAIProtocol):
    """The beta API (`OpenAI-Beta: realtime=v1`, `response.audio.delta`, beta session shape)."""

    name = "openai-beta"
    beta = True
