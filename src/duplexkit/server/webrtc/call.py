"""One WebRTC call as the runner's socket: the client's track and `oai-events` channel in, the server's track
and the channel out (aiortc; imported only when a call comes).

`WebRTCCall` is an in-process edge (`edge.EventSocket`), as `server.moshi.MoshiSocket` is: it hands the
runner typed client events and takes the session's event objects, so the track's audio goes to the model
and back as samples, with no JSON or base64 in between; the data channel is the call's JSON socket, and
only what rides it is parsed or rendered (`protocol.wire`, in the session's dialect):

* In (`receive_event`): first the call's opening `session.update` (the session object of the offer, with
  the call's audio terms, see `signalling`); then the client's audio as `input_audio_buffer.append` events
  of its samples on the track's RTP media clock (`media.TrackInput`), the channel's events, parsed here (a
  `session.update`'s audio terms pinned), and the playback acks the server's track makes.
* Out (`send_event`): reply audio deltas go to the server's track as samples (`media.Playout`, paced in
  real time by `ReplyTrack`), never on the channel; every other event is rendered on the channel in the
  session's dialect. A cancelled response's unsent audio is dropped. The call adds OpenAI's
  WebRTC-only `output_audio_buffer.started` (a response's first frame went out on the track), `.stopped`
  (a finished response's last frame went out, after its `response.done`) and `.cleared` (a cancelled
  response's audio was cut from the track); they are the call's, outside the session's
  `server_event_seq`.
* The call ends (`receive` returns `None`; the runner ends the session and closes this) when the channel
  closes, the peer connection fails or closes (ICE failure, DTLS close), the client opens a channel with
  another name (`invalid_data_channel` on that channel), or the call is not connected, with its channel when
  the offer has a data section, within `connect_timeout_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCDataChannel,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame

from duplexkit.protocol import client_events as ce
from duplexkit.protocol import server_events as se
from duplexkit.protocol.audio import EncodedAudio, encode_audio
from duplexkit.protocol.dialects import Dialect
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.protocol.server_events import error_event
from duplexkit.protocol.wire import EventRenderer, ServerEventStamper, client_object
from duplexkit.server.edge import NO_CLOSE_FRAME, EdgeTaskFailed, SocketClosed
from duplexkit.server.metrics import ServerMetrics
from duplexkit.server.supervision import supervised
from duplexkit.server.webrtc.media import FRAME_SAMPLES, TRACK_RATE_HZ, Ack, Playout, TrackInput, to_mono
from duplexkit.server.webrtc.signalling import EVENTS_CHANNEL, Offer, pinned_client_object

log = logging.getLogger("duplexkit.server")

_TIME_BASE = fractions.Fraction(1, TRACK_RATE_HZ)
_ACK_PREFIX = "evt_rtc_ack_"
"""The event ids of the playback acks the call makes; the runner's answers to them stay off the channel."""
_EVENT_PREFIX = "evt_rtc_"
"""The event ids of the events the call itself sends (`output_audio_buffer.*`)."""
_CHANNEL_HIGH_BYTES = 1024 * 1024
"""Bytes queued on the channel past which sending waits (the runner's outbound bound then applies)."""
_CHANNEL_CLOSE_S = 1.0
"""How long a closing call waits for its channels to close cleanly (what was sent arrives first)."""


class ReplyTrack(MediaStreamTrack):
    """The server's audio track: one 20 ms frame of `Playout` per `recv`, paced by the wall clock from the
    first frame (a late loop catches up at once), reply audio or silence; each frame's acks go to
    `on_acks`."""

    kind = "audio"

    def __init__(self, playout: Playout, on_acks: Callable[[list[Ack]], None]) -> None:
        super().__init__()
        self._playout = playout
        self._on_acks = on_acks
        self._start: float | None = None
        self._pts = 0

    async def recv(self) -> AudioFrame:
        if self._start is None:
            self._start = time.monotonic()
        else:
            self._pts += FRAME_SAMPLES
            wait = self._start + self._pts / TRACK_RATE_HZ - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        samples, acks = self._playout.next_frame()
        if acks:
            self._on_acks(acks)
        pcm = np.frombuffer(encode_audio(samples, "pcm16"), "<i2").reshape(1, -1)
        frame = AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
        frame.sample_rate = TRACK_RATE_HZ
        frame.pts = self._pts
        frame.time_base = _TIME_BASE
        return frame


