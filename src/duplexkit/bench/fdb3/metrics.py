"""FDB-v3's scoring rules, pure: tool selection, argument matching, the strict pass, latency and the
aggregates, with FDB-v3's field names and rounding (`evaluate_tool_calls.py`, `evaluate_pass_rate.py`,
`run_tool_benchmark.py`; docs/fdb3.md says where duplexkit adds to them).

A call is `{"function": name, "args": {...}}` (expected calls from the scenario, actual calls from
`result_<provider>.json`'s `actual_tool_calls`). A verdict on one call's arguments is `(correct,
explanation)`, from the exact-match rule below or from the judge (`judge`); pairing expected with actual
calls is the scorers' (for each expected call in order, the first unused actual call of the same name), so
both reports judge the same pairs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

Call = Mapping[str, Any]
Verdict = tuple[bool, str]
SPEECH_GAP_S = 2.0
"""The user's turn ends at the first gap between words longer than this (`user_speech_end_rel`)."""


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def mean(values: Sequence[float]) -> float | None:
    """FDB-v3's `_avg`: the mean rounded to 3 places, `None` for no values."""
    return round(sum(values) / len(values), 3) if values else None


def sample_std(values: Sequence[float]) -> float | None:
    """FDB-v3's `_std`: the sample standard deviation (n - 1), `None` under two values."""
    if len(values) < 2:
        return None
    avg = sum(values) / len(values)
    return round(math.sqrt(sum((x - avg) ** 2 for x in values) / (len(values) - 1)), 3)


def tool_selection(expected: Sequence[Call], actual: Sequence[Call]) -> dict[str, Any]:
    """Precision, recall and F1 over function names as multisets (a repeated call counts once per
    repeat); a side with no calls has its ratio 1.0, as upstream."""
    unmatched = [str(c["function"]) for c in expected]
    unexpected = [str(c["function"]) for c in actual]
    matched = 0
    for name in list(unmatched):
        if name in unexpected:
            matched += 1
            unmatched.remove(name)
            unexpected.remove(name)
    recall = matched / len(expected) if expected else 1.0
    precision = matched / len(actual) if actual else 1.0
    f1 = 2 * recall * precision / (recall + precision) if recall + precision > 0 else 0.0
    return {
        "score": round(f1, 3),
        "recall": round(recall, 3),
        "precision": round(precision, 3),
        "matched": matched,
        "total_expected": len(expected),
        "total_actual": len(actual),
        "unmatched_expected": unmatched,
        "unexpected_calls": unexpected,
    }


def _normal(value: Any) -> Any:
    return value.lower().strip().replace("_", " ") if isinstance(value, str) else value


def exact_match(expected_args: Mapping[str, Any], actual_args: Mapping[str, Any]) -> Verdict:
    """Upstream's rule without a judge: every expected argument present and equal after lower-casing,
    trimming and reading `_` as a space (text only; numbers compare as they are); an expected value starting
    with `$` (a reference to an earlier result) matches anything present. Extra actual arguments are fine."""
    for key, want in expected_args.items():
        if key not in actual_args:
            return False, f"Missing argument: {key}"
        if isinstance(want, str) and want.startswith("$"):
            continue
        if _normal(want) != _normal(actual_args.get(key)):
            return False, f"Mismatch '{key}': expected={want}, got={actual_args.get(key)}"
    return True, "All arguments match"


def pair_calls(expected: Sequence[Call], actual: Sequence[Call]) -> list[tuple[Call, Call | None]]:
    """Each expected call with the first unused actual call of the same name (`None`: not called)."""
    queues: dict[str, list[Call]] = {}
    for call in actual:
        queues.setdefault(str(call["function"]), []).append(call)
    out: list[tuple[Call, Call | None]] = []
    for call in expected:
        queue = queues.get(str(call["function"]))
        out.append((call, queue.pop(0) if queue else None))
    return out


def argument_accuracy(
    pairs: Sequence[tuple[Call, Call | None]], verdicts: Sequence[Verdict | None]
) -> dict[str, Any]:
    """The mean over expected calls of 1 (arguments judged correct) or 0 (wrong, or not called); 1.0 with
    no expected call. `verdicts[i]` is the verdict on `pairs[i]` (`None` where there was no actual call)."""
    if not pairs:
        return {"score": 1.0, "note": "No expected calls", "details": []}
    details = []
    for (want, got), verdict in zip(pairs, verdicts, strict=True):
        if got is None or verdict is None:
            details.append({"function": want["function"], "score": 0.0, "reason": "Function not called"})
            continue
        details.append(
            {
                "function": want["function"],
                "score": 1.0 if verdict[0] else 0.0,
                "expected_args": want.get("args", {}),
                "actual_args": got.get("args", {}),
                "explanation": verdict[1],
            }
        )
    return {"score": round(sum(d["score"] for d in details) / len(details), 3), "details": details}


