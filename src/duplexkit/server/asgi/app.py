"""`asgi_app`: the core's routes (`server.service.DuplexServer`) as a small explicit Starlette app.

Everything a route decides is the core's; this module only translates: Starlette's `WebSocket` becomes an
`edge.Connection`, a refused handshake is closed before `accept` (uvicorn answers it with HTTP 403), and
a POST becomes an `HttpRequest`, and the core's `HttpResponse`s become Starlette responses.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from duplexkit.server.edge import (
    MAX_POST_BYTES,
    NO_CLOSE_FRAME,
    NO_STATUS,
    WEBSOCKET_ROUTES,
    HttpRequest,
    HttpResponse,
    SocketClosed,
)
from duplexkit.server.edge import WebSocketRoute as RouteName
from duplexkit.server.service import DuplexServer


class _StarletteConnection:
    """Starlette's `WebSocket` as an `edge.Connection`: ASGI messages in, its disconnect errors mapped."""

    def __init__(self, websocket: WebSocket) -> None:
        self._ws = websocket
        self.close_code: int | None = None

    async def receive(self) -> str | bytes | None:
        try:
            message = await self._ws.receive()
        except WebSocketDisconnect as exc:
            self.close_code = _lost_if_unsure(exc.code)
            return None
        except (RuntimeError, OSError):
            self.close_code = NO_CLOSE_FRAME
            return None
        if message["type"] == "websocket.disconnect":
            self.close_code = _lost_if_unsure(int(message.get("code", NO_STATUS)))  # the ASGI default: 1005
            return None
        text = message.get("text")
        return text if text is not None else message.get("bytes") or b""

    async def send_text(self, data: str) -> None:
        try:
            await self._ws.send_text(data)
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            raise SocketClosed(str(exc)) from exc

    async def send_bytes(self, data: bytes) -> None:
        try:
            await self._ws.send_bytes(data)
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            raise SocketClosed(str(exc)) from exc

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await self._ws.close(code, reason)


def _headers(websocket: WebSocket) -> dict[str, str]:
    """Lower-case names, repeated headers joined with ", " (what `DuplexServer.authorize` reads)."""
    return {name: ", ".join(websocket.headers.getlist(name)) for name in websocket.headers}


def _websocket_route(duplex: DuplexServer, route: RouteName, path: str) -> WebSocketRoute:
    async def endpoint(websocket: WebSocket) -> None:
        headers = _headers(websocket)
        subprotocol = duplex.authorize(headers, route)
        if subprotocol is False:
            await websocket.close(code=1008, reason="unauthorized")  # before accept: HTTP 403
            return
        await websocket.accept(subprotocol=subprotocol)
        connection = _StarletteConnection(websocket)
        await duplex.serve_websocket(route, connection, dict(websocket.query_params), headers)

    return WebSocketRoute(path, endpoint)


def _http_route(path: str, build: Callable[[], HttpResponse]) -> Route:
    async def endpoint(request: Request) -> Response:
        response = build()
        return Response(response.body, response.status, dict(response.headers), response.media_type)

    return Route(path, endpoint, methods=["GET"])


def _post_route(path: str, answer: Callable[[HttpRequest], Awaitable[HttpResponse]]) -> Route:
    async def endpoint(request: Request) -> Response:
        body, too_large = bytearray(), False
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_POST_BYTES:
                too_large = True
                break
        headers = {name: ", ".join(request.headers.getlist(name)) for name in request.headers}
        response = await answer(
            HttpRequest(
                dict(request.query_params),
                headers,
                b"" if too_large else bytes(body),
                too_large,
                request.url.query,
            )
        )
        return Response(response.body, response.status, dict(response.headers), response.media_type)

    return Route(path, endpoint, methods=["POST"])


def asgi_app(duplex: DuplexServer) -> Starlette:
    """The ASGI callable serving `duplex`: every WebSocket route, plain GET route and POST route of the
    core."""
    routes: list[BaseRoute] = [_websocket_route(duplex, r, path) for path, r in WEBSOCKET_ROUTES.items()]
    routes += [_http_route(path, build) for path, build in duplex.http_routes.items()]
    routes += [_post_route(path, answer) for path, answer in duplex.post_routes.items()]
    return Starlette(routes=routes)


def _lost_if_unsure(code: int) -> int:
    """An ASGI disconnect's code as `edge.Connection.close_code`. uvicorn's sansio and wsproto protocols
    (Ray Serve's proxy runs the former) report a connection lost without a close frame as 1005, as they
    report a close frame without a code: a 1005 here may be either, so it counts as lost (a resumable
    session detaches and keeps its slot through the grace rather than losing its resume)."""
    return NO_CLOSE_FRAME if code == NO_STATUS else code
