"""What the benchmark scripts share: a free port, a server subprocess, and its CPU time.

Servers run as subprocesses so their CPU time is measured apart from the load generator's. Every script
pins `--model scripted` (the deterministic double) unless it says otherwise: the default model is the
CPU speech cascade, which would measure something else entirely.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def duplexkit_serve(port: int, max_sessions: int, model_args: tuple[str, ...] = ()) -> list[str]:
    """The argv of `duplexkit serve --model scripted` on `port`."""
    argv = [sys.executable, "-m", "duplexkit", "serve", "--model", "scripted", "--port", str(port)]
    argv += ["--max-sessions", str(max_sessions), "--log-level", "warning"]
    for arg in model_args:
        argv += ["--model-arg", arg]
    return argv


async def start(
    argv: list[str], port: int, env: dict[str, str] | None = None, *, timeout_s: float = 20.0
) -> asyncio.subprocess.Process:
    """Start `argv` (in `env`, else this process's environment) and wait until it accepts TCP connections
    on `port`, for up to `timeout_s`."""
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.DEVNULL, env=env)
    for _ in range(round(timeout_s / 0.05)):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            await writer.wait_closed()
            return proc
        except OSError:
            await asyncio.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{argv[:4]} did not start on port {port}")
