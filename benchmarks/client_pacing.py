"""Client pacing: schedule error and drift of N concurrent realtime streams, deadline pacer vs a naive one.

Against `duplexkit serve --model scripted` run as a subprocess (so its CPU does not share this process's
event loop), N sessions each stream a tone clip in appends of `--chunk-ms`, on two pacers in turn, same
server, same sessions, same clip:

* deadline: `DuplexClient.stream(pace="realtime")`, each append due at stream start + the media offset
  where it ends (`DeadlinePacer`);
* naive: send an append, then `asyncio.sleep(duration)`, its intended schedule being start + i * duration.

Schedule error = the time the append reached the socket minus its intended time; drift = that error for a
session's last append. All sessions connect before any streams and close after all have streamed; their
starts are spread evenly over one append so they do not all fire together.

    .venv/bin/python benchmarks/client_pacing.py --sessions 200 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
from serving import duplexkit_serve, free_port, start

from duplexkit.client import DuplexClient
from duplexkit.client.stats import Distribution
from duplexkit.protocol.units import chunk_samples

RATE = 16_000


@dataclass
class SessionTiming:
    errors_ms: list[float]
    drift_ms: float
    stalls: int


def _clip(seconds: float) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return (0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


async def _deadline(client: DuplexClient, clip: np.ndarray, chunk_ms: int) -> SessionTiming:
    report = await client.stream(clip, sample_rate_hz=RATE, pace="realtime", chunk_ms=chunk_ms)
    pacing = report.pacing
    assert pacing is not None and pacing.drift_ms is not None
    return SessionTiming(list(pacing.errors_ms), pacing.drift_ms, len(pacing.stalls))


async def _naive(client: DuplexClient, clip: np.ndarray, chunk_ms: int) -> SessionTiming:
    start = time.monotonic()
    errors = []
    for i, (lo, hi) in enumerate(chunk_samples(len(clip), RATE, chunk_ms)):
        sent_at = await client.append_audio(clip[lo:hi])
        errors.append((sent_at - start) * 1000.0 - i * chunk_ms)
        await asyncio.sleep((hi - lo) / RATE)
    return SessionTiming(errors, errors[-1], 0)


Pacer = Callable[[DuplexClient, np.ndarray, int], Awaitable[SessionTiming]]


async def _session(
    url: str, delay_s: float, barrier: asyncio.Barrier, pacer: Pacer, clip: np.ndarray, chunk_ms: int
) -> SessionTiming:
    async with DuplexClient(url) as client:
        await client.configure(timeout_s=30)
        await barrier.wait()  # every session is connected before any streams
        await asyncio.sleep(delay_s)
        timing = await pacer(client, clip, chunk_ms)
        await barrier.wait()  # no session closes while others still stream
        await client.close(10)
        return timing


async def _phase(
    url: str, sessions: int, pacer: Pacer, clip: np.ndarray, chunk_ms: int
) -> list[SessionTiming]:
    spread_s = chunk_ms / 1000.0
    barrier = asyncio.Barrier(sessions)
    delays = [k * spread_s / sessions for k in range(sessions)]
    return list(await asyncio.gather(*(_session(url, d, barrier, pacer, clip, chunk_ms) for d in delays)))


def _row(name: str, timings: list[SessionTiming]) -> str:
    errors = Distribution.of([e for t in timings for e in t.errors_ms])
    drifts = Distribution.of([t.drift_ms for t in timings])
    assert errors is not None and drifts is not None
    return (
        f"{name:<9} {errors.count:>8} {errors.p50:>8.2f} {errors.p99:>8.2f} {errors.max:>8.2f}"
        f" {drifts.p50:>10.2f} {drifts.max:>10.2f} {sum(t.stalls for t in timings):>7}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0, help="clip length per session")
    parser.add_argument("--chunk-ms", type=int, default=200)
    args = parser.parse_args()

    port = free_port()
    server = await start(
        duplexkit_serve(port, max_sessions=2 * args.sessions), port
    )  # closing sessions hold slots
    url = f"ws://127.0.0.1:{port}"
    clip = _clip(args.seconds)
    try:
        deadline = await _phase(url, args.sessions, _deadline, clip, args.chunk_ms)
        naive = await _phase(url, args.sessions, _naive, clip, args.chunk_ms)
    finally:
        server.terminate()
        await server.wait()
    print(
        f"{args.sessions} sessions x {args.seconds:g} s, {args.chunk_ms} ms appends, "
        f"{os.cpu_count()} CPUs; schedule error and drift in ms (append on the socket - intended time)"
    )
    header = ("appends", "p50", "p99", "max", "drift p50", "drift max", "stalls")
    widths = (8, 8, 8, 8, 10, 10, 7)
    print(f"{'pacer':<9}" + "".join(f" {h:>{w}}" for h, w in zip(header, widths, strict=True)))
    print(_row("deadline", deadline))
    print(_row("naive", naive))


if __name__ == "__main__":
    asyncio.run(main())
