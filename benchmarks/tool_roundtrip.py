"""The tool round trip's latency on the cascade, against a plain answer in the same run.

One embedded server with the cascade (`responder=openai`, pocketsphinx ASR, piper TTS) whose endpoint is
a fake OpenAI-compatible chat-completions server (`tests/fake_chat.py`: it streams at once, so the figures
are the server's and the cascade's share, not an LLM's). Per trial a fresh WebSocket session; a spoken
question ("What is the weather in Paris?", the project's TTS) streamed in real time, 100 ms appends, then
silence, the kinds in turn:

* `tools`: the session offers `get_weather`. **question → call**: from the end of the question's speech to
  the arrival of `response.function_call_arguments.done`; the client then answers at once (output +
  `response.create`), and **output → first audio**: from sending the output to the first
  `response.output_audio.delta`.
* `plain` (the baseline): no tools; **question → first audio** of the direct answer.
* `tools_vllm_omni`: as `tools`, in vLLM-Omni's dialect (`?duplex=1`), where the client sends the output
  alone and the session continues by itself: **output → first audio** without the `response.create`.

Every time is on the client's monotonic clock; the end of speech is when the append that carries it was
sent (the stream is paced in real time, so that is when it was said).

    PYTHONPATH=src .venv/bin/python benchmarks/tool_roundtrip.py --trials 5
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import time
from typing import Any

import numpy as np
from tests.fake_chat import FakeChat
from tests.server.conftest import RawClient, connect

from duplexkit.models import load_model
from duplexkit.models.cascade.drive import silence, speech_end_ms, spoken, with_noise_floor
from duplexkit.models.cascade.tts import PiperSynthesizer
from duplexkit.server import EmbeddedServer

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
APPEND = 1600  # 100 ms at 16 kHz


async def _say(client: RawClient, clip: np.ndarray, end_sample: int) -> float:
    """Stream `clip` in real time; the monotonic time the append holding sample `end_sample` went out."""
    said_at = 0.0
    start = time.monotonic()
    for k, offset in enumerate(range(0, len(clip), APPEND)):
        chunk = (np.clip(clip[offset : offset + APPEND], -1, 1) * 32767).astype("<i2").tobytes()
        audio = base64.b64encode(chunk).decode()  # 16 kHz, named: a GA session's own rate is 24 kHz
        await client.send({"type": "input_audio_buffer.append", "audio": audio, "sample_rate_hz": 16_000})
        if offset <= end_sample < offset + APPEND:
            said_at = time.monotonic()
        await asyncio.sleep(max(0.0, start + (k + 1) * 0.1 - time.monotonic()))
    return said_at


async def trial(server: EmbeddedServer, clip: np.ndarray, end_sample: int, kind: str) -> dict[str, float]:
    vllm_omni = kind == "tools_vllm_omni"
    client = await connect(server.url, "?duplex=1" if vllm_omni else "")
    audio_delta = "response.audio.delta" if vllm_omni else "response.output_audio.delta"  # its beta names
    suffix = "_vllm_omni" if vllm_omni else ""
    try:
        await client.until("session.created")
        session: dict[str, Any] = {} if kind == "plain" else {"tools": [WEATHER]}
        await client.send({"type": "session.update", "session": session})
        await client.until("session.updated")
        speaking = asyncio.create_task(_say(client, clip, end_sample))
        if kind == "plain":
            await client.until(audio_delta, timeout=60)
            heard_at = time.monotonic()
            said_at = await speaking
            return {"question_to_first_audio_ms": 1000 * (heard_at - said_at)}
        args = await client.until("response.function_call_arguments.done", timeout=60)
        called_at = time.monotonic()
        said_at = await speaking
        output = {"type": "function_call_output", "call_id": args["call_id"], "output": "21 degrees"}
        sent_at = time.monotonic()
        await client.send({"type": "conversation.item.create", "item": output})
        if not vllm_omni:
            await client.send({"type": "response.create"})
        await client.until(audio_delta, timeout=60)
        return {
            f"question_to_call_ms{suffix}": 1000 * (called_at - said_at),
            f"output_to_first_audio_ms{suffix}": 1000 * (time.monotonic() - sent_at),
        }
    finally:
        await client.ws.close()


async def run(trials: int) -> dict[str, Any]:
    voice = PiperSynthesizer(deterministic=True)
    speech = spoken(voice, "What is the weather in Paris?")
    clip = with_noise_floor(np.concatenate([silence(300), speech, silence(2000)]))
    end_sample = round((300 + speech_end_ms(speech)) * 16)
    results: dict[str, list[float]] = {}
    with FakeChat() as chat:
        plugin = load_model(
            "cascade",
            {"responder": "openai", "llm_url": chat.url, "llm_model": "fake", "asr": "pocketsphinx"},
        )
        async with EmbeddedServer(plugin) as server:
            kinds = ("tools", "plain", "tools_vllm_omni")
            for k in range(len(kinds) * trials):
                for name, value in (await trial(server, clip, end_sample, kinds[k % len(kinds)])).items():
                    results.setdefault(name, []).append(value)
    summary = {
        name: {"median": round(statistics.median(v), 1), "all": [round(x) for x in v]}
        for name, v in results.items()
    }
    plain = summary["question_to_first_audio_ms"]["median"]
    summary["call_vs_plain_first_audio"] = round(summary["question_to_call_ms"]["median"] / plain, 2)
    by_itself = summary["output_to_first_audio_ms_vllm_omni"]["median"]
    asked = summary["output_to_first_audio_ms"]["median"]
    summary["answer_by_itself_vs_response_create"] = round(by_itself / asked, 2)
    summary["clock"] = "client time.monotonic; speech end = when its append was sent (real-time pacing)"
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    kinds = "tools, plain, tools_vllm_omni"
    parser.add_argument("--trials", type=int, default=5, help=f"trials per kind ({kinds}), in turn")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.trials)), indent=2))


if __name__ == "__main__":
    main()
