"""The hooks a benchmark package gives the shared harness, and the registry that finds them by name.

The harness (`runner`, `artifacts`, `media`, `aggregate`, `judge`, `report`, `commands`) knows how to run a
sample with bounded waits and the retry policy, publish it atomically, resume a run, judge it with caching and
render a report. What differs between benchmarks is behind one object per package, `BENCHMARK`, satisfying
`Benchmark` below:

- **data**: `load_dataset(spec, selection)` → a `BenchDataset`; `selection_from_json` / `selection_to_json`
  round-trip the selection recorded in `run.json` so `duplexkit score` reloads the same samples;
- **runner hooks**: `prepare_media(sample, config)` (off the event loop), `run_attempt(sample, media,
  config, progress)` (one session: what to send and what an attempt observed, as `attempt.Attempt`,
  keeping `progress`, a `client.SessionProgress`, current so an outer deadline can say where it stopped),
  `sample_meta` (the dataset fields recorded in each `<id>.meta.json`), `write_artifacts` (per-sample
  extras of a published sample), `artifacts` (their names, withdrawn when a redo fails),
  `write_failure` (a failed sample's own record in its folder, if the benchmark keeps one),
  `write_run_files(root, metas)` (run-level files its official tools read, after a run or a merge) and
  `run_context(selection)` (what a run holds around all of its samples: FDB v2's examiner server);
- **run checks**: `options` (the `duplexkit bench` options only this benchmark takes, so `bench` refuses
  them for another one), `check_config(keep_audio=, score=, scoring=)` (refuse a run configuration:
  whether audio is kept, whether the run is scored, the raw values of the scoring options; before the
  dataset loads) and `check_out(out, dataset)` (refuse a run folder that would clash with the loaded
  dataset); both raise `errors.ConfigError`;
- **scoring**, each part optional: `judge_scoring`, a `JudgeScoring` when `judge.score_run` scores its
  runs with a judge (`None` otherwise): `judge(settings)` (the `Judge` a `judge.settings.JudgeSettings`
  names, its kind resolved by `judge.settings.make_judge`), `score_request(meta, response, sample)` (what a
  judge is asked about one published sample), `summarise(judge, metas, outcomes)` (the benchmark's summary
  of every sample's outcome, its `coverage` from `judge.run.coverage`) and `summary_lines(recorded)` (the
  headline numbers of that summary's JSON, for the terminal); and `folder_scorer`, a `FolderScorer` when
  it scores by its own rules instead (`None` otherwise);
- **report**: `report`, a `ReportSpec` (the score sections of the HTML page, read from the benchmark's
  `scores/summary.json`, and how its means and per-sample scores are labelled).

Adding a benchmark is one package with a `BENCHMARK` object and one line in `BENCHMARKS`; a benchmark
never imports another, and the harness imports a benchmark only through `get_benchmark`.
"""

from __future__ import annotations

import contextlib
import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from duplexkit.bench.attempt import Attempt, RunConfig
    from duplexkit.bench.judge.base import Judge, JudgeInfo
    from duplexkit.bench.judge.settings import JudgeSettings
    from duplexkit.bench.report.data import ReportSpec
    from duplexkit.client import SessionBounds, SessionProgress

BENCHMARKS: Mapping[str, str] = {
    "omni-duplex-eval": "duplexkit.bench.omni_duplex_eval",
    "omniinteract": "duplexkit.bench.omniinteract",
    "fdb": "duplexkit.bench.fdb",
    "fdb3": "duplexkit.bench.fdb3",
    "fdb2": "duplexkit.bench.fdb2",
}
"""Benchmark name (as `--benchmark` and `run.json` `benchmark` spell it) → the package holding `BENCHMARK`."""

DEFAULT_BENCHMARK = "omni-duplex-eval"
"""The benchmark of a run folder whose `run.json` names none (runs written before there were several)."""


class BenchSample(Protocol):
    """What the harness needs of any benchmark's sample: where its artifacts go (`<split>/<id>`)."""

    @property
    def split(self) -> str: ...
    @property
    def id(self) -> str: ...


class BenchDataset(Protocol):
    """A loaded selection: a spec that loads it again, a content fingerprint (resume checks it), samples."""

    @property
    def source(self) -> str: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def samples(self) -> Sequence[Any]: ...


class PreparedInput(Protocol):
    """Media ready to stream; the harness only needs its length to bound the attempt."""

    @property
    def duration_ms(self) -> float: ...


