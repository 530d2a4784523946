"""Full-Duplex-Bench v1 / v1.5 (arXiv 2503.04721, 2507.23159): pauses, backchannels, turn-taking and
interruptions, on the shared harness.

The package owns the FDB folder layout (`dataset`), the built-in synthetic dataset (`builtin`), the runner
hooks (`runner`: full duplex, no commit, `output.wav` on the input's timeline), word timing (`words`), the
metrics (`metrics`, pure; `segments`, Silero speech segments), the relevance judge (`judge`), scoring of any
FDB folders (`scoring`) and the report section (`report`). `BENCHMARK` is what the shared harness drives.
FDB runs are scored by its `folder_scorer` (`scoring.score_folder`, `duplexkit score --benchmark fdb`), not
by the judge runner `score_run`: most of its metrics need no judge.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from duplexkit.bench.artifacts import RECORDS_SENTENCES
from duplexkit.bench.attempt import Attempt, RunConfig
from duplexkit.bench.benchmark import FolderScores
from duplexkit.bench.errors import ConfigError
from duplexkit.bench.fdb import runner
from duplexkit.bench.fdb.dataset import Dataset, Sample, Selection, load_dataset, overlaps
from duplexkit.bench.fdb.report import REPORT
from duplexkit.bench.judge.settings import JudgeSettings
from duplexkit.client import SessionBounds, SessionProgress

__all__ = ["BENCHMARK"]


class FdbScorer:
    """`scoring.score_folder` with the terminal table, for `duplexkit score` and `bench --score`."""

    async def score(
        self,
        root: Path,
        judge: JudgeSettings,
        options: Mapping[str, Any],
        *,
        allow_invalid_clock: bool,
        warn: Callable[[str], None],
    ) -> FolderScores:
        from duplexkit.bench.fdb import scoring

        scores = await scoring.score_folder(
            root,
            judge,
            scoring.ScoreOptions.from_json(options),
            allow_invalid_clock=allow_invalid_clock,
            warn=warn,
        )
        return FolderScores(
            text=scoring.format_table(scores),
            written=root / scoring.SCORES_FILE,
            complete=not any(t["errors"] for t in scores["tasks"].values()),
        )


class FullDuplexBench:
    """The Full-Duplex-Bench hooks of the shared harness."""

    name = "fdb"
    title = "Full-Duplex-Bench"
    artifacts = runner.ARTIFACTS
    report = REPORT
    options = ("--task", "--icc-distribution", "--words", "--transcription-url")
    bounds = SessionBounds()
    folder_scorer = FdbScorer()
    judge_scoring = None
    """Its metrics are rules (one optional judge inside `folder_scorer`), not `judge.score_run`'s."""
    sentences = RECORDS_SENTENCES

    def load_dataset(self, spec: str, selection: Selection, *, cache_dir: Path | None = None) -> Dataset:
        """FDB sample folders under `spec`, or the built-in set (`builtin`, generated on first use)."""
        if spec == "builtin":
            from duplexkit.bench.fdb.builtin import builtin_root

            return load_dataset(builtin_root(cache_dir), selection, source=spec)
        return load_dataset(spec, selection)

    def selection_from_json(self, raw: Mapping[str, Any]) -> Selection:
        return Selection(
            tasks=tuple(raw.get("tasks") or ()), ids=tuple(raw.get("ids") or ()), limit=raw.get("limit")
        )

    def selection_to_json(self, selection: Selection) -> dict[str, Any]:
        return {"tasks": list(selection.tasks), "ids": list(selection.ids), "limit": selection.limit}

    def check_config(self, *, keep_audio: bool, score: bool, scoring: Mapping[str, Any]) -> None:
        """Scoring reads `output.wav`; re-timing the words happens only when scoring."""
        if not keep_audio:
            raise ConfigError("fdb needs output.wav in every sample folder; drop --no-audio")
        if (scoring.get("words") or "keep") != "keep" and not score:
            raise ConfigError("--words asr|transcription re-times the words when scoring; add --score")

    def check_out(self, out: Path, dataset: Dataset) -> None:
        """A run writes FDB sample folders in the dataset's layout, so `out` must stay out of the dataset."""
        if overlaps(out, dataset.samples):
            raise ConfigError(f"--out {out} overlaps the dataset folder; write the run elsewhere")

    def prepare_media(self, sample: Sample, config: RunConfig) -> runner.FdbInput:
        return runner.prepare_media(sample)

    async def run_attempt(
        self, sample: Sample, media: runner.FdbInput, config: RunConfig, progress: SessionProgress
    ) -> Attempt:
        return await runner.run_attempt(sample, media, config, progress)

    def sample_meta(self, sample: Sample) -> dict[str, Any]:
        return runner.sample_meta(sample)

    def write_artifacts(self, folder: Path, sample: Sample, attempt: Attempt) -> None:
        runner.write_artifacts(folder, sample, attempt)

    def write_failure(self, folder: Path, meta: Mapping[str, Any]) -> None:
        """FDB keeps no record of its own for a failed sample: the harness's `.meta.json` says why."""

    def run_context(self, selection: Any) -> contextlib.AbstractAsyncContextManager[None]:
        """Nothing to hold around a run."""
        return contextlib.nullcontext()

    def write_run_files(self, root: Path, metas: Sequence[Mapping[str, Any]]) -> None:
        """FDB's scripts read the task folders themselves: no run-level file."""


BENCHMARK = FullDuplexBench()
