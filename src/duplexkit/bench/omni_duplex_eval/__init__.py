"""Omni-DuplexEval (arXiv 2605.17360): real-time description and proactive reminders over short clips.

The package owns the benchmark's dataset loader (`dataset`), built-in generated dataset (`builtin`), runner
hooks (`runner`), judges (`judge`: the LLM rubric; `builtin_judge`: offline, not comparable), prompts,
time windows, scoring request and summary (`scoring`) and report section (`report`). `BENCHMARK` is what
the shared harness drives (see `duplexkit.bench.benchmark`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from duplexkit.bench.artifacts import SPLIT_SENTENCES
from duplexkit.bench.attempt import Attempt, RunConfig
from duplexkit.bench.errors import ConfigError
from duplexkit.bench.judge.base import Judge, JudgeInfo
from duplexkit.bench.judge.prompting import PromptSet
from duplexkit.bench.judge.settings import JudgeSettings
from duplexkit.bench.media import PreparedMedia, prepare_media
from duplexkit.bench.omni_duplex_eval import runner, scoring
from duplexkit.bench.omni_duplex_eval.builtin_judge import BuiltinJudge
from duplexkit.bench.omni_duplex_eval.dataset import Dataset, Sample, Selection, load_dataset
from duplexkit.bench.omni_duplex_eval.judge import LLMJudge
from duplexkit.bench.omni_duplex_eval.prompts import BUILTIN_PROMPTS, PROMPT_VERSION, load_protocol_dir
from duplexkit.bench.omni_duplex_eval.report import REPORT
from duplexkit.bench.omni_duplex_eval.request import ScoreRequest
from duplexkit.bench.omni_duplex_eval.scoring import Summary
from duplexkit.bench.omni_duplex_eval.windows import REMINDER_WINDOW_S
from duplexkit.client import SessionBounds, SessionProgress

__all__ = [
    "BENCHMARK",
    "BUILTIN_PROMPTS",
    "PROMPT_VERSION",
    "BuiltinJudge",
    "LLMJudge",
    "PromptSet",
    "ScoreRequest",
    "Summary",
    "load_protocol_dir",
]


class OmniDuplexEval:
    """The Omni-DuplexEval hooks of the shared harness."""

    name = "omni-duplex-eval"
    title = "Omni-DuplexEval"
    artifacts = runner.ARTIFACTS
    report = REPORT
    options = ("--split", "--family", "--exclude-ids", "--sentence-timing")
    bounds = SessionBounds()
    folder_scorer = None
    sentences = SPLIT_SENTENCES

    @property
    def judge_scoring(self) -> OmniDuplexEval:
        """Scored by `judge.score_run`: these hooks are its `JudgeScoring`."""
        return self

    def load_dataset(self, spec: str, selection: Selection, *, cache_dir: Path | None = None) -> Dataset:
        return load_dataset(spec, selection, cache_dir=cache_dir)

    def selection_from_json(self, raw: Mapping[str, Any]) -> Selection:
        return Selection(
            splits=tuple(raw.get("splits") or ()),
            family=raw.get("family") or "all",
            ids=tuple(raw.get("ids") or ()),
            exclude_ids=tuple(raw.get("exclude_ids") or ()),
            limit=raw.get("limit"),
        )

    def selection_to_json(self, selection: Selection) -> dict[str, Any]:
        return {
            "splits": list(selection.splits),
            "family": selection.family,
            "ids": list(selection.ids),
            "exclude_ids": list(selection.exclude_ids),
            "limit": selection.limit,
        }

    def check_config(self, *, keep_audio: bool, score: bool, scoring: Mapping[str, Any]) -> None:
        return None  # every run configuration applies

    def check_out(self, out: Path, dataset: Dataset) -> None:
        return None  # the run folder never holds dataset files

    def prepare_media(self, sample: Sample, config: RunConfig) -> PreparedMedia:
        return prepare_media(sample, fps=config.fps)

    async def run_attempt(
        self, sample: Sample, media: PreparedMedia, config: RunConfig, progress: SessionProgress
    ) -> Attempt:
        return await runner.run_attempt(sample, media, config, progress)

    def sample_meta(self, sample: Sample) -> dict[str, Any]:
        return runner.sample_meta(sample)

    def write_artifacts(self, folder: Path, sample: Sample, attempt: Attempt) -> None:
        runner.write_artifacts(folder, attempt)

    def write_failure(self, folder: Path, meta: Mapping[str, Any]) -> None:
        return None  # a failed sample is its meta.json alone

    def run_context(self, selection: Any) -> contextlib.AbstractAsyncContextManager[None]:
        """Nothing to hold around a run."""
        return contextlib.nullcontext()

    def write_run_files(self, root: Path, metas: Sequence[Mapping[str, Any]]) -> None:
        return None  # the reference scorer reads the sentences files themselves

    def judge(self, settings: JudgeSettings) -> Judge:
        """The builtin judge, or the LLM rubric with duplexkit's prompts or those of `protocol_dir`."""
        window = REMINDER_WINDOW_S if settings.reminder_window_s is None else settings.reminder_window_s
        if settings.kind == "builtin":
            settings.refuse_builtin_extras()
            return BuiltinJudge(reminder_window_s=window)
        settings.check_llm()
        prompts = BUILTIN_PROMPTS
        if settings.protocol_dir is not None:
            try:
                prompts = load_protocol_dir(settings.protocol_dir)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc
        return LLMJudge(settings.chat_client(), prompts, reminder_window_s=window)

    def score_request(self, meta: Mapping[str, Any], response: bytes, sample: Sample | None) -> ScoreRequest:
        return scoring.score_request(meta, response, sample)

    def summarise(
        self,
        judge: JudgeInfo,
        metas: Sequence[Mapping[str, Any]],
        outcomes: Mapping[tuple[str, str], tuple[str, dict[str, float]]],
    ) -> Summary:
        return scoring.summarise(judge, metas, outcomes)

    def summary_lines(self, recorded: Mapping[str, Any]) -> list[str]:
        return scoring.summary_lines(recorded)


BENCHMARK = OmniDuplexEval()
