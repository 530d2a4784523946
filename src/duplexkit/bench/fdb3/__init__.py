"""Full-Duplex-Bench v3 (arXiv 2604.04847): tool use under real conversational speech, on the shared
harness, against any server the client speaks to, the benchmark's mock APIs run by our client.

The package owns FDB-v3's released layout (`dataset`), the built-in synthetic set (`builtin`), the twelve
mock APIs (`apis`), the runner hooks (`runner`: FDB-v3's streaming, its result files), the scoring rules
(`metrics`, pure), the argument judge (`judge`), scoring of any FDB-v3 folders (`scoring`), the published
numbers (`references`) and the report section (`report`). See docs/fdb3.md. Runs are scored by its
`folder_scorer` (`duplexkit score --benchmark fdb3`), not by the judge runner `score_run`.
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
from duplexkit.bench.fdb3 import runner
from duplexkit.bench.fdb3.dataset import Dataset, Sample, Selection, load_dataset, overlaps
from duplexkit.bench.fdb3.report import REPORT
from duplexkit.bench.judge.settings import JudgeSettings
from duplexkit.client import SessionBounds, SessionProgress

__all__ = ["BENCHMARK"]


class Fdb3Scorer:
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
        from duplexkit.bench.fdb3 import scoring

        chosen = scoring.ScoreOptions.from_json(options)
        scores = await scoring.score_folder(root, judge, chosen, allow_invalid_clock=allow_invalid_clock)
        for error in scores["errors"]:
            warn(f"{error['split']}/{error['id']}: [{error['error']}] {error['message']}")
        return FolderScores(
            text=scoring.format_summary(scores),
            written=root / scoring.scores_file(chosen.provider),
            complete=not scores["errors"],
        )


class FullDuplexBenchV3:
    """The FDB-v3 hooks of the shared harness."""

    name = "fdb3"
    title = "Full-Duplex-Bench v3"
    artifacts = runner.ARTIFACTS
    report = REPORT
    options = ("--tool-latency", "--scenarios", "--oracle-calls")
    bounds = SessionBounds()
    folder_scorer = Fdb3Scorer()
    judge_scoring = None
    """Scored by FDB-v3's own rules and judge (`folder_scorer`), not `judge.score_run`."""
    sentences = RECORDS_SENTENCES
    """FDB-v3's scorers read no sentences: ours stay among the records, out of the recording folders."""

    def load_dataset(self, spec: str, selection: Selection, *, cache_dir: Path | None = None) -> Dataset:
        """FDB-v3 recording folders under `spec` (or a hub id in the local cache), or the built-in set."""
        if spec == "builtin":
            from duplexkit.bench.fdb3.builtin import builtin_root

            return load_dataset(builtin_root(cache_dir), selection, source=spec)
        return load_dataset(spec, selection, scenarios_file=selection.scenarios_file)

    def selection_from_json(self, raw: Mapping[str, Any]) -> Selection:
        scenarios = raw.get("scenarios_file")
        return Selection(
            ids=tuple(raw.get("ids") or ()),
            limit=raw.get("limit"),
            latency_profile=raw.get("tool_latency") or "instant",
            scenarios_file=Path(scenarios) if scenarios else None,
            oracle_calls=bool(raw.get("oracle_calls")),
        )

    def selection_to_json(self, selection: Selection) -> dict[str, Any]:
        return {
            "ids": list(selection.ids),
            "limit": selection.limit,
            "tool_latency": selection.latency_profile,
            "scenarios_file": None if selection.scenarios_file is None else str(selection.scenarios_file),
            "oracle_calls": selection.oracle_calls,
        }

    def check_config(self, *, keep_audio: bool, score: bool, scoring: Mapping[str, Any]) -> None:
        """The result files hold what is scored; FDB-v3's runner always keeps the output audio."""
        if not keep_audio:
            raise ConfigError(
                "fdb3 writes output_duplexkit.wav beside every result, as FDB-v3 does; drop --no-audio"
            )
        if (scoring.get("provider") or "duplexkit") != "duplexkit":
            raise ConfigError("a run writes result_duplexkit.json; --provider is for `duplexkit score`")

    def check_out(self, out: Path, dataset: Dataset) -> None:
        if overlaps(out, dataset.samples):
            raise ConfigError(f"--out {out} overlaps the dataset folder; write the run elsewhere")

    def prepare_media(self, sample: Sample, config: RunConfig) -> runner.Fdb3Input:
        return runner.prepare_media(sample)

    async def run_attempt(
        self, sample: Sample, media: runner.Fdb3Input, config: RunConfig, progress: SessionProgress
    ) -> Attempt:
        return await runner.run_attempt(sample, media, config, progress)

    def sample_meta(self, sample: Sample) -> dict[str, Any]:
        return runner.sample_meta(sample)

    def write_artifacts(self, folder: Path, sample: Sample, attempt: Attempt) -> None:
        runner.write_artifacts(folder, sample, attempt)

    def write_failure(self, folder: Path, meta: Mapping[str, Any]) -> None:
        """A failed recording keeps no result of its own: the harness's `.meta.json` says why."""

    def run_context(self, selection: Any) -> contextlib.AbstractAsyncContextManager[None]:
        """Nothing to hold around a run."""
        return contextlib.nullcontext()

    def write_run_files(self, root: Path, metas: Sequence[Mapping[str, Any]]) -> None:
        runner.write_run_files(root, metas)


BENCHMARK = FullDuplexBenchV3()