@dataclass(frozen=True)
class FolderScores:
    """What a `FolderScorer` did: its summary for the terminal, the file it wrote, whether every sample
    scored."""

    text: str
    written: Path
    complete: bool


class FolderScorer(Protocol):
    """Scoring by a benchmark's own rules instead of `score_run`: any folder of its sample folders, a run
    folder or not."""

    async def score(
        self,
        root: Path,
        judge: JudgeSettings,
        options: Mapping[str, Any],
        *,
        allow_invalid_clock: bool,
        warn: Callable[[str], None],
    ) -> FolderScores:
        """Score the samples under `root` with the benchmark's scoring `options` (the raw values of its
        scoring options) and the judge `judge` names, telling `warn` about each sample it could not prepare;
        raises `errors.ConfigError` for settings it refuses, `sources.DatasetError` for a folder holding no
        samples and `judge.JudgeUnreachable` when the judge cannot be reached."""
        ...


class JudgeScoring(Protocol):
    """The optional part of a benchmark that `judge.score_run` drives (see the module docstring)."""

    def judge(self, settings: JudgeSettings) -> Judge: ...

    def score_request(self, meta: Mapping[str, Any], response: bytes, sample: Any | None) -> Any: ...

    def summarise(
        self,
        judge: JudgeInfo,
        metas: Sequence[Mapping[str, Any]],
        outcomes: Mapping[tuple[str, str], tuple[str, dict[str, float]]],
    ) -> Any: ...

    def summary_lines(self, recorded: Mapping[str, Any]) -> list[str]: ...


class Benchmark(Protocol):
    """One benchmark's hooks (see the module docstring for when the harness calls each)."""

    name: str
    title: str
    artifacts: tuple[str, ...]
    report: ReportSpec
    options: tuple[str, ...]
    bounds: SessionBounds
    """The session bounds a run uses where `duplexkit bench`'s options leave them unset (today only the
    drain / completion bound differs: OmniInteract's reference waits up to 900 s)."""
    folder_scorer: FolderScorer | None
    sentences: str
    """Where a run publishes each sample's sentences (`artifacts.SENTENCE_LAYOUTS`): where the benchmark's
    official scorer reads them by default, or among the records where none does."""

    def load_dataset(self, spec: str, selection: Any, *, cache_dir: Path | None = None) -> BenchDataset: ...

    def selection_from_json(self, raw: Mapping[str, Any]) -> Any: ...

    def selection_to_json(self, selection: Any) -> dict[str, Any]: ...

    def check_config(self, *, keep_audio: bool, score: bool, scoring: Mapping[str, Any]) -> None: ...

    def check_out(self, out: Path, dataset: Any) -> None: ...

    def prepare_media(self, sample: Any, config: RunConfig) -> PreparedInput: ...

    async def run_attempt(
        self, sample: Any, media: Any, config: RunConfig, progress: SessionProgress
    ) -> Attempt: ...

    def sample_meta(self, sample: Any) -> dict[str, Any]: ...

    def write_artifacts(self, folder: Path, sample: Any, attempt: Attempt) -> None: ...

    def write_failure(self, folder: Path, meta: Mapping[str, Any]) -> None: ...

    def write_run_files(self, root: Path, metas: Sequence[Mapping[str, Any]]) -> None: ...

    def run_context(self, selection: Any) -> contextlib.AbstractAsyncContextManager[None]:
        """What a run holds around all of its samples, entered by `job.run_job` around the runner (FDB v2:
        the examiner's embedded server); `contextlib.nullcontext()` for a benchmark that holds nothing."""
        ...

    @property
    def judge_scoring(self) -> JudgeScoring | None:
        """How `judge.score_run` scores its runs with a judge; `None` for a benchmark scored only by its
        own rules (`folder_scorer`)."""
        ...


class UnknownBenchmark(ValueError):
    """A benchmark name the registry does not hold."""


def get_benchmark(name: str) -> Benchmark:
    """The `BENCHMARK` hooks of the benchmark called `name` (its package is imported on first use)."""
    try:
        module = BENCHMARKS[name]
    except KeyError:
        raise UnknownBenchmark(
            f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}"
        ) from None
    hooks: Benchmark = importlib.import_module(module).BENCHMARK
    return hooks


def benchmark_name_of_run(run_dir: Path) -> str:
    """The benchmark `run.json` names; `DEFAULT_BENCHMARK` when it names none or is unreadable."""
    try:
        name = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("benchmark")
    except (OSError, ValueError, AttributeError):
        return DEFAULT_BENCHMARK
    return name if isinstance(name, str) and name in BENCHMARKS else DEFAULT_BENCHMARK
