"""The runner's side of the edge contract: the sockets a session is attached to, and what it takes from them.

A session is attached to one socket at a time (a resumed session to a new one): a JSON socket
(`SessionSocket`, an edge's `Connection` on `/v1/realtime`), whose text frames the runner parses and to
which it sends rendered text, or an in-process edge (`edge.EventSocket`: Moshi, a WebRTC call), which hands
it typed events and takes event objects. `Attachment` is one such socket with what the session's attachment
job (`server.attaching`) keeps for it: the reader or the push callback, the outbound queue and writer (or
the direct send), the messages held behind a `session.update` being prepared, and the first message's
deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from duplexkit.protocol import client_events as ce
from duplexkit.protocol import server_events as se
from duplexkit.protocol.dialects import Dialect
from duplexkit.protocol.errors import ProtocolError
from duplexkit.protocol.wire import ServerEventStamper
from duplexkit.server.edge import DirectSend, EventSocket, SocketClosed


class SessionSocket(Protocol):
    """What the runner needs of a JSON socket (an edge's `Connection` on `/v1/realtime`): `receive` returns
    a text frame to parse, or `None` once the peer is gone, and `close_code` then says how it went
    (`edge.Connection.close_code`); a send to a peer that is gone raises `SocketClosed`. An in-process
    edge is an `edge.EventSocket` instead: typed events both ways."""

    async def receive(self) -> str | bytes | None: ...

    @property
    def close_code(self) -> int | None: ...

    async def send_text(self, data: str) -> None: ...

    async def close(self, code: int = 1000) -> None: ...


Inbound = str | bytes | ce.ClientEventBase | ProtocolError | None
"""One message an attachment hands the runner: a JSON socket's text frame (parsed by the runner), an
in-process edge's typed event or coded refusal (`edge.EventSocket`), or `None`: the peer is gone."""
Outbound = str | se.ServerEventBase
"""One thing an attachment sends: a rendered text frame (a JSON socket) or a stamped event (an
`EventSocket`)."""

_EVENT_BYTES = 256
"""What an event object counts against the byte bounds besides its audio (a nominal size: it is not text)."""


def message_size(message: str | bytes | ce.ClientEventBase | se.ServerEventBase | ProtocolError) -> int:
    """Bytes a message counts against the runner's bounds: a text frame its length; an event object its
    audio (`pcm16`: 2 bytes a sample) plus `_EVENT_BYTES`."""
    if isinstance(message, (str, bytes)):
        return len(message)
    if isinstance(message, ce.InputAudioBufferAppend):
        return _EVENT_BYTES + len(message.payload.data)
    if isinstance(message, se.ResponseOutputAudioDelta) and message.audio is not None:
        return _EVENT_BYTES + len(message.audio.data)
    return _EVENT_BYTES


@dataclass(frozen=True, slots=True)
class FirstMessage:
    """A connection's first message, read before admission (`None`: none came within the config timeout)."""

    message: str | bytes | None


@dataclass(eq=False)
class Attachment:
    """One socket the session is attached to: a JSON socket, or an in-process edge (`edge.EventSocket`,
    `events`). Its messages are handed to the runner as they arrive by a socket that pushes them
    (`edge.PushReceive`), else read by a reader task. Events go straight to a socket whose sends never wait
    (`edge.DirectSend`); any other socket gets an outbound queue and a writer task."""

    ws: SessionSocket | EventSocket
    generation: int
    outbound: asyncio.Queue[Outbound | None] = field(default_factory=asyncio.Queue)
    outbound_bytes: int = 0
    reader: asyncio.Task[None] | None = None
    """A socket that is read (not `edge.PushReceive`): the task reading it."""
    writer: asyncio.Task[None] | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    direct: DirectSend | None = None
    reading: bool = True
    """Its messages are still handled (not after the peer is gone, the first message's deadline passed, or
    the attachment ended)."""
    updating: asyncio.Task[None] | None = None
    """A `session.update`'s asynchronous part (the model's prepare); the messages after it wait in `held`."""
    held: deque[Inbound] = field(default_factory=deque)
    held_bytes: int = 0
    first_deadline: asyncio.TimerHandle | None = None
    """A new session must be opened before this fires (`config_timeout_s`; `Attachments.start`)."""

    events: EventSocket | None = None
    """The socket, when it is an in-process edge (it takes event objects, not text)."""
    text: SessionSocket | None = None
    """The socket, when it is a JSON socket."""

    def __post_init__(self) -> None:
        if isinstance(self.ws, EventSocket):
            self.events = self.ws
            return
        self.text = self.ws
        if isinstance(self.ws, DirectSend):
            self.direct = self.ws

    def send(self, message: Outbound) -> None:
        """Send a text frame (a JSON socket) or a stamped event (an `EventSocket`)."""
        if self.direct is not None:
            assert type(message) is str
            with contextlib.suppress(SocketClosed):  # the peer is gone: the reader sees the loss
                self.direct.send_now(message)
            return
        self.outbound_bytes += message_size(message)
        self.outbound.put_nowait(message)

    async def receive(self) -> Inbound:
        """The socket's next message (a socket that does not push them)."""
        if self.events is not None:
            return await self.events.receive_event()
        assert self.text is not None
        return await self.text.receive()

    async def write(self, message: Outbound) -> None:
        """Hand one queued message to the socket (the writer task); raises `SocketClosed`."""
        if self.events is not None:
            assert isinstance(message, se.ServerEventBase)
            await self.events.send_event(message)
            return
        assert type(message) is str and self.text is not None
        await self.text.send_text(message)

    def cancel_first_deadline(self) -> None:
        if self.first_deadline is not None:
            self.first_deadline.cancel()
            self.first_deadline = None

    @property
    def backlog(self) -> int:
        """Bytes sent to this socket that its peer has not taken yet (what the slow-client bound counts)."""
        return self.direct.buffered_bytes if self.direct is not None else self.outbound_bytes


async def refuse(websocket: SessionSocket, error: ProtocolError, dialect: Dialect) -> None:
    """Answer a connection with one coded error (a handshake error in `dialect`) and close it."""
    with contextlib.suppress(Exception):
        event = se.error_event(error.code, error.message, param=error.param, event_id=error.event_id)
        await websocket.send_text(ServerEventStamper(dialect).encode(event))
        await websocket.close(1000)
