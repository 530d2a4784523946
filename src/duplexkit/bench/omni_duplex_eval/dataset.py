"""Omni-DuplexEval datasets: a selection from the built-in set, parquet, a JSONL manifest or the HF cache.

Loading never downloads and never decodes media: a sample keeps a handle to its raw container bytes and reads
them only when asked (``Sample.video_bytes`` / ``Sample.question_audio_bytes``). Parquet media in the Hugging
Face ``{bytes, path}`` layout are read a row group at a time on demand: a large dataset never sits in memory.

Spec forms accepted by ``load_dataset``:

- ``"builtin"``: the synthetic dataset of ``duplexkit.bench.omni_duplex_eval.builtin``, generated into the
  cache on first use (a local HF-layout folder, read as one);
- a ``.jsonl`` manifest (or a ``.json`` list of rows): dataset fields plus ``split``, with ``video`` and
  ``question_audio`` as file paths relative to the manifest;
- a ``.parquet`` file, a glob of them, or a directory searched recursively for ``*.parquet``;
- a Hugging Face dataset id (``Owner/Name``, optionally ``@revision``) already present in the local hub cache.

Each row keeps its own split: a ``split`` column wins, else the split is read from the file name
(``RTD_counting-00000-of-00001.parquet``) or a parent directory name, so mirrors that collapse everything into
one ``train`` split still load correctly when their rows say where they came from.
"""

from __future__ import annotations

import difflib
import glob
import hashlib
import json
import math
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from duplexkit.bench.omni_duplex_eval import builtin
from duplexkit.bench.sources import (
    HF_REPO_ID,
    DatasetError,
    Media,
    check_component,
    hf_snapshot,
)

__all__ = [
    "PR_SPLITS",
    "RTD_SPLITS",
    "Dataset",
    "DatasetError",
    "Family",
    "Media",
    "Sample",
    "Selection",
    "load_dataset",
]

Family = Literal["rtd", "pr"]

RTD_SPLITS: tuple[str, ...] = (
    "RTD_world_knowledge",
    "RTD_counting",
    "RTD_fine_grained_movement",
    "RTD_interaction_relation",
    "RTD_OCR",
    "RTD_Omni",
)
PR_SPLITS: tuple[str, ...] = ("PR_correction", "PR_event_reminder", "PR_post_event_reminder")
_KNOWN_SPLITS: tuple[str, ...] = RTD_SPLITS + PR_SPLITS

_MEDIA_FIELDS = ("video", "question_audio")
_TEXT_FIELDS = ("question_text", "answer1", "answer2", "video_type")
_FLOAT_FIELDS = ("reminder1", "reminder2", "video_duration")

_FINGERPRINT_VERSION = b"duplexkit-dataset-fingerprint-v1\n"
_SHARD_SUFFIX = re.compile(r"-\d{5}-of-\d{5}$")


# --------------------------------------------------------------------------------------------------
# Parquet media cells
# --------------------------------------------------------------------------------------------------


