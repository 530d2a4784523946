"""Score FDB sample folders (`output.wav` + `output.json` beside the task files, written by any harness).

`score_samples` computes each sample's metrics by its task (see `metrics` and docs/fdb.md) and the per-split
summary written as `fdb_scores.json`: per split (a task folder) its task, `tor` (mean over scored samples),
`latency_s` (mean over samples with TOR = 1, or null), task extras (backchannel `frequency`, `jsd`;
interruption `relevance`; v1.5 `stop_latency_s`, `response_latency_s`) and every sample's values. A sample
that cannot be scored (no `output.json`, a malformed one, no `output.wav` where the task needs audio) is
listed with an error code and left out of the means.

`score_folder` is `duplexkit score --benchmark fdb`: it checks the scoring options, re-times the words when
asked, then scores with `score_dir` (which also writes `scores/` when the folder is a run).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from duplexkit.bench.errors import ConfigError
from duplexkit.bench.fdb import metrics as m
from duplexkit.bench.fdb.dataset import Sample, find_samples
from duplexkit.bench.fdb.judge import RELEVANCE_SEED, RelevanceJudge
from duplexkit.bench.fdb.references import closest_reference, direction
from duplexkit.bench.fdb.words import TranscriptionEndpoint, retime_samples
from duplexkit.bench.judge.base import ScoringError
from duplexkit.bench.judge.client import ChatClient
from duplexkit.client.wavfile import read_wav

if TYPE_CHECKING:
    from duplexkit.bench.judge.settings import JudgeSettings

SCORES_FILE = "fdb_scores.json"
Segmenter = Callable[[Path], tuple[list[m.Segment], float]]
"""A WAV path → its speech segments and its duration in seconds."""


def vad_segments(path: Path) -> tuple[list[m.Segment], float]:
    """Silero speech segments of a WAV and its length (the production `Segmenter`)."""
    from duplexkit.bench.fdb.segments import speech_segments

    samples, rate = read_wav(path)
    return speech_segments(samples, rate), len(samples) / rate


class SampleError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _words(folder: Path) -> list[m.Word]:
    path = folder / "output.json"
    if not path.is_file():
        raise SampleError("no_output_json", f"{path} is missing (time the words first: see docs/fdb.md)")
    try:
        return m.words_from_output_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise SampleError("bad_output_json", f"{path}: {exc}") from None


def _audio(folder: Path, name: str, segmenter: Segmenter) -> tuple[list[m.Segment], float]:
    path = folder / name
    if not path.is_file():
        raise SampleError("no_output_wav" if name == "output.wav" else "no_input_wav", f"{path} is missing")
    try:
        return segmenter(path)
    except ValueError as exc:
        raise SampleError("bad_wav", str(exc)) from None


def score_sample(
    sample: Sample,
    *,
    segmenter: Segmenter = vad_segments,
    human: Mapping[str, Sequence[float]] | None = None,
) -> dict[str, Any]:
    """One sample's metrics (its judge-free part); raises `SampleError` when it cannot be scored."""
    words = _words(sample.folder)
    out: dict[str, Any] = {
        "split": sample.split,
        "id": sample.id,
        "task": sample.task,
        "version": sample.version,
    }
    if sample.task == "backchannel":
        segments, output_s = _audio(sample.folder, "output.wav", segmenter)
        result = m.backchannel(words, segments, output_s)
        distribution = None if human is None else human.get(sample.id)
        out.update(
            tor=result.tor,
            latency_s=None,
            backchannels=[list(s) for s in result.backchannels],
            frequency=result.frequency,
            jsd=m.backchannel_jsd(result.backchannels, output_s, distribution),
            jsd_note=None
            if distribution is not None
            else (
                "no --icc-distribution given"
                if human is None
                else f"{sample.id} not in the distribution file"
            ),
        )
    else:
        if sample.task == "interruption":
            assert sample.span is not None
            words = m.cut_after(words, sample.span[1])
        tor = m.take_over(words)
        latency = None
        if tor == 1 and sample.task == "turn_taking":
            assert sample.span is not None
            latency = m.latency_after(words, sample.span[0])
        elif tor == 1 and sample.task == "interruption":
            assert sample.span is not None
            latency = m.latency_after(words, sample.span[1])
        out.update(tor=tor, latency_s=latency)
    out["words"] = len(words)
    out["reply"] = " ".join(w.text for w in words)
    if sample.version == "v1.5":
        user, _ = _audio(sample.folder, "input.wav", segmenter)
        model, _ = _audio(sample.folder, "output.wav", segmenter)
        user, model = m.merge_segments(user, m.USER_MERGE_GAP_S), m.merge_segments(model, m.MODEL_MERGE_GAP_S)
        out.update(
            stop_latencies_s=m.stop_latencies(user, model),
            response_latencies_s=m.response_latencies(user, model),
        )
    return out


