"""The run folder: atomic, resumable artifacts.

Layout under RUN_DIR: `run.json` (config, dataset, versions, times, `layout`), `metrics.json` (aggregates),
per sample `records/<split>/<id>.meta.json`, then the timed sentences, and the sample's own folder
`<split>/<id>/` (its benchmark's files: audio, events, FDB's sample folder). Where the sentences go is the
benchmark's (`Benchmark.sentences`), so that each official scorer finds them where it looks by default:
`<split>/<id>.json` for Omni-DuplexEval (its batch scorers read `{response_root}/{split}/{id}.json`),
`records/<split>/<id>.json` for the others, whose `<split>/` folders must hold nothing but sample folders
(FDB's scripts treat every entry of a task folder as a sample folder). `run.json` records the template
(`layout.sentences`); a folder written before it had one keeps `records/`. Every file is written to a
temporary name in the same directory and renamed into place, so a reader (a judge, a resumed run) sees a
whole file or none. The sentences file is written last and is the mark of publication: a sample is
published iff its sentences file exists. A run killed at any moment therefore leaves each sample either
published (whole) or not (redone on resume), never half of one and never two copies.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from duplexkit.bench.benchmark import DEFAULT_BENCHMARK
from duplexkit.bench.errors import ConfigError


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a temp file + fsync + rename in the same directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, payload: Any) -> None:
    """`write_bytes_atomic` of `payload` as indented UTF-8 JSON (NaN/inf refused: they are not JSON)."""
    text = json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    write_bytes_atomic(path, text.encode("utf-8"))


RECORDS_DIR = "records"
"""Where the harness's per-sample records live, apart from the sample folders."""
RECORDS_SENTENCES = "records/{split}/{id}.json"
"""Sentences among the records (where no official scorer looks: FDB, OmniInteract; every older run)."""
SPLIT_SENTENCES = "{split}/{id}.json"
"""Sentences at the top of the run folder (where Omni-DuplexEval's official batch scorers look)."""
SENTENCE_LAYOUTS = (RECORDS_SENTENCES, SPLIT_SENTENCES)
RESERVED_SPLITS = frozenset({RECORDS_DIR, "scores"})
"""Names a split may not have: they are the run folder's own."""
META_SUFFIX = ".meta.json"


class ReservedSplit(ConfigError):
    """A split named like one of the run folder's own folders."""


class RunDir:
    """Paths and publication state of one run folder; `sentences` one of `SENTENCE_LAYOUTS`."""

    def __init__(self, root: Path, sentences: str = RECORDS_SENTENCES) -> None:
        if sentences not in SENTENCE_LAYOUTS:
            raise ValueError(f"unknown sentences layout {sentences!r}")
        self.root = root
        self.sentences = sentences

    @classmethod
    def open(cls, root: Path, default: str = RECORDS_SENTENCES) -> RunDir:
        """The run folder with the layout its `run.json` records; `default` when it has no `run.json` yet
        (a new run), `records/` when its `run.json` predates the field."""
        run = _recorded_run(root)
        if run is None:
            return cls(root, default)
        recorded = (run.get("layout") or {}).get("sentences", RECORDS_SENTENCES)
        return cls(root, recorded if recorded in SENTENCE_LAYOUTS else RECORDS_SENTENCES)

    def layout_json(self) -> dict[str, str]:
        """What `run.json` records as `layout`."""
        return {"sentences": self.sentences, "meta": f"{RECORDS_DIR}/{{split}}/{{id}}{META_SUFFIX}"}

    @property
    def records(self) -> Path:
        return self.root / RECORDS_DIR

    def sentences_path(self, split: str, sample_id: str) -> Path:
        return self.root / self.sentences.format(split=split, id=sample_id)

    def meta_path(self, split: str, sample_id: str) -> Path:
        return self.records / split / f"{sample_id}{META_SUFFIX}"

    def sample_dir(self, split: str, sample_id: str) -> Path:
        """Where optional per-sample extras (output.wav, events.json) live."""
        return self.root / split / sample_id

    def is_published(self, split: str, sample_id: str) -> bool:
        return self.sentences_path(split, sample_id).is_file()

    def publish(
        self, split: str, sample_id: str, meta: Mapping[str, Any], sentences: list[dict[str, Any]]
    ) -> None:
        """Metadata first, then the sentences (the publication mark)."""
        write_json_atomic(self.meta_path(split, sample_id), dict(meta))
        write_json_atomic(self.sentences_path(split, sample_id), sentences)

    def record_failure(
        self,
        split: str,
        sample_id: str,
        meta: Mapping[str, Any],
        extras: Iterable[str] = ("output.wav", "events.json"),
    ) -> None:
        """A failed sample: metadata only; any earlier publication and its `extras` (file names in the
        sample's folder) are withdrawn."""
        write_json_atomic(self.meta_path(split, sample_id), dict(meta))
        self.sentences_path(split, sample_id).unlink(missing_ok=True)
        for extra in extras:
            (self.sample_dir(split, sample_id) / extra).unlink(missing_ok=True)

    def meta_paths(self) -> list[Path]:
        """Every sample's metadata file, in a stable order (split, then id)."""
        return sorted(self.records.glob(f"*/*{META_SUFFIX}"))

    def metas(self) -> Iterator[dict[str, Any]]:
        """Every sample's metadata in the run, in a stable order."""
        for path in self.meta_paths():
            with path.open(encoding="utf-8") as f:
                yield json.load(f)

    def clean_temporaries(self) -> int:
        """Remove temp files a killed run left behind; returns how many."""
        stale = list(self.root.glob("**/.*.tmp"))
        for path in stale:
            path.unlink(missing_ok=True)
        return len(stale)


def check_splits(splits: Iterable[str]) -> None:
    """`ReservedSplit` for a split that would land on the run folder's own folders."""
    clash = sorted(set(splits) & RESERVED_SPLITS)
    if clash:
        raise ReservedSplit(
            f"[reserved_split] split {clash[0]!r} is a name the run folder uses itself "
            f"({', '.join(sorted(RESERVED_SPLITS))}); rename that task folder"
        )


def resume_mismatch(
    root: Path,
    *,
    benchmark: str,
    fingerprint: str,
    pace: str,
    urls: Sequence[str],
    shard: Mapping[str, Any] | None,
) -> str | None:
    """What differs between the run `root/run.json` records and this one (`None`: same run, or none yet):
    `urls` empty means the embedded server, `shard` is the shard's JSON (`None`: no shard).

    A run folder holds one run: resuming it with another selection, pace or server (pool) would mix
    samples that were not measured alike; `duplexkit merge` joins runs made apart.
    """
    run = _recorded_run(root)
    if run is None:
        return None
    if (run.get("benchmark") or DEFAULT_BENCHMARK) != benchmark:
        return "another benchmark"
    dataset = run.get("dataset") or {}
    if dataset.get("fingerprint") != fingerprint:
        return "another dataset selection"
    if (run.get("config") or {}).get("pace") != pace:
        return "another pace"
    if dataset.get("shard") != shard:
        return "another shard"
    server = run.get("server") or {}
    recorded = server.get("urls") or [server.get("url")]
    if (urls and set(recorded) != set(urls)) or (not urls and not server.get("embedded")):
        return "another server"
    return None


def previous_start(root: Path) -> str | None:
    """When the run `root/run.json` records started (a resumed run keeps its start)."""
    run = _recorded_run(root)
    started = run.get("started_at") if run else None
    return started if isinstance(started, str) else None


def _recorded_run(root: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((root / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
