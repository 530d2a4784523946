"""Bytes on the wire ↔ typed events: the client-event parser and the server-event stamper.

`parse_client_event` is total: whatever it is given, it returns a typed event or raises `ProtocolError`
with a wire code, never anything else. The hot event, `input_audio_buffer.append` (5-12.5 a second per
session), takes its fast path when it has the common shape (`InputAudioBufferAppend.from_plain`).
`ServerEventStamper` gives each outgoing event its `event_id` and the connection's next `server_event_seq`.
"""

from __future__ import annotations

import itertools
import json
import secrets
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails, from_json

from duplexkit.protocol.audio import AudioFormat
from duplexkit.protocol.client_events import CLIENT_EVENT_TYPES, ClientEventBase, InputAudioBufferAppend
from duplexkit.protocol.dialects import Dialect, render, reshapes, resolve_alias, wire_name
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.protocol.server_events import (
    ConversationItemAdded,
    ConversationItemDone,
    InputAudioBufferCommitted,
    ServerEventBase,
    SessionCreated,
)

MAX_EVENT_BYTES = 15 * 1024 * 1024
"""Largest client frame accepted (vLLM-Omni's limit); larger frames are answered with `event_too_large`."""

_CUSTOM_CODES = {
    "invalid_audio": ErrorCode.INVALID_AUDIO,
    "unsupported_audio_format": ErrorCode.UNSUPPORTED_AUDIO_FORMAT,
    "invalid_video_frame": ErrorCode.INVALID_VIDEO_FRAME,
}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _loads(data: str | bytes) -> Any:
    """JSON text → Python values, as `json.loads` defines them (NaN and Infinity refused).

    pydantic-core's Rust parser goes first (about 6x faster on an append); whatever it refuses (lone
    surrogates, malformed text) goes to `json.loads`, which gives the answer and the error message. Where
    both accept, they give the same values (a property test holds them to it).
    """
    try:
        return from_json(data, allow_inf_nan=False)
    except (ValueError, TypeError):  # TypeError: a str it cannot read as UTF-8 (a lone surrogate)
        pass
    try:
        return json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(ErrorCode.INVALID_JSON, f"frame is not valid JSON: {exc}") from None


def _loc(error: ErrorDetails) -> str:
    return ".".join(str(part) for part in error["loc"])


def parse_client_event(
    data: str | bytes,
    *,
    input_audio_format: AudioFormat = "pcm16",
    max_bytes: int = MAX_EVENT_BYTES,
    dialect: Dialect = Dialect.GA,
) -> ClientEventBase:
    """Parse one client frame into its typed event.

    `input_audio_format` is the session's current input format, used to validate an append that does not
    name its own; `dialect` decides which input aliases are accepted. Raises only `ProtocolError`; its
    `event_id` is the client's, when it could be read.
    """
    size = (
        len(data)
        if isinstance(data, bytes) or len(data) * 4 <= max_bytes
        else len(data.encode("utf-8", "replace"))
    )
    if size > max_bytes:
        raise ProtocolError(ErrorCode.EVENT_TOO_LARGE, f"event is {size} bytes; the limit is {max_bytes}")
    obj = _loads(data)
    if not isinstance(obj, dict):
        raise ProtocolError(
            ErrorCode.NOT_AN_OBJECT, f"an event must be a JSON object, not {type(obj).__name__}"
        )
    event_id = obj.get("event_id") if isinstance(obj.get("event_id"), str) else None
    if "type" not in obj:
        raise ProtocolError(ErrorCode.MISSING_FIELD, "event has no 'type'", param="type", event_id=event_id)
    try:
        obj = resolve_alias(obj, dialect)
    except ProtocolError as exc:
        exc.event_id = event_id
        raise
    event_type = obj["type"]
    if event_type == "input_audio_buffer.append":
        append = InputAudioBufferAppend.from_plain(obj, input_audio_format)
        if append is not None:
            return append
    model = CLIENT_EVENT_TYPES.get(event_type) if isinstance(event_type, str) else None
    if model is None:
        raise ProtocolError(
            ErrorCode.UNKNOWN_EVENT, f"unknown event type {event_type!r}", param="type", event_id=event_id
        )
    try:
        return model.model_validate(obj, context={"input_audio_format": input_audio_format})
    except ValidationError as exc:
        raise _protocol_error(exc, event_type, event_id) from None


def _protocol_error(exc: ValidationError, event_type: str, event_id: str | None) -> ProtocolError:
    errors = exc.errors(include_url=False, include_input=False)
    for error in errors:
        if error["type"] in _CUSTOM_CODES:
            return ProtocolError(
                _CUSTOM_CODES[error["type"]], error["msg"], param=_loc(error) or None, event_id=event_id
            )
    missing = [error for error in errors if error["type"] == "missing"]
    if missing:
        param = _loc(missing[0])
        return ProtocolError(
            ErrorCode.MISSING_FIELD,
            f"{event_type}: missing required field '{param}'",
            param=param,
            event_id=event_id,
        )
    first = errors[0]
    param = _loc(first)
    return ProtocolError(
        ErrorCode.INVALID_VALUE,
        f"{event_type}: invalid '{param}': {first['msg']}",
        param=param,
        event_id=event_id,
    )


class ServerEventStamper:
    """Stamps one connection's events: a unique `event_id` and a gap-free increasing `server_event_seq`,
    and renders them in the connection's dialect."""

    def __init__(self, dialect: Dialect = Dialect.GA) -> None:
        self.dialect = dialect
        self._opened = False
        self._seq = itertools.count(1)
        self._prefix = f"evt_{secrets.token_hex(6)}_"

    def stamp(self, event: ServerEventBase) -> ServerEventBase:
        """Assign the next sequence number (in place) and return the event."""
        seq = next(self._seq)
        event.server_event_seq = seq
        event.event_id = f"{self._prefix}{seq}"
        return event

    def encode(self, event: ServerEventBase) -> str:
        """Stamp and serialise to the JSON text frame in the dialect; unobserved (`None`) values are
        omitted, except an item's `previous_item_id`, whose `null` says "first in the conversation"
        (OpenAI's insertion rule: a client places an item without one where it arrives)."""
        stamped = self.stamp(event)
        opened, self._opened = self._opened, self._opened or isinstance(stamped, SessionCreated)
        placed = isinstance(stamped, ConversationItemAdded | ConversationItemDone | InputAudioBufferCommitted)
        if placed or reshapes(stamped, self.dialect, opened=opened):
            dumped = stamped.model_dump(mode="json", exclude_none=True)
            if placed:
                dumped.setdefault("previous_item_id", None)
            return json.dumps(render(dumped, self.dialect, opened=opened))
        # Only the name may differ: `type` is the first field serialised, so swap it in the text.
        text = stamped.model_dump_json(exclude_none=True)
        name = wire_name(stamped.type, self.dialect)
        if name == stamped.type:
            return text
        prefix = f'{{"type":"{stamped.type}"'
        if not text.startswith(prefix):
            raise AssertionError(f"serialised {stamped.type} does not start with its type")
        return f'{{"type":"{name}"' + text[len(prefix) :]
