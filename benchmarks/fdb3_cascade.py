"""FDB-v3's built-in set on the cascade with a tool LLM that knows the answer: what the cascade's hearing
(VAD, pocketsphinx, its turn taking) and the tool round trip do to a perfect tool chooser.

For each selected built-in recording, a fake OpenAI-compatible chat endpoint (`tests/fake_chat.py`, written
from the chat-completions streaming contract) is told that recording's first expected call and calls it
whenever the cascade asks with tools offered, then speaks "Done: <tool output>". The recording is run with
`duplexkit bench --benchmark fdb3` on the embedded cascade (`responder=openai` at that endpoint), scored by
the exact-match rule, and one line per recording is printed: the calls made, when (seconds after the user's
speech end, on the stream's clock), and whether it passed. A disfluent request the cascade's VAD splits into
several turns gets a call per turn: extra calls, which FDB-v3's Pass@1 counts against it.

    PYTHONPATH=src python benchmarks/fdb3_cascade.py --out /tmp/fdb3-cascade [--ids travel_01,finance_01]

Needs the cascade and tts extras; runs offline in real time (about 20 s a recording, plus model loading).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from duplexkit.bench.fdb3.builtin import SCENARIOS
from duplexkit.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.fake_chat

from tests.fake_chat import FakeChat


def run(out: Path, example: str) -> dict[str, object]:
    scenario = next(s for s in SCENARIOS if s["id"] == example)
    first = scenario["expected_tool_calls"][0]
    with FakeChat(call=(first["function"], first["args"]), answer="Done: {tool}") as chat:
        code = main(
            [
                "bench", "--benchmark", "fdb3", "--dataset", "builtin", "--ids", example,
                "--out", str(out / example), "--model", "cascade", "--model-arg", "responder=openai",
                "--model-arg", f"llm_url={chat.url}", "--model-arg", "llm_model=fake",
                "--model-arg", "asr=pocketsphinx", "--score",
            ]
        )  # fmt: skip
    scores = json.loads((out / example / "fdb3_scores.json").read_text())
    [row] = scores["samples"] or [None]
    result = next((out / example).glob("*/*/result_duplexkit.json"))
    data = json.loads(result.read_text())
    end = data.get("user_speech_end_rel") or 0.0
    return {
        "example": example,
        "exit": code,
        "expected": [c["function"] for c in scenario["expected_tool_calls"]],
        "calls": [(c["function"], round(c["timestamp_start"] - end, 2)) for c in data["actual_tool_calls"]],
        "spoke": bool(data.get("transcript")),
        "passed": None if row is None else row["passed"],
    }


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="a folder for one run folder per recording")
    parser.add_argument("--ids", default=",".join(s["id"] for s in SCENARIOS), help="built-in example ids")
    args = parser.parse_args()
    rows = [run(args.out, example) for example in args.ids.split(",")]
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    cli()
