"""OmniInteract datasets: a local copy of the Hugging Face archive layout, the HF cache, or the built-in set.

Layout (the extracted `data.tar.gz` of `lucky-lance/OmniInteract`): a root holding `data/` (or the subset
folders directly) with `1q1a/`, `1q1a_math/` and `1qna/`. Each subset has `annotations/` and `videos/` (or
`videos_bench/`), and `video_json_map.json` `{"total", "entries": [{"video", "annotation", "scene_type"}]}`;
without a map (the 1QnA subset), every video is paired with the annotation at the same relative path.
A map entry's paths are read relative to the subset folder, else to its `videos*/` / `annotations/` folder.

Annotations: a 1Q1A file is a list of `{question_time "MM:SS", question_text, answer_time, answer_text,
question_type realtime|proactive, is_interrupted}`; a 1QnA file is one object with `question_time`,
`question_text` and either `conversations` (`from: user|assistant`, `value`, `timestamp`, `label`,
`interrupted`) or `answers` (`answer_time`, `answer_text`, `interrupted` or `is_interrupted`, `label`). As
upstream's `build_slots.py` reads it, a `conversations` annotation's question is its first user turn (its
`timestamp` and `value`, with `inferred_knowledge` put before the text). Times may be `MM:SS`, `H:MM:SS`
(fractions allowed) or a number of seconds. Every malformed field is a `DatasetError` naming the file and
the field, raised while loading, never in the middle of a run.

Spec forms: `builtin`; a directory; a Hugging Face dataset id (`Owner/Name[@revision]`) already in the local
cache, whose snapshot holds the extracted `data/` or `data.tar.gz` (then extracted once, safely, into
duplexkit's cache). Nothing is ever downloaded.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from duplexkit.bench.omniinteract.case import QA, Case, SceneType
from duplexkit.bench.omniinteract.slots import case_scenarios
from duplexkit.bench.sources import HF_REPO_ID, DatasetError, Media, check_component, hf_snapshot

__all__ = [
    "QA",
    "SCENARIOS",
    "SUBSETS",
    "Case",
    "Dataset",
    "Selection",
    "load_dataset",
    "parse_time",
]

SUBSETS: tuple[str, ...] = ("1q1a", "1q1a_math", "1qna")
SCENARIOS: tuple[str, ...] = ("realtime", "proactive", "nested", "interrupted", "1qna")
_SCENE_TYPES = ("nested", "multi_turn")
_QUESTION_TYPES = ("realtime", "proactive")
_VIDEO_SUFFIXES = (".mp4", ".mkv", ".webm", ".mov")
_TIME = re.compile(r"^(?:(\d+):)?(\d{1,3}):(\d{1,2}(?:\.\d+)?)$")
_FINGERPRINT_VERSION = b"duplexkit-omniinteract-fingerprint-v1\n"


@dataclass(frozen=True)
class Selection:
    """Which cases: subsets, scenarios (a case qualifies when one of its slots has the tag), ids (bare or
    `subset/id`), then at most `limit`. Every named subset, scenario and id must exist."""

    subsets: tuple[str, ...] = ()
    scenarios: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()
    limit: int | None = None


@dataclass(frozen=True)
class Dataset:
    """Selected cases in subset order, then path order; `source` loads them again; a content fingerprint."""

    source: str
    fingerprint: str
    samples: tuple[Case, ...]


def load_dataset(spec: str, selection: Selection, *, cache_dir: Path | None = None) -> Dataset:
    """Load `spec`, apply `selection`; DatasetError on any problem. Never downloads."""
    _check_selection(selection)
    if spec == "builtin":
        from duplexkit.bench.omniinteract.builtin import ensure_builtin

        source, root = "builtin", ensure_builtin(cache_dir)
    else:
        source, root = _resolve(spec, cache_dir)
    cases = _load_root(root)
    chosen = _select(cases, selection, source)
    return Dataset(source=source, fingerprint=_fingerprint(chosen), samples=tuple(chosen))


def parse_time(value: Any, where: str, name: str) -> float:
    """`MM:SS`, `H:MM:SS` (seconds may carry a fraction) or a non-negative number, as seconds."""
    if isinstance(value, bool):
        raise DatasetError(f"{where}: field {name!r} must be a time like MM:SS, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise DatasetError(f"{where}: field {name!r} must be a non-negative time, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise DatasetError(f"{where}: field {name!r} is missing or not a time like MM:SS (got {value!r})")
    match = _TIME.match(value.strip())
    if match is None or float(match[3]) >= 60 or (match[1] is not None and int(match[2]) >= 60):
        raise DatasetError(f"{where}: field {name!r} is {value!r}, not a time like MM:SS")
    hours = int(match[1] or 0)
    return round(hours * 3600 + int(match[2]) * 60 + float(match[3]), 3)


# --- locating the data --------------------------------------------------------------------------------------


def _resolve(spec: str, cache_dir: Path | None) -> tuple[str, Path]:
    path = Path(spec).expanduser()
    if path.is_dir():
        return str(path.resolve()), path.resolve()
    match = HF_REPO_ID.match(spec)
    if match and not path.exists():
        snapshot = hf_snapshot(
            match["repo"],
            match["revision"],
            local_copy="a directory holding data/{1q1a,1q1a_math,1qna} (the extracted data.tar.gz)",
        )
        source = f"{match['repo']}@{snapshot.name}"
        if _subset_root(snapshot) is not None:
            return source, snapshot
        archive = snapshot / "data.tar.gz"
        if archive.is_file():
            return source, _extracted(archive, snapshot.name, cache_dir)
        raise DatasetError(f"{snapshot} (cached {match['repo']}) holds neither data/ nor data.tar.gz")
    raise DatasetError(
        f"dataset {spec!r} not found: expected 'builtin', a directory holding data/{{1q1a,1q1a_math,1qna}}, "
        "or a Hugging Face dataset id (Owner/Name[@revision]) present in the local cache"
    )


def _cache_root(cache_dir: Path | None) -> Path:
    if cache_dir is not None:
        return cache_dir
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "duplexkit"


def _extracted(archive: Path, revision: str, cache_dir: Path | None) -> Path:
    """`archive` extracted once into the cache (tar's `data` filter: no links out, no absolute paths)."""
    target = _cache_root(cache_dir) / f"omniinteract-{revision[:40]}"
    if (target / ".complete").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(staging, filter="data")
        (staging / ".complete").write_text("ok\n", encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    except (OSError, tarfile.TarError) as exc:
        raise DatasetError(f"cannot extract {archive}: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _subset_root(root: Path) -> Path | None:
    for candidate in (root / "data", root):
        if any((candidate / subset).is_dir() for subset in SUBSETS):
            return candidate
    return None


# --- reading the subsets ------------------------------------------------------------------------------------


def _load_root(root: Path) -> list[Case]:
    base = _subset_root(root)
    if base is None:
        raise DatasetError(
            f"{root} holds no OmniInteract subset folder ({', '.join(SUBSETS)}), not in data/ either"
        )
    cases: list[Case] = []
    for subset in SUBSETS:
        if (base / subset).is_dir():
            cases.extend(_load_subset(base / subset, subset))
    if not cases:
        raise DatasetError(f"{base}: the subset folders hold no cases")
    return cases


def _videos_dir(folder: Path) -> Path:
    for name in ("videos", "videos_bench"):
        if (folder / name).is_dir():
            return folder / name
    raise DatasetError(f"{folder}: no videos/ or videos_bench/ folder")


def _load_subset(folder: Path, subset: str) -> list[Case]:
    videos = _videos_dir(folder)
    annotations = folder / "annotations"
    if not annotations.is_dir():
        raise DatasetError(f"{folder}: no annotations/ folder")
    map_path = folder / "video_json_map.json"
    if map_path.is_file():
        pairs = _map_entries(map_path, folder, videos, annotations)
    else:
        pairs = []
        for video in sorted(p for p in videos.rglob("*") if p.suffix.lower() in _VIDEO_SUFFIXES):
            relative = video.relative_to(videos)
            annotation = annotations / relative.with_suffix(".json")
            if not annotation.is_file():
                raise DatasetError(f"{video}: no annotation at {annotation}")
            pairs.append((video, annotation, None, relative))
    cases = []
    for video, annotation, scene_type, relative in pairs:
        raw = _read_json(annotation)
        case_id = "__".join(relative.with_suffix("").parts)
        if subset == "1qna" or isinstance(raw, dict):
            qas = _qna(raw, str(annotation))
            scene: SceneType = "1qna"
        else:
            qas = _one_q_one_a(raw, str(annotation))
            scene = scene_type or "multi_turn"
        truth = None
        truth_path = annotation.with_suffix(".truth.json")
        if truth_path.is_file():
            truth = _read_json(truth_path)
        cases.append(
            Case(
                split=subset,
                id=case_id,
                scene_type=scene,
                qas=qas,
                annotation=str(annotation),
                video=Media.from_file(video),
                ground_truth=truth if isinstance(truth, dict) else None,
            )
        )
    return cases


def _map_entries(
    path: Path, folder: Path, videos: Path, annotations: Path
) -> list[tuple[Path, Path, SceneType | None, Path]]:
    data = _read_json(path)
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise DatasetError(f"{path}: field 'entries' must be a list")
    out: list[tuple[Path, Path, SceneType | None, Path]] = []
    for index, entry in enumerate(entries):
        where = f"{path}: entries[{index}]"
        if not isinstance(entry, dict):
            raise DatasetError(f"{where} must be an object")
        video = _entry_path(entry, "video", where, (folder, videos))
        annotation = _entry_path(entry, "annotation", where, (folder, annotations))
        scene = entry.get("scene_type")
        if scene not in _SCENE_TYPES:
            raise DatasetError(
                f"{where}: field 'scene_type' is {scene!r}; expected one of {', '.join(_SCENE_TYPES)}"
            )
        relative = video.relative_to(videos) if video.is_relative_to(videos) else Path(video.name)
        out.append((video, annotation, scene, relative))
    return out


def _entry_path(entry: Mapping[str, Any], name: str, where: str, bases: Sequence[Path]) -> Path:
    value = entry.get(name)
    if not isinstance(value, str) or not value:
        raise DatasetError(f"{where}: field {name!r} must be a relative path")
    for base in bases:
        if (base / value).is_file():
            return base / value
    raise DatasetError(f"{where}: field {name!r} names {value!r}, which is not a file under {bases[0]}")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: invalid JSON: {exc}") from None


def _text(item: Mapping[str, Any], name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{where}: field {name!r} is missing or empty")
    return value.strip()


def _flag(item: Mapping[str, Any], names: Sequence[str], where: str) -> bool:
    for name in names:
        if name in item:
            value = item[name]
            if isinstance(value, bool):
                return value
            if value in (0, 1, "true", "false", "True", "False"):
                return str(value).lower() in ("1", "true")
            raise DatasetError(f"{where}: field {name!r} must be true or false, got {value!r}")
    return False


def _one_q_one_a(raw: Any, path: str) -> tuple[QA, ...]:
    if not isinstance(raw, list) or not raw:
        raise DatasetError(f"{path}: a 1Q1A annotation must be a non-empty list of questions")
    qas = []
    for index, item in enumerate(raw):
        where = f"{path}: [{index}]"
        if not isinstance(item, dict):
            raise DatasetError(f"{where} must be an object")
        question_type = item.get("question_type")
        if question_type not in _QUESTION_TYPES:
            raise DatasetError(
                f"{where}: field 'question_type' is {question_type!r}; expected realtime or proactive"
            )
        q, a = (
            parse_time(item.get("question_time"), where, "question_time"),
            parse_time(item.get("answer_time"), where, "answer_time"),
        )
        if a < q:
            raise DatasetError(f"{where}: field 'answer_time' ({a} s) is before question_time ({q} s)")
        qas.append(
            QA(
                question_time=q,
                question_text=_text(item, "question_text", where),
                answer_time=a,
                answer_text=_text(item, "answer_text", where),
                question_type=question_type,
                interrupted=_flag(item, ("is_interrupted", "interrupted"), where),
            )
        )
    return tuple(qas)


def _qna(raw: Any, path: str) -> tuple[QA, ...]:
    if not isinstance(raw, dict):
        raise DatasetError(f"{path}: a 1QnA annotation must be one object")
    steps: list[tuple[float, str, bool, str]] = []
    first_user = None
    if isinstance(raw.get("conversations"), list):
        # upstream (build_slots.py): the first user turn is the question, its time and text; the inferred
        # knowledge is put before its text
        turns = raw["conversations"]
        users = [i for i, t in enumerate(turns) if isinstance(t, dict) and t.get("from") == "user"]
        first_user = users[0] if users else None
    if first_user is None:
        q = parse_time(raw.get("question_time"), path, "question_time")
        question = _text(raw, "question_text", path)
    else:
        where = f"{path}: conversations[{first_user}]"
        turn = raw["conversations"][first_user]
        q = parse_time(turn.get("timestamp"), where, "timestamp")
        question = _text(turn, "value", where)
        inferred = raw.get("inferred_knowledge")
        if isinstance(inferred, str) and inferred.strip():
            question = f"{inferred.strip()}\n\n{question}"
    if isinstance(raw.get("conversations"), list):
        for index, turn in enumerate(raw["conversations"]):
            where = f"{path}: conversations[{index}]"
            if not isinstance(turn, dict):
                raise DatasetError(f"{where} must be an object")
            speaker = turn.get("from")
            if speaker not in ("user", "assistant"):
                raise DatasetError(f"{where}: field 'from' is {speaker!r}; expected user or assistant")
            if speaker == "assistant":
                steps.append(
                    (
                        parse_time(turn.get("timestamp"), where, "timestamp"),
                        _text(turn, "value", where),
                        _flag(turn, ("interrupted", "is_interrupted"), where),
                        str(turn.get("label") or "1qna"),
                    )
                )
    elif isinstance(raw.get("answers"), list):
        for index, answer in enumerate(raw["answers"]):
            where = f"{path}: answers[{index}]"
            if not isinstance(answer, dict):
                raise DatasetError(f"{where} must be an object")
            steps.append(
                (
                    parse_time(answer.get("answer_time"), where, "answer_time"),
                    _text(answer, "answer_text", where),
                    _flag(answer, ("interrupted", "is_interrupted"), where),
                    str(answer.get("label") or "1qna"),
                )
            )
    else:
        raise DatasetError(f"{path}: a 1QnA annotation needs a 'conversations' or an 'answers' list")
    if not steps:
        raise DatasetError(f"{path}: the annotation has no answer (no assistant turn or answers entry)")
    steps.sort(key=lambda step: step[0])
    if steps[0][0] < q:
        raise DatasetError(f"{path}: the first answer ({steps[0][0]} s) is before question_time ({q} s)")
    return tuple(QA(q, question, t, text, label, interrupted) for t, text, interrupted, label in steps)


# --- selection ----------------------------------------------------------------------------------------------


def _check_selection(selection: Selection) -> None:
    for name in ("subsets", "scenarios", "ids"):
        value = getattr(selection, name)
        if isinstance(value, str) or not all(isinstance(item, str) for item in value):
            raise DatasetError(f"Selection.{name} must be a tuple of strings, got {value!r}")
    for subset in selection.subsets:
        if subset not in SUBSETS:
            raise DatasetError(f"unknown subset {subset!r}; OmniInteract has {', '.join(SUBSETS)}")
    for scenario in selection.scenarios:
        if scenario not in SCENARIOS:
            raise DatasetError(f"unknown scenario {scenario!r}; OmniInteract has {', '.join(SCENARIOS)}")
    if selection.limit is not None and (
        isinstance(selection.limit, bool) or not isinstance(selection.limit, int) or selection.limit < 1
    ):
        raise DatasetError(f"limit must be a positive integer or None, got {selection.limit!r}")


def _select(cases: list[Case], selection: Selection, source: str) -> list[Case]:
    keys = {c.key for c in cases}
    ids = {c.id for c in cases}
    unknown = [ref for ref in selection.ids if ref not in keys and ref not in ids]
    if unknown:
        raise DatasetError(
            f"ids not in the dataset: {', '.join(map(repr, unknown[:10]))} (bare id or subset/id)"
        )
    chosen = [
        c
        for c in cases
        if (not selection.subsets or c.split in selection.subsets)
        and (not selection.scenarios or case_scenarios(c) & set(selection.scenarios))
        and (not selection.ids or c.key in selection.ids or c.id in selection.ids)
    ]
    if selection.limit is not None:
        chosen = chosen[: selection.limit]
    if not chosen:
        raise DatasetError(f"the selection {selection} matches no cases of {source}")
    seen: set[str] = set()
    for case in chosen:
        check_component(case.id, f"case id in {case.split}")
        if case.key.casefold() in seen:
            raise DatasetError(f"two cases would share the artifacts of {case.key}")
        seen.add(case.key.casefold())
    return chosen


def _fingerprint(cases: Sequence[Case]) -> str:
    digest = hashlib.sha256(_FINGERPRINT_VERSION)
    for case in cases:
        record = {
            "key": case.key,
            "scene_type": case.scene_type,
            "qas": [qa.__dict__ for qa in case.qas],
            "video": case.video.token if case.video else None,
            "ground_truth": case.ground_truth,
        }
        digest.update(json.dumps(record, sort_keys=True, ensure_ascii=False).encode("utf-8") + b"\n")
    return digest.hexdigest()
