"""`PicowsEdge`: the core (`server.service.DuplexServer`) served by `picows` (Cython framing on asyncio).

Routing happens in picows's listener factory, before any upgrade: a WebSocket path is authorized there
(`DuplexServer.authorize`; refused: HTTP 403) and accepted with the chosen subprotocol when the client
offered it; a plain GET gets its route's answer from `DuplexServer.http_routes`; anything else gets 404.
picows reads only bodiless GETs, so each connection starts on `_Sniffer`: a POST (the WebRTC signalling)
is read (`server.http1.PostSplitter`) and answered there from `DuplexServer.post_routes`; any other
connection is handed to picows's protocol with the bytes already read.

An accepted connection is a `_Listener`, which is also its `edge.Connection`: picows calls `on_ws_frame`
for each frame. A session's runner takes the messages as they arrive (`edge.PushReceive.deliver`: the
runner is called back per message, with no reader task; before that, and for `receive`, they wait in a
deque, and past 16 of them the socket is not read) and writes each event at once
(`edge.DirectSend.send_now`: picows's synchronous write into the transport's buffer, whose size
`buffered_bytes` reports, so a client that stops reading is dropped by the runner's outbound bound:
`client_too_slow`). `send_text` and `send_bytes` await only while the transport is over its high-water
mark.
"""

from __future__ import annotations

import asyncio
import http
import logging
import socket
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, cast
from urllib.parse import parse_qsl

from multidict import CIMultiDict
from picows import (
    WSCloseCode,
    WSFrame,
    WSListener,
    WSMsgType,
    WSProtocolError,
    WSTransport,
    WSUpgradeRequest,
    WSUpgradeResponse,
    WSUpgradeResponseWithListener,
)
from picows.picows import WSAutoPingStrategy, WSProtocol  # type: ignore[attr-defined]

from duplexkit.server.edge import (
    BACKLOG,
    HANDSHAKE_TIMEOUT_S,
    NO_CLOSE_FRAME,
    NO_STATUS,
    QUIET_PATHS,
    WEBSOCKET_ROUTES,
    HttpRequest,
    HttpResponse,
    SocketClosed,
    WebSocketRoute,
)
from duplexkit.server.http1 import AtDebug, PostSplitter, joined, parse_head
from duplexkit.server.service import WS_MAX_FRAME_BYTES, DuplexServer

_LOG = logging.getLogger(__name__)
"""One line per plain HTTP answer (`GET /healthz 200`), at DEBUG for `QUIET_PATHS`."""
_PICOWS_LOG = AtDebug(logging.getLogger("picows.server"), {})
"""picows's own per-connection lines (accepted, disconnected) are DEBUG chatter here."""

_QUEUE_HIGH = 16
"""Received messages waiting for `receive` before the socket stops being read (as `websockets`'s
`max_queue`); reading resumes at `_QUEUE_LOW`."""
_QUEUE_LOW = 4

_TEXT, _BINARY, _CONTINUATION, _CLOSE = (
    WSMsgType.TEXT,
    WSMsgType.BINARY,
    WSMsgType.CONTINUATION,
    WSMsgType.CLOSE,
)


def _response(answer: HttpResponse) -> WSUpgradeResponse:
    response = WSUpgradeResponse()
    response.version = b"HTTP/1.1"
    response.status = http.HTTPStatus(answer.status)
    response.headers = CIMultiDict(answer.headers)
    response.headers["Content-Type"] = answer.media_type
    if not answer.body:  # picows adds Content-Length only for a body
        response.headers["Content-Length"] = "0"
    response.body = answer.body
    return response


def _text(status: http.HTTPStatus, body: str) -> HttpResponse:
    return HttpResponse(status, body.encode(), "text/plain; charset=utf-8")


