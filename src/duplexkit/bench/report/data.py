"""What a report shows, as typed values: `ReportData` is one run folder read by `load_run`.

Every value comes from untrusted files, so every field that a file may lack or get wrong is optional: `None`
means "not recorded (or not readable)", never a guessed value. Text fields hold the raw text; escaping is the
renderer's job. Times on the media clock are seconds; latencies are milliseconds, RTF is a ratio.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Decision = Literal["listen", "speak"]


@dataclass(frozen=True)
class RunInfo:
    """`run.json`, flattened for display; `clocks` and `placements` are the distinct `clock` and
    `audio_placement` values of the samples."""

    duplexkit_version: str | None
    started_at: str | None
    finished_at: str | None
    command: tuple[str, ...]
    model: str | None
    server_url: str | None
    embedded_server: bool | None
    dataset_source: str | None
    dataset_fingerprint: str | None
    dataset_samples: int | None
    selection: str | None
    pace: str | None
    clocks: tuple[str, ...]
    placements: tuple[str, ...]
    """Where the samples' output was placed on the input timeline (`arrival`, `concatenated`)."""
    fps: float | None
    chunk_ms: float | None
    concurrency: int | None
    keep_audio: bool | None
    model_identities: tuple[str, ...] = ()
    """What exactly served the run (the `id`s of the servers' `model_identity`: a checkpoint's content
    fingerprint, the cascade's LLM and voice); empty where the servers named none."""


@dataclass(frozen=True)
class Coverage:
    """Counts over the samples the folder holds (the same rule as `run.json` `counts`).

    `failure_reasons` maps a failure category (the text of `error` before its first `:`) to its count;
    `recorded` is the `counts` object of `run.json` when it has one, so a disagreement can be shown.
    """

    attempted: int
    published: int
    failed: int
    retried: int
    failure_reasons: Mapping[str, int]
    recorded: Mapping[str, int] | None


@dataclass(frozen=True)
class Distribution:
    """One latency metric from one measurement source over published samples.

    `values` are sorted ascending; `count`, `mean`, `p50`, `p99` follow `duplexkit.bench.aggregate.summarize`
    (nearest rank), so they equal `metrics.json` for the same samples.
    """

    metric: str
    source: str
    values: tuple[float, ...]
    count: int
    mean: float | None
    p50: float | None
    p99: float | None


@dataclass(frozen=True)
class JudgeInfo:
    """Who produced the scores: they are only comparable under the same model, URL and prompt version."""

    kind: str | None
    model: str | None
    url: str | None
    prompt_version: str | None
    prompt_source: str | None
    note: str | None


@dataclass(frozen=True)
class ScoreGroup:
    """A family or task row of `scores/summary.json`: its means (by name, e.g. `mean_content_score`), the
    samples they cover, how many of those failed (`skipped`, counted as 0) and how many the judge could not
    score (`errors`, left out)."""

    name: str
    means: Mapping[str, float | None]
    samples: int | None
    skipped: int | None
    errors: int | None


@dataclass(frozen=True)
class FamilyScores:
    """One section of `scores/summary.json` (a `ReportSpec.sections` key): its overall row and its groups."""

    family: str
    overall: ScoreGroup
    tasks: tuple[ScoreGroup, ...]


@dataclass(frozen=True)
class ScoreSection:
    """How a benchmark's summary section is read and shown: `key` in `summary.json` (whose `by_task` holds
    the groups), the means it reports, the table title and the label of its overall row."""

    key: str
    means: tuple[str, ...]
    title: str
    overall: str
    groups: str = "by_task"
    """The key in the section that holds its groups."""


@dataclass(frozen=True)
class ReportSpec:
    """A benchmark's report section: its score sections, how its means and per-sample scores are labelled
    (`(label, decimals)` / short name), and the name of what its groups are (`task`, `scenario`)."""

    sections: tuple[ScoreSection, ...]
    mean_labels: Mapping[str, tuple[str, int]]
    score_names: Mapping[str, str]
    group_label: str = "task"
    extra: Callable[[ReportData], str] | None = None
    """HTML the benchmark adds after the score tables (e.g. published reference numbers), already escaped;
    given the primary run."""
    only_named_scores: bool = False
    """Show a sample's scores named in `score_names` only (a benchmark that records many sums per sample)."""
    sample_figure: Callable[[SampleReport, float], str] | None = None
    """An extra figure under each sample's timeline (the sample and the timeline's span, in seconds)."""
    audio_file: str = "output.wav"
    """The file in a sample's folder its player plays (FDB v2: `combined.wav`, both speakers)."""


