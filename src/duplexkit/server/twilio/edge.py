"""`/v1/twilio/stream`: a Twilio Media Stream as the runner's socket, in front of any duplexkit model.

`TwilioSocket` stands between the edge's `Connection` and an unchanged `SessionRunner`, as `server.moshi`
does for `/api/chat`: `TwilioStream` (the Sans-I/O protocol) turns Twilio's messages into typed client
events and the session's reply audio and ends into Twilio's `media`, `mark` and `clear`; this class only
moves them. The session opens on the `start` message (its `session.update`: G.711 mu-law at 8 kHz both
ways, playback acknowledged by Twilio's mark echoes) and ends on `stop`, which counts as the caller leaving
on purpose: the slot is freed at once.

Twilio reads only `media`, `mark` and `clear` from the server, so a problem with what it sent (an unknown
event, bad base64, a message before `start`) cannot be answered on the stream: it is logged with its code
and counted in `duplexkit_errors_total{code}`, the message dropped and nothing else. A `start` whose
`mediaFormat` is not mu-law at 8 kHz cannot be heard at all: the socket closes with 1003 (unsupported
data) and the code as its reason.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections import deque

from duplexkit.protocol import client_events as ce
from duplexkit.protocol.errors import ProtocolError
from duplexkit.server.edge import Connection
from duplexkit.server.metrics import ServerMetrics
from duplexkit.server.twilio.protocol import SAMPLE_RATE_HZ, Output, TwilioStream

log = logging.getLogger("duplexkit.server")

UNSUPPORTED_DATA = 1003
"""RFC 6455: the endpoint cannot take this kind of data (the stream's media format)."""


class TwilioSocket:
    """The WebSocket as the runner sees it (`receive`, `send_text`, `close`), speaking Media Streams."""

    def __init__(self, websocket: Connection, stream: TwilioStream, metrics: ServerMetrics) -> None:
        self.ws = websocket
        self.stream = stream
        self._metrics = metrics
        self._events: deque[ce.ClientEventBase] = deque()
        self._send_lock = asyncio.Lock()
        self._stopped = False

    async def receive(self) -> str | None:
        """The next client event for the runner, as JSON text (`None`: the call's stream is over)."""
        while not self._events:
            if self._stopped:
                return None
            message = await self.ws.receive()
            if message is None:
                return None
            out = self.stream.receive(message)
            await self._apply(out)
            if out.fatal:
                await self.close(UNSUPPORTED_DATA, out.problems[0].code.value if out.problems else "")
                self._stopped = True
            elif out.ended:
                self._stopped = True
        event = self._events.popleft()
        return event.model_dump_json(exclude_unset=True)

    async def send_text(self, text: str) -> None:
        """One event from the runner: reply audio and reply ends go to Twilio; the rest has no place on a
        phone line (errors are logged and counted by the runner)."""
        event = json.loads(text)
        kind = event.get("type")
        if kind == "response.output_audio.delta":
            if event.get("sample_rate_hz") != SAMPLE_RATE_HZ:  # the session is pinned to 8 kHz mu-law
                log.error("twilio stream: reply audio at %s Hz dropped", event.get("sample_rate_hz"))
                return
            await self._apply(self.stream.reply_audio(event["response_id"], base64.b64decode(event["delta"])))
        elif kind == "response.done":
            response = event.get("response", {})
            cancelled = response.get("status") == "cancelled"
            await self._apply(self.stream.reply_ended(response.get("id", ""), cancelled=cancelled))
        elif kind == "error":
            error = event.get("error", {})
            log.info("twilio stream %s: %s: %s", self._sid, error.get("code"), error.get("message"))

    @property
    def close_code(self) -> int | None:
        return 1000 if self._stopped else self.ws.close_code

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await self.ws.close(code, reason)

    @property
    def _sid(self) -> str:
        return self.stream.call.stream_sid if self.stream.call else "(not started)"

    async def _apply(self, out: Output) -> None:
        for problem in out.problems:
            self._report(problem)
        self._events.extend(out.events)
        for message in out.twilio:
            async with self._send_lock:
                await self.ws.send_text(json.dumps(message, separators=(",", ":")))

    def _report(self, problem: ProtocolError) -> None:
        self._metrics.errors.labels(code=problem.code.value).inc()
        log.warning("twilio stream %s: %s: %s", self._sid, problem.code.value, problem.message)