class _Listener(WSListener):
    """One accepted WebSocket: picows's callbacks on one side, an `edge.Connection` on the other. It
    pushes each message to the runner from picows's callback (`edge.PushReceive`) and writes events into
    the transport at once (`edge.DirectSend`): a session on this edge runs no reader or writer task."""

    def __init__(
        self, edge: PicowsEdge, route: WebSocketRoute, query: dict[str, str], headers: dict[str, str]
    ):
        super().__init__()
        self._edge = edge
        self._route = route
        self._query = query
        self._headers = headers
        self._transport: WSTransport | None = None
        self._messages: deque[str | bytes | None] = deque()
        """Received messages; `None` last once the peer is gone."""
        self._waiter: asyncio.Future[None] | None = None
        self._sink: Callable[[str | bytes | None], None] | None = None
        """Where messages go as they arrive, once `deliver` is called (until then they queue)."""
        self._fragments: bytearray | None = None
        """A fragmented message so far (`None` between messages)."""
        self._fragmented_text = False
        self._reading_paused = False
        self._writable: asyncio.Future[None] | None = None
        """Set while the transport is over its high-water mark; done when it drains (or is lost)."""
        self._open = True
        """Sends go out: no close frame sent, the transport not lost."""
        self._peer_code: int | None = None
        self._gone = False
        """The peer is gone (`None` delivered, or queued last)."""
        self._lost = asyncio.get_running_loop().create_future()
        self.close_code: int | None = None

    # --- picows's side ------------------------------------------------------------------------------

    def on_ws_connected(self, transport: WSTransport) -> None:
        self._transport = transport
        self._edge.serve(self, self._route, self._query, self._headers)

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if frame.fin and self._fragments is None:
            if kind is _TEXT:
                self._deliver(_utf8(frame.get_payload_as_bytes()))
                return
            if kind is _BINARY:
                self._deliver(frame.get_payload_as_bytes())
                return
        if kind is _CLOSE:
            self._on_close_frame(transport, frame.get_payload_as_bytes())
        elif kind is _TEXT or kind is _BINARY or kind is _CONTINUATION:
            self._on_fragment(frame)  # (pings are answered by picows, pongs need nothing)

    def _on_fragment(self, frame: WSFrame) -> None:
        """A piece of a fragmented message (RFC 6455 §5.4): joined, held to the one message cap."""
        starts = frame.msg_type is not _CONTINUATION
        if starts != (self._fragments is None):
            raise WSProtocolError(
                WSCloseCode.PROTOCOL_ERROR, "unexpected continuation or interleaved message"
            )
        if self._fragments is None:
            self._fragments = bytearray()
            self._fragmented_text = frame.msg_type is _TEXT
        self._fragments += frame.get_payload_as_memoryview()
        if len(self._fragments) > WS_MAX_FRAME_BYTES:
            raise WSProtocolError(WSCloseCode.MESSAGE_TOO_BIG, "message too big")
        if frame.fin:
            payload = bytes(self._fragments)
            self._fragments = None
            self._deliver(_utf8(payload) if self._fragmented_text else payload)

    def _on_close_frame(self, transport: WSTransport, payload: bytes) -> None:
        """The peer's close: answered (or it answers ours), then the server drops TCP (RFC 6455 §7.1.1)."""
        self._peer_code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else NO_STATUS
        if self._open:
            self._open = False
            transport.send_close(WSCloseCode(1000 if self._peer_code == NO_STATUS else self._peer_code))
        transport.disconnect()
        self._deliver(None)

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self._open = False
        self._deliver(None)
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        if not self._lost.done():
            self._lost.set_result(None)

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    def _deliver(self, message: str | bytes | None) -> None:
        """A received message (`None`: the peer is gone; only the first `None` counts)."""
        if self._gone:
            return
        if message is None:
            self._gone = True
            self.close_code = NO_CLOSE_FRAME if self._peer_code is None else self._peer_code
        if self._sink is not None:
            self._sink(message)
            return
        self._messages.append(message)
        self._wake()
        if len(self._messages) >= _QUEUE_HIGH and not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.underlying_transport.pause_reading()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # --- the core's side (`edge.Connection`) --------------------------------------------------------

    async def receive(self) -> str | bytes | None:
        while not self._messages:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        message = self._messages[0]
        if message is None:
            return None
        self._messages.popleft()
        if self._reading_paused and len(self._messages) <= _QUEUE_LOW:
            self._resume_reading()
        return message

    def deliver(self, sink: Callable[[str | bytes | None], None]) -> None:
        self._sink = sink
        while self._messages:  # those received before, in order (a `None` is the last)
            sink(self._messages.popleft())
        if self._reading_paused:
            self._resume_reading()

    def send_now(self, data: str) -> None:
        self._send(_TEXT, data.encode())

    @property
    def buffered_bytes(self) -> int:
        assert self._transport is not None
        return int(self._transport.underlying_transport.get_write_buffer_size())

    def _resume_reading(self) -> None:
        self._reading_paused = False
        assert self._transport is not None
        if not self._transport.is_disconnected:
            self._transport.underlying_transport.resume_reading()

    async def send_text(self, data: str) -> None:
        if self._writable is not None:
            await self._writable
        self._send(_TEXT, data.encode())

    async def send_bytes(self, data: bytes) -> None:
        if self._writable is not None:
            await self._writable
        self._send(_BINARY, data)

    def _send(self, kind: WSMsgType, data: bytes) -> None:
        if not self._open:
            raise SocketClosed("the WebSocket is closed")
        assert self._transport is not None
        self._transport.send(kind, data)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Send our close frame and wait (at most `close_timeout_s`) for the peer's answer; then drop TCP."""
        transport = self._transport
        assert transport is not None
        if self._open:
            self._open = False
            transport.send_close(WSCloseCode(code), reason.encode())
        if self._reading_paused:  # the peer's answer must be read
            self._resume_reading()
        try:
            await asyncio.wait_for(asyncio.shield(self._lost), self._edge.close_timeout_s)
        except TimeoutError:
            transport.disconnect(graceful=False)


