"""`/v1/twilio/stream`: a Twilio Media Stream as the session's socket, in front of any duplexkit model.

`TwilioSocket` is an in-process edge (`edge.EventSocket`), as `server.moshi` is for `/api/chat`: it hands
the runner the typed client events `TwilioStream` (the Sans-I/O protocol) makes of Twilio's messages, and
gives `TwilioStream` the session's reply audio and reply ends, sending back what it makes of them
(`media`, `mark`, `clear`). The session opens on the `start` message (its `session.update`: G.711 mu-law
at 8 kHz both ways, playback acknowledged by Twilio's mark echoes) and ends on `stop`, which counts as the
caller leaving on purpose: the slot is freed at once.

Twilio reads only `media`, `mark` and `clear` from the server, so a problem with what it sent (an unknown
event, bad base64, a message before `start`) cannot be answered on the stream: the runner answers the coded
`ProtocolError` as for any client (counted in `duplexkit_errors_total{code}`), and this edge logs the
`error` event instead of sending it; the message is dropped and nothing else. A `start` the call cannot
open on ends it: after its error the socket closes with the code as its reason, and 1003 (unsupported
data) when its `mediaFormat` is not mu-law at 8 kHz, else 1008 (policy).

Both the session's events and Twilio's mark echoes (each may release reply audio held back) make messages
for Twilio; one writer task sends them all, in the order the stream made them, so a send that waits on
TCP backpressure holds up those after it and never lets them pass. The writer is supervised: its failure
is raised from `receive_event` (`edge.EdgeTaskFailed`, at the caller's next message: Twilio sends one
every 20 ms) and ends the session as a task of its own would.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from duplexkit.protocol import client_events as ce
from duplexkit.protocol import server_events as se
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.server.edge import Connection, EdgeTaskFailed, SocketClosed
from duplexkit.server.supervision import supervised
from duplexkit.server.twilio.protocol import SAMPLE_RATE_HZ, Output, TwilioStream

log = logging.getLogger("duplexkit.server")

UNSUPPORTED_DATA = 1003
"""RFC 6455: the endpoint cannot take this kind of data (the stream's media format)."""
POLICY_VIOLATION = 1008
"""RFC 6455: a message the endpoint refuses (a `start` it cannot open the call on)."""


class TwilioSocket:
    """The runner's socket for one Media Stream (`edge.EventSocket`), speaking Twilio on the wire."""

    def __init__(self, websocket: Connection, stream: TwilioStream) -> None:
        self.ws = websocket
        self.stream = stream
        self._inbound: deque[ce.ClientEventBase | ProtocolError] = deque()
        self._outbound: asyncio.Queue[str | None] = asyncio.Queue()
        """What goes to Twilio, in the order the stream made it: one writer sends it all (`_write`)."""
        self._writer: asyncio.Task[None] | None = None
        self._failure: EdgeTaskFailed | None = None
        self._stopped = False
        self._refusal: str | None = None
        """The code of a fatal problem: the socket closes with it once its error has been answered."""

    async def receive_event(self) -> ce.ClientEventBase | ProtocolError | None:
        """The caller's next event (or coded problem) for the runner; `None`: the call's stream is over."""
        while not self._inbound:
            if self._failure is not None:
                raise self._failure
            if self._refusal is not None:
                code = (
                    UNSUPPORTED_DATA
                    if self._refusal == ErrorCode.UNSUPPORTED_AUDIO_FORMAT
                    else POLICY_VIOLATION
                )
                await self.ws.close(code, self._refusal)
                self._stopped = True
            if self._stopped:
                return None
            message = await self.ws.receive()
            if message is None:
                return None
            out = self.stream.receive(message)
            self._inbound.extend(out.problems)
            self._inbound.extend(out.events)
            self._send(out)
            if out.fatal:
                self._refusal = out.problems[0].code.value if out.problems else "unsupported"
            self._stopped = out.ended
        return self._inbound.popleft()

    async def send_event(self, event: se.ServerEventBase) -> None:
        """One of the session's events: reply audio, reply ends and the caller's speech starting go to Twilio
        as media, marks and clear; errors are logged (Twilio reads none); the rest has no place on a phone
        line."""
        if isinstance(event, se.ResponseOutputAudioDelta):
            audio = event.audio
            if audio is None or audio.format != "g711_ulaw" or event.sample_rate_hz != SAMPLE_RATE_HZ:
                log.error("twilio stream %s: reply audio not in 8 kHz mu-law dropped", self._sid)
                return
            self._send(self.stream.reply_audio(event.response_id, audio.data))
        elif isinstance(event, se.ResponseDone):
            cancelled = event.response.status == "cancelled"
            self._send(self.stream.reply_ended(event.response.id, cancelled=cancelled))
        elif isinstance(event, se.InputAudioBufferSpeechStarted):
            self._send(self.stream.speech_started())
        error = se.reported_error(event)  # an error event's, or a failed response's
        if error is not None:
            log.warning("twilio stream %s: %s: %s", self._sid, error.code.value, error.message)

    @property
    def close_code(self) -> int | None:
        return 1000 if self._stopped else self.ws.close_code

    async def close(self, code: int = 1000) -> None:
        """Send what is queued (the caller bounds the wait), then close."""
        writer = self._writer
        if writer is not None:
            self._outbound.put_nowait(None)
            try:
                await writer
            finally:
                writer.cancel()
        await self.ws.close(code)

    @property
    def _sid(self) -> str:
        return self.stream.call.stream_sid if self.stream.call else "(not started)"

    def _send(self, out: Output) -> None:
        """Queue the stream's messages for the writer, which the first one starts."""
        for frame in out.frames():
            self._outbound.put_nowait(frame)
        if out.twilio and self._writer is None:
            self._writer = supervised(self._write(), "twilio-writer", self._writer_failed)

    async def _write(self) -> None:
        """The socket's one writer: each message in order, each send awaited before the next."""
        while (text := await self._outbound.get()) is not None:
            try:
                await self.ws.send_text(text)
            except SocketClosed:  # the caller is gone: the reader sees it
                return

    def _writer_failed(self, name: str, exc: BaseException) -> None:
        self._failure = EdgeTaskFailed(name)
        self._failure.__cause__ = exc
