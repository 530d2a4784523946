"""Scoring FDB v2 task folders as its evaluation does: one judge request per task, the reply saved and
processed as its `eval_single_item.py` and `parse.py` do (`parse`), then its `score.py` and
`score_time.py` aggregation (`aggregate`).

Any folder of `<split>/<task_id>/` task folders is scored, a duplexkit run or not. A task's transcripts
come from FDB v2's ASR files when the folder has them (`A.json`, `B.json`: `{text, chunks: [{text,
timestamp}]}`, what its `asr_batch.py` writes), else from duplexkit's `conversation.json` (the servers'
own transcripts, words timed where their audio played; no ASR is run). Its staged goals come from
`conversation.json`, else FDB v2's `prompt.json`, else the run's record of the task.

Files, under the folder scored: `eval_results/<split>/<task_id>.json` (the saved reply) and
`<task_id>_processed.json` (FDB v2's layout: its own `score.py --root_dir <folder>/eval_results` reads
them unchanged), `eval_results/judge_summary.csv` and `judge_summary_binned.csv` (its two scripts' CSVs),
`fdb2_scores.json` (everything, with the judge and where its rubrics came from) and, for a run folder, the
shared report's `scores/`.
"""

from __future__ import annotations

import asyncio
import csv
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from duplexkit.bench.artifacts import RunDir, write_json_atomic
from duplexkit.bench.errors import ConfigError
from duplexkit.bench.fdb2 import aggregate, parse
from duplexkit.bench.fdb2.judge import BuiltinJudge, Fdb2Judge, LlmJudge, Rubrics, build_prompt, load_rubrics
from duplexkit.bench.fdb2.references import PUBLISHED
from duplexkit.bench.judge.client import JudgeUnreachable
from duplexkit.bench.judge.settings import JudgeSettings
from duplexkit.bench.sources import DatasetError

SCORES_FILE = "fdb2_scores.json"
EVAL_DIR = "eval_results"
MEANS = ("turn_taking", "instruction_following", "task_specific")


def make_judge(settings: JudgeSettings, synthetic: bool) -> Fdb2Judge:
    """An LLM judge when a URL is given (or `--judge llm`), the builtin judge for built-in tasks."""
    kind = settings.kind or ("llm" if settings.url else "builtin" if synthetic else None)
    if kind is None:
        raise ConfigError(
            "give --judge-url URL and --judge-model NAME (or --judge builtin for the built-in tasks)"
        )
    if kind == "builtin":
        settings.refuse_builtin_extras()
        return BuiltinJudge()
    settings.check_llm()
    from duplexkit.bench.fdb2.judge import TEMPERATURE

    return LlmJudge(settings.chat_client(temperature=TEMPERATURE))


def task_folders(root: Path) -> list[tuple[str, str, Path]]:
    """`(split, task_id, folder)` of every task folder under `root` (one holding `A.wav` and `B.wav`)."""
    found = []
    for split_dir in sorted(
        p for p in root.iterdir() if p.is_dir() and p.name not in (EVAL_DIR, "records", "scores")
    ):
        for folder in sorted(p for p in split_dir.iterdir() if p.is_dir()):
            if (folder / "A.wav").is_file() and (folder / "B.wav").is_file():
                found.append((split_dir.name, folder.name, folder))
    return found


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _inputs(root: Path, split: str, task_id: str, folder: Path) -> dict[str, Any]:
    """What the judge is shown of one task (module docstring); `ValueError` when something is missing."""
    conversation = _read(folder / "conversation.json") if (folder / "conversation.json").is_file() else None
    if (folder / "A.json").is_file() and (folder / "B.json").is_file():
        a, b = _read(folder / "A.json"), _read(folder / "B.json")
        source = "fdb2_asr"
        a_text, b_text, b_words = (
            str(a.get("text") or ""),
            str(b.get("text") or ""),
            list(b.get("chunks") or []),
        )
    elif conversation is not None:
        source = "server_transcripts"
        a_text = " ".join(t["text"] for t in conversation["examiner"]["turns"] if t["text"])
        b_text = " ".join(t["text"] for t in conversation["examinee"]["turns"] if t["text"])
        b_words = list(conversation["examinee"]["words"])
    else:
        raise ValueError("no transcripts: neither A.json/B.json nor conversation.json")
    staged = (conversation or {}).get("staged_reveal")
    if staged is None and (folder / "prompt.json").is_file():
        staged = _read(folder / "prompt.json").get("staged_reveal")
    meta_path = RunDir(root).meta_path(split, task_id)
    synthetic = False
    if meta_path.is_file():
        meta = _read(meta_path)
        synthetic = bool(meta.get("synthetic"))
        staged = staged or (meta.get("sample") or {}).get("staged_reveal")
    if not isinstance(staged, Mapping):
        raise ValueError("no staged goals (T1-T4): no conversation.json, prompt.json or run record has them")
    return {
        "a_text": a_text,
        "b_text": b_text,
        "b_words": b_words,
        "staged": staged,
        "source": source,
        "synthetic": synthetic or bool((conversation or {}).get("synthetic")),
        "conversation": conversation,
    }


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(sum(present) / len(present), 3) if present else None


