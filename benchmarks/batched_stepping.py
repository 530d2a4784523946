"""Batched vs per-session stepping of a model whose step is real vectorised work, on a real server.

The model (`MatmulModel`) is a stack of dense layers with fixed random weights (seeded, built at start, no
download): each unit's audio is projected into a hidden state kept per session, then `LAYERS` tanh layers
of width `WIDTH`. Per session, a step is matrix-vector work, bound by reading the weights; in a batch it is
one matrix-matrix product per layer over every due session, the way GPU duplex models reach many sessions.
It always listens: what is measured is how many sessions the server keeps up with. BLAS runs one thread
per call in both modes (`OPENBLAS_NUM_THREADS=1` for the server): per-session steps get their parallelism
from concurrent steps, batches from concurrent batches; several multi-threaded BLAS calls at once thrash
two cores (measured: 6 concurrent per-session steps took 50x longer each).

Each session streams 200 ms appends (one unit each) on a realtime schedule; a unit's lag is (append that
closes it sent → its `response.listen` received), on the load generator's `time.monotonic`. A session
count is *held* when every unit was answered and p99 lag is within the unit period. Both modes run in one
invocation, as server subprocesses (so their CPU is measured apart from the load generator's).

    .venv/bin/python benchmarks/batched_stepping.py --seconds 6
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads; inherited by the servers

import numpy as np
import numpy.typing as npt
import websockets
from serving import cpu_seconds, free_port, start

from duplexkit.engine import Decision, Listen, Unit
from duplexkit.models import (
    BatchItem,
    BatchPolicy,
    ModelCapabilities,
    ModelPlugin,
    ModelSession,
)
from duplexkit.models.base import SamplingParams

UNIT_MS = 200
RATE = 16_000
WIDTH = 1024
LAYERS = 12
SAMPLES = UNIT_MS * RATE // 1000

Matrix = npt.NDArray[np.float32]


class MatmulSession(ModelSession):
    """Per-session state: the hidden vector, carried from unit to unit."""

    def __init__(self, plugin: MatmulModel) -> None:
        self.plugin = plugin
        self.sampling = plugin.default_sampling
        self.hidden: Matrix = np.zeros((1, WIDTH), dtype=np.float32)

    def configure(self, sampling: SamplingParams, extra_body: Mapping[str, Any]) -> None:
        self.sampling = sampling

    async def step(self, unit: Unit, request_started_at: float) -> AsyncIterator[Decision]:
        frames = self.plugin.frames([unit])
        self.hidden = await asyncio.to_thread(self.plugin.forward, self.hidden, frames)
        yield Listen()


class MatmulModel(ModelPlugin):
    name = "matmul"

    def __init__(self, batching: BatchPolicy | None) -> None:
        rng = np.random.default_rng(1234)
        scale = np.float32(1.0 / np.sqrt(WIDTH))
        self.w_in = (rng.standard_normal((SAMPLES, WIDTH), dtype=np.float32) * scale).astype(np.float32)
        self.w_rec = rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) * scale
        self.layers = [rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) * scale for _ in range(LAYERS)]
        self.capabilities = ModelCapabilities(chunk_period_ms=UNIT_MS, modalities=("text",))
        self.default_sampling = SamplingParams()
        self.batching = batching

    def new_session(self) -> MatmulSession:
        return MatmulSession(self)

    def frames(self, units: Sequence[Unit]) -> Matrix:
        out = np.zeros((len(units), SAMPLES), dtype=np.float32)
        for row, unit in zip(out, units, strict=True):
            n = min(SAMPLES, len(unit.samples))
            row[:n] = unit.samples[:n]
        return out

    def forward(self, hidden: Matrix, frames: Matrix) -> Matrix:
        """One step for a batch of rows (one row per session): the new hidden states."""
        x = np.tanh(frames @ self.w_in + hidden @ self.w_rec)
        for w in self.layers:
            x = np.tanh(x @ w)
        return x.astype(np.float32, copy=False)

    async def step_batch(self, items: Sequence[BatchItem]) -> Sequence[Decision | Exception]:
        sessions = [item.session for item in items]
        assert all(isinstance(s, MatmulSession) for s in sessions)
        hidden = np.concatenate([s.hidden for s in sessions if isinstance(s, MatmulSession)])
        frames = self.frames([item.unit for item in items])
        new = await asyncio.to_thread(self.forward, hidden, frames)
        for k, session in enumerate(sessions):
            if isinstance(session, MatmulSession):
                session.hidden = new[k : k + 1]
        return [Listen() for _ in items]


def serve(mode: str, port: int, max_sessions: int) -> None:
    """The server subprocess: the matmul model, per-session or batched, on `port`."""
    from duplexkit.server import DuplexServer, ServerConfig, run_server

    batching = BatchPolicy(max_size=max_sessions, max_wait_ms=UNIT_MS / 4) if mode == "batched" else None
    server = DuplexServer(MatmulModel(batching), ServerConfig(max_sessions=max_sessions))
    run_server(server, host="127.0.0.1", port=port, log_level="error")


def _append(k: int) -> str:
    rng = np.random.default_rng(k)
    pcm = (rng.standard_normal(SAMPLES) * 300).astype("<i2").tobytes()
    audio = base64.b64encode(pcm).decode()  # named: a GA session's own PCM rate is OpenAI's 24 kHz
    return json.dumps({"type": "input_audio_buffer.append", "audio": audio, "sample_rate_hz": RATE})


async def _session(url: str, frames: list[str], start_at: float, lags: list[float]) -> int:
    """Stream the frames on schedule; append each unit's lag in ms; return how many units were answered."""
    sent_at: list[float] = []
    answered = 0
    all_answered = asyncio.Event()
    async with websockets.connect(url, max_size=None, ping_interval=None, compression=None) as ws:

        async def reader() -> None:
            nonlocal answered
            async for message in ws:
                if isinstance(message, str) and '"response.listen"' in message:
                    if answered < len(sent_at):
                        lags.append((time.monotonic() - sent_at[answered]) * 1000)
                    answered += 1
                    if answered == len(frames):
                        all_answered.set()

        task = asyncio.create_task(reader())
        for k, frame in enumerate(frames):
            delay = start_at + k * UNIT_MS / 1000 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            sent_at.append(time.monotonic())
            await ws.send(frame)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_answered.wait(), 3.0)
        task.cancel()
    return answered