async def score_samples(
    samples: Sequence[Sample],
    *,
    segmenter: Segmenter = vad_segments,
    human: Mapping[str, Sequence[float]] | None = None,
    judge: RelevanceJudge | None = None,
) -> dict[str, Any]:
    """Every sample's metrics and the per-split summary (the `fdb_scores.json` payload). The rules (VAD
    included) run in a worker thread; the relevance judge's requests run concurrently (the chat client
    bounds how many are in flight)."""

    def measure() -> list[dict[str, Any]]:
        rows = []
        for sample in samples:
            try:
                rows.append(score_sample(sample, segmenter=segmenter, human=human))
            except SampleError as exc:
                rows.append(
                    {
                        "split": sample.split,
                        "id": sample.id,
                        "task": sample.task,
                        "error": exc.code,
                        "message": str(exc),
                    }
                )
        return rows

    rows = await asyncio.to_thread(measure)

    async def rate(sample: Sample, row: dict[str, Any]) -> None:
        row["relevance"] = None
        if judge is None or row["tor"] != 1:
            return
        try:
            rated = await judge.rate(sample.context or "", sample.interrupt or "", row["reply"])
        except ScoringError as exc:
            row.update(relevance_error=str(exc), relevance_trace=exc.trace)
            return
        row.update(relevance=rated["relevance"], relevance_analysis=rated["analysis"])
        if rated["trace"]:
            row["relevance_trace"] = rated["trace"]

    await asyncio.gather(
        *(
            rate(s, r)
            for s, r in zip(samples, rows, strict=True)
            if s.task == "interruption" and "error" not in r
        )
    )
    return {
        "benchmark": "fdb",
        "synthetic": any(s.synthetic for s in samples),
        "judge": None if judge is None else judge.info.to_json(),
        "tasks": summarise(rows),
    }


def summarise(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per split: counts, means (only over what was observed) and the per-sample rows."""
    by_split: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_split.setdefault(str(row["split"]), []).append(row)
    out: dict[str, Any] = {}
    for split, group in by_split.items():
        scored = [r for r in group if "error" not in r]
        task = group[0]["task"]
        entry: dict[str, Any] = {
            "task": task,
            "samples": len(group),
            "scored": len(scored),
            "errors": len(group) - len(scored),
            "tor": m.mean([float(r["tor"]) for r in scored]),
            "latency_s": m.mean([r["latency_s"] for r in scored if r["tor"] == 1]),
        }
        if task == "backchannel":
            entry["frequency"] = m.mean([r["frequency"] for r in scored])
            entry["jsd"] = m.mean([r["jsd"] for r in scored])
        if task == "interruption":
            entry["relevance"] = m.mean([r.get("relevance") for r in scored])
        if any(r.get("version") == "v1.5" for r in scored):
            entry["stop_latency_s"] = m.mean([v for r in scored for v in r.get("stop_latencies_s", [])])
            entry["response_latency_s"] = m.mean(
                [v for r in scored for v in r.get("response_latencies_s", [])]
            )
        entry["per_sample"] = list(group)
        out[split] = entry
    return out


def read_distribution(path: Path) -> dict[str, list[float]]:
    """The human backchannel timing distributions: `{sample_id: [p, ...]}` (upstream's
    `icc_gt_distribution.json`); `ValueError` for anything else."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(raw, dict) or not all(
        isinstance(v, list) and v and all(isinstance(x, int | float) and x >= 0 for x in v)
        for v in raw.values()
    ):
        raise ValueError(f"{path}: expected {{sample_id: [non-negative numbers, ...]}}")
    return {str(k): [float(x) for x in v] for k, v in raw.items()}


