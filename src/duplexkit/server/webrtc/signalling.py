"""The offer side of `POST /v1/realtime/calls`, with no WebRTC library: what the body holds and whether it
can be answered.

The body is the SDP offer itself (`application/sdp`; any content type but multipart is read so), or
`multipart/form-data` with an `sdp` field and an optional `session` field (the session object of
`session.update`, as JSON). An offer must be SDP with an audio section; whether it also has a data section
says whether the client will open the `oai-events` channel. The audio terms of a call's session are fixed
by the call (`pinned_session`): audio rides the tracks, so the formats a client names for base64 audio do
not apply, and playback is acknowledged by the server as it sends (`ack_only`, acks from the track).
"""

from __future__ import annotations

import email.parser
import email.policy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from duplexkit.protocol import client_events as ce
from duplexkit.protocol.errors import ErrorCode, ProtocolError

EVENTS_CHANNEL = "oai-events"
"""The data channel the client opens for the session's JSON events (OpenAI's name)."""


@dataclass(frozen=True, slots=True)
class Offer:
    """A client's offer: its SDP, the session object that came with it (`{}`: none), and whether the SDP
    has a data section (the client will open `oai-events`; without one the call is audio only)."""

    sdp: str
    session: Mapping[str, Any] = field(default_factory=dict)
    data_channel: bool = False


def parse_offer(content_type: str, body: bytes) -> Offer:
    """The offer in a request body. Raises `ProtocolError` (`invalid_sdp`, `offer_without_audio`,
    `missing_field`, `invalid_json`, `invalid_value`) for a body that is not one."""
    session: Mapping[str, Any] = {}
    if content_type.split(";", 1)[0].strip().lower() == "multipart/form-data":
        fields = _form_fields(content_type, body)
        if "sdp" not in fields:
            raise ProtocolError(ErrorCode.MISSING_FIELD, "the form has no 'sdp' field", param="sdp")
        raw = fields["sdp"]
        if "session" in fields:
            session = _session_object(fields["session"])
    else:
        raw = body
    try:
        sdp = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(ErrorCode.INVALID_SDP, "the offer is not UTF-8 text", param="sdp") from None
    return Offer(sdp, session, data_channel=_check_sdp(sdp))


def _form_fields(content_type: str, body: bytes) -> dict[str, bytes]:
    """The named parts of a `multipart/form-data` body (the standard library's MIME parser)."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1", "replace")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise ProtocolError(ErrorCode.INVALID_VALUE, "the multipart body has no parts", param="content-type")
    fields: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = payload
    return fields


def _session_object(raw: bytes) -> Mapping[str, Any]:
    try:
        session = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError(
            ErrorCode.INVALID_JSON, "the 'session' field is not JSON", param="session"
        ) from None
    if not isinstance(session, dict):
        raise ProtocolError(ErrorCode.INVALID_VALUE, "the 'session' field is not an object", param="session")
    return session


def _check_sdp(sdp: str) -> bool:
    """Refuse what is not an SDP offer with audio; return whether it has a data (`m=application`) section.
    A section whose port is 0 is one the offerer disabled."""
    lines = [line.strip() for line in sdp.splitlines() if line.strip()]
    if not lines or lines[0] != "v=0" or not any(line.startswith("m=") for line in lines):
        raise ProtocolError(
            ErrorCode.INVALID_SDP,
            "the offer is not SDP (no 'v=0' first line or no media section)",
            param="sdp",
        )
    media = [line[2:].split() for line in lines if line.startswith("m=")]
    live = {m[0] for m in media if len(m) >= 2 and m[1] != "0"}
    if "audio" not in live:
        raise ProtocolError(
            ErrorCode.OFFER_WITHOUT_AUDIO,
            "the offer has no audio section; a call needs the client's audio track",
            param="sdp",
        )
    return "application" in live


SESSION_PCM_RATE_HZ = 24_000
"""The PCM rate a call's session reports: OpenAI's `audio/pcm` (the SDK's session type allows no other).
Nothing is read at it: the call's audio reaches the engine as appends that name the model's rate."""


def pinned_session(session: Mapping[str, Any]) -> dict[str, Any]:
    """`session` with the call's audio terms: PCM16 in and out (the edge's own encoding between the tracks
    and the engine, at OpenAI's nominal rate), and playback acknowledged from the track."""
    pinned = dict(session)
    audio = pinned.get("audio")
    if isinstance(audio, dict):  # the GA shape's formats (`audio.input.format`) describe base64 audio
        pinned["audio"] = {
            direction: {k: v for k, v in part.items() if k != "format"} if isinstance(part, dict) else part
            for direction, part in audio.items()
        }
    pinned.update(
        input_audio_format="pcm16",
        output_audio_format="pcm16",
        input_sample_rate_hz=SESSION_PCM_RATE_HZ,
        playback_commit_policy="ack_only",
    )
    return pinned


def opening_update(session: Mapping[str, Any]) -> ce.SessionUpdate:
    """The call's first event for the runner: `session.update` with the pinned session. Raises
    `ProtocolError` when the client's session object is not valid, so the POST can refuse it."""
    obj = {"type": "session.update", "session": pinned_session(session)}
    event = ce.validate_client_event(obj, "pcm16")
    assert isinstance(event, ce.SessionUpdate)
    return event


def pinned_client_object(obj: dict[str, Any]) -> dict[str, Any]:
    """A client event object from the data channel, with a `session.update`'s audio terms pinned (any
    other passes unchanged)."""
    session = obj.get("session")
    if obj.get("type") != "session.update" or not isinstance(session, dict):
        return obj
    return {**obj, "session": pinned_session(session)}
