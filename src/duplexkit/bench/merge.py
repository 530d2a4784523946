"""Merge run folders (shards, pool runs, runs made on several machines) into one, by (split, sample id).

Contract:
- The inputs must be one run measured alike: the same benchmark, the same dataset selection (its content
  fingerprint: the dataset may live at another path on each machine), the same pace and the same protocol,
  fps and chunk size, the same model and the same kind of server (embedded or not; the URLs may differ: one
  model served on several machines). The model is what each run was told (`server.model`: the embedded
  model's name or `--served-model`), the embedded model's arguments (`server.model_args`: its checkpoint
  among them; `model_args_mismatch`), and what the servers said they serve: each sample's `server_model`
  (from `session.created`) and each server's `/healthz` `model` (`server.pool`), and what exactly they
  serve, the `id` of their `model_identity` (`server_model_identity`, `server.pool[].model_identity`: a
  checkpoint's content fingerprint, the cascade's LLM and voice), which tells apart two checkpoints one
  plugin serves; two inputs whose servers named different models or identities are refused
  (`reported_model_mismatch`), an input whose servers named none is compared by the rest. The merged
  `run.json` names the identities (`server.model_identities`). Anything else is refused with a
  `MergeError` whose `code` names what differed, and nothing is written.
- Every sample of every input lands in the merged folder exactly once. A sample that two inputs hold is
  taken from the one that published it (a failure elsewhere was redone); two failures keep the later one;
  two publications are refused (`duplicate_sample`): which copy counts is for the user to decide.
- The merged folder is a run folder like any other (`run.json`, `metrics.json`, per-sample metadata,
  sentences, extras and any score files, which `duplexkit score` reuses while the response is the same),
  so `score` and `report` work on it. Its `run.json` says where each part came from (`merged_from`), which
  shards it holds, and, for every merge, `completeness`: `selected` (the samples the inputs' selection
  holds: the whole runs' `dataset.samples`, or the sum over the shards present), `attempted` (published
  or failed in some input) and `complete` (every selected sample attempted, and for shards every part
  present); `dataset.samples` stays the selected count. It is built under a temporary name beside `out`
  and renamed into place; the benchmark's run-level files (OmniInteract's `manifest.jsonl` and
  `batch_summary.json`, whose paths are absolute) are written after the rename, so they name paths that
  exist: an interrupted merge leaves no half-merged folder.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from duplexkit.bench.aggregate import run_counts, run_metrics
from duplexkit.bench.artifacts import RunDir, write_json_atomic
from duplexkit.bench.benchmark import BENCHMARKS, DEFAULT_BENCHMARK, get_benchmark


class MergeCode(StrEnum):
    NOT_A_RUN = "not_a_run"
    BENCHMARK_MISMATCH = "benchmark_mismatch"
    DATASET_MISMATCH = "dataset_mismatch"
    PACE_MISMATCH = "pace_mismatch"
    PROTOCOL_MISMATCH = "protocol_mismatch"
    STREAMING_MISMATCH = "streaming_mismatch"
    PLACEMENT_MISMATCH = "placement_mismatch"
    MODEL_MISMATCH = "model_mismatch"
    MODEL_ARGS_MISMATCH = "model_args_mismatch"
    REPORTED_MODEL_MISMATCH = "reported_model_mismatch"
    SERVER_MISMATCH = "server_mismatch"
    DUPLICATE_SAMPLE = "duplicate_sample"
    OUT_EXISTS = "out_exists"


class MergeError(Exception):
    """The inputs cannot be merged as asked; `code` is stable, the message says what to do."""

    def __init__(self, code: MergeCode, message: str) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code


@dataclass(frozen=True, slots=True)
class MergeResult:
    out: Path
    samples: int
    counts: dict[str, int]
    shards: dict[str, Any] | None
    """`{"parts": ["1/4", ...], "complete": bool}` when every input is a shard; `None` when one is whole."""
    completeness: dict[str, Any]
    """`{"selected", "attempted", "complete"}` (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class _Input:
    root: Path
    run: dict[str, Any]
    metas: dict[tuple[str, str], dict[str, Any]]

    def setting(self, *path: str) -> Any:
        value: Any = self.run
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return value


_SAME: tuple[tuple[MergeCode, tuple[str, ...], str], ...] = (
    (MergeCode.BENCHMARK_MISMATCH, ("benchmark",), "benchmark"),
    (MergeCode.DATASET_MISMATCH, ("dataset", "fingerprint"), "dataset selection (fingerprint)"),
    (MergeCode.PACE_MISMATCH, ("config", "pace"), "pace"),
    (MergeCode.PROTOCOL_MISMATCH, ("config", "protocol"), "protocol"),
    (MergeCode.STREAMING_MISMATCH, ("config", "fps"), "fps"),
    (MergeCode.STREAMING_MISMATCH, ("config", "chunk_ms"), "chunk_ms"),
    (MergeCode.PLACEMENT_MISMATCH, ("config", "placement"), "audio placement"),
    (MergeCode.PLACEMENT_MISMATCH, ("config", "sentence_timing"), "sentence timing"),
    (MergeCode.MODEL_MISMATCH, ("server", "model"), "model"),
    (MergeCode.MODEL_ARGS_MISMATCH, ("server", "model_args"), "embedded model arguments"),
    (MergeCode.SERVER_MISMATCH, ("server", "embedded"), "embedded server"),
)
"""What must be equal across the inputs, and the code that names a difference."""


def merge_runs(run_dirs: Sequence[Path], out: Path) -> MergeResult:
    """Merge `run_dirs` into the new folder `out` (see the module docstring); raises `MergeError`."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise MergeError(MergeCode.OUT_EXISTS, f"{out} exists and is not empty; merge into a new folder")
    inputs = [_read(Path(d)) for d in run_dirs]
    if not inputs:
        raise MergeError(MergeCode.NOT_A_RUN, "give at least one run folder")
    _check_alike(inputs)
    _check_reported_models(inputs)
    chosen = _choose(inputs)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.merging-", dir=out.parent))
    name = inputs[0].run["benchmark"]
    layout = get_benchmark(name).sentences if name in BENCHMARKS else RunDir.open(inputs[0].root).sentences
    try:
        metas = []
        target = RunDir(staging, layout)
        for (split, sample_id), (source, meta) in sorted(chosen.items()):
            _copy_sample(RunDir.open(source.root), target, split, sample_id, meta)
            metas.append(meta)
        shards = _shards(inputs)
        run = {**_merged_run(inputs, chosen, metas, shards), "layout": target.layout_json()}
        write_json_atomic(staging / "metrics.json", run_metrics(metas))
        write_json_atomic(staging / "run.json", run)
        if out.exists():
            out.rmdir()  # empty, checked above
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if name in BENCHMARKS:  # the run-level files its official tools read, in place
        get_benchmark(name).write_run_files(out, metas)
    return MergeResult(
        out=out, samples=len(metas), counts=run["counts"], shards=shards, completeness=run["completeness"]
    )


def _read(root: Path) -> _Input:
    try:
        run = json.loads((root / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MergeError(MergeCode.NOT_A_RUN, f"{root}: no readable run.json ({exc})") from None
    if not isinstance(run, dict):
        raise MergeError(MergeCode.NOT_A_RUN, f"{root}/run.json is not a JSON object")
    run.setdefault("benchmark", DEFAULT_BENCHMARK)
    metas: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        run_dir = RunDir.open(root)
        for meta in run_dir.metas():
            split, sample_id = meta.get("split"), meta.get("id")
            if not isinstance(split, str) or not isinstance(sample_id, str):
                raise MergeError(MergeCode.NOT_A_RUN, f"{root}: a sample's meta.json names no split and id")
            if meta.get("status") == "published" and not run_dir.is_published(split, sample_id):
                meta = {**meta, "status": "failed", "error": "unpublished: its sentences file is missing"}
            metas[(split, sample_id)] = meta
    except (OSError, ValueError) as exc:
        raise MergeError(MergeCode.NOT_A_RUN, f"{root}: unreadable sample metadata ({exc})") from None
    return _Input(root, run, metas)


def _check_alike(inputs: Sequence[_Input]) -> None:
    first = inputs[0]
    for code, path, label in _SAME:
        for other in inputs[1:]:
            if other.setting(*path) != first.setting(*path):
                raise MergeError(
                    code,
                    f"{other.root} has {label} {other.setting(*path)!r} but {first.root} has "
                    f"{first.setting(*path)!r}: only runs measured alike merge",
                )


def _reported_models(source: _Input, *, identity: bool = False) -> set[str]:
    """The models the input's servers named: its samples' `server_model` and its servers' `/healthz`
    `model`; with `identity`, the `id`s of the `model_identity` they named instead (what exactly served)."""
    sample_key, health_key = (
        ("server_model_identity", "model_identity") if identity else ("server_model", "model")
    )
    named = {m.get(sample_key) for m in source.metas.values()}
    pool = source.setting("server", "pool")
    if isinstance(pool, list):
        named |= {server.get(health_key) for server in pool if isinstance(server, dict)}
    return {n for n in named if isinstance(n, str) and n}


def _check_reported_models(inputs: Sequence[_Input]) -> None:
    """Inputs whose servers named different models are refused: by the identity's `id` where two name
    one (a plugin name such as `moshi` or `cascade` is the same for any checkpoint or LLM), else by the
    plugin's name."""
    for identity in (False, True):
        reported = [(source, _reported_models(source, identity=identity)) for source in inputs]
        known = [(source, models) for source, models in reported if models]
        for source, models in known[1:]:
            first, theirs = known[0]
            if models != theirs:
                what = "model identities" if identity else "model(s)"
                raise MergeError(
                    MergeCode.REPORTED_MODEL_MISMATCH,
                    f"the servers of {source.root} named {what} {sorted(models)} but those of "
                    f"{first.root} named {sorted(theirs)}: runs of different models do not merge",
                )


def _choose(inputs: Sequence[_Input]) -> dict[tuple[str, str], tuple[_Input, dict[str, Any]]]:
    chosen: dict[tuple[str, str], tuple[_Input, dict[str, Any]]] = {}
    duplicates: list[str] = []
    for source in inputs:
        for key, meta in source.metas.items():
            held = chosen.get(key)
            if held is None:
                chosen[key] = (source, meta)
                continue
            mine, theirs = meta.get("status") == "published", held[1].get("status") == "published"
            if mine and theirs:
                duplicates.append(f"{key[0]}/{key[1]} ({held[0].root} and {source.root})")
            elif mine or (
                not theirs and str(meta.get("finished_at") or "") > str(held[1].get("finished_at") or "")
            ):
                chosen[key] = (source, meta)
    if duplicates:
        shown = "; ".join(duplicates[:5]) + (
            f"; and {len(duplicates) - 5} more" if len(duplicates) > 5 else ""
        )
        raise MergeError(
            MergeCode.DUPLICATE_SAMPLE,
            f"{len(duplicates)} sample(s) are published in more than one input: {shown}; "
            "leave out one of the runs (or delete that sample's files from it)",
        )
    return chosen


def _copy_sample(src: RunDir, dst: RunDir, split: str, sample_id: str, meta: Mapping[str, Any]) -> None:
    """Extras and score files first, then the metadata, then the sentences (the publication mark)."""
    extras = src.sample_dir(split, sample_id)
    if extras.is_dir():
        shutil.copytree(extras, dst.sample_dir(split, sample_id))
    for suffix in (".json", ".trace.jsonl"):
        score = src.score_path(split, sample_id, suffix)
        if score.is_file():
            target = dst.score_path(split, sample_id, suffix)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(score, target)
    write_json_atomic(dst.meta_path(split, sample_id), dict(meta))
    if meta.get("status") == "published":
        target = dst.sentences_path(split, sample_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src.sentences_path(split, sample_id), target)


def _shards(inputs: Sequence[_Input]) -> dict[str, Any] | None:
    """`{"parts": ["1/4", ...], "complete", "unattempted", "selected"}` when every input is a shard; `None`
    when one is whole. `unattempted` counts the samples a shard selected (its `dataset.samples`) that no
    input of that shard attempted; `selected` sums the parts present; `complete` needs every part and no
    unattempted sample."""
    shards = [i.setting("dataset", "shard") for i in inputs]
    if any(not isinstance(s, dict) for s in shards):
        return None
    counts = {s["count"] for s in shards}
    indices = {s["index"] for s in shards}
    held: dict[tuple[int, int], set[tuple[str, str]]] = {}
    selected: dict[tuple[int, int], int] = {}
    for source, shard in zip(inputs, shards, strict=True):
        part = (shard["count"], shard["index"])
        held.setdefault(part, set()).update(source.metas)
        samples = source.setting("dataset", "samples")
        selected[part] = max(selected.get(part, 0), samples if isinstance(samples, int) else 0)
    unattempted = sum(max(0, selected[part] - len(keys)) for part, keys in held.items())
    every_part = len(counts) == 1 and indices == set(range(1, next(iter(counts)) + 1))
    parts = sorted(held)
    return {
        "parts": [f"{index}/{count}" for count, index in parts],
        "complete": every_part and unattempted == 0,
        "unattempted": unattempted,
        "selected": sum(selected.values()),
    }


def _merged_run(
    inputs: Sequence[_Input],
    chosen: Mapping[tuple[str, str], tuple[_Input, dict[str, Any]]],
    metas: Sequence[Mapping[str, Any]],
    shards: dict[str, Any] | None,
) -> dict[str, Any]:
    first = inputs[0].run
    urls: list[str] = []
    for source in inputs:
        server = source.run.get("server") or {}
        for url in server.get("urls") or [server.get("url")]:
            if isinstance(url, str) and url not in urls:
                urls.append(url)
    taken = {source.root: 0 for source in inputs}
    for source, _ in chosen.values():
        taken[source.root] += 1
    if shards is not None:
        selected = int(shards["selected"])
        complete = bool(shards["complete"])
    else:  # whole runs of one selection: each recorded how many samples it selected
        counts = [i.setting("dataset", "samples") for i in inputs if i.setting("dataset", "shard") is None]
        selected = max((c for c in counts if isinstance(c, int)), default=len(metas))
        complete = len(metas) >= selected
    dataset = {**(first.get("dataset") or {}), "samples": selected}
    dataset.pop("shard", None)
    if shards is not None:
        dataset["shards"] = shards
    starts = [str(i.run["started_at"]) for i in inputs if i.run.get("started_at")]
    ends = [str(i.run["finished_at"]) for i in inputs if i.run.get("finished_at")]
    return {
        **first,
        "started_at": min(starts) if starts else None,
        "finished_at": max(ends) if len(ends) == len(inputs) else None,
        "merged_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "dataset": dataset,
        "server": {
            **(first.get("server") or {}),
            "url": urls[0] if urls else None,
            "urls": urls,
            "embedded": all((i.run.get("server") or {}).get("embedded") for i in inputs),
            "pool": None,
            "model_identities": sorted(set().union(*(_reported_models(i, identity=True) for i in inputs))),
        },
        "counts": run_counts(metas),
        "completeness": {"selected": selected, "attempted": len(metas), "complete": complete},
        "merged_from": [
            {
                "path": str(source.root),
                "shard": source.setting("dataset", "shard"),
                "server": source.run.get("server"),
                "command": source.run.get("command"),
                "counts": source.run.get("counts"),
                "samples_held": len(source.metas),
                "samples_taken": taken[source.root],
            }
            for source in inputs
        ],
    }