def strict_pass(
    expected: Sequence[Call], selection: Mapping[str, Any], argument: Mapping[str, Any]
) -> dict[str, Any]:
    """Pass@1 of one example: the names match as multisets (no missing, no extra call) and every expected
    call's arguments were judged correct. `failure_reason` uses upstream's wording (its failure breakdown
    reads it)."""
    names_ok = not selection["unmatched_expected"] and not selection["unexpected_calls"]
    checks: dict[str, Any] = {
        "tool_selection": {
            "passed": names_ok,
            "expected": [c["function"] for c in expected],
            "missing": list(selection["unmatched_expected"]),
            "unexpected": list(selection["unexpected_calls"]),
        }
    }
    if not names_ok:
        reasons = []
        if selection["unmatched_expected"]:
            reasons.append(f"Missing tools: {selection['unmatched_expected']}")
        if selection["unexpected_calls"]:
            reasons.append(f"Unexpected tools: {selection['unexpected_calls']}")
        return {"passed": False, "checks": checks, "failure_reason": "; ".join(reasons)}
    failed = [d["function"] for d in argument["details"] if d["score"] != 1.0]
    checks["argument_accuracy"] = {"passed": not failed, "details": argument["details"]}
    if failed:
        return {"passed": False, "checks": checks, "failure_reason": f"Wrong arguments for: {failed}"}
    return {"passed": True, "checks": checks, "failure_reason": ""}


def user_speech_end(chunks: Sequence[Sequence[float]]) -> float:
    """`user_speech_end_rel` from the input's timed chunks `[start, end]`: the end of the last chunk
    before the first gap longer than `SPEECH_GAP_S`, else the end of the last chunk; 0 with none (upstream
    then writes no latency)."""
    for current, following in itertools.pairwise(chunks):
        if following[0] - current[1] > SPEECH_GAP_S:
            return float(current[1])
    return float(chunks[-1][1]) if chunks else 0.0


def response_latency(result: Mapping[str, Any]) -> dict[str, Any]:
    """Upstream's per-sample latency: the agent's first speech minus the user's speech end (both seconds
    from the stream's start); negative is an interruption."""
    user_end, agent_start = result.get("user_speech_end_rel"), result.get("audio_agent_speech_start")
    if user_end is None or agent_start is None:
        return {"available": False, "reason": "Missing timing fields"}
    latency = round(float(agent_start) - float(user_end), 3)
    return {
        "available": True,
        "user_speech_end_rel": user_end,
        "audio_agent_speech_start": agent_start,
        "agent_response_latency_s": latency,
        "is_interruption": latency < 0,
    }


def turn_taken(result: Mapping[str, Any]) -> bool:
    """The agent said something: a non-empty transcript or any output chunk."""
    return bool(str(result.get("transcript") or "").strip()) or bool(result.get("asr_chunks"))


def latency_breakdown(result: Mapping[str, Any]) -> dict[str, float | None]:
    """duplexkit's three latencies from the user's speech end (seconds; negative: before it ended):
    `first_response_s` (the agent's first speech, upstream's latency), `tool_call_s` (the first call's
    start) and `task_completion_s` (the first speech starting after the last call returned: the answer
    that can carry its result). `None` where the event did not happen."""
    user_end = result.get("user_speech_end_rel")
    if not isinstance(user_end, int | float) or not user_end:
        return {"first_response_s": None, "tool_call_s": None, "task_completion_s": None}
    calls = result.get("actual_tool_calls") or []
    starts = [c["timestamp_start"] for c in calls if isinstance(c.get("timestamp_start"), int | float)]
    ends = [c["timestamp_end"] for c in calls if isinstance(c.get("timestamp_end"), int | float)]
    speech = [c["timestamp"][0] for c in result.get("asr_chunks") or [] if c.get("timestamp")]
    first_speech = result.get("audio_agent_speech_start")
    after = [s for s in speech if ends and s >= max(ends)]
    return {
        "first_response_s": None if first_speech is None else _round(float(first_speech) - user_end),
        "tool_call_s": _round(min(starts) - user_end) if starts else None,
        "task_completion_s": _round(min(after) - user_end) if after else None,
    }


def uses_retracted(actual: Sequence[Call], retracted: Sequence[Any]) -> list[str]:
    """The self-corrected-away values (`retracted`, from a scenario that states them) found among the
    actual calls' argument values, compared as the exact-match rule compares."""
    wanted = {_normal(v) for v in retracted}
    found = []
    for call in actual:
        for value in (call.get("args") or {}).values():
            if _normal(value) in wanted:
                found.append(f"{call['function']}: {value}")
    return found


