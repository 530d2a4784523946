"""Interop with the official `openai` SDK, and the server process's SIGTERM drain."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import socket
import sys
import time

import numpy as np
import websockets
from openai import AsyncOpenAI

from duplexkit.server import EmbeddedServer


async def test_the_openai_sdk_realtime_connection_completes_one_spoken_turn(server: EmbeddedServer) -> None:
    client = AsyncOpenAI(
        api_key="unused", base_url=f"{server.http_url}/v1", websocket_base_url=f"{server.url[:-9]}"
    )
    t = np.arange(24_000 * 2) / 24_000  # the SDK's GA default: pcm16 at 24 kHz
    speech = base64.b64encode((0.2 * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2").tobytes()).decode()
    audio = bytearray()
    transcript = []
    async with client.realtime.connect(model="scripted") as connection:
        await connection.session.update(
            session={
                "type": "realtime",
                "output_modalities": ["audio"],
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}},
            }
        )
        await connection.input_audio_buffer.append(audio=speech)
        await connection.input_audio_buffer.commit()
        async with asyncio.timeout(10):
            async for event in connection:
                if event.type == "response.output_audio.delta":
                    audio += base64.b64decode(event.delta)
                elif event.type == "response.output_audio_transcript.delta":
                    transcript.append(event.delta)
                elif event.type == "response.done":
                    assert event.response.status == "completed"
                    break
                elif event.type == "error":
                    raise AssertionError(event.error)
    assert "".join(transcript) == "This is a scripted reply."
    assert len(audio) == 2 * round(len("This is a scripted reply.") * 0.060 * 24_000)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_sigterm_closes_every_session_with_server_shutdown_and_exits_0() -> None:
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "duplexkit", "serve", "--port", str(port), "--log-level", "warning"
    )
    try:
        deadline = time.monotonic() + 60  # a loaded machine takes seconds to import and start it
        while True:
            try:
                ws = await websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime")
                break
            except OSError:
                if proc.returncode is not None or time.monotonic() > deadline:
                    raise AssertionError("server did not start") from None
                await asyncio.sleep(0.05)
        assert json.loads(await ws.recv())["type"] == "session.created"
        proc.send_signal(signal.SIGTERM)
        closed = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert closed["type"] == "session.closed" and closed["reason"] == "server_shutdown"
        assert await asyncio.wait_for(proc.wait(), 15) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
