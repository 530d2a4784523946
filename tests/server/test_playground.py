"""The playground's routes: the page at `/` and `/playground` under a strict CSP, and its worklet module."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import re
import signal
import socket
import sys

import httpx
from starlette.testclient import TestClient

from duplexkit.models import load_model
from duplexkit.protocol.errors import BENIGN_CODES
from duplexkit.server import DuplexServer, EmbeddedServer, ServerConfig
from duplexkit.server.asgi import asgi_app
from duplexkit.server.playground import playground_url
from duplexkit.server.serve import Edge


def _client(api_keys: frozenset[str] = frozenset()) -> TestClient:
    return TestClient(asgi_app(DuplexServer(load_model("scripted", {}), ServerConfig(api_keys=api_keys))))


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_page_is_one_file_whose_inline_code_the_csp_allows_by_hash_and_nothing_else() -> None:
    client = _client()
    root, named = client.get("/"), client.get("/playground")
    assert root.status_code == named.status_code == 200 and root.text == named.text
    assert root.headers["content-type"].startswith("text/html")
    csp = root.headers["content-security-policy"]
    script = re.search(r"<script>(.*?)</script>", root.text, re.S)
    style = re.search(r"<style>(.*?)</style>", root.text, re.S)
    assert script and style
    assert f"script-src {_sha256(script.group(1))} 'self';" in csp
    assert f"style-src {_sha256(style.group(1))};" in csp
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "unsafe" not in csp
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", root.text)  # no CDN, no remote asset
    assert 'data-model="scripted"' in root.text and 'data-auth="none"' in root.text
    # The races duplex makes expected are counted by the page, not raised as alerts: the server's own list.
    [benign] = re.findall(r'data-benign="([^"]*)"', root.text)
    assert (
        set(benign.split()) == {code.value for code in BENIGN_CODES}
        and "stale_function_call_output" in benign
    )


def test_the_worklet_is_served_as_javascript_from_the_same_origin() -> None:
    worklet = _client().get("/playground/worklet.js")
    assert worklet.status_code == 200 and worklet.headers["content-type"].startswith("text/javascript")
    assert 'registerProcessor("duplexkit-capture"' in worklet.text
    assert 'registerProcessor("duplexkit-playback"' in worklet.text


def test_a_server_with_api_keys_serves_a_page_that_asks_for_one_without_revealing_it() -> None:
    page = _client(api_keys=frozenset({"s3cret"})).get("/").text
    assert 'data-auth="required"' in page and "s3cret" not in page


async def test_every_edge_serves_the_same_pages_over_a_real_socket_and_404s_unknown_paths(edge: Edge) -> None:
    expected = _client()
    async with (
        EmbeddedServer(load_model("scripted", {}), edge=edge) as server,
        httpx.AsyncClient(base_url=server.http_url) as http,
    ):
        for path in ("/", "/playground", "/playground/worklet.js"):
            got, want = await http.get(path), expected.get(path)
            assert got.status_code == 200 and got.content == want.content, path
            for header in ("content-type", "content-security-policy", "x-content-type-options"):
                assert got.headers[header] == want.headers[header], (path, header)
        assert (await http.get("/no-such-page")).status_code == 404


def test_a_wildcard_bind_is_opened_on_loopback() -> None:
    assert playground_url("0.0.0.0", 8000) == "http://127.0.0.1:8000/"
    assert playground_url("::", 8000) == "http://[::1]:8000/"
    assert playground_url("10.1.2.3", 80) == "http://10.1.2.3:80/"


async def test_duplexkit_serve_prints_the_playground_url_and_serves_the_page_there() -> None:
    """On the ASGI edge (`--edge asgi`): the SIGTERM test in test_interop_and_lifecycle runs the default."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "duplexkit", "serve", "--model", "scripted", "--port", str(port)),
        *("--log-level", "warning", "--edge", "asgi"),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        assert line == f"duplexkit serve: playground at http://127.0.0.1:{port}/\n"
        url = line.rsplit(" ", 1)[1].strip()
        async with httpx.AsyncClient() as client:
            for _ in range(200):
                try:
                    page = await client.get(url)
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)
            else:
                raise AssertionError("server did not start")
        assert page.status_code == 200 and "<title>duplexkit playground</title>" in page.text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 15) == 0


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_health_polls_are_logged_at_debug_and_page_loads_at_info(edge: Edge) -> None:
    """A pool or load balancer polls /healthz every few seconds: at INFO that drowned the server's log."""
    names = ("duplexkit.server.picows.edge", "websockets.server", "uvicorn.access")
    loggers = [logging.getLogger(name) for name in names]
    seen = _Records()
    try:
        async with (
            EmbeddedServer(load_model("scripted", {}), edge=edge, log_level="info") as server,
            httpx.AsyncClient(base_url=server.http_url) as http,
        ):
            for logger in loggers:  # after uvicorn configured its loggers
                logger.addHandler(seen)
                logger.setLevel(logging.INFO)
            for _ in range(3):
                assert (await http.get("/healthz")).status_code == 200
            await asyncio.sleep(0.1)
            assert [r.getMessage() for r in seen.records if r.levelno >= logging.INFO] == []
            assert (await http.get("/")).status_code == 200
            await asyncio.sleep(0.1)
            assert any(r.levelno == logging.INFO for r in seen.records)  # the log is on: pages still show
            seen.records.clear()
            for logger in loggers:
                logger.setLevel(logging.DEBUG)
            assert (await http.get("/healthz")).status_code == 200
            await asyncio.sleep(0.1)
            polls = [r for r in seen.records if "200" in r.getMessage()]
            assert polls and all(r.levelno == logging.DEBUG for r in polls)
    finally:
        for logger in loggers:
            logger.removeHandler(seen)
            logger.setLevel(logging.NOTSET)
