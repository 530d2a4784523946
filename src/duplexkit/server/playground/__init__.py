"""The browser playground: one page at `GET /` and `/playground`, and the two scripts it loads.

The page is a single self-contained file: its stylesheet and script are inlined and allowed by hash, and its
Content-Security-Policy lets it reach nothing but this server (`connect-src 'self'`: the realtime socket and
the calls endpoint). The worklet is another file, served from the same origin because an AudioWorklet cannot
run inline code without allowing `blob:` scripts; the transport (`transport.js`: a WebRTC call when the
server offers one, else the WebSocket) is the third, kept apart from the page's script. Whether the server
wants an API key, and whether it offers calls, are written into the page, since a browser cannot tell a
refused WebSocket handshake from an unreachable server; so are the error codes that report a race duplex
makes expected (`BENIGN_CODES`), which the page counts instead of raising an alert.
"""

from __future__ import annotations

import base64
import hashlib
import html
from importlib.resources import files

from duplexkit.protocol.errors import BENIGN_CODES
from duplexkit.server.edge import HttpResponse

PAGE_PATHS = ("/", "/playground")
WORKLET_PATH = "/playground/worklet.js"
TRANSPORT_PATH = "/playground/transport.js"

_ASSETS = files(__name__)
_CSS = (_ASSETS / "playground.css").read_text(encoding="utf-8")
_JS = "\n".join((_ASSETS / name).read_text(encoding="utf-8") for name in ("view.js", "playground.js"))
"""The page's script: the view (timeline, transcript), then the connection that feeds it."""
_TEMPLATE = (_ASSETS / "index.html").read_text(encoding="utf-8")
_WORKLET = (_ASSETS / "worklet.js").read_text(encoding="utf-8")
_TRANSPORT = (_ASSETS / "transport.js").read_text(encoding="utf-8")


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


CSP = (
    f"default-src 'none'; script-src {_digest(_JS)} 'self'; style-src {_digest(_CSS)}; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The inline script and style by hash, the worklet, the transport, the socket and the calls endpoint from
this origin, nothing else (a WebRTC call's media is not fetched: CSP does not govern it)."""

_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def playground_url(host: str, port: int) -> str:
    """Where a browser on this machine opens the playground of a server bound to `host`:`port`.

    A wildcard bind is reached on loopback, which also keeps the page a secure context for the microphone.
    """
    local = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, host)
    if ":" in local and not local.startswith("["):
        local = f"[{local}]"
    return f"http://{local}:{port}/"


def render_page(*, model: str, auth_required: bool, webrtc: bool) -> str:
    """The page for a server serving `model`, asking for an API key when `auth_required`, calling over
    WebRTC when the server offers it (`webrtc`)."""
    page = _TEMPLATE.replace("{auth}", "required" if auth_required else "none")
    page = page.replace("{webrtc}", "available" if webrtc else "none")
    page = page.replace("{model}", html.escape(model, quote=True))
    page = page.replace("{benign}", " ".join(sorted(code.value for code in BENIGN_CODES)))
    return page.replace("{style}", _CSS).replace("{script}", _JS)


def playground_pages(*, model: str, auth_required: bool, webrtc: bool) -> dict[str, HttpResponse]:
    """The page at each of `PAGE_PATHS`, the worklet at `WORKLET_PATH` and the transport at
    `TRANSPORT_PATH`, for the server's GET routes."""
    page = HttpResponse(
        200,
        render_page(model=model, auth_required=auth_required, webrtc=webrtc).encode(),
        "text/html; charset=utf-8",
        _HEADERS,
    )
    worklet = HttpResponse(200, _WORKLET.encode(), "text/javascript; charset=utf-8", _HEADERS)
    transport = HttpResponse(200, _TRANSPORT.encode(), "text/javascript; charset=utf-8", _HEADERS)
    return {**dict.fromkeys(PAGE_PATHS, page), WORKLET_PATH: worklet, TRANSPORT_PATH: transport}
