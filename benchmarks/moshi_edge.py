"""The Moshi edge's own cost per 80 ms frame: what `/api/chat` does between the socket and the model, but
the model and the Opus codec.

N sessions, each a `MoshiSocket` on an in-memory `Connection` in front of a `SessionRunner` (as
`duplexkit serve` builds them), get one Moshi audio frame (`0x01` + one Ogg page) per round. The Opus
codec is replaced by stand-ins (the decoder hands back 80 ms of samples per page, the encoder one fixed
page), and the model by one that decides at once: with `--reply`, 80 ms of speech with one word for every
frame (the response never ends: every frame's audio goes out as a reply frame), else a listen. What is
counted is the rest: Moshi framing and Ogg paging, building the append, the runner and the engine, the
events back to the edge, the reply queue and the output frame, and whatever the edge and the runner hand
each other (before the typed seam, issue #37: JSON text with base64 audio both ways).

The figure to compare is instructions per frame under callgrind (repeatable on a shared machine, where CPU
time is not), at two sizes, the difference divided by the difference in frames (start-up cancels), for
the tree before and after a change (`PYTHONPATH=<tree>/src`):

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p python benchmarks/moshi_edge.py --rounds 20
    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p python benchmarks/moshi_edge.py --rounds 120

(the `summary:` line of each output file is the total; `benchmarks/moshi_edge_compare.sh` runs all four
and prints the figures). Without valgrind it prints the process CPU time per frame, which is only
meaningful on a quiet machine. The same script runs on both sides of the seam: it uses only
`MoshiSocket(connection, session_from_query(query))` and `SessionRunner`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import sphn

from duplexkit.engine import EngineSession, Listen, Speak, Unit
from duplexkit.models import ModelSession, SamplingParams, load_model
from duplexkit.protocol import moshi
from duplexkit.server.metrics import ServerMetrics
from duplexkit.server.moshi import MoshiSocket, session_from_query
from duplexkit.server.runner import RunnerLimits, SessionRunner
from duplexkit.server.ticker import SessionTicker

FRAME = moshi.FRAME_SAMPLES
RATE = moshi.SAMPLE_RATE_HZ


class Round:
    """What a round waits for: every session's model has decided on the frame's unit."""

    def __init__(self) -> None:
        self.pending = 0
        self.done = asyncio.Event()

    def expect(self, count: int) -> None:
        self.pending = count
        self.done.clear()

    def arrived(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.done.set()


class InstantModel(ModelSession):
    """Decides at once: a listen, or (`reply`) 80 ms of speech and a word, never ending the response."""

    def __init__(self, round_: Round, reply: bool, rate_hz: int) -> None:
        self.sampling = SamplingParams()
        self._round = round_
        self._reply = reply
        self._audio = (0.1 * np.sin(np.arange(rate_hz * 80 // 1000) / rate_hz * 2 * np.pi * 220)).astype(
            np.float32
        )

    def configure(self, sampling: SamplingParams, extra_body: Any) -> None:
        self.sampling = sampling

    async def step(self, unit: Unit, request_started_at: float) -> AsyncIterator[Listen | Speak]:
        yield Speak(tokens=(" word",), audio=self._audio) if self._reply else Listen()
        self._round.arrived()


class MemoryConnection:
    """An edge's `Connection` fed from memory: `receive` waits for the next frame; sends are counted."""

    close_code: int | None = None

    def __init__(self) -> None:
        self._frames: deque[bytes | None] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self.sent = 0

    def feed(self, frame: bytes | None) -> None:
        self._frames.append(frame)
        if frame is None:
            self.close_code = 1000
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def receive(self) -> bytes | None:
        while not self._frames:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._frames.popleft()

    async def send_bytes(self, data: bytes) -> None:
        self.sent += 1

    async def send_text(self, data: str) -> None:
        raise AssertionError("a Moshi connection carries binary frames only")

    async def close(self, code: int = 1000, reason: str = "") -> None:
        return None


class _Reader:
    """Stands in for `sphn.OpusStreamReader`: 80 ms of samples per page."""

    def __init__(self, rate: int) -> None:
        self._pcm = np.full(FRAME, 0.05, np.float32)

    def append_bytes(self, page: bytes) -> np.ndarray:
        return self._pcm


class _Writer:
    """Stands in for `sphn.OpusStreamWriter`: one fixed page per 80 ms."""

    def __init__(self, rate: int) -> None:
        self._page = b"OggS" + bytes(60)

    def append_pcm(self, pcm: np.ndarray) -> bytes:
        return self._page


def _steady_page() -> bytes:
    """One real Ogg page of an 80 ms Opus frame, past the stream's headers (the splitter sees real paging)."""
    writer = sphn.OpusStreamWriter(RATE)
    pages = [writer.append_pcm(np.zeros(FRAME, np.float32)) for _ in range(6)]
    return bytes(pages[-1])


class _StandInCodec:
    OpusStreamReader = _Reader
    OpusStreamWriter = _Writer


async def _run(sessions: int, rounds: int, reply: bool) -> float:
    frame = b"\x01" + _steady_page()
    moshi.sphn = _StandInCodec  # type: ignore[attr-defined]  # the codec is not the edge's cost
    plugin = load_model("scripted", {"chunk_period_ms": "80"})
    # A Moshi model's terms: 24 kHz in and out, so the assembler resamples nothing (as with Moshi served).
    config = dataclasses.replace(
        plugin.capabilities.engine_config(plugin.name, max_sessions=sessions),
        input_sample_rate_hz=RATE,
        output_sample_rate_hz=RATE,
    )
    # No tick during the run: ticks follow the wall clock, which valgrind slows ~50x.
    ticker = SessionTicker(3600.0)
    round_ = Round()
    metrics = ServerMetrics()
    connections = [MemoryConnection() for _ in range(sessions)]
    runners = [
        SessionRunner(
            MoshiSocket(connection, session_from_query({})),
            EngineSession(f"sess_{i}", config),
            InstantModel(round_, reply, config.output_sample_rate_hz),
            metrics,
            RunnerLimits(),
            ticker=ticker,
        )
        for i, connection in enumerate(connections)
    ]
    tasks = [asyncio.create_task(r.run(autostart=False)) for r in runners]
    for _ in range(20):  # each session takes its opening update and says it is ready (the handshake)
        await asyncio.sleep(0)
    start = time.process_time()
    for _ in range(rounds):
        round_.expect(sessions)
        for connection in connections:
            connection.feed(frame)
        await round_.done.wait()
    for _ in range(20):  # what the last decisions sent reaches the edge
        await asyncio.sleep(0)
    cpu = time.process_time() - start
    assert all(c.sent >= rounds for c in connections), "an output frame per input frame"
    for connection in connections:
        connection.feed(None)
    await asyncio.gather(*tasks)
    return cpu / (sessions * rounds)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=100, help="frames per session (default: %(default)s)")
    parser.add_argument("--reply", action="store_true", help="the model speaks on every frame")
    args = parser.parse_args()
    try:
        import uvloop  # the loop `duplexkit serve` runs on when it is installed
    except ImportError:
        per_frame = asyncio.run(_run(args.sessions, args.rounds, args.reply))
    else:
        per_frame = uvloop.run(_run(args.sessions, args.rounds, args.reply))
    mode = "replying" if args.reply else "listening"
    print(
        f"{args.sessions} sessions x {args.rounds} frames, {mode}: {per_frame * 1e6:.1f} µs of CPU per frame"
    )


if __name__ == "__main__":
    main()