async def _run(mode: str, sessions: int, seconds: float) -> dict[str, Any]:
    port = free_port()
    argv = [sys.executable, __file__, "--serve", mode, str(port), str(sessions)]
    proc = await start(argv, port)
    await asyncio.sleep(0.5)
    frames = [_append(k) for k in range(round(seconds * 1000 / UNIT_MS))]
    lags: list[float] = []
    cpu0, wall0 = cpu_seconds(proc.pid), time.monotonic()
    begin = time.monotonic() + 1.0
    url = f"ws://127.0.0.1:{port}/v1/realtime"
    answered = await asyncio.gather(
        *(_session(url, frames, begin + i * UNIT_MS / 1000 / sessions, lags) for i in range(sessions))
    )
    cpu, wall = cpu_seconds(proc.pid) - cpu0, time.monotonic() - wall0
    proc.terminate()
    await proc.wait()
    lags.sort()
    complete = sum(answered) == sessions * len(frames)
    p99 = lags[int(0.99 * (len(lags) - 1))] if lags else None
    in_period = sum(x <= UNIT_MS for x in lags) / (sessions * len(frames))
    return {
        "mode": mode,
        "sessions": sessions,
        "units": sessions * len(frames),
        "answered": sum(answered),
        "in_period": in_period,
        "p50_ms": statistics.median(lags) if lags else None,
        "p99_ms": p99,
        "server_cpu_cores": cpu / wall,
        "held": complete and p99 is not None and p99 <= UNIT_MS,
    }


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="audio streamed per session")
    parser.add_argument("--per-session", default="8,12,16,24,32", help="session counts, per-session mode")
    parser.add_argument("--batched", default="48,64,96,128,192", help="session counts, batched mode")
    parser.add_argument("--serve", nargs=3, metavar=("MODE", "PORT", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]), int(args.serve[2]))
        return
    ladders = {
        "per_session": [int(n) for n in args.per_session.split(",")],
        "batched": [int(n) for n in args.batched.split(",")],
    }
    asyncio.run(_compare(ladders, args.seconds))


def _model_cost(batch: int, rounds: int = 5) -> tuple[float, float]:
    """ms of one thread per unit: stepped alone, and inside a batch of `batch` (this process, no server)."""
    model = MatmulModel(None)
    costs = []
    for rows in (1, batch):
        hidden, frames = np.zeros((rows, WIDTH), np.float32), np.zeros((rows, SAMPLES), np.float32)
        model.forward(hidden, frames)
        start = time.thread_time()
        for _ in range(rounds * (batch // rows)):
            model.forward(hidden, frames)
        costs.append((time.thread_time() - start) * 1000 / (rounds * batch))
    return costs[0], costs[1]


async def _compare(ladders: dict[str, list[int]], seconds: float) -> None:
    alone, batched = _model_cost(64)
    print(
        f"model CPU per unit (thread time): alone {alone:.2f} ms, in a batch of 64 {batched:.2f} ms"
        f"  ->  {alone / batched:.1f}x",
        flush=True,
    )
    results = []
    for mode, counts in ladders.items():
        for n in counts:
            results.append(await _run(mode, n, seconds))
            r = results[-1]
            print(
                f"{mode:<12} {n:>4} sessions  answered {r['answered']}/{r['units']}"
                f"  in period {r['in_period']:.2%}  p50 {_fmt(r['p50_ms'], '.1f')} ms"
                f"  p99 {_fmt(r['p99_ms'], '.1f')} ms  server CPU {r['server_cpu_cores']:.2f} cores"
                f"  {'HELD' if r['held'] else 'not held'}",
                flush=True,
            )
    held = {}
    for mode, counts in ladders.items():
        ok = [r["sessions"] for r in results if r["mode"] == mode and r["held"]]
        # The ladder's top rung held: the capacity is at least that, not known beyond it.
        held[mode] = (max(ok, default=0), bool(ok) and max(ok) == max(counts))
    print(f"model: {LAYERS} layers of {WIDTH} + input and recurrent projections, {UNIT_MS} ms units")
    print(f"held = every unit answered and p99 lag <= {UNIT_MS} ms (the unit period)")
    text = {m: ("≥ " if top else "") + str(n) for m, (n, top) in held.items()}
    line = f"sessions held: per-session {text['per_session']}, batched {text['batched']}"
    if held["per_session"][0]:
        ratio = held["batched"][0] / held["per_session"][0]
        line += f"  ->  {'≥ ' if held['batched'][1] else ''}{ratio:.2f}x"
    print(line)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
