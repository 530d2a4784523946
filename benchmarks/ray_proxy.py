"""Ray Serve proxy cost: the same replicas reached through the Serve proxy and directly, in one run.

A local Ray cluster on loopback runs `--replicas` replicas of the scripted model, each also serving the same
app object on its own port (`RayServeOptions.direct_host`). N realtime sessions stream 16 kHz PCM16 in
200 ms appends, in alternating rounds: through the Serve proxy (`ws://127.0.0.1:PORT/v1/realtime`), then
straight to the replicas' own ports (sessions spread over them), and so on. Latency of a unit: (append that
closes the unit sent → its `response.listen` received), client monotonic clock. CPU: every `ray::` process
(proxy, replicas, controller) from /proc, per round; the proxy's cost per message is (CPU of a proxy round
minus CPU of a direct round) / messages sent in the round.

    .venv/bin/python benchmarks/ray_proxy.py --sessions 20 --seconds 15 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import urllib.request
from typing import Any

from server_load import DEFAULT_CADENCE, SessionStats, _append_frames, _session, stagger
from serving import free_port

from duplexkit.server.ray_serve import RayServeOptions, ray_serve


def ray_cpu_seconds() -> float:
    """User + system CPU so far of every process whose command line starts with `ray::` (Ray workers)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if not f.read(5).startswith(b"ray::"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def healthz(http: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{http}/healthz", timeout=5) as response:
        return dict(json.load(response))


async def round_of(urls: list[str], sessions: int, seconds: float) -> dict[str, float]:
    frames = _append_frames(seconds, DEFAULT_CADENCE.append_ms)
    stats = [SessionStats() for _ in range(sessions)]
    cpu0 = ray_cpu_seconds()
    begin = time.monotonic() + 1.0
    await asyncio.gather(
        *(
            _session(
                urls[i % len(urls)],
                frames,
                DEFAULT_CADENCE,
                False,
                False,
                begin + stagger(i, DEFAULT_CADENCE),
                s,
            )
            for i, s in enumerate(stats)
        )
    )
    cpu = ray_cpu_seconds() - cpu0
    latencies = sorted(x for s in stats for x in s.latencies_ms)
    return {
        "held": sum(s.held for s in stats),
        "messages": sessions * len(frames),
        "cpu_s": cpu,
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[int(0.99 * (len(latencies) - 1))],
        "samples": len(latencies),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=15.0, help="audio streamed per session per round")
    parser.add_argument("--rounds", type=int, default=2, help="proxy/direct round pairs")
    parser.add_argument("--replicas", type=int, default=2)
    args = parser.parse_args()

    port = free_port()
    options = RayServeOptions(
        model="scripted",
        replicas=args.replicas,
        max_sessions=args.sessions,
        replica_cpus=0.5,
        direct_host="127.0.0.1",
    )
    started = time.monotonic()
    with ray_serve(options, port=port) as proxy_url:
        up_s = time.monotonic() - started
        await asyncio.sleep(2.0)  # every replica has reported
        direct = [r["url"] for r in healthz(f"http://127.0.0.1:{port}")["per_replica"]]
        assert len(direct) == args.replicas and all(direct), direct
        results: dict[str, list[dict[str, float]]] = {"proxy": [], "direct": []}
        for _ in range(args.rounds):
            results["proxy"].append(await round_of([proxy_url], args.sessions, args.seconds))
            results["direct"].append(await round_of(direct, args.sessions, args.seconds))
    print(f"local Ray cluster up in {up_s:.1f} s; {args.replicas} replicas; {args.sessions} sessions x ")
    print(
        f"{args.seconds:g} s per round, {DEFAULT_CADENCE.append_ms} ms appends, realtime; "
        f"{args.rounds} round pairs"
    )
    print(
        f"{'path':<7} {'round':>5} {'held':>5} {'p50 ms':>8} {'p99 ms':>8} {'samples':>8} {'ray CPU s':>10}"
    )
    for path, rounds in results.items():
        for i, r in enumerate(rounds, start=1):
            print(
                f"{path:<7} {i:>5} {r['held']:>5.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f}"
                f" {r['samples']:>8.0f} {r['cpu_s']:>10.2f}"
            )
    for key in ("p50_ms", "p99_ms"):
        proxy = statistics.median(r[key] for r in results["proxy"])
        direct_v = statistics.median(r[key] for r in results["direct"])
        ratio = proxy / direct_v
        print(f"{key}: proxy {proxy:.2f} / direct {direct_v:.2f} = {ratio:.2f}x (+{proxy - direct_v:.2f} ms)")
    extra_cpu = statistics.median(r["cpu_s"] for r in results["proxy"]) - statistics.median(
        r["cpu_s"] for r in results["direct"]
    )
    messages = results["proxy"][0]["messages"]
    per_message_us = 1e6 * extra_cpu / messages
    print(f"proxy CPU per append: {per_message_us:.0f} µs ({extra_cpu:.2f} s over {messages:.0f} appends)")


if __name__ == "__main__":
    asyncio.run(main())
