"""Server load: N concurrent realtime sessions against `duplexkit serve --model scripted`, beside floors.

Each session streams 16 kHz PCM16 speech on a deadline schedule, at each unit length (`--unit-ms`, default
1 s and Moshi's 80 ms frame): 200 ms appends for units of 200 ms or more, one append per unit for shorter
ones (the scripted model is served with `chunk_period_ms` set to the unit). For each unit length, every
server below gets the same traffic, one after another, each as a subprocess so its CPU time is measured
apart from the load generator's:

- `floor` (the baseline): a bare `websockets` server that receives the same frames and answers one small
  event per unit (the protocol's cadence), permessage-deflate off on both sides. It does the transport
  part of our job and nothing else. Like duplexkit under uvicorn, it runs on uvloop when installed.
- `floor-picows`: the same floor on `picows` (Cython WebSocket framing over asyncio), to weigh the
  transport library on its own.
- `floor-protocol`: the picows floor doing the work any server of this protocol must do per unit, and no
  more: each append's JSON parsed and its base64 audio decoded to float samples, each unit's
  `response.listen` rendered with its own id and sequence number. What duplexkit spends beyond it is its
  own engine's (assembling units, stepping the model, deciding, the session's bookkeeping).
- `echo`: a bare `websockets` server sending every frame back (five times the protocol's outbound bytes),
  compression off; the floor this benchmark used to quote.
- `duplexkit`: `duplexkit serve` on its default edge (`picows`), compression off on both sides (what
  `DuplexClient` and the server's default do);
- `duplexkit-websockets`: the same on the `websockets` edge (`--edge websockets`), the default before
  picows, and the edge that serves permessage-deflate;
- `duplexkit-asgi`: the same on the ASGI edge (`--edge asgi`: Starlette under uvicorn), the edge every
  server ran before the native ones;
- `duplexkit+deflate`: permessage-deflate negotiated by both sides (`--ws-compression`, a client offering
  it), which `duplexkit serve` then serves on the `websockets` edge.

Latency of a unit is (append that closes the unit sent → its answer received: `response.listen` or the
floor's event); for the echo, (append sent → its echo received). Clock: the load generator's monotonic.
The load generator's garbage collector is off during a turn, so its own pauses do not count as a server's.

    .venv/bin/python benchmarks/server_load.py --sessions 1000 --seconds 10
    .venv/bin/python benchmarks/server_load.py --sessions 500 --seconds 10 --unit-ms 80

Two trees in one run: a server name ending in `@baseline` (`duplexkit@baseline`, ...) runs that server from
the source tree `--baseline-src` (its `PYTHONPATH`); the others run from this environment's. `--repeat N`
runs the list N times, so the trees alternate under the same conditions:

    git archive <commit> | tar -x -C /tmp/before
    PYTHONPATH=src .venv/bin/python benchmarks/server_load.py --sessions 500 --seconds 10 --unit-ms 80 \
        --servers floor,duplexkit@baseline,duplexkit --baseline-src /tmp/before/src --repeat 3

`--trace FILE` writes every latency with its unit's send time (JSON lines, one per turn), to see where a
tail comes from (a start-up burst or pauses during the run).

It prints /proc/loadavg before each server's turn: the machine may be shared, and a server that does not
get the CPU it asks for falls behind realtime (its p99 says so).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import json
import math
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import websockets
from serving import cpu_seconds, duplexkit_serve, free_port, start

RATE = 16_000
LONGEST_APPEND_MS = 200
"""Appends are this long, or one unit when the unit is shorter."""


@dataclass(frozen=True, slots=True)
class Cadence:
    """A unit length and the append length the load generator sends at it."""

    unit_ms: int

    @property
    def append_ms(self) -> int:
        return min(self.unit_ms, LONGEST_APPEND_MS)

    @property
    def appends_per_unit(self) -> int:
        if self.unit_ms % self.append_ms:
            raise ValueError(f"a {self.unit_ms} ms unit is not a whole number of {self.append_ms} ms appends")
        return self.unit_ms // self.append_ms


DEFAULT_CADENCE = Cadence(1000)

BARE_SERVER = """
import asyncio, sys, websockets
EVENT = (
    '{"type":"response.listen","event_id":"evt_000000000000_1","server_event_seq":1,'
    '"response":{"status":"listening","metadata":{"reason":"model_listen","model_listen":true}}}'
)
async def echo(ws):
    async for message in ws:
        await ws.send(message)
