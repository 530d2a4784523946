"""Our `/api/chat` against Kyutai's own, unchanged `python -m moshi.server` (moshi 0.2.13) on the same tiny
checkpoint and the same Ogg-Opus bytes: do the two servers send the same text pieces?

The checkpoint is a tiny random one that hears (`duplexkit.models.moshi.tiny`), in Kyutai's published
layout (no `config.json`; its configuration, greedy `lm_gen_config` included, is handed to both servers as
`moshi.server --config-path` takes it). `moshi.server` runs its LM in bfloat16 (its only choice besides
float16), so ours runs with `dtype=bfloat16` too. Two things are done to run Kyutai's server on this CPU,
both outside its code: its warm-up calls `torch.cuda.synchronize()` unconditionally, which the CPU build of
torch refuses, so that call is made a no-op before `moshi.server` is imported; and `NO_TORCH_COMPILE=1`
for both servers. The client streams the same Ogg pages from `sphn.OpusStreamWriter(24000)` to each (one
80 ms frame per message, paced at 80 ms) and records every kind 2 piece.

    .venv/bin/python benchmarks/moshi_vs_kyutai.py --seconds 6
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import sphn
import websockets
from serving import free_port

RATE, FRAME = 24_000, 1920
_KYUTAI = (
    "import sys, torch; torch.cuda.synchronize = lambda *a, **k: None; "
    "sys.argv = ['moshi.server'] + sys.argv[1:]; import runpy; "
    "runpy.run_module('moshi.server', run_name='__main__')"
)


def _pcm(seconds: float) -> np.ndarray:
    rng = np.random.default_rng(3)
    t = np.arange(int(seconds * RATE)) / RATE
    speech = 0.25 * np.sin(2 * np.pi * 180 * t) * (t % 0.6 < 0.35) + 0.03 * rng.standard_normal(len(t))
    return speech.astype(np.float32)


async def _start(argv: list[str], port: int, wait_s: float = 300.0) -> asyncio.subprocess.Process:
    """Start a server and wait (long: loading on a busy CPU) until it accepts connections."""
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.DEVNULL)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while loop.time() < deadline:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.2)
            continue
        writer.close()
        await writer.wait_closed()
        return proc
    proc.kill()
    raise RuntimeError(f"{argv[:3]} did not start on port {port}")


async def _chat(url: str, oggs: list[bytes], idle_s: float) -> list[str]:
    pieces: list[str] = []
    async with websockets.connect(url, max_size=None, ping_interval=None) as ws:
        handshake = await asyncio.wait_for(ws.recv(), 120)
        assert isinstance(handshake, bytes) and handshake[:1] == b"\x00", handshake

        async def receive() -> None:
            async for message in ws:
                if isinstance(message, bytes) and message[:1] == b"\x02":
                    pieces.append(message[1:].decode())

        receiving = asyncio.create_task(receive())
        for ogg in oggs:
            if ogg:
                await ws.send(b"\x01" + ogg)
            await asyncio.sleep(0.08)
        seen = -1
        while seen != len(pieces):  # a CPU steps bfloat16 slowly: wait until the pieces stop coming
            seen = len(pieces)
            await asyncio.sleep(idle_s)
        receiving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await receiving
    return pieces


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="input length")
    parser.add_argument("--idle", type=float, default=15.0, help="seconds without a new piece that end a run")
    args = parser.parse_args()
    os.environ["NO_TORCH_COMPILE"] = "1"
    from duplexkit.models.moshi.tiny import write_published_layout

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "moshiko-pytorch-bf16"
        config = write_published_layout(folder, "moshiko")
        from moshi.models import loaders

        kyutai_port, ours_port = free_port(), free_port()
        kyutai = [sys.executable, "-c", _KYUTAI, "--host", "127.0.0.1", "--port", str(kyutai_port)]
        kyutai += ["--moshi-weight", str(folder / loaders.MOSHI_NAME), "--mimi-weight"]
        kyutai += [str(folder / loaders.MIMI_NAME), "--tokenizer", str(folder / loaders.TEXT_TOKENIZER_NAME)]
        kyutai += ["--config-path", str(config), "--device", "cpu", "--static", "none"]
        ours = [sys.executable, "-m", "duplexkit", "serve", "--model", "moshi", "--port", str(ours_port)]
        ours += ["--log-level", "warning", "--model-arg", f"checkpoint={folder}"]
        ours += ["--model-arg", f"config={config}", "--model-arg", "dtype=bfloat16", "--model-arg", "slots=1"]
        writer = sphn.OpusStreamWriter(RATE)
        pcm = _pcm(args.seconds)
        oggs = [bytes(writer.append_pcm(pcm[i : i + FRAME])) for i in range(0, len(pcm) - FRAME + 1, FRAME)]
        procs = [await _start(kyutai, kyutai_port), await _start(ours, ours_port)]
        try:
            theirs = await _chat(f"ws://127.0.0.1:{kyutai_port}/api/chat", oggs, args.idle)
            mine = await _chat(f"ws://127.0.0.1:{ours_port}/api/chat", oggs, args.idle)
        finally:
            for proc in procs:
                proc.terminate()
                await proc.wait()
    same = sum(a == b for a, b in zip(theirs, mine, strict=False))
    print(
        json.dumps(
            {
                "frames_sent": len(oggs),
                "moshi_server_pieces": len(theirs),
                "duplexkit_pieces": len(mine),
                "identical": theirs == mine,
                "first_difference": next(
                    (i for i, (a, b) in enumerate(zip(theirs, mine, strict=False)) if a != b), None
                ),
                "equal_prefix": same,
                "moshi_server": "".join(theirs),
                "duplexkit": "".join(mine),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
