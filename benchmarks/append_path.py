"""The Sans-I/O cost of one append: `parse_client_event` and `EngineSession.handle`, before vs after.

Times one 200 ms 16 kHz PCM16 append (8.6 KB of JSON) through the parser and the engine in-process, for
this checkout and for a baseline checkout (`--baseline-src`, e.g. the main branch's `src`), alternating
the two in subprocesses within one run so both see the same machine. CPU time of the process
(`time.process_time`), best of `--rounds` rounds.

    .venv/bin/python benchmarks/append_path.py --baseline-src ../main/src
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

_MEASURE = """
import base64, json, sys, time
import numpy as np
from duplexkit.engine import EngineSession
from duplexkit.models import load_model
from duplexkit.protocol.wire import parse_client_event

t = np.arange(3200) / 16000
pcm = (0.2 * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2").tobytes()
frame = json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()})
model = load_model("scripted", {})
engine = EngineSession("sess_bench", model.capabilities.engine_config("scripted", max_sessions=1))
engine.start(0.0)
n = int(sys.argv[1])

def per_call(fn):
    fn()
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n * 1e6

event = parse_client_event(frame)
print(json.dumps({"parse_us": per_call(lambda: parse_client_event(frame)),
                  "engine_us": per_call(lambda: engine.handle(event, 1.0))}))
"""


def _measure(src: Path, calls: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(calls)], env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline-src", type=Path, required=True, help="the baseline checkout's src/")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default: %(default)s)")
    parser.add_argument(
        "--calls", type=int, default=3000, help="calls timed per round (default: %(default)s)"
    )
    args = parser.parse_args()
    ours_src = Path(__file__).resolve().parents[1] / "src"
    runs: dict[str, list[dict[str, float]]] = {"baseline": [], "this checkout": []}
    for _ in range(args.rounds):
        runs["baseline"].append(_measure(args.baseline_src.resolve(), args.calls))
        runs["this checkout"].append(_measure(ours_src, args.calls))
    best = {name: {k: min(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
    print(f"{'µs of CPU per append':<22} {'parse':>8} {'engine':>8} {'total':>8}")
    for name, b in best.items():
        print(
            f"{name:<22} {b['parse_us']:>8.1f} {b['engine_us']:>8.1f} {b['parse_us'] + b['engine_us']:>8.1f}"
        )
    base, ours = best["baseline"], best["this checkout"]
    print(
        f"parse: {base['parse_us'] / ours['parse_us']:.1f}x faster; parse + engine: "
        f"{(base['parse_us'] + base['engine_us']) / (ours['parse_us'] + ours['engine_us']):.1f}x faster"
    )


if __name__ == "__main__":
    main()
