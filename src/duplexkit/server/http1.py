"""The HTTP/1.1 pieces both native edges (`server.websockets`, `server.picows`) share.

Both WebSocket libraries read only bodiless requests, so a POST (the WebRTC offer) is taken off the front of
the stream here (`PostSplitter`, Sans-I/O), before the library sees it. The headers a route reads have one
shape on every edge (`joined`), and a library's own per-connection log lines can be moved to DEBUG
(`AtDebug`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Literal

from duplexkit.server.edge import MAX_POST_BYTES


class PostSplitter:
    """Takes a POST's body off the front of a connection's stream (Sans-I/O). A bodiless parser gets the
    head without `Content-Length`, and the body (at most `MAX_POST_BYTES`; `too_large` past that, without
    reading the rest) waits for the POST route. Any other request passes through untouched.

    `state` says where the stream is: `sniff` (too few bytes to tell), `head`/`body` (a POST being read),
    `done` (the POST's head and body are in), `through` (not a POST: every byte passes)."""

    _HEAD_LIMIT = 16 * 1024

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.state: Literal["sniff", "head", "body", "done", "through"] = "sniff"
        self._head = b""
        self._length = 0
        self.body = b""
        self.too_large = False
        self.expects_continue = False
        """The client waits for `100 Continue` before sending the body (curl does for a few KiB)."""

    def feed(self, data: bytes) -> bytes:
        """The bytes the bodiless parser gets now: all of them once `through`; a POST's head (without
        `Content-Length`) once, when it is `done`; else nothing."""
        if self.state == "through":
            return data
        if self.state == "done":
            return b""  # after the POST: nothing more is read (the answer closes the connection)
        self._buffer += data
        if self.state == "sniff":
            if len(self._buffer) < 5 and b"POST ".startswith(bytes(self._buffer)):
                return b""
            if not self._buffer.startswith(b"POST "):
                return self._pass_through()
            self.state = "head"
        if self.state == "head":
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return self._pass_through() if len(self._buffer) > self._HEAD_LIMIT else b""
            lines = bytes(self._buffer[:end]).split(b"\r\n")
            kept = [line for line in lines if not line.lower().startswith(b"content-length:")]
            lengths = [line.split(b":", 1)[1].strip() for line in lines if line not in kept]
            self._length = int(lengths[0]) if lengths and lengths[0].isdigit() else 0
            self.expects_continue = any(
                line.lower().replace(b" ", b"") == b"expect:100-continue" for line in kept
            )
            self._head = b"\r\n".join(kept) + b"\r\n\r\n"
            del self._buffer[: end + 4]
            self.state = "body"
        if self._length > MAX_POST_BYTES:
            self.too_large = True
        elif len(self._buffer) < self._length:
            return b""
        else:
            self.body = bytes(self._buffer[: self._length])
        self._buffer.clear()
        self.state = "done"
        return self._head

    def _pass_through(self) -> bytes:
        self.state = "through"
        data, self._buffer = bytes(self._buffer), bytearray()
        return data


def parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    """A request head's method, target and `joined` headers (for an edge whose library never sees it)."""
    request_line, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    method, _, rest = request_line.partition(" ")
    target = rest.rpartition(" ")[0] or rest
    pairs = [(name.strip(), value.strip()) for name, _, value in (line.partition(":") for line in lines)]
    return method, target, joined(pairs)


def joined(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Lower-case names, repeated headers joined with ", " in their order (what `DuplexServer.authorize`
    and the POST routes read, on every edge)."""
    out: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


class AtDebug(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A log with its INFO lines at DEBUG (a health poll's response and close; a library's per-connection
    chatter)."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        super().log(logging.DEBUG if level == logging.INFO else level, msg, *args, **kwargs)