def _arrow() -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``, imported on first use: only parquet and HF-cache sources need them."""
    try:
        import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
        import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        raise DatasetError(
            "parquet and Hugging Face datasets need pyarrow: pip install 'pyarrow>=15'"
        ) from None
    return pa, pq


class _RowGroupCache:
    """Media columns of parquet row groups, read on demand; keeps the few most recent ones (thread-safe).

    Memory is bounded by ``slots`` row-group columns, which is what one media cell costs to read: parquet
    has no cheaper random access to a single value.
    """

    def __init__(self, slots: int = 4) -> None:
        self._slots = slots
        self._lock = threading.Lock()
        self._columns: OrderedDict[tuple[Path, int, str], Any] = OrderedDict()

    def cell(self, path: Path, row_group: int, row: int, column: str) -> Any:
        key = (path, row_group, column)
        with self._lock:
            values = self._columns.get(key)
            if values is None:
                pa, pq = _arrow()
                try:
                    values = pq.ParquetFile(path).read_row_group(row_group, columns=[column]).column(column)
                except (OSError, pa.ArrowException) as exc:
                    raise DatasetError(
                        f"cannot read {column} of row group {row_group} of {path}: {exc}"
                    ) from exc
                self._columns[key] = values
                while len(self._columns) > self._slots:
                    self._columns.popitem(last=False)
            else:
                self._columns.move_to_end(key)
        return values[row].as_py()


def _struct_cell_reader(
    cache: _RowGroupCache, path: Path, row_group: int, row: int, column: str, label: str
) -> Callable[[], bytes]:
    """A reader for one HF ``{bytes, path}`` cell: its bytes, else the file its ``path`` names."""

    def read() -> bytes:
        value = cache.cell(path, row_group, row, column)
        data: bytes | None = value.get("bytes") if isinstance(value, dict) else None
        if data is not None:
            return data
        ref: str | None = value.get("path") if isinstance(value, dict) else None
        if ref:
            candidate = path.parent / ref
            if candidate.is_file():
                return candidate.read_bytes()
        raise DatasetError(
            f"media {label} has no bytes and its path {ref!r} is not a file next to {path.name}"
        )

    return read


# --------------------------------------------------------------------------------------------------
# Samples, selections, datasets
# --------------------------------------------------------------------------------------------------


def _family_of(split: str) -> Family | None:
    if split.startswith("RTD_"):
        return "rtd"
    if split.startswith("PR_"):
        return "pr"
    return None


@dataclass(frozen=True)
class Sample:
    """One Omni-DuplexEval row with its split identity; media stay raw and are read at use time.

    ``ground_truth`` (event times, counts, colours, the voice used) exists for the built-in dataset only and
    feeds the offline judge.
    """

    split: str
    id: str
    question_text: str
    answer1: str | None = None
    answer2: str | None = None
    reminder1: float | None = None
    reminder2: float | None = None
    video_type: str | None = None
    video_duration: float | None = None
    ground_truth: Mapping[str, Any] | None = field(default=None, hash=False)
    video: Media | None = None
    question_audio: Media | None = None

    @property
    def family(self) -> Family:
        """``rtd`` for ``RTD_*`` splits, ``pr`` for ``PR_*`` splits."""
        family = _family_of(self.split)
        if family is None:
            raise DatasetError(f"split {self.split!r} belongs to no family (expected RTD_* or PR_*)")
        return family

    @property
    def task(self) -> str:
        """PR: ``correction``, ``post_event_reminder`` or ``event_reminder`` (split name); RTD: the split."""
        if self.family == "rtd":
            return self.split
        name = self.split.lower()
        if "correction" in name:
            return "correction"
        if "post_event" in name:
            return "post_event_reminder"
        return "event_reminder"

    @property
    def key(self) -> str:
        """``<split>/<id>``, unique within a dataset."""
        return f"{self.split}/{self.id}"

    def video_bytes(self) -> bytes | None:
        """The raw video container bytes, or None for a sample without video."""
        return None if self.video is None else self.video.read()

    def question_audio_bytes(self) -> bytes:
        """The raw spoken-question container bytes (wav, mp3, ...); DatasetError if the sample has none."""
        if self.question_audio is None:
            raise DatasetError(f"sample {self.key} has no question audio")
        return self.question_audio.read()


@dataclass(frozen=True)
class Selection:
    """Which samples to run: split and family filters, explicit ids or exclusions (not both), then a limit.

    ``ids``/``exclude_ids`` take a bare id (every split holding it) or ``split/id``; exclusion applies before
    ``limit``. Every named split and id must exist in the dataset.
    """

    splits: tuple[str, ...] = ()
    family: Literal["rtd", "pr", "all"] = "all"
    ids: tuple[str, ...] = ()
    exclude_ids: tuple[str, ...] = ()
    limit: int | None = None


@dataclass(frozen=True)
class Dataset:
    """The selected samples in a deterministic order, their source and a stable content fingerprint.

    ``source`` is a spec ``load_dataset`` accepts to load the same data again: ``builtin``, an absolute path
    or glob, or a hub id pinned to the cached revision (``Owner/Name@<commit>``).

    Order: the nine Omni-DuplexEval splits in their canonical order (other ``RTD_*``/``PR_*`` splits after
    them, by name), rows in source order within a split. The fingerprint covers the selected rows' splits,
    ids, fields and media tokens, not where the files live.
    """

    source: str
    fingerprint: str
    samples: tuple[Sample, ...]


def load_dataset(spec: str, selection: Selection, *, cache_dir: Path | None = None) -> Dataset:
    """Load ``spec`` and apply ``selection``; raise DatasetError on any problem, never download.

    ``cache_dir`` is where the built-in dataset is generated (default ``~/.cache/duplexkit``).
    """
    _validate_selection_shape(selection)
    source, samples = _load_all(spec, cache_dir)
    selected = _select(_ordered(samples), selection, source)
    return Dataset(source=source, fingerprint=_fingerprint(selected), samples=tuple(selected))


# --------------------------------------------------------------------------------------------------
# Spec dispatch
# --------------------------------------------------------------------------------------------------


def _load_all(spec: str, cache_dir: Path | None) -> tuple[str, list[Sample]]:
    """The samples ``spec`` names and the canonical spec to load them again (see ``Dataset.source``)."""
    if spec == "builtin":
        folder = builtin.ensure_builtin(cache_dir)
        return "builtin", _load_parquet_files(_parquet_files_in(folder), folder)
    path = Path(spec).expanduser()
    if path.is_dir():
        if (path / "manifest.jsonl").is_file():
            return str(path.resolve()), _load_manifest(path / "manifest.jsonl")
        return str(path.resolve()), _load_parquet_files(_parquet_files_in(path), path)
    if path.is_file():
        if path.suffix == ".parquet":
            return str(path.resolve()), _load_parquet_files([path], path.parent)
        if path.suffix in (".jsonl", ".json"):
            return str(path.resolve()), _load_manifest(path)
        raise DatasetError(f"{path}: unsupported dataset file (expected .parquet, .jsonl or .json)")
    if any(ch in spec for ch in "*?["):
        pattern = os.path.abspath(os.path.expanduser(spec))
        matches = sorted(Path(p) for p in glob.glob(pattern, recursive=True) if p.endswith(".parquet"))
        if not matches:
            raise DatasetError(f"no .parquet files match {spec!r}")
        return pattern, _load_parquet_files(matches, _common_parent(matches))
    match = HF_REPO_ID.match(spec)
    if match and path.suffix not in (".parquet", ".jsonl", ".json"):
        repo_id, revision = match["repo"], match["revision"]
        snapshot = hf_snapshot(repo_id, revision)
        return f"{repo_id}@{snapshot.name}", _load_parquet_files(_parquet_files_in(snapshot), snapshot)
    raise DatasetError(
        f"dataset {spec!r} not found: expected 'builtin', a .parquet file, glob or directory, a .jsonl/.json "
        "manifest, or a Hugging Face dataset id (Owner/Name[@revision]) present in the local cache"
    )


def _common_parent(paths: Sequence[Path]) -> Path:
    return Path(os.path.commonpath([p.parent for p in paths]))


def _parquet_files_in(root: Path) -> list[Path]:
    """Every ``*.parquet`` under ``root`` (hidden directories skipped), sorted by relative path."""
    files = sorted(
        p
        for p in root.rglob("*.parquet")
        if not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    if not files:
        raise DatasetError(f"no .parquet files under {root}")
    return files


# --------------------------------------------------------------------------------------------------
# Row parsing
# --------------------------------------------------------------------------------------------------


def _canonical_split(name: str) -> str:
    """Known split names match case-insensitively; others are returned unchanged."""
    for known in _KNOWN_SPLITS:
        if known.lower() == name.lower():
            return known
    return name


def _split_from_path(path: Path, root: Path) -> str | None:
    """A split named by the file (``RTD_counting-00000-of-00001.parquet``) or a directory below root."""
    names = [_SHARD_SUFFIX.sub("", path.stem)]
    if path.is_relative_to(root):
        names += [parent.name for parent in path.relative_to(root).parents if parent.name]
    for name in names:
        split = _canonical_split(name)
        if _family_of(split) is not None:
            return split
    return None


def _text(value: Any, name: str, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise DatasetError(f"{where}: field {name!r} must be a string, got {type(value).__name__}")


def _number(value: Any, name: str, where: str) -> float | None:
    """Seconds as a float; None, empty strings and NaN mean absent."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise DatasetError(f"{where}: field {name!r} must be a number, got a boolean")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DatasetError(f"{where}: field {name!r} must be a number, got {value!r}") from None
    if math.isnan(number):
        return None
    if math.isinf(number) or number < 0:
        raise DatasetError(f"{where}: field {name!r} must be a finite non-negative number, got {value!r}")
    return number


