"""The runner against a socket that obeys the `SessionSocket` contract and whose peer vanishes."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from duplexkit.engine import EngineSession
from duplexkit.models import load_model
from duplexkit.server.edge import NO_CLOSE_FRAME, SocketClosed
from duplexkit.server.metrics import ServerMetrics
from duplexkit.server.runner import RunnerLimits, SessionRunner
from duplexkit.server.ticker import SessionTicker


class VanishingSocket:
    """Delivers `session.close`, then its peer is gone: every send raises `SocketClosed` and `receive`
    returns `None`, as an edge's `Connection` does once the TCP connection dropped."""

    def __init__(self) -> None:
        self.frames = [json.dumps({"type": "session.close"})]
        self.sent = 0
        self.close_code: int | None = None

    async def receive(self) -> str | bytes | None:
        await asyncio.sleep(0)
        if self.frames:
            return self.frames.pop(0)
        self.close_code = NO_CLOSE_FRAME
        return None

    async def send_text(self, data: str) -> None:
        self.sent += 1
        if self.sent > 1:  # session.created went out; the rest finds the peer gone
            raise SocketClosed("no close frame received or sent")

    async def close(self, code: int = 1000) -> None:
        raise SocketClosed("no close frame received or sent")


async def test_a_peer_gone_while_the_last_events_flush_ends_the_session_without_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plugin = load_model("scripted", {})
    engine = EngineSession("sess_test", plugin.capabilities.engine_config(plugin.name, max_sessions=1))
    runner = SessionRunner(
        VanishingSocket(),
        engine,
        plugin.new_session(),
        ServerMetrics(),
        RunnerLimits(),
        ticker=SessionTicker(0.1),
    )
    with caplog.at_level(logging.ERROR, logger="duplexkit.server"):
        await asyncio.wait_for(runner.run(autostart=True), 10)  # returns: no exception escapes
        await asyncio.wait_for(runner.opening_closed(), 1)
    assert engine.closed and not caplog.records
