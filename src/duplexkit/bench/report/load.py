"""Read a run folder (docs/run-format.md) into a `ReportData`, leniently: the files are untrusted input.

`load_run` only reads. A field of the wrong type or a non-finite number becomes `None` (or is left out of a
list); a file that exists but cannot be parsed becomes a line in `ReportData.problems` and the rest of the
report still renders. Sample identity (`split`, `id`) comes from the file layout, never from file contents,
so no path is built from what a file says.
"""

from __future__ import annotations

import json
import math
import wave
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from duplexkit.bench.aggregate import RESPONSE_METRICS, SESSION_METRICS, run_counts, summarize
from duplexkit.bench.artifacts import META_SUFFIX, RunDir
from duplexkit.bench.benchmark import benchmark_name_of_run, get_benchmark
from duplexkit.bench.report.data import (
    AttemptInfo,
    Coverage,
    DecisionMark,
    Distribution,
    FamilyScores,
    JudgeInfo,
    ReportData,
    ReportSpec,
    ResponseLatency,
    RunInfo,
    SampleReport,
    SampleScore,
    ScoreGroup,
    ScoreSummary,
    Sentence,
)

SHOWN_IDS = 8
"""How many of a selection's ids the run details list."""


class ReportError(ValueError):
    """The folder is not a run folder: not a directory, or neither `run.json` nor any sample metadata."""


def load_run(run_dir: Path) -> ReportData:
    """Read `run_dir` into a `ReportData`; raises `ReportError` when it is not a run folder.

    Samples are ordered by split, then id. Latency distributions cover published samples only and keep
    measurement sources apart, like `metrics.json`. Scores are read when `scores/summary.json` exists.
    """
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir} is not a directory")
    problems: list[str] = []
    run_path = run_dir / "run.json"
    raw_run = _read_json(run_path, run_dir, problems)
    if raw_run is not None and not isinstance(raw_run, dict):
        problems.append("run.json: not a JSON object; run details are unknown")
    run_json = _obj(raw_run)
    run = RunDir.open(run_dir)
    meta_paths = run.meta_paths()
    if not run_path.is_file() and not meta_paths:
        raise ReportError(
            f"{run_dir} is not a run folder (no run.json and no records/<split>/<id>.meta.json)"
        )
    if not run_path.is_file():
        problems.append("run.json is missing: run details are unknown")
    spec = get_benchmark(benchmark_name_of_run(run_dir)).report
    metas: list[Mapping[str, Any]] = []
    samples: list[SampleReport] = []
    for path in meta_paths:
        meta = _read_json(path, run_dir, problems)
        if not isinstance(meta, dict):
            if meta is not None:
                problems.append(f"{_rel(path, run_dir)}: not a JSON object; sample left out")
            continue
        metas.append(meta)
        samples.append(_sample(run, path, meta, problems, spec.audio_file))
    return ReportData(
        run_dir=run_dir,
        spec=spec,
        run=_run_info(run_json, samples),
        coverage=_coverage(metas, samples, run_json),
        latency=_latency(samples),
        scores=_score_summary(run_dir, problems, spec),
        samples=tuple(samples),
        problems=tuple(problems),
    )


# --- run.json -----------------------------------------------------------------------------------------------


def _run_info(run: Mapping[str, Any], samples: Iterable[SampleReport]) -> RunInfo:
    config, server, dataset = _obj(run.get("config")), _obj(run.get("server")), _obj(run.get("dataset"))
    command = run.get("command")
    return RunInfo(
        duplexkit_version=_str(run.get("duplexkit_version")),
        started_at=_str(run.get("started_at")),
        finished_at=_str(run.get("finished_at")),
        command=tuple(str(part) for part in command) if isinstance(command, list) else (),
        model=_str(server.get("model")),
        server_url=_str(server.get("url")),
        embedded_server=_bool(server.get("embedded")),
        dataset_source=_str(dataset.get("source")),
        dataset_fingerprint=_str(dataset.get("fingerprint")),
        dataset_samples=_int(dataset.get("samples")),
        selection=_selection(dataset.get("selection")),
        pace=_str(config.get("pace")),
        clocks=tuple(sorted({s.clock for s in samples if s.clock is not None})),
        placements=tuple(sorted({s.placement for s in samples if s.placement is not None})),
        fps=_num(config.get("fps")),
        chunk_ms=_num(config.get("chunk_ms")),
        concurrency=_int(config.get("concurrency")),
        keep_audio=_bool(config.get("keep_audio")),
        model_identities=_model_identities(server),
    )


