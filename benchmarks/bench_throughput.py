"""Benchmark runner throughput: `BenchmarkRunner` (this process) against `duplexkit serve --model scripted`.

A JSONL dataset of generated clips (speech-like question audio for the first seconds, then silence, and a
tiny H.264 video) is written to a temp dir; a `duplexkit serve` subprocess answers. Two passes:

* realtime: wall time against the physical floor. Each sample streams for its clip duration and then
  drains, so with C in flight the run cannot take less than ceil(N / C) x (clip + drain). The drain is what
  the server needs after the commit (its reply plus the settle window): the mean measured drain wait is used,
  and the ratio against the streaming-only floor is printed too. Target: wall / floor <= 1.10.
* as-fast-as-possible: samples per second, and the client's CPU share (this process's CPU time / wall;
  media preparation, encoding and the event loop included). The server's CPU is reported beside it.

    .venv/bin/python benchmarks/bench_throughput.py                        # 64 x 10 s at concurrency 16
    .venv/bin/python benchmarks/bench_throughput.py --samples 16 --concurrency 8 --pace both
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import statistics
import tempfile
import time
import wave
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
from serving import cpu_seconds, duplexkit_serve, free_port, start

from duplexkit.bench.artifacts import RunDir
from duplexkit.bench.attempt import RunConfig
from duplexkit.bench.omni_duplex_eval.dataset import Selection, load_dataset
from duplexkit.bench.runner import BenchmarkRunner
from duplexkit.client import SessionBounds

RATE_HZ = 16_000


# --- the dataset ----------------------------------------------------------------------------------


def speech_like(seconds: float, speech_s: float, seed: int) -> np.ndarray:
    """`speech_s` of a voiced buzz gated into syllables, then silence, `seconds` in all."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * RATE_HZ)) / RATE_HZ
    f0 = 150 + 30 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, np.pi))
    phase = 2 * np.pi * np.cumsum(f0) / RATE_HZ
    voiced = sum(np.sin(k * phase) / k for k in range(1, 6))
    syllables = np.clip(np.sin(2 * np.pi * 4.0 * t), 0.0, None) ** 0.5
    speech = 0.25 * voiced * syllables / 2.3
    speech[t >= speech_s] = 0.0
    return speech.astype(np.float32)


def wav_bytes(samples: np.ndarray) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE_HZ)
        wav.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return out.getvalue()


