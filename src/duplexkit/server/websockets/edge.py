"""`WebSocketsEdge`: the core (`server.service.DuplexServer`) served by `websockets.asyncio.server`.

The handshake is answered in `process_request`, before any upgrade: a plain GET gets its route's answer
from `DuplexServer.http_routes` (the playground pages included, so every edge serves the same table), a
POST from `DuplexServer.post_routes` (the WebRTC signalling), an unknown path gets 404, and a refused API
key gets HTTP 403. The library reads only bodiless requests, so a POST's body is taken off the stream
before its parser sees the head (`server.http1.PostSplitter`). An authorized upgrade is accepted with the
subprotocol `DuplexServer.authorize` chose, and the accepted connection goes to
`DuplexServer.serve_websocket` as an `edge.Connection`. Each frame then costs one `recv` of the library's
connection, with no ASGI message in between.
"""

from __future__ import annotations

import http
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from duplexkit.server.edge import (
    BACKLOG,
    NO_CLOSE_FRAME,
    QUIET_PATHS,
    WEBSOCKET_ROUTES,
    HttpRequest,
    HttpResponse,
    SocketClosed,
    WebSocketRoute,
)
from duplexkit.server.http1 import AtDebug, PostSplitter, joined
from duplexkit.server.service import WS_MAX_FRAME_BYTES, DuplexServer


@dataclass(frozen=True, slots=True)
class _Upgrade:
    """What `process_request` decided for an upgrade, for the handler to serve."""

    route: WebSocketRoute
    subprotocol: str | None
    query: dict[str, str]
    headers: dict[str, str]


class _Connection(ServerConnection):
    """The library's connection, carrying its `_Upgrade` from the handshake to the handler (and a POST's
    body past the library's parser)."""

    upgrade: _Upgrade | None = None
    splitter: PostSplitter | None = None

    def data_received(self, data: bytes) -> None:
        if self.splitter is None:
            self.splitter = PostSplitter()
        data = self.splitter.feed(data)
        if self.splitter.expects_continue:
            self.splitter.expects_continue = False
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if data:
            super().data_received(data)


class _NativeConnection:
    """A `websockets` connection as an `edge.Connection` (`ConnectionClosed` mapped)."""

    __slots__ = ("_ws", "close_code")

    def __init__(self, ws: ServerConnection) -> None:
        self._ws = ws
        self.close_code: int | None = None

    async def receive(self) -> str | bytes | None:
        try:
            return await self._ws.recv()
        except ConnectionClosed as exc:
            self.close_code = exc.rcvd.code if exc.rcvd is not None else NO_CLOSE_FRAME
            return None

    async def send_text(self, data: str) -> None:
        try:
            await self._ws.send(data)
        except ConnectionClosed as exc:
            raise SocketClosed(str(exc)) from exc

    async def send_bytes(self, data: bytes) -> None:
        try:
            await self._ws.send(data)
        except ConnectionClosed as exc:
            raise SocketClosed(str(exc)) from exc

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await self._ws.close(code, reason)


def _response(answer: HttpResponse) -> Response:
    headers = Headers(answer.headers)
    headers["Content-Type"] = answer.media_type
    headers["Content-Length"] = str(len(answer.body))
    return Response(answer.status, http.HTTPStatus(answer.status).phrase, headers, answer.body)


class WebSocketsEdge:
    """The `websockets` edge on `sock`; `stop` closes the listener and whatever connections remain."""

    def __init__(self, duplex: DuplexServer, server: Server) -> None:
        self._duplex = duplex
        self._server = server

    @classmethod
    async def start(cls, duplex: DuplexServer, sock: socket.socket, *, log_level: str) -> WebSocketsEdge:
        """Serve `duplex` on the bound `sock` (`log_level` is the caller's logging config: unused)."""

        async def process_request(connection: ServerConnection, request: Request) -> Response | None:
            path, _, query = request.path.partition("?")
            if request.method == "POST":
                assert isinstance(connection, _Connection) and connection.splitter is not None
                post = duplex.post_routes.get(path)
                if post is None:
                    return connection.respond(http.HTTPStatus.NOT_FOUND, "Not Found\n")
                split = connection.splitter
                headers = joined(request.headers.raw_items())
                body = HttpRequest(dict(parse_qsl(query, True)), headers, split.body, split.too_large, query)
                return _response(await post(body))
            route = WEBSOCKET_ROUTES.get(path)
            if route is None:
                if path in QUIET_PATHS:
                    connection.protocol.logger = AtDebug(connection.protocol.logger, {})
                build = duplex.http_routes.get(path)
                if build is None:
                    return connection.respond(http.HTTPStatus.NOT_FOUND, "Not Found\n")
                return _response(build())
            headers = joined(request.headers.raw_items())
            subprotocol = duplex.authorize(headers, route)
            if subprotocol is False:
                return connection.respond(http.HTTPStatus.FORBIDDEN, "unauthorized\n")
            assert isinstance(connection, _Connection)
            connection.upgrade = _Upgrade(route, subprotocol, dict(parse_qsl(query, True)), headers)
            return None

        def select_subprotocol(
            connection: ServerConnection, offered: Sequence[Subprotocol]
        ) -> Subprotocol | None:
            assert isinstance(connection, _Connection) and connection.upgrade is not None
            chosen = connection.upgrade.subprotocol
            return Subprotocol(chosen) if chosen is not None and chosen in offered else None

        async def handler(connection: ServerConnection) -> None:
            assert isinstance(connection, _Connection) and connection.upgrade is not None
            upgrade = connection.upgrade
            await duplex.serve_websocket(
                upgrade.route, _NativeConnection(connection), upgrade.query, upgrade.headers
            )

        server = await serve(
            handler,
            sock=sock,
            backlog=BACKLOG,
            process_request=process_request,
            select_subprotocol=select_subprotocol,
            compression="deflate" if duplex.config.ws_compression else None,
            max_size=WS_MAX_FRAME_BYTES,
            ping_interval=None,
            close_timeout=duplex.config.limits.close_timeout_s,
            create_connection=_Connection,
        )
        return cls(duplex, server)

    async def stop(self) -> None:
        """Stop accepting and close what is left (the caller has drained the sessions already)."""
        self._server.close()
        await self._server.wait_closed()