def _model_identities(server: Mapping[str, Any]) -> tuple[str, ...]:
    """The identities the run's servers named: a merge's `model_identities`, the pool's `/healthz`."""
    named = server.get("model_identities")
    ids = set(named) if isinstance(named, list) else set()
    pool = server.get("pool")
    if isinstance(pool, list):
        ids |= {s.get("model_identity") for s in pool if isinstance(s, dict)}
    return tuple(sorted(i for i in ids if isinstance(i, str) and i))


def _selection(value: Any) -> str | None:
    """Each filter of the recorded selection in its order, e.g. `splits: all · family: all · limit: none`;
    ids and excluded ids only when any were given (the first `SHOWN_IDS` of them, and how many there are)."""
    if not isinstance(value, dict):
        return None
    parts = []
    for key, raw in value.items():
        if key in ("ids", "exclude_ids"):
            if ids := _strs(raw):
                more = f", ... ({len(ids)} in all)" if len(ids) > SHOWN_IDS else ""
                label = "ids" if key == "ids" else "excluded ids"
                parts.append(f"{label}: {', '.join(ids[:SHOWN_IDS])}{more}")
        elif key == "limit":
            limit = _int(raw)
            parts.append(f"limit: {'none' if limit is None else limit}")
        elif isinstance(raw, list):
            parts.append(f"{key}: {', '.join(_strs(raw)) or 'all'}")
        elif isinstance(raw, bool) or raw is None:  # a switch, or an option left unset
            parts.append(f"{key}: {'none' if raw is None else 'yes' if raw else 'no'}")
        else:
            parts.append(f"{key}: {_str(raw) or 'unknown'}")
    return " · ".join(parts)


def _shown(item: Any) -> str:
    """A recorded selection value in words: a list joined (the first `SHOWN_IDS`), none for empty."""
    if isinstance(item, list):
        if not item:
            return "all"
        more = f", ... ({len(item)} in all)" if len(item) > SHOWN_IDS else ""
        return ", ".join(str(x) for x in item[:SHOWN_IDS]) + more
    return "none" if item is None else str(item)


def _coverage(
    metas: list[Mapping[str, Any]], samples: Iterable[SampleReport], run: Mapping[str, Any]
) -> Coverage:
    counts = run_counts(metas)
    reasons = Counter(
        (s.error or "no error recorded").split(":", 1)[0].strip() for s in samples if not s.published
    )
    recorded = run.get("counts")
    return Coverage(
        attempted=counts["attempted"],
        published=counts["published"],
        failed=counts["failed"],
        retried=counts["retried"],
        failure_reasons=dict(sorted(reasons.items(), key=lambda item: (-item[1], item[0]))),
        recorded=_int_map(recorded) if isinstance(recorded, dict) else None,
    )


def _latency(samples: Iterable[SampleReport]) -> tuple[Distribution, ...]:
    collected: dict[tuple[str, str], list[float]] = {}
    for sample in samples:
        if not sample.published:
            continue
        for response in sample.responses:
            for name in RESPONSE_METRICS:
                value = getattr(response, name)
                if value is not None:
                    collected.setdefault((name, str(response.source)), []).append(value)
        session_source = str(sample.session_source)
        for name, value in (
            ("stream_ttft_ms", sample.stream_ttft_ms),
            ("stream_ttfp_ms", sample.stream_ttfp_ms),
        ):
            if value is not None:
                collected.setdefault((name, session_source), []).append(value)
    order = {name: index for index, name in enumerate((*RESPONSE_METRICS, *SESSION_METRICS))}
    out = []
    for (metric, source), values in sorted(
        collected.items(), key=lambda item: (order[item[0][0]], item[0][1])
    ):
        stats = summarize(values)
        out.append(
            Distribution(
                metric=metric,
                source=source,
                values=tuple(sorted(values)),
                count=len(values),
                mean=_num(stats["mean"]),
                p50=_num(stats["p50"]),
                p99=_num(stats["p99"]),
            )
        )
    return tuple(out)


