"""The full-size Moshi tick on a CUDA machine: 1, 8, 16, 32 and 64 slots in bf16, with random weights.

The architecture is Moshi 7B's own (`moshi.models.loaders`' default LM and Mimi configurations); step cost
does not depend on the weights, so nothing is downloaded. Each slot count builds the same `SlotBatch`
the server steps (`duplexkit.models.moshi.slots`): one batched Mimi encode, one `LMGen.step`, one Mimi
decode per tick, every slot active. Reported per slot count: mean and p99 tick time (CUDA-synchronised,
on `time.perf_counter`), against the 80 ms real-time budget and vLLM-Omni's lockstep PersonaPlex figures
(28.0 / 32.6 / 45.0 / 70.2 ms at 2 / 8 / 16 / 32 sessions, H100-class, vLLM-Omni issue #7389). One JSON
line per slot count, then a summary; fits a 10-minute device call.

    python benchmarks/moshi_tick_gpu.py --frames 100
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("NO_TORCH_COMPILE", "1")

import numpy as np
import torch
from moshi.models import loaders

from duplexkit.models.moshi.frames import FRAME_SAMPLES
from duplexkit.models.moshi.params import Sampling
from duplexkit.models.moshi.slots import SlotBatch

VLLM_OMNI_LOCKSTEP_MS = {2: 28.0, 8: 32.6, 16: 45.0, 32: 70.2}
REAL_TIME_MS = 80.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", default="1,8,16,32,64", help="slot counts, comma-separated")
    parser.add_argument("--frames", type=int, default=100, help="timed ticks per slot count")
    parser.add_argument("--warmup", type=int, default=20, help="untimed ticks first (CUDA graphs capture)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA device")
    device = "cuda"
    print(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__}))
    mimi = loaders.get_mimi(None, device=device)
    lm = loaders.get_moshi_lm(None, device=device, dtype=torch.bfloat16)
    sampling = Sampling(temp=0.8, temp_text=0.7, top_k=250, top_k_text=25)
    rng = np.random.default_rng(0)
    summary = {}
    for n in [int(x) for x in args.slots.split(",")]:
        batch = SlotBatch(mimi, lm, n, sampling)
        frames = {slot: (0.1 * rng.standard_normal(FRAME_SAMPLES)).astype(np.float32) for slot in range(n)}
        times = []
        for k in range(args.warmup + args.frames):
            torch.cuda.synchronize()
            started = time.perf_counter()
            batch.step({sampling: frames}, occupied=n)
            torch.cuda.synchronize()
            if k >= args.warmup:
                times.append((time.perf_counter() - started) * 1e3)
        mean = statistics.mean(times)
        row = {
            "slots": n,
            "tick_ms_mean": round(mean, 2),
            "tick_ms_p99": round(float(np.percentile(times, 99)), 2),
            "real_time_fraction": round(mean / REAL_TIME_MS, 3),
            "vllm_omni_lockstep_ms": VLLM_OMNI_LOCKSTEP_MS.get(n),
        }
        summary[n] = row["tick_ms_mean"]
        print(json.dumps(row), flush=True)
        batch.close()
        del batch
        torch.cuda.empty_cache()
    print(json.dumps({"tick_ms_mean_by_slots": summary, "real_time_ms": REAL_TIME_MS}))


if __name__ == "__main__":
    main()
