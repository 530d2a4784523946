"""A stand-in for FDB-v3's own scorers (`v3/evaluate_tool_calls.py` @ 6ea51a7, `v3/evaluate_pass_rate.py`
@ b2302a5 in the eesi-ai fork), written from their code's contract, not from duplexkit's scorer, without
the LLM judge (their `--use-llm` off: arguments by their exact-match fallback).

What it keeps of theirs is what a results folder must satisfy: the scenario file is read as
`{"scenarios": [...]}` keyed by `id`; every `result_<provider>.json` anywhere below the results folder
(`rglob`) whose `example_id` is a scenario id is scored, any other is skipped silently; the fields read are
`actual_tool_calls[].function/.args`, `transcript`, `asr_chunks`, `user_speech_end_rel` and
`audio_agent_speech_start`. Returns the numbers their summaries print.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def _same(expected: Any, actual: Any) -> bool:
    def norm(v: Any) -> Any:
        return v.lower().strip().replace("_", " ") if isinstance(v, str) else v

    return norm(expected) == norm(actual)


def _args_ok(expected: dict[str, Any], actual: dict[str, Any]) -> bool:
    for key, value in expected.items():
        if key not in actual:
            return False
        if isinstance(value, str) and value.startswith("$"):
            continue
        if not _same(value, actual[key]):
            return False
    return True


def evaluate(scenario_file: Path, results_dir: Path, provider: str) -> dict[str, Any]:
    scenarios = {s["id"]: s for s in json.loads(scenario_file.read_text())["scenarios"]}
    entries = []
    for path in results_dir.rglob(f"result_{provider}.json"):
        data = json.loads(path.read_text())
        if data.get("example_id") in scenarios:
            entries.append((scenarios[data["example_id"]], data))
    per: list[dict[str, Any]] = []
    for scenario, data in entries:
        expected = scenario["expected_tool_calls"]
        actual = data.get("actual_tool_calls", [])
        left_expected = [c["function"] for c in expected]
        left_actual = [c["function"] for c in actual]
        matched = 0
        for name in list(left_expected):
            if name in left_actual:
                matched += 1
                left_expected.remove(name)
                left_actual.remove(name)
        recall = matched / len(expected) if expected else 1.0
        precision = matched / len(actual) if actual else 1.0
        f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
        pool: dict[str, list[dict[str, Any]]] = {}
        for call in actual:
            pool.setdefault(call["function"], []).append(call)
        arg_scores = []
        for call in expected:
            queue = pool.get(call["function"]) or []
            if not queue:
                arg_scores.append(0.0)
                continue
            got = queue.pop(0)
            arg_scores.append(1.0 if _args_ok(call.get("args", {}), got.get("args", {})) else 0.0)
        args = sum(arg_scores) / len(arg_scores) if arg_scores else 1.0
        passed = not left_expected and not left_actual and all(s == 1.0 for s in arg_scores)
        taken = bool(str(data.get("transcript", "")).strip()) or bool(data.get("asr_chunks", []))
        user_end, agent = data.get("user_speech_end_rel"), data.get("audio_agent_speech_start")
        latency = None if user_end is None or agent is None else round(agent - user_end, 3)
        per.append(
            {"f1": round(f1, 3), "args": round(args, 3), "passed": passed, "taken": taken, "latency": latency}
        )
    taken = [p for p in per if p["taken"]]
    lat = [p["latency"] for p in taken if p["latency"] is not None]
    plain = [x for x in lat if x >= 0]

    def avg(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 3) if values else None

    std = None
    if len(plain) >= 2:
        mu = sum(plain) / len(plain)
        std = round(math.sqrt(sum((x - mu) ** 2 for x in plain) / (len(plain) - 1)), 3)
    return {
        "scored": len(per),
        "turn_take_rate": round(len(taken) / len(per), 3) if per else None,
        "tool_selection_acc": avg([p["f1"] for p in taken]),
        "argument_acc": avg([p["args"] for p in taken]),
        "tool_selection_acc_all": avg([p["f1"] for p in per]),
        "interruption_rate": round((len(lat) - len(plain)) / len(lat), 3) if lat else None,
        "avg_response_latency_s": avg(plain),
        "std_response_latency_s": std,
        "overall_pass_rate": round(sum(p["passed"] for p in per) / len(per), 3) if per else 0,
    }
