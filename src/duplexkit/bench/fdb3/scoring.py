"""Score FDB-v3 recording folders (`result_<provider>.json` beside `input.wav`, written by duplexkit or by
FDB-v3's own runner) by FDB-v3's rules (`metrics`), with the argument judge when one is named.

`score_samples` reads each folder's result, pairs its calls with the scenario's expected calls, judges each
pair once (the judge, else the exact-match rule, upstream's rule without `--use-llm`) and computes both of
upstream's reports from the same verdicts: `evaluation` (`{provider}_evaluation_report.json`'s aggregates:
tool selection, argument accuracy, turn taking, latency and interruptions, by domain and difficulty) and
`pass_rate` (`{provider}_pass_rate_report.json`'s: Pass@1 and its breakdowns), plus duplexkit's own
`latencies` (first response, tool call, task completion, each with its interruptions) and
`self_correction`. `score_dir` writes them as `fdb3_scores.json`, the two upstream-named reports, and
`scores/` when the folder is a run. A folder without a readable result is listed with an error code and left
out of every number.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from duplexkit.bench.errors import ConfigError
from duplexkit.bench.fdb3 import metrics as m
from duplexkit.bench.fdb3.dataset import Sample, data_root, find_samples
from duplexkit.bench.fdb3.judge import ArgumentJudge
from duplexkit.bench.fdb3.references import METRICS, PUBLISHED

if TYPE_CHECKING:
    from duplexkit.bench.judge.settings import JudgeSettings

SCORES_FILE = "fdb3_scores.json"
LATENCIES = ("first_response_s", "tool_call_s", "task_completion_s")
MEANS = ("tool_selection", "argument", "pass_at_1", "turn_take", "latency_s", "interruption")
"""The per-domain means the shared report shows (`report`)."""


@dataclass(frozen=True)
class ScoreOptions:
    """Whose results to score (`result_<provider>.json`; duplexkit's runs write `duplexkit`) and the
    scenario file for folders without their own `metadata.json`."""

    provider: str = "duplexkit"
    scenarios: Path | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ScoreOptions:
        return cls(provider=raw.get("provider") or "duplexkit", scenarios=raw.get("scenarios"))


class SampleError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def read_result(sample: Sample, provider: str) -> dict[str, Any]:
    """The folder's `result_<provider>.json`; `SampleError` when missing or not a JSON object."""
    path = sample.folder / f"result_{provider}.json"
    if not path.is_file():
        raise SampleError("no_result", f"{path} is missing")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SampleError("bad_result", f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise SampleError("bad_result", f"{path}: expected a JSON object")
    return data


def _calls(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {**c, "args": c.get("args") if isinstance(c.get("args"), dict) else {}}
        for c in result.get("actual_tool_calls") or []
        if isinstance(c, dict) and isinstance(c.get("function"), str)
    ]


async def score_one(sample: Sample, result: Mapping[str, Any], judge: ArgumentJudge | None) -> dict[str, Any]:
    """One example's row: upstream's per-scenario fields of both reports, and duplexkit's additions."""
    scenario = sample.scenario
    expected = sample.expected_calls
    actual = _calls(result)
    selection = m.tool_selection(expected, actual)
    pairs = m.pair_calls(expected, actual)

    async def verdict(want: Mapping[str, Any], got: Mapping[str, Any] | None) -> m.Verdict | None:
        if got is None:
            return None
        if judge is None:
            return m.exact_match(want.get("args", {}), got.get("args", {}))
        return await judge.judge(str(want["function"]), want.get("args", {}), got.get("args", {}))

    verdicts = await asyncio.gather(*(verdict(want, got) for want, got in pairs))
    argument = m.argument_accuracy(pairs, verdicts)
    transcript = str(result.get("transcript") or "")
    quality: dict[str, Any] = {"score": None, "explanation": "LLM judge disabled; response accuracy skipped."}
    if judge is not None:
        dialogue = scenario.get("dialogue") or [{}]
        expected_intent = str(dialogue[-1].get("ai", "")) if isinstance(dialogue[-1], dict) else ""
        score, why = await judge.response_quality(expected_intent, transcript)
        quality = {"score": score, "explanation": why}
    passed = m.strict_pass(expected, selection, argument)
    return {
        "split": sample.split,
        "id": sample.id,
        "scenario_id": scenario["id"],
        "domain": scenario["domain"],
        "difficulty": scenario["difficulty"],
        "title": scenario.get("title"),
        "turn_take_success": m.turn_taken(result),
        "metrics": {
            "tool_selection_acc": selection,
            "argument_acc": argument,
            "response_qual": quality,
        },
        "latency": m.response_latency(result),
        "expected_calls_count": len(expected),
        "actual_calls_count": len(actual),
        "num_tools": len(expected),
        "disfluency": list(scenario.get("disfluency_features") or []),
        "state_rollback": bool(scenario.get("state_rollback_test")),
        **passed,
        "latencies": m.latency_breakdown(result),
        "retracted_values_used": m.uses_retracted(actual, scenario.get("retracted_values") or []),
        "transcript": transcript,
        "oracle_calls": bool((result.get("duplexkit") or {}).get("oracle_calls")),
    }


def latency_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per latency: examples timed, interruptions (negative values), mean of the others."""
    out: dict[str, Any] = {}
    for key in LATENCIES:
        values = [r["latencies"][key] for r in rows if r["latencies"][key] is not None]
        late = [v for v in values if v >= 0]
        out[key] = {
            "samples": len(values),
            "interruptions": len(values) - len(late),
            "mean_s": m.mean(late),
            "median_s": round(sorted(late)[len(late) // 2], 3) if late else None,
        }
    out["clock"] = "seconds from the user's speech end (user_speech_end_rel) on the stream's clock"
    return out


def self_correction(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How the examples whose user corrects themselves went: their Pass@1, and how many calls used a value
    the user took back (for scenarios that state them)."""
    rollback = [r for r in rows if r["state_rollback"]]
    return {
        "samples": len(rollback),
        "pass_at_1": round(sum(r["passed"] for r in rollback) / len(rollback), 3) if rollback else None,
        "used_retracted_value": sum(1 for r in rollback if r["retracted_values_used"]),
    }


async def score_samples(
    samples: Sequence[Sample], options: ScoreOptions, judge: ArgumentJudge | None = None
) -> dict[str, Any]:
    """Every example's row and the reports (the `fdb3_scores.json` payload)."""
    rows: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []

    async def one(sample: Sample) -> None:
        try:
            result = read_result(sample, options.provider)
        except SampleError as exc:
            errors.append({"split": sample.split, "id": sample.id, "error": exc.code, "message": str(exc)})
            return
        rows.append(await score_one(sample, result, judge))

    await asyncio.gather(*(one(s) for s in samples))
    rows.sort(key=lambda r: (r["split"], r["id"]))
    errors.sort(key=lambda r: (r["split"], r["id"]))
    return {
        "benchmark": "fdb3",
        "provider": options.provider,
        "evaluated_at": datetime.datetime.now().isoformat(),
        "synthetic": any(s.synthetic for s in samples),
        "oracle_calls": any(r["oracle_calls"] for r in rows),
        "judge": judge.info.to_json()
        if judge is not None
        else {"kind": "rules", "model": "exact match (FDB-v3's rule without --use-llm)"},
        "evaluation": m.evaluation_report(rows, judged=judge is not None),
        "pass_rate": m.pass_rate_report(rows),
        "latencies": latency_summary(rows),
        "self_correction": self_correction(rows),
        "samples": rows,
        "errors": errors,
    }


def headline(scores: Mapping[str, Any]) -> dict[str, float | None]:
    """Ours on the published table's metrics."""
    evaluation, passing = scores["evaluation"], scores["pass_rate"]
    rows = scores["samples"]
    return {
        "tool_selection": evaluation["by_metric"]["tool_selection_acc"],
        "argument": evaluation["by_metric"]["argument_acc"],
        "response_quality": evaluation["by_metric"]["response_qual"],
        "pass_at_1": passing["overall_pass_rate"] if rows else None,
        "turn_take": evaluation["turn_taking"]["turn_take_rate"],
        "latency_s": evaluation["latency"]["avg_response_latency_s"],
        "interruption": evaluation["latency"]["interruption_rate"],
    }


def format_summary(scores: Mapping[str, Any]) -> str:
    """The terminal summary: our numbers with their directions beside every published row."""
    ours = headline(scores)
    keys = list(METRICS)
    head = f"{'system':<32}" + "".join(f"{METRICS[k][2] + ' ' + METRICS[k][1]:>13}" for k in keys)
    lines = ["↑ higher is better · ↓ lower is better", head, "-" * len(head)]

    def cell(value: float | None) -> str:
        return f"{'-' if value is None else f'{value:.3f}':>13}"

    label = f"this run ({scores['provider']}, n={len(scores['samples'])})"
    lines.append(f"{label:<32}" + "".join(cell(ours[k]) for k in keys))
    for row in PUBLISHED:
        lines.append(f"{row.system:<32}" + "".join(cell(getattr(row, k)) for k in keys))
    lat = scores["latencies"]
    lines.append(
        "latencies from the user's speech end (mean of non-negative; negative = interruption): "
        + ", ".join(
            f"{k.removesuffix('_s').replace('_', ' ')} {_s(lat[k]['mean_s'])} ↓ "
            f"({lat[k]['interruptions']}/{lat[k]['samples']} interrupted)"
            for k in LATENCIES
        )
    )
    sc = scores["self_correction"]
    if sc["samples"]:
        lines.append(
            f"self-correction: Pass@1 {_s(sc['pass_at_1'])} ↑ on {sc['samples']} example(s); "
            f"{sc['used_retracted_value']} used a value the user took back ↓"
        )
    judged = scores["judge"].get("kind") == "llm"
    lines.append(
        f"judge: {scores['judge'].get('model')}"
        + ("" if judged else "; response quality needs an LLM judge (--judge-url, --judge-model): -")
    )
    if scores["errors"]:
        lines.append(f"not scored: {len(scores['errors'])} example(s) ({scores['errors'][0]['message']} ...)")
    if scores.get("synthetic"):
        lines.append("note: synthetic built-in data; not comparable to published FDB-v3 numbers")
    if scores.get("oracle_calls"):
        lines.append(
            "note: --oracle-calls: the model was told each recording's expected calls; these numbers check "
            "the harness, they measure no model"
        )
    return "\n".join(lines)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


async def score_dir(root: Path, options: ScoreOptions, judge: ArgumentJudge | None = None) -> dict[str, Any]:
    """Score every recording folder under `root`: `fdb3_scores.json`, upstream's two report files and
    (for a run folder) `scores/`."""
    from duplexkit.bench.artifacts import write_json_atomic

    samples, _ = find_samples(data_root(root), options.scenarios)
    scores = await score_samples(samples, options, judge)
    write_json_atomic(root / SCORES_FILE, scores)
    name = scores["judge"].get("model")
    evaluation = {"benchmark_name": f"FDB-v3 scored by duplexkit ({name})", **scores["evaluation"]}
    write_json_atomic(
        root / f"{options.provider}_evaluation_report.json",
        evaluation | {"scenario_results": scores["samples"]},
    )
    passing = {"benchmark_name": evaluation["benchmark_name"], **scores["pass_rate"]}
    write_json_atomic(
        root / f"{options.provider}_pass_rate_report.json", passing | {"scenario_results": scores["samples"]}
    )
    if (root / "run.json").is_file():
        write_run_scores(root, scores)
    return scores


def _group(rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    timed = [r["latency"] for r in rows if r["turn_take_success"] and r["latency"].get("available")]
    late = [t["agent_response_latency_s"] for t in timed if not t["is_interruption"]]
    taken = [r for r in rows if r["turn_take_success"]]
    return {
        "tool_selection": m.mean([r["metrics"]["tool_selection_acc"]["score"] for r in taken]),
        "argument": m.mean([r["metrics"]["argument_acc"]["score"] for r in taken]),
        "pass_at_1": m.mean([float(r["passed"]) for r in rows]),
        "turn_take": m.mean([float(r["turn_take_success"]) for r in rows]),
        "latency_s": m.mean(late),
        "interruption": round((len(timed) - len(late)) / len(timed), 3) if timed else None,
    }


def write_run_scores(root: Path, scores: Mapping[str, Any]) -> None:
    """A run folder's scores in the shared report's shape: `scores/summary.json` (one `fdb3` section, a
    group per domain) and `scores/<split>/<id>.json` per example."""
    from duplexkit.bench.artifacts import write_json_atomic

    rows, errors = scores["samples"], scores["errors"]
    by_domain: dict[str, Any] = {}
    for domain in sorted({r["split"] for r in rows} | {e["split"] for e in errors}):
        group = [r for r in rows if r["split"] == domain]
        by_domain[domain] = _group(group) | {
            "samples": len(group),
            "errors": sum(1 for e in errors if e["split"] == domain),
        }
    for row in rows:
        values = {
            "tool_selection": row["metrics"]["tool_selection_acc"]["score"],
            "argument": row["metrics"]["argument_acc"]["score"],
            "pass_at_1": float(row["passed"]),
        }
        latency = row["latency"].get("agent_response_latency_s")
        if latency is not None:
            values["latency_s"] = latency
        write_json_atomic(
            root / "scores" / row["split"] / f"{row['id']}.json",
            {"status": "scored", "scores": values, "error": None, "details": row},
        )
    for error in errors:
        write_json_atomic(
            root / "scores" / error["split"] / f"{error['id']}.json",
            {"status": "error", "scores": {}, "error": error["message"]},
        )
    judge = scores["judge"]
    total = len(rows) + len(errors)
    summary = {
        "benchmark": "fdb3",
        "judge": {
            "kind": "rules" if judge.get("kind") != "llm" else "llm",
            "model": judge.get("model"),
            "url": judge.get("url"),
            "prompt_version": judge.get("prompt_version") or "none",
            "prompt_source": judge.get("prompt_source"),
        },
        "note": "synthetic built-in data: not comparable to published numbers"
        if scores.get("synthetic")
        else None,
        "complete": not errors,
        "coverage": {"total": total, "scored": len(rows), "skipped": 0, "errors": len(errors)},
        "fdb3": {"samples": len(rows), "errors": len(errors), "by_task": by_domain, **_group(rows)},
    }
    write_json_atomic(root / "scores" / "summary.json", summary)


def argument_judge(settings: JudgeSettings) -> ArgumentJudge | None:
    """The argument judge the settings name (`None`: the exact-match rule); `ConfigError` for settings it
    refuses."""
    if settings.protocol_dir is not None:
        raise ConfigError("fdb3 takes no --protocol-dir")
    if settings.kind == "builtin":
        if settings.url or settings.model:
            raise ConfigError("--judge builtin (exact match) takes no --judge-url or --judge-model")
        return None
    if not (settings.url or settings.model or settings.kind == "llm"):
        return None
    settings.check_llm()
    assert settings.url is not None and settings.model is not None
    return ArgumentJudge.over(
        base_url=settings.url,
        model=settings.model,
        api_key=settings.api_key,
        concurrency=settings.concurrency,
        timeout_s=settings.timeout_s,
    )


async def score_folder(
    root: Path,
    settings: JudgeSettings,
    options: ScoreOptions,
    *,
    allow_invalid_clock: bool,
) -> dict[str, Any]:
    """`duplexkit score --benchmark fdb3`: any folder of FDB-v3 recording folders, a run or not."""
    if _recorded_pace(root) not in (None, "realtime") and not allow_invalid_clock:
        raise ConfigError(f"{root} was run as fast as possible (clock=invalid); add --allow-invalid-clock")
    judge = argument_judge(settings)
    try:
        return await score_dir(root, options, judge)
    finally:
        if judge is not None:
            await judge.aclose()


def _recorded_pace(root: Path) -> str | None:
    try:
        pace = json.loads((root / "run.json").read_text(encoding="utf-8"))["config"]["pace"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pace if isinstance(pace, str) else None
