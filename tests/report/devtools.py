"""A minimal headless-Chromium driver over the DevTools protocol, on the `websockets` library.

`HeadlessChromium` starts Debian's `chromium` (or another Chromium on PATH) with a throwaway profile and
`--remote-debugging-port=0`, reads the DevTools URL from its stderr, opens one page target, and records what a
page test needs: console errors, uncaught exceptions, error log entries, and every request and WebSocket URL.
Extra command-line flags (e.g. the fake media devices of the playground test) are passed through.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
)
_LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


def find_chromium() -> str | None:
    """The first Chromium-family browser on PATH, or None."""
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


@dataclass
class PageLog:
    """What the page did: console errors, uncaught exceptions, error-level log entries, requested URLs."""

    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


class HeadlessChromium:
    """`async with HeadlessChromium(binary) as browser:` then `await browser.open(url)` and friends."""

    def __init__(
        self,
        binary: str,
        *,
        width: int = 1280,
        height: int = 900,
        timeout_s: float = 20.0,
        flags: tuple[str, ...] = (),
    ) -> None:
        self.binary = binary
        self.flags = flags
        self.width, self.height = width, height
        self.timeout_s = timeout_s
        self.log = PageLog()
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._loaded = asyncio.Event()
        self._profile = tempfile.TemporaryDirectory(prefix="duplexkit-chromium-")
        self._process: asyncio.subprocess.Process | None = None
        self._socket: ClientConnection | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._session: str | None = None

    async def __aenter__(self) -> HeadlessChromium:
        try:
            await self._start()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def _start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            self.binary,
            *FLAGS,
            *self.flags,
            f"--user-data-dir={self._profile.name}",
            f"--window-size={self.width},{self.height}",
            "about:blank",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        url = await asyncio.wait_for(self._devtools_url(), self.timeout_s)
        self._tasks.append(asyncio.create_task(self._discard_stderr()))  # a full pipe would stall Chromium
        self._socket = await connect(url, max_size=None)
        self._tasks.append(asyncio.create_task(self._read()))
        target = await self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = await self.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, session=False
        )
        self._session = attached["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            await self.send(f"{domain}.enable")
        await self.resize(self.width, self.height)

    async def resize(self, width: int, height: int) -> None:
        """Emulate a `width` x `height` CSS-pixel viewport (320 px wide is a small phone)."""
        self.width, self.height = width, height
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._socket is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.send("Browser.close", session=False), 5)
            await self._socket.close()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._process is not None:
            if self._process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self._process.kill()
            await self._process.wait()
        self._profile.cleanup()

    async def open(self, url: str) -> None:
        """Navigate to `url` and wait for its load event."""
        self._loaded.clear()
        result = await self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise RuntimeError(f"navigation to {url} failed: {result['errorText']}")
        await asyncio.wait_for(self._loaded.wait(), self.timeout_s)

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of `expression` in the page (a promise is awaited); raises if it threw."""
        result = await self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def click(self, selector: str) -> None:
        """A real mouse click (press and release) at the centre of the element `selector` names."""
        box = await self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            await self.send(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1},
            )

    async def screenshot(self) -> bytes:
        """A PNG of the viewport."""
        result = await self.send("Page.captureScreenshot", {"format": "png"})
        return base64.b64decode(result["data"])

    async def send(self, method: str, params: dict[str, Any] | None = None, *, session: bool = True) -> Any:
        """Call a DevTools method (on the page's session unless `session=False`) and return its result."""
        assert self._socket is not None
        message: dict[str, Any] = {"id": next(self._ids), "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[message["id"]] = future
        await self._socket.send(json.dumps(message))
        reply = await asyncio.wait_for(future, self.timeout_s)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def _devtools_url(self) -> str:
        assert self._process is not None and self._process.stderr is not None
        while line := await self._process.stderr.readline():
            if match := _LISTENING.search(line.decode(errors="replace")):
                return match.group(1)
        raise RuntimeError(f"{self.binary} exited before printing its DevTools URL")

    async def _discard_stderr(self) -> None:
        assert self._process is not None and self._process.stderr is not None
        while await self._process.stderr.read(65536):
            pass

    async def _read(self) -> None:
        assert self._socket is not None
        async for raw in self._socket:
            message = json.loads(raw)
            if "id" in message:
                future = self._pending.pop(message["id"], None)
                if future is not None and not future.done():
                    future.set_result(message)
            else:
                self._event(message.get("method", ""), message.get("params", {}))

    def _event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Page.loadEventFired":
            self._loaded.set()
        elif method == "Network.requestWillBeSent":
            self.log.requests.append(params["request"]["url"])
        elif method == "Network.webSocketCreated":
            self.log.requests.append(params["url"])
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.log.console_errors.append(" ".join(str(a.get("value", a)) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            self.log.console_errors.append(str(params["exceptionDetails"].get("text")))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.log.console_errors.append(str(params["entry"].get("text")))