def format_table(scores: Mapping[str, Any]) -> str:
    """The terminal table: one row per split, each number with the direction that is better (↑/↓), and
    under it the closest published number on the same task and metric (`references`). Columns keep whole
    names, so the table reads the same in a terminal, a pipe or a CI log."""
    head = f"{'split':<28} {'task':<13} {'n':>4} {'TOR':>8} {'latency s':>10}  extras"
    lines = ["↑ higher is better · ↓ lower is better", head, "-" * len(head)]
    for split, e in scores["tasks"].items():
        task = e["task"]
        extras = []
        for key in ("frequency", "jsd", "relevance", "stop_latency_s", "response_latency_s"):
            if key in e:
                extras.append(f"{key}={_fmt(e[key])} {direction(task, key)}")
        if e["errors"]:
            extras.append(f"errors={e['errors']}")
        tor = f"{_fmt(e['tor'])} {direction(task, 'tor')}"
        latency = f"{_fmt(e['latency_s'])} {direction(task, 'latency_s')}"
        lines.append(f"{split:<28} {task:<13} {e['scored']:>4} {tor:>8} {latency:>10}  " + " ".join(extras))
        for metric, label in (("tor", "TOR"), ("latency_s", "latency")):
            ref = closest_reference(task, metric, e.get(metric))
            if ref is not None:
                lines.append(f"    closest published {label}: {ref.system} {ref.value:.3f} ({ref.source})")
    if scores.get("synthetic"):
        lines.append("note: synthetic built-in data; not comparable to published Full-Duplex-Bench numbers")
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


async def score_dir(
    root: Path,
    *,
    human: Mapping[str, Sequence[float]] | None = None,
    judge: RelevanceJudge | None = None,
    segmenter: Segmenter = vad_segments,
) -> dict[str, Any]:
    """Score every FDB sample folder under `root` and write `root/fdb_scores.json` (atomically)."""
    from duplexkit.bench.artifacts import write_json_atomic

    scores = await score_samples(find_samples(root), segmenter=segmenter, human=human, judge=judge)
    write_json_atomic(root / SCORES_FILE, scores)
    if (root / "run.json").is_file():
        write_run_scores(root, scores)
    return scores


def write_run_scores(root: Path, scores: Mapping[str, Any]) -> None:
    """A run folder's scores in the shared report's shape: `scores/summary.json` (one `fdb` section, a group
    per task folder) and `scores/<split>/<id>.json` per sample."""
    from duplexkit.bench.artifacts import RunDir, write_json_atomic
    from duplexkit.bench.fdb.report import MEANS
    from duplexkit.bench.judge.run import rules_coverage

    run = RunDir(root)

    by_task: dict[str, Any] = {}
    total = errors = 0
    for split, entry in scores["tasks"].items():
        by_task[split] = {m: entry.get(m) for m in MEANS} | {
            "samples": entry["scored"],
            "errors": entry["errors"],
        }
        total += entry["samples"]
        errors += entry["errors"]
        for row in entry["per_sample"]:
            values = {m: row[m] for m in MEANS if isinstance(row.get(m), int | float)}
            status = "error" if "error" in row else "scored"
            write_json_atomic(
                run.score_path(split, row["id"]),
                {"status": status, "scores": values, "error": row.get("message")},
            )
    judge = scores.get("judge") or {}
    summary = {
        "benchmark": "fdb",
        "judge": {
            "kind": "rules",
            "model": f"Full-Duplex-Bench rules; relevance: {judge.get('model') or 'not judged'}",
            "url": judge.get("url"),
            "prompt_version": judge.get("prompt_version") or "none",
            "prompt_source": judge.get("prompt_source"),
        },
        "note": "synthetic built-in data: not comparable to published numbers"
        if scores.get("synthetic")
        else None,
        "complete": errors == 0,
        "coverage": rules_coverage(scored=total - errors, errors=errors),
        "fdb": {"samples": total - errors, "errors": errors, "by_task": by_task},
    }
    write_json_atomic(run.scores_summary, summary)


