"""What is the picows edge's own (the default edge, so the rest of the suite runs on it): its HTTP answers,
the POST it reads before picows sees the connection, message reassembly, the close codes it reports, and
the frame cap. Real sockets: the `websockets` client, httpx, and raw bytes for what a library will not
send."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import pytest
import uvloop
import websockets

from duplexkit.cli import main
from duplexkit.models import load_model
from duplexkit.server import EmbeddedServer, ServerConfig
from duplexkit.server.edge import MAX_POST_BYTES, Connection, HttpRequest, HttpResponse, WebSocketRoute
from duplexkit.server.serve import edge_for
from duplexkit.server.service import WS_MAX_FRAME_BYTES
from tests.server import test_server_e2e
from tests.server.conftest import connect


@pytest.fixture
async def picows(request: pytest.FixtureRequest) -> AsyncIterator[EmbeddedServer]:
    keys = frozenset(getattr(request, "param", ()))
    async with EmbeddedServer(load_model("scripted", {}), ServerConfig(api_keys=keys), edge="picows") as srv:
        yield srv


def _port(server: EmbeddedServer) -> int:
    return int(server.http_url.rsplit(":", 1)[1])


async def _raw(server: EmbeddedServer, *chunks: bytes, pause_s: float = 0.05) -> bytes:
    """Write `chunks` (pausing between them, so each may arrive as its own read) and read to EOF."""
    reader, writer = await asyncio.open_connection("127.0.0.1", _port(server))
    for chunk in chunks:
        writer.write(chunk)
        await writer.drain()
        await asyncio.sleep(pause_s)
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return answer


async def test_plain_gets_are_answered_from_the_routes_table_and_unknown_paths_get_404(
    picows: EmbeddedServer,
) -> None:
    want = picows.duplex.http_routes["/v1/models"]()
    async with httpx.AsyncClient(base_url=picows.http_url) as http:
        models = await http.get("/v1/models?x=1")
        missing = await http.get("/v1/nothing")
        health = await http.get("/healthz")
    assert (models.status_code, models.content) == (200, want.body)
    assert models.headers["content-type"] == want.media_type
    assert int(models.headers["content-length"]) == len(want.body)
    assert (missing.status_code, missing.text) == (404, "Not Found\n")
    assert health.status_code == 200


@pytest.mark.parametrize("picows", [("s3cret",)], indirect=True)
async def test_a_refused_key_gets_403_and_a_good_one_the_realtime_subprotocol_only_when_offered(
    picows: EmbeddedServer,
) -> None:
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(picows.url, subprotocols=[websockets.Subprotocol("realtime")])
    assert refused.value.response.status_code == 403
    assert refused.value.response.body == b"unauthorized\n"
    key = websockets.Subprotocol("openai-insecure-api-key.s3cret")
    offered = await websockets.connect(picows.url, subprotocols=[websockets.Subprotocol("realtime"), key])
    assert offered.subprotocol == "realtime"
    assert json.loads(await offered.recv())["type"] == "session.created"
    await offered.close()
    bearer = {"Authorization": "Bearer s3cret"}
    plain = await websockets.connect(picows.url, additional_headers=bearer)
    assert plain.subprotocol is None
    await plain.close()


async def test_a_chosen_subprotocol_the_client_did_not_offer_is_not_answered(
    picows: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The edge answers `Sec-WebSocket-Protocol` only with a protocol the client offered (RFC 6455 §4.2.2):
    a client is bound to fail a handshake that names another."""
    monkeypatch.setattr(picows.duplex, "authorize", lambda headers, route="realtime": "realtime")
    ws = await websockets.connect(picows.url)
    assert ws.subprotocol is None
    assert json.loads(await ws.recv())["type"] == "session.created"
    await ws.close()


def _echo_route(seen: list[HttpRequest]) -> Any:
    async def echo(request: HttpRequest) -> HttpResponse:
        seen.append(request)
        await asyncio.sleep(0)  # the route is a coroutine the edge awaits
        return HttpResponse(201, b"%d" % len(request.body), "text/plain", {"X-Echo": "yes"})

    return echo