async def score_folder(
    root: Path,
    settings: JudgeSettings,
    prompts: Path | None,
    *,
    warn: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Judge and aggregate every task folder under `root` (module docstring); the scores' JSON."""
    folders = task_folders(root)
    if not folders:
        raise DatasetError(
            f"[no_samples] {root} holds no FDB v2 task folders (<split>/<task_id>/A.wav, B.wav)"
        )
    rubrics: Rubrics = load_rubrics(prompts)
    inputs: dict[tuple[str, str], dict[str, Any]] = {}
    errors: list[dict[str, str]] = []
    for split, task_id, folder in folders:
        try:
            inputs[(split, task_id)] = _inputs(root, split, task_id, folder)
        except (ValueError, KeyError, TypeError) as exc:
            errors.append({"split": split, "id": task_id, "error": "unreadable", "message": str(exc)})
            warn(f"{split}/{task_id}: {exc}")
    synthetic = bool(inputs) and all(i["synthetic"] for i in inputs.values())
    judge = make_judge(settings, synthetic)
    processed: list[aggregate.Processed] = []
    per_task: list[dict[str, Any]] = []
    try:

        async def one(key: tuple[str, str]) -> None:
            split, task_id = key
            got = inputs[key]
            prompt = build_prompt(rubrics, split, got["staged"], got["a_text"], got["b_text"], got["b_words"])
            if got["conversation"] is None and judge.kind == "builtin":
                raise ValueError("the builtin judge needs duplexkit's conversation.json")
            reply = await judge.reply(prompt, got["conversation"] or {})
            saved = parse.saved_text(reply)
            folder = root / EVAL_DIR / split
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{task_id}.json").write_text(saved, encoding="utf-8")
            result = parse.process(saved)
            write_json_atomic(folder / f"{task_id}_processed.json", result)
            processed.append((split, task_id, result))
            per_task.append({"split": split, "id": task_id, "transcripts": got["source"], **result})

        outcomes = await asyncio.gather(*(one(k) for k in sorted(inputs)), return_exceptions=True)
        for key, outcome in zip(sorted(inputs), outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception) or isinstance(outcome, JudgeUnreachable):
                    raise outcome
                errors.append({"split": key[0], "id": key[1], "error": "judge", "message": str(outcome)})
                warn(f"{key[0]}/{key[1]}: {outcome}")
    finally:
        await judge.aclose()
    processed.sort(key=lambda p: (p[0], p[1]))
    rows = aggregate.summarize(processed)
    time_rows, binned = aggregate.summarize_time(processed)
    eval_dir = root / EVAL_DIR
    eval_dir.mkdir(exist_ok=True)
    _write_csv(eval_dir / "judge_summary.csv", aggregate.HEADER, rows)
    _write_csv(eval_dir / "judge_summary_binned.csv", aggregate.binned_header(), binned)
    by_split = {
        split: {
            "tasks": len(group),
            "turn_taking": _mean([r[4] for r in group]),
            "instruction_following": _mean([r[5] for r in group]),
            "task_specific": _mean([r[6] for r in group]),
        }
        for split in sorted({r[0] for r in rows})
        for group in [[r for r in rows if r[0] == split]]
    }
    scores = {
        "benchmark": "fdb2",
        "judge": {
            "kind": judge.kind,
            "model": judge.model,
            "url": judge.url,
            "prompt_source": rubrics.source,
            "prompt_sha256": rubrics.sha256,
        },
        "comparable": rubrics.comparable and judge.kind == "llm" and not synthetic,
        "synthetic": synthetic,
        "score_py": {"header": list(aggregate.HEADER), "rows": rows},
        "score_time_py": {"header": list(aggregate.HEADER), "rows": time_rows},
        "binned": {"header": aggregate.binned_header(), "rows": binned},
        "by_split": by_split,
        "by_split_rule": "duplexkit's: the mean over a split's tasks of score.py's per-task averages "
        "(FDB v2 publishes per-split 0-75 s means that none of its scripts computes)",
        "tasks": sorted(per_task, key=lambda t: (t["split"], t["id"])),
        "errors": errors,
        "published": [p.to_json() for p in PUBLISHED],
    }
    write_json_atomic(root / SCORES_FILE, scores)
    if (root / "run.json").is_file():
        write_run_scores(root, scores)
    return scores


def write_run_scores(root: Path, scores: Mapping[str, Any]) -> None:
    """The shared report's `scores/`: `summary.json` (one `fdb2` section, a group per split) and
    `<split>/<id>.json` per task."""
    from duplexkit.bench.judge.run import rules_coverage

    run = RunDir(root)
    rows = {(r[0], r[1]): r for r in scores["score_py"]["rows"]}
    for (split, task_id), row in rows.items():
        values = {
            name: value
            for name, value in zip(MEANS, (row[4], row[5], row[6]), strict=True)
            if value is not None
        }
        write_json_atomic(
            run.score_path(split, task_id),
            {"status": "scored", "scores": values, "error": None, "details": {}},
        )
    for error in scores["errors"]:
        write_json_atomic(
            run.score_path(error["split"], error["id"]),
            {"status": "error", "scores": {}, "error": error["message"]},
        )
    by_task = {
        split: {"samples": v["tasks"], **{m: v[m] for m in MEANS}} for split, v in scores["by_split"].items()
    }
    all_rows = list(rows.values())
    judge = scores["judge"]
    summary = {
        "benchmark": "fdb2",
        "judge": {
            "kind": "llm" if judge["kind"] == "llm" else "rules",
            "model": judge["model"],
            "url": judge["url"],
            "prompt_version": judge["prompt_sha256"][:12],
            "prompt_source": judge["prompt_source"],
        },
        "note": None
        if scores["comparable"]
        else "not comparable to FDB v2's published numbers (see fdb2_scores.json)",
        "complete": not scores["errors"],
        "coverage": rules_coverage(scored=len(all_rows), errors=len(scores["errors"])),
        "fdb2": {
            "samples": len(all_rows),
            "errors": len(scores["errors"]),
            "by_task": by_task,
            "turn_taking": _mean([r[4] for r in all_rows]),
            "instruction_following": _mean([r[5] for r in all_rows]),
            "task_specific": _mean([r[6] for r in all_rows]),
        },
    }
    write_json_atomic(run.scores_summary, summary)


def format_summary(scores: Mapping[str, Any]) -> str:
    """The terminal table: score.py's rows, then the per-split means beside the published rows."""
    lines = ["FDB v2 (judge: {kind}, rubrics: {prompt_source})".format(**scores["judge"])]
    if not scores["comparable"]:
        lines.append("  not comparable to FDB v2's published numbers")
    lines.append("  " + " | ".join(aggregate.HEADER))
    for row in scores["score_py"]["rows"]:
        lines.append("  " + " | ".join("" if v is None else str(v) for v in row))
    lines.append(
        "  per split (TT/IF): "
        + ", ".join(
            f"{s} {v['turn_taking']}/{v['instruction_following']}" for s, v in scores["by_split"].items()
        )
    )
    for p in PUBLISHED:
        lines.append(
            f"  published {p.pacing} {p.system}: "
            + ", ".join(f"{s} {tt}/{if_}" for s, (tt, if_) in p.scores.items())
        )
    return "\n".join(lines)