@dataclass(frozen=True)
class ScoreSummary:
    """`scores/summary.json`; `coverage` has total, scored, skipped, errors (and cached) when recorded."""

    judge: JudgeInfo
    complete: bool | None
    coverage: Mapping[str, int]
    families: tuple[FamilyScores, ...]


@dataclass(frozen=True)
class SampleScore:
    """`scores/<split>/<id>.json`: `status` is `scored` or `error`; `scores` by name (e.g. `all_success`)."""

    status: str | None
    scores: Mapping[str, float]
    error: str | None
    details: Mapping[str, Any] = field(default_factory=dict)
    """The judge's per-sample record, raw (untrusted): a benchmark's figure reads what it needs leniently."""


@dataclass(frozen=True)
class Sentence:
    text: str
    start: float
    end: float


@dataclass(frozen=True)
class DecisionMark:
    t: float
    decision: Decision


@dataclass(frozen=True)
class ResponseLatency:
    response_id: str | None
    status: str | None
    source: str | None
    ttft_ms: float | None
    ttfp_ms: float | None
    tpot_ms: float | None
    rtf: float | None


@dataclass(frozen=True)
class AttemptInfo:
    """One attempt of the sample: `error` is None for the attempt that published; `sentences` counts the
    sentences a superseded attempt kept for diagnosis (None when it kept none)."""

    error: str | None
    transport_error: str | None
    sentences: int | None


@dataclass(frozen=True)
class SampleReport:
    """One attempted sample (`records/<split>/<id>.meta.json`, its sentences and its folder `<split>/<id>/`).

    `split` and `id` come from the file's path, not its contents. `sentences` is None when the sample has no
    readable `<id>.json` (it failed, or the file is damaged) and empty when it was published without a word.
    `reminders` are the valid event times as `(label, seconds)`; `timeouts` holds only the bounds that
    expired. `stream_ttft_ms`, `stream_ttfp_ms` and `turns` are the session's, measured by `session_source`.
    `audio` is the POSIX path of `output.wav` relative to the run folder, when the run kept it. `score` is
    the sample's `scores/<split>/<id>.json`, when `duplexkit score` wrote one.
    """

    split: str
    id: str
    task: str | None
    family: str | None
    status: str | None
    error: str | None
    question: str | None
    video_duration: float | None
    reminders: tuple[tuple[str, float], ...]
    clock: str | None
    placement: str | None
    """The sample's `audio_placement`: how its output was placed on the input timeline."""
    input_speech: tuple[tuple[float, float], ...]
    decisions: tuple[DecisionMark, ...]
    sentences: tuple[Sentence, ...] | None
    responses: tuple[ResponseLatency, ...]
    stream_ttft_ms: float | None
    stream_ttfp_ms: float | None
    session_source: str | None
    turns: int | None
    retry_count: int
    timeouts: Mapping[str, float]
    server_errors: tuple[str, ...]
    attempts: tuple[AttemptInfo, ...]
    audio: str | None
    score: SampleScore | None
    meta: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """The whole `<id>.meta.json`, raw (untrusted), for a benchmark's own figure."""
    audio_s: float | None = None
    """How long `audio` plays, from its WAV header when the report was written (`None`: unreadable)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.split, self.id)

    @property
    def published(self) -> bool:
        return self.status == "published"


@dataclass(frozen=True)
class ReportData:
    """One run folder, ready to render. `problems` lists what could not be read, one line each."""

    run_dir: Path
    spec: ReportSpec
    """The report section of the run's benchmark (`run.json` `benchmark`)."""
    run: RunInfo
    coverage: Coverage
    latency: tuple[Distribution, ...]
    scores: ScoreSummary | None
    samples: tuple[SampleReport, ...]
    problems: tuple[str, ...]

    def distribution(self, metric: str) -> tuple[Distribution, ...]:
        """This metric's distributions, one per measurement source (possibly none)."""
        return tuple(d for d in self.latency if d.metric == metric)