async def floor(ws):
    count = 0
    async for message in ws:
        count += 1
        if count % int(sys.argv[3]) == 0:
            await ws.send(EVENT)
async def main():
    handler = echo if sys.argv[2] == "echo" else floor
    async with websockets.serve(
        handler, "127.0.0.1", int(sys.argv[1]), max_size=None, ping_interval=None, compression=None
    ):
        await asyncio.Future()
try:
    import uvloop  # what uvicorn runs duplexkit on when it is installed: the baselines get it too
    uvloop.run(main())
except ImportError:
    asyncio.run(main())
"""
"""The bare servers; `EVENT` is the size of duplexkit's `response.listen` (170 bytes)."""

PICOWS_FLOOR = """
import base64, json, sys, uvloop
import numpy as np
from picows import WSListener, WSMsgType, ws_create_server
EVENT = (
    b'{"type":"response.listen","event_id":"evt_000000000000_1","server_event_seq":1,'
    b'"response":{"status":"listening","metadata":{"reason":"model_listen","model_listen":true}}}'
)
PROTOCOL = sys.argv[3] == "protocol"
SCALE = np.float32(1 / 32768)
class Floor(WSListener):
    count = 0
    def on_ws_frame(self, transport, frame):
        if frame.msg_type == WSMsgType.TEXT:
            text = frame.get_payload_as_ascii_text()  # read, as the websockets floor's recv does
            if PROTOCOL:  # the append's audio as samples, as any server of the protocol must have them
                np.frombuffer(base64.b64decode(json.loads(text)["audio"]), "<i2") * SCALE
            self.count += 1
            if self.count % int(sys.argv[2]) == 0:
                if PROTOCOL:  # the unit's answer rendered, with its own id and sequence number
                    transport.send(WSMsgType.TEXT, json.dumps({
                        "type": "response.listen", "event_id": f"evt_{self.count:012d}_1",
                        "server_event_seq": self.count,
                        "response": {"status": "listening",
                                     "metadata": {"reason": "model_listen", "model_listen": True}},
                    }).encode())
                else:
                    transport.send(WSMsgType.TEXT, EVENT)
        elif frame.msg_type == WSMsgType.CLOSE:
            transport.send_close(frame.get_close_code())
            transport.disconnect()
async def main():
    port = int(sys.argv[1])
    server = await ws_create_server(lambda request: Floor(), "127.0.0.1", port, max_frame_size=1 << 24)
    await server.serve_forever()
uvloop.run(main())
"""
"""The floor on `picows` (one text frame per message: the load generator never fragments); with `protocol`,
the protocol floor (module doc)."""


@dataclass
class SessionStats:
    latencies_ms: list[float] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)
    """Each latency's send time (the load generator's monotonic clock)."""
    held: bool = False

    def record(self, sent: float, received: float) -> None:
        self.latencies_ms.append((received - sent) * 1000)
        self.sent_at.append(sent)


