"""A voice agent with a tool, on the `openai` SDK (GA realtime), unchanged, against a duplexkit server.

It offers `get_weather`, streams a spoken question (a WAV file: 16-bit mono, any rate), runs each
function call the model makes with the Python function below, sends the output, asks for the answer
(`response.create`) and writes the spoken answer to a WAV file. The model keeps listening while the tool
runs (duplex): audio could keep flowing, and speech would be a barge-in on the call (its late output then
gets `stale_function_call_output`).

A server whose model calls tools, e.g. the cascade with an OpenAI-compatible LLM:

    duplexkit serve --model cascade --model-arg responder=openai \\
        --model-arg llm_url=http://127.0.0.1:8080/v1 --model-arg llm_model=my-llm
    python examples/weather_agent.py question.wav --url ws://127.0.0.1:8000/v1/realtime

or, with nothing to install, the scripted model (it "calls" the tool after any speech):

    python examples/weather_agent.py question.wav --scripted
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import wave
from pathlib import Path
from typing import Any

import numpy as np
from openai import AsyncOpenAI

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
RATE = 24_000
"""GA `audio/pcm` is 24 kHz PCM16 both ways."""


def get_weather(city: str) -> dict[str, Any]:
    """The tool: a real agent would call a weather service here."""
    return {"city": city, "temperature_c": 21, "sky": "clear"}


TOOLS = {"get_weather": get_weather}


def read_wav(path: Path) -> bytes:
    """A 16-bit mono WAV as 24 kHz PCM16 (linear interpolation; enough for a question)."""
    with wave.open(str(path)) as wav:
        if wav.getsampwidth() != 2 or wav.getnchannels() != 1:
            raise SystemExit(f"{path}: need 16-bit mono PCM")
        rate, pcm = wav.getframerate(), np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
    if rate != RATE:
        t = np.arange(round(len(pcm) * RATE / rate)) * rate / RATE
        pcm = np.interp(t, np.arange(len(pcm)), pcm).astype("<i2")
    return pcm.tobytes()


async def converse(url: str, question: bytes, answer_wav: Path) -> dict[str, Any]:
    """One question answered through the tool; returns what happened (calls, transcript, audio seconds)."""
    client = AsyncOpenAI(api_key="unused", websocket_base_url=url.removesuffix("/realtime"))
    audio, calls, transcript = bytearray(), [], ""
    async with client.realtime.connect(model="any") as connection:
        await connection.session.update(
            session={
                "type": "realtime",
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": RATE}}},
                "tools": [WEATHER_TOOL],  # type: ignore[list-item]
                "tool_choice": "auto",
            }
        )
        for start in range(0, len(question), RATE // 5 * 2):  # 200 ms appends
            chunk = question[start : start + RATE // 5 * 2]
            await connection.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
        await connection.input_audio_buffer.commit()  # end of the question (or let the model decide)
        async with asyncio.timeout(60):
            async for event in connection:
                if event.type == "response.function_call_arguments.done":
                    result = TOOLS[event.name](**json.loads(event.arguments))  # run the tool
                    calls.append({"name": event.name, "arguments": event.arguments, "output": result})
                    await connection.conversation.item.create(
                        item={
                            "type": "function_call_output",
                            "call_id": event.call_id,
                            "output": json.dumps(result),
                        }
                    )
                elif event.type == "response.output_audio.delta":
                    audio += base64.b64decode(event.delta)
                elif event.type == "response.output_audio_transcript.done":
                    transcript += event.transcript
                elif event.type == "response.done":
                    if any(item.type == "function_call" for item in event.response.output or []):
                        await connection.response.create()  # answer with the outputs
                    elif transcript:
                        break
                elif event.type == "error":
                    raise RuntimeError(f"{event.error.code}: {event.error.message}")
    with wave.open(str(answer_wav), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes(bytes(audio))
    return {"calls": calls, "transcript": transcript, "answer_seconds": len(audio) / 2 / RATE}


async def scripted(question: bytes, answer_wav: Path) -> dict[str, Any]:
    """The same conversation against an embedded server with the scripted model."""
    from duplexkit.models import load_model
    from duplexkit.server import EmbeddedServer

    calls = json.dumps([{"name": "get_weather", "arguments": {"city": "Paris"}}])
    args = {"tool_calls": calls, "reply": "Here is the weather: {output}.", "chunk_period_ms": "200"}
    async with EmbeddedServer(load_model("scripted", args)) as server:
        return await converse(server.url, question, answer_wav)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", type=Path, help="the spoken question: a 16-bit mono WAV file")
    parser.add_argument("--url", default="ws://127.0.0.1:8000/v1/realtime", help="the server's realtime URL")
    parser.add_argument(
        "--scripted", action="store_true", help="run an embedded server with the scripted model"
    )
    parser.add_argument("--answer", type=Path, default=Path("answer.wav"), help="where to write the answer")
    args = parser.parse_args()
    question = read_wav(args.question)
    run = scripted(question, args.answer) if args.scripted else converse(args.url, question, args.answer)
    print(json.dumps(asyncio.run(run), indent=2))


if __name__ == "__main__":
    main()
