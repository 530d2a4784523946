"""JSON text ↔ typed events, for the sockets that carry JSON: the client-event parser, the server-event
stamper and renderer.

`parse_client_event` is total: whatever it is given, it returns a typed event or raises `ProtocolError`
with a wire code, never anything else; it reads the text (`client_object`) and hands the object to the
one table of event types (`client_events.validate_client_event`). The hot event, `input_audio_buffer.append`
(5-12.5 a second per session), takes its fast path when it has the common shape
(`InputAudioBufferAppend.from_plain`). `ServerEventStamper` gives each outgoing event its `event_id` and
the session's next `server_event_seq`; `EventRenderer` writes a stamped event as a JSON socket's text.
In-process edges (`server.moshi`, `server.webrtc`'s track) never come here: they hand the runner typed
events and take event objects (`server.edge.EventSocket`).
"""

from __future__ import annotations

import itertools
import json
import secrets
from json.encoder import encode_basestring
from typing import Any

from pydantic_core import from_json

from duplexkit.protocol.audio import AudioFormat
from duplexkit.protocol.client_events import ClientEventBase, validate_client_event
from duplexkit.protocol.dialects import Dialect, render, reshapes, resolve_alias, wire_name
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.protocol.server_events import (
    ConversationItemAdded,
    ConversationItemDone,
    InputAudioBufferCommitted,
    ResponseListen,
    ServerEventBase,
    SessionCreated,
)

