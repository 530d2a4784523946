"""An ASGI app served on a loopback port in a thread of its own, for tests that need a fake HTTP peer."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import uvicorn
from starlette.applications import Starlette


@contextlib.contextmanager
def serve_in_thread(app: Starlette) -> Iterator[str]:
    """Serve `app` on 127.0.0.1 (an ephemeral port) until the block ends; yields `http://127.0.0.1:PORT`."""
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the fake HTTP server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
