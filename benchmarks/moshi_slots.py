"""Moshi on batched slots vs one session per process (the way `moshi.server` serves), on this CPU.

A tiny random-weight checkpoint (`duplexkit.models.moshi.tiny`, nothing downloaded; step cost is the
architecture's) is served two ways in one run:

* slotted: one `duplexkit serve --model moshi --model-arg slots=N` process, N sessions on one model;
* per-process: N `duplexkit serve --model moshi --model-arg slots=1` processes, one session each (what
  a deployment of `moshi.server`, one session per process behind a lock, needs to hold N people).

Each session streams 80 ms appends on a real-time schedule, starting at a random phase of the frame, and
reads every unit's decision (`response.listen` or the reply's audio delta). A unit's lag is (its append
sent → its decision received) on the load generator's `time.monotonic`. N sessions are *held* when every
unit was answered and p99 lag is within one 80 ms frame. Also reported: the slotted server's mean tick
time and frozen-frame rate (from its `/metrics`), and, in process, tick time against slot count and a
neighbour's frame latency while a 2,000-character persona is prefilled into another slot (`prefill`).

    .venv/bin/python benchmarks/moshi_slots.py --seconds 8
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import math
import os
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import websockets
from serving import free_port, start

FRAME = 1920
RATE = 24_000
PERIOD_S = 0.08


def serve_argv(checkpoint: Path, port: int, slots: int, batch_wait_ms: float | None) -> list[str]:
    wait = [] if batch_wait_ms is None else ["--model-arg", f"batch_wait_ms={batch_wait_ms}"]
    return [
        sys.executable, "-m", "duplexkit", "serve", "--model", "moshi", "--port", str(port),
        "--max-sessions", str(slots), "--log-level", "warning",
        "--model-arg", f"checkpoint={checkpoint}", "--model-arg", f"slots={slots}", *wait,
    ]  # fmt: skip


async def session(url: str, seconds: float, lags: list[float], missed: list[int]) -> None:
    pcm = (0.1 * np.sin(np.arange(FRAME) / 5) * 32767).astype("<i2").tobytes()
    audio = base64.b64encode(pcm).decode()
    async with websockets.connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": {"input_sample_rate_hz": RATE}}))
        sent: list[float] = []
        answered = 0

        async def read() -> None:
            nonlocal answered
            async for message in ws:
                kind = json.loads(message)["type"]
                if kind in ("response.listen", "response.output_audio.delta") and answered < len(sent):
                    lags.append(time.monotonic() - sent[answered])
                    answered += 1

        reader = asyncio.create_task(read())
        await asyncio.sleep(random.uniform(0, PERIOD_S))
        start_at = time.monotonic()
        for k in range(round(seconds / PERIOD_S)):
            await asyncio.sleep(max(0.0, start_at + k * PERIOD_S - time.monotonic()))
            sent.append(time.monotonic())
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                while answered < len(sent):  # noqa: ASYNC110 - the reader counts; this waits for it
                    await asyncio.sleep(0.02)
        reader.cancel()
        missed.append(len(sent) - answered)


async def run_mode(
    checkpoint: Path, mode: str, n: int, seconds: float, batch_wait_ms: float | None
) -> dict[str, float | int | bool]:
    ports = [free_port() for _ in range(1 if mode == "slotted" else n)]
    procs = [
        await start(serve_argv(checkpoint, p, n if mode == "slotted" else 1, batch_wait_ms), p) for p in ports
    ]
    try:
        lags: list[float] = []
        missed: list[int] = []
        urls = [f"ws://127.0.0.1:{ports[i % len(ports)]}/v1/realtime" for i in range(n)]
        await asyncio.gather(*(session(u, seconds, lags, missed) for u in urls))
        result: dict[str, float | int | bool] = {
            "sessions": n,
            "p50_ms": round(statistics.median(lags) * 1e3, 1) if lags else float("nan"),
            "p99_ms": round(float(np.percentile(lags, 99)) * 1e3, 1) if lags else float("nan"),
            "missed": sum(missed),
        }
        result["held"] = bool(result["missed"] == 0 and result["p99_ms"] <= PERIOD_S * 1e3)
        if mode == "slotted":
            async with httpx.AsyncClient() as http:
                metrics = (await http.get(f"http://127.0.0.1:{ports[0]}/metrics")).text
            value = {m[0]: float(m[1]) for m in re.findall(r"^(duplexkit_model_\w+) (\S+)$", metrics, re.M)}
            ticks = value.get("duplexkit_model_ticks_total", 0.0)
            stepped = value.get("duplexkit_model_frames_stepped_total", 0.0)
            frozen = value.get("duplexkit_model_frames_frozen_total", 0.0)
            result["tick_ms"] = round(
                1e3 * value.get("duplexkit_model_tick_seconds_total", 0.0) / max(ticks, 1), 2
            )
            result["frozen_rate"] = round(frozen / max(stepped + frozen, 1), 3)
        return result
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            await proc.wait()


async def tick_curve(checkpoint: Path, counts: list[int], frames: int) -> list[dict[str, float]]:
    """In process: one call stepping every slot, against the slot count (one torch thread)."""
    from duplexkit.engine import Fence, Unit
    from duplexkit.models import BatchItem, load_model

    rows = []
    samples = (0.1 * np.random.default_rng(0).standard_normal(FRAME)).astype(np.float32)
    for n in counts:
        plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": str(n)})
        sessions = [plugin.new_session() for _ in range(n)]
        times = []
        for k in range(frames + 5):
            unit = Unit(k, Fence("bench"), samples, RATE, k * 80.0, (k + 1) * 80.0)
            started = time.perf_counter()
            await plugin.step_batch([BatchItem(s, unit, time.monotonic()) for s in sessions])
            if k >= 5:
                times.append(time.perf_counter() - started)
        mean = statistics.mean(times) * 1e3
        p99 = float(np.percentile(times, 99)) * 1e3
        rows.append(
            {
                "slots": n,
                "tick_ms": round(mean, 2),
                "p99_ms": round(p99, 2),
                "ms_per_slot": round(mean / n, 3),
            }
        )
        for s in sessions:
            await s.aclose()
    return rows


PERSONA = (
    "You are a patient and friendly guide who tells stories about the sea, the ships that cross it and "
    "the people who live by it. "
)


async def prefill_neighbour(checkpoint: Path, seconds: float, chars: int, rounds: int) -> dict[str, float]:
    """In process: a neighbour streams 80 ms frames on a real-time schedule while another session's
    `chars`-character persona is prefilled, against the same run without it. A frame's latency is (its due
    time -> its decision) on `time.monotonic`; the figure is the ratio of the two p99s, over `rounds`
    alternations of the two runs (the prompt counts are the last round's); beside it, the ratio of the
    neighbour's tick CPU time with a prompt row in the tick to without."""
    from duplexkit.engine import Fence, Unit
    from duplexkit.models import BatchItem, SamplingParams, load_model

    samples = (0.1 * np.random.default_rng(0).standard_normal(FRAME)).astype(np.float32)
    persona = (PERSONA * (chars // len(PERSONA) + 1))[:chars]
    tick_cpu: dict[bool, list[float]] = {False: [], True: []}
    """CPU time (`time.thread_time` on the model thread) of the neighbour's ticks without and with a
    prompt frame in them: what the extra row costs, less sensitive to the machine's load than latency."""

    async def run(with_persona: bool) -> tuple[list[float], float | None, int, dict[bool, int]]:
        plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": "2"})
        neighbour = plugin.new_session()
        other = plugin.new_session()
        other.configure(SamplingParams(), {"text_prompt": persona} if with_persona else {})
        prompt_frames = len(plugin._prompt_frames(other.persona))  # type: ignore[attr-defined]
        prefill_s: float | None = None
        batch = plugin._batch  # type: ignore[attr-defined]
        tick = batch.step

        def counting(groups, occupied, forced=None):  # type: ignore[no-untyped-def]
            carried[bool(groups)] += len(forced or {})
            started = time.thread_time()
            out = tick(groups, occupied, forced)
            if groups:  # the neighbour's tick: its CPU time, with or without a prompt frame in it
                tick_cpu[bool(forced)].append(time.thread_time() - started)
            return out

        carried = {True: 0, False: 0}
        """Prompt frames stepped in the neighbour's ticks (True) and in ticks of their own (False)."""
        batch.step = counting

        async def prefill() -> None:
            nonlocal prefill_s
            await asyncio.sleep(1.0)  # the neighbour is streaming when the persona goes in
            started = time.monotonic()
            await other.prepare()
            prefill_s = time.monotonic() - started

        task = asyncio.create_task(prefill()) if with_persona else None
        lags: list[float] = []
        start = time.monotonic() + 0.2
        for k in range(int(seconds / PERIOD_S)):
            due = start + k * PERIOD_S
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            unit = Unit(k, Fence("bench"), samples, RATE, k * 80.0, (k + 1) * 80.0)
            await plugin.step_batch([BatchItem(neighbour, unit, due)])
            lags.append(time.monotonic() - due)
        if task is not None:
            await task
        return lags, prefill_s, prompt_frames, carried

    base: list[float] = []
    loaded: list[float] = []
    for _ in range(rounds):  # alternating, so a change in the machine's load falls on both sides
        base += (await run(False))[0]
        lags, prefill_s, prompt_frames, carried = await run(True)
        loaded += lags
    p99_base = float(np.percentile(base, 99)) * 1e3
    p99_loaded = float(np.percentile(loaded, 99)) * 1e3
    cpu_without = statistics.mean(tick_cpu[False])
    cpu_with = statistics.mean(tick_cpu[True]) if tick_cpu[True] else math.nan
    return {
        "persona_chars": chars,
        "prompt_frames": prompt_frames,
        "prefill_s": round(prefill_s, 2) if prefill_s is not None else float("nan"),
        "prompt_frames_in_neighbour_ticks": carried[True],
        "prompt_frames_in_own_ticks": carried[False],
        "neighbour_p99_ms_without": round(p99_base, 1),
        "neighbour_p99_ms_with": round(p99_loaded, 1),
        "neighbour_max_ms_with": round(max(loaded) * 1e3, 1),
        "p99_ratio": round(p99_loaded / p99_base, 2),
        "neighbour_tick_cpu_ms_without": round(cpu_without * 1e3, 2),
        "neighbour_tick_cpu_ms_with_prompt_row": round(cpu_with * 1e3, 2),
        "tick_cpu_ratio": round(cpu_with / cpu_without, 3),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="streaming time per session count")
    parser.add_argument("--ladder", default="1,2,4,8,12,16", help="session counts to try, comma-separated")
    parser.add_argument("--tick-slots", default="1,4,16,64", help="slot counts for the in-process tick curve")
    parser.add_argument(
        "--batch-wait-ms", type=float, default=None, help="the servers' batch wait (default: the model's)"
    )
    parser.add_argument("--modes", default="slotted,per-process", help="which ways to serve, comma-separated")
    parser.add_argument(
        "--prefill-seconds",
        type=float,
        default=12.0,
        help="neighbour streaming time for the persona-prefill figure (0: skip it)",
    )
    parser.add_argument("--persona-chars", type=int, default=2000, help="persona length for that figure")
    parser.add_argument(
        "--prefill-rounds", type=int, default=3, help="alternations of the runs without and with the persona"
    )
    args = parser.parse_args()
    os.environ.setdefault("NO_TORCH_COMPILE", "1")
    from duplexkit.models.moshi.tiny import write_tiny_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = write_tiny_checkpoint(Path(tmp) / "tiny")
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        if args.prefill_seconds > 0:  # a context long enough for the persona's prompt (4096 frames)
            long_context = write_tiny_checkpoint(Path(tmp) / "tiny-long", context=4096)
            figure = await prefill_neighbour(
                long_context, args.prefill_seconds, args.persona_chars, args.prefill_rounds
            )
            print("prefill", json.dumps(figure))
        if args.tick_slots:
            for row in await tick_curve(checkpoint, [int(x) for x in args.tick_slots.split(",")], 40):
                print("tick", json.dumps(row))
        held = dict.fromkeys(filter(None, args.modes.split(",")), 0)
        failed: set[str] = set()
        for n in [int(x) for x in args.ladder.split(",") if x]:
            for mode in [m for m in held if m not in failed]:
                print(f"load average before {mode} {n}: {os.getloadavg()[0]:.2f}")
                result = await run_mode(checkpoint, mode, n, args.seconds, args.batch_wait_ms)
                print(mode, json.dumps(result))
                if result["held"]:
                    held[mode] = n
                else:
                    failed.add(mode)  # a larger count is not tried
        print("sessions held in real time:", held)


if __name__ == "__main__":
    asyncio.run(main())