def tiny_mp4(seconds: float, fps: int = 10, width: int = 160, height: int = 120) -> bytes:
    """A moving bar on a grey background, H.264."""
    out = io.BytesIO()
    with av.open(out, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.time_base = Fraction(1, fps)
        for i in range(round(seconds * fps)):
            picture = np.full((height, width, 3), 90, dtype=np.uint8)
            x = (i * 4) % (width - 16)
            picture[:, x : x + 16] = (220, 30, 30)
            frame = av.VideoFrame.from_ndarray(picture, format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()


def write_dataset(root: Path, count: int, seconds: float) -> Path:
    video = tiny_mp4(seconds)
    rows = []
    for i in range(count):
        sample_id = f"clip_{i:04d}"
        (root / f"{sample_id}.wav").write_bytes(wav_bytes(speech_like(seconds, min(3.0, seconds / 2), i)))
        (root / f"{sample_id}.mp4").write_bytes(video)
        rows.append(
            {
                "id": sample_id,
                "split": "RTD_counting" if i % 2 == 0 else "PR_event_reminder",
                "question_text": "Tell me when the bar reaches the right edge.",
                "answer1": "The bar moves right.",
                "reminder1": seconds / 2,
                "video_type": "synthetic",
                "video_duration": seconds,
                "video": f"{sample_id}.mp4",
                "question_audio": f"{sample_id}.wav",
            }
        )
    manifest = root / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return manifest


# --- the server -----------------------------------------------------------------------------------


# --- the passes -----------------------------------------------------------------------------------


async def run_pass(
    pace: str, url: str, samples: list[Any], args: argparse.Namespace, out: Path, server_pid: int
) -> dict[str, Any]:
    config = RunConfig(
        url=url,
        pace=pace,  # type: ignore[arg-type]
        concurrency=args.concurrency,
        bounds=SessionBounds(settle_s=args.settle, drain_timeout_s=60.0),
        keep_audio=args.keep_audio,
    )
    run_dir = RunDir(out / pace)
    runner = BenchmarkRunner(config, run_dir)
    cpu0, server_cpu0, wall0 = time.process_time(), cpu_seconds(server_pid), time.monotonic()
    results = await runner.run(samples, overwrite=True)
    wall = time.monotonic() - wall0
    cpu, server_cpu = time.process_time() - cpu0, cpu_seconds(server_pid) - server_cpu0
    metas = list(run_dir.metas())
    drains = [m["drain"]["waited_s"] for m in metas if m.get("drain")]
    schedule_p99 = [
        m["pacing"]["schedule_error_ms"]["p99"]
        for m in metas
        if m.get("pacing") and m["pacing"].get("schedule_error_ms")
    ]
    ttfp = [r["ttfp_ms"] for m in metas for r in m.get("responses", []) if r.get("ttfp_ms") is not None]
    return {
        "wall_s": wall,
        "client_cpu_s": cpu,
        "server_cpu_s": server_cpu,
        "published": sum(r.status == "published" for r in results),
        "failed": sum(r.status == "failed" for r in results),
        "retried": sum(r.retried for r in results),
        "mean_drain_s": statistics.fmean(drains) if drains else 0.0,
        "max_schedule_p99_ms": max(schedule_p99) if schedule_p99 else None,
        "p50_ttfp_ms": statistics.median(ttfp) if ttfp else None,
    }


def report(pace: str, r: dict[str, Any], args: argparse.Namespace) -> None:
    status = f"published {r['published']}/{args.samples}, failed {r['failed']}, retried {r['retried']}"
    wall = r["wall_s"]
    print(f"\n[{pace}] concurrency {args.concurrency}: {status}")
    share = 100 * r["client_cpu_s"] / wall
    print(
        f"  wall {wall:.2f} s; client CPU {r['client_cpu_s']:.2f} s ({share:.1f}% of wall); "
        f"server CPU {r['server_cpu_s']:.2f} s; p50 TTFP {r['p50_ttfp_ms']} ms"
    )
    if pace != "realtime":
        print(f"  throughput {args.samples / wall:.2f} samples/s")
        return
    waves = math.ceil(args.samples / args.concurrency)
    stream_floor = waves * args.seconds
    floor = waves * (args.seconds + r["mean_drain_s"])
    print(
        f"  floor = ceil({args.samples}/{args.concurrency}) x ({args.seconds:g} s clip + "
        f"{r['mean_drain_s']:.2f} s mean drain) = {floor:.2f} s"
    )
    print(
        f"  wall / floor = {wall / floor:.3f} (target <= 1.10: {'OK' if wall / floor <= 1.10 else 'MISSED'})"
    )
    print(f"  wall / streaming-only floor ({stream_floor:g} s) = {wall / stream_floor:.3f}")
    print(f"  worst per-sample append schedule error p99: {r['max_schedule_p99_ms']} ms")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0, help="clip duration")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--pace", choices=["realtime", "fast", "both"], default="both")
    parser.add_argument("--settle", type=float, default=2.0, help="drain quiet window (s)")
    parser.add_argument("--keep-audio", action="store_true", help="also write output.wav and events.json")
    parser.add_argument(
        "--model-arg", action="append", default=[], metavar="KEY=VALUE", help="scripted model parameter"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="duplexkit-bench-") as tmp:
        root = Path(tmp)
        (root / "data").mkdir()
        started = time.monotonic()
        manifest = write_dataset(root / "data", args.samples, args.seconds)
        samples = list(load_dataset(str(manifest), Selection()).samples)
        print(f"dataset: {args.samples} x {args.seconds:g} s clips in {time.monotonic() - started:.1f} s")
        port = free_port()
        server = await start(duplexkit_serve(port, max(64, args.concurrency), tuple(args.model_arg)), port)
        url = f"ws://127.0.0.1:{port}/v1/realtime"
        try:
            passes = {"realtime": ["realtime"], "fast": ["as-fast-as-possible"]}
            for pace in passes.get(args.pace, ["realtime", "as-fast-as-possible"]):
                r = await run_pass(pace, url, samples, args, root / "runs", server.pid)
                report(pace, r, args)
        finally:
            server.terminate()
            await server.wait()


if __name__ == "__main__":
    asyncio.run(main())
