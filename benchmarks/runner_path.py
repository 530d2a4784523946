"""The server's own work per append, with no transport: `SessionRunner`s fed from memory.

N sessions of the scripted model, each a `SessionRunner` on an in-memory socket, get one append frame each
per round (16 kHz PCM16, `--unit-ms` units: one append per unit below 200 ms, else 200 ms appends); a
round ends when every session has read its frame and every answer due is sent. What is counted is what
the runner, the engine, the parser and the model do per append (parsing, validation, audio decoding,
assembling, stepping, rendering, the hand-offs between tasks), without the `websockets` library or the
kernel: the part of `server_load.py`'s gap to the floor that this project's code decides.

The figure to compare is instructions per append under callgrind (repeatable on a shared machine, where
CPU time is not): run it at two sizes and divide the difference by the difference in appends (here
20 sessions x 100 rounds), which cancels start-up:

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p python benchmarks/runner_path.py --rounds 30
    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p python benchmarks/runner_path.py --rounds 130

(the `summary:` line of each output file is the total). Without valgrind it prints the process
CPU time per append, which is only meaningful on a quiet machine.

The collector is set up as `duplexkit serve` sets it once it is up (`serve.settle_gc`; `--default-gc`:
CPython's defaults). `--resume` makes the sessions resumable, as `duplexkit serve` makes the sessions of
a dialect with a resume contract (vLLM-Omni's; each event is also kept in the replay journal). `--gc` prints
the garbage collector's work during the rounds: collections per generation, the objects the collector
tracks afterwards and what the longest collection cost in this thread's CPU time. A full collection
pauses every session's units at once, so it is what a tail latency under load is made of; the counts
do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import json
import time
from collections.abc import Callable

import numpy as np

from duplexkit.engine import EngineSession
from duplexkit.engine.journal import ResumeConfig
from duplexkit.models import load_model
from duplexkit.server.metrics import ServerMetrics
from duplexkit.server.runner import RunnerLimits, SessionRunner
from duplexkit.server.ticker import SessionTicker

RATE = 16_000


class Round:
    """What a round waits for: each session back at `receive` (its frame handled) and each answer due."""

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


class MemorySocket:
    """A `SessionSocket` like the default edge's: it hands each frame fed to it to the runner at once
    (`edge.PushReceive`), and sends never wait (`edge.DirectSend`), so the runner runs no reader or writer
    task. Each frame handled and each `response.listen` ticks `round`."""

    buffered_bytes = 0
    close_code = 1000
    """How the peer went when `feed(None)`: it closed (the session ends at once)."""

    def __init__(self, round_: Round) -> None:
        self._round = round_
        self._sink: Callable[[str | bytes | None], None] | None = None

    def deliver(self, sink: Callable[[str | bytes | None], None]) -> None:
        self._sink = sink

    def feed(self, frame: str | None) -> None:
        assert self._sink is not None
        self._sink(frame)
        if frame is not None:
            self._round.arrived()

    async def receive(self) -> str | bytes | None:
        raise AssertionError("the runner reads a pushing socket only through `deliver`")

    async def send_text(self, data: str) -> None:
        self.send_now(data)

    def send_now(self, data: str) -> None:
        if '"response.listen"' in data:
            self._round.arrived()

    async def close(self, code: int = 1000) -> None:
        return None


def _frame(append_ms: int, end_ms: int) -> str:
    t = np.arange(append_ms * RATE // 1000) / RATE
    pcm = (0.2 * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2").tobytes()
    return json.dumps(
        {
            "type": "input_audio_buffer.append",
            "audio": base64.b64encode(pcm).decode(),
            "duration_ms": append_ms,
            "audio_end_ms": end_ms,
        }
    )


class Collections:
    """The collector's work while installed: collections per generation and the longest one's CPU time."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.longest_s = [0.0, 0.0, 0.0]
        self.total_s = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
            return
        spent = time.thread_time() - self._started
        generation = info["generation"]
        self.count[generation] += 1
        self.longest_s[generation] = max(self.longest_s[generation], spent)
        self.total_s += spent

    def report(self) -> str:
        per = ", ".join(
            f"gen{g} {n} (longest {s * 1e3:.1f} ms)"
            for g, (n, s) in enumerate(zip(self.count, self.longest_s, strict=True))
        )
        tracked = len(gc.get_objects())
        return f"collections: {per}; {self.total_s * 1e3:.1f} ms in all; {tracked} objects tracked"


async def _run(
    sessions: int,
    rounds: int,
    unit_ms: int,
    resume: bool,
    collections: Collections | None,
    default_gc: bool,
) -> float:
    append_ms = min(unit_ms, 200)
    plugin = load_model("scripted", {"chunk_period_ms": str(unit_ms)})
    # No tick during the run: ticks follow the wall clock, which valgrind slows ~50x, so they would count
    # differently in every run. What a tick costs is per session-second, not per append.
    ticker = SessionTicker(3600.0)
    round_ = Round()
    metrics = ServerMetrics()  # one per server, as `duplexkit serve` has
    if not default_gc:
        from duplexkit.server.serve import settle_gc  # (here: a tree from before it has none)

        settle_gc()  # as `duplexkit serve` does once it is up, before any session
    sockets = [MemorySocket(round_) for _ in range(sessions)]
    runners = [
        SessionRunner(
            ws,
            EngineSession(f"sess_{i}", plugin.capabilities.engine_config(plugin.name, max_sessions=sessions)),
            plugin.new_session(),
            metrics,
            RunnerLimits(),
            ticker=ticker,
            resume=ResumeConfig() if resume else None,
        )
        for i, ws in enumerate(sockets)
    ]
    tasks = [asyncio.create_task(r.run(autostart=True)) for r in runners]
    await asyncio.sleep(0)  # each runner starts and takes its socket's messages
    frame = _frame(append_ms, append_ms)
    per_unit = unit_ms // append_ms
    if collections is not None:
        gc.callbacks.append(collections)
    start = time.process_time()
    for k in range(rounds):
        round_.expect(sessions * (2 if (k + 1) % per_unit == 0 else 1))
        for ws in sockets:
            ws.feed(frame)
        await round_.done.wait()
    cpu = time.process_time() - start
    if collections is not None:
        gc.callbacks.remove(collections)
    for ws in sockets:
        ws.feed(None)
    await asyncio.gather(*tasks)
    return cpu / (sessions * rounds)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=100, help="appends per session (default: %(default)s)")
    parser.add_argument("--unit-ms", type=int, default=80, help="unit length (default: %(default)s)")
    parser.add_argument("--resume", action="store_true", help="resumable sessions (the server's default)")
    parser.add_argument("--gc", action="store_true", help="report the garbage collector's work")
    parser.add_argument(
        "--default-gc", action="store_true", help="leave the collector as CPython sets it (no `settle_gc`)"
    )
    args = parser.parse_args()
    collections = Collections() if args.gc else None
    run = _run(args.sessions, args.rounds, args.unit_ms, args.resume, collections, args.default_gc)
    try:
        import uvloop  # the loop `duplexkit serve` runs on when it is installed
    except ImportError:
        per_append = asyncio.run(run)
    else:
        per_append = uvloop.run(run)
    print(
        f"{args.sessions} sessions x {args.rounds} appends at {args.unit_ms} ms units: "
        f"{per_append * 1e6:.1f} µs of CPU per append"
    )
    if collections is not None:
        print(collections.report())


if __name__ == "__main__":
    main()
