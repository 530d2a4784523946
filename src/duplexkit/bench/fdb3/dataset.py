"""FDB-v3's released data layout: one folder per recording, `{example_id}_{speaker_id}/input.wav` (the
speaker id is 24 hex digits), its scenario in the folder's `metadata.json` or in the benchmark's scenario
file (`benchmark_data_v2.json`, `{"benchmark_name", "scenarios": [...]}`; a folder's `metadata.json` wins,
as upstream's released runner merges them).

A scenario is read for the fields the scorers use: `id`, `domain`, `difficulty`, `title`, `dialogue`,
`expected_tool_calls[{function, args}]`, `disfluency_features`, `state_rollback_test`; duplexkit's built-in
set adds `retracted_values` (what its self-corrections take back) and `synthetic`.

A dataset spec is a folder holding the recording folders (or holding `fdb_v3_data_released/`), or a hub
dataset id already in the local Hugging Face cache (never downloaded). The scenario file is looked for in the
folder, beside it and one level up (upstream keeps it in `v3/`, the data folder inside). The split of a
sample is its scenario's domain, its id the folder's name. Every problem is an `Fdb3DatasetError` whose
`code` names it (`not_a_folder`, `no_samples`, `no_scenario`, `bad_scenario`, `bad_metadata`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from duplexkit.bench.sources import DatasetError, check_component, hf_snapshot

FOLDER = re.compile(r"^(.+)_([0-9a-f]{24})$")
"""A released recording folder: the example id, then `_` and the 24-hex-digit speaker id."""
SCENARIO_FILE = "benchmark_data_v2.json"
DATA_FOLDER = "fdb_v3_data_released"


class Fdb3DatasetError(DatasetError):
    """A folder that is not FDB-v3 data; `code` names the problem, the message how to fix it."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code


@dataclass(frozen=True)
class Selection:
    """Which recordings to run (ids: folder names, example ids or split/id; at most `limit`) and how: the
    mock APIs' latency profile (`apis.PROFILES`) and the scenario file for folders without `metadata.json`
    (recorded in `run.json` with the selection, so a resumed or rescored run uses the same)."""

    ids: tuple[str, ...] = ()
    limit: int | None = None
    latency_profile: str = "instant"
    scenarios_file: Path | None = None
    oracle_calls: bool = False
    """Send each recording's expected calls as the session's `extra_body.tool_calls` (the scripted model
    makes exactly those): a self-check of the harness, not a measurement of a model."""


@dataclass(frozen=True)
class Sample:
    """One recording and its scenario."""

    split: str
    id: str
    folder: Path
    example_id: str
    speaker_id: str
    scenario: Mapping[str, Any]
    synthetic: bool = False
    latency_profile: str = "instant"
    """The mock APIs' latency profile its run injects (from the selection)."""
    oracle_calls: bool = False
    """Its session asks the scripted model for its expected calls (`Selection.oracle_calls`)."""

    @property
    def input_wav(self) -> Path:
        return self.folder / "input.wav"

    @property
    def expected_calls(self) -> list[dict[str, Any]]:
        return [dict(c) for c in self.scenario.get("expected_tool_calls") or []]


@dataclass(frozen=True)
class Dataset:
    source: str
    fingerprint: str
    samples: Sequence[Sample]
    scenarios_file: Path | None = None