def _row_id(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise DatasetError(f"{where}: field 'id' must be a string or an integer, got {value!r}")


def _make_sample(
    row: Mapping[str, Any],
    default_split: str | None,
    video: Media | None,
    question_audio: Media | None,
    where: str,
) -> Sample:
    """Validate one row's fields and split identity and build its Sample."""
    if "id" not in row:
        raise DatasetError(f"{where}: row has no 'id'")
    sample_id = _row_id(row["id"], where)
    raw_split = row.get("split")
    if raw_split is not None and not isinstance(raw_split, str):
        raise DatasetError(f"{where}: field 'split' must be a string, got {raw_split!r}")
    # A row's own split wins unless it is a generic name (a collapsed mirror's "train") and the file has one.
    split = _canonical_split(raw_split) if raw_split else default_split
    if split is not None and _family_of(split) is None and default_split is not None:
        split = default_split
    if split is None or _family_of(split) is None:
        raise DatasetError(
            f"{where}: row {sample_id!r} has no Omni-DuplexEval split (got {split!r}); each row needs a "
            "'split' column, or a file name like RTD_counting-00000-of-00001.parquet. Known splits: "
            f"{', '.join(_KNOWN_SPLITS)}"
        )
    if question_audio is None:
        raise DatasetError(f"{where}: row {split}/{sample_id} has no question_audio")
    texts = {name: _text(row.get(name), name, where) for name in _TEXT_FIELDS}
    numbers = {name: _number(row.get(name), name, where) for name in _FLOAT_FIELDS}
    ground_truth = row.get("ground_truth")
    if isinstance(ground_truth, str):
        try:
            ground_truth = json.loads(ground_truth)
        except json.JSONDecodeError:
            raise DatasetError(f"{where}: field 'ground_truth' is not valid JSON") from None
    if ground_truth is not None and not isinstance(ground_truth, Mapping):
        raise DatasetError(f"{where}: field 'ground_truth' must be an object")
    return Sample(
        split=split,
        id=sample_id,
        question_text=texts["question_text"] or "",
        answer1=texts["answer1"],
        answer2=texts["answer2"],
        reminder1=numbers["reminder1"],
        reminder2=numbers["reminder2"],
        video_type=texts["video_type"],
        video_duration=numbers["video_duration"],
        ground_truth=ground_truth,
        video=video,
        question_audio=question_audio,
    )


def _load_manifest(path: Path) -> list[Sample]:
    """Rows of a JSONL manifest (an object per line) or a JSON list; media paths are manifest-relative."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"cannot read manifest {path}: {exc}") from exc
    rows: list[tuple[str, Any]] = []
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: invalid JSON: {exc}") from None
        if not isinstance(data, list):
            raise DatasetError(f"{path}: a JSON manifest must be a list of rows")
        rows = [(f"{path}[{i}]", row) for i, row in enumerate(data)]
    else:
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append((f"{path}:{lineno}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{lineno}: invalid JSON: {exc}") from None
    samples = []
    for where, row in rows:
        if not isinstance(row, dict):
            raise DatasetError(f"{where}: a row must be a JSON object")
        media = {name: _manifest_media(path.parent, row.get(name), name, where) for name in _MEDIA_FIELDS}
        samples.append(_make_sample(row, None, media["video"], media["question_audio"], where))
    if not samples:
        raise DatasetError(f"manifest {path} has no rows")
    return samples


def _manifest_media(base: Path, value: Any, name: str, where: str) -> Media | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise DatasetError(f"{where}: field {name!r} must be a file path relative to the manifest")
    return Media.from_file(base / value)


def _load_parquet_files(paths: Iterable[Path], root: Path) -> list[Sample]:
    cache = _RowGroupCache()
    samples: list[Sample] = []
    for path in paths:
        samples.extend(_load_parquet(path, root, cache))
    return samples


def _load_parquet(path: Path, root: Path, cache: _RowGroupCache) -> list[Sample]:
    """Rows of one parquet file: scalars now, ``{bytes, path}`` media as lazy cells, other media eagerly."""
    pa, pq = _arrow()
    try:
        parquet = pq.ParquetFile(path)
        schema = parquet.schema_arrow
        lazy = [n for n in _MEDIA_FIELDS if n in schema.names and pa.types.is_struct(schema.field(n).type)]
        columns = [f"{n}.path" if n in lazy else n for n in schema.names]
        rows = parquet.read(columns=columns).to_pylist()
    except (OSError, pa.ArrowException) as exc:
        raise DatasetError(f"cannot read parquet file {path}: {exc}") from exc
    for name in lazy:
        if "bytes" not in {f.name for f in schema.field(name).type}:
            raise DatasetError(f"{path}: media column {name!r} is a struct without a 'bytes' field")
    positions = [
        (group, row)
        for group in range(parquet.metadata.num_row_groups)
        for row in range(parquet.metadata.row_group(group).num_rows)
    ]
    file_split = _split_from_path(path, root)
    file_size = path.stat().st_size
    samples = []
    for index, (row, (group, row_in_group)) in enumerate(zip(rows, positions, strict=True)):
        where = f"{path}[row {index}]"
        media: dict[str, Media | None] = {}
        for name in _MEDIA_FIELDS:
            value = row.get(name)
            if value is None:
                media[name] = None
            elif name in lazy:
                label = f"{path.name}[row {index}].{name}" + (
                    f" ({value['path']})" if value.get("path") else ""
                )
                media[name] = Media(
                    token=f"parquet:{path.name}:{file_size}:{group}:{row_in_group}:{name}:{value.get('path')}",
                    label=label,
                    _reader=_struct_cell_reader(cache, path, group, row_in_group, name, label),
                )
            elif isinstance(value, bytes):
                media[name] = Media.from_bytes(value, f"{path.name}[row {index}].{name}")
            elif isinstance(value, str):
                media[name] = Media.from_file(path.parent / value)
            else:
                raise DatasetError(
                    f"{where}: media column {name!r} must be bytes, a path or a {{bytes, path}} struct"
                )
        samples.append(_make_sample(row, file_split, media["video"], media["question_audio"], where))
    return samples


# --------------------------------------------------------------------------------------------------
# Selection
# --------------------------------------------------------------------------------------------------


def _split_rank(split: str) -> tuple[int, int, str]:
    if split in _KNOWN_SPLITS:
        return (0, _KNOWN_SPLITS.index(split), "")
    return (1, 0 if _family_of(split) == "rtd" else 1, split)


def _ordered(samples: list[Sample]) -> list[Sample]:
    """Canonical split order, source order within a split; duplicated ``split/id`` is an error."""
    seen: set[str] = set()
    for sample in samples:
        if sample.key in seen:
            raise DatasetError(f"duplicated sample {sample.key}: every (split, id) must be unique")
        seen.add(sample.key)
    return sorted(samples, key=lambda s: _split_rank(s.split))


def _validate_selection_shape(selection: Selection) -> None:
    for name in ("splits", "ids", "exclude_ids"):
        value = getattr(selection, name)
        if isinstance(value, str) or not all(isinstance(item, str) for item in value):
            raise DatasetError(f"Selection.{name} must be a tuple of strings, got {value!r}")
    if selection.family not in ("rtd", "pr", "all"):
        raise DatasetError(f"family must be 'rtd', 'pr' or 'all', got {selection.family!r}")
    if selection.ids and selection.exclude_ids:
        raise DatasetError("ids and exclude_ids cannot be combined: list the ids to run, or the ids to skip")
    if selection.limit is not None and (
        isinstance(selection.limit, bool) or not isinstance(selection.limit, int) or selection.limit < 1
    ):
        raise DatasetError(f"limit must be a positive integer or None, got {selection.limit!r}")


def _unknown_split_error(requested: str, available: Sequence[str]) -> DatasetError:
    message = f"unknown split {requested!r}; this dataset has: {', '.join(available)}"
    close = difflib.get_close_matches(requested, available, n=1, cutoff=0.6)
    if _canonical_split(requested) in _KNOWN_SPLITS:
        message += f" ({_canonical_split(requested)} is an Omni-DuplexEval split this copy does not contain)"
    elif close:
        message += f" (did you mean {close[0]!r}?)"
    return DatasetError(message)


def _resolve_refs(refs: Sequence[str], samples: Sequence[Sample], what: str) -> set[str]:
    """Sample keys named by bare ids or ``split/id`` refs; every ref must name at least one sample."""
    by_id: dict[str, list[str]] = {}
    for sample in samples:
        by_id.setdefault(sample.id, []).append(sample.key)
    keys = {s.key for s in samples}
    resolved: set[str] = set()
    unknown: list[str] = []
    for ref in refs:
        split, sep, sample_id = ref.rpartition("/")
        if sep and split:
            key = f"{_canonical_split(split)}/{sample_id}"
            if key in keys:
                resolved.add(key)
                continue
        if ref in by_id:
            resolved.update(by_id[ref])
        else:
            unknown.append(ref)
    if unknown:
        shown = ", ".join(repr(r) for r in unknown[:10]) + (" ..." if len(unknown) > 10 else "")
        raise DatasetError(f"{what} not in the dataset: {shown} (use a bare id or split/id)")
    return resolved


def _select(samples: list[Sample], selection: Selection, source: str) -> list[Sample]:
    available = list(dict.fromkeys(s.split for s in samples))
    splits: set[str] = set()
    for requested in selection.splits:
        split = _canonical_split(requested)
        if split not in available:
            raise _unknown_split_error(requested, available)
        splits.add(split)
    wanted = _resolve_refs(selection.ids, samples, "ids") if selection.ids else None
    excluded = _resolve_refs(selection.exclude_ids, samples, "exclude_ids")
    chosen = [
        s
        for s in samples
        if (not splits or s.split in splits)
        and (selection.family == "all" or s.family == selection.family)
        and (wanted is None or s.key in wanted)
        and s.key not in excluded
    ]
    if selection.limit is not None:
        chosen = chosen[: selection.limit]
    if not chosen:
        raise DatasetError(f"the selection {selection} matches no samples of {source}")
    _check_artifact_names(chosen)
    return chosen


def _check_artifact_names(samples: Sequence[Sample]) -> None:
    """Ids are safe path components whose artifacts (``<id>``, ``<id>.json``, ``<id>.meta.json``) never clash.

    Names compare case-insensitively, since run folders may live on case-insensitive file systems.
    """
    owners: dict[tuple[str, str], str] = {}
    for sample in samples:
        check_component(sample.split, "split")
        check_component(sample.id, f"sample id in {sample.split}")
        for name in (sample.id, f"{sample.id}.json", f"{sample.id}.meta.json"):
            slot = (sample.split, name.casefold())
            other = owners.setdefault(slot, sample.id)
            if other != sample.id:
                raise DatasetError(
                    f"sample ids {other!r} and {sample.id!r} in {sample.split} would both write the artifact "
                    f"{name!r} (artifacts are <id>.json, <id>.meta.json and <id>/, case-insensitively)"
                )


def _fingerprint(samples: Sequence[Sample]) -> str:
    digest = hashlib.sha256(_FINGERPRINT_VERSION)
    for s in samples:
        record = {
            "split": s.split,
            "id": s.id,
            **{name: getattr(s, name) for name in (*_TEXT_FIELDS, *_FLOAT_FIELDS)},
            "ground_truth": s.ground_truth,
            "video": s.video.token if s.video else None,
            "question_audio": s.question_audio.token if s.question_audio else None,
        }
        digest.update(json.dumps(record, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()
