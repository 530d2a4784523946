"""The chaos suite at full counts; its last run's figures are in docs/reliability.md.

Each scenario is the same function the test suite runs at small counts (`tests/chaos/scenarios.py`), against
a real server (scripted model) over real sockets. Prints one JSON object per scenario and writes them all to
`--out`.

    PYTHONPATH=src .venv/bin/python benchmarks/chaos.py --out chaos.json
    PYTHONPATH=src .venv/bin/python benchmarks/chaos.py --only disconnect fuzz
    PYTHONPATH=src .venv/bin/python benchmarks/chaos.py --only doors protocol_fuzz --minutes 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.chaos

from tests.chaos import scenarios

SCENARIOS = (
    "fuzz",
    "cycles",
    "cancellation",
    "disconnect",
    "faults",
    "slow_reader",
    "overload",
    "sigkill",
    "clean_close",
    "cluster_burst",
    "doors",
    "protocol_fuzz",
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", nargs="+", choices=SCENARIOS, default=list(SCENARIOS), help="scenarios to run"
    )
    parser.add_argument("--fuzz", type=int, default=100_000, help="fuzzed client events")
    parser.add_argument("--cycles", type=int, default=10_000, help="open/close cycles")
    parser.add_argument("--cancellation-points", type=int, default=100, help="timed cancellation points")
    parser.add_argument("--disconnects", type=int, default=100, help="sessions dropped mid-response")
    parser.add_argument("--fault-rounds", type=int, default=5, help="rounds of the model-fault scenario")
    parser.add_argument("--capacity", type=int, default=8, help="server capacity for the 2x-capacity run")
    parser.add_argument("--overload-rounds", type=int, default=3, help="rounds of the 2x-capacity run")
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs of a running benchmark")
    parser.add_argument("--kill-samples", type=int, default=40, help="samples in the killed benchmark")
    parser.add_argument("--clean-closes", type=int, default=500, help="sessions closed cleanly at random")
    parser.add_argument("--burst-rounds", type=int, default=10, help="rounds of the cluster burst")
    parser.add_argument(
        "--minutes",
        type=float,
        default=2.0,
        help="how long each fuzzer runs: random clients at every door (doors), the Sans-I/O state machines "
        "(protocol_fuzz)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    parser.add_argument("--out", type=Path, help="write every scenario's report here (JSON)")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for name in args.only:
        started = time.monotonic()
        report = run(name, args)
        results[name] = {**report, "wall_s": round(time.monotonic() - started, 1)}
        print(json.dumps({name: results[name]}), flush=True)
        if args.out is not None:
            args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


def run(name: str, args: argparse.Namespace) -> dict[str, Any]:
    if name == "fuzz":
        return asyncio.run(scenarios.fuzz_events(args.fuzz, seed=args.seed)).to_json()
    if name == "cycles":
        return asyncio.run(scenarios.open_close_cycles(args.cycles, seed=args.seed, concurrency=8)).to_json()
    if name == "cancellation":
        return asyncio.run(scenarios.cancellation_walk(args.cancellation_points, loop_steps=60)).to_json()
    if name == "disconnect":
        return asyncio.run(scenarios.disconnect_mid_response(args.disconnects, seed=args.seed)).to_json()
    if name == "faults":
        return asyncio.run(scenarios.model_faults(args.fault_rounds)).to_json()
    if name == "slow_reader":
        return asyncio.run(scenarios.slow_reader()).to_json()
    if name == "overload":
        return asyncio.run(scenarios.overload(args.capacity, 3.0, rounds=args.overload_rounds)).to_json()
    if name == "clean_close":
        return asyncio.run(scenarios.clean_closes(args.clean_closes, seed=args.seed)).to_json()
    if name == "cluster_burst":
        return cluster_burst(args.burst_rounds)
    if name == "doors":
        report = scenarios.door_fuzz(seconds=args.minutes * 60, seed=args.seed)
        return asyncio.run(report).to_json()
    if name == "protocol_fuzz":
        from tests.fuzz.long import protocol_fuzz

        return protocol_fuzz(args.minutes * 60)
    with tempfile.TemporaryDirectory() as root:
        return scenarios.sigkill_bench(args.kills, args.kill_samples, root, seed=args.seed).to_json()


def cluster_burst(rounds: int) -> dict[str, Any]:
    """A local Ray Serve cluster of 2 replicas x 4 slots; each round opens 3x its capacity at once."""
    import socket

    from duplexkit.server.ray_serve import RayServeOptions, ray_serve

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    fast = {"first_output_ms": "30", "token_ms": "2", "ms_per_char": "10"}
    options = RayServeOptions(model="scripted", model_args=fast, replicas=2, max_sessions=4, replica_cpus=0.5)
    with ray_serve(options, port=port) as url:
        return asyncio.run(scenarios.cluster_burst(url, 8, 24, rounds=rounds)).to_json()


if __name__ == "__main__":
    main()
