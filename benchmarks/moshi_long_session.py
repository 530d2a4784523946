"""A Moshi session long past its LM's context: memory and tick time stay flat (Moshi's KV cache is a ring
of `context` frames, so a session goes on over a sliding window).

In process, on the tiny random checkpoint (`duplexkit.models.moshi.tiny`, context 50 frames = 4 s), two
slots step together frame after frame for `--frames` frames (default 7,500: 10 minutes of audio, 150
contexts). Every `--window` frames it records the mean and p99 tick time (`time.perf_counter` around
`step_batch`, on this process's clock) and the process's resident memory (`/proc/self/statm`). The
figure is the ratio of the last window to the first window after the context filled (ticks past the
context against ticks just past it), not an absolute time.

    .venv/bin/python benchmarks/moshi_long_session.py --frames 7500
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=7500, help="frames per session (80 ms each)")
    parser.add_argument("--window", type=int, default=250, help="frames per reported window")
    args = parser.parse_args()
    os.environ.setdefault("NO_TORCH_COMPILE", "1")
    from duplexkit.engine import Fence, Unit
    from duplexkit.models import BatchItem, load_model
    from duplexkit.models.moshi.plugin import MoshiModel
    from duplexkit.models.moshi.tiny import write_tiny_checkpoint

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = write_tiny_checkpoint(Path(tmp) / "tiny")
        plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": "2"})
    assert isinstance(plugin, MoshiModel)
    sessions = [plugin.new_session(), plugin.new_session()]
    windows: list[dict[str, float]] = []
    ticks: list[float] = []
    for frame in range(args.frames):
        items = [
            BatchItem(
                s,
                Unit(frame, Fence("s"), (0.1 * rng.standard_normal(1920)).astype(np.float32), 24_000, 0, 80),
                time.monotonic(),
            )
            for s in sessions
        ]
        started = time.perf_counter()
        await plugin.step_batch(items)
        ticks.append(time.perf_counter() - started)
        if len(ticks) == args.window:
            ordered = sorted(ticks)
            windows.append(
                {
                    "until_frame": frame + 1,
                    "tick_mean_ms": 1000 * statistics.fmean(ticks),
                    "tick_p99_ms": 1000 * ordered[int(0.99 * (len(ordered) - 1))],
                    "rss_mib": _rss_mib(),
                }
            )
            print("window", json.dumps(windows[-1]), flush=True)  # what a cut-short run still shows
            ticks = []
    context = plugin.context_frames
    past = [w for w in windows if w["until_frame"] - args.window >= context]
    first, last = past[0], past[-1]
    print(
        json.dumps(
            {
                "context_frames": context,
                "frames_per_session": args.frames,
                "contexts_passed": args.frames / context,
                "first_window_past_context": first,
                "last_window": last,
                "tick_mean_ratio_last_to_first": last["tick_mean_ms"] / first["tick_mean_ms"],
                "rss_growth_mib": last["rss_mib"] - first["rss_mib"],
                "clock": "time.perf_counter around step_batch, in process",
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