def _utf8(payload: bytes) -> str:
    try:
        return payload.decode()
    except UnicodeDecodeError:
        raise WSProtocolError(WSCloseCode.INVALID_TEXT, "invalid UTF-8 in a text message") from None


class _Sniffer(asyncio.Protocol):
    """A connection's first protocol: reads and answers a POST itself; hands anything else to picows."""

    def __init__(self, edge: PicowsEdge) -> None:
        self._edge = edge
        self._splitter = PostSplitter()
        self._transport: asyncio.Transport | None = None
        self._timeout: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # (uvloop's is not an asyncio subclass)
        self._timeout = asyncio.get_running_loop().call_later(HANDSHAKE_TIMEOUT_S, self._transport.abort)
        self._edge.pending.add(self._transport)

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        passed = self._splitter.feed(data)
        if self._splitter.state == "through":
            self._hand_over(passed)
            return
        if self._splitter.expects_continue:
            self._splitter.expects_continue = False
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if passed:  # the POST is in: its answer is the connection's last word
            self._stop_timeout()
            self._transport.pause_reading()
            self._edge.answer_post(self._transport, passed, self._splitter)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timeout()
        if self._transport is not None:
            self._edge.pending.discard(self._transport)

    def _stop_timeout(self) -> None:
        if self._timeout is not None:
            self._timeout.cancel()
            self._timeout = None

    def _hand_over(self, data: bytes) -> None:
        """picows's protocol takes the transport over and gets the bytes read so far."""
        assert self._transport is not None
        self._stop_timeout()
        self._edge.pending.discard(self._transport)
        protocol = self._edge.ws_protocol()
        self._transport.set_protocol(protocol)
        protocol.connection_made(self._transport)
        view = memoryview(data)
        while view and not self._transport.is_closing():
            buffer = protocol.get_buffer(len(view))
            n = min(len(buffer), len(view))
            buffer[:n] = view[:n]
            protocol.buffer_updated(n)
            view = view[n:]