def _read_json(path: Path, code: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Fdb3DatasetError(code, f"{path}: not readable JSON ({exc})") from None


def check_scenario(raw: Any, where: str) -> dict[str, Any]:
    """A scenario with the fields the scorers need, each of the right type; `Fdb3DatasetError` else."""
    if not isinstance(raw, dict):
        raise Fdb3DatasetError("bad_scenario", f"{where}: a scenario is a JSON object")
    for key in ("id", "domain", "difficulty"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise Fdb3DatasetError("bad_scenario", f"{where}: `{key}` must be a non-empty string")
    calls = raw.get("expected_tool_calls")
    if not isinstance(calls, list) or not all(
        isinstance(c, dict) and isinstance(c.get("function"), str) and isinstance(c.get("args", {}), dict)
        for c in calls
    ):
        raise Fdb3DatasetError(
            "bad_scenario", f"{where}: `expected_tool_calls` must be a list of {{function, args}}"
        )
    return {"title": raw.get("title") or raw["id"], **raw}


def read_scenarios(path: Path) -> dict[str, dict[str, Any]]:
    """The scenario file's scenarios by id (`{"scenarios": [...]}` or a bare list, as upstream reads)."""
    raw = _read_json(path, "bad_scenario")
    if isinstance(raw, dict):
        raw = raw.get("scenarios")
    if not isinstance(raw, list):
        raise Fdb3DatasetError("bad_scenario", f'{path}: expected {{"scenarios": [...]}}')
    out = {}
    for index, entry in enumerate(raw):
        scenario = check_scenario(entry, f"{path} scenario {index}")
        out[scenario["id"]] = scenario
    return out


def data_root(spec: str | Path) -> Path:
    """The folder holding the recording folders for `spec` (a folder, or a hub id in the local cache)."""
    path = Path(spec).expanduser()
    if not path.exists() and isinstance(spec, str) and re.fullmatch(r"[\w.-]+/[\w.-]+(@[\w.-]+)?", spec):
        repo, _, revision = spec.partition("@")
        try:
            path = hf_snapshot(repo, revision or None, local_copy="a folder of FDB-v3 recording folders")
        except DatasetError as exc:
            raise Fdb3DatasetError("not_a_folder", str(exc)) from None
    if not path.is_dir():
        raise Fdb3DatasetError("not_a_folder", f"{spec}: not a folder (nor a dataset in the local HF cache)")
    if not any(FOLDER.match(p.name) for p in path.iterdir() if p.is_dir()) and (path / DATA_FOLDER).is_dir():
        return path / DATA_FOLDER
    return path


def find_scenarios_file(root: Path, given: Path | None = None) -> Path | None:
    """`given`, else `benchmark_data_v2.json` in `root`, beside it or one level up."""
    if given is not None:
        if not given.is_file():
            raise Fdb3DatasetError("no_scenario", f"{given}: no such scenario file")
        return given
    for folder in (root, root.parent, root.parent.parent):
        if (folder / SCENARIO_FILE).is_file():
            return folder / SCENARIO_FILE
    return None


def find_samples(root: Path, scenarios_file: Path | None = None) -> tuple[list[Sample], Path | None]:
    """Every recording folder under `root` (directly, or one level down: a run folder's domain folders)
    with its scenario, and the scenario file used."""
    if not root.is_dir():
        raise Fdb3DatasetError("not_a_folder", f"{root}: not a folder")
    scenarios_file = find_scenarios_file(root, scenarios_file)
    scenarios = read_scenarios(scenarios_file) if scenarios_file is not None else {}
    folders = sorted(p for p in root.iterdir() if p.is_dir() and FOLDER.match(p.name))
    if not folders:
        folders = sorted(
            p
            for d in root.iterdir()
            if d.is_dir() and not d.name.startswith(".")
            for p in d.iterdir()
            if p.is_dir() and FOLDER.match(p.name)
        )
    samples = []
    for folder in folders:
        if not (folder / "input.wav").is_file():
            continue
        match = FOLDER.match(folder.name)
        assert match is not None
        example_id, speaker_id = match.group(1), match.group(2)
        scenario: Mapping[str, Any] | None = scenarios.get(example_id)
        if (folder / "metadata.json").is_file():
            scenario = check_scenario(_read_json(folder / "metadata.json", "bad_metadata"), str(folder))
        if scenario is None:
            raise Fdb3DatasetError(
                "no_scenario",
                f"{folder}: no metadata.json and {example_id!r} is not in "
                f"{scenarios_file or 'a ' + SCENARIO_FILE + ' beside the data (pass --scenarios FILE)'}",
            )
        samples.append(
            Sample(
                split=str(scenario["domain"]),
                id=folder.name,
                folder=folder,
                example_id=example_id,
                speaker_id=speaker_id,
                scenario=scenario,
                synthetic=bool(scenario.get("synthetic")),
            )
        )
    if not samples:
        raise Fdb3DatasetError(
            "no_samples", f"{root}: no {{example_id}}_{{speaker_id}}/input.wav folders (FDB-v3's layout)"
        )
    return samples, scenarios_file


def load_dataset(
    spec: str | Path, selection: Selection, *, source: str | None = None, scenarios_file: Path | None = None
) -> Dataset:
    """The selected recordings of `spec`; `source` is the spec that loads them again (default: `spec`)."""
    root = data_root(spec)
    samples, used = find_samples(root, scenarios_file)
    for s in samples:
        check_component(s.split, "split")
        check_component(s.id, "sample id")
    if selection.ids:
        wanted = set(selection.ids)
        samples = [s for s in samples if {s.id, s.example_id, f"{s.split}/{s.id}"} & wanted]
    if selection.limit is not None:
        samples = samples[: selection.limit]
    if not samples:
        raise Fdb3DatasetError("no_samples", f"{root}: the selection matches no recording")
    samples = [
        replace(s, latency_profile=selection.latency_profile, oracle_calls=selection.oracle_calls)
        for s in samples
    ]
    digest = hashlib.sha256()
    for s in samples:
        scenario = json.dumps(s.scenario, sort_keys=True)
        digest.update(f"{s.split}/{s.id}:{s.latency_profile}:{s.oracle_calls}:{scenario}\n".encode())
        digest.update(hashlib.sha256(s.input_wav.read_bytes()).digest())
    return Dataset(
        source=source or str(spec), fingerprint=digest.hexdigest(), samples=samples, scenarios_file=used
    )


def overlaps(out: Path, samples: Sequence[Sample]) -> bool:
    """Whether the run folder `out` would lie in, or hold, the dataset's folders (a run writes recording
    folders of the same layout)."""
    root = out.resolve()
    folders = {s.folder.parent.resolve() for s in samples}
    return any(root == f or f in root.parents or root in f.parents for f in folders)
