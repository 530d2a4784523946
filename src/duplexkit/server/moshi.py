"""`/api/chat`: the Moshi protocol in front of any duplexkit model.

`MoshiSocket` stands between the edge's `Connection` and the session's runner as an in-process edge
(`edge.EventSocket`): it hands the runner typed client events and takes the session's event objects, so a
frame's audio goes from Opus to samples to the model and back with no JSON or base64 in between.

* In: Ogg-Opus audio (kind 1) becomes an `input_audio_buffer.append` of the decoded samples
  (`InputAudioBufferAppend.of_audio`, the decoder's float samples at 24 kHz, `pcm_f32le`: not rounded to
  PCM16, as `moshi.server` steps them) on the input's media clock; control end-turn
  (kind 3, 1) becomes a commit; pings, metadata and other controls are accepted and
  ignored. A frame that is not Moshi protocol (unknown kind, bytes that are not Ogg, text from the client,
  a text WebSocket message) is answered with a kind 5 error and the connection is kept.
* Out: the handshake (kind 0) when the session is ready (`session.created`); then one continuous stream of
  80 ms Ogg-Opus frames, one per 80 ms of input the model has stepped (as `moshi.server` sends each
  frame's audio right after its step): reply audio when the model has some queued, silence while it
  listens, so a client that builds its output by concatenation stays on the input's timeline. The model's
  decisions say how far it has stepped (`unit_end_ms` of each `response.listen` and audio delta). Each
  reply delta's transcript goes out as a kind 2 text piece after its audio frame, as `moshi.server` sends
  them; a cancelled reply (barge-in) drops what was not played yet. `error` events become kind 5 frames.

The first event the runner reads is a `session.update` built from the query (see `moshi.map_query`):
24 kHz float input and output (`pcm_f32le`, the samples as the Opus codec gives and takes them),
model-native turns, playback counted as heard when sent (Moshi has no playback acks); a query the session
object refuses is the runner's coded error instead (a kind 5 frame).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

import numpy as np

from duplexkit.protocol import client_events as ce
from duplexkit.protocol import moshi
from duplexkit.protocol import server_events as se
from duplexkit.protocol.audio import EncodedAudio, resample
from duplexkit.protocol.errors import ProtocolError
from duplexkit.protocol.units import ms_to_samples, samples_to_ms
from duplexkit.server.edge import Connection

log = logging.getLogger("duplexkit.server")


class MoshiSocket:
    """The runner's socket for one `/api/chat` connection (`edge.EventSocket`), speaking Moshi on the wire.
    `session`: the opening `session.update`'s session object (`session_from_query`)."""

    def __init__(self, websocket: Connection, session: dict[str, Any]) -> None:
        self.ws = websocket
        self._first: ce.ClientEventBase | ProtocolError | None
        try:
            self._first = ce.validate_client_event({"type": "session.update", "session": session})
        except ProtocolError as exc:
            self._first = exc
        self._decoder = moshi.OpusDecoder()
        self._encoder = moshi.OpusEncoder()
        self._send_lock = asyncio.Lock()
        self._input_samples = 0
        self._decided_samples = 0
        """Input the model has stepped (its decisions' `unit_end_ms`): the output stream follows it."""
        self._held_ms: float | None = None
        """A decision whose audio spans several frames waits for its transcript (which the engine sends
        right after it) so the piece goes out with the first of them, not after the last."""
        self._frames_out = 0
        self._ready = False
        self._reply: deque[tuple[np.ndarray[Any, np.dtype[np.float32]], str]] = deque()
        self._reply_offset = 0

    async def receive_event(self) -> ce.ClientEventBase | ProtocolError | None:
        """The client's next event for the runner (`None`: the client is gone)."""
        if self._first is not None:
            first, self._first = self._first, None
            return first
        while True:
            message = await self.ws.receive()
            if message is None:
                return None
            if isinstance(message, str):
                await self._error("text messages are not part of the Moshi protocol; send binary frames")
                continue
            event = await self._on_frame(message)
            if event is not None:
                return event

    async def send_event(self, event: se.ServerEventBase) -> None:
        """One of the session's events, rendered as Moshi frames (or kept for the output clock); the rest
        have no Moshi form and are dropped."""
        if isinstance(event, se.SessionCreated):
            self._ready = True
            await self._send(moshi.handshake())
        elif isinstance(event, se.ResponseOutputAudioDelta):
            assert event.audio is not None  # the engine's deltas hold their audio
            samples = event.audio.decode()
            if event.sample_rate_hz != moshi.SAMPLE_RATE_HZ:
                samples = resample(samples, event.sample_rate_hz, moshi.SAMPLE_RATE_HZ)
            await self._release_held()
            self._reply.append((samples, ""))
            if len(samples) > moshi.FRAME_SAMPLES:  # a long unit: its transcript rides its first frame
                self._held_ms = event.unit_end_ms
            else:
                await self._decided(event.unit_end_ms)
        elif isinstance(event, se.ResponseListen):
            await self._release_held()
            await self._decided(event.unit_end_ms)
        elif isinstance(event, se.ResponseOutputAudioTranscriptDelta) and event.delta:
            # The engine sends a unit's audio, then its transcript: the piece rides with that audio.
            started = len(self._reply) == 1 and self._reply_offset > 0
            if self._reply and not started and not self._reply[-1][1]:
                samples, _ = self._reply.pop()
                self._reply.append((samples, event.delta))
            else:  # its audio already went out (or there is none): the piece follows it, as moshi.server's
                await self._send(moshi.frame(moshi.Kind.TEXT, event.delta.encode()))
            await self._release_held()
        elif isinstance(event, se.ResponseOutputTextDelta) and event.delta:
            await self._send(moshi.frame(moshi.Kind.TEXT, event.delta.encode()))
        elif isinstance(event, se.ResponseDone) and event.response.status == "cancelled":
            self._reply.clear()  # barge-in or cancel: what was not played yet is never said
            self._reply_offset = 0
        elif (error := se.reported_error(event)) is not None:  # an error event's, or a failed response's
            await self._error(f"{error.code.value}: {error.message}")

    @property
    def close_code(self) -> int | None:
        return self.ws.close_code

    async def close(self, code: int = 1000) -> None:
        await self.ws.close(code)

    # --- internals ------------------------------------------------------------------------------------

    async def _on_frame(self, data: bytes) -> ce.ClientEventBase | None:
        try:
            kind, payload = moshi.parse_frame(data)
        except moshi.MoshiFrameError as exc:
            await self._error(str(exc))
            return None
        if kind is moshi.Kind.AUDIO:
            return await self._audio(payload)
        if kind is moshi.Kind.CONTROL and payload[:1] == bytes([moshi.Control.END_TURN]):
            return ce.InputAudioBufferCommit()
        if kind in (moshi.Kind.TEXT, moshi.Kind.HANDSHAKE, moshi.Kind.ERROR):
            await self._error(f"a client does not send kind {int(kind)} ({kind.name.lower()}) frames")
        return None  # ping, metadata, other controls: nothing to do

    async def _audio(self, payload: bytes) -> ce.InputAudioBufferAppend | None:
        samples, problem = self._decoder.decode(payload)
        if problem is not None:
            await self._error(problem)
        if len(samples) == 0:
            return None
        start_ms = samples_to_ms(self._input_samples, moshi.SAMPLE_RATE_HZ)
        self._input_samples += len(samples)
        end_ms = samples_to_ms(self._input_samples, moshi.SAMPLE_RATE_HZ)
        # The decoded float samples as they are, as `moshi.server` hands them to `mimi.encode`: rounding
        # them to PCM16 changed a greedy token where the model stood near a tie (a text piece differed).
        return ce.InputAudioBufferAppend.of_audio(
            EncodedAudio.of_samples(samples, "pcm_f32le"),
            sample_rate_hz=moshi.SAMPLE_RATE_HZ,
            duration_ms=end_ms - start_ms,
            audio_end_ms=end_ms,
        )

    async def _release_held(self) -> None:
        if self._held_ms is not None:
            held, self._held_ms = self._held_ms, None
            await self._decided(held)

    async def _decided(self, unit_end_ms: float | None) -> None:
        """The model has stepped the input up to `unit_end_ms`: send the output frames now due."""
        if unit_end_ms is None:
            return
        self._decided_samples = max(self._decided_samples, ms_to_samples(unit_end_ms, moshi.SAMPLE_RATE_HZ))
        await self._advance_output()

    async def _advance_output(self) -> None:
        """Send one output frame per whole input frame the model has stepped: reply audio, else silence."""
        if not self._ready:
            return
        due = self._decided_samples // moshi.FRAME_SAMPLES
        while self._frames_out < due:
            self._frames_out += 1
            pcm, texts = self._next_output_frame()
            for text in texts:
                await self._send(moshi.frame(moshi.Kind.TEXT, text.encode()))
            ogg = self._encoder.encode(pcm)
            if ogg:
                await self._send(moshi.frame(moshi.Kind.AUDIO, ogg))

    def _next_output_frame(self) -> tuple[np.ndarray[Any, np.dtype[np.float32]], list[str]]:
        out = np.zeros(moshi.FRAME_SAMPLES, dtype=np.float32)
        filled, texts = 0, []
        while filled < moshi.FRAME_SAMPLES and self._reply:
            samples, text = self._reply[0]
            if self._reply_offset == 0 and text:
                texts.append(text)
            take = min(moshi.FRAME_SAMPLES - filled, len(samples) - self._reply_offset)
            out[filled : filled + take] = samples[self._reply_offset : self._reply_offset + take]
            filled += take
            self._reply_offset += take
            if self._reply_offset >= len(samples):
                self._reply.popleft()
                self._reply_offset = 0
        return out, texts

    async def _error(self, message: str) -> None:
        await self._send(moshi.frame(moshi.Kind.ERROR, message.encode()))

    async def _send(self, data: bytes) -> None:
        async with self._send_lock:
            await self.ws.send_bytes(data)


def session_from_query(query: dict[str, str]) -> dict[str, Any]:
    """The opening `session.update` for a Moshi connection: the mapped query plus the fixed Moshi terms."""
    mapping = moshi.map_query(query)
    if mapping.ignored:
        log.info("moshi session: query parameters without a meaning here: %s", ", ".join(mapping.ignored))
    return {
        **mapping.session,
        "input_audio_format": "pcm_f32le",
        "output_audio_format": "pcm_f32le",
        "input_sample_rate_hz": moshi.SAMPLE_RATE_HZ,
        "turn_detection": None,
        "playback_commit_policy": "commit_all_on_done",
    }