# --- one sample ---------------------------------------------------------------------------------------------


def _sample(
    run: RunDir, meta_path: Path, meta: Mapping[str, Any], problems: list[str], audio_file: str = "output.wav"
) -> SampleReport:
    run_dir = run.root
    split, sample_id = meta_path.parent.name, meta_path.name[: -len(META_SUFFIX)]
    fields, timeline, session = (
        _obj(meta.get("sample")),
        _obj(meta.get("timeline")),
        _obj(meta.get("session")),
    )
    audio = run.sample_dir(split, sample_id) / audio_file
    return SampleReport(
        split=split,
        id=sample_id,
        task=_str(meta.get("task")),
        family=_str(meta.get("family")),
        status=_str(meta.get("status")),
        error=_str(meta.get("error")),
        question=_str(fields.get("question_text")),
        video_duration=_seconds(fields.get("video_duration")),
        reminders=tuple(
            (label, t)
            for label, t in (
                ("R1", _seconds(fields.get("reminder1"))),
                ("R2", _seconds(fields.get("reminder2"))),
            )
            if t is not None
        ),
        clock=_str(meta.get("clock")),
        placement=_str(meta.get("audio_placement")),
        input_speech=tuple(
            (a, b)
            for a, b in (_pair(item) for item in _list(timeline.get("input_speech")))
            if a is not None and b is not None and b >= a
        ),
        decisions=tuple(
            DecisionMark(t, "speak" if d.get("decision") == "speak" else "listen")
            for d in map(_obj, _list(timeline.get("decisions")))
            if (t := _num(d.get("t"))) is not None and d.get("decision") in ("listen", "speak")
        ),
        sentences=_sentences(run_dir, run.sentences_path(split, sample_id), problems),
        responses=tuple(_response(_obj(r)) for r in _list(meta.get("responses"))),
        stream_ttft_ms=_num(session.get("stream_ttft_ms")),
        stream_ttfp_ms=_num(session.get("stream_ttfp_ms")),
        session_source=_str(session.get("source")),
        turns=_int(session.get("turns")),
        retry_count=_int(meta.get("retry_count")) or 0,
        timeouts=_fired(meta.get("timeouts")),
        server_errors=_strs(meta.get("server_errors")),
        attempts=tuple(_attempt(_obj(a)) for a in _list(meta.get("attempts"))),
        audio=f"{split}/{sample_id}/{audio_file}" if audio.is_file() else None,
        score=_sample_score(run_dir, split, sample_id, problems),
        meta=meta,
        audio_s=_wav_seconds(audio) if audio.is_file() else None,
    )


def _wav_seconds(path: Path) -> float | None:
    """The duration a WAV file's header states; `None` when it cannot be read."""
    try:
        with wave.open(str(path), "rb") as wav:
            return wav.getnframes() / wav.getframerate()
    except (OSError, EOFError, wave.Error, ZeroDivisionError):
        return None


def _sentences(run_dir: Path, path: Path, problems: list[str]) -> tuple[Sentence, ...] | None:
    raw = _read_json(path, run_dir, problems)
    if raw is None:
        return None
    if not isinstance(raw, list):
        problems.append(f"{_rel(path, run_dir)}: not a JSON list of sentences")
        return None
    sentences = []
    for item in map(_obj, raw):
        text, start, end = _str(item.get("sentence")), _num(item.get("start")), _num(item.get("end"))
        if text is not None and start is not None and end is not None:
            sentences.append(Sentence(text, start, end))
    if len(sentences) < len(raw):
        problems.append(f"{_rel(path, run_dir)}: {len(raw) - len(sentences)} malformed sentence(s) left out")
    return tuple(sentences)