async def test_a_post_is_read_with_its_body_and_answered_by_its_route(picows: EmbeddedServer) -> None:
    seen: list[HttpRequest] = []
    picows.duplex.post_routes = {"/echo": _echo_route(seen)}
    body = b"v=0\r\n" * 2000
    async with httpx.AsyncClient(base_url=picows.http_url) as http:
        answer = await http.post("/echo?a=1&b=", content=body, headers=[("X-Twice", "1"), ("X-Twice", "2")])
        elsewhere = await http.post("/v1/elsewhere", content=b"x")
    assert (answer.status_code, answer.text, answer.headers["x-echo"]) == (201, str(len(body)), "yes")
    assert answer.headers["content-type"] == "text/plain"
    assert (seen[0].body, seen[0].body_too_large) == (body, False)
    assert seen[0].query == {"a": "1", "b": ""}
    assert seen[0].headers["x-twice"] == "1, 2"
    assert elsewhere.status_code == 404


async def test_a_post_expecting_100_continue_gets_it_and_a_body_past_the_cap_is_flagged(
    picows: EmbeddedServer,
) -> None:
    seen: list[HttpRequest] = []
    picows.duplex.post_routes = {"/echo": _echo_route(seen)}
    head = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
    answer = await _raw(picows, head[:3], head[3:], b"hello")  # the method itself split across reads
    assert answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\n")
    assert answer.endswith(b"\r\n\r\n5") and seen[0].body == b"hello"
    too_large = f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_POST_BYTES + 1}\r\n\r\n".encode()
    answer = await _raw(picows, too_large + b"x" * 1000)
    assert answer.startswith(b"HTTP/1.1 201 Created\r\n")
    assert (seen[1].body, seen[1].body_too_large) == (b"", True)


async def test_a_fragmented_message_is_reassembled_and_pings_are_answered(picows: EmbeddedServer) -> None:
    client = await connect(picows.url)
    await client.until("session.created")
    update = json.dumps({"type": "session.update", "session": {"instructions": "é" * 100}})
    await client.ws.send([update[:7], update[7:150], update[150:]])  # three frames: text, continuations
    assert (await client.until("session.updated"))["session"]["instructions"] == "é" * 100
    await asyncio.wait_for(await client.ws.ping(b"are you there"), 5)
    await client.ws.close()


@contextlib.asynccontextmanager
async def _close_codes(server: EmbeddedServer) -> AsyncIterator[list[int | None]]:
    """The `close_code` each connection reported to the core once its session was served."""
    codes: list[int | None] = []
    serve = server.duplex.serve_websocket

    async def recording(
        route: WebSocketRoute, connection: Connection, query: Mapping[str, str], headers: Mapping[str, str]
    ) -> None:
        await serve(route, connection, query, headers)
        codes.append(connection.close_code)

    server.duplex.serve_websocket = recording  # type: ignore[method-assign]
    yield codes


async def _until(codes: list[int | None], n: int) -> None:
    for _ in range(250):
        if len(codes) >= n:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{len(codes)} connections ended, not {n}")


async def test_the_peers_close_code_reaches_the_core_and_a_loss_is_1006(picows: EmbeddedServer) -> None:
    async with _close_codes(picows) as codes:
        for code in (1000, 4001):
            client = await connect(picows.url)
            await client.until("session.created")
            await client.ws.close(code)
            assert client.ws.close_code == code  # our close frame answered the peer's
            await _until(codes, len(codes) + 1)
        browser = await connect(picows.url)
        await browser.until("session.created")
        browser.ws.transport.write(b"\x88\x80\x00\x00\x00\x00")  # a close frame without a code
        await _until(codes, 3)
        lost = await connect(picows.url)
        await lost.until("session.created")
        lost.ws.transport.abort()
        await _until(codes, 4)
    assert codes == [1000, 4001, 1005, 1006]


