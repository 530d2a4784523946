"""The interface every client protocol adapter implements.

`DuplexClient` speaks one canonical event model (our duplex protocol's JSON events) and owns the lifecycle,
the pacing and the collector. An adapter only translates: each outgoing canonical event into the frames
its protocol sends (`encode`, possibly none), and each incoming message into canonical events (`decode`),
so the collector and the drain tracker read every server the same way. It is Sans-I/O: no sockets.
"""

from __future__ import annotations

import urllib.parse
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal

from duplexkit.client.collector import Placement
from duplexkit.client.connection import ServerCapabilities

Wire = str | bytes
"""One message: text (JSON) or binary (a WebSocket frame; on a WebRTC call, audio)."""


class ProtocolAdapter(ABC):
    name: ClassVar[str]
    ready_event: ClassVar[str] = "session.created"
    """The event that answers `configure`."""
    admits_with_ready: ClassVar[bool] = False
    """The server sends `ready_event` only once the session has a slot (Moshi's one-lock server keeps
    other sockets open and silent until then): the wait for it is a capacity wait, not a configure."""
    sends_commit: bool = True
    """The client's commit goes on the wire and is acknowledged (`input_audio_buffer.committed`); not so
    where the server decides turns by itself (Moshi, which has no commit; server VAD)."""
    closes_with_event: ClassVar[bool] = True
    """`session.close` is answered with `session.closed`; otherwise closing the socket is the close."""
    acks_playback: ClassVar[bool] = True
    """The protocol has `playback.ack`."""
    carries_server_timing: ClassVar[bool] = True
    """The protocol can carry the server's request-start metrics (else only client-receive timing exists)."""
    transport: ClassVar[Literal["websocket", "webrtc"]] = "websocket"
    """What carries the messages: a WebSocket at `url`, or a WebRTC call to the calls endpoint at `url`
    (`client.webrtc`: text on its data channel, binary on its audio tracks)."""
    placement: ClassVar[Placement] = "arrival"
    """Where its output sits on the input timeline by default (`collector.Placement`)."""

    def url(self, url: str, *, model: str | None) -> str:
        """The WebSocket URL to open for `url` (http(s) → ws(s); `model` as a query parameter)."""
        parts = _ws_parts(url)
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        if model:
            query = [(k, v) for k, v in query if k != "model"] + [("model", model)]
        path = parts.path if parts.path not in ("", "/") else "/v1/realtime"
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, urllib.parse.urlencode(query), ""))

    def headers(self) -> dict[str, str]:
        """Extra handshake headers the protocol needs."""
        return {}

    @abstractmethod
    def encode(self, event: dict[str, Any]) -> list[Wire]:
        """The frames that carry one canonical client event (`[]` when the protocol has no equivalent
        that needs sending). Raises `ValueError` for an event the protocol cannot express at all."""

    @abstractmethod
    def decode(self, message: Wire) -> list[dict[str, Any]] | None:
        """The canonical events one server message carries; `None` for a message that is not readable."""

    def capabilities(self, session: dict[str, Any]) -> ServerCapabilities:
        """What a `session.created`/`session.updated` session object says the server can do."""
        return ServerCapabilities.from_session(session)

    def wire_report(self) -> dict[str, Any] | None:
        """What the protocol itself lets a client count about the session (Moshi: frames sent, received
        and missed); `None` when it has nothing to add."""
        return None


def _ws_parts(url: str) -> urllib.parse.SplitResult:
    parts = urllib.parse.urlsplit(url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme.lower())
    if scheme is None or not parts.netloc:
        raise ValueError(f"expected a ws://, wss://, http:// or https:// URL with a host, got {url!r}")
    return parts._replace(scheme=scheme)