def _response(raw: Mapping[str, Any]) -> ResponseLatency:
    return ResponseLatency(
        response_id=_str(raw.get("response_id")),
        status=_str(raw.get("status")),
        source=_str(raw.get("source")),
        ttft_ms=_num(raw.get("ttft_ms")),
        ttfp_ms=_num(raw.get("ttfp_ms")),
        tpot_ms=_num(raw.get("tpot_ms")),
        rtf=_num(raw.get("rtf")),
    )


def _attempt(raw: Mapping[str, Any]) -> AttemptInfo:
    sentences = raw.get("sentences")
    return AttemptInfo(
        error=_str(raw.get("error")),
        transport_error=_str(raw.get("transport_error")),
        sentences=len(sentences) if isinstance(sentences, list) else None,
    )


def _fired(value: Any) -> dict[str, float]:
    """The timeouts that expired: name → the bound (s), leaving out the `null` ones."""
    return {str(k): v for k, bound in _obj(value).items() if (v := _num(bound)) is not None}


# --- scores/ ------------------------------------------------------------------------------------------------


def _sample_score(run_dir: Path, split: str, sample_id: str, problems: list[str]) -> SampleScore | None:
    raw = _read_json(RunDir(run_dir).score_path(split, sample_id), run_dir, problems)
    if not isinstance(raw, dict):
        return None
    scores = {str(k): v for k, value in _obj(raw.get("scores")).items() if (v := _num(value)) is not None}
    return SampleScore(
        status=_str(raw.get("status")),
        scores=scores,
        error=_str(raw.get("error")),
        details=_obj(raw.get("details")),
    )


def _score_summary(run_dir: Path, problems: list[str], spec: ReportSpec) -> ScoreSummary | None:
    raw = _read_json(RunDir(run_dir).scores_summary, run_dir, problems)
    if not isinstance(raw, dict):
        return None
    judge = _obj(raw.get("judge"))
    families = []
    for spec_section in spec.sections:
        family, means = spec_section.key, spec_section.means
        section = _obj(raw.get(family))
        tasks = _obj(section.get(spec_section.groups))
        families.append(
            FamilyScores(
                family=family,
                overall=_group(family.upper(), section, means),
                tasks=tuple(_group(str(name), _obj(group), means) for name, group in sorted(tasks.items())),
            )
        )
    return ScoreSummary(
        judge=JudgeInfo(
            kind=_str(judge.get("kind")),
            model=_str(judge.get("model")),
            url=_str(judge.get("url")),
            prompt_version=_str(judge.get("prompt_version")),
            prompt_source=_str(judge.get("prompt_source")),
            note=_str(raw.get("note")),
        ),
        complete=_bool(raw.get("complete")),
        coverage=_int_map(_obj(raw.get("coverage"))),
        families=tuple(families),
    )


def _group(name: str, raw: Mapping[str, Any], means: tuple[str, ...]) -> ScoreGroup:
    return ScoreGroup(
        name=name,
        means={mean: _num(raw.get(mean)) for mean in means},
        samples=_int(raw.get("samples")),
        skipped=_int(raw.get("skipped")),
        errors=_int(raw.get("errors")),
    )


# --- lenient field access -----------------------------------------------------------------------------------


def _read_json(path: Path, run_dir: Path, problems: list[str]) -> Any:
    """The parsed file, or None when it does not exist or cannot be parsed (the latter is a problem)."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        problems.append(f"{_rel(path, run_dir)}: unreadable ({type(exc).__name__})")
        return None


def _rel(path: Path, run_dir: Path) -> str:
    return path.relative_to(run_dir).as_posix()


def _obj(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _strs(value: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in _list(value) if isinstance(item, str | int | float))


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    """A finite number (not a bool) as float, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return number if math.isfinite(number) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _int_map(value: Mapping[str, Any]) -> dict[str, int]:
    return {str(k): v for k, raw in value.items() if (v := _int(raw)) is not None}


def _seconds(value: Any) -> float | None:
    """A time in seconds: finite and not negative (datasets use -1 or null for "none")."""
    number = _num(value)
    return number if number is not None and number >= 0 else None


def _pair(value: Any) -> tuple[float | None, float | None]:
    items = _list(value)
    return (_num(items[0]), _num(items[1])) if len(items) == 2 else (None, None)
