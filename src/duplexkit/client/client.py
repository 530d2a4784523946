"""DuplexClient: an asyncio client for the duplex realtime protocol, for any conforming server.

Three tasks run per connection. The writer is the only code that touches the socket for sending: every
event goes through its FIFO queue, so events reach the wire in the order they were queued, whole, and a
caller that stops waiting (a timeout, a cancelled task) never leaves half a frame behind. The reader stamps
every event with its receive time (`time.monotonic()`) and the media clock at receipt, and feeds the
`EventCollector` and the drain tracker. The acker reports playback every `ack_interval_s`.

Input audio goes out as PCM16 at the server's input rate on a media clock (`MediaClock`): every append
carries its `duration_ms` and the cumulative `audio_end_ms`.

The wire protocol is an adapter (`client.protocols`): the client builds canonical events, the adapter
turns each into its protocol's frames and each received message into canonical events. Its transport is
a WebSocket, or a WebRTC call (`client.webrtc`, for the `webrtc` adapter), which ends and refuses like one.

With a `ResumePolicy` (duplex protocol only), a connection lost before the session ended is resumed
(`client/reconnect.py`): the client reconnects with backoff, sends `session.resume`, drops replayed events
it already holds and sends again the frames the server never read, so the event log, the collector and the
media clock see every event and every append exactly once. Waits in progress (a stream, a drain) just wait
through the reconnect.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from duplexkit.client.collector import EventCollector, Placement, SentenceTiming
from duplexkit.client.connection import ServerCapabilities
from duplexkit.client.drain import CommitPoint, DrainTracker
from duplexkit.client.events import (
    ReceivedEvent,
    as_str,
    dig,
    error_code_of,
    error_message_of,
    is_failure,
)
from duplexkit.client.pacing import DeadlinePacer
from duplexkit.client.protocols import ProtocolAdapter, Wire, protocol_for
from duplexkit.client.protocols.duplex import DuplexProtocol
from duplexkit.client.reconnect import FINAL_RESUME_CODES, ResumePolicy, ResumeState
from duplexkit.client.results import CloseResult, DrainResult, Pace, StreamReport
from duplexkit.client.tools import ToolBox, ToolCallRecord, ToolCallTracker
from duplexkit.protocol import client_events as ce
from duplexkit.protocol.audio import AudioFormat, decode_audio, encode_audio, resample
from duplexkit.protocol.units import MediaClock, chunk_samples, ms_to_samples, samples_to_ms

if TYPE_CHECKING:
    from duplexkit.client.webrtc import CallConnection

T = TypeVar("T")

MAX_FRAME_BYTES = 16 * 1024 * 1024
"""Largest server frame accepted (a long audio delta can be large; the protocol's own limit is 15 MiB)."""
SOCKET_CLOSE_GRACE_S = 1.0
"""After `session.closed` (or its timeout), the WebSocket closing handshake gets this long before an abort."""


class SessionError(Exception):
    """The server refused or failed the session; `event` is the `error` event when there was one."""

    def __init__(self, message: str, event: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.event = event


class ConnectionLost(SessionError):
    """The connection closed while the client still needed it."""


class ConfigureTimeout(TimeoutError):
    """`configure` got no answer within its bound."""


class CapacityTimeout(TimeoutError):
    """The server kept the open socket waiting for a session slot (no handshake) past the capacity bound."""


@dataclass(slots=True)
class _Outgoing:
    frames: list[Wire]
    future: asyncio.Future[float]
    audio_end_ms: float | None
    is_commit: bool
    numbers: list[int] = field(default_factory=list)
    """Its frames' numbers in the session's frame order, once written with a resume policy."""


G711_PROTOCOLS = ("duplex", "openai", "openai-beta")
"""Protocols that carry G.711 (telephone) audio; Moshi's Opus frames and a WebRTC call's tracks carry
their own."""


class DuplexClient:
    """`async with DuplexClient(url) as client:` connects; leaving the block stops the tasks and closes the
    socket (use `close()` first for an orderly `session.close`).

    Every wait can be bounded (`configure`, `drain` and `close` always are); every send is answered with
    the time it reached the socket (`time.monotonic()`).
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        open_timeout_s: float = 10.0,
        ack_interval_s: float = 0.25,
        protocol: ProtocolAdapter | str = "auto",
        resume: ResumePolicy | None = None,
        rng: random.Random | None = None,
        placement: Placement | None = None,
        audio_format: AudioFormat = "pcm16",
        tools: ToolBox | None = None,
        tool_timeout_s: float | None = None,
        sentence_timing: SentenceTiming = "audio",
    ) -> None:
        self.protocol = protocol_for(protocol, url) if isinstance(protocol, str) else protocol
        """The wire protocol; a name (`auto` detects it from the URL) or an adapter."""
        if audio_format != "pcm16" and self.protocol.name not in G711_PROTOCOLS:
            raise ValueError(
                f"the {self.protocol.name} protocol carries its own audio; {audio_format} needs one of "
                + ", ".join(G711_PROTOCOLS)
            )
        self.audio_format: AudioFormat = audio_format
        """The audio on the wire both ways: `pcm16`, or G.711 (`g711_ulaw`, `g711_alaw`: telephone audio at
        8 kHz; the client converts the clip it streams and decodes the replies)."""
        if resume is not None and not isinstance(self.protocol, DuplexProtocol):
            raise ValueError(f"session resume needs the duplex protocol, not {self.protocol.name}")
        self.url = self.protocol.url(url, model=model)
        self.model = model
        self.collector = EventCollector(
            placement=placement or self.protocol.placement, sentence_timing=sentence_timing
        )
        """Where output sits on the input timeline: `placement`, else the protocol's default; how sentences
        are timed: `sentence_timing` (`collector.SentenceTiming`)."""
        self.collector.audio_format = audio_format
        self.events: list[ReceivedEvent] = []
        self.streams: list[StreamReport] = []
        self.padded_ms = 0.0
        self.ignored_frames = 0
        """Server messages the protocol adapter could not read (for JSON protocols: not a JSON object)."""
        self.connected_at = 0.0
        self._admission: tuple[float, float | None] | None = None
        """`(wait start, admitted at)` while or after `configure` waited for a slot (`capacity_wait_s`)."""
        self._headers = self.protocol.headers() | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
        self._open_timeout_s = open_timeout_s
        self._ack_interval_s = ack_interval_s
        self._ws: ClientConnection | CallConnection | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._reader: asyncio.Task[None] | None = None
        self._acker: asyncio.Task[None] | None = None
        self._outbox: asyncio.Queue[_Outgoing] = asyncio.Queue()
        self._lost: ConnectionLost | None = None
        self._changed = asyncio.Event()
        self._capabilities = ServerCapabilities()
        self._session: dict[str, Any] | None = None
        self._clock: MediaClock | None = None
        self._sent_audio_end_ms = 0.0
        self._timeline_origin: tuple[float, float] | None = None
        """`(wall time, media ms)` of the latest stream's start: the origin of where events are heard."""
        self._pacing: tuple[DeadlinePacer, float] | None = None
        self._drain: DrainTracker | None = None
        self._acked: dict[str, float] = {}
        self._latest_acks: dict[str, asyncio.Future[float]] = {}
        """Per response, the wire time of its latest queued `playback.ack`."""
        self._policy = resume
        self._rng = rng or random.Random()
        self._resume = ResumeState(resume.resend_buffer_bytes if resume else 0)
        self._unconfirmed: dict[int, _Outgoing] = {}
        self._recovery: asyncio.Task[None] | None = None
        self._closing = False
        self.resumes: list[dict[str, Any]] = []
        """Every `session.resumed` this client received (one per successful resume)."""
        self.resync: dict[str, Any] | None = None
        """The `session.resync_required` event, if a resume could not replay what was missed."""
        self.resume_failures: list[str] = []
        """Why each failed resume attempt failed."""
        self.tools = tools
        """The tools the client answers function calls with (`client.tools`); `configure` declares them.
        Without it, function calls are recorded by the server's events only and never answered."""
        self.tool_calls: list[ToolCallRecord] = []
        """Every function call the server asked for and what became of it, in arrival order."""
        self._tool_timeout_s = tool_timeout_s
        self._tool_tracker = ToolCallTracker()
        self._continuations = 0
        """`response.create`s sent to continue a call's response and not yet answered (`response.created`)."""
        self._tool_tasks: set[asyncio.Task[None]] = set()
        self._configured: dict[str, Any] | None = None
        """What `configure` set besides the instructions (`update_instructions` sends it again)."""

    # --- connection -----------------------------------------------------------------------------------

    async def __aenter__(self) -> DuplexClient:
        self._ws = await self._connect(self._open_timeout_s)
        self.connected_at = time.monotonic()
        self._acker = asyncio.create_task(self._ack_loop(), name="duplex-acker")
        self._start_io(self._ws, [])
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        tasks = [t for t in (*self._tasks, *self._tool_tasks, self._acker, self._recovery) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._close_socket()

    async def _connect(self, timeout_s: float, url: str | None = None) -> ClientConnection | CallConnection:
        if self.protocol.transport == "webrtc":
            from duplexkit.client.webrtc import open_call

            return await open_call(url or self.url, self._headers, timeout_s)
        return await connect(
            url or self.url,
            additional_headers=self._headers,
            open_timeout=timeout_s,
            max_size=MAX_FRAME_BYTES,
            compression=None,
            ping_interval=None,
        )

    def _start_io(self, ws: ClientConnection | CallConnection, resend: list[tuple[int, Wire]]) -> None:
        """The reader and the writer for `ws`; the writer first sends `resend` (frames the server lacks)."""
        self._reader = asyncio.create_task(self._read_loop(ws), name="duplex-reader")
        self._tasks = [self._reader, asyncio.create_task(self._write_loop(ws, resend), name="duplex-writer")]

    @property
    def resumed(self) -> int:
        """How many times the session was resumed after a lost connection."""
        return len(self.resumes)

    @property
    def frames_written(self) -> int:
        """Frames of this session written (counted with a resume policy only; resends are not counted)."""
        return self._resume.frames_written

    @property
    def duplicates_dropped(self) -> int:
        """Replayed events dropped because they had already been received."""
        return self._resume.duplicates

    @property
    def capabilities(self) -> ServerCapabilities:
        """From the latest `session.created`/`session.updated`; defaults (1000 ms units) until one arrives."""
        return self._capabilities

    @property
    def session_id(self) -> str | None:
        return as_str(dig(self._session, "id"))

    @property
    def server_model(self) -> str | None:
        """The model the server named in its latest `session.created`/`session.updated` (`None` until one
        arrives or when it names none): what served the session, whatever the client asked for."""
        return as_str(dig(self._session, "model"))

    @property
    def server_model_identity(self) -> str | None:
        """The `id` of the `model_identity` the server named with it (duplexkit's extension: what exactly
        served the session, a checkpoint's fingerprint included; `None` when it named none)."""
        return as_str(dig(self._session, "model_identity", "id"))

    @property
    def audio_end_ms(self) -> float:
        """The media clock: audio queued so far, in ms (what the next append's `audio_end_ms` builds on)."""
        return 0.0 if self._clock is None else self._clock.audio_end_ms

    def heard_at_ms(self, at: float) -> float:
        """Where an event received at `at` (monotonic) sits on the input timeline: its arrival on the
        stream's clock, the latest stream's start media time plus the time since it started. Never before
        the input already on the wire: in real time that is never later than the arrival, but a stream sent
        as fast as possible (clock=invalid) runs ahead of the wall clock, and a reply cannot precede the
        input it follows. Before any stream, the media clock on the wire (0 until audio is sent)."""
        if self._timeline_origin is None:
            return self._sent_audio_end_ms
        started, start_ms = self._timeline_origin
        return max(start_ms + max(0.0, at - started) * 1000.0, self._sent_audio_end_ms)

    @property
    def sent_audio_end_ms(self) -> float:
        """The media clock on the wire: `audio_end_ms` of the last append written to the socket."""
        return self._sent_audio_end_ms

    @property
    def connection_lost(self) -> bool:
        return self._lost is not None

    @property
    def capacity_wait_s(self) -> float:
        """How long the open socket waited for a session slot (`ProtocolAdapter.admits_with_ready`), so
        far if it still waits; 0 for a server that admits at once or refuses instead."""
        if self._admission is None:
            return 0.0
        started, admitted = self._admission
        return (time.monotonic() if admitted is None else admitted) - started

    async def configure(
        self,
        *,
        modalities: Sequence[Literal["audio", "text"]] = ("audio", "text"),
        instructions: str | None = None,
        voice: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout_s: float = 10.0,
        capacity_timeout_s: float | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        turn_detection: Mapping[str, Any] | None = None,
    ) -> ServerCapabilities:
        """Send `session.update` (the client's `audio_format` in and out, `turn_detection: null` unless
        `turn_detection` names the server's turn detector, e.g. `{"type": "server_vad", ...}`,
        `playback_commit_policy: ack_only`, `extra_body` as the session's model parameters); wait up to
        `timeout_s` for `session.created`.

        With `capacity_timeout_s`, a server that admits a session by sending its ready event (Moshi's
        one-lock server) is first waited for up to that long: the socket is open and waiting for a slot,
        recorded as `capacity_wait_s`, not as configuring; `timeout_s` then bounds the rest.

        With `tools` (the client's `ToolBox`), the update declares them (`tools`, and `tool_choice` when
        given), as OpenAI's function tools.

        Raises `ConfigureTimeout` (a `TimeoutError`), `CapacityTimeout` when no slot came in time, or
        `SessionError` when the server answers with an error or hangs up.
        """
        if capacity_timeout_s is not None and self.protocol.admits_with_ready:
            await self._await_admission(capacity_timeout_s)
        self._configured = {
            "modalities": modalities,
            "voice": voice,
            "extra_body": extra_body,
            "tool_choice": tool_choice,
            "turn_detection": turn_detection,
        }
        payload = self._session_update(instructions=instructions, **self._configured)
        answer = None
        try:
            async with asyncio.timeout(timeout_s):
                await self._written(self._enqueue(payload))
                answer = await self._wait_for(self._ready_or_refused)
        except TimeoutError:
            raise ConfigureTimeout(f"no {self.protocol.ready_event} within {timeout_s:g} s") from None
        except ConnectionLost:  # a refusal (e.g. capacity) is an error event and then a closed socket
            if self._reader is not None:  # let the reader deliver what arrived before the close
                await asyncio.wait([self._reader], timeout=SOCKET_CLOSE_GRACE_S)
            answer = next((e for e in self.events if is_failure(e.data)), None)
            if answer is None:
                raise
        if answer.type != self.protocol.ready_event:
            raise SessionError(f"session refused: {_error_text(answer.data)}", answer.data)
        return self._capabilities

    def _session_update(
        self,
        *,
        modalities: Sequence[Literal["audio", "text"]],
        instructions: str | None,
        voice: str | None,
        extra_body: Mapping[str, Any] | None,
        tool_choice: str | Mapping[str, Any] | None,
        turn_detection: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        session = ce.SessionConfig(
            model=self.model,
            modalities=list(modalities),
            instructions=instructions,
            voice=voice,
            input_audio_format=self.audio_format,
            output_audio_format=self.audio_format,
            playback_commit_policy="ack_only",
            extra_body=dict(extra_body) if extra_body else None,
        )
        payload = ce.SessionUpdate(session=session).model_dump(mode="json", exclude_none=True)
        # explicit null: model-native turn taking
        payload["session"]["turn_detection"] = None if turn_detection is None else dict(turn_detection)
        if self.tools is not None:
            payload["session"]["tools"] = self.tools.definitions()
            if tool_choice is not None:
                payload["session"]["tool_choice"] = tool_choice
        return payload

    async def update_instructions(self, instructions: str, *, timeout_s: float | None = None) -> float:
        """Send a `session.update` with new `instructions` and everything else as `configure` set it (a
        dialect whose update replaces the whole session keeps its turn detection and formats); return its
        wire time. Does not wait for the server's answer."""
        if self._configured is None:
            raise RuntimeError("configure() first")
        return await self.send(
            self._session_update(instructions=instructions, **self._configured), timeout_s=timeout_s
        )

    def _ready_or_refused(self) -> ReceivedEvent | None:
        ready = self.protocol.ready_event
        return next((e for e in self.events if e.type == ready or is_failure(e.data)), None)

    async def _await_admission(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for the ready event (or a refusal, or the loss that `configure` then
        reports) of a server that admits with it; `CapacityTimeout` when neither came."""
        started = time.monotonic()
        self._admission = (started, None)
        try:
            async with asyncio.timeout(timeout_s):
                await self._wait_for(self._ready_or_refused)
        except TimeoutError:
            raise CapacityTimeout(
                f"no session slot within {timeout_s:g} s (socket open, no handshake)"
            ) from None
        except ConnectionLost:
            pass
        finally:
            self._admission = (started, time.monotonic())

    # --- sending --------------------------------------------------------------------------------------

    async def send(self, event: BaseModel | Mapping[str, Any], *, timeout_s: float | None = None) -> float:
        """Queue any client event and wait (at most `timeout_s`) until it is on the wire; return that time.

        On `TimeoutError` the event stays queued: it reaches the wire, whole, before anything queued later.
        Raises `ConnectionLost` when the connection is gone.
        """
        payload = event.model_dump(mode="json", exclude_none=True) if isinstance(event, BaseModel) else event
        return await self._written(self._enqueue(dict(payload)), timeout_s)

    async def commit(self, *, timeout_s: float | None = None) -> float:
        """Send `input_audio_buffer.commit{final: true}`; from here `drain()` tracks the replies.

        Bounded like `send`: on `TimeoutError` the commit stays queued ahead of anything sent after it
        (silence padding included), so it still reaches the server first.
        """
        point = CommitPoint.at(self.audio_end_ms, self._capabilities.grid, self.events)
        self._drain = DrainTracker(time.monotonic(), self.collector.open_responses(), point)
        if not self.protocol.sends_commit:
            # No commit on the wire (Moshi, server VAD): the input's end stands for it, and a server that
            # decides by itself may already have answered during the input: a reply seen is its decision.
            self._drain.assume_committed(decided=bool(self.collector.responses()))
        event = ce.InputAudioBufferCommit(final=True)
        queued = self._enqueue(event.model_dump(mode="json", exclude_none=True), commit=True)
        return await self._written(queued, timeout_s)

    async def cancel(self, response_id: str | None = None, *, timeout_s: float | None = None) -> float:
        """Send `response.cancel` (the active response, or `response_id`)."""
        return await self.send(ce.ResponseCancel(response_id=response_id), timeout_s=timeout_s)

    async def clear(self, *, timeout_s: float | None = None) -> float:
        """Send `input_audio_buffer.clear`."""
        return await self.send(ce.InputAudioBufferClear(), timeout_s=timeout_s)

    async def append_audio(self, samples: npt.ArrayLike, *, timeout_s: float | None = None) -> float:
        """Append mono float samples at the server's input rate as one append; return its wire time."""
        pcm = encode_audio(np.asarray(samples, dtype=np.float32), "pcm16")
        _, end_ms = self._advance(len(pcm) // 2)
        return await self._written(self._queue_append(pcm, end_ms), timeout_s)

    async def append_silence(self, ms: float, *, timeout_s: float | None = None) -> float:
        """Append `ms` of zeros in the very same append shape (`duration_ms`, `audio_end_ms`), advancing the
        media clock; return its wire time."""
        samples = ms_to_samples(ms, self._input_rate())
        _, end_ms = self._advance(samples)
        return await self._written(self._queue_append(bytes(2 * samples), end_ms), timeout_s)

    async def stream(
        self,
        samples: npt.ArrayLike,
        *,
        sample_rate_hz: int,
        frames: Sequence[bytes] | None = None,
        pace: Pace = "realtime",
        chunk_ms: int = 200,
        timeout_s: float | None = None,
    ) -> StreamReport:
        """Stream a mono clip as `chunk_ms` appends (resampled to the server's input rate if needed).

        `frames[j]` (JPEG/PNG bytes) rides on the append that closes the j-th unit boundary this stream
        crosses (units from the server's advertised grid); when the clip ends inside a unit, the next frame
        rides on the last append (the commit closes that unit); frames beyond are not sent.

        `realtime` sends each append when the audio it carries has happened: at stream start + the media
        offset where it ends (deadline schedule, see `DeadlinePacer`). `as-fast-as-possible` does not wait
        (the run's clock is then invalid). The stream's start (the call, once the audio is converted) is
        the origin of the session's stream TTFT/TTFP.
        Each append waits until the previous one is on the wire, so a server that stops reading stalls the
        stream rather than the client's memory.

        Stopping early, by `timeout_s` (the report then says `timed_out`) or by cancelling the task, takes
        effect between appends: every append already queued reaches the wire whole and in order, before
        anything queued later; none after it is queued. The media clock (`audio_end_ms`) and the frames
        sent then cover exactly the queued appends, and the client stays usable (commit, padding, close).
        """
        rate = self._input_rate()
        audio = np.asarray(samples, dtype=np.float32)
        pcm = await asyncio.to_thread(_pcm16_at, audio, sample_rate_hz, rate)
        slices = chunk_samples(len(pcm) // 2, rate, chunk_ms)
        grid = self._capabilities.grid
        pending_frames = list(frames or [])
        start_ms = self.audio_end_ms
        report = StreamReport(pace, chunk_ms, len(slices), start_ms, start_ms)
        self.streams.append(report)
        started = time.monotonic()
        self.collector.stream_started(started)
        self._timeline_origin = (started, start_ms)
        pacer = DeadlinePacer(started) if pace == "realtime" else None
        self._pacing = None if pacer is None else (pacer, start_ms)
        try:
            async with asyncio.timeout(timeout_s):
                for index, (lo, hi) in enumerate(slices):
                    slot = None
                    if pacer is not None:
                        slot = pacer.slot(
                            samples_to_ms(hi, rate), samples_to_ms(hi - lo, rate), time.monotonic()
                        )
                        if slot.wait_s > 0:
                            await asyncio.sleep(slot.wait_s)
                    prev_ms, end_ms = self._advance(hi - lo)
                    riding = len(grid.units_closed_between(prev_ms, end_ms))
                    if index == len(slices) - 1 and grid.residual_ms(end_ms) > 0:
                        riding += 1
                    ride, pending_frames = pending_frames[:riding], pending_frames[riding:]
                    written = self._queue_append(pcm[2 * lo : 2 * hi], end_ms, ride)
                    report.appends_queued += 1
                    report.frames_sent += len(ride)
                    report.audio_end_ms = end_ms
                    sent_at = await asyncio.shield(written)
                    report.appends_written += 1
                    if pacer is not None and slot is not None:
                        pacer.sent(slot, sent_at)
        except TimeoutError:
            report.timed_out = True
        finally:
            report.frames_dropped = len(pending_frames)
            report.pacing = pacer.report() if pacer is not None else None
        return report

    async def pad_silence(self, append_ms: int | None = None) -> None:
        """Append silence in real time until cancelled, in appends of `append_ms` (default: the last
        stream's chunk, else the server's unit), the same append shape as `stream`.

        Padding continues a realtime stream's deadline schedule (so the media clock keeps tracking the
        wall clock), or starts its own now. Cancellation takes effect between appends, as in `stream`.
        Raises `ConnectionLost` when the connection is gone.
        """
        rate = self._input_rate()
        default_ms = self.streams[-1].chunk_ms if self.streams else self._capabilities.chunk_period_ms
        samples = ms_to_samples(append_ms or default_ms, rate)
        duration_ms = samples_to_ms(samples, rate)
        if self._pacing is None:
            self._pacing = (DeadlinePacer(time.monotonic()), self.audio_end_ms)
            self._timeline_origin = self._timeline_origin or (self._pacing[0].start, self._pacing[1])
        pacer, origin_ms = self._pacing
        while True:
            slot = pacer.slot(self.audio_end_ms + duration_ms - origin_ms, duration_ms, time.monotonic())
            if slot.wait_s > 0:
                await asyncio.sleep(slot.wait_s)
            _, end_ms = self._advance(samples)
            written = self._queue_append(bytes(2 * samples), end_ms)
            self.padded_ms += duration_ms
            pacer.sent(slot, await asyncio.shield(written))

    async def ack_playback(self, *, timeout_s: float | None = None) -> None:
        """Send a final `playback.ack` for every response whose received audio has not been acked yet, and
        wait (at most `timeout_s` in all) until every response's latest ack is on the wire, including one
        the periodic acker queued earlier that has not reached it yet."""
        self._queue_acks()
        async with asyncio.timeout(timeout_s):
            for future in list(self._latest_acks.values()):
                await asyncio.shield(future)

    # --- waiting --------------------------------------------------------------------------------------

    async def drain_while_padding(self, *, settle_s: float = 2.0, timeout_s: float = 60.0) -> DrainResult:
        """`drain()` while `pad_silence()` keeps the server stepping; the padding stops when the drain ends.

        A padding failure other than a closed transport is raised (it is a bug to surface, not a drain
        timeout to report); a closed transport ends the drain as `connection_closed`.
        """
        padding = asyncio.create_task(self.pad_silence(), name="duplex-padding")
        draining = asyncio.create_task(
            self.drain(settle_s=settle_s, timeout_s=timeout_s), name="duplex-drain"
        )
        try:
            await asyncio.wait({padding, draining}, return_when=asyncio.FIRST_COMPLETED)
            if padding.done() and not padding.cancelled():
                error = padding.exception()
                if error is not None and not isinstance(error, ConnectionLost | ConnectionClosed | OSError):
                    raise error
            return await draining
        finally:
            for task in (padding, draining):
                task.cancel()
            for task in (padding, draining):
                with contextlib.suppress(asyncio.CancelledError, ConnectionLost, ConnectionClosed, OSError):
                    await task

    async def drain(self, *, settle_s: float = 2.0, timeout_s: float = 60.0) -> DrainResult:
        """Wait until the replies to the last commit have settled (see `DrainTracker`), at most `timeout_s`.

        Returns early on a session-failing `error` event or a lost connection. Listens are not activity.
        """
        tracker = self._drain
        if tracker is None:
            raise RuntimeError("drain() follows a commit(): there is nothing to settle yet")
        started = time.monotonic()
        deadline = started + timeout_s
        while True:
            now = time.monotonic()
            status = tracker.poll(now, settle_s)
            outcome: Literal["settled", "timeout", "error", "connection_closed"] | None = None
            if status.settled and not self.tools_busy:
                outcome = "settled"
            elif status.failure is not None:
                outcome = "error"
            elif self._lost is not None:
                outcome = "connection_closed"
            elif now >= deadline:
                outcome = "timeout"
            if outcome is not None:
                return DrainResult(
                    outcome, now - started, tracker.listens, status.failure, tracker.rule, tracker.settled_by
                )
            wake = deadline if status.wake_at is None else min(deadline, status.wake_at)
            await self._next_event(wake - now)

    async def close(self, timeout_s: float = 5.0, *, reason: str | None = None) -> CloseResult:
        """Send `session.close` and wait at most `timeout_s` for `session.closed`, then close the socket
        (its handshake bounded by `SOCKET_CLOSE_GRACE_S`). Never raises for a server that does not answer:
        the result says whether the close was clean."""
        started = time.monotonic()
        self._closing = True  # a connection lost from here on is not resumed
        if self._acker is not None:
            self._acker.cancel()  # no acks after the close request
        closed: ReceivedEvent | None = None
        outcome: Literal["closed", "timeout", "connection_closed"] = "closed"
        if not self.protocol.closes_with_event:
            return await self._close_without_event(started)
        try:
            async with asyncio.timeout(timeout_s):
                await self.send(ce.SessionClose(reason=reason))
                closed = await self._wait_for(
                    lambda: next((e for e in self.events if e.type == "session.closed"), None)
                )
        except TimeoutError:
            outcome = "timeout"
        except ConnectionLost:
            closed = next((e for e in self.events if e.type == "session.closed"), None)
            outcome = "closed" if closed is not None else "connection_closed"
        await self._close_socket()
        return CloseResult(
            clean=closed is not None,
            reason=None if closed is None else as_str(closed.data.get("reason")),
            outcome=outcome,
            elapsed_s=time.monotonic() - started,
            bound_s=timeout_s,
        )

    # --- internals ------------------------------------------------------------------------------------

    async def _close_without_event(self, started: float) -> CloseResult:
        """A protocol without `session.close`: the WebSocket closing handshake is the close; clean when
        it completed normally (1000)."""
        lost = self._lost is not None
        await self._close_socket()
        clean = not lost and self._ws is not None and self._ws.close_code == 1000
        return CloseResult(
            clean=clean,
            reason=None,
            outcome="connection_closed" if lost else "closed",
            elapsed_s=time.monotonic() - started,
            bound_s=SOCKET_CLOSE_GRACE_S,
        )

    async def _close_socket(self) -> None:
        """The WebSocket closing handshake, bounded: if the peer stopped reading, the transport is aborted."""
        if self._ws is None:
            return
        try:
            await asyncio.wait_for(self._ws.close(), SOCKET_CLOSE_GRACE_S)
        except TimeoutError:
            _abort(self._ws)

    def _input_rate(self) -> int:
        if self._clock is None:
            self._clock = MediaClock(self._capabilities.input_sample_rate_hz)
        rate = self._clock.rate
        assert rate is not None
        return rate

    def _advance(self, samples: int) -> tuple[float, float]:
        """Advance the media clock by `samples`; return its reading before and after.

        Callers queue the matching append right after, with no await in between, so the clock always
        covers exactly the queued appends.
        """
        self._input_rate()
        assert self._clock is not None
        before = self._clock.audio_end_ms
        return before, self._clock.advance_samples(samples)

    def _queue_append(self, pcm: bytes, end_ms: float, frames: Sequence[bytes] = ()) -> asyncio.Future[float]:
        """Queue one append of PCM16 `pcm` ending at media time `end_ms` (see `_advance`)."""
        rate = self._input_rate()
        samples = len(pcm) // 2
        if self.audio_format != "pcm16":  # telephone audio: the same samples in G.711, 1 byte each
            pcm = encode_audio(decode_audio(pcm, "pcm16"), self.audio_format)
        # Built by hand: the typed model decodes the audio on validation, work this hot path does not need.
        payload: dict[str, Any] = {
            "type": "input_audio_buffer.append",
            "audio": base64.b64encode(pcm).decode("ascii"),
            "sample_rate_hz": rate,
            "duration_ms": samples_to_ms(samples, rate),
            "audio_end_ms": end_ms,
        }
        if frames:
            payload["video_frames"] = [base64.b64encode(frame).decode("ascii") for frame in frames]
        return self._enqueue(payload, audio_end_ms=end_ms)

    def _enqueue(
        self, event: dict[str, Any], *, audio_end_ms: float | None = None, commit: bool = False
    ) -> asyncio.Future[float]:
        """Queue one canonical event as its protocol's frames (possibly none: it still takes its turn)."""
        if self._lost is not None:
            raise self._lost
        frames = self.protocol.encode(event)
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)
        self._outbox.put_nowait(_Outgoing(frames, future, audio_end_ms, commit))
        return future

    async def _written(self, future: asyncio.Future[float], timeout_s: float | None = None) -> float:
        """Wait for a queued event's wire time; giving up (timeout, cancel) leaves it queued."""
        async with asyncio.timeout(timeout_s):
            return await asyncio.shield(future)

    async def _write_loop(
        self, ws: ClientConnection | CallConnection, resend: list[tuple[int, Wire]]
    ) -> None:
        """Send `resend` (frames the server never read, after a resume), then the outbox in order.

        With a resume policy every frame is numbered and kept until written, so a loss mid-item leaves it
        to be resent on the next attachment; without one the item fails with the connection."""
        item: _Outgoing | None = None
        try:
            for number, text in resend:
                await ws.send(text)
                resent = self._unconfirmed.pop(number, None)
                if resent is not None and not any(n in self._unconfirmed for n in resent.numbers):
                    self._confirm(resent, time.monotonic())
            for read in list(self._unconfirmed.values()):  # read by the server before the loss
                self._confirm(read, time.monotonic())
            self._unconfirmed.clear()
            while True:
                item = await self._outbox.get()
                if self._policy is not None:
                    item.numbers = [self._resume.written(frame) for frame in item.frames]
                    self._unconfirmed.update(dict.fromkeys(item.numbers, item))
                for number, frame in zip(item.numbers or [0] * len(item.frames), item.frames, strict=True):
                    await ws.send(frame)
                    self._unconfirmed.pop(number, None)
                self._confirm(item, time.monotonic())
        except ConnectionClosed as exc:
            if self._policy is None and item is not None:  # the failed frame is lost with the connection
                item.future.set_exception(ConnectionLost(str(exc)))
            self._dropped(exc)

    def _confirm(self, item: _Outgoing, at: float) -> None:
        """`item` reached the wire at `at` (once: a resent frame is not confirmed twice)."""
        if item.future.done():
            return
        if item.audio_end_ms is not None:
            self._sent_audio_end_ms = item.audio_end_ms
        if item.is_commit:
            self.collector.commit_sent(at)
        item.future.set_result(at)

    async def _read_loop(self, ws: ClientConnection | CallConnection) -> None:
        try:
            async for message in ws:
                received_at = time.monotonic()
                events = self.protocol.decode(message)
                if events is None:
                    self.ignored_frames += 1
                    continue
                for data in events:
                    if not self._resume.deliver(data):
                        if data.get("type") == "session.resync_required":
                            self.resync = data
                        continue
                    heard = self.heard_at_ms(received_at)
                    self._on_event(ReceivedEvent(data, received_at, heard, self._sent_audio_end_ms))
        except ConnectionClosed as exc:
            self._dropped(exc)
        else:
            self._dropped(None)

    def _on_event(self, event: ReceivedEvent) -> None:
        self.events.append(event)
        session = event.data.get("session")
        if event.type in ("session.created", "session.updated") and isinstance(session, dict):
            self._session = session
            self._capabilities = self.protocol.capabilities(session)
            self.collector.output_rate_hz = self._capabilities.output_sample_rate_hz
        self.collector.observe(event)
        if self._drain is not None:
            self._drain.observe(event)
        if self.tools is not None:
            if event.type == "response.created" and self._continuations:
                self._continuations -= 1
            elif event.type == "error" and is_failure(event.data) and self._continuations:
                self._continuations -= 1  # a refused response.create is answered by its error
            for call in self._tool_tracker.observe(event.data, event.received_at, event.media_ms):
                record = ToolCallRecord(call)
                self.tool_calls.append(record)
                task = asyncio.create_task(self._answer_call(record), name=f"duplex-tool-{call.name}")
                self._tool_tasks.add(task)
                task.add_done_callback(self._tool_tasks.discard)
            self._continue_responses()
        self._wake()

    # --- function calls -------------------------------------------------------------------------------

    async def _answer_call(self, record: ToolCallRecord) -> None:
        """Run one call's tool (bounded by the client's `tool_timeout_s`) and send its output, unless its
        response was cancelled meanwhile (`client.tools`); then continue the response when it is due."""
        assert self.tools is not None
        call = record.call
        record.started_at = time.monotonic()
        try:
            async with asyncio.timeout(self._tool_timeout_s):
                record.output, record.error = await self.tools.run(call.name, call.arguments)
        except TimeoutError:
            bound = f"the tool did not answer within {self._tool_timeout_s:g} s"
            record.output = json.dumps({"error": bound})
            record.error = "tool_timeout"
        record.finished_at = time.monotonic()
        sent = False
        if self._tool_tracker.cancelled(call):
            record.status = "cancelled"
        elif self._lost is not None:
            record.status = "failed"
        else:
            item = {"type": "function_call_output", "call_id": call.call_id, "output": record.output}
            try:
                at = await self._written(self._enqueue({"type": "conversation.item.create", "item": item}))
            except ConnectionLost:
                record.status = "failed"
            else:
                record.output_sent_at, record.output_media_ms = at, self.heard_at_ms(at)
                record.status = "answered"
                sent = True
        self._tool_tracker.finished(call, sent=sent)
        self._continue_responses()
        self._wake()

    @property
    def tools_busy(self) -> bool:
        """A tool is running, or a `response.create` continuing a call's response is not answered yet: the
        replies are not settled while this holds (`drain`)."""
        return any(r.status == "running" for r in self.tool_calls) or self._continuations > 0

    def _continue_responses(self) -> None:
        """Queue `response.create` for each response whose calls are all answered and which is done."""
        for _ in self._tool_tracker.continuations():
            if self._lost is None and not self._closing:
                self._continuations += 1
                self._enqueue({"type": "response.create"})

    def _dropped(self, exc: ConnectionClosed | None) -> None:
        """The socket is gone: resume the session when the policy allows it, else the connection is lost."""
        if self._recovery is not None or self._lost is not None:
            return
        if self._policy is not None and self._resume.resumable and not self._closing:
            self._recovery = asyncio.create_task(self._recover(), name="duplex-resume")
            return
        self._connection_closed(exc)

    async def _recover(self) -> None:
        """Reconnect with backoff and resume; on success the reader and writer run on the new socket."""
        assert self._policy is not None
        current = asyncio.current_task()
        old = [t for t in self._tasks if t is not current]
        for task in old:
            task.cancel()
        await asyncio.gather(*old, return_exceptions=True)
        if self._ws is not None:
            _abort(self._ws)
        for delay in self._policy.delays(self._rng):
            await asyncio.sleep(delay)
            try:
                async with asyncio.timeout(self._policy.attempt_timeout_s):
                    ws = await self._connect(self._policy.attempt_timeout_s, self._resume_url())
                    answer = await self._resume_on(ws)
            except (OSError, ConnectionClosed, TimeoutError, InvalidHandshake, ValueError) as exc:
                self.resume_failures.append(f"{type(exc).__name__}: {exc}")
                continue
            if answer.get("type") != "session.resumed":
                self.resume_failures.append(_error_text(answer))
                if answer.get("type") == "error" and error_code_of(answer) in FINAL_RESUME_CODES:
                    break
                continue
            resend = self._resume.resumed(answer)
            if resend is None:
                self.resume_failures.append("the server cannot say which client frames it read")
                with contextlib.suppress(Exception):
                    await ws.close()
                break
            self._ws = ws
            self.resumes.append(answer)
            self._start_io(ws, resend)
            self._recovery = None
            return
        self._recovery = None
        failures = "; ".join(self.resume_failures[-3:])
        self._connection_closed(None, ConnectionLost(f"connection lost and not resumed ({failures})"))

    def _resume_url(self) -> str:
        """The session's URL with `session_id` in the query: a cluster's router sends the reconnection to
        the replica holding the session (`server.cluster.routing_key`)."""
        parts = urllib.parse.urlsplit(self.url)
        query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "session_id"]
        query.append(("session_id", self._resume.session_id or ""))
        return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))

    async def _resume_on(self, ws: ClientConnection | CallConnection) -> dict[str, Any]:
        """Send `session.resume` on a fresh socket; the answer (`session.resumed`, or the refusal)."""
        await ws.send(json.dumps(self._resume.resume_request()))
        while True:
            data = json.loads(await ws.recv())
            if isinstance(data, dict) and data.get("type") in ("session.resumed", "error"):
                return data

    def _connection_closed(self, exc: ConnectionClosed | None, lost: ConnectionLost | None = None) -> None:
        if self._lost is None:
            code = self._ws.close_code if self._ws is not None else None
            self._lost = lost or ConnectionLost(
                f"connection closed (code {code})" if exc is None else str(exc)
            )
            pending = list(self._unconfirmed.values())
            self._unconfirmed.clear()
            while not self._outbox.empty():
                pending.append(self._outbox.get_nowait())
            for item in pending:
                if not item.future.done():
                    item.future.set_exception(self._lost)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _next_event(self, timeout_s: float) -> None:
        """Return when an event arrives or the connection closes, or after `timeout_s`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), max(0.0, timeout_s))

    async def _wait_for(self, find: Callable[[], T | None]) -> T:
        """Wait (unbounded: callers bound it) until `find` returns something; `ConnectionLost` if the
        connection closes first."""
        while True:
            found = find()
            if found is not None:
                return found
            if self._lost is not None:
                raise self._lost
            await self._changed.wait()

    async def _ack_loop(self) -> None:
        if not self.protocol.acks_playback:
            return
        while True:
            await asyncio.sleep(self._ack_interval_s)
            try:
                self._queue_acks()
                seq = self._resume.ack_due() if self._policy is not None else None
                if seq is not None:  # lets the server trim its replay journal
                    self._enqueue({"type": "session.event_ack", "server_event_seq": seq})
            except ConnectionLost:
                return

    def _queue_acks(self) -> None:
        if not self.protocol.acks_playback:
            return
        for response_id, item_id, played_ms in self.collector.playback_positions():
            if played_ms > self._acked.get(response_id, 0.0):
                self._acked[response_id] = played_ms
                ack = ce.PlaybackAck(response_id=response_id, item_id=item_id, played_ms=played_ms)
                self._latest_acks[response_id] = self._enqueue(ack.model_dump(mode="json", exclude_none=True))


def _abort(ws: ClientConnection | CallConnection) -> None:
    """Drop the connection without its closing handshake."""
    if isinstance(ws, ClientConnection):
        ws.transport.abort()
    else:
        ws.abort()


def _pcm16_at(samples: npt.NDArray[np.float32], rate: int, target_rate: int) -> bytes:
    return encode_audio(samples if rate == target_rate else resample(samples, rate, target_rate), "pcm16")


def _retrieve(future: asyncio.Future[float]) -> None:
    """Mark a send's failure as seen: a caller that gave up waiting must not leave an unretrieved error."""
    if not future.cancelled():
        future.exception()


def _error_text(data: dict[str, Any]) -> str:
    return f"{error_code_of(data) or 'error'}: {error_message_of(data) or ''}"