MAX_EVENT_BYTES = 15 * 1024 * 1024
"""Largest client frame accepted (vLLM-Omni's limit); larger frames are answered with `event_too_large`."""
MAX_JSON_DEPTH = 200
"""The deepest nesting of arrays and objects a client's JSON may have (pydantic-core's parser's own limit;
the fallback parser is held to it too): deeper text is `invalid_json`, never a `RecursionError`."""


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
        value = json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(ErrorCode.INVALID_JSON, f"frame is not valid JSON: {exc}") from None
    if _nested_deeper_than(value, MAX_JSON_DEPTH):
        raise ProtocolError(ErrorCode.INVALID_JSON, f"frame nests deeper than {MAX_JSON_DEPTH} levels")
    return value


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` deep in `value` (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def load_json(data: str | bytes, *, max_bytes: int) -> Any:
    """One client message's JSON values, within bounds: at most `max_bytes` (UTF-8; `event_too_large`)
    and `MAX_JSON_DEPTH` levels deep (`invalid_json`). Raises only `ProtocolError`."""
    size = (
        len(data)
        if isinstance(data, bytes) or len(data) * 4 <= max_bytes
        else len(data.encode("utf-8", "replace"))
    )
    if size > max_bytes:
        raise ProtocolError(ErrorCode.EVENT_TOO_LARGE, f"event is {size} bytes; the limit is {max_bytes}")
    return _loads(data)


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
    obj = client_object(data, max_bytes=max_bytes, dialect=dialect)
    return validate_client_event(obj, input_audio_format)


def client_object(
    data: str | bytes, *, max_bytes: int = MAX_EVENT_BYTES, dialect: Dialect = Dialect.GA
) -> dict[str, Any]:
    """One client frame as the event object `client_events.validate_client_event` takes: within
    `max_bytes`, JSON within `MAX_JSON_DEPTH`, an object with a `type`, the dialect's alias resolved.
    Raises only `ProtocolError`. (A WebRTC call pins a `session.update`'s audio terms between the two
    steps.)"""
    obj = load_json(data, max_bytes=max_bytes)
    if not isinstance(obj, dict):
        raise ProtocolError(
            ErrorCode.NOT_AN_OBJECT, f"an event must be a JSON object, not {type(obj).__name__}"
        )
    event_id = obj.get("event_id") if isinstance(obj.get("event_id"), str) else None
    if "type" not in obj:
        raise ProtocolError(ErrorCode.MISSING_FIELD, "event has no 'type'", param="type", event_id=event_id)
    try:
        return resolve_alias(obj, dialect)
    except ProtocolError as exc:
        exc.event_id = event_id
        raise


class ServerEventStamper:
    """Stamps one session's events: a unique `event_id` and a gap-free increasing `server_event_seq`
    (`stamp`); `encode` also renders them as the JSON text of the connection's dialect (`EventRenderer`)."""

    def __init__(self, dialect: Dialect = Dialect.GA) -> None:
        self.dialect = dialect
        self._seq = itertools.count(1)
        self._prefix = f"evt_{secrets.token_hex(6)}_"
        self._renderer: EventRenderer | None = None
        """Made by the first `encode`: a session's runner stamps only, and renders with its own."""

    def stamp(self, event: ServerEventBase) -> ServerEventBase:
        """Assign the next sequence number (in place) and return the event."""
        seq = next(self._seq)
        # Written into the model's dict: pydantic's `__setattr__` (no validation on assignment here) costs
        # ~0.5 µs a field, twice per event.
        fields = event.__dict__
        fields["server_event_seq"] = seq
        fields["event_id"] = f"{self._prefix}{seq}"
        return event

    def encode(self, event: ServerEventBase) -> str:
        """Stamp, then render as JSON text in the dialect (`EventRenderer.render`)."""
        if self._renderer is None:
            self._renderer = EventRenderer(self.dialect)
        return self._renderer.render(self.stamp(event))


class EventRenderer:
    """Renders one JSON socket's stamped events as JSON text in its dialect: where audio samples become
    base64 (`se.ResponseOutputAudioDelta.audio`) and event objects become text. It sees the socket's
    events in order (whether `session.created` went out decides how vLLM-Omni's errors look)."""

    def __init__(self, dialect: Dialect = Dialect.GA) -> None:
        self.dialect = dialect
        self._opened = False
        self._listen_name = wire_name("response.listen", dialect)

    def render(self, stamped: ServerEventBase) -> str:
        """The JSON text frame of one stamped event in the dialect; unobserved (`None`) values are omitted,
        except an item's `previous_item_id`, whose `null` says "first in the conversation" (OpenAI's
        insertion rule: a client places an item without one where it arrives)."""
        if type(stamped) is ResponseListen:  # one per unit per session: written by hand when it can be
            text = _listen_json(stamped, self._listen_name)
            if text is not None:
                return text
        opened, self._opened = self._opened, self._opened or isinstance(stamped, SessionCreated)
        placed = isinstance(stamped, _PLACED)
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


_PLACED = (ConversationItemAdded, ConversationItemDone, InputAudioBufferCommitted)
"""Items whose `previous_item_id` is sent even when `null`."""


def _listen_json(event: ResponseListen, name: str) -> str | None:
    """`event` as `model_dump_json(exclude_none=True)` writes it, under the dialect's `name`, or `None`
    when it holds something only the serialiser should write (extra fields; a number it might format
    differently). The general path costs ~10 µs of a ~60 µs unit; `tests/protocol/test_listen_json.py`
    holds the two to the same text."""
    fields = event.__dict__
    end_ms = fields["unit_end_ms"]
    if event.__pydantic_extra__ or not (end_ms is None or (type(end_ms) is float and _plain_float(end_ms))):
        return None
    info = fields["response"].__dict__
    metadata = info["metadata"].__dict__
    text = f'{{"type":{_string(name)},"event_id":{_string(fields["event_id"])},"server_event_seq":'
    text += str(fields["server_event_seq"])
    if fields["response_id"] is not None:
        text += f',"response_id":{_string(fields["response_id"])}'
    text += ',"response":{'
    if info["id"] is not None:
        text += f'"id":{_string(info["id"])},'
    text += f'"status":{_string(info["status"])},"metadata":{{"reason":{_string(metadata["reason"])}'
    text += ',"model_listen":true}}' if metadata["model_listen"] else ',"model_listen":false}}'
    if end_ms is not None:
        text += f',"unit_end_ms":{end_ms!r}'
    return text + "}"


def _plain_float(value: float) -> bool:
    """Whether `repr` writes `value` as the serialiser does: plain decimals (both switch to exponents,
    spelt differently, for very large and very small magnitudes)."""
    return value == 0.0 or 1e-4 <= abs(value) < 1e15


_string = encode_basestring
"""A JSON string as the serialiser writes it: non-ASCII as is, `"`, `\\` and control characters escaped."""
