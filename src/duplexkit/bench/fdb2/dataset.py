"""FDB v2's staged tasks: the user's copy of its task file (`prompts_staged_200.json`, CC BY-NC: never
shipped), or the built-in synthetic set (`builtin`).

The file: `{"splits": {<split>: {"classes": [...], "tasks": [...]}}}`; each task has `id` (e.g.
`Daily.ordering.001`), `split`, `class_id`, `class_name`, `scenario_title`, `examiner_system_prompt`,
`examiner_task_prompt` and `staged_reveal` (`T1`-`T4`), the fields FDB v2's runner and judge read (its
`run_dataset.sh` walks `.splits[].tasks`; its judge looks a task up by `id` among any `tasks` list). A
sample's split is the task's `split`, its id the task's `id`, and its folder `<out>/<split>/<id>/`, FDB v2's.

How a run talks is part of the selection (recorded in `run.json`): the pacing, the duration, the stage
mode and the examiner.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from duplexkit.bench.sources import DatasetError, check_component

SPLITS = ("Daily", "Correction", "EntityTracking", "Safety")
"""FDB v2's splits, in its judge's order of subsets."""
STAGE_KEYS = ("T1", "T2", "T3", "T4")
Pacing = Literal["slow", "fast"]
StageMode = Literal["prompt", "turns"]
DEFAULT_DURATION_S = 120.0
"""FDB v2's `run_dataset.sh`: `DEFAULT_DURATION`, else 120 s."""


@dataclass(frozen=True)
class Selection:
    """Which tasks, and how each conversation runs (module docstring)."""

    splits: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()
    exclude_ids: tuple[str, ...] = ()
    limit: int | None = None
    pacing: Pacing = "slow"
    """FDB v2's `--examiner-mode`: the examiner's turn detection (`runner.TURN_DETECTION`)."""
    duration_s: float = DEFAULT_DURATION_S
    stages: StageMode = "prompt"
    """`prompt`: the whole task prompt at the start, as FDB v2 gives it; `turns`: the task prompt, then
    each of T2-T4 added to the examiner's instructions once the examinee finished a turn (ours)."""
    examiner_url: str | None = None
    """A realtime server playing the examiner (`None`: duplexkit's embedded cascade)."""
    examiner_protocol: str = "auto"
    examiner_model: str | None = None
    examiner_args: Mapping[str, str] = field(default_factory=dict)
    """The embedded cascade examiner's model arguments (e.g. `responder=echo`)."""


@dataclass(frozen=True)
class Task:
    """One staged task."""

    split: str
    id: str
    class_id: str | None
    class_name: str | None
    scenario_title: str | None
    system_prompt: str
    task_prompt: str
    staged_reveal: Mapping[str, str]
    raw: Mapping[str, Any]
    synthetic: bool = False
    closing_sentence: str | None = None
    """The sentence that ends the task (the built-in tasks name theirs; FDB v2's is inside the prompt)."""
    selection: Selection = field(default_factory=Selection)
    """How its conversation runs."""

    @property
    def stages(self) -> list[str]:
        """The staged goals present, in order (T1-T4)."""
        return [self.staged_reveal[k] for k in STAGE_KEYS if self.staged_reveal.get(k)]


@dataclass(frozen=True)
class Dataset:
    source: str
    fingerprint: str
    samples: Sequence[Task]


def iter_tasks(data: Any) -> Iterator[Mapping[str, Any]]:
    """Every task of a task file: the entries of each `tasks` list, wherever it is (FDB v2's judge)."""
    if isinstance(data, Mapping):
        tasks = data.get("tasks")
        if isinstance(tasks, list):
            yield from (t for t in tasks if isinstance(t, Mapping))
        for value in data.values():
            if isinstance(value, Mapping | list):
                yield from iter_tasks(value)
    elif isinstance(data, list):
        for value in data:
            yield from iter_tasks(value)


def parse_task(raw: Mapping[str, Any], *, synthetic: bool = False) -> Task:
    """One task of the file; `DatasetError` names a field it lacks."""
    task_id = raw.get("id")
    if not isinstance(task_id, str) or not task_id:
        raise DatasetError("[bad_task] a task without an id")
    given = raw.get("split")
    split = given if isinstance(given, str) else task_id.split(".", 1)[0]
    check_component(split, "split")
    check_component(task_id, "task id")
    for key in ("examiner_system_prompt", "examiner_task_prompt"):
        if not isinstance(raw.get(key), str):
            raise DatasetError(f"[bad_task] {task_id}: no {key}")
    reveal = raw.get("staged_reveal")
    staged = {k: str(v) for k, v in reveal.items() if k in STAGE_KEYS} if isinstance(reveal, Mapping) else {}

    def text(key: str) -> str | None:
        value = raw.get(key)
        return None if value is None else str(value)

    return Task(
        split=split,
        id=task_id,
        class_id=text("class_id"),
        class_name=text("class_name"),
        scenario_title=text("scenario_title"),
        system_prompt=raw["examiner_system_prompt"],
        task_prompt=raw["examiner_task_prompt"],
        staged_reveal=staged,
        raw=dict(raw),
        synthetic=synthetic,
        closing_sentence=text("closing_sentence"),
    )


def load_tasks(data: Any, selection: Selection, *, source: str, synthetic: bool = False) -> Dataset:
    """The selected tasks of a task file's JSON, in file order."""
    tasks: list[Task] = []
    seen: set[str] = set()
    for raw in iter_tasks(data):
        task = parse_task(raw, synthetic=synthetic)
        if task.id in seen:
            raise DatasetError(f"[bad_task] task id {task.id} appears twice")
        seen.add(task.id)
        tasks.append(task)
    if not tasks:
        raise DatasetError(f"[no_tasks] {source} holds no FDB v2 tasks (`splits.<split>.tasks`)")
    wanted_ids = set(selection.ids)
    chosen = [
        t
        for t in tasks
        if (not selection.splits or t.split in selection.splits)
        and (not wanted_ids or t.id in wanted_ids or f"{t.split}/{t.id}" in wanted_ids)
        and t.id not in selection.exclude_ids
    ]
    if selection.limit is not None:
        chosen = chosen[: selection.limit]
    if not chosen:
        raise DatasetError(f"[no_samples] no task of {source} matches the selection")
    digest = hashlib.sha256(json.dumps([t.raw for t in chosen], sort_keys=True).encode()).hexdigest()
    samples = [replace(t, selection=selection) for t in chosen]
    return Dataset(source=source, fingerprint=digest[:16], samples=samples)


def load_dataset(spec: str, selection: Selection) -> Dataset:
    """The task file at `spec` (FDB v2's `prompts_staged_200.json`, or a folder holding it)."""
    path = Path(spec)
    if path.is_dir():
        path = path / "prompts_staged_200.json"
    if not path.is_file():
        raise DatasetError(
            f"[not_a_task_file] {spec}: give FDB v2's task file (v2/prompts_staged_200.json in "
            "DanielLin94144/Full-Duplex-Bench) or 'builtin'"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DatasetError(f"[bad_task_file] {path}: {exc}") from None
    return load_tasks(data, selection, source=spec)