class PicowsEdge:
    """The picows edge on `sock`; `stop` closes the listener and whatever connections remain."""

    def __init__(self, duplex: DuplexServer) -> None:
        self._duplex = duplex
        self.close_timeout_s = duplex.config.limits.close_timeout_s
        self._server: asyncio.Server | None = None
        self._listeners: set[_Listener] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.pending: set[asyncio.Transport] = set()
        """Connections whose request is still being read (the sniffer's): aborted by `stop`."""

    @classmethod
    async def start(cls, duplex: DuplexServer, sock: socket.socket, *, log_level: str) -> PicowsEdge:
        """Serve `duplex` on the bound `sock` (`log_level` is the caller's logging config: unused)."""
        edge = cls(duplex)
        loop = asyncio.get_running_loop()
        edge._server = await loop.create_server(lambda: _Sniffer(edge), sock=sock, backlog=BACKLOG)
        return edge

    def ws_protocol(self) -> Any:
        """picows's protocol for one connection, configured as `picows.ws_create_server` would."""
        return WSProtocol(
            None,  # host and port: a client's
            None,  # path: a client's
            False,  # the server side
            self._route,
            _PICOWS_LOG,
            True,  # an exception in a callback closes the connection (1011)
            HANDSHAKE_TIMEOUT_S,
            False,  # no pings of ours (as on every edge)
            20,
            20,
            WSAutoPingStrategy.PING_WHEN_IDLE,
            True,  # pings are answered
            WS_MAX_FRAME_BYTES,  # a larger frame is refused with 1009
            None,  # extra headers: a client's
            16 * 1024,  # the read buffer's initial size
        )

    def _route(self, request: WSUpgradeRequest) -> WSUpgradeResponseWithListener:
        """A GET's answer, before any upgrade: the listener of an authorized WebSocket, or a plain answer."""
        path, _, query = request.path.decode("latin-1").partition("?")
        route = WEBSOCKET_ROUTES.get(path)
        if route is None:
            build = self._duplex.http_routes.get(path)
            answer = _text(http.HTTPStatus.NOT_FOUND, "Not Found\n") if build is None else build()
            return WSUpgradeResponseWithListener(
                self._answer(request.method.decode("latin-1"), path, answer), None
            )
        headers = joined(request.headers.items())
        subprotocol = self._duplex.authorize(headers, route)
        if subprotocol is False:
            refused = _text(http.HTTPStatus.FORBIDDEN, "unauthorized\n")
            return WSUpgradeResponseWithListener(
                self._answer(request.method.decode("latin-1"), path, refused), None
            )
        offered = {p.strip() for p in headers.get("sec-websocket-protocol", "").split(",")}
        extra = {"Sec-WebSocket-Protocol": subprotocol} if subprotocol in offered else None
        listener = _Listener(self, route, dict(parse_qsl(query, True)), headers)
        return WSUpgradeResponseWithListener(WSUpgradeResponse.create_101_response(extra), listener)

    @staticmethod
    def _answer(method: str, path: str, answer: HttpResponse) -> WSUpgradeResponse:
        """The answer in picows's form, logged (`QUIET_PATHS` at DEBUG)."""
        _LOG.log(
            logging.DEBUG if path in QUIET_PATHS else logging.INFO, "%s %s %d", method, path, answer.status
        )
        return _response(answer)

    def serve(
        self, listener: _Listener, route: WebSocketRoute, query: dict[str, str], headers: dict[str, str]
    ) -> None:
        """Run the core's session on an accepted connection; closed (1000) when it returns."""
        self._listeners.add(listener)

        async def run() -> None:
            try:
                await self._duplex.serve_websocket(route, listener, query, headers)
            except Exception:
                _LOG.exception("connection handler failed")
                await listener.close(1011)
            finally:
                await listener.close()
                self._listeners.discard(listener)

        self._track(run())

    def answer_post(self, transport: asyncio.Transport, head: bytes, splitter: PostSplitter) -> None:
        """Answer a POST read off `transport` by the sniffer, then close the connection."""

        async def run() -> None:
            method, target, headers = parse_head(head)
            path, _, query = target.partition("?")
            post = self._duplex.post_routes.get(path)
            if post is None:
                answer = _text(http.HTTPStatus.NOT_FOUND, "Not Found\n")
            else:
                request = HttpRequest(
                    dict(parse_qsl(query, True)), headers, splitter.body, splitter.too_large, query
                )
                try:
                    answer = await post(request)
                except Exception:
                    _LOG.exception("POST %s failed", path)
                    answer = _text(http.HTTPStatus.INTERNAL_SERVER_ERROR, "Internal Server Error\n")
            response = self._answer(method, path, answer)
            response.headers["Connection"] = "close"
            if not transport.is_closing():
                transport.write(response.to_bytes())
                transport.close()

        self._track(run())

    def _track(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        """Stop accepting, close what is left (1001) and wait for its handlers (the caller has drained the
        sessions already)."""
        assert self._server is not None
        self._server.close()
        for transport in list(self.pending):
            transport.abort()
        await asyncio.gather(*(listener.close(1001) for listener in list(self._listeners)))
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        await self._server.wait_closed()
