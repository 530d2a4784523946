"""Full-Duplex-Bench v2 (arXiv 2510.07838): an examiner talks to the model under test through staged tasks,
both recorded on one timeline, the examinee judged on turn taking, instruction following and a task score.

The package owns FDB v2's task file (`dataset`), the built-in synthetic tasks (`builtin`), the runner hooks
(`runner`: one conversation through the harness's bridge, FDB v2's task folders), the judge's prompt and
judges (`judge`), the reading of its replies (`parse`), its aggregation (`aggregate`, pure), scoring any
task folders (`scoring`), the published numbers (`references`) and the report section (`report`). See
docs/fdb2.md. Its examiner is served for the whole run (`run_context`): the server `--examiner-url` names,
or duplexkit's own cascade embedded in process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from duplexkit.bench.artifacts import RECORDS_SENTENCES
from duplexkit.bench.attempt import Attempt, RunConfig
from duplexkit.bench.benchmark import FolderScores
from duplexkit.bench.errors import ConfigError
from duplexkit.bench.fdb2 import runner
from duplexkit.bench.fdb2.dataset import (
    DEFAULT_DURATION_S,
    Dataset,
    Selection,
    Task,
    load_dataset,
    load_tasks,
)
from duplexkit.bench.fdb2.report import REPORT
from duplexkit.bench.judge.settings import JudgeSettings
from duplexkit.client import SessionBounds, SessionProgress

__all__ = ["BENCHMARK"]

EXAMINER_KEY_ENV = ("DUPLEXKIT_EXAMINER_API_KEY", "OPENAI_API_KEY")
"""Where the examiner's API key is read from, in order (never from the command line, never recorded)."""


class Fdb2Scorer:
    """`scoring.score_folder` with the terminal summary, for `duplexkit score` and `bench --score`."""

    async def score(
        self,
        root: Path,
        judge: JudgeSettings,
        options: Mapping[str, Any],
        *,
        allow_invalid_clock: bool,
        warn: Callable[[str], None],
    ) -> FolderScores:
        from duplexkit.bench.fdb2 import scoring

        prompts = options.get("fdb2_prompts")
        scores = await scoring.score_folder(root, judge, Path(prompts) if prompts else None, warn=warn)
        return FolderScores(
            text=scoring.format_summary(scores),
            written=root / scoring.SCORES_FILE,
            complete=not scores["errors"],
        )


class FullDuplexBenchV2:
    """The FDB v2 hooks of the shared harness."""

    name = "fdb2"
    title = "Full-Duplex-Bench v2"
    artifacts = runner.ARTIFACTS
    report = REPORT
    options = (
        "--examiner-url",
        "--examiner-protocol",
        "--examiner-model",
        "--examiner-arg",
        "--pacing",
        "--duration",
        "--stages",
        "--fdb2-prompts",
    )
    bounds = SessionBounds()
    folder_scorer = Fdb2Scorer()
    judge_scoring = None
    """Scored by FDB v2's own aggregation (`folder_scorer`), not `judge.score_run`."""
    sentences = RECORDS_SENTENCES

    def __init__(self) -> None:
        self._examiner: runner.Examiner | None = None

    def load_dataset(self, spec: str, selection: Selection, *, cache_dir: Path | None = None) -> Dataset:
        """The user's copy of FDB v2's task file, or the built-in tasks (`builtin`)."""
        if spec == "builtin":
            from duplexkit.bench.fdb2.builtin import task_file

            return load_tasks(task_file(), selection, source=spec, synthetic=True)
        return load_dataset(spec, selection)

    def selection_from_json(self, raw: Mapping[str, Any]) -> Selection:
        duration = raw.get("duration_s")
        return Selection(
            splits=tuple(raw.get("splits") or ()),
            ids=tuple(raw.get("ids") or ()),
            exclude_ids=tuple(raw.get("exclude_ids") or ()),
            limit=raw.get("limit"),
            pacing=raw.get("pacing") or "slow",
            duration_s=float(duration) if duration is not None else DEFAULT_DURATION_S,
            stages=raw.get("stages") or "prompt",
            examiner_url=raw.get("examiner_url"),
            examiner_protocol=raw.get("examiner_protocol") or "auto",
            examiner_model=raw.get("examiner_model"),
            examiner_args=dict(raw.get("examiner_args") or {}),
        )

    def selection_to_json(self, selection: Selection) -> dict[str, Any]:
        return {
            "splits": list(selection.splits),
            "ids": list(selection.ids),
            "exclude_ids": list(selection.exclude_ids),
            "limit": selection.limit,
            "pacing": selection.pacing,
            "duration_s": selection.duration_s,
            "stages": selection.stages,
            "examiner_url": selection.examiner_url,
            "examiner_protocol": selection.examiner_protocol,
            "examiner_model": selection.examiner_model,
            "examiner_args": dict(selection.examiner_args),
        }

    def check_config(self, *, keep_audio: bool, score: bool, scoring: Mapping[str, Any]) -> None:
        """The recordings are what is judged and scored: FDB v2's runner always keeps them."""
        if not keep_audio:
            raise ConfigError(
                "fdb2 writes A.wav, B.wav and combined.wav per task, as FDB v2 does; drop --no-audio"
            )

    def check_out(self, out: Path, dataset: Dataset) -> None:
        """A run folder holds task folders only; nothing to check against a task file."""

    @contextlib.asynccontextmanager
    async def run_context(self, selection: Selection) -> AsyncIterator[None]:
        """The run's examiner: the server `--examiner-url` names, or the embedded cascade."""
        if selection.duration_s <= 0:
            raise ConfigError("--duration must be positive")
        if selection.examiner_url:
            key = next((os.environ[k] for k in EXAMINER_KEY_ENV if os.environ.get(k)), None)
            self._examiner = runner.Examiner(
                selection.examiner_url, selection.examiner_protocol, selection.examiner_model, key
            )
            try:
                yield
            finally:
                self._examiner = None
            return
        from duplexkit.models import load_model
        from duplexkit.server import EmbeddedServer

        model = await asyncio.to_thread(load_model, "cascade", dict(selection.examiner_args))
        async with EmbeddedServer(model) as server:
            self._examiner = runner.Examiner(server.url, "duplex", None, None, embedded=True)
            try:
                yield
            finally:
                self._examiner = None

    def prepare_media(self, sample: Task, config: RunConfig) -> runner.Fdb2Input:
        return runner.prepare_media(sample)

    async def run_attempt(
        self, sample: Task, media: runner.Fdb2Input, config: RunConfig, progress: SessionProgress
    ) -> Attempt:
        if self._examiner is None:
            raise RuntimeError("an fdb2 attempt runs inside the benchmark's run_context (its examiner)")
        return await runner.run_attempt(sample, media, config, self._examiner, progress)

    def sample_meta(self, sample: Task) -> dict[str, Any]:
        return runner.sample_meta(sample)

    def write_artifacts(self, folder: Path, sample: Task, attempt: Attempt) -> None:
        runner.write_artifacts(folder, sample, attempt)

    def write_failure(self, folder: Path, meta: Mapping[str, Any]) -> None:
        """A failed task keeps no recording of its own: the harness's `.meta.json` says why."""

    def write_run_files(self, root: Path, metas: Sequence[Mapping[str, Any]]) -> None:
        """FDB v2's evaluation reads the task folders alone; no run-level file."""


BENCHMARK = FullDuplexBenchV2()
