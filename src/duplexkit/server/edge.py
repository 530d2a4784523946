"""What an I/O edge and the framework-neutral core exchange, and what a session's runner takes from a socket.

A transport edge (`server.picows`, `server.websockets`, `server.asgi`) turns its framework's objects into
these and back: an accepted WebSocket is a `Connection`, a POST (the WebRTC offer) is an `HttpRequest`, a
plain HTTP answer is an `HttpResponse`. The core (`server.service`) never imports a framework, so every
rule it holds (auth, dialects, admission, resume, the routes' payloads) is the same on every edge.

A session's runner (`server.runner`) is attached to one of two kinds of socket. A `Connection` on
`/v1/realtime` carries the realtime JSON events: the runner parses its text and renders its events
(`protocol.wire`). An in-process edge whose wire is something else (`server.moshi`: Moshi's binary frames;
`server.webrtc.call`: a call's tracks and data channel) is an `EventSocket`: it hands the runner typed
client events and takes the session's event objects, so audio stays samples and no JSON or base64 is made
or read between its socket and the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from duplexkit.protocol.client_events import ClientEventBase
    from duplexkit.protocol.errors import ProtocolError
    from duplexkit.protocol.server_events import ServerEventBase


class SocketClosed(Exception):
    """A send found the peer gone (each edge maps its framework's own disconnect errors to this)."""


class EdgeTaskFailed(Exception):
    """An in-process edge's own task raised (`task`: its name; the cause: its exception). The edge's
    `receive_event` raises this, and the session ends with `internal_error` as for a task of its own
    (`server.supervision`)."""

    def __init__(self, task: str) -> None:
        super().__init__(f"the edge's {task} task failed")
        self.task = task


NO_CLOSE_FRAME = 1006
"""The close code an edge reports for a connection lost without a close frame (RFC 6455: abnormal)."""
NO_STATUS = 1005
"""A close frame without a code (a browser's `ws.close()`)."""


def left_on_purpose(close_code: int | None) -> bool:
    """Whether a peer that is gone closed its connection itself, with a close frame (1000, 1001, 1005 for
    one without a code, or any other code it chose), rather than losing it (a reset, a timeout: 1006). A
    client that left on purpose will not come back for its session."""
    return close_code is not None and close_code != NO_CLOSE_FRAME


class Connection(Protocol):
    """An accepted WebSocket. `receive` returns the next message (a text frame as `str`, a binary one as
    `bytes`) or `None` once the peer is gone; it never raises for a disconnect. `close_code` then says how
    it went (see `left_on_purpose`). `send_text` and `send_bytes` raise `SocketClosed` when the peer is
    gone."""

    async def receive(self) -> str | bytes | None: ...

    @property
    def close_code(self) -> int | None:
        """After `receive` returned `None`: the code of the peer's close frame (`NO_STATUS` if it had
        none), or `NO_CLOSE_FRAME` when the connection was lost without one. `None` before."""
        ...

    async def send_text(self, data: str) -> None: ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def close(self, code: int = 1000, reason: str = "") -> None: ...


@runtime_checkable
class PushReceive(Protocol):
    """What a `Connection` offers when its library hands over each message as it arrives (picows calls
    back per frame): the runner then handles each message in that callback, with no reader task."""

    def deliver(self, sink: Callable[[str | bytes | None], None]) -> None:
        """From now on, hand each message to `sink` as it arrives, in order (those already received first),
        and `None` once the peer is gone (`close_code` says how); `receive` is not called after this."""
        ...


@runtime_checkable
class DirectSend(Protocol):
    """What a `Connection` offers when its transport takes a message without ever waiting (picows writes
    into the socket's buffer): the runner then sends each event at once, with no outbound queue and no
    writer task, and applies its slow-client bound to what the transport still holds."""

    def send_now(self, data: str) -> None:
        """Write one text message now; raises `SocketClosed` when the peer is gone."""
        ...

    @property
    def buffered_bytes(self) -> int:
        """Bytes written that the peer has not taken yet (the transport's write buffer)."""
        ...


@runtime_checkable
class EventSocket(Protocol):
    """The edge contract of an in-process edge (Moshi's `/api/chat`, a WebRTC call, any edge whose wire is
    not the realtime JSON): typed events both ways, in order.

    `receive_event` returns the client's next event, parsed by the edge from its own wire (audio decoded
    into `InputAudioBufferAppend.of_audio`), or the `ProtocolError` the runner answers for input the edge
    could not make an event of, or `None` once the peer is gone (`close_code` then says how, as
    `Connection.close_code`); it raises `EdgeTaskFailed` when a task of the edge's own failed. The first
    event of a session opened with `autostart=0` is its `session.update`. `send_event` takes each of the
    session's events, stamped (`server_event_seq`), in canonical form (GA names, audio in
    `ResponseOutputAudioDelta.audio`): the edge renders it on its own wire, or drops it; it raises
    `SocketClosed` when the peer is gone."""

    async def receive_event(self) -> ClientEventBase | ProtocolError | None: ...

    @property
    def close_code(self) -> int | None: ...

    async def send_event(self, event: ServerEventBase) -> None: ...

    async def close(self, code: int = 1000) -> None: ...


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A complete plain HTTP answer (no streaming): status, body, its media type and extra headers."""

    status: int
    body: bytes
    media_type: str
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """A complete POST with its body (no streaming): the query, the headers (lower-case names, repeated
    headers joined with ", ") and the body, cut at `MAX_POST_BYTES` (`body_too_large` then says so);
    `query_string`: the query as it came, undecoded (what Twilio signs)."""

    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes
    body_too_large: bool = False
    query_string: str = ""


MAX_POST_BYTES = 256 * 1024
"""The largest POST body an edge reads (an SDP offer is a few KiB; the session object rides along)."""


WebSocketRoute = Literal["realtime", "moshi", "twilio"]

WEBSOCKET_ROUTES: Mapping[str, WebSocketRoute] = {
    "/v1/realtime": "realtime",
    "/v1/duplex": "realtime",
    "/api/chat": "moshi",
    "/v1/twilio/stream": "twilio",
}
"""WebSocket paths and what each serves: JSON realtime events (`/v1/duplex` is an alias), Moshi frames, or
a Twilio Media Stream (a phone call)."""

BACKLOG = 2048
"""Pending TCP connections a listening socket holds (a thousand clients may connect at once)."""

HANDSHAKE_TIMEOUT_S = 10.0
"""How long a new connection may take to send its whole request (as `websockets`'s `open_timeout`)."""

QUIET_PATHS = frozenset({"/healthz"})
"""Paths polled by load balancers and pools every few seconds: each edge logs their requests at DEBUG."""