@dataclass(frozen=True)
class ScoreOptions:
    """FDB's scoring options: where `output.json`'s word times come from (`keep` the folders' own; `asr`
    re-times every `output.wav` offline; `transcription` through an OpenAI-compatible endpoint) and the
    human backchannel distributions JSD is measured against (none: JSD unavailable)."""

    words: Literal["keep", "asr", "transcription"] = "keep"
    icc_distribution: Path | None = None
    transcription_url: str | None = None
    transcription_model: str | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ScoreOptions:
        """The options of a raw mapping of them (the CLI's values by option name; absent: the default)."""
        return cls(
            words=raw.get("words") or "keep",
            icc_distribution=raw.get("icc_distribution"),
            transcription_url=raw.get("transcription_url"),
            transcription_model=raw.get("transcription_model"),
        )


async def score_folder(
    root: Path,
    judge: JudgeSettings,
    options: ScoreOptions,
    *,
    allow_invalid_clock: bool,
    warn: Callable[[str], None],
) -> dict[str, Any]:
    """Full-Duplex-Bench scores of the sample folders under `root` → `root/fdb_scores.json` (returned),
    after re-timing the words when `options.words` asks for another source (`warn` hears of each sample
    that could not be re-timed; its `output.json` stays as it was).

    The relevance judge runs when `judge` names a URL and a model; otherwise relevance is null. Raises
    `ConfigError` for refused settings or a run made as fast as possible (unless `allow_invalid_clock`),
    `FdbDatasetError` for a folder with no samples and `JudgeUnreachable` when the judge cannot be reached.
    """
    if judge.kind == "builtin" or judge.protocol_dir is not None:
        raise ConfigError(
            "fdb's only judge is the relevance LLM (--judge-url, --judge-model); no --judge builtin "
            "or --protocol-dir"
        )
    if _recorded_pace(root) not in (None, "realtime") and not allow_invalid_clock:
        raise ConfigError(f"{root} was run as fast as possible (clock=invalid); add --allow-invalid-clock")
    human = None
    if options.icc_distribution is not None:
        try:
            human = read_distribution(options.icc_distribution)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
    endpoint = None
    if options.words == "transcription":
        if not (options.transcription_url and options.transcription_model):
            raise ConfigError("--words transcription needs --transcription-url and --transcription-model")
        endpoint = TranscriptionEndpoint(
            options.transcription_url, options.transcription_model, api_key=judge.api_key
        )
    relevance = None
    if judge.url or judge.model:
        if not (judge.url and judge.model) or judge.timeout_s <= 0:
            raise ConfigError(
                "the relevance judge needs --judge-url, --judge-model and a positive --judge-timeout"
            )
        relevance = RelevanceJudge(
            ChatClient(
                base_url=judge.url,
                model=judge.model,
                api_key=judge.api_key,
                concurrency=judge.concurrency,
                timeout_s=judge.timeout_s,
                seed=RELEVANCE_SEED,
            )
        )
    try:
        if options.words != "keep":
            for where, error in await retime_samples(find_samples(root), options.words, endpoint):
                warn(f"{where}: {error}")
        return await score_dir(root, human=human, judge=relevance)
    finally:
        if relevance is not None:
            await relevance.aclose()


def _recorded_pace(root: Path) -> str | None:
    """The pace `root/run.json` records; `None` for a folder that is not a run (anyone's FDB outputs)."""
    try:
        pace = json.loads((root / "run.json").read_text(encoding="utf-8"))["config"]["pace"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pace if isinstance(pace, str) else None
