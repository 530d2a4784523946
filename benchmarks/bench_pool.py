"""A benchmark over a pool of servers: wall time with 1 server vs 2, and work stealing vs a static split.

`duplexkit serve --model scripted` subprocesses, each admitting `--per-server` sessions; the runner keeps
`--per-server` samples in flight on each (it reads `/healthz` max_sessions). Realtime pace, generated clips
(the dataset of `bench_throughput.py`). Passes, in one run:

* 1 server, then 2 servers: the same samples; the wall-time ratio is what a second GPU buys.
* a fast and a slow server (the slow one's replies start `--slow-first-output-ms` late): the pool (shared
  queue, work stealing), and the baseline a user would do by hand without one — half the samples against
  each server, two runs side by side.

    .venv/bin/python benchmarks/bench_pool.py --samples 16 --seconds 4 --per-server 4
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench_throughput import write_dataset
from serving import duplexkit_serve, free_port, start

from duplexkit.bench.artifacts import RunDir
from duplexkit.bench.attempt import RunConfig
from duplexkit.bench.omni_duplex_eval.dataset import Selection, load_dataset
from duplexkit.bench.pool import ServerPool
from duplexkit.bench.runner import BenchmarkRunner
from duplexkit.client import SessionBounds


async def run(urls: list[str], samples: list[Any], per_server: int, out: Path) -> dict[str, Any]:
    config = RunConfig(
        url=urls[0],
        pace="realtime",
        concurrency=per_server,
        bounds=SessionBounds(settle_s=1.0, drain_timeout_s=60.0),
        keep_audio=False,
    )
    run_dir = RunDir(out)
    pool = ServerPool(urls, per_server=per_server)
    started = time.monotonic()
    results = await BenchmarkRunner(config, run_dir, pool=pool).run(samples, overwrite=True)
    wall = time.monotonic() - started
    by_server = Counter(m["server_url"] for m in run_dir.metas())
    return {
        "wall_s": wall,
        "published": sum(r.status == "published" for r in results),
        "per_server": [by_server.get(url, 0) for url in urls],
    }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=4.0, help="clip length")
    parser.add_argument("--per-server", type=int, default=4, help="sessions each server admits")
    parser.add_argument("--slow-first-output-ms", type=float, default=3000.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        manifest = write_dataset(root, args.samples, args.seconds)
        samples = list(load_dataset(str(manifest), Selection()).samples)
        ports = [free_port() for _ in range(3)]
        slow_args = (f"first_output_ms={args.slow_first_output_ms:g}",)
        argvs = [
            duplexkit_serve(ports[0], args.per_server),
            duplexkit_serve(ports[1], args.per_server),
            duplexkit_serve(ports[2], args.per_server, slow_args),
        ]
        procs = [await start(argv, port) for argv, port in zip(argvs, ports, strict=True)]
        a, b, slow = (f"ws://127.0.0.1:{p}/v1/realtime" for p in ports)
        try:
            one = await run([a], samples, args.per_server, root / "one")
            two = await run([a, b], samples, args.per_server, root / "two")
            stealing = await run([a, slow], samples, args.per_server, root / "stealing")
            started = time.monotonic()
            halves = await asyncio.gather(
                run([a], samples[0::2], args.per_server, root / "split-a"),
                run([slow], samples[1::2], args.per_server, root / "split-slow"),
            )
            split_wall = time.monotonic() - started
        finally:
            for proc in procs:
                proc.terminate()
                await proc.wait()

    print(f"{args.samples} samples x {args.seconds:g} s, realtime, {args.per_server} sessions per server")
    print(f"{'pass':<34} {'wall s':>7} {'published':>9}  samples per server")
    rows = [
        ("1 server", one["wall_s"], one["published"], one["per_server"]),
        ("2 servers (pool)", two["wall_s"], two["published"], two["per_server"]),
        (
            "fast + slow, pool (work stealing)",
            stealing["wall_s"],
            stealing["published"],
            stealing["per_server"],
        ),
        (
            "fast + slow, static halves",
            split_wall,
            halves[0]["published"] + halves[1]["published"],
            [halves[0]["per_server"][0], halves[1]["per_server"][0]],
        ),
    ]
    for name, wall, published, per_server in rows:
        print(f"{name:<34} {wall:>7.1f} {published:>9}  {per_server}")
    print(f"wall, 1 server / 2 servers: {one['wall_s'] / two['wall_s']:.2f}x")
    print(f"wall, static halves / work stealing: {split_wall / stealing['wall_s']:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
