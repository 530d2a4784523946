"""Where the server's CPU goes per append: `duplexkit serve --model scripted` under cProfile, under load.

The load is `server_load.py`'s (N realtime sessions of 16 kHz PCM16 at one unit length, `--unit-ms`:
200 ms appends, or one per unit below 200 ms; compression off).
The server runs as `python -m cProfile` in a subprocess and is stopped with SIGTERM (its normal drain),
so the profile covers the whole run. Printed: the functions with the most own time, in µs per append
(cProfile's own overhead inflates every figure; compare them with each other, not with a wall clock).

    .venv/bin/python benchmarks/profile_server.py --sessions 200 --seconds 10
    .venv/bin/python benchmarks/profile_server.py --sessions 200 --seconds 10 --unit-ms 80
"""

from __future__ import annotations

import argparse
import asyncio
import pstats
import signal
import sys
import tempfile
from pathlib import Path

from server_load import Cadence, SessionStats, _append_frames, _session, stagger
from serving import duplexkit_serve, free_port, start


async def _profile(sessions: int, seconds: float, cadence: Cadence, out: Path) -> int:
    port = free_port()
    serve = duplexkit_serve(port, sessions, (f"chunk_period_ms={cadence.unit_ms}",))
    argv = [*serve, "--no-ws-compression"]
    argv = [sys.executable, "-m", "cProfile", "-o", str(out), *argv[1:]]
    proc = await start(argv, port)
    frames = _append_frames(seconds, cadence.append_ms)
    stats = [SessionStats() for _ in range(sessions)]
    url = f"ws://127.0.0.1:{port}/v1/realtime"
    loop = asyncio.get_running_loop()
    begin = loop.time() + 1.0
    await asyncio.gather(
        *(
            _session(url, frames, cadence, False, False, begin + stagger(i, cadence), s)
            for i, s in enumerate(stats)
        )
    )
    proc.send_signal(signal.SIGTERM)
    await proc.wait()
    return sessions * len(frames)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0, help="audio streamed per session")
    parser.add_argument("--unit-ms", type=int, default=1000, help="unit length (default: %(default)s)")
    parser.add_argument("--top", type=int, default=30, help="functions to print (default: %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "server.prof"
        appends = asyncio.run(_profile(args.sessions, args.seconds, Cadence(args.unit_ms), out))
        stats = pstats.Stats(str(out))
    total = sum(entry[2] for entry in stats.stats.values())  # type: ignore[attr-defined]
    print(f"{appends} appends; profiled server CPU {total:.2f} s = {total / appends * 1e6:.0f} µs per append")
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
    print(f"{'own µs/append':>14} {'cum µs/append':>14} {'calls/append':>13}  function")
    for (path, line, name), (_, calls, own, cum, _) in rows[: args.top]:
        where = f"{Path(path).name}:{line}({name})" if line else name
        print(f"{own / appends * 1e6:>14.1f} {cum / appends * 1e6:>14.1f} {calls / appends:>13.2f}  {where}")


if __name__ == "__main__":
    main()