class WebRTCCall:
    """The runner's socket for one call (see the module doc). Made by `answer`."""

    def __init__(
        self,
        pc: RTCPeerConnection,
        offer: Offer,
        opening: ce.SessionUpdate,
        *,
        dialect: Dialect,
        input_rate_hz: int,
        max_event_bytes: int,
        metrics: ServerMetrics,
    ) -> None:
        self._pc = pc
        self._dialect = dialect
        self._renderer = EventRenderer(dialect)
        """The channel's JSON: the session's events in its dialect (the runner stamped them)."""
        self._input_rate_hz = input_rate_hz
        self._max_event_bytes = max_event_bytes
        self._metrics = metrics
        self._inbound: asyncio.Queue[ce.ClientEventBase | ProtocolError | EdgeTaskFailed | None] = (
            asyncio.Queue()
        )
        self._inbound.put_nowait(opening)
        self._input = TrackInput(input_rate_hz)
        self._playout = Playout()
        self._track = ReplyTrack(self._playout, self._acknowledge)
        self._channel: RTCDataChannel | None = None
        self._refused: list[RTCDataChannel] = []
        self._wants_channel = offer.data_channel
        self._channel_settled = asyncio.Event()
        """Set once the events channel is open, or never will be (no data section, or the call ended)."""
        if not self._wants_channel:
            self._channel_settled.set()
        self._drained = asyncio.Event()
        self._drained.set()
        self._connected = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._ended = False
        self._close_code: int | None = None
        self._closed = False

    @classmethod
    async def answer(
        cls,
        offer: Offer,
        opening: ce.SessionUpdate,
        *,
        dialect: Dialect,
        input_rate_hz: int,
        max_event_bytes: int,
        metrics: ServerMetrics,
        connect_timeout_s: float,
    ) -> tuple[WebRTCCall, str]:
        """A call for `offer` and its SDP answer. Raises `ProtocolError(invalid_sdp)` when the offer cannot
        be answered (nothing is left running then, nor when cancelled). Host candidates only: no STUN or
        TURN server is asked. `max_event_bytes`: the largest channel message parsed (the runner's limit for
        a JSON socket)."""
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        call = cls(
            pc,
            offer,
            opening,
            dialect=dialect,
            input_rate_hz=input_rate_hz,
            max_event_bytes=max_event_bytes,
            metrics=metrics,
        )
        pc.on("track", call._on_track)
        pc.on("datachannel", call._on_channel)
        pc.on("connectionstatechange", call._on_state)
        answered = False
        try:
            await pc.setRemoteDescription(RTCSessionDescription(offer.sdp, "offer"))
            pc.addTrack(call._track)
            await pc.setLocalDescription(await pc.createAnswer())
            answered = True
        except Exception as exc:
            raise ProtocolError(
                ErrorCode.INVALID_SDP, f"the offer cannot be answered: {exc}", param="sdp"
            ) from exc
        finally:
            if not answered:  # refused, or cancelled: nothing is left running
                await call.close()
        call._spawn(call._watch(connect_timeout_s), "webrtc-watch")
        return call, pc.localDescription.sdp

    # --- the runner's socket --------------------------------------------------------------------------

    async def receive_event(self) -> ce.ClientEventBase | ProtocolError | None:
        message = await self._inbound.get()
        if message is None:
            self._inbound.put_nowait(None)  # every later read sees the end too
        elif isinstance(message, EdgeTaskFailed):
            raise message
        return message

    async def send_event(self, event: se.ServerEventBase) -> None:
        if isinstance(event, se.ResponseOutputAudioDelta):
            assert event.audio is not None  # the engine's deltas hold their audio
            self._playout.add(event.response_id, event.audio.decode(), event.sample_rate_hz)
            return
        if isinstance(event, se.Error) and _answers_own_ack(event):
            return  # an answer to the call's own ack (e.g. too late after a barge-in): not the client's
        text = self._renderer.render(event)
        if isinstance(event, se.ResponseDone):
            response_id = event.response.id
            if event.response.status == "cancelled":
                cleared = self._playout.drop(response_id)
                await self._send_event(text)
                if cleared:
                    await self._send_event(self._own(se.OutputAudioBufferCleared(response_id=response_id)))
            else:
                await self._send_event(text)
                if self._playout.finish(response_id):  # its audio had all gone out: it stops now
                    await self._send_event(self._own(se.OutputAudioBufferStopped(response_id=response_id)))
            return
        await self._send_event(text)

    async def close(self, code: int = 1000) -> None:
        """End the call: close its channels cleanly (bounded), then the peer connection; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._end()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._pc.connectionState == "connected":
            channels = [c for c in (self._channel, *self._refused) if c is not None]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_close_channels(channels), _CHANNEL_CLOSE_S)
        await self._pc.close()
        lost_ms = 1000.0 * self._input.lost_samples / TRACK_RATE_HZ
        if lost_ms:
            log.info("webrtc call: %.0f ms of input audio lost (filled with silence)", lost_ms)

    # --- peer connection events -----------------------------------------------------------------------

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._spawn(self._read_track(track), "webrtc-input")

    def _on_channel(self, channel: RTCDataChannel) -> None:
        if channel.label != EVENTS_CHANNEL or self._channel is not None:
            message = (
                f"a call's events go on one data channel named {EVENTS_CHANNEL!r}, not {channel.label!r}"
            )
            event = error_event(ErrorCode.INVALID_DATA_CHANNEL, message, param="label")
            with contextlib.suppress(Exception):
                channel.send(ServerEventStamper(self._dialect).encode(event))
            self._refused.append(channel)
            log.info("webrtc call refused: %s", message)
            self._end()
            return
        self._channel = channel
        channel.bufferedAmountLowThreshold = _CHANNEL_HIGH_BYTES // 2
        channel.on("message", self._on_message)
        channel.on("close", self._end)
        channel.on("bufferedamountlow", self._drained.set)
        self._channel_settled.set()

    def _on_message(self, message: str | bytes) -> None:
        if not self._ended:
            self._inbound.put_nowait(self._client_event(message))

    def _client_event(self, message: str | bytes) -> ce.ClientEventBase | ProtocolError:
        """A channel message as the runner takes it: its typed event (a `session.update`'s audio terms
        pinned; audio is PCM16 on a call), or the coded error the runner answers it with."""
        try:
            obj = client_object(message, max_bytes=self._max_event_bytes, dialect=self._dialect)
            return ce.validate_client_event(pinned_client_object(obj), "pcm16")
        except ProtocolError as exc:
            return exc

    def _on_state(self) -> None:
        state = self._pc.connectionState
        if state == "connected":
            self._connected.set()
        elif state in ("failed", "closed"):
            log.info("webrtc call: peer connection %s", state)
            self._end(NO_CLOSE_FRAME if state == "failed" else 1000)

    # --- internals ------------------------------------------------------------------------------------

    async def _watch(self, timeout_s: float) -> None:
        """End a call that does not connect, with its events channel when it wants one, in time."""
        try:
            await asyncio.wait_for(
                asyncio.gather(self._connected.wait(), self._channel_settled.wait()), timeout_s
            )
        except TimeoutError:
            log.info("webrtc call: not connected within %g s", timeout_s)
            self._end(NO_CLOSE_FRAME)

    async def _read_track(self, track: MediaStreamTrack) -> None:
        """The client's audio onto the input, on the RTP media clock, until the track ends."""
        with contextlib.suppress(MediaStreamError):
            while not self._ended:
                frame = await track.recv()
                assert isinstance(frame, AudioFrame) and frame.pts is not None
                lost = self._input.lost_samples
                samples = self._input.feed(frame.pts, to_mono(frame.to_ndarray(), len(frame.layout.channels)))
                if self._input.lost_samples > lost:
                    self._metrics.webrtc_input_lost_seconds.inc(
                        (self._input.lost_samples - lost) / TRACK_RATE_HZ
                    )
                if len(samples) and not self._ended:
                    append = ce.InputAudioBufferAppend.of_audio(
                        EncodedAudio.of_samples(samples, "pcm16"),
                        input_audio_format="pcm16",
                        sample_rate_hz=self._input_rate_hz,
                    )
                    self._inbound.put_nowait(append)

    def _acknowledge(self, acks: list[Ack]) -> None:
        """What the track sent counts as played: a `playback.ack` per response it advanced; its first and
        last frames also start and stop the response's `output_audio_buffer` on the channel."""
        for ack in acks:
            if self._ended:
                return
            started, stopped = se.OutputAudioBufferStarted, se.OutputAudioBufferStopped
            if ack.first:
                self._spawn(self._mark(started(response_id=ack.response_id)), "webrtc-mark")
            event = ce.PlaybackAck(
                event_id=f"{_ACK_PREFIX}{secrets.token_hex(6)}",
                response_id=ack.response_id,
                played_ms=round(ack.played_ms, 3),
            )
            self._inbound.put_nowait(event)
            if ack.last:
                self._spawn(self._mark(stopped(response_id=ack.response_id)), "webrtc-mark")

    async def _mark(self, event: se.ServerEventBase) -> None:
        """Send one of the call's own events from the track (the call may be ending: then it is not sent)."""
        with contextlib.suppress(SocketClosed):
            await self._send_event(self._own(event))

    def _own(self, event: se.ServerEventBase) -> str:
        """One of the call's own events as JSON in the session's dialect: an `event_id`, no sequence number
        (the session's `server_event_seq` counts the session's events only)."""
        event.event_id = f"{_EVENT_PREFIX}{secrets.token_hex(6)}"
        return self._renderer.render(event)

    async def _send_event(self, text: str) -> None:
        await self._channel_settled.wait()
        channel = self._channel
        if channel is None:
            if self._wants_channel:
                raise SocketClosed("the call ended before its events channel opened")
            return  # an audio-only call: its events have nowhere to go
        while channel.bufferedAmount > _CHANNEL_HIGH_BYTES and channel.readyState == "open":
            self._drained.clear()
            await self._drained.wait()
        try:
            channel.send(text)
        except Exception as exc:  # aiortc's InvalidStateError once the channel is closed
            raise SocketClosed(f"the events channel is {channel.readyState}") from exc

    @property
    def close_code(self) -> int | None:
        """How the call ended, in the WebSocket's terms (`edge.left_on_purpose`): 1000 when the peer closed
        the events channel or the connection (DTLS close), `NO_CLOSE_FRAME` when it failed (ICE) or never
        connected. A call has no resume contract, so either way its session ends."""
        return self._close_code

    def _end(self, code: int = 1000) -> None:
        """The call is over: the runner reads `None` next (it ends the session and closes this)."""
        if not self._ended:
            self._ended = True
            self._close_code = code
            self._inbound.put_nowait(None)
            self._channel_settled.set()
            self._drained.set()

    def _spawn(self, coro: Any, name: str) -> None:
        task = supervised(coro, name, self._task_failed)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _task_failed(self, name: str, exc: BaseException) -> None:
        """A task of the call's own raised: the runner's next read raises it (`edge.EdgeTaskFailed`)."""
        failure = EdgeTaskFailed(name)
        failure.__cause__ = exc
        self._inbound.put_nowait(failure)


def _answers_own_ack(event: se.Error) -> bool:
    """Whether an `error` event answers one of the acks the call made."""
    return (event.error.event_id or "").startswith(_ACK_PREFIX)


async def _close_channels(channels: list[RTCDataChannel]) -> None:
    """Close each channel after what was queued on it (SCTP resets a stream after its pending messages)."""
    closed = []
    for channel in channels:
        if channel.readyState == "closed":
            continue
        done = asyncio.Event()
        channel.on("close", done.set)
        channel.close()
        closed.append(done.wait())
    if closed:
        await asyncio.gather(*closed)