def _append_frames(seconds: float, append_ms: int) -> list[str]:
    t = np.arange(round(append_ms * RATE / 1000)) / RATE
    pcm = (0.2 * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2").tobytes()
    audio = base64.b64encode(pcm).decode()
    count = round(seconds * 1000 / append_ms)
    return [
        json.dumps(
            {
                "type": "input_audio_buffer.append",
                "audio": audio,
                "sample_rate_hz": RATE,  # a GA session's own PCM rate is OpenAI's 24 kHz
                "duration_ms": append_ms,
                "audio_end_ms": (k + 1) * append_ms,
            }
        )
        for k in range(count)
    ]


class Start:
    """When the sessions start streaming: `LEAD_S` after the last of them connected (or failed to), so
    no unit is sent while the server is still opening sessions, however long that takes."""

    LEAD_S = 1.0

    def __init__(self, sessions: int) -> None:
        self._waiting = sessions
        self._ready = asyncio.Event()
        self.at = math.inf

    def arrived(self) -> None:
        self._waiting -= 1
        if self._waiting == 0:
            self.at = time.monotonic() + self.LEAD_S
            self._ready.set()

    async def wait(self) -> float:
        await self._ready.wait()
        return self.at


async def _session(
    url: str,
    frames: list[str],
    cadence: Cadence,
    echo: bool,
    deflate: bool,
    start: Start,
    offset_s: float,
    stats: SessionStats,
) -> None:
    compression = "deflate" if deflate else None
    connected = False
    try:
        async with websockets.connect(url, max_size=None, ping_interval=None, compression=compression) as ws:
            connected = True
            start.arrived()
            stats.held = True
            await _stream(ws, frames, cadence, echo, start, offset_s, stats)
    finally:
        if not connected:
            start.arrived()


async def _stream(
    ws: websockets.ClientConnection,
    frames: list[str],
    cadence: Cadence,
    echo: bool,
    start: Start,
    offset_s: float,
    stats: SessionStats,
) -> None:
    per_unit = cadence.appends_per_unit
    append_s = cadence.append_ms / 1000
    sent_at: dict[int, float] = {}
    received = 0

    async def reader() -> None:
        nonlocal received
        async for message in ws:
            now = time.monotonic()
            if echo:
                key = received
                received += 1
                if key in sent_at:
                    stats.record(sent_at.pop(key), now)
            elif '"response.listen"' in message:
                unit = received
                received += 1
                if unit in sent_at:
                    stats.record(sent_at.pop(unit), now)

    task = asyncio.create_task(reader())
    start_at = await start.wait() + offset_s
    for k, frame in enumerate(frames):
        delay = start_at + k * append_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if echo:
            sent_at[k] = time.monotonic()
        elif (k + 1) % per_unit == 0:
            sent_at[(k + 1) // per_unit - 1] = time.monotonic()
        await ws.send(frame)
    await asyncio.sleep(1.5)
    task.cancel()


def stagger(i: int, cadence: Cadence) -> float:
    """Session `i`'s start offset: spread over one append period so sessions do not all send at once."""
    return (i % 40) * cadence.append_ms / 40_000


@dataclass(frozen=True, slots=True)
class Turn:
    """One server's turn: its results and every latency with its unit's send time (s after the start)."""

    results: dict[str, float]
    trace: list[tuple[float, float]]


async def _run(
    name: str,
    argv: list[str],
    url: str,
    port: int,
    sessions: int,
    seconds: float,
    cadence: Cadence,
    env: dict[str, str] | None,
    wrap: list[str],
    hooks: tuple[str, str],
) -> Turn:
    argv = [arg.replace("{server}", name) for arg in wrap] + argv
    proc = await start(argv, port, env, timeout_s=600.0 if wrap else 20.0)
    frames = _append_frames(seconds, cadence.append_ms)
    stats = [SessionStats() for _ in range(sessions)]
    cpu0 = cpu_seconds(proc.pid)
    begin = Start(sessions)
    deflate = name.endswith("+deflate")
    # The load generator's own full collections (its 500-1,000 client connections: up to 200 ms each)
    # would count as the server's latency: none during a turn.
    gc.collect()
    gc.disable()
    window = asyncio.create_task(_hook(hooks[0], proc.pid, begin))
    try:
        await asyncio.gather(
            *(
                _session(url, frames, cadence, name == "echo", deflate, begin, stagger(i, cadence), s)
                for i, s in enumerate(stats)
            )
        )
        await window
        await _hook(hooks[1], proc.pid, None)
    finally:
        gc.enable()
    cpu = cpu_seconds(proc.pid) - cpu0
    proc.terminate()
    await proc.wait()
    latencies = sorted(x for s in stats for x in s.latencies_ms)
    held = sum(s.held for s in stats)
    trace = sorted(
        (sent - begin.at, ms) for s in stats for sent, ms in zip(s.sent_at, s.latencies_ms, strict=True)
    )
    results = {
        "held": held,
        "cpu_per_session_second": cpu / (held * seconds) if held else float("nan"),
        "p50_ms": statistics.median(latencies) if latencies else float("nan"),
        "p99_ms": _p99(latencies),
        "p99_after_1s_ms": _p99(sorted(ms for at, ms in trace if at >= 1.0)),
        "samples": len(latencies),
    }
    return Turn(results, trace)


async def _hook(command: str, pid: int, start: Start | None) -> None:
    """Run `command` ({pid}: the server's) when streaming starts (`start`), or now."""
    if not command:
        return
    if start is not None:
        await asyncio.sleep(max(0.0, await start.wait() - time.monotonic()))
    shell = await asyncio.create_subprocess_shell(
        command.replace("{pid}", str(pid)), stdout=asyncio.subprocess.DEVNULL
    )
    await shell.wait()


def _p99(ordered: list[float]) -> float:
    return ordered[int(0.99 * (len(ordered) - 1))] if ordered else float("nan")


def _argv(name: str, port: int, sessions: int, cadence: Cadence) -> tuple[list[str], str] | None:
    """A server's command line and URL, or `None` for an unknown name (`@baseline` stripped)."""
    name = name.removesuffix(BASELINE)
    if name in ("floor", "echo"):
        argv = [sys.executable, "-c", BARE_SERVER, str(port), name, str(cadence.appends_per_unit)]
        return argv, f"ws://127.0.0.1:{port}"
    if name in ("floor-picows", "floor-protocol"):
        mode = "protocol" if name == "floor-protocol" else "transport"
        argv = [sys.executable, "-c", PICOWS_FLOOR, str(port), str(cadence.appends_per_unit), mode]
        return argv, f"ws://127.0.0.1:{port}"
    edges = {
        "duplexkit": (),
        "duplexkit-websockets": ("--edge", "websockets"),
        "duplexkit-asgi": ("--edge", "asgi"),
    }
    if name in edges or name == "duplexkit+deflate":
        compression = "--ws-compression" if name.endswith("+deflate") else "--no-ws-compression"
        serve = duplexkit_serve(port, sessions, (f"chunk_period_ms={cadence.unit_ms}",))
        return [*serve, compression, *edges.get(name, ())], f"ws://127.0.0.1:{port}/v1/realtime"
    return None


BASELINE = "@baseline"
"""A server name's suffix: run it from `--baseline-src`."""


def _env(name: str, baseline_src: str | None) -> dict[str, str] | None:
    """The environment of a server's process: `--baseline-src` first on the path for a baseline."""
    if not name.endswith(BASELINE):
        return None
    if baseline_src is None:
        raise ValueError(f"{name} needs --baseline-src")
    return {**os.environ, "PYTHONPATH": str(Path(baseline_src).resolve())}


def _report(
    sessions: int, seconds: float, cadence: Cadence, rounds: list[dict[str, dict[str, float]]]
) -> None:
    print(
        f"{sessions} sessions x {seconds:g} s of 16 kHz PCM16, {cadence.unit_ms} ms units, "
        f"{cadence.append_ms} ms appends, realtime"
    )
    print(
        f"{'round':>5} {'server':<22} {'held':>5} {'cpu s/session-s':>16} {'/ floor':>8} {'p50 ms':>8}"
        f" {'p99 ms':>8} {'p99 >1s':>8} {'samples':>8}"
    )
    for k, results in enumerate(rounds, 1):
        floor = results["floor"]["cpu_per_session_second"] if "floor" in results else float("nan")
        for name, r in results.items():
            print(
                f"{k:>5} {name:<22} {r['held']:>5.0f} {r['cpu_per_session_second']:>16.6f}"
                f" {r['cpu_per_session_second'] / floor:>7.2f}x {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f}"
                f" {r['p99_after_1s_ms']:>8.2f} {r['samples']:>8.0f}"
            )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0, help="audio streamed per session")
    parser.add_argument(
        "--unit-ms",
        default="1000,80",
        help="unit lengths to run, in order, comma-separated (default: %(default)s)",
    )
    parser.add_argument(
        "--servers",
        default="floor,duplexkit,duplexkit-asgi",
        help="which servers to run, in order, of floor, floor-picows, floor-protocol, echo, duplexkit, "
        f"duplexkit-websockets, duplexkit-asgi, duplexkit+deflate; a duplexkit name ending in {BASELINE} "
        "runs from --baseline-src (default: %(default)s)",
    )
    parser.add_argument("--baseline-src", help=f"the source tree (its src/) the {BASELINE} servers run")
    parser.add_argument("--repeat", type=int, default=1, help="run the servers' list this many times")
    parser.add_argument("--trace", type=Path, help="write each turn's latencies with their send times here")
    parser.add_argument(
        "--wrap",
        default="",
        help="a command each server runs under ({server}: its name), e.g. valgrind --tool=callgrind "
        "--callgrind-out-file=/tmp/cg.{server}.%%p: instructions per unit, which the machine's load does "
        "not change",
    )
    parser.add_argument(
        "--on-start",
        default="",
        help="a shell command run when streaming starts ({pid}: the server's), e.g. callgrind_control -i on "
        "{pid} with --wrap 'valgrind --tool=callgrind --instr-atstart=no ...': only the streaming is counted",
    )
    parser.add_argument("--on-end", default="", help="a shell command run when streaming has ended ({pid})")
    args = parser.parse_args()
    try:
        cadences = [Cadence(int(ms)) for ms in args.unit_ms.split(",")]
        for cadence in cadences:
            cadence.appends_per_unit  # noqa: B018  # validates the unit length
    except ValueError as exc:
        parser.error(f"--unit-ms: {exc}")
    names = args.servers.split(",")
    for name in names:
        if _argv(name, 0, args.sessions, DEFAULT_CADENCE) is None:
            parser.error(f"unknown server {name!r}")
        if name.endswith(BASELINE) and (name.startswith(("floor", "echo")) or args.baseline_src is None):
            parser.error(f"{name}: only a duplexkit server runs from --baseline-src, which it needs")

    trace = args.trace.open("w") if args.trace else None  # once, before the runs
    summary: dict[Cadence, list[dict[str, dict[str, float]]]] = {}
    for cadence in cadences:
        for k in range(args.repeat):
            results: dict[str, dict[str, float]] = {}
            summary.setdefault(cadence, []).append(results)
            for name in names:
                port = free_port()
                server = _argv(name, port, args.sessions, cadence)
                assert server is not None
                argv, url = server
                load = Path("/proc/loadavg").read_text().split()[:3]  # noqa: ASYNC240  # a tiny procfs read
                print(
                    f"{name} ({cadence.unit_ms} ms units, round {k + 1}): load average before its turn "
                    f"{' '.join(load)}",
                    flush=True,
                )
                env = _env(name, args.baseline_src)
                turn = await _run(
                    name,
                    argv,
                    url,
                    port,
                    args.sessions,
                    args.seconds,
                    cadence,
                    env,
                    shlex.split(args.wrap),
                    (args.on_start, args.on_end),
                )
                results[name] = r = turn.results
                print(
                    f"{name:<22} held {r['held']:>5.0f}  cpu s/session-s {r['cpu_per_session_second']:.6f}"
                    f"  p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms (after the first second "
                    f"{r['p99_after_1s_ms']:.2f})  samples {r['samples']:.0f}",
                    flush=True,
                )
                if trace is not None:
                    record = {"server": name, "unit_ms": cadence.unit_ms, "round": k + 1, "load": load}
                    trace.write(json.dumps({**record, "results": r, "sent_s_latency_ms": turn.trace}) + "\n")
                    trace.flush()
    if trace is not None:
        trace.close()
    for cadence, rounds in summary.items():
        _report(args.sessions, args.seconds, cadence, rounds)


if __name__ == "__main__":
    asyncio.run(main())
