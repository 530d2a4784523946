"""What the benchmark scripts share: a free port, a server subprocess, its CPU time, and the baseline tree
run beside the new one in the same run (`baseline_tree`, `Worker`).

Servers run as subprocesses so their CPU time is measured apart from the load generator's. Every script
pins `--model scripted` (the deterministic double) unless it says otherwise: the default model is the
CPU speech cascade, which would measure something else entirely.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


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


MODEL_STAGES = (
    "vad_tail",
    "smart_turn",
    "final_decode",
    "llm_first_token",
    "first_phrase",
    "tts_first_phrase",
    "first_audio_sent",
    "total",
)
"""The cascade's own split of a reply's wait (`TurnTrace.stages`), in the order the tables print it."""


def baseline_tree(rev: str, into: Path) -> Path:
    """`rev`'s `src/` extracted into `into` (its path goes first on the baseline worker's PYTHONPATH)."""
    repo = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "-C", str(repo), "archive", rev, "src"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


class Worker:
    """One design's worker process (`script --worker *args` on `src`), models loaded once, asked one thing
    at a time: a command line in, the line that starts with the expected answer out."""

    def __init__(self, name: str, script: str, src: Path, log: Path, args: Sequence[str] = ()) -> None:
        self.name = name
        self._log = log.open("w")
        self._process = subprocess.Popen(
            [sys.executable, script, "--worker", *args],
            env={**os.environ, "PYTHONPATH": str(src)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self._expect("READY")

    def ask(self, command: str, answer: str) -> Any:
        assert self._process.stdin is not None
        self._process.stdin.write(command + "\n")
        self._process.stdin.flush()
        return json.loads(self._expect(answer))

    def _expect(self, prefix: str) -> str:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        raise RuntimeError(f"the {self.name} worker died; its log: {self._log.name}")

    def close(self) -> None:
        if self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.write("quit\n")
            self._process.stdin.close()
            self._process.wait(60)
        self._log.close()
