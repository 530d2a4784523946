"""OmniInteract (arXiv 2605.26485): when an omni model speaks in a long audio-visual stream.

The package owns the loader (`dataset`), the built-in generated set (`builtin`), the slots (`slots`), the
scoring rules (`metrics`), the runner hooks (`runner`: the stream, the simulated listener of `listener`, the
completion rule, the per-case files), word timing (`timing`), the judges (`judge`: an LLM through any
OpenAI-compatible endpoint; `builtin_judge`: offline, not comparable), the prompts and the summary
(`scoring`), and the report section (`report`). `BENCHMARK` is what the shared harness drives.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from duplexkit.bench.artifacts import RECORDS_SENTENCES
from duplexkit.bench.attempt import Attempt, RunConfig
from duplexkit.bench.errors import ConfigError
from duplexkit.bench.judge.base import Judge, JudgeInfo
from duplexkit.bench.judge.settings import JudgeSettings
from duplexkit.bench.omniinteract import runner, scoring
from duplexkit.bench.omniinteract.case import Case
from duplexkit.bench.omniinteract.dataset import Dataset, Selection, load_dataset
from duplexkit.bench.omniinteract.report import REPORT
from duplexkit.client import SessionBounds, SessionProgress

__all__ = ["BENCHMARK"]


class OmniInteract:
    """The OmniInteract hooks of the shared harness."""

    name = "omniinteract"
    title = "OmniInteract"
    artifacts = runner.ARTIFACTS
    report = REPORT
    options = ("--subset", "--scenario")
    bounds = SessionBounds(drain_timeout_s=runner.COMPLETION_TIMEOUT_S)
    folder_scorer = None
    sentences = RECORDS_SENTENCES

    @property
    def judge_scoring(self) -> OmniInteract:
        """Scored by `judge.score_run`: these hooks are its `JudgeScoring`."""
        return self

    def load_dataset(self, spec: str, selection: Selection, *, cache_dir: Path | None = None) -> Dataset:
        return load_dataset(spec, selection, cache_dir=cache_dir)

    def selection_from_json(self, raw: Mapping[str, Any]) -> Selection:
        return Selection(
            subsets=tuple(raw.get("subsets") or ()),
            scenarios=tuple(raw.get("scenarios") or ()),
            ids=tuple(raw.get("ids") or ()),
            limit=raw.get("limit"),
        )

    def selection_to_json(self, selection: Selection) -> dict[str, Any]:
        return {
            "subsets": list(selection.subsets),
            "scenarios": list(selection.scenarios),
            "ids": list(selection.ids),
            "limit": selection.limit,
        }

    def check_config(self, *, keep_audio: bool, score: bool, scoring: Mapping[str, Any]) -> None:
        return None  # every run configuration applies

    def check_out(self, out: Path, dataset: Dataset) -> None:
        return None  # the run folder never holds dataset files

    def prepare_media(self, sample: Case, config: RunConfig) -> runner.CaseMedia:
        return runner.prepare_case(sample, fps=config.fps)

    async def run_attempt(
        self, sample: Case, media: runner.CaseMedia, config: RunConfig, progress: SessionProgress
    ) -> Attempt:
        return await runner.run_attempt(sample, media, config, progress)

    def sample_meta(self, sample: Case) -> dict[str, Any]:
        return runner.sample_meta(sample)

    def write_artifacts(self, folder: Path, sample: Case, attempt: Attempt) -> None:
        runner.write_artifacts(folder, attempt)

    def run_context(self, selection: Any) -> contextlib.AbstractAsyncContextManager[None]:
        """Nothing to hold around a run."""
        return contextlib.nullcontext()

    def write_run_files(self, root: Path, metas: Sequence[Mapping[str, Any]]) -> None:
        runner.write_run_files(root, metas)

    def write_failure(self, folder: Path, meta: Mapping[str, Any]) -> None:
        runner.write_failure(folder, meta)

    def judge(self, settings: JudgeSettings) -> Judge:
        """The offline keyword judge, or an LLM at the reference judge's temperature and reply length."""
        if settings.protocol_dir is not None:
            raise ConfigError("--protocol-dir holds Omni-DuplexEval prompts; OmniInteract uses its own")
        if settings.kind == "builtin":
            settings.refuse_builtin_extras()
            from duplexkit.bench.omniinteract.builtin_judge import BuiltinJudge

            return BuiltinJudge()
        settings.check_llm()
        from duplexkit.bench.omniinteract import judge as llm

        return llm.LLMJudge(settings.chat_client(temperature=llm.TEMPERATURE, max_tokens=llm.MAX_TOKENS))

    def score_request(
        self, meta: Mapping[str, Any], response: bytes, sample: Case | None
    ) -> scoring.CaseRequest:
        return scoring.score_request(meta, response, sample)

    def summarise(
        self,
        judge: JudgeInfo,
        metas: Sequence[Mapping[str, Any]],
        outcomes: Mapping[tuple[str, str], tuple[str, dict[str, float]]],
    ) -> scoring.Summary:
        return scoring.summarise(judge, metas, outcomes)

    def summary_lines(self, recorded: Mapping[str, Any]) -> list[str]:
        return scoring.summary_lines(recorded)


BENCHMARK = OmniInteract()