def evaluation_report(rows: Sequence[Mapping[str, Any]], *, judged: bool = False) -> dict[str, Any]:
    """Upstream's `{provider}_evaluation_report.json` aggregates over per-example rows (each with
    `domain`, `difficulty`, `turn_take_success`, `metrics{tool_selection_acc, argument_acc, response_qual}`,
    `latency`): metrics on turn-taken examples, `*_all` over every example, latency excluding interruptions;
    response quality (only when `judged`) over the turn-taken examples the judge could rate."""
    taken = [r for r in rows if r["turn_take_success"]]
    timed = [r["latency"] for r in taken if r["latency"].get("available")]
    interruptions = [t for t in timed if t["is_interruption"]]
    values = [t["agent_response_latency_s"] for t in timed if not t["is_interruption"]]

    def by(key: str, group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        out: dict[str, dict[str, list[float]]] = {}
        for r in group:
            slot = out.setdefault(
                str(r[key]), {"tool_selection_acc": [], "argument_acc": [], "response_qual": []}
            )
            slot["tool_selection_acc"].append(r["metrics"]["tool_selection_acc"]["score"])
            slot["argument_acc"].append(r["metrics"]["argument_acc"]["score"])
            quality = (r["metrics"].get("response_qual") or {}).get("score")
            if quality is not None:
                slot["response_qual"].append(quality)
        return {k: {m: mean(v) for m, v in metrics.items() if v} for k, metrics in out.items()}

    return {
        "total_scenarios": len(rows),
        "turn_taking": {
            "total": len(rows),
            "turn_taken": len(taken),
            "no_response": len(rows) - len(taken),
            "turn_take_rate": round(len(taken) / len(rows), 3) if rows else None,
        },
        "by_metric": {
            "tool_selection_acc": mean([r["metrics"]["tool_selection_acc"]["score"] for r in taken]),
            "argument_acc": mean([r["metrics"]["argument_acc"]["score"] for r in taken]),
            "response_qual": mean(
                [
                    q
                    for r in taken
                    if (q := (r["metrics"].get("response_qual") or {}).get("score")) is not None
                ]
            )
            if judged
            else None,
            "tool_selection_acc_all": mean([r["metrics"]["tool_selection_acc"]["score"] for r in rows]),
            "argument_acc_all": mean([r["metrics"]["argument_acc"]["score"] for r in rows]),
            "note": "*_all includes no-response samples (scored 0); default metrics are turn-taken only",
        },
        "latency": {
            "total_samples": len(timed),
            "interruption_count": len(interruptions),
            "interruption_rate": round(len(interruptions) / len(timed), 3) if timed else None,
            "avg_response_latency_s": mean(values),
            "std_response_latency_s": sample_std(values),
            "min_latency_s": round(min(values), 3) if values else None,
            "max_latency_s": round(max(values), 3) if values else None,
            "note": "avg/std/min/max exclude interruption samples; computed on turn-taken samples only",
        },
        "by_domain": by("domain", rows),
        "by_difficulty": by("difficulty", rows),
        "by_domain_turn_taken": by("domain", taken),
        "by_difficulty_turn_taken": by("difficulty", taken),
    }


def _rate(group: Sequence[Mapping[str, Any]]) -> float:
    return round(sum(1 for r in group if r["passed"]) / len(group), 3) if group else 0


def pass_rate_report(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Upstream's `{provider}_pass_rate_report.json` aggregates over per-example rows (each with `passed`,
    `failure_reason`, `domain`, `difficulty`, `num_tools`, `disfluency`, `state_rollback`)."""
    failures = {"wrong_tools": 0, "wrong_arguments": 0}
    for r in rows:
        reason = str(r["failure_reason"]).lower()
        if not r["passed"] and ("missing tools" in reason or "unexpected tools" in reason):
            failures["wrong_tools"] += 1
        elif not r["passed"] and "wrong arguments" in reason:
            failures["wrong_arguments"] += 1

    def grouped(key: Any) -> dict[str, float]:
        groups: dict[str, list[Mapping[str, Any]]] = {}
        for r in rows:
            for value in key(r):
                groups.setdefault(str(value), []).append(r)
        return {k: _rate(v) for k, v in groups.items()}

    rollback = [r for r in rows if r.get("state_rollback")]
    plain = [r for r in rows if not r.get("state_rollback")]
    return {
        "total_scenarios": len(rows),
        "overall_pass_rate": _rate(rows),
        "passed": sum(1 for r in rows if r["passed"]),
        "failed": sum(1 for r in rows if not r["passed"]),
        "failure_breakdown": failures,
        "by_domain": grouped(lambda r: [r["domain"]]),
        "by_difficulty": grouped(lambda r: [r["difficulty"]]),
        "by_num_tools": dict(sorted(grouped(lambda r: [r["num_tools"]]).items())),
        "by_disfluency_feature": grouped(lambda r: r.get("disfluency") or []),
        "by_state_rollback": {
            "with_rollback": _rate(rollback) if rollback else None,
            "without_rollback": _rate(plain) if plain else None,
        },
    }
