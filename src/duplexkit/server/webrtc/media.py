"""The audio of a call, without I/O: the client's track onto the engine's input, and the engine's reply
onto the server's track.

* `TrackInput`: decoded frames of the client's track, placed by their RTP timestamps (the sender's media
  clock, not the arrival time) and resampled to the model's input rate. A gap in the timestamps (packets
  lost, or dropped by the jitter buffer) becomes silence of the gap's length and is counted; a frame that
  overlaps what is already placed (a late or repeated packet) is trimmed; timestamps more than a second
  behind mean the sender's clock restarted, and placing goes on from there. So the engine hears the
  client's timeline exactly, whatever the network did.
* `Playout`: reply audio queued per response at the track's rate, taken 20 ms at a time, silence when there
  is none, so the track never underruns. What it has handed out counts as played (the track sends it
  now), and it says when to acknowledge that: on a response's first frame, every `ack_every_ms` of it, and
  when its queued audio runs out; and when a response's audio started and stopped on the track (OpenAI's
  `output_audio_buffer.started` / `.stopped`). A cancelled response's unsent audio is dropped: it is
  never said.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from duplexkit.protocol.audio import StreamingResampler
from duplexkit.protocol.units import samples_to_ms

TRACK_RATE_HZ = 48_000
"""Opus in WebRTC runs at 48 kHz: both tracks, and the RTP timestamps, are on this clock."""
FRAME_SAMPLES = 960
"""One 20 ms frame at 48 kHz (what the server's track sends per `recv`)."""

Samples = npt.NDArray[np.float32]


class TrackInput:
    """The client's track on its RTP media clock, resampled to `model_rate_hz` (see the module doc)."""

    def __init__(self, model_rate_hz: int) -> None:
        self._resampler = StreamingResampler(TRACK_RATE_HZ, model_rate_hz)
        self._next: int | None = None
        self.lost_samples = 0
        """Samples (at 48 kHz) the timestamps skipped, filled with silence."""

    def feed(self, pts: int, samples: Samples) -> Samples:
        """Place one decoded mono frame that starts at RTP time `pts` (48 kHz units, from the track's first
        frame); returns the audio now ready at the model's rate (it lags by the resampler's filter delay)."""
        if self._next is None or pts < self._next - TRACK_RATE_HZ:
            self._next = pts  # the first frame, or the sender's clock restarted (a new source)
        gap = pts - self._next
        if gap > 0:
            self.lost_samples += gap
            samples = np.concatenate([np.zeros(gap, np.float32), samples])
        elif gap < 0:
            samples = samples[-gap:]
        self._next += len(samples)
        return self._resampler.process(samples)


@dataclass(frozen=True, slots=True)
class Ack:
    """How much of a response the track has sent (counted as played), on the response's audio timeline."""

    response_id: str
    played_ms: float
    first: bool = False
    """This frame began the response's audio on the track."""
    last: bool = False
    """The response is finished and this frame sent the last of its audio."""


class Playout:
    """Reply audio for the server's track (see the module doc). `add` takes a response's audio at its own
    rate; `finish` ends the response (its resampler's tail is queued); `drop` forgets its unsent audio."""

    def __init__(self, ack_every_ms: float = 100.0) -> None:
        self._ack_every_ms = ack_every_ms
        self._queue: deque[tuple[str, Samples]] = deque()
        self._offset = 0
        self._resampling: tuple[str, StreamingResampler] | None = None
        self._sent: dict[str, int] = {}
        self._acked: dict[str, float] = {}

    def add(self, response_id: str, samples: Samples, rate_hz: int) -> None:
        if self._resampling is None or self._resampling[0] != response_id:
            self._end_resampling()
            self._resampling = (response_id, StreamingResampler(rate_hz, TRACK_RATE_HZ))
            self._sent.setdefault(response_id, 0)
        self._push(response_id, self._resampling[1].process(samples))

    def finish(self, response_id: str) -> bool:
        """End the response; True when all of its audio has already been sent (no frame will say so: it
        stopped now)."""
        if self._resampling is not None and self._resampling[0] == response_id:
            self._end_resampling()
        if response_id not in self._sent or any(rid == response_id for rid, _ in self._queue):
            return False
        self._acked.pop(response_id, None)
        return self._sent.pop(response_id) > 0

    def drop(self, response_id: str) -> bool:
        """Forget the response's unsent audio; True when it had started on the track and not stopped."""
        if self._resampling is not None and self._resampling[0] == response_id:
            self._resampling = None
        if self._queue and self._queue[0][0] == response_id:
            self._offset = 0
        self._queue = deque(item for item in self._queue if item[0] != response_id)
        self._acked.pop(response_id, None)
        return self._sent.pop(response_id, 0) > 0

    @property
    def queued_samples(self) -> int:
        return sum(len(samples) for _, samples in self._queue) - self._offset

    def next_frame(self) -> tuple[Samples, list[Ack]]:
        """The next 20 ms for the track (reply audio, the rest silence) and the acks now due."""
        out = np.zeros(FRAME_SAMPLES, np.float32)
        filled = 0
        touched: dict[str, bool] = {}  # response id -> whether this frame began its audio
        while filled < FRAME_SAMPLES and self._queue:
            response_id, samples = self._queue[0]
            take = min(FRAME_SAMPLES - filled, len(samples) - self._offset)
            out[filled : filled + take] = samples[self._offset : self._offset + take]
            filled += take
            self._offset += take
            touched.setdefault(response_id, self._sent[response_id] == 0)
            self._sent[response_id] += take
            if self._offset >= len(samples):
                self._queue.popleft()
                self._offset = 0
        return out, [ack for rid, first in touched.items() if (ack := self._due(rid, first)) is not None]

    def _due(self, response_id: str, first: bool) -> Ack | None:
        played_ms = samples_to_ms(self._sent[response_id], TRACK_RATE_HZ)
        ran_out = not any(rid == response_id for rid, _ in self._queue)
        if played_ms - self._acked.get(response_id, 0.0) < self._ack_every_ms and not ran_out and not first:
            return None
        self._acked[response_id] = played_ms
        last = ran_out and (self._resampling is None or self._resampling[0] != response_id)
        if last:
            self._sent.pop(response_id)  # finished and all sent: nothing more to count
            self._acked.pop(response_id)
        return Ack(response_id, played_ms, first=first, last=last)

    def _push(self, response_id: str, samples: Samples) -> None:
        if len(samples):
            self._queue.append((response_id, samples))

    def _end_resampling(self) -> None:
        if self._resampling is not None:
            response_id, resampler = self._resampling
            self._resampling = None
            self._push(response_id, resampler.flush())


def to_mono(pcm: npt.NDArray[Any], channels: int) -> Samples:
    """Interleaved 16-bit frames (a decoded `s16` frame's plane) as mono float32."""
    frames = pcm.reshape(-1, channels).astype(np.float32) / 32768.0
    return frames.mean(axis=1, dtype=np.float32) if channels > 1 else frames[:, 0]