async def test_a_frame_or_a_message_over_the_cap_is_refused_with_1009(picows: EmbeddedServer) -> None:
    for message in ("x" * (WS_MAX_FRAME_BYTES + 1), ["x" * (WS_MAX_FRAME_BYTES // 2)] * 3):
        ws = await websockets.connect(picows.url, max_size=None)
        json.loads(await ws.recv())  # session.created
        with contextlib.suppress(websockets.ConnectionClosed):
            await ws.send(message)
        with pytest.raises(websockets.ConnectionClosed):
            while True:
                await asyncio.wait_for(ws.recv(), 5)
        assert ws.close_code == 1009


async def test_invalid_utf8_in_a_text_message_is_refused_with_1007(picows: EmbeddedServer) -> None:
    sock = socket.create_connection(("127.0.0.1", _port(picows)))
    ws = await websockets.connect(picows.url, sock=sock)
    json.loads(await ws.recv())
    ws.transport.write(b"\x81\x82\x00\x00\x00\x00\xc3\x28")  # a masked text frame: 0xC3 0x28 is not UTF-8
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            await asyncio.wait_for(ws.recv(), 5)
    assert ws.close_code == 1007


def test_compression_is_served_on_websockets_and_refused_on_an_explicit_picows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert edge_for(None, ws_compression=False) == "picows"
    assert edge_for(None, ws_compression=True) == "websockets"
    assert edge_for("asgi", ws_compression=True) == "asgi"
    assert main(["serve", "--model", "scripted", "--edge", "picows", "--ws-compression"]) == 2
    assert "picows edge has no permessage-deflate" in capsys.readouterr().err


def test_on_uvloop_the_handover_a_split_post_and_paused_writes_hold() -> None:
    """`duplexkit serve` runs on uvloop, whose transports are not asyncio's: the sniffer's handover to
    picows, a POST read over several reads, and a client that stops reading (dropped), there too."""

    async def scenario() -> None:
        async with EmbeddedServer(load_model("scripted", {}), edge="picows") as server:
            client = await connect(server.url)
            assert (await client.until("session.created"))["type"] == "session.created"
            await client.ws.close()
            seen: list[HttpRequest] = []
            server.duplex.post_routes = {"/echo": _echo_route(seen)}
            head = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
            answer = await _raw(server, head[:3], head[3:], b"he", b"llo")
            assert answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\n")
            assert seen[0].body == b"hello"
        await test_server_e2e.test_a_client_that_stops_reading_is_dropped_instead_of_buffered_without_bound(
            "picows"
        )

    uvloop.run(scenario())


async def test_a_core_that_reads_slowly_stops_the_socket_being_read_and_loses_nothing(
    picows: EmbeddedServer,
) -> None:
    """Received messages wait in a bounded queue: while the core does not read, the edge stops reading the
    socket, so a flooding client is held back by TCP instead of filling the server's memory."""
    release = asyncio.Event()
    got: list[str | bytes] = []

    async def slow(
        route: WebSocketRoute, connection: Connection, query: Mapping[str, str], headers: Mapping[str, str]
    ) -> None:
        await release.wait()
        while (message := await connection.receive()) is not None:
            got.append(message)

    picows.duplex.serve_websocket = slow  # type: ignore[method-assign]
    ws = await websockets.connect(picows.url, max_size=None)
    messages = [bytes([i % 256]) * 65536 for i in range(400)]  # 26 MB: past what loopback's buffers hold

    async def flood() -> None:
        for message in messages:
            await ws.send(message)

    sender = asyncio.create_task(flood())
    try:
        done, _ = await asyncio.wait({sender}, timeout=3)
        assert not done  # held back: the server stopped reading
    finally:
        release.set()
    await asyncio.wait_for(sender, 30)
    await ws.close()
    for _ in range(250):
        if len(got) == len(messages):
            break
        await asyncio.sleep(0.02)
    assert got == messages
